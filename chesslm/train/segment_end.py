"""The second copy of a run's weights: ``train/segment-end.pt``, the last finished segment's
``last.pt`` (torchtitan's ``keep_latest_k`` of 2, at segment granularity).

A segment overwrites ``last.pt`` at every check, so the checkpoint its next segment resumes
(the one the previous status's ``last_pt_sha256`` names) would exist once only. Once a segment's
final ``last.pt`` is on disk and verified, rank 0 copies it here (atomically, checked by its
sha256) before the status file is written; the copy of the segment before stays until then. So
a damaged, missing or replaced ``last.pt`` is restored by one ``cp -p`` without training
anything again, and a resumed segment's refusal names that command (``way_out``).
"""

from __future__ import annotations

from pathlib import Path

from chesslm import commands, files
from chesslm.model import checkpoint

NAME = "segment-end.pt"


def path(train_dir: Path) -> Path:
    """The copy's place, beside last.pt.

    >>> path(Path("results/demo/train")).as_posix()
    'results/demo/train/segment-end.pt'
    """
    return train_dir / NAME


def keep(train_dir: Path, sha: str) -> None:
    """Replace the copy by ``last.pt``, whose sha256 the saver returned (``sha``): the old copy
    goes only once the new one is on disk with the same bytes.

    :raises OSError: if the copy's bytes differ from ``last.pt``'s (naming both files)."""
    files.copy_verified(train_dir / "last.pt", path(train_dir), sha)


def way_out(train_dir: Path, intact: bool) -> str:
    """What the refusal of a damaged, missing or wrong ``last.pt`` says to do: ``intact``, the
    caller found the copy resumable (``find_resume`` accepts it in last.pt's place)."""
    last, copy = train_dir / "last.pt", path(train_dir)
    if intact:
        return f"its copy {copy} is intact: cp -p {copy} {last}, then the same command again"
    run = train_dir.parent
    return (
        f"no intact copy ({copy} is missing, damaged or of another segment): rm -r {run} &&"
        f" {commands.snakemake(run / 'results.json')} trains the run again"
    )


def damaged(error: checkpoint.CheckpointError) -> str:
    """A checkpoint's refusal without its generic advice (the way out replaces it)."""
    return str(error).removesuffix(checkpoint.DAMAGED_ADVICE).rstrip("; ")
