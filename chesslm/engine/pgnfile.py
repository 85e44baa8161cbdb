"""A PGN file as the texts of its games, one at a time (memory flat in the number of games),
for chesslm-analyse: plain text or zstd (by its first bytes, whatever its name says), frame
after frame.

What is wrong with the file as a whole is an ``InputError`` of one line naming it: another
compression (gzip, bzip2, xz, zip), binary data or text that does not start like PGN, zstd data
that is damaged or ends inside a frame (a truncated download; raised where it ends, after the
games before it were given). A bad byte is decoded as U+FFFD, so it spoils at most its own
game. Games are split on their tag lines before python-chess parses them, so a game it cannot
parse (or on which it raises) is that game alone: the next one starts at its own tags.
"""

from __future__ import annotations

import io
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import zstandard

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
OTHER_FORMATS = {  # first bytes -> what the file is instead
    b"\x1f\x8b": "gzip-compressed",
    b"BZh": "bzip2-compressed",
    b"\xfd7zXZ\x00": "xz-compressed",
    b"PK\x03\x04": "a zip archive",
}
READ_BYTES = 1 << 20
SNIFF_CHARS = 4096  # the text whose first line says whether the file is PGN


class InputError(ValueError):
    """The file cannot be read as PGN: one line naming it and what is wrong."""


class ZstdFrames(io.RawIOBase):
    """A zstd file's decompressed bytes, across frames; a damaged frame, or a file that ends
    inside one, raises ``InputError`` (zstandard's own stream reader ends there silently)."""

    def __init__(self, raw: io.BufferedReader, path: Path) -> None:
        self.raw, self.path = raw, path
        self.frame: zstandard.ZstdDecompressionObj | None = None
        self.pending, self.offset = b"", 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:
        while self.offset == len(self.pending):
            chunk = self.raw.read(READ_BYTES)
            if not chunk:
                if self.frame is not None and not self.frame.eof:
                    raise InputError(
                        f"{self.path}: truncated zstd data (the file ends inside a frame:"
                        " an interrupted download?); the games before it were read"
                    )
                return 0
            self.pending, self.offset = self._decompress(chunk), 0
        n = min(len(buffer), len(self.pending) - self.offset)
        buffer[:n] = self.pending[self.offset : self.offset + n]
        self.offset += n
        return n

    def _decompress(self, chunk: bytes) -> bytes:
        out = []
        try:
            while chunk:
                if self.frame is None or self.frame.eof:  # a new frame starts here
                    self.frame = zstandard.ZstdDecompressor().decompressobj()
                out.append(self.frame.decompress(chunk))
                chunk = self.frame.unused_data if self.frame.eof else b""
        except zstandard.ZstdError as error:
            raise InputError(f"{self.path}: damaged zstd data ({error})") from None
        return b"".join(out)

    def close(self) -> None:
        self.raw.close()
        super().close()


def open_text(path: Path) -> TextIO:
    """The file as text, decompressed when it is zstd; another format is an ``InputError``."""
    raw = open(path, "rb")  # noqa: SIM115 - handed to the caller's ``with``
    head = raw.peek(8)[:8]
    if head.startswith(ZSTD_MAGIC):
        stream = io.BufferedReader(ZstdFrames(raw, path), READ_BYTES)
        return io.TextIOWrapper(stream, "utf-8", errors="replace")
    raw.close()
    other = next((what for magic, what in OTHER_FORMATS.items() if head.startswith(magic)), None)
    if other:
        raise InputError(f"{path}: {other}, not PGN text nor zstd (decompress it first)")
    if path.suffix == ".zst":
        raise InputError(f"{path}: named .zst but not zstd data (no zstd frame at its start)")
    return io.TextIOWrapper(open(path, "rb"), "utf-8", errors="replace")  # noqa: SIM115


def check_start(text: str, path: Path) -> None:
    """A file's first characters: PGN starts with a tag, a move or a comment."""
    if "\x00" in text or text.count("\ufffd") > len(text) // 10:
        raise InputError(f"{path}: binary data, not PGN text")
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    if first and not first.startswith(("[", "{", ";", "%", "1.", "1 ")):
        raise InputError(f'{path}: not PGN (it starts {first[:40]!r}, not with a [Tag "..."])')


def game_texts(stream: TextIO, path: Path) -> Iterator[str]:
    """The text of each game: its tag lines and its movetext, up to the next game's tags (a
    tag line outside a ``{comment}``, after movetext)."""
    head = stream.read(SNIFF_CHARS)
    check_start(head.lstrip("\ufeff"), path)
    head += stream.readline()  # its last line whole
    lines: list[str] = []
    moves, depth = False, 0
    for line in itertools.chain(io.StringIO(head.lstrip("\ufeff")), stream):
        if depth == 0 and line.startswith("["):
            if moves:
                yield "".join(lines)
                lines, moves = [], False
        elif line.strip() and not line.startswith("%"):
            moves = True
            depth = max(0, depth + line.count("{") - line.count("}"))
        lines.append(line)
    if lines and "".join(lines).strip():
        yield "".join(lines)
