"""Segment status files (``segments/N.json``, written last), the run's ``results.json`` and a
failed rank's ``failure-rank{N}.json``."""

from __future__ import annotations

import logging
import math
import os
import time
from pathlib import Path
from typing import Any

from chesslm import commands, files
from chesslm.files import digest_json, read_json, sha256_file, write_json_atomic
from chesslm.model import checkpoint
from chesslm.train import runlock, segment_end
from chesslm.train.settings import RunSettings
from chesslm.train.state import TERMINAL, WALL_PARTS, TrainState

logger = logging.getLogger(__name__)


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
    write_json_atomic(kept_copy(path), record)  # first: a status may exist only beside it
    write_json_atomic(path, record)


def kept_copy(status: Path) -> Path:
    """The trainer's own copy of a segment's status, beside it: Snakemake removes a job's
    outputs before it runs, so a second snakemake (``--nolock``) starting the same segment
    removes the first's status file; the copy tells the next trainer the segment was trained.

    >>> kept_copy(Path("results/demo/segments/1.json")).as_posix()
    'results/demo/segments/.1.json.kept'
    """
    return status.with_name(f".{status.name}.kept")


def planned(path: Path) -> dict[str, Any]:
    """A segment's status as the plan reads it (workflow/rules/common.smk): one that is not
    readable JSON, or differs from the trainer's copy (``kept_copy``), is refused in one line
    with the way out, before any job runs (a results job would remove the good results.json
    first).

    :raises files.UnreadableFileError: naming ``path``, what is wrong and what to remove."""
    kept = kept_copy(path)
    try:
        copy = read_json(kept)
    except files.UnreadableFileError:
        copy = None  # a run from before the copies, or the copy damaged too
    try:
        record = read_json(path)
    except files.UnreadableFileError as error:
        raise files.UnreadableFileError(f"{error}; {_way_out(path, copy)}") from None
    if copy is not None and record != copy:
        raise files.UnreadableFileError(
            f"{path}: differs from the trainer's copy {kept.name} (edited?); {_way_out(path, copy)}"
        )
    return record


def _way_out(path: Path, copy: dict[str, Any] | None) -> str:
    # the status itself is the target: with results.json present, a removed status alone
    # leaves snakemake "Nothing to be done"
    remove = [path] if copy is not None else [p for p in (path, kept_copy(path)) if p.exists()]
    steps = f"rm {' '.join(map(str, remove))} && {commands.snakemake(path)}, then the same command"
    if copy is not None:
        return (
            f"its copy {kept_copy(path)} is intact: {steps} again (the segment's job restores"
            " the status from the copy, training nothing)"
        )
    return f"{steps} again (the segment goes on from train/last.pt)"


_VERIFIED: set[tuple[str, int, int, int]] = set()  # (path, inode, size, mtime): hashed once a plan


def planned_checkpoint(best: Path) -> Path:
    """A finished run's ``best.pt`` as the plan reads it (an input of the rules that load it:
    play, score, analyse, export), verified once per plan, so that a damaged file is refused in
    one line before Snakemake removes the good outputs of a job that would read it.

    :raises files.UnreadableFileError: naming the file, what is wrong and the way out."""
    try:
        stat = best.stat()
    except FileNotFoundError:
        raise files.UnreadableFileError(
            f"{best}: missing, though {best.parent / 'results.json'} says the run finished;"
            f" {_best_way_out(best)}"
        ) from None
    key = (str(best), stat.st_ino, stat.st_size, stat.st_mtime_ns)
    if key not in _VERIFIED:
        try:
            checkpoint.verify(best)
        except checkpoint.CheckpointError as error:
            what = str(error).removesuffix(checkpoint.DAMAGED_ADVICE).rstrip("; ")
            raise files.UnreadableFileError(f"{what}; {_best_way_out(best)}") from None
        _VERIFIED.add(key)
    return best


def _best_way_out(best: Path) -> str:
    """The copy to restore a damaged best.pt from: last.pt, or the segment-end copy of it,
    when the best step was the last (they hold the same bytes as train/results.json's
    best_checkpoint_sha256 says); else none is kept."""
    try:
        wanted = read_json(best.with_name("results.json")).get("best_checkpoint_sha256")
    except files.UnreadableFileError:
        wanted = None
    for copy in (best.with_name("last.pt"), segment_end.path(best.parent)):
        try:
            checkpoint.verify(copy)
        except checkpoint.CheckpointError:
            continue
        if wanted is not None and sha256_file(copy) == wanted:
            return f"its copy {copy} is intact (the best step was the last): cp -p {copy} {best}"
    run = best.parent.parent
    return (
        f"no intact copy is kept (the best step was not the last, or its copies are damaged"
        f" too): rm -r {run} && {commands.snakemake(run / 'results.json')} trains the run again"
    )


def finish_terminal(
    saved: dict[str, Any],
    status_out: str | None,
    settings: RunSettings,
    base: dict[str, Any],
    train_dir: Path,
    *,
    is_main: bool,
) -> bool:
    """Resuming a finished run is a no-op with a receipt (rank 0 writes it); whether it was."""
    state, identity = TrainState.from_state_dict(saved), saved["identity"]
    terminal = state.terminal_status(
        max_updates=identity.get("max_updates"), epochs=identity["epochs"]
    )
    if not terminal or not is_main:
        return bool(terminal)
    results_path = train_dir / "results.json"
    if not results_path.exists():
        write_json_atomic(results_path, results_record(state, identity, terminal, train_dir, None))
    write_status(
        status_out,
        settings,
        base,
        state,
        identity,
        terminal,
        stop_reason=terminal,
        resume_action="no_op_terminal",
        step_start=state.step,
        last_sha=sha256_file(train_dir / "last.pt"),
        wall_split={},  # all of it "other": no training, check or save
        useful_targets=0,
    )
    return True


def write_run_results(
    train_results: Path, statuses: list[Path], out: Path, *, wait_s: float = runlock.LOCK_WAIT_S
) -> dict[str, Any]:
    """results/{run}/results.json: the trainer's train/results.json plus the segment statuses.

    Written under the run's lock (waited for as a segment waits: another results job holds
    it for moments): a trainer that holds it (another snakemake's, with ``--nolock``) may
    still rewrite what this would copy.

    :raises ValueError: if the last status is not terminal or does not match the results, or
        a trainer holds the run.
    """
    try:
        lock = runlock.lock_run_dir(train_results.parent, wait_s=wait_s)
    except runlock.RunDirLocked as error:
        raise ValueError(f"{out} not written: {error}") from None
    try:
        files.remove_stale_temporaries(out.parent, out.name)  # a killed results job's
        return _write_run_results(train_results, statuses, out)
    finally:
        os.close(lock)


def _write_run_results(train_results: Path, statuses: list[Path], out: Path) -> dict[str, Any]:
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


def record_failure(train_dir: Path, rank: int, segment: int, error: BaseException) -> None:
    """failure-rank{N}.json: what stopped this rank (removed once a later attempt succeeds)."""
    try:
        write_json_atomic(
            train_dir / f"failure-rank{rank}.json",
            {"error": repr(error), "segment": segment, "time_unix": time.time()},
        )
    except OSError as also:  # a full disk must not hide the error that mattered
        logger.error("could not record the failure: %s", also)
