"""Segment status files (``segments/N.json``, written last) and the run's ``results.json``."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from chesslm.files import digest_json, read_json, sha256_file, write_json_atomic
from chesslm.train.settings import RunSettings
from chesslm.train.state import TERMINAL, WALL_PARTS, TrainState


def finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def results_record(
    state: TrainState,
    identity: dict[str, Any],
    status: str,
    train_dir: Path,
    memory: list[dict[str, Any]] | None,
) -> dict[str, Any]:
    """train/results.json of a finished run (the seed's results.json)."""
    best = train_dir / "best.pt"
    return {
        "status": status,
        "cursor": state.cursor(),
        "best_step": state.best_step,
        "best_validation_nll": finite(state.best_nll),
        "bad_checks": state.bad_checks,
        "history": state.history,
        "initial_validation": state.initial_validation,
        "totals": state.totals,
        "memory": memory,
        "gpu_work_wall_seconds": state.work_seconds,
        "segments_trained": state.segments,
        "test_evaluated": False,
        "best_checkpoint": "best.pt" if best.exists() else None,
        "best_checkpoint_sha256": sha256_file(best) if best.exists() else None,
        "last_checkpoint_sha256": sha256_file(train_dir / "last.pt"),
        "identity_sha256": digest_json(identity),
        "identity": identity,
    }


def write_status(
    out: Path | str,
    settings: RunSettings,
    base: dict[str, Any],
    state: TrainState,
    identity: dict[str, Any],
    status: str,
    *,
    stop_reason: str | None,
    resume_action: str,
    step_start: int,
    last_sha: str | None,
    first_update_unix: float | None = None,
    wall_split: dict[str, float] | None = None,
    useful_targets: int | None = None,
) -> None:
    """The segment's status file ``out``: written last and atomically, so it exists only when
    the checkpoint it names is complete. ``base``: run, segment, start_unix, world_size.
    ``first_update_seconds``: from the segment's start (its process's imports done) to its
    first optimizer update read back, i.e. set-up, compilation (cold or from the run's compile
    cache) and, in segment 0, the initial validation.
    ``wall_split``: seconds of start-up (segment start to the training loop), training,
    validation (the initial check included) and checkpointing; ``other`` is added here as the
    rest of ``seconds``, so the parts add up to it. ``useful_targets``: this segment's."""
    end = time.time()
    seconds = end - base["start_unix"]
    split = None
    if wall_split is not None:
        split = {part: float(wall_split.get(part, 0.0)) for part in WALL_PARTS[:-1]}
        split["other"] = seconds - sum(split.values())
    record = {
        **base,
        "device": settings.device,
        "status": status,
        "terminal": status in TERMINAL,
        "stop_reason": stop_reason,
        "resume_action": resume_action,
        "end_unix": end,
        "seconds": seconds,
        "first_update_seconds": (
            first_update_unix - base["start_unix"] if first_update_unix is not None else None
        ),
        "step_start": step_start,
        "step_end": state.step,
        "updates": state.step - step_start,
        "wall_split": split,
        "useful_targets": useful_targets,
        "cursor": state.cursor(),
        "best_step": state.best_step,
        "best_validation_nll": finite(state.best_nll),
        "bad_checks": state.bad_checks,
        "last_pt_sha256": last_sha,
        "identity_sha256": digest_json(identity),
        "test_evaluated": False,
    }
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, record)


def write_run_results(train_results: Path, statuses: list[Path], out: Path) -> dict[str, Any]:
    """results/{run}/results.json: the trainer's train/results.json plus the segment statuses.

    :raises ValueError: if the last status is not terminal or does not match the results.
    """
    segments = [read_json(p) for p in statuses]
    if not segments or not segments[-1].get("terminal"):
        raise ValueError(
            f"{statuses[-1] if statuses else 'segments'}: the run has no terminal status"
        )
    results = read_json(train_results)
    if results["status"] != segments[-1]["status"]:
        raise ValueError(
            f"{train_results}: status {results['status']!r} but the last segment says"
            f" {segments[-1]['status']!r}"
        )
    record = {**results, "segments": segments, "segment_count": len(segments)}
    write_json_atomic(out, record)
    return record
