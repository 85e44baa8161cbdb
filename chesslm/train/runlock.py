"""A folder's lock: one writer of a folder at a time, with or without snakemake's own lock
(``--nolock``). Training holds ``results/{run}/train/.lock`` (``lock_run_dir``: one trainer
writes a run, and rule results writes no results.json while a trainer holds it); every other
rule that keeps state or temporaries under a run's folder holds its own folder's
(``chesslm.owner``). An ``flock``: the kernel releases it when its holder exits, however it
ends (SIGKILL included), so a lock is never left behind. Light (no torch): rule results' script
takes it too."""

from __future__ import annotations

import fcntl
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

LOCK_WAIT_S = 30.0  # a trainer just killed (or its snakemake) releases the lock within moments
PID_WAIT_S = 2.0  # a holder writes its pid at once after taking the lock


class RunDirLocked(RuntimeError):
    """Another live trainer holds the run directory."""


class Held(RuntimeError):
    """``lock`` is still held by ``holder`` after the wait."""

    def __init__(self, lock: Path, holder: tuple[str, str]) -> None:
        super().__init__(f"{lock} held by pid {holder[0]} on {holder[1]}")
        self.lock, self.holder = lock, holder


def holder(lock: Path) -> tuple[str, str]:
    """The pid and host the holder of ``lock`` wrote into it ("?" for a pid not yet written)."""
    give_up = time.monotonic() + PID_WAIT_S
    while True:
        try:
            words = lock.read_text().split()
        except OSError:
            words = []
        if words or time.monotonic() >= give_up:
            break
        time.sleep(0.05)
    return (words[0] if words else "?", words[1] if len(words) > 1 else "this host")


def take(
    lock: Path,
    *,
    wait_s: float | None,
    waiting: Callable[[tuple[str, str]], None] | None = None,
) -> int:
    """Hold ``lock`` exclusively for the life of this process (or until its descriptor is
    closed), with this process's pid and host written in it. A holder is waited for up to
    ``wait_s`` seconds (None: until it exits); ``waiting`` is told who it is, once, first.

    :raises Held: the holder still holds it after ``wait_s``."""
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    give_up = None if wait_s is None else time.monotonic() + wait_s
    told = waiting is None
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if not told:
                waiting(holder(lock))  # type: ignore[misc]
                told = True
            if give_up is not None and time.monotonic() >= give_up:
                os.close(fd)
                raise Held(lock, holder(lock)) from None
            time.sleep(0.2)
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()} {socket.gethostname()}\n".encode())
    return fd


def lock_run_dir(train_dir: Path, *, wait_s: float = LOCK_WAIT_S) -> int:
    """Hold an exclusive lock on the run directory for the life of this process, so two
    trainers never write one run. A holder is waited for up to ``wait_s`` seconds (a trainer
    just killed takes a moment to exit), then named with what to do."""
    try:
        return take(train_dir / ".lock", wait_s=wait_s)
    except Held as held:
        raise RunDirLocked(_locked_message(held.lock, held.holder, wait_s)) from None


def _locked_message(lock: Path, holder: tuple[str, str], wait_s: float) -> str:
    pid, host = holder
    return (
        f"{lock.parent}: another trainer (pid {pid} on {host}) still holds {lock} after"
        f" {wait_s:.0f} s; not starting. Let it finish, or stop it (kill {pid} on {host}),"
        " then run the same command again"
    )
