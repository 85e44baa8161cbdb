"""The play section of a run's summary.md, rendered from the records of rule play
(``results/{run}/play/*.json``, named in ``chesslm.record.play_files``, read by
``chesslm.record.play_records`` as the model card reads them): move-matching, free-running legality
and Elo on the ladder, each saying so where it has not been evaluated; and the answers
summary.md opens with (``answers``), in the same cells. A record that is there but cannot be
trusted (unreadable, unsealed, edited) is refused, a ``RecordError`` in one line naming the file
and the command that rebuilds it, never reported as absent. Reads JSON only: no torch, no chess
engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chesslm.match import metrics
from chesslm.record.counterfactual import Counterfactual, GapSweep
from chesslm.record.elo import NOT_PLAYED, Elo
from chesslm.record.legality import Legality
from chesslm.record.move_match import (
    MatchDataset,
    MatchRow,
    MoveMatch,
    OutcomeScores,
    ThinkMeasure,
    ThinkScores,
)
from chesslm.record.play_files import FILES, OUTCOME
from chesslm.record.play_records import READERS
from chesslm.report.cells import md_table, num


def _pct(value: Any) -> str:
    return num(value, ".1%")


def _interval(row: MatchRow, stat: str, fmt: Any = None) -> str:
    fmt = fmt or _format(stat)
    value, low, high = row.interval(stat)
    if row.few_games:
        return f"{fmt(value)} (no interval)"
    return f"{fmt(value)} [{fmt(low)}, {fmt(high)}]"


def _nll(value: Any) -> str:
    return num(value, ".3f")


def _format(stat: str) -> Any:
    """How a metric of the table (``chesslm.match.metrics``) is shown: shares in percent."""
    return _pct if metrics.by_name(stat).kind == "share" else _nll


def read_records(play_dir: Path) -> dict[str, Any]:
    """Each play record by its name in ``READERS``: the record, or ``None`` where its
    file is absent.

    :raises RecordError: for a file that is there but cannot be trusted."""
    return {name: read(play_dir / FILES[name]) for name, read in READERS.items()}


def markdown_section(play_dir: Path | str) -> str:
    """Markdown for summary.md: move-matching, free-running legality and Elo (says so where a
    part has not been evaluated)."""
    found = read_records(Path(play_dir))
    lines = ["## Play evaluation", ""]
    match = found["move_match"]
    if match is None:
        lines += [f"No play evaluation yet (`{play_dir}/` has no {FILES['move_match']}).", ""]
        return "\n".join(lines)
    lines += match_section(match)
    lines += legality_section(found["legality"])
    lines += elo_section(found["elo"])
    lines += counterfactual_section(found["counterfactual"])
    return "\n".join(lines)


# --- the answers summary.md opens with: the same records, the same cells as below ---------


def answers(play_dir: Path | None) -> list[str]:
    """List items: top-1 under the headline protocol per dataset, the Elo and free-running
    legality, each with its interval or why it has none, and saying so where it is not
    evaluated yet or partial (``play_dir`` ``None``: the run has not played)."""
    found = read_records(play_dir) if play_dir is not None else dict.fromkeys(READERS)
    parts = [
        ("move_match", "Top-1 agreement with the move played [95 % interval]", top1_answer),
        (
            "elo",
            "Engine Elo against the ladder's anchors (not a human rating)",
            Elo.estimate_line,
        ),
        ("legality", "Free-running legality (self-play, no legality mask)", legality_answer),
    ]
    out = []
    for name, title, answer in parts:
        record = found[name]
        if record is None:
            said = f"not evaluated yet (no `play/{FILES[name]}`)"
        else:
            said = answer(record)
        out.append(f"- {title}: {said}")
    return out


def top1_answer(match: MoveMatch) -> str:
    """Each dataset's overall top-1 under the first protocol (the headline), in the table's
    cell below, with its positions and games."""
    headline = next(iter(match.protocols), "?")
    fewer = match.min_interval_games or "?"
    said = [_top1(name, d, headline, fewer) for name, d in match.datasets.items()]
    return "; ".join(said) or "no dataset"


def _top1(name: str, d: MatchDataset, protocol: str, fewer: Any) -> str:
    overall = [r for r in d.table if r.grouping == "overall"]
    row = next((r for r in overall if r.protocol == protocol), None)
    games = f"{d.games_evaluated} of {d.validation_games} validation games scored"
    games += "" if d.complete else " when its time budget stopped it (partial)"
    if row is None:  # never another protocol's figure in the headline's place
        said = f"`{name}` no position under `{protocol}`, {games}"
        return said + "".join(
            f" (under `{r.protocol}`: {_top1_cell(r, fewer)}, {r.positions} positions)"
            for r in overall[:1]
        )
    said = f"`{name}` {_top1_cell(row, fewer)}, {row.positions} positions under `{protocol}`"
    return said + _rests_on(row, overall, fewer) + f", {games}"


# the headline rests on "far fewer" games than another protocol's below this share of them
FAR_FEWER = 0.5


def _rests_on(row: MatchRow, overall: list[MatchRow], fewer: Any) -> str:
    """When the headline row has no interval (too few games) or far fewer games than another
    protocol's, how much it rests on and the protocol's figure with the most games (with its
    interval) beside it: the first answer never rests silently on a handful of games."""
    others = [r for r in overall if r.protocol != row.protocol and r.games > row.games]
    if not others:
        return " (more games for an interval: `play.match.games`)" if row.few_games else ""
    best = max(others, key=lambda r: (not r.few_games, r.games))
    if not row.few_games and row.games >= FAR_FEWER * best.games:
        return ""
    reason = "too few for an interval" if row.few_games else "far fewer"
    return (
        f" (only {_games(row.games)}, {reason}, against {best.games} under `{best.protocol}`;"
        f" under `{best.protocol}`: {_top1_cell(best, fewer)}, {best.positions} positions;"
        " config/README.md, `match.protocols`, says how to choose)"
    )


def _top1_cell(row: MatchRow, fewer: Any) -> str:
    """The table's top-1 cell, and why it has no interval where it has none."""
    why = f" ({_games(row.games)}: fewer than {fewer})" if row.few_games else ""
    return f"**{_interval(row, 'top1')}**{why}"


def _games(n: int) -> str:
    return f"{n} game" if n == 1 else f"{n} games"


def legality_answer(legality: Legality) -> str:
    """Each mode's share of illegal proposals, in the table's cell below."""
    said = [
        f"`{mode}` **{_pct(r.illegal_share)}** of {r.proposals} proposals illegal"
        f" ({_games(r.games)}{'' if r.complete else ', stopped by its time budget: partial'})"
        for mode, r in legality.modes.items()
    ]
    return "; ".join(said) or "no mode played"


def counterfactual_section(result: Counterfactual | None) -> list[str]:
    """A conditioned model's predictions at its games' true ratings and at counterfactual
    ones (overall, per protocol); one line for a model without conditioning."""
    lines = ["### Counterfactual ratings", ""]
    if result is None:
        return lines + ["Not evaluated (no counterfactual record; not run yet).", ""]
    if not result.conditioned:
        return lines + [f"{result.note}.", ""]
    lines += [f"{result.definition}.", ""]
    for name, d in result.datasets.items():
        state = "" if d.complete else " (stopped by its time budget: partial)"
        lines += [f"Dataset `{name}`: {d.selection}, {d.positions} positions{state}.", ""]
    head = bool(result.outcome_definition)  # a model with the outcome head: its columns
    rows = [
        [r.dataset, r.protocol, r.setting, r.rating_bin, r.positions,
         *(_format(m.name)(getattr(r, m.name)) for m in metrics.METRICS),
         _pct(r.argmax_changed), _nll(r.tv), _nll(r.kl),
         *([_pct(r.p_win), _pct(r.p_draw), _pct(r.p_loss), _nll(r.expected_score),
            _nll(r.elo_expectation)] if head else [])]
        for r in result.summary_rows if r.grouping == "overall"
    ]  # fmt: skip
    table = md_table(["dataset", "protocol", "ratings", "bin", "positions",
                      *(m.label for m in metrics.METRICS), "argmax changed", "TV", "KL",
                      *(["P(win)", "P(draw)", "P(loss)", "score", "Elo expectation"] if head
                        else [])],
                     rows)  # fmt: skip
    said = [f"Outcome columns: {result.outcome_definition}.", ""] if head else []
    return lines + table + said + [
        f"Per band of the mover's Elo: `play/{FILES['counterfactual_table']}` and the figure.", ""
    ] + gap_section(result.gap_sweep)  # fmt: skip


def gap_section(sweep: GapSweep | None) -> list[str]:
    """The rating-gap sweep of a model with the outcome head (none without): White's
    predicted result by the gap, against the Elo expectation."""
    if sweep is None:
        return []
    rows = [
        [r.dataset, r.protocol, f"{r.gap:+d}", f"{r.white_elo} / {r.black_elo}", r.positions,
         _pct(r.white_win), _pct(r.draw), _pct(r.black_win),
         _nll(r.white_score) + ("" if r.white_score_low is None else
                                f" [{_nll(r.white_score_low)}, {_nll(r.white_score_high)}]"),
         _nll(r.elo_expectation)]
        for r in sweep.rows
    ]  # fmt: skip
    header = ["dataset", "protocol", "gap", "White / Black", "positions", "White wins", "draw",
              "Black wins", "White's score [95 %]", "Elo expectation"]  # fmt: skip
    return [f"Rating-gap sweep around {sweep.centre} (White's chances): {sweep.definition}.", "",
            *md_table(header, rows)]  # fmt: skip


def match_section(match: MoveMatch) -> list[str]:
    """The checkpoint, the protocols, and each dataset's move-matching table."""
    model = match.model
    lines = [
        f"Checkpoint `{Path(model.checkpoint).name}` (step {model.step}, preset"
        f" {model.preset}). Validation split only. {match.definition}.",
        "",
        "### Move-matching",
        "",
        "Protocols: "
        + "; ".join(f"**{k}**: {v}" for k, v in match.protocols.items())
        + f". Intervals: {match.interval}.",
        "",
    ]
    for name, d in match.datasets.items():
        lines += _match_dataset(name, d, match.min_interval_games or "?")
    return lines + outcome_section(match) + think_time_section(match)


OUTCOME_PREDICTORS = (("model", "outcome head"), ("frequency", "result frequencies"),
                      ("elo", "Elo expectation"))  # fmt: skip


def _scored(scores: OutcomeScores, stat: str, few: bool, fmt: Any) -> str:
    value = getattr(scores, stat)
    if few:
        return f"{fmt(value)} (no interval)"
    low, high = getattr(scores, f"{stat}_low"), getattr(scores, f"{stat}_high")
    return f"{fmt(value)} [{fmt(low)}, {fmt(high)}]"


def outcome_section(match: MoveMatch) -> list[str]:
    """An outcome checkpoint's overall row per dataset: the head against both baselines
    (nothing for a checkpoint without the head)."""
    measured = {n: d.outcome for n, d in match.datasets.items() if d.outcome is not None}
    if not measured:
        return []
    lines = ["### Outcome head", "", f"{match.outcome_definition or ''}.", ""]
    rows = []
    for name, o in measured.items():
        row = o.overall
        if row is None:
            continue
        for key, label in OUTCOME_PREDICTORS:
            sc = row.scores[key]
            rows.append([name, row.protocol, label, row.positions, row.games,
                         _scored(sc, "nll", row.few_games, _nll),
                         _scored(sc, "brier", row.few_games, _nll),
                         _scored(sc, "accuracy", row.few_games, _pct)])  # fmt: skip
    lines += md_table(["dataset", "protocol", "predictor", "positions", "games", "NLL",
                       "Brier", "accuracy"], rows)  # fmt: skip
    sources = "; ".join(f"`{n}`: {o.baseline_source} split, draw rate {o.draw_rate:.1%}"
                        for n, o in measured.items())  # fmt: skip
    where = f"`play/{FILES['move_match']}` (`outcome`)"
    drawn = ", ".join(f"`play/{out.file}`" for out in OUTCOME)  # rule outcome_figures' files
    return lines + [f"Baselines fitted on: {sources}. By rating band, ply bucket and the"
                    f" calibration table: {where}; as a table and figures: {drawn}.",
                    ""]  # fmt: skip


THINK_PREDICTORS = (("model", "think-time head"), ("median_time", "median time (train)"),
                    ("clock_rule", "clock rule"),
                    ("time_table", "time table: class x 10 plies (train)"))  # fmt: skip


def think_time_section(match: MoveMatch) -> list[str]:
    """A think-time checkpoint's table per dataset: the head against its baselines, overall,
    by rating band, time-control class and ply bucket, then Pearson's r within each class of
    enough moves (nothing for a checkpoint without the head)."""
    measured = {n: d.think_time for n, d in match.datasets.items() if d.think_time is not None}
    if not measured:
        return []
    lines = ["### Think-time head", "", f"{match.think_time_definition or ''}.", ""]
    rows = []
    for name, t in measured.items():
        for row in t.table:
            for key, label in THINK_PREDICTORS:
                if key not in row.scores:  # a record from before this baseline
                    continue
                cells = [_think_scored(row.scores[key], m, row.few_games) for m in THINK_METRICS]
                head = [name, row.protocol, row.grouping, row.group, label]
                rows.append([*head, row.positions, row.games, *cells])
    header = ["dataset", "protocol", "grouping", "group", "predictor", "positions", "games"]
    lines += md_table([*header, "NLL", "MAE ln(1+s)", "Pearson r", "Spearman rho"], rows)
    fits = "; ".join(f"`{n}`: {t.train_targets} train targets, clock rule share"
                     f" {t.clock_rule_share:.3f}, {t.positions} positions of {t.games} games"
                     for n, t in measured.items())  # fmt: skip
    lines += [f"Baselines fitted on the train split: {fits}. In"
              f" `play/{FILES['move_match']}` (`think_time`).", ""]  # fmt: skip
    return lines + _within_class(measured)


def _within_class(measured: dict[str, ThinkMeasure]) -> list[str]:
    """Pearson's r of each predictor within each time-control class of at least the measure's
    floor of moves, under its first protocol: what the head adds beyond the time control."""
    rows = []
    floors = {t.class_floor for t in measured.values() if t.class_floor is not None}
    for name, t in measured.items():
        if t.class_floor is None:  # a record from before the floor
            continue
        first = t.table[0].protocol if t.table else None
        for row in t.table:
            if (row.protocol, row.grouping) == (first, "speed") and row.positions >= t.class_floor:
                r = [_think_scored(row.scores[k], "pearson", row.few_games) if k in row.scores
                     else "-" for k, _ in THINK_PREDICTORS]  # fmt: skip
                rows.append([name, row.protocol, row.group, row.positions, *r])
    if not floors:
        return []
    floor = " / ".join(f"{f:,}" for f in sorted(floors))
    lines = [f"Pearson r of ln(1 + s) within each time-control class of at least {floor} timed"
             " moves (fewer say little):", ""]  # fmt: skip
    if not rows:
        return [*lines, f"No time-control class has {floor} timed moves.", ""]
    header = ["dataset", "protocol", "class", "positions", *(label for _, label in
                                                             THINK_PREDICTORS)]  # fmt: skip
    return lines + md_table(header, rows)


THINK_METRICS = ("nll", "mae_log", "pearson", "spearman")


def _think_scored(scores: ThinkScores, stat: str, few: bool) -> str:
    return _scored(scores, stat, few, _nll) if getattr(scores, stat) is not None else "-"


def _match_dataset(name: str, d: MatchDataset, fewer: Any) -> list[str]:
    state = "complete" if d.complete else "stopped by its time budget (partial)"
    kept = ", ".join(f"{n} under {k}" for k, n in d.per_protocol.items())
    lines = [
        f"Dataset `{name}`: {d.games_evaluated} of {d.validation_games} validation games"
        f" ({state}{_selection(d)}), {d.positions} positions ({kept}); metadata"
        f" {d.metadata}.",
        "",
    ]
    rows = [
        [r.protocol, r.grouping, r.group, r.positions, r.games,
         *(_interval(r, m.name) for m in metrics.METRICS)]
        for r in d.table
        if r.grouping in ("overall", "band", "speed")
    ]  # fmt: skip
    lines += md_table(
        [
            "protocol",
            "grouping",
            "group",
            "positions",
            "games",
            *(m.label for m in metrics.METRICS),
        ],
        rows,
    )
    if any(r.few_games for r in d.table):
        lines += [f"No interval: fewer than {fewer} games (`few_games` in the CSV).", ""]
    return lines + [f"Per 100-Elo bin: `play/{FILES['move_match_table']}` and the figure.", ""]


def _selection(d: MatchDataset) -> str:
    """Why fewer games than the split were chosen, where so (the evaluator's own words)."""
    selected = d.validation_games if d.games_selected is None else d.games_selected
    return f"; selected: {d.selection}" if selected < d.validation_games else ""


def legality_section(legality: Legality | None) -> list[str]:
    """Free-running legality per mode (greedy, temperature 1)."""
    lines = ["### Free-running legality", ""]
    if not legality:
        return lines + ["Not evaluated yet.", ""]
    lines += [legality.protocol, ""]
    rows = [
        [mode, r.games, r.proposals, _pct(r.illegal_share), _pct(r.games_with_illegal),
         num(r.first_illegal_ply_median, ".0f"), num(r.mean_game_plies, ".1f"),
         "yes" if r.complete else "no (budget)"]
        for mode, r in legality.modes.items()
    ]  # fmt: skip
    return lines + md_table(
        ["mode", "games", "proposals", "illegal share", "games with an illegal move",
         "median first illegal ply", "mean plies", "complete"],
        rows,
    )  # fmt: skip


def elo_section(result: Elo | None) -> list[str]:
    """The ladder (anchors, ratings, intervals, games), the model's scores against it, its
    Elo on the ladder's scale (``Elo.sentence``, the model card's too), and what of it
    is reproducible."""
    lines = ["### Elo against Stockfish and the ladder's anchors", ""]
    if result is None or not result.played:
        return lines + [NOT_PLAYED, ""]
    lines += [result.sentence(), "", result.ladder_sentence(), "",
              result.reproducibility_sentence(), ""]  # fmt: skip
    rows = [
        [a.anchor, a.kind, a.rating_text(), a.ladder_games, a.games, a.wins, a.draws,
         a.losses, _pct(a.score)]
        for a in result.anchors
    ]  # fmt: skip
    return lines + md_table(
        ["anchor", "kind", "rating (95 %)", "ladder games", "model's games", "wins", "draws",
         "losses", "model's score"],
        rows,
    )  # fmt: skip
