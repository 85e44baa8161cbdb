"""The play section of a run's summary.md, rendered from ``results/{run}/play/*.json``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PCT = "{:.1%}"


def _pct(value: Any) -> str:
    return "-" if value is None else PCT.format(value)


def _num(value: Any, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def _interval(row: dict[str, Any], stat: str, fmt: Any = _pct) -> str:
    if row.get("few_games"):
        return f"{fmt(row.get(stat))} (no interval)"
    return f"{fmt(row.get(stat))} [{fmt(row.get(stat + '_low'))}, {fmt(row.get(stat + '_high'))}]"


def _reproducibility(result: dict[str, Any]) -> str:
    """Whether the Elo figure is reproducible (files from before the key: unknown)."""
    if "reproducible" not in result:
        return "Reproducibility: not recorded (an elo.json from before the key)."
    word = "Reproducible" if result["reproducible"] else "**Not reproducible**"
    return f"{word}: {result.get('reproducibility', '')}."


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines


def _read(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def markdown_section(play_dir: Path | str) -> str:
    """Markdown for summary.md: move-matching, free-running legality and Elo (says so where a
    part has not been evaluated)."""
    play_dir = Path(play_dir)
    lines = ["## Play evaluation", ""]
    match = _read(play_dir / "move-match.json")
    if match is None:
        lines += ["No play evaluation yet (`results/{run}/play/` has no move-match.json).", ""]
        return "\n".join(lines)
    model = match["model"]
    lines += [
        f"Checkpoint `{Path(model['checkpoint']).name}` (step {model['step']}, preset"
        f" {model['preset']}). Validation split only. {match['definition']}.",
        "",
        "### Move-matching",
        "",
        f"Protocols: **maia**: {match['protocols']['maia']}; **all**: every position."
        f" Intervals: {match['interval']}.",
        "",
    ]
    for name, d in match["datasets"].items():
        state = "complete" if d["complete"] else "stopped by its time budget (partial)"
        lines += [
            f"Dataset `{name}`: {d['games_evaluated']} of {d['validation_games']} validation games"
            f" ({state}), {d['positions']} positions ({d['maia_positions']} under the Maia"
            f" protocol); metadata {d['metadata']}.",
            "",
        ]
        rows = [
            [r["protocol"], r["grouping"], r["group"], r["positions"], r["games"],
             _interval(r, "top1"), _interval(r, "top3"), _interval(r, "nll", _num)]
            for r in d["table"]
            if r["grouping"] in ("overall", "band", "speed")
        ]  # fmt: skip
        lines += _table(
            ["protocol", "grouping", "group", "positions", "games", "top-1", "top-3", "NLL/move"],
            rows,
        )
        lines += [""]
        if any(r.get("few_games") for r in d["table"]):
            fewer = match.get("min_interval_games", "?")
            lines += [f"No interval: fewer than {fewer} games (`few_games` in the CSV).", ""]
        lines += ["Per 100-Elo bin: `play/move-match.csv` and the figure.", ""]
    legality = _read(play_dir / "legality.json")
    lines += ["### Free-running legality", ""]
    if legality:
        lines += [legality.get("protocol", ""), ""]
        rows = [
            [mode, r["games"], r["proposals"], _pct(r["illegal_share"]),
             _pct(r["games_with_illegal"]), _num(r["first_illegal_ply_median"], ".0f"),
             _num(r["mean_game_plies"], ".1f"), "yes" if r["complete"] else "no (budget)"]
            for mode, r in legality["modes"].items()
        ]  # fmt: skip
        lines += _table(
            ["mode", "games", "proposals", "illegal share", "games with an illegal move",
             "median first illegal ply", "mean plies", "complete"],
            rows,
        )  # fmt: skip
        lines += [""]
    else:
        lines += ["Not evaluated yet.", ""]
    result = _read(play_dir / "elo.json")
    lines += ["### Elo against Stockfish", ""]
    if result and result["anchors"]:
        fit = result["fit"]
        estimate = (
            f"**{fit['elo']:.0f}** (95 % interval {_num(fit['low'], '.0f')} to"
            f" {_num(fit['high'], '.0f')})"
            if fit["elo"] is not None
            else f"not finite (score {fit['score']:.2f}; bounds {_num(fit['low'], '.0f')} to"
            f" {_num(fit['high'], '.0f')})"
        )
        lines += [
            f"Estimate {estimate} over {fit['games']} games: {result['note']}."
            f" {result['protocol']}; engine {result['engine'].get('engine', '?')},"
            f" limit {result['limit']}.",
            "",
            _reproducibility(result),
            "",
        ]
        rows = [
            [a["anchor"], a["anchor_effective"], a["games"], a["wins"], a["draws"], a["losses"],
             _pct(a["score"])]
            for a in result["anchors"]
        ]  # fmt: skip
        lines += _table(
            ["anchor", "UCI_Elo used", "games", "wins", "draws", "losses", "score"], rows
        )
        lines += [""]
    else:
        lines += ["No game against Stockfish (play.elo.games_per_anchor: 0, or not run yet).", ""]
    return "\n".join(lines)
