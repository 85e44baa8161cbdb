"""Rule compare: the runs' position tables (rule score) on one dataset's validation split,
aligned, restricted to the comparison's protocol (and, with ``shape: allie``, sampled to equal
positions per band), summarised with paired bootstrap intervals, written as
``comparison.json``, ``comparison.csv`` and the figures of ``chesslm.compare.outputs.FIGURES``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from chesslm import files
from chesslm.compare import anchors, plots, positions, stats
from chesslm.compare import scores as scores_module
from chesslm.compare.settings import Comparison
from chesslm.figures import save_svg
from chesslm.match import protocols


def run_records(runs: dict[str, dict[str, Any]], scores: dict[str, Path]) -> list[dict[str, Any]]:
    """Per run: its dataset, training games (the manifest's), games per update, best step and
    validation NLL (results.json), and what it was scored with (scores.json, sealed; its table
    checked by ``positions.load`` already)."""
    out = []
    for name in scores:  # the comparison's order
        info = runs[name]
        manifest = files.read_json(Path(info["manifest"]))
        results = files.read_json(Path(info["results"]))
        scored = scores_module.read_record(scores[name], table=False)
        step = scored["model"]["step"]
        out.append({
            "name": name, "dataset": info["dataset"],
            "train_games": int(manifest["games"]["train"]),
            "games_per_update": info["games_per_update"],
            "step": step, "games_seen": step * info["games_per_update"],
            "status": results.get("status"),
            "best_validation_nll": results.get("best_validation_nll"),
            "checkpoint_sha256": scored["model"]["checkpoint_sha256"],
        })  # fmt: skip
    return out


def curve_axis(records: list[dict[str, Any]]) -> str:
    """The curve's x: the runs' training-split games; when every run has the same (one
    dataset), the games seen up to the checkpoint scored (step x games per update)."""
    sizes = {r["train_games"] for r in records}
    use_seen = len(sizes) == 1 and len(records) > 1
    for r in records:
        r["x"] = r["games_seen"] if use_seen else r["train_games"]
    if use_seen:
        return "training games seen up to best.pt (step x games per update; log)"
    return "games in the training split (log)"


def select(aligned: positions.Aligned, c: Comparison) -> tuple[positions.Aligned, dict[str, Any]]:
    """The comparison's positions: its protocol's, then Allie's shape if asked."""
    kept = aligned.subset(aligned.keep[c.protocol])
    if c.shape != "allie":
        return kept, {"shape": "none"}
    sampled, info = stats.allie_sample(kept, per_band=c.positions_per_band, seed=c.seed,
                                       key=f"comparisons.{c.name}")  # fmt: skip
    return sampled, {"shape": "allie", **info}


def compare(
    c: Comparison, scores: dict[str, Path], runs: dict[str, dict[str, Any]], out_dir: Path
) -> dict[str, Any]:
    """Write the comparison's files into ``out_dir``; returns comparison.json's record."""
    tables = {run: positions.load(scores[run]) for run in c.runs}
    aligned = positions.align(tables)
    chosen, shape = select(aligned, c)
    if not len(chosen.game):
        raise ValueError(f"comparisons.{c.name}: no position counts under {c.protocol}")
    rows = stats.summarise(chosen, c.baseline, draws=c.bootstrap, seed=c.seed)
    records = run_records(runs, {run: scores[run] for run in c.runs})
    x_label = curve_axis(records)
    frame = pd.DataFrame(rows)
    uniform = float(np.mean(np.log(np.maximum(chosen.n_legal, 1))))
    title = f"{c.name}: {c.protocol} positions of {c.dataset}'s validation split"
    figures = {
        "runs": plots.runs_figure(frame, title),
        "paired": plots.paired_figure(frame, c.baseline, f"{title}, paired with {c.baseline}"),
        "curve": plots.curve_figure(
            frame, records, x_label, f"{c.name}: learning curve", uniform
        ),  # fmt: skip
        "bands": plots.bands_figure(frame, f"{c.name}: top-1 by the mover's band"),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, fig in figures.items():
        save_svg(fig, out_dir / f"{name}.svg")
    files.write_atomic(out_dir / "comparison.csv",
                       lambda fh: fh.write(frame.to_csv(index=False).encode()))  # fmt: skip
    record = {
        "settings": c.as_dict(),
        "runs": records,
        "curve_x": x_label,
        "split": "validation",
        "validation_games": chosen.validation_games,
        "validation_ids_sha256": chosen.ids_sha256,
        "positions": int(len(chosen.game)),
        "games": int(len(np.unique(chosen.game))),
        "protocol": protocols.PROTOCOLS[c.protocol].text,
        "selection": shape,
        "uniform_nll": uniform,
        "interval": f"95 % percentile bootstrap over whole games, {c.bootstrap} draws (seed"
        f" {c.seed}), the same draws for every run and every paired difference; none for a"
        " group of fewer than 10 games",
        "metrics": [r for r in rows if r["kind"] == "metric"],
        "paired": [r for r in rows if r["kind"] == "paired"],
        "anchors": anchors.as_records(),
    }
    files.write_json_atomic(out_dir / "comparison.json", record)
    return record
