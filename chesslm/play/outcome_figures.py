"""The outcome head's report items (rule ``outcome_figures``, an outcome run's only), made from
move-match.json's ``outcome`` entries (``chesslm.match.outcome``) and nothing else:

* ``outcome.csv``: one row per dataset, protocol, scope (``overall``, ``band``, ``ply``:
  the record's groupings; ``calibration``: a bin of predicted win probability), group,
  predictor (``model``, or the baselines ``frequency`` and ``elo``) and metric, with its 95 %
  interval over games (empty where the group has too few games);
* ``outcome-calibration.svg``: per dataset, the observed win frequency against the mean
  predicted win probability in each of the ten bins, with its interval, and the diagonal;
* ``outcome-games.svg``: per dataset, White's predicted win probability at each ply of the
  few real games the record keeps, each game's result marked after its last move.

No torch (the rule's job is a few seconds of reading and drawing).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from chesslm import files
from chesslm.figures import STYLES, notice_figure, save_svg
from chesslm.match.outcome import METRICS
from chesslm.record.move_match import CalibrationBin, MoveMatch, OutcomeMeasure, read_move_match
from chesslm.record.play_files import OUTCOME

COLUMNS = ("dataset", "protocol", "scope", "group", "predictor", "metric", "value", "low",
           "high", "positions", "games", "few_games", "baseline_source")  # fmt: skip
COLOURS = {"model": "tab:blue", "elo": "tab:orange"}
WHITE_SCORE = {"1-0": 1.0, "1/2-1/2": 0.5, "0-1": 0.0}  # where a game's result is marked
logger = logging.getLogger(__name__)
NO_HEAD = "The record holds no outcome head's measure (a checkpoint without the head)."


def measures(match: MoveMatch) -> dict[str, OutcomeMeasure]:
    """Each dataset's outcome measure, in the record's order (datasets without one left out)."""
    return {n: d.outcome for n, d in match.datasets.items() if d.outcome is not None}


def table(match: MoveMatch) -> pd.DataFrame:
    """The rows of ``outcome.csv`` (COLUMNS): every metric of every group and predictor, then
    each calibration bin's predicted and observed win frequency."""
    rows: list[dict[str, Any]] = []
    for name, o in measures(match).items():
        common = {"dataset": name, "baseline_source": o.baseline_source}
        for r in o.table:
            for predictor, s in r.scores.items():
                for metric in METRICS:
                    rows.append({**common, "protocol": r.protocol, "scope": r.grouping,
                                 "group": r.group, "predictor": predictor, "metric": metric,
                                 "value": getattr(s, metric), "low": getattr(s, f"{metric}_low"),
                                 "high": getattr(s, f"{metric}_high"), "positions": r.positions,
                                 "games": r.games, "few_games": r.few_games})  # fmt: skip
        for b in o.calibration:
            head = {**common, "protocol": b.protocol, "scope": "calibration", "group": b.bin,
                    "predictor": b.predictor, "positions": b.positions, "games": b.games,
                    "few_games": False}  # fmt: skip
            rows.append({**head, "metric": "predicted_win", "value": b.predicted})
            rows.append({**head, "metric": "observed_win", "value": b.observed,
                         "low": b.observed_low, "high": b.observed_high})  # fmt: skip
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _panels(count: int, height: float) -> tuple[Figure, list[Any]]:
    """A figure of ``count`` panels, one above the other (one per dataset)."""
    fig = Figure(figsize=(8, height * count), layout="constrained")
    return fig, list(np.atleast_1d(fig.subplots(count, 1, squeeze=False)[:, 0]))


def calibration_figure(match: MoveMatch) -> Figure:
    """Observed win frequency against the mean predicted win probability per bin, the head and
    the Elo baseline, one marker style per protocol, bars: 95 % intervals over games."""
    title = "Outcome head calibration: predicted win probability of the side to move"
    measured = {n: o for n, o in measures(match).items() if o.calibration}
    if not measured:
        return notice_figure(title, NO_HEAD if not measures(match) else "No position scored.")
    fig, axes = _panels(len(measured), 4.5)
    for ax, (name, o) in zip(axes, measured.items(), strict=True):
        ax.plot([0, 1], [0, 1], color="grey", linewidth=1, label="perfect calibration")
        protocols = list(dict.fromkeys(b.protocol for b in o.calibration))
        for i, protocol in enumerate(protocols):
            for predictor, colour in COLOURS.items():
                bins = [
                    b for b in o.calibration if (b.protocol, b.predictor) == (protocol, predictor)
                ]
                _calibration_series(ax, bins, colour, STYLES[i % len(STYLES)],
                                    f"{predictor} ({protocol})")  # fmt: skip
        ax.set(title=f"{title}\n{name}", xlabel="mean predicted win probability (10 bins)",
               ylabel="observed win frequency", xlim=(0, 1), ylim=(-0.02, 1.02))  # fmt: skip
        ax.set_aspect("equal")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))
    return fig


def _calibration_series(ax: Any, bins: list[CalibrationBin], colour: str, style: str,
                        label: str) -> None:  # fmt: skip
    if not bins:
        return
    x = np.array([b.predicted for b in bins])
    y = np.array([b.observed for b in bins])
    low = np.array([np.nan if b.observed_low is None else b.observed_low for b in bins])
    high = np.array([np.nan if b.observed_high is None else b.observed_high for b in bins])
    ax.errorbar(x, y, yerr=[y - low, high - y], fmt="o" + style, color=colour, capsize=2,
                markersize=4, alpha=0.8, label=label)  # fmt: skip


def games_figure(match: MoveMatch) -> Figure:
    """White's predicted win probability at each ply of each game the record keeps, its result
    marked after the last move (White's score: 1, 1/2 or 0)."""
    title = "White's predicted win probability along real validation games"
    measured = {n: o for n, o in measures(match).items() if o.games}
    if not measured:
        return notice_figure(title, NO_HEAD if not measures(match) else "No game with a result.")
    fig, axes = _panels(len(measured), 3.8)
    for ax, (name, o) in zip(axes, measured.items(), strict=True):
        for i, g in enumerate(o.games):
            colour = f"C{i}"
            ax.plot(g.ply, g.white_win, "-", color=colour,
                    label=f"validation game {g.game}: {g.result}, {len(g.ply)} plies")  # fmt: skip
            end = (g.ply[-1] + 1) if g.ply else 0
            ax.plot([end], [WHITE_SCORE[g.result]], "*", color=colour, markersize=11)
        ax.plot([], [], "*", color="grey", label="result (White's score 1, 1/2, 0)")
        ax.set(title=f"{title}\n{name}", xlabel="ply (position before the move)",
               ylabel="P(White wins)", ylim=(-0.03, 1.03))  # fmt: skip
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))
    return fig


def write(record: Path, out: dict[str, Path]) -> dict[str, Path]:
    """The files of ``OUTCOME`` (name -> path in ``out``) from the record ``record``."""
    match = read_move_match(record)
    if match is None:
        raise FileNotFoundError(f"{record}: no move-matching record (rule play writes it)")
    frame = table(match)
    made = {"outcome_calibration": calibration_figure, "outcome_games": games_figure}
    for output in OUTCOME:
        path = out[output.name]
        if output.name == "outcome_table":
            files.write_atomic(path, lambda fh: fh.write(frame.to_csv(index=False).encode()))
        else:
            save_svg(made[output.name](match), path)
    logger.info("outcome figures: %d table rows, %d datasets -> %s", len(frame),
                len(measures(match)), Path(out["outcome_table"]).parent)  # fmt: skip
    return {o.name: out[o.name] for o in OUTCOME}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("record", type=Path, help="results/RUN/play/move-match.json")
    args = parser.parse_args(argv)
    files.unwind_on_signals()  # a kill leaves no temporary beside the outputs
    write(args.record, {o.name: args.record.parent / o.file for o in OUTCOME})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
