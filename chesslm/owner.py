"""One owner per output folder: a rule job that keeps state or temporaries under a folder
(play, score, ladder, analyse, compare, export, summarise) holds that folder's lock
(``chesslm.train.runlock``, training's own) for its whole life, also under ``--nolock``.

Two snakemakes that start one job (``--nolock``, or a plain one and a ``--nolock`` one) used
to share ``play/state``: the first to end removed it, the second failed, and its snakemake
then removed the first's outputs ("since they might be corrupted"). Now the second job waits
for the holder to exit (refusing at once would be worse: its snakemake would remove whatever
outputs the holder had written by then, play writes its parts as they end); then, if the
holder wrote every output, it refuses in one line naming the holder's pid, writes nothing,
and exits 0, so that its snakemake keeps the holder's outputs (as a trainer refuses a
segment trained meanwhile). A holder that ended without them (killed, failed) leaves the work
to this job, which resumes it as any later job would.

Under the lock, before any work, the job removes what killed writers left in its folders:
the temporaries of atomic writes (``.NAME.PID.RANDOM.tmp``) whose writer has exited
(``files.remove_stale_temporaries``, as convert and training do).

The lock sits beside the folder (``.NAME.lock``), not in it: the export folder holds exactly
the files its SHA256SUMS lists.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from chesslm import files
from chesslm.train import runlock

REFUSED = "refused:"  # the refusal's words, which tests and people look for


def lock_of(place: Path) -> Path:
    """The lock of a folder (or of one file's outputs, ``analysis/{dataset}``): beside it."""
    return place.parent / f".{place.name}.lock"


def remove_dead_temporaries(folder: Path, log: logging.Logger) -> None:
    """The temporaries of exited writers in ``folder`` and the folders below it, removed."""
    if not folder.is_dir():
        return
    for directory, subfolders, _ in os.walk(folder):
        removed = files.remove_stale_temporaries(Path(directory))
        for path in removed:
            log.info("removed %s, left by a killed writer", path)
        gone = {path.name for path in removed}
        subfolders[:] = [name for name in subfolders if name not in gone]


@contextlib.contextmanager
def owning(
    place: Path, outputs: Sequence[str | Path], job: str, log: logging.Logger
) -> Iterator[None]:
    """Hold ``place``'s lock for the block (``place``: the job's folder, or the stem of one
    job's files in a shared folder, ``analysis/{dataset}``), the folders of ``outputs`` first
    cleared of dead writers' temporaries. Another holder is waited for; if it wrote all of
    ``outputs`` meanwhile, this job refuses (one line), writes nothing and exits 0."""
    place.parent.mkdir(parents=True, exist_ok=True)
    lock = lock_of(place)
    seen: list[tuple[str, str]] = []

    def waiting(holder: tuple[str, str]) -> None:
        seen.append(holder)
        log.warning(
            "%s: held by %s's pid %s on %s (another snakemake's job: --nolock?); waiting for"
            " it to end",
            place, job, *holder,
        )  # fmt: skip

    fd = runlock.take(lock, wait_s=None, waiting=waiting)
    try:
        if seen and all(Path(path).exists() for path in outputs):
            pid, host = seen[0]
            log.warning(
                "%s %s: %s's pid %s on %s wrote its %d outputs while this job waited for %s;"
                " nothing written, they stand (two snakemakes ran this job: --nolock)",
                REFUSED, place, job, pid, host, len(outputs), lock,
            )  # fmt: skip
            raise SystemExit(0)
        for folder in sorted({Path(path).parent for path in outputs}):
            remove_dead_temporaries(folder, log)
        yield
    finally:
        os.close(fd)
