"""Figures of the play evaluation (SVG, matplotlib's Figure API, no pyplot): accuracy by Elo
bin with its interval (none from too few games), illegal share by ply, score against each
anchor of the Elo ladder with the model's fit on the ladder's scale (partly not reproducible:
the UCI_Elo anchors' play is unseeded)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from chesslm.figures import STYLES, notice_figure
from chesslm.ladder import elo
from chesslm.match import matching, metrics


def match_figure(rows: pd.DataFrame) -> Figure:
    """Top-1 and top-3 accuracy per 100-Elo bin of the mover, each protocol, with the 95 %
    bootstrap interval as a bar; a bin of fewer than MIN_INTERVAL_GAMES games has a hollow
    marker and no bar; every bin's game count along the top. One panel per dataset."""
    title = "Move-matching by the mover's Elo"
    if len(rows):
        rows = rows[(rows["grouping"] == "elo_bin") & (rows["group"] != "unknown")]
    if not len(rows):
        return notice_figure(
            title, "No rated positions were evaluated (no Elo metadata, or no games)."
        )
    datasets = list(dict.fromkeys(rows["dataset"]))
    fig = Figure(figsize=(10, 3.8 * len(datasets)), layout="constrained")
    axes = np.atleast_1d(fig.subplots(len(datasets), 1, squeeze=False)[:, 0])
    for ax, name in zip(axes, datasets, strict=True):
        mine = rows[rows["dataset"] == name]
        names = list(dict.fromkeys(mine["protocol"]))  # config order: the headline first
        for i, protocol in enumerate(names):
            part = mine[mine["protocol"] == protocol]
            style, shift = STYLES[i % len(STYLES)], (i - (len(names) - 1) / 2) * 16
            for j, metric in enumerate(metrics.SHARES):  # the metric table's shares
                _match_series(ax, part, metric.name, f"C{j}", style, shift)
        counted = "all" if "all" in names else names[0]
        _game_counts(ax, mine[mine["protocol"] == counted])
        ax.plot([], [], "o", markerfacecolor="none", color="grey",
                label=f"fewer than {matching.MIN_INTERVAL_GAMES} games: no interval")  # fmt: skip
        ax.set(
            title=f"{title}: {name}",
            ylabel="accuracy",
            xlabel="mover's Elo (100-point bins; along the top: games in the bin)",
        )
        ax.set_ylim(0, 1.08)
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))
    return fig


def _match_series(ax: Any, part: pd.DataFrame, stat: str, colour: str, style: str,
                  shift: float) -> None:  # fmt: skip
    """One protocol's ``stat`` by bin: the line, filled markers with their interval where the
    bin has enough games, hollow markers where it has not."""
    if not len(part):
        return
    protocol = part["protocol"].iloc[0]
    x = part["group"].astype(int).to_numpy() + 50 + shift  # protocols side by side
    y = part[stat].astype(float).to_numpy()
    ok = (part["games"] >= matching.MIN_INTERVAL_GAMES).to_numpy()
    ax.plot(x, y, style, color=colour, alpha=0.6, label=f"{stat} ({protocol})")
    if ok.any():
        low = part[f"{stat}_low"].astype(float).to_numpy()[ok]
        high = part[f"{stat}_high"].astype(float).to_numpy()[ok]
        ax.errorbar(x[ok], y[ok], yerr=[y[ok] - low, high - y[ok]], fmt="o", color=colour,
                    capsize=2, markersize=4)  # fmt: skip
    if (~ok).any():
        ax.plot(x[~ok], y[~ok], "o", markerfacecolor="none", color=colour, markersize=5)


def _game_counts(ax: Any, part: pd.DataFrame) -> None:
    """Each bin's number of games along the top (all positions), grey below the minimum."""
    for group, games in zip(part["group"].astype(int), part["games"], strict=True):
        few = games < matching.MIN_INTERVAL_GAMES
        ax.text(group + 50, 1.05, str(games), fontsize="x-small", ha="center", va="center",
                color="grey" if few else "black")  # fmt: skip


def legality_figure(rows: pd.DataFrame) -> Figure:
    """Share of illegal proposals per ply bucket, greedy and temperature 1."""
    title = "Free-running legality: illegal proposals by ply"
    if not len(rows):
        return notice_figure(title, "No self-play game was played.")
    fig = Figure(figsize=(8, 4), layout="constrained")
    ax = fig.add_subplot()
    for mode, part in rows.groupby("mode", sort=False):
        ax.plot(range(len(part)), part["illegal_share"], "o-", label=str(mode))
        ticks = list(part["plies"])
    ax.set_xticks(range(len(ticks)), ticks, rotation=45, fontsize="small")
    ax.set(title=title, xlabel="plies", ylabel="illegal share of proposals")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()
    return fig


def elo_figure(anchors: list[dict[str, Any]], fit: dict[str, Any] | None) -> Figure:
    """The model's score against each anchor, placed at the anchor's rating on the ladder (its
    95 % interval as a bar), and the score the fitted Elo expects (its interval as a band)."""
    title = (
        "Score against the ladder's anchors (engine Elo, not a human rating)\n"
        "not reproducible in part: Stockfish's UCI_Elo play is random and unseeded"
    )
    if not anchors or fit is None:
        return notice_figure(title, "No game against the ladder's anchors was played.")
    fig = Figure(figsize=(8, 4), layout="constrained")
    ax = fig.add_subplot()
    xs = np.array([a["rating"] for a in anchors])
    spread = [xs - [a["rating_low"] for a in anchors], [a["rating_high"] for a in anchors] - xs]
    ax.errorbar(xs, [a["score"] for a in anchors], xerr=spread, fmt="o", capsize=3,
                label="model's score (anchor's rating, 95 %)")  # fmt: skip
    for a in anchors:
        ax.annotate(f"{a['anchor']}: {a['games']} games", (a["rating"], a["score"]),
                    fontsize="x-small", textcoords="offset points", xytext=(4, 4))  # fmt: skip
    _fit_curve(ax, fit, np.linspace(xs.min() - 400, xs.max() + 400, 200))
    ax.set(title=title, xlabel="anchor's rating on the ladder (Elo)", ylabel="model's score",
           ylim=(-0.02, 1.02))  # fmt: skip
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return fig


def _fit_curve(ax: Any, fit: dict[str, Any], grid: np.ndarray) -> None:
    """The score the fitted Elo expects at each anchor rating, its interval as a band; a
    rating that is only bounded, as a dashed line at the bound."""
    if fit["elo"] is None:
        bound = fit["high"] if fit["bound"] == "below" else fit["low"]
        ax.axvline(bound, linestyle="--", color="grey", label=f"model: {fit['text']}")
        return
    ax.plot(grid, [elo.expected(fit["elo"], a) for a in grid], "-",
            label=f"model: {fit['text']}")  # fmt: skip
    low = [elo.expected(fit["low"], a) for a in grid]
    high = [elo.expected(fit["high"], a) for a in grid]
    ax.fill_between(grid, low, high, alpha=0.15, linewidth=0, label="95 % interval")


def counterfactual_figure(rows: pd.DataFrame) -> Figure:
    """A conditioned model at each rating setting (overall, the headline protocol): top-1 and
    top-3 (left), and how far its predictions move from the true-rating ones (right: share
    of positions whose best move changes, mean total variation). One line per dataset. With
    a gap sweep (the outcome head), a third panel: ``_gap_panel``."""
    title = "Predictions by the ratings the model is given"
    if not len(rows):
        return notice_figure(title, "Not conditioned: the model reads no ratings.")
    headline = rows["protocol"].iloc[0]
    gap = rows[(rows["grouping"] == "gap") & (rows["protocol"] == headline)]
    rows = rows[(rows["grouping"] == "overall") & (rows["protocol"] == headline)]
    fig = Figure(figsize=(16 if len(gap) else 11, 4), layout="constrained")
    left, right, *sweep = fig.subplots(1, 3 if len(gap) else 2)
    for name, part in rows.groupby("dataset", sort=False):
        x = range(len(part))
        shares = tuple(m.name for m in metrics.SHARES)
        for ax, stats in ((left, shares), (right, ("argmax_changed", "tv"))):
            for stat, style in zip(stats, ("o-", "s--", "^:", "d-."), strict=False):
                ax.plot(x, part[stat].astype(float), style, label=f"{stat} ({name})")
            ax.set_xticks(list(x), [_setting_label(s) for s in part["setting"]])
    protocol = rows["protocol"].iloc[0]
    left.set(title=f"agreement with the played move ({protocol})", ylabel="accuracy",
             xlabel="both players' rating (true: each game's own)")  # fmt: skip
    right.set(title="moved from the true-rating predictions", ylabel="share / distance",
              xlabel="both players' rating")  # fmt: skip
    for ax in (left, right):
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    if sweep:
        _gap_panel(sweep[0], gap)
    fig.suptitle(title)
    return fig


def _gap_panel(ax: Any, rows: pd.DataFrame) -> None:
    """White's mean predicted score (its 95 % interval over games as a band) against the
    rating gap it is given, beside the Elo expectation at each gap."""
    for name, part in rows.sort_values("gap").groupby("dataset", sort=False):
        x = part["gap"].astype(float)
        ax.plot(x, part["white_score"].astype(float), "o-", label=f"predicted ({name})")
        low, high = (part[f"white_score_{s}"].astype(float) for s in ("low", "high"))
        ax.fill_between(x, low, high, alpha=0.15, linewidth=0)
    ref = rows.drop_duplicates("gap").sort_values("gap")  # the same gaps in every dataset
    ax.plot(ref["gap"].astype(float), ref["elo_expectation"].astype(float), "k:",
            label="Elo expectation")  # fmt: skip
    ax.set(title=f"White's expected score by the rating gap ({rows['protocol'].iloc[0]})",
           xlabel="White's rating minus Black's", ylabel="W + D/2", ylim=(0, 1))  # fmt: skip
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")


def _setting_label(setting: str) -> str:
    return "true" if setting == "true" else f"{setting} / {setting}"
