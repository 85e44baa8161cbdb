"""The report's figures (SVG), drawn from the summary tables with matplotlib's object API.

Figures are built with ``matplotlib.figure.Figure`` and never touch ``pyplot``, so no global
backend or figure registry is involved. A figure with nothing to show says so in words
instead of drawing empty axes (a CPU run has no GPU telemetry); saving and that notice are
``chesslm.figures``, shared with the play evaluation's figures.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from chesslm.data.tokens import PHASES
from chesslm.figures import notice_figure, save_svg
from chesslm.train.state import RESUMABLE, TERMINAL

# Segment timeline: a resumable stop (the next segment continues), a terminal status (the run
# ended), anything else (still running, killed, failed).
STATUS_KINDS = {
    "resumable stop (time budget, job deadline, segment_updates)": "tab:blue",
    "terminal status (the run ended)": "tab:green",
    "other (running, killed or failed)": "tab:red",
}
_RESUMABLE_COLOUR, _TERMINAL_COLOUR, _OTHER_COLOUR = STATUS_KINDS.values()
# Throughput: a record over less than this fraction of the median interval between records is
# a timing artefact (e.g. logged at a segment's end just after the previous one), not a rate.
MIN_INTERVAL_FRACTION = 0.05


def draw_all(
    tables: dict[str, pd.DataFrame], samples: pd.DataFrame, paths: dict[str, Path], *, run: str
) -> None:
    """Draw the five figures of a run into ``paths`` (keys as in ``summary.OUTPUT_FILES``)."""
    segments = tables["segments"]
    boundaries = segment_boundaries(segments)
    train = _latest(tables["train_steps"])
    checks = _latest(tables["validation"])
    save_svg(nll_figure(train, checks, boundaries, run), paths["nll_plot"])
    save_svg(validation_figure(checks, boundaries, run), paths["validation_plot"])
    save_svg(throughput_figure(train, checks, boundaries, run), paths["throughput_plot"])
    save_svg(gpu_figure(samples, segments, run), paths["gpu_plot"])
    save_svg(segments_figure(segments, run), paths["segments_plot"])


def segment_boundaries(segments: pd.DataFrame) -> list[float]:
    """Optimizer steps at which a later segment resumed (first segment excluded)."""
    if not len(segments) or "step_start" not in segments:
        return []
    starts = pd.to_numeric(segments["step_start"], errors="coerce").iloc[1:].dropna()
    return sorted(set(starts.tolist()))


def _latest(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows sorted by step; a step logged twice (replayed after a resume) keeps the later."""
    if not len(frame):
        return frame
    key = ["kind", "step"] if "kind" in frame else ["step"]
    return frame.drop_duplicates(subset=key, keep="last").sort_values("step")


def _finish(*axes: Any, boundaries: list[float]) -> None:
    """Segment boundaries, a grid and (where something is labelled) a legend on each axis."""
    for ax in axes:
        _mark_segments(ax, boundaries)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="small")


def _mark_segments(ax: Any, boundaries: list[float]) -> None:
    for i, step in enumerate(boundaries):
        label = "segment boundary" if i == 0 else None
        ax.axvline(step, color="grey", linestyle=":", linewidth=1, label=label)


def nll_figure(
    train: pd.DataFrame, validation: pd.DataFrame, boundaries: list[float], run: str
) -> Figure:
    title = f"{run}: training and validation NLL"
    if not len(train) and not validation["validation.nll"].notna().any():
        return notice_figure(title, "No training or validation record yet.")
    fig = Figure(figsize=(8, 4.5), layout="constrained")
    ax = fig.add_subplot()
    if len(train):
        ax.plot(train["step"], train["nll"], label="train (logged step)", linewidth=1)
    ax.plot(validation["step"], validation["validation.nll"], "o-", label="validation")
    _mark_segments(ax, boundaries)
    ax.set(title=title, xlabel="optimizer step", ylabel="NLL (nats per target)")
    ax.legend()
    ax.grid(alpha=0.3)
    return fig


def validation_figure(validation: pd.DataFrame, boundaries: list[float], run: str) -> Figure:
    title = f"{run}: phase accuracy and legality per validation"
    if not validation["validation.nll"].notna().any():
        return notice_figure(title, "No validation record yet.")
    fig = Figure(figsize=(8, 6.5), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True)
    for phase in PHASES:
        column = f"validation.phase_accuracy.{phase}"
        if validation[column].notna().any():
            top.plot(validation["step"], validation[column], "o-", label=f"{phase} accuracy")
    column = "validation.teacher_forced_triple_legality"
    if validation[column].notna().any():
        top.plot(validation["step"], validation[column], "s--", label="teacher-forced legality")
    top.set(title=title, ylabel="fraction", ylim=(-0.02, 1.02))
    for column, label in (
        ("validation.raw_illegal_token_probability", "probability on illegal tokens"),
        ("validation.raw_reserved_probability", "probability on reserved ids"),
    ):
        if validation[column].notna().any():
            bottom.plot(validation["step"], validation[column], "o-", label=label)
    bottom.set(xlabel="optimizer step", ylabel="mean probability per target")
    _finish(top, bottom, boundaries=boundaries)
    return fig


def throughput_figure(
    train: pd.DataFrame, validation: pd.DataFrame, boundaries: list[float], run: str
) -> Figure:
    title = f"{run}: throughput and padding"
    checks = validation[validation["kind"] == "check"]
    if not len(train) and not len(checks):
        return notice_figure(title, "No training record yet.")
    train, dropped = timed_records(train)
    fig = Figure(figsize=(8, 6), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True)
    for frame, style, label in ((train, "-", "logged step"), (checks, "o", "check average")):
        if len(frame) and frame["useful_targets_per_second"].notna().any():
            top.plot(frame["step"], frame["useful_targets_per_second"], style, label=label)
        if len(frame) and frame["padding_fraction"].notna().any():
            bottom.plot(frame["step"], frame["padding_fraction"], style, label=label)
    top.set(title=title, ylabel="useful targets per second")
    top.set_ylim(bottom=0)
    if dropped:
        top.text(
            0.01,
            0.02,
            f"{dropped} record(s) over a near-zero interval left out",
            transform=top.transAxes,
            fontsize="small",
        )
    bottom.set(xlabel="optimizer step", ylabel="padding fraction", ylim=(-0.02, 1.02))
    _finish(top, bottom, boundaries=boundaries)
    return fig


def timed_records(train: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """Training records without those timed over a near-zero interval, and how many went.

    A rate measured over almost no time is noise (a record written just after the previous
    one, e.g. at a segment's end) and would dwarf every real one. The interval is the
    segment's ``gpu_work_wall_seconds`` since the previous record (its ``time_unix`` when that
    is absent).
    """
    if len(train) < 3:
        return train, 0
    clock = "gpu_work_wall_seconds" if train["gpu_work_wall_seconds"].notna().any() else None
    clock = clock or ("time_unix" if "time_unix" in train else None)
    if clock is None:
        return train, 0
    elapsed = pd.to_numeric(train[clock], errors="coerce").groupby(train["segment"]).diff()
    typical = elapsed[elapsed > 0].median()
    if pd.isna(typical):
        return train, 0
    short = elapsed.notna() & (elapsed < MIN_INTERVAL_FRACTION * typical)
    return train[~short], int(short.sum())


def gpu_figure(samples: pd.DataFrame, segments: pd.DataFrame, run: str) -> Figure:
    title = f"{run}: GPU utilisation, memory and power"
    if not len(samples):
        return notice_figure(
            title, "No GPU telemetry was recorded (a CPU run, or the telemetry file is empty)."
        )
    origin = samples["time_unix"].min()
    fig = Figure(figsize=(8, 7.5), layout="constrained")
    axes = fig.subplots(3, 1, sharex=True)
    metrics = (
        ("utilization_percent", "utilisation (%)"),
        ("memory_used_MiB", "memory used (MiB)"),
        ("power_W", "power draw (W)"),
    )
    starts = pd.to_numeric(segments.get("start_unix", pd.Series()), errors="coerce").dropna()
    for ax, (metric, label) in zip(axes, metrics, strict=True):
        for gpu, group in samples.groupby("gpu", sort=True):
            x, y = _break_gaps(group["time_unix"].to_numpy() - origin, group[metric].to_numpy())
            ax.plot(x, y, label=f"GPU {gpu}", linewidth=1)
        for start in starts.iloc[1:]:
            ax.axvline(start - origin, color="grey", linestyle=":", linewidth=1)
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    axes[0].set_ylim(0, 102)
    axes[0].set_title(title)
    axes[0].legend(fontsize="small")
    axes[-1].set_xlabel("time since the first telemetry sample (s); dotted: segment starts")
    return fig


def _break_gaps(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Insert NaN where samples pause (between segments), so lines do not bridge idle time."""
    order = np.argsort(x, kind="stable")
    x, y = x[order].astype(float), y[order].astype(float)
    steps = np.diff(x)
    if not len(steps):
        return x, y
    gaps = np.flatnonzero(steps > max(5.0, 5 * float(np.median(steps)))) + 1
    return np.insert(x, gaps, np.nan), np.insert(y, gaps, np.nan)


def segments_figure(segments: pd.DataFrame, run: str) -> Figure:
    title = f"{run}: segment timeline"
    start = pd.to_numeric(segments.get("start_unix", pd.Series()), errors="coerce")
    if not len(segments) or not start.notna().any():
        return notice_figure(title, "No segment has recorded a start yet.")
    end = pd.to_numeric(segments["end_unix"], errors="coerce")
    origin = start.min()
    fig = Figure(figsize=(8, 2.4 + 0.45 * len(segments)), layout="constrained")
    ax = fig.add_subplot()
    for i, row in segments.reset_index(drop=True).iterrows():
        if pd.isna(start[i]):
            continue
        stop = end[i] if pd.notna(end[i]) else start[i]
        colour = status_colour(row["status"])
        ax.barh(i, stop - start[i], left=start[i] - origin, color=colour, edgecolor="black")
        steps = f"steps {_int(row['step_start'])}-{_int(row['step_end'])}"
        ax.annotate(
            f" {row['status']} ({steps})", (stop - origin, i), va="center", fontsize="small"
        )
    ax.set_yticks(range(len(segments)), [f"segment {s}" for s in segments["segment"]])
    ax.invert_yaxis()
    ax.set(title=title, xlabel="time since the first segment started (s)")
    ax.margins(x=0.35)
    ax.grid(axis="x", alpha=0.3)
    fig.legend(
        handles=[Patch(facecolor=c, edgecolor="black", label=k) for k, c in STATUS_KINDS.items()],
        fontsize="small",
        loc="outside lower center",
    )
    return fig


def status_colour(status: Any) -> str:
    if status in RESUMABLE:
        return _RESUMABLE_COLOUR
    return _TERMINAL_COLOUR if status in TERMINAL else _OTHER_COLOUR


def _int(value: Any) -> str:
    return "?" if value is None or pd.isna(value) else str(int(value))
