"""Files the pipeline trusts: sha256 digests, canonical JSON, and the one atomic writer.

Every write of state goes through ``write_atomic``: a temporary file beside the target,
flushed and fsynced, renamed over the target, then the directory fsynced, so a crash leaves
either the old file or the new one, never a torn one. A write that runs out of space raises
``DiskFullError`` naming the file and the cause (NumPy and torch report a full disk as a bare
"N requested and M written" or an "unexpected pos" that name neither).

A temporary's name is its writer's own (``.NAME.PID.RANDOM.tmp``): two writers of one file at
once (two ``--nolock`` snakemakes) never write, rename or remove each other's temporary, and
``stale_temporaries`` tells a dead writer's leftovers from a live writer's file. A command
that writes calls ``unwind_on_signals`` first, so that a SIGTERM (a user's ``kill``, a
scheduler's, snakemake's own stop) removes its temporaries as Ctrl-C's KeyboardInterrupt does;
a SIGKILL leaves them to the next run's sweep (``remove_stale_temporaries``). A long loop calls
``stop_if_signalled`` once a unit of work: the exception a signal raises is lost when it lands
in a finalizer (CPython prints "Exception ignored" and carries on), and the loop raises it again.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import resource
import secrets
import shutil
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

TMP_SUFFIX = ".tmp"


class UnreadableFileError(ValueError):
    """A file that is missing, truncated or not in the format it should be in."""


class DiskFullError(OSError):
    """A write that ran out of space or hit the file-size limit; its text names the file."""

    def __str__(self) -> str:
        return str(self.strerror)


SHORT_WRITE = re.compile(r"(\d+) requested and (\d+) written")  # NumPy's fwrite failure


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


# .NAME.PID.RANDOM.tmp; NAME.tmp: the shared name used before (its writer unknown)
TMP_NAME = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)\.[0-9a-f]{8}\.tmp$")


def tmp_path(path: Path) -> Path:
    """A temporary beside ``path`` that is this writer's alone (pid and a random part)."""
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}{TMP_SUFFIX}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def stale_temporaries(directory: Path, name: str | None = None) -> list[Path]:
    """The temporaries in ``directory`` (of target ``name``, else of any) whose writers have
    exited on this host (a killed or failed write's leftovers), or that carry the shared name
    of before; a live writer's stays out. (A run's directory is written from one host.)"""
    stale = []
    for path in sorted(directory.glob(f"*{TMP_SUFFIX}")):
        match = TMP_NAME.match(path.name)
        if name is not None and (match is None or match["name"] != name):
            if path.name != name + TMP_SUFFIX:
                continue
        if match is None or not _alive(int(match["pid"])):
            stale.append(path)
    return stale


def remove_stale_temporaries(directory: Path, name: str | None = None) -> list[Path]:
    """Delete ``stale_temporaries`` (files and folders); those deleted."""
    stale = stale_temporaries(directory, name) if directory.is_dir() else []
    for path in stale:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    return stale


_signalled: list[int] = []  # the SIGTERM or SIGINT received, for stop_if_signalled


def unwind_on_signals() -> None:
    """SIGTERM raises ``SystemExit`` (status 143, as the signal's own) in the main thread: the
    process unwinds, each ``open_atomic`` removing its temporary, instead of dying where it
    stands; SIGINT raises ``KeyboardInterrupt`` as Python's own handler does. Both are kept
    for ``stop_if_signalled``."""
    signal.signal(signal.SIGTERM, _terminated)
    signal.signal(signal.SIGINT, _interrupted)


def _terminated(signum: int, frame: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends it at once
    _signalled.append(signum)
    raise SystemExit(128 + signum)


def _interrupted(signum: int, frame: Any) -> None:
    _signalled.append(signum)
    raise KeyboardInterrupt


def stop_if_signalled() -> None:
    """Raise again what a SIGTERM or SIGINT received raised, if the process is still here (the
    first raise landed in a finalizer, which swallows it)."""
    if _signalled:
        _raise = _terminated if _signalled[0] == signal.SIGTERM else _interrupted
        _raise(_signalled[0], None)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def open_atomic(path: Path | str, mode: str = "wb", **kwargs: Any) -> Iterator[IO[Any]]:
    """``path`` written through a temporary file beside it, flushed, fsynced and renamed over
    ``path`` when the block ends without an error (else removed), then the directory fsynced:
    for a file written as it goes (``write_atomic`` for one written at once)."""
    path = Path(path)
    tmp = tmp_path(path)
    try:
        with open(tmp, mode, **kwargs) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as error:
        written = tmp.stat().st_size if tmp.exists() else 0
        tmp.unlink(missing_ok=True)
        full = out_of_space(path, error, written)
        if full is not None:
            raise full from error
        raise
    fsync_dir(path.parent)


def write_atomic(path: Path | str, write: Callable[[IO[bytes]], None]) -> None:
    """Call ``write`` on a temporary binary file, then make it ``path`` atomically."""
    with open_atomic(path) as fh:
        write(fh)


def out_of_space(path: Path, error: BaseException, written: int) -> DiskFullError | None:
    """``error`` (or an exception it wraps) worded as a ``DiskFullError`` naming ``path``, if
    it is one of running out of space; else None. ``written``: the bytes that made it."""
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    at_limit = limit != resource.RLIM_INFINITY and written >= limit
    seen: BaseException | None = error
    while seen is not None:
        code = getattr(seen, "errno", None) if isinstance(seen, OSError) else None
        short = SHORT_WRITE.search(str(seen)) if isinstance(seen, OSError) else None
        if code == errno.EFBIG or (code is None and short and at_limit):
            return DiskFullError(
                errno.EFBIG,
                f"{path}: file too large: the write stopped at {written} bytes, the process's"
                " file-size limit (ulimit -f); raise the limit, then run the step again",
            )
        if code in (errno.ENOSPC, errno.EDQUOT) or (code is None and short):
            try:
                free = f"{shutil.disk_usage(path.parent).free} bytes"
            except OSError:
                free = "unknown"
            return DiskFullError(
                errno.ENOSPC,
                f"{path}: disk full: {written} bytes were written before the filesystem filled"
                f" (free in {path.parent} once the partial file was removed: {free});"
                " free space, then run the step again",
            )
        seen = seen.__cause__ or seen.__context__
    return None


def write_json_atomic(path: Path | str, value: Any) -> None:
    data = (json.dumps(value, indent=2) + "\n").encode()
    write_atomic(path, lambda fh: fh.write(data))


def copy_atomic(source: Path, destination: Path) -> None:
    write_atomic(destination, lambda fh: shutil.copyfileobj(open(source, "rb"), fh))


def copy_verified(source: Path, destination: Path, sha: str) -> None:
    """``copy_atomic``, then the copy checked against ``sha`` (its source's sha256): a second
    copy of a file, kept to restore it from, must hold the same bytes.

    :raises OSError: naming both files if the copy's sha256 differs."""
    copy_atomic(source, destination)
    if (copied := sha256_file(destination)) != sha:
        raise OSError(f"{destination}: sha256 {copied} after copying {source} ({sha})")


def read_json(path: Path | str) -> dict[str, Any]:
    try:
        value = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UnreadableFileError(f"{path}: not readable JSON ({error})") from None
    if not isinstance(value, dict):
        raise UnreadableFileError(f"{path}: expected a JSON object")
    return value


def lookup(record: dict[str, Any], dotted: str) -> Any:
    """``record["a"]["b"]`` for ``"a.b"``; None where a level is missing."""
    value: Any = record
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value
