"""Where a segment starts: the run's lock, and the fresh-or-resume decision made under it.

Rank 0 takes the run directory's lock (held for the life of the process), removes what killed
attempts left behind, reads the previous status and ``last.pt`` and decides; every other rank
acts on that decision (``distributed.from_main``) and loads the very ``last.pt`` rank 0 chose
(same digest), or none. Ranks that read the run folder on their own, while a killed run's
trainer was still writing it, once chose "fresh" on rank 1 and "resumed" on rank 0 and then
waited on different collectives until gloo's timeout.

A segment whose status file exists once it holds the lock was trained by another trainer
meanwhile (two snakemakes with ``--nolock``: each prepared the job while the file was
missing): it is refused (``AlreadyTrained``) and writes nothing, and the segment exits 0 so
that snakemake keeps the other trainer's records rather than removing a failed job's outputs.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chesslm import files
from chesslm.files import read_json, sha256_file
from chesslm.model import checkpoint
from chesslm.train import distributed, segment_end, status
from chesslm.train.deadline import Deadline
from chesslm.train.runlock import RunDirLocked as RunDirLocked  # segment's refusals
from chesslm.train.runlock import lock_run_dir

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Start:
    """What a segment continues from: the previous segment's status (None for segment 0) and
    the checkpoint (None: a fresh run). ``lock`` is rank 0's lock descriptor (held to exit)."""

    previous: dict[str, Any] | None
    saved: dict[str, Any] | None
    lock: int | None = None


class AlreadyTrained(RuntimeError):
    """Another trainer trained this segment while this one waited for the run's lock."""


def trained_elsewhere(status_out: Path, lock: Path) -> str:
    """The refusal of a segment whose status another trainer wrote: what it says, one line."""
    try:
        record = read_json(status_out)
        done = f" (status {record.get('status')!r} at step {record.get('step_end')})"
    except ValueError:
        done = ""
    return (
        f"{status_out}: segment already trained by another trainer{done} while this one"
        f" waited for {lock}; nothing written, its records stand (two snakemakes on one run:"
        " --nolock lets both start the same job)"
    )


def restore(status_out: Path) -> str:
    """A segment trained whose status file was removed since (by a second snakemake's job,
    which removes its outputs first): its record restored from the trainer's copy, nothing
    trained; the refusal's line."""
    files.copy_atomic(status.kept_copy(status_out), status_out)
    return (
        f"{status_out}: segment already trained, its status file removed since (a second"
        " snakemake started the same job: --nolock); its record restored from"
        f" {status.kept_copy(status_out).name}, nothing trained"
    )


def hold(ctx: distributed.Context, train_dir: Path) -> int | None:
    """The run's lock, taken by rank 0 for the whole run (every rank fails alike if it is held
    by another trainer); rank 0's descriptor, None on the other ranks."""
    fd = distributed.from_main(ctx, lambda: lock_run_dir(train_dir))
    return fd if ctx.is_main else None


def remove_temporaries(directories: list[Path]) -> None:
    """Delete the temporaries of atomic writes that a killed or failed trainer (or a full
    disk) left behind (``.last.pt.PID.RANDOM.tmp``, ...): only those of writers that have
    exited, never a live writer's (chesslm.files.stale_temporaries)."""
    for directory in directories:
        for path in files.remove_stale_temporaries(directory):
            logger.info("removed %s, left by an earlier attempt", path)


def find_resume(
    train_dir: Path, segment: int, previous: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The checkpoint this segment continues from, or None for a fresh run.

    ``last.pt`` must be the previous segment's (its sha256 is in that status), or one written by
    an earlier, killed attempt of *this* segment that resumed from it (its lineage says so).
    A damaged, missing or wrong one is refused naming the way out: the command that restores
    it from the segment-end copy, when that copy would be accepted in its place.
    """
    last = train_dir / "last.pt"
    try:
        return resumable(last, segment, previous)
    except WrongCheckpoint as error:
        intact = previous is not None and copy_resumable(train_dir, segment, previous)
        raise ValueError(f"{error}; {segment_end.way_out(train_dir, intact)}") from None


def copy_resumable(train_dir: Path, segment: int, previous: dict[str, Any]) -> bool:
    """Whether the segment-end copy would be accepted in last.pt's place."""
    copy = segment_end.path(train_dir)
    try:
        return copy.exists() and resumable(copy, segment, previous) is not None
    except ValueError:  # damaged, another segment's, or a later one's
        return False


class WrongCheckpoint(ValueError):
    """A checkpoint that is damaged, missing or not the one the previous status names."""


def resumable(last: Path, segment: int, previous: dict[str, Any] | None) -> dict[str, Any] | None:
    """``last`` loaded if segment ``segment`` may continue from it (``find_resume``).

    :raises WrongCheckpoint: if it is damaged, missing or another; ValueError if the run was
        trained past this segment or segment 0 finds another segment's checkpoint."""
    try:
        saved = checkpoint.load(last) if last.exists() else None
    except checkpoint.CheckpointError as error:
        raise WrongCheckpoint(segment_end.damaged(error)) from None
    written_by = (saved or {}).get("lineage", {}).get("segment")
    if isinstance(written_by, int) and written_by > segment:
        raise ValueError(
            f"{last}: the run was trained past segment {segment} (last.pt is segment"
            f" {written_by}'s); not training segment {segment} again, nothing written. Another"
            " trainer (a second snakemake with --nolock?) ran it, or its status file was"
            " removed: run the same command again to go on from the last segment's status"
        )
    if previous is None:
        if saved is None or written_by == 0:
            return saved  # fresh, or an earlier attempt of segment 0 was killed after a save
        raise ValueError(
            f"{last} was written by segment {written_by!r}; segment 0 starts from scratch, so"
            f" remove {last.parent} to restart the run"
        )
    expected = previous["last_pt_sha256"]
    if saved is None:
        raise WrongCheckpoint(f"{last} is missing; the previous status expects sha256 {expected}")
    actual = sha256_file(last)
    if actual == expected:
        return saved
    if written_by == segment and saved["lineage"].get("parent_sha256") == expected:
        return saved
    raise WrongCheckpoint(
        f"{last}: sha256 {actual} does not match the previous status's last_pt_sha256 {expected}"
    )


def decide(
    ctx: distributed.Context,
    train_dir: Path,
    *,
    segment: int,
    previous_status: str | None,
    probe_results: str | None,
    scratch: list[Path],
    deadline: Deadline | None,
    status_out: str | None = None,
) -> Start:
    """Rank 0, under the run's lock: the previous status, the checkpoint to resume (checked),
    the probe's verdict and the deadline; every rank then acts on that one decision (an error
    is raised on every rank). ``scratch``: directories whose temporaries are removed.

    :raises AlreadyTrained: ``status_out`` exists once the lock is held."""
    lock = hold(ctx, train_dir)
    last = train_dir / "last.pt"
    saved = None  # rank 0 keeps what it loaded; the others load it once it is chosen

    def choose() -> tuple[dict[str, Any] | None, str | None]:
        nonlocal saved
        if status_out and Path(status_out).exists():
            raise AlreadyTrained(trained_elsewhere(Path(status_out), train_dir / ".lock"))
        if status_out and status.kept_copy(Path(status_out)).exists():
            raise AlreadyTrained(restore(Path(status_out)))
        remove_temporaries(scratch)  # under the lock: nobody else is writing here
        previous = read_json(Path(previous_status)) if previous_status else None
        if probe_results and not Path(probe_results).exists():
            raise ValueError(
                f"{probe_results} is missing: the probe runs before the first segment; ask"
                " snakemake for the run's results.json, which runs it first"
            )
        if probe_results and read_json(Path(probe_results)).get("status") != "passed":
            raise ValueError(f"{probe_results}: the probe has not passed; training waits for it")
        saved = find_resume(train_dir, segment, previous)
        if deadline is not None and deadline.soft_stop():
            raise TimeoutError("job deadline reached before setup")
        return previous, None if saved is None else checkpoint.digest(last)

    try:
        previous, digest = distributed.from_main(ctx, choose)
    except Exception:
        if lock is not None:  # refused: the lock goes now, not at exit
            os.close(lock)
        raise
    if not ctx.is_main and digest is not None:
        saved = checkpoint.load(last)
        if checkpoint.digest(last) != digest:  # only this run's rank 0 writes it, later
            raise ValueError(f"{last} changed while rank 0 held the run's lock")
    return Start(previous=previous, saved=saved, lock=lock)
