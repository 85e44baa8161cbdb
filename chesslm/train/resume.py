"""Where a segment starts: the run's lock, and the fresh-or-resume decision made under it.

Rank 0 takes the run directory's lock (held for the life of the process), removes what killed
attempts left behind, reads the previous status and ``last.pt`` and decides; every other rank
acts on that decision (``distributed.from_main``) and loads the very ``last.pt`` rank 0 chose
(same digest), or none. Ranks that read the run folder on their own, while a killed run's
trainer was still writing it, once chose "fresh" on rank 1 and "resumed" on rank 0 and then
waited on different collectives until gloo's timeout.
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chesslm import files
from chesslm.files import read_json, sha256_file
from chesslm.model import checkpoint
from chesslm.train import distributed
from chesslm.train.deadline import Deadline

logger = logging.getLogger(__name__)
LOCK_WAIT_S = 30.0  # a trainer just killed (or its snakemake) releases the lock within moments


class RunDirLocked(RuntimeError):
    """Another live trainer holds the run directory."""


@dataclass(frozen=True)
class Start:
    """What a segment continues from: the previous segment's status (None for segment 0) and
    the checkpoint (None: a fresh run). ``lock`` is rank 0's lock descriptor (held to exit)."""

    previous: dict[str, Any] | None
    saved: dict[str, Any] | None
    lock: int | None = None


def lock_run_dir(train_dir: Path, *, wait_s: float = LOCK_WAIT_S) -> int:
    """Hold an exclusive lock on the run directory for the life of this process, so two
    trainers never write one run. A holder is waited for up to ``wait_s`` seconds (a trainer
    just killed takes a moment to exit), then named with what to do."""
    lock = train_dir / ".lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    give_up = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= give_up:
                os.close(fd)
                raise RunDirLocked(_locked_message(lock, wait_s)) from None
            time.sleep(0.2)
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()} {socket.gethostname()}\n".encode())
    return fd


def _locked_message(lock: Path, wait_s: float) -> str:
    words = lock.read_text().split() if lock.exists() else []
    pid = words[0] if words else "?"
    host = words[1] if len(words) > 1 else "this host"
    return (
        f"{lock.parent}: another trainer (pid {pid} on {host}) still holds {lock} after"
        f" {wait_s:.0f} s; not starting. Let it finish, or stop it (kill {pid} on {host}),"
        " then run the same command again"
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
    """
    last = train_dir / "last.pt"
    if previous is None:
        if not last.exists():
            return None
        saved = checkpoint.load(last)
        if saved.get("lineage", {}).get("segment") == 0:
            return saved  # an earlier attempt of segment 0 was killed after a save
        raise ValueError(
            f"{last} was written by segment {saved.get('lineage', {}).get('segment')!r}; segment 0"
            f" starts from scratch, so remove {train_dir} to restart the run"
        )
    expected = previous["last_pt_sha256"]
    if not last.exists():
        raise ValueError(f"{last} is missing; the previous status expects sha256 {expected}")
    actual = sha256_file(last)
    saved = checkpoint.load(last)
    if actual == expected:
        return saved
    lineage = saved.get("lineage", {})
    if lineage.get("segment") == segment and lineage.get("parent_sha256") == expected:
        return saved
    raise ValueError(
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
) -> Start:
    """Rank 0, under the run's lock: the previous status, the checkpoint to resume (checked),
    the probe's verdict and the deadline; every rank then acts on that one decision (an error
    is raised on every rank). ``scratch``: directories whose temporaries are removed."""
    lock = hold(ctx, train_dir)
    last = train_dir / "last.pt"
    saved = None  # rank 0 keeps what it loaded; the others load it once it is chosen

    def choose() -> tuple[dict[str, Any] | None, str | None]:
        nonlocal saved
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

    previous, digest = distributed.from_main(ctx, choose)
    if not ctx.is_main and digest is not None:
        saved = checkpoint.load(last)
        if checkpoint.digest(last) != digest:  # only this run's rank 0 writes it, later
            raise ValueError(f"{last} changed while rank 0 held the run's lock")
    return Start(previous=previous, saved=saved, lock=lock)
