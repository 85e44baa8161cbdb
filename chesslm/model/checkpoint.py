"""The checkpoint file format: atomic save, verify, safe load (what training, play, the
export, the comparison and the UCI engine read a checkpoint with).

A checkpoint is one dict of tensors and plain containers; ``load`` needs ``model`` (the
state_dict), ``cursor`` and ``identity`` (the model's preset and conditioning are in it);
what else a training checkpoint holds, and what its identity is, is
``chesslm.train.checkpoint``'s.

On disk a checkpoint is one line of header, ``chesslm-checkpoint-v1 sha256=<hex>\n``, followed
by the ``torch.save`` bytes, whose sha256 the header holds. The digest travels in the same file,
so the one atomic rename that publishes a checkpoint publishes its digest too: a kill at any
moment leaves either the old verified file or the new one. ``load`` checks the digest before
anything is unpickled, so a damaged file is reported as corruption, never fed to ``torch.load``;
and ``torch.load(weights_only=True)`` then refuses a file that would unpickle code or arbitrary
objects, so nothing in it runs.
"""

from __future__ import annotations

import hashlib
import io
import pickle
from pathlib import Path
from typing import IO, Any

from chesslm import files
from chesslm.files import sha256_file


class CheckpointError(ValueError):
    """A checkpoint that cannot or must not be loaded."""


HEADER_PREFIX = b"chesslm-checkpoint-v1 sha256="
HEADER_SIZE = len(HEADER_PREFIX) + 64 + 1  # prefix, hex digest, newline
DAMAGED_ADVICE = (
    "do not resume from it; restore an intact copy, or remove the run directory to train again"
)


class _HashingWriter:
    """A write-only file that hashes what ``torch.save`` streams through it."""

    def __init__(self, fh: IO[bytes]) -> None:
        self.fh, self.digest = fh, hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        return self.fh.write(data)

    def flush(self) -> None:
        self.fh.flush()


class _Body(io.RawIOBase):
    """The checkpoint file seen from the end of its header on: what ``torch.load`` reads."""

    def __init__(self, fh: IO[bytes]) -> None:
        self.fh = fh
        fh.seek(HEADER_SIZE)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        return self.fh.readinto(buffer)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        offset += HEADER_SIZE if whence == io.SEEK_SET else 0
        return self.fh.seek(offset, whence) - HEADER_SIZE

    def tell(self) -> int:
        return self.fh.tell() - HEADER_SIZE


def save(path: Path, payload: dict[str, Any]) -> str:
    """Write ``payload`` and its digest atomically, in one file; returns the file's sha256."""

    import torch  # here, not at the top: the workflow's plan verifies checkpoints without torch

    def write(fh: IO[bytes]) -> None:
        fh.write(b"\0" * HEADER_SIZE)  # the digest is known only after the body
        body = _HashingWriter(fh)
        torch.save(payload, body)
        fh.seek(0)
        fh.write(HEADER_PREFIX + body.digest.hexdigest().encode() + b"\n")
        fh.seek(0, io.SEEK_END)

    files.write_atomic(path, write)
    return sha256_file(path)


def digest(path: Path | str) -> str:
    """The sha256 written in a checkpoint's header (of its body), read without the body: two
    files with the same digest that both ``verify`` hold the same checkpoint."""
    with open(path, "rb") as fh:
        header = fh.read(HEADER_SIZE)
    return header[len(HEADER_PREFIX) : -1].decode(errors="replace")


def _check_header(path: Path | str, header: bytes) -> None:
    """Refuse a file without this project's digest header before reading its body."""
    if header.startswith(HEADER_PREFIX) and header.endswith(b"\n"):
        return
    if header.startswith(b"PK\x03\x04"):
        raise CheckpointError(
            f"{path}: a bare torch.save file without the chesslm digest header (written by an"
            " older chesslm or by another program), so it cannot be verified; refused"
        )
    raise CheckpointError(
        f"{path}: corrupt checkpoint: its digest header is damaged or missing; " + DAMAGED_ADVICE
    )


def verify(path: Path | str) -> None:
    """Check a checkpoint's body against the digest in its header, unpickling nothing.

    :raises CheckpointError: naming the file, if it is missing, torn, damaged or has no header.
    """
    if Path(path).exists() and not Path(path).is_file():  # a device or a pipe has no end
        raise CheckpointError(f"{path}: not a checkpoint file (not a regular file)")
    try:
        with open(path, "rb") as fh:
            header = fh.read(HEADER_SIZE)
            _check_header(path, header)
            digest = hashlib.sha256()
            while chunk := fh.read(1 << 20):
                digest.update(chunk)
    except OSError as error:
        raise CheckpointError(f"{path}: not a readable checkpoint ({error.strerror})") from None
    written = header[len(HEADER_PREFIX) : -1]
    if digest.hexdigest().encode() != written:
        raise CheckpointError(
            f"{path}: corrupt checkpoint: the sha256 of its contents does not match the digest"
            f" written with it (damaged since it was saved); {DAMAGED_ADVICE}"
        )


def _refused_part(error: pickle.UnpicklingError) -> str:
    """What torch's weights_only unpickler refused (its line naming the GLOBAL, first sentence),
    without its advice to load the file with ``weights_only=False``, which would run it.

    >>> _refused_part(pickle.UnpicklingError("Weights only load failed. Re-running `torch.load`"
    ...     " with `weights_only` set to `False` will likely succeed.\\n\\nUnsupported global:"
    ...     " GLOBAL x.y was not an allowed global by default. Please use add_safe_globals"))
    'Unsupported global: GLOBAL x.y was not an allowed global by default'
    """
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    named = [line for line in lines if "GLOBAL" in line or "nsupported" in line]
    if not named:  # a message of another shape: its lines that do not mention weights_only
        named = [line for line in lines if "weights_only" not in line] or [type(error).__name__]
    return named[0].split(". ")[0].rstrip(".")


def load(path: Path | str) -> dict[str, Any]:
    """Verify a checkpoint (``verify``), then read it onto the CPU without unpickling anything
    but tensors and containers.

    :raises CheckpointError: if the file is damaged or unreadable or holds pickled objects or code.
    """
    import torch

    verify(path)
    try:
        with open(path, "rb") as fh:
            payload = torch.load(_Body(fh), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        raise CheckpointError(
            f"{path}: refused: the checkpoint holds pickled objects that weights_only=True does not"
            f" allow (nothing was executed): {_refused_part(error)}"
        ) from None
    except Exception as error:  # verified bytes that torch cannot read: not ours, or a bug
        raise CheckpointError(f"{path}: not a readable checkpoint ({error!r})") from None
    if not isinstance(payload, dict) or not {"model", "cursor", "identity"} <= set(payload):
        raise CheckpointError(f"{path}: not a chesslm checkpoint (keys missing)")
    return payload
