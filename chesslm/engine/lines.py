"""The engine's input: bytes read from its file descriptor and decoded line by line, so that
no byte (a GUI's, a bot's, a stray one) can end the thread that reads them; a line that is not
UTF-8 reaches the engine as an ``Undecodable`` it reports and goes past."""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Iterable, Iterator


class Undecodable(str):
    """An input line that is not UTF-8: the engine says so (``info string``) and goes on."""


def decoded(raw: bytes) -> str:
    """An input line as text; an ``Undecodable`` naming the bad byte if it is not UTF-8.

    >>> decoded(b"go\\r\\n")
    'go\\r\\n'
    >>> type(decoded(b"position startpos moves e2e4 \\xff\\n")).__name__
    'Undecodable'
    """
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        bad = raw[error.start : error.start + 1]
        return Undecodable(f"input line not UTF-8 (byte {bad!r} at {error.start}); ignored")


def read_lines(
    stream: Iterable[bytes],
    lines: queue.Queue[str | None],
    interrupt: threading.Event | None = None,
) -> None:
    """Feed input lines to the engine's queue; None at end of input. A ``stop`` or ``quit``
    also sets ``interrupt`` (it ends a HumanTime wait). Bytes, decoded line by line: a text
    stream decodes as the locale says, and a strict one (``PYTHONIOENCODING=utf-8:strict``)
    raised on the first byte that is not UTF-8, ending this thread and leaving the engine
    waiting for good."""
    for raw in stream:
        line = decoded(raw)
        stops = not isinstance(line, Undecodable) and line.split()[:1] in (["stop"], ["quit"])
        if interrupt is not None and stops:
            interrupt.set()
        lines.put(line)
    if interrupt is not None:
        interrupt.set()
    lines.put(None)


def byte_lines(fd: int) -> Iterator[bytes]:
    """The input's lines, read from its file descriptor with ``os.read``: a daemon thread
    blocked in ``sys.stdin.buffer`` holds the buffered reader's lock, and the interpreter,
    closing stdin at exit after ``quit``, then aborts ("could not acquire lock")."""
    pending = b""
    while chunk := os.read(fd, 1 << 16):
        *whole, pending = (pending + chunk).split(b"\n")
        yield from (line + b"\n" for line in whole)
    if pending:
        yield pending
