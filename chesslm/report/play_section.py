"""The play section of a run's summary.md, rendered from the records of rule play
(``results/{run}/play/*.json``, named in ``chesslm.play.outputs``): move-matching, free-running
legality and Elo on the ladder, each saying so where it has not been evaluated. Reads
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
    lines += counterfactual_section(_read(play_dir / FILES["counterfactual"]))
    return "\n".join(lines)


def counterfactual_section(result: dict[str, Any] | None) -> list[str]:
    """A conditioned model's predictions at its games' true ratings and at counterfactual
    ones (overall, per protocol); one line for a model without conditioning."""
    lines = ["### Counterfactual ratings", ""]
    if result is None:
        return lines + ["Not evaluated (no counterfactual record; not run yet).", ""]
    if not result.get("conditioned"):
        return lines + [f"{result.get('note', 'not conditioned')}.", ""]
    lines += [f"{result['definition']}.", ""]
    for name, d in result["datasets"].items():
        state = "" if d["complete"] else " (stopped by its time budget: partial)"
        lines += [f"Dataset `{name}`: {d['selection']}, {d['positions']} positions{state}.", ""]
    rows = [
        [r["dataset"], r["protocol"], r["setting"], r["rating_bin"], r["positions"],
         _pct(r["top1"]), _pct(r["top3"]), _nll(r["nll"]), _pct(r["argmax_changed"]),
         _nll(r["tv"]), _nll(r["kl"])]
        for r in _csv_rows(result) if r["grouping"] == "overall"
    ]  # fmt: skip
    table = md_table(["dataset", "protocol", "ratings", "bin", "positions", "top-1", "top-3",
                      "NLL", "argmax changed", "TV", "KL"], rows)  # fmt: skip
    return lines + table + [f"Per band of the mover's Elo: `play/{FILES['counterfactual_table']}`"
                            " and the figure.", ""]  # fmt: skip


def _csv_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The overall rows the record keeps for the summary (``summary_rows``)."""
    return result.get("summary_rows", [])


def match_section(match: dict[str, Any]) -> list[str]:
    """The checkpoint, the protocols, and each dataset's move-matching table."""
    model = match["model"]
    lines = [
        f"Checkpoint `{Path(model['checkpoint']).name}` (step {model['step']}, preset"
        f" {model['preset']}). Validation split only. {match['definition']}.",
        "",
        "### Move-matching",
        "",
        "Protocols: "
        + "; ".join(f"**{k}**: {v}" for k, v in match["protocols"].items())
        + f". Intervals: {match['interval']}.",
        "",
    ]
    for name, d in match["datasets"].items():
        lines += _match_dataset(name, d, match.get("min_interval_games", "?"))
    return lines


def _match_dataset(name: str, d: dict[str, Any], fewer: Any) -> list[str]:
    state = "complete" if d["complete"] else "stopped by its time budget (partial)"
    # a record written before protocols were selectable has maia_positions instead
    per = d.get("protocol_positions") or {"maia": d.get("maia_positions")}
    kept = ", ".join(f"{n} under {k}" for k, n in per.items())
    lines = [
        f"Dataset `{name}`: {d['games_evaluated']} of {d['validation_games']} validation games"
        f" ({state}{_selection(d)}), {d['positions']} positions ({kept}); metadata"
        f" {d['metadata']}.",
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


def _selection(d: dict[str, Any]) -> str:
    """Why fewer games than the split were chosen, where so (the evaluator's own words)."""
    if d.get("games_selected", d["validation_games"]) < d["validation_games"]:
        return f"; selected: {d['selection']}"
    return ""


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
    """The ladder (anchors, ratings, intervals, games), the model's scores against it, its
    Elo on the ladder's scale, and what of it is reproducible."""
    lines = ["### Elo against Stockfish and the ladder's anchors", ""]
    if not (result and result["anchors"] and result.get("ladder")):
        return lines + [
            "No game against the ladder's anchors (play.elo.games_per_anchor: 0, or not run yet).",
            "",
        ]
    fit, ladder = result["fit"], result["ladder"]
    state = "" if result["complete"] else " (stopped by its time budget: partial)"
    lines += [
        f"Estimate {_estimate(fit)} over {fit['games']} games (score {_pct(fit['score'])})"
        f"{state}: {result['note']}. {result['protocol']}. Fit: {fit['method']}.",
        "",
        f"Ladder `{ladder['file']}` (key `{ladder['key'][:12]}`): {ladder['games']} games among"
        f" its anchors on {ladder['engine'].get('id_name', '?')}; {ladder.get('method') or '?'}.",
        "",
        _reproducibility(result),
        "",
    ]
    rows = [
        [a["anchor"], a["kind"], _rating(a), a["ladder_games"], a["games"], a["wins"],
         a["draws"], a["losses"], _pct(a["score"])]
        for a in result["anchors"]
    ]  # fmt: skip
    return lines + md_table(
        ["anchor", "kind", "rating (95 %)", "ladder games", "model's games", "wins", "draws",
         "losses", "model's score"],
        rows,
    )  # fmt: skip


def _estimate(fit: dict[str, Any]) -> str:
    """The model's Elo and its intervals, or the bound it is known by."""
    if fit["elo"] is None:
        return f"not finite: {fit['text']}"
    total = ""
    if fit.get("low_total") is not None and fit.get("high_total") is not None:
        total = f"; {fit['low_total']:.0f} to {fit['high_total']:.0f} with the ladder's own"
        total += " uncertainty"
    return f"**{fit['elo']:.0f}** (95 % interval {fit['low']:.0f} to {fit['high']:.0f}{total})"


def _rating(anchor: dict[str, Any]) -> str:
    if anchor["fixed"]:
        return f"{anchor['rating']:.0f} (fixed: UCI_Elo)"
    return f"{anchor['rating']:.0f} [{anchor['rating_low']:.0f}, {anchor['rating_high']:.0f}]"


def _reproducibility(result: dict[str, Any]) -> str:
    """Which of the Elo's games replay (files from before the key: unknown)."""
    if "reproducible" not in result:
        return f"Reproducibility: not recorded (an {FILES['elo']} from before the key)."
    word = "Reproducible" if result["reproducible"] else "**Not reproducible** in part"
    return f"{word}: {result.get('reproducibility', '')}."
