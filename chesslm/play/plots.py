"""Figures of the play evaluation (SVG, matplotlib's Figure API, no pyplot): accuracy by Elo
bin with its interval band, illegal share by ply, score against each anchor with the fit."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from chesslm.play import elo as elo_fit
from chesslm.report.plots import notice_figure


def match_figure(rows: pd.DataFrame) -> Figure:
    """Top-1 and top-3 accuracy per 100-Elo bin of the mover, both protocols, with the 95 %
    bootstrap band; one panel per dataset."""
    title = "Move-matching by the mover's Elo"
    if len(rows):
        rows = rows[(rows["grouping"] == "elo_bin") & (rows["group"] != "unknown")]
    bins = rows
    if not len(bins):
        return notice_figure(
            title, "No rated positions were evaluated (no Elo metadata, or no games)."
        )
    datasets = list(dict.fromkeys(rows["dataset"]))
    fig = Figure(figsize=(8, 3.8 * len(datasets)), layout="constrained")
    axes = np.atleast_1d(fig.subplots(len(datasets), 1, squeeze=False)[:, 0])
    for ax, name in zip(axes, datasets, strict=True):
        mine = bins[bins["dataset"] == name]
        for protocol, style in (("maia", "-"), ("all", "--")):
            part = mine[mine["protocol"] == protocol]
            if not len(part):
                continue
            x = part["group"].astype(int) + 50
            for stat, colour in (("top1", "tab:blue"), ("top3", "tab:orange")):
                label = f"{stat} ({protocol})"
                ax.plot(x, part[stat], style, marker="o", color=colour, label=label)
                ax.fill_between(
                    x, part[f"{stat}_low"].astype(float), part[f"{stat}_high"].astype(float),
                    color=colour, alpha=0.15 if protocol == "maia" else 0.07, linewidth=0,
                )  # fmt: skip
        ax.set(title=f"{title}: {name}", xlabel="mover's Elo (100-point bins)", ylabel="accuracy")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="small")
    return fig


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


def elo_figure(anchors: list[dict[str, Any]], fit: dict[str, Any]) -> Figure:
    """Score against each anchor and the fitted logistic curve (with its interval)."""
    title = "Score against Stockfish anchors (engine Elo, not a human rating)"
    if not anchors:
        return notice_figure(title, "No game against Stockfish was played.")
    fig = Figure(figsize=(8, 4), layout="constrained")
    ax = fig.add_subplot()
    xs = [a["anchor_effective"] for a in anchors]
    ax.plot(xs, [a["score"] for a in anchors], "o", label="observed score")
    for a in anchors:
        ax.annotate(f"{a['games']} games", (a["anchor_effective"], a["score"]), fontsize="small",
                    textcoords="offset points", xytext=(4, 4))  # fmt: skip
    grid = np.linspace(min(xs) - 400, max(xs) + 400, 200)
    if fit.get("elo") is not None:
        bounds = ", ".join("?" if fit[k] is None else f"{fit[k]:.0f}" for k in ("low", "high"))
        ax.plot(grid, [elo_fit.expected(fit["elo"], a) for a in grid], "-",
                label=f"fit: {fit['elo']:.0f} [{bounds}]")  # fmt: skip
        if fit["low"] is not None and fit["high"] is not None:
            low = [elo_fit.expected(fit["low"], a) for a in grid]
            high = [elo_fit.expected(fit["high"], a) for a in grid]
            ax.fill_between(grid, low, high, alpha=0.15, linewidth=0, label="95 % interval")
    ax.set(title=title, xlabel="anchor UCI_Elo", ylabel="model's score", ylim=(-0.02, 1.02))
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return fig
