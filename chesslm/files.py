"""Files the pipeline trusts: sha256 digests, canonical JSON, and the one atomic writer.

Every write of state goes through ``write_atomic``: a temporary file beside the target,
flushed and fsynced, renamed over the target, then the directory fsynced, so a crash leaves
either the old file or the new one, never a torn one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

TMP_SUFFIX = ".tmp"


class UnreadableFileError(ValueError):
    """A file that is missing, truncated or not in the format it should be in."""


def sha256_file(path: Path | str, *, block: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(block):
            digest.update(chunk)
    return digest.hexdigest()


def digest_json(value: Any) -> str:
    """sha256 of a value's canonical JSON (sorted keys, no spaces)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def tmp_path(path: Path) -> Path:
    return path.with_name(path.name + TMP_SUFFIX)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path | str, write: Callable[[IO[bytes]], None]) -> None:
    """Call ``write`` on a temporary binary file, then make it ``path`` atomically."""
    path = Path(path)
    tmp = tmp_path(path)
    try:
        with open(tmp, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def write_json_atomic(path: Path | str, value: Any) -> None:
    data = (json.dumps(value, indent=2) + "\n").encode()
    write_atomic(path, lambda fh: fh.write(data))


def copy_atomic(source: Path, destination: Path) -> None:
    write_atomic(destination, lambda fh: shutil.copyfileobj(open(source, "rb"), fh))


def read_json(path: Path | str) -> dict[str, Any]:
    try:
        value = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UnreadableFileError(f"{path}: not readable JSON ({error})") from None
    if not isinstance(value, dict):
        raise UnreadableFileError(f"{path}: expected a JSON object")
    return value
