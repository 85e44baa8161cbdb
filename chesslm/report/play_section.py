"""The play section of a run's summary.md, rendered from the records of rule play
(``results/{run}/play/*.json``, named in ``chesslm.play.outputs``): move-matching, free-running
legality and Elo against Stockfish, each saying so where it has not been evaluated. Reads
JSON only: no torch, no chess engine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from chesslm.play.outputs import FILES
from chesslm.report.cells import md_table, num


def _pct(value: Any) -> str:
    return num(value, ".1%")


def _interval(row: dict[str, Any], stat: str, fmt: Any = _pct) -> str:
    if row.get("few_games"):
        return f"{fmt(row.get(stat))} (no interval)"
    return f"{fmt(row.get(stat))} [{fmt(row.get(stat + '_low'))}, {fmt(row.get(stat + '_high'))}]"


def _nll(value: Any) -> str:
    return num(value, ".3f")


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
    match = _read(play_dir / FILES["move_match"])
    if match is None:
        lines += [
            f"No play evaluation yet (`results/{{run}}/play/` has no {FILES['move_match']}).",
            "",
        ]
        return "\n".join(lines)
    lines += match_section(match)
    lines += legality_section(_read(play_dir / FILES["legality"]))
    lines += elo_section(_read(play_dir / FILES["elo"]))
    return "\n".join(lines)


def match_section(match: dict[str, Any]) -> list[str]:
    """The checkpoint, the protocols, and each dataset's move-matching table."""
    model = match["model"]
    lines = [
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
        lines += _match_dataset(name, d, match.get("min_interval_games", "?"))
    return lines


def _match_dataset(name: str, d: dict[str, Any], fewer: Any) -> list[str]:
    state = "complete" if d["complete"] else "stopped by its time budget (partial)"
    lines = [
        f"Dataset `{name}`: {d['games_evaluated']} of {d['validation_games']} validation games"
        f" ({state}), {d['positions']} positions ({d['maia_positions']} under the Maia"
        f" protocol); metadata {d['metadata']}.",
        "",
    ]
    rows = [
        [r["protocol"], r["grouping"], r["group"], r["positions"], r["games"],
         _interval(r, "top1"), _interval(r, "top3"), _interval(r, "nll", _nll)]
        for r in d["table"]
        if r["grouping"] in ("overall", "band", "speed")
    ]  # fmt: skip
    lines += md_table(
        ["protocol", "grouping", "group", "positions", "games", "top-1", "top-3", "NLL/move"],
        rows,
    )
    if any(r.get("few_games") for r in d["table"]):
        lines += [f"No interval: fewer than {fewer} games (`few_games` in the CSV).", ""]
    return lines + [f"Per 100-Elo bin: `play/{FILES['move_match_table']}` and the figure.", ""]


def legality_section(legality: dict[str, Any] | None) -> list[str]:
    """Free-running legality per mode (greedy, temperature 1)."""
    lines = ["### Free-running legality", ""]
    if not legality:
        return lines + ["Not evaluated yet.", ""]
    lines += [legality.get("protocol", ""), ""]
    rows = [
        [mode, r["games"], r["proposals"], _pct(r["illegal_share"]),
         _pct(r["games_with_illegal"]), num(r["first_illegal_ply_median"], ".0f"),
         num(r["mean_game_plies"], ".1f"), "yes" if r["complete"] else "no (budget)"]
        for mode, r in legality["modes"].items()
    ]  # fmt: skip
    return lines + md_table(
        ["mode", "games", "proposals", "illegal share", "games with an illegal move",
         "median first illegal ply", "mean plies", "complete"],
        rows,
    )  # fmt: skip


def elo_section(result: dict[str, Any] | None) -> list[str]:
    """The Elo estimate, whether it is reproducible, and the score per anchor."""
    lines = ["### Elo against Stockfish", ""]
    if not (result and result["anchors"]):
        return lines + [
            "No game against Stockfish (play.elo.games_per_anchor: 0, or not run yet).",
            "",
        ]
    fit = result["fit"]
    bounds = f"{num(fit['low'], '.0f')} to {num(fit['high'], '.0f')}"
    estimate = (
        f"**{fit['elo']:.0f}** (95 % interval {bounds})"
        if fit["elo"] is not None
        else f"not finite (score {fit['score']:.2f}; bounds {bounds})"
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
    return lines + md_table(
        ["anchor", "UCI_Elo used", "games", "wins", "draws", "losses", "score"], rows
    )


def _reproducibility(result: dict[str, Any]) -> str:
    """Whether the Elo figure is reproducible (files from before the key: unknown)."""
    if "reproducible" not in result:
        return f"Reproducibility: not recorded (an {FILES['elo']} from before the key)."
    word = "Reproducible" if result["reproducible"] else "**Not reproducible**"
    return f"{word}: {result.get('reproducibility', '')}."
