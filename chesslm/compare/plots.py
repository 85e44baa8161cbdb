"""A comparison's figures (SVG through chesslm.figures, matplotlib's Figure API): each run's
metrics with their intervals, the paired differences from the baseline, the learning curve with
the published anchors as reference lines, and top-1 by rating band."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from chesslm.compare.anchors import ANCHORS
from chesslm.figures import notice_figure
from chesslm.match import metrics

METRICS = tuple((m.name, m.label) for m in metrics.METRICS)  # one panel each


def _errors(part: pd.DataFrame) -> np.ndarray | None:
    """Error bars (2 x n) from value/low/high; zero where a row has no interval."""
    v = part["value"].to_numpy(float)
    low = part["low"].astype(float).fillna(part["value"]).to_numpy()
    high = part["high"].astype(float).fillna(part["value"]).to_numpy()
    return np.vstack([v - low, high - v])


def runs_figure(rows: pd.DataFrame, title: str) -> Figure:
    """Per run: each metric (``chesslm.match.metrics``) on all the comparison's positions, 95 %
    bars."""
    part = rows[(rows["kind"] == "metric") & (rows["group"] == "all")]
    if not len(part):
        return notice_figure(title, "No positions to compare.")
    fig = Figure(figsize=(3.7 * len(METRICS), 1.6 + 0.4 * part["run"].nunique()),
                 layout="constrained")  # fmt: skip
    axes = fig.subplots(1, len(METRICS), sharey=True)
    for ax, (metric, label) in zip(axes, METRICS, strict=True):
        m = part[part["metric"] == metric]
        y = np.arange(len(m))
        ax.errorbar(m["value"], y, xerr=_errors(m), fmt="o", capsize=3)
        ax.set_yticks(y, m["run"])
        ax.set(xlabel=label)
        ax.grid(alpha=0.3)
    axes[0].invert_yaxis()
    fig.suptitle(title)
    return fig


def paired_figure(rows: pd.DataFrame, baseline: str, title: str) -> Figure:
    """Each run minus the baseline on the same positions, overall and by the mover's band, 95 %
    paired bootstrap bars."""
    part = rows[rows["kind"] == "paired"]
    if not len(part):
        return notice_figure(title, f"Only the baseline {baseline}: no difference to show.")
    texts = (part["run"] + f" − {baseline}: " + part["group"]).tolist()
    labels = list(dict.fromkeys(texts))
    fig = Figure(figsize=(3.7 * len(METRICS), 1.6 + 0.3 * len(labels)), layout="constrained")
    axes = fig.subplots(1, len(METRICS), sharey=True)
    for ax, (metric, label) in zip(axes, METRICS, strict=True):
        m = part[part["metric"] == metric]
        y = [labels.index(text) for text in (m["run"] + f" − {baseline}: " + m["group"])]
        ax.axvline(0, color="grey", lw=1)
        ax.errorbar(m["value"], y, xerr=_errors(m), fmt="o", capsize=3, color="tab:red")
        ax.set_yticks(range(len(labels)), labels)
        ax.xaxis.set_major_locator(MaxNLocator(nbins=4))  # long tick labels must not overlap
        ax.set(xlabel=f"{label}: run − baseline")
        ax.grid(alpha=0.3)
    axes[0].invert_yaxis()
    fig.suptitle(title)
    return fig


def curve_figure(rows: pd.DataFrame, runs: list[dict[str, Any]], x_label: str, title: str,
                 uniform_nll: float | None = None) -> Figure:  # fmt: skip
    """Top-1 and NLL per move against the runs' training games (log x), 95 % bars; the
    published top-1 figures as horizontal lines labelled with their protocols; on the NLL
    panel, ``uniform_nll``: a uniform choice among the legal moves, the untrained level."""
    part = rows[(rows["kind"] == "metric") & (rows["group"] == "all")]
    x = {r["name"]: r["x"] for r in runs}
    if not len(part) or not all(v and v > 0 for v in x.values()):
        return notice_figure(title, "No runs with training games to draw a curve of.")
    fig = Figure(figsize=(11, 5.4), layout="constrained")
    top, nll = fig.subplots(1, 2)
    for ax, metric in ((top, "top1"), (nll, "nll")):
        m = part[part["metric"] == metric].assign(x=lambda d: d["run"].map(x)).sort_values("x")
        ax.errorbar(m["x"], m["value"], yerr=_errors(m), fmt="o-", capsize=3, label="runs")
        for xi, yi, name in zip(m["x"], m["value"], m["run"], strict=True):
            ax.annotate(name, (xi, yi), fontsize="x-small", textcoords="offset points",
                        xytext=(4, 4))  # fmt: skip
        ax.set_xscale("log")
        ax.set(xlabel=x_label, ylabel=dict(METRICS)[metric])
        ax.grid(alpha=0.3, which="both")
    for i, anchor in enumerate(ANCHORS):
        top.axhline(anchor.top1, ls=("--", ":", "-.")[i % 3], color=f"C{i + 1}", lw=1,
                    label=anchor.label)  # fmt: skip
    top.set_ylim(0, 0.75)
    top.legend(fontsize="x-small", loc="upper center", bbox_to_anchor=(0.5, -0.16), ncols=1)
    if uniform_nll is not None:
        nll.axhline(uniform_nll, color="grey", ls="--", lw=1,
                    label=f"uniform over the legal moves ({uniform_nll:.2f})")  # fmt: skip
        nll.legend(fontsize="x-small", loc="upper center", bbox_to_anchor=(0.5, -0.16))
    nll.set_title("no published NLL in these units", fontsize="small")
    fig.suptitle(title)
    return fig


def bands_figure(rows: pd.DataFrame, title: str) -> Figure:
    """Top-1 per mover band, one marker series per run, 95 % bars."""
    part = rows[(rows["kind"] == "metric") & (rows["group"] != "all") & (rows["metric"] == "top1")]
    if not len(part):
        return notice_figure(title, "No rated positions: no bands.")
    groups = list(dict.fromkeys(part["group"]))
    runs = list(dict.fromkeys(part["run"]))
    fig = Figure(figsize=(9, 3.8), layout="constrained")
    ax = fig.subplots()
    for i, run in enumerate(runs):
        m = part[part["run"] == run].set_index("group").reindex(groups).dropna(subset=["value"])
        pos = np.array([groups.index(g) for g in m.index]) + (i - (len(runs) - 1) / 2) * 0.12
        ax.errorbar(pos, m["value"], yerr=_errors(m), fmt="o", capsize=3, label=run)
    ax.set_xticks(range(len(groups)), groups)
    ax.set(xlabel="mover's rating band", ylabel="top-1 agreement")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.suptitle(title)
    return fig
