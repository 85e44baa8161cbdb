"""A run's lock (``results/{run}/train/.lock``): one trainer writes a run at a time, with or
without snakemake's own lock (``--nolock``), and rule results writes no results.json while a
trainer holds it. Light (no torch): rule results' script takes it too."""

from __future__ import annotations

import fcntl
import os
import socket
import time
from pathlib import Path

LOCK_WAIT_S = 30.0  # a trainer just killed (or its snakemake) releases the lock within moments


class RunDirLocked(RuntimeError):
    """Another live trainer holds the run directory."""


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
