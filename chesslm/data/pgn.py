"""Reading PGN streams: `.pgn` or `.pgn.zst`, in chunks of whole games, never the whole file.

``read_chunks`` yields text chunks that each hold whole games; ``split_games`` cuts a chunk
into one string per game. Both are forgiving where PGN is (CRLF, a BOM, latin-1 bytes in
headers, garbage between games: the parser counts what it cannot read), and strict where
the file itself is broken (not zstd, a truncated stream): those raise ``PgnFileError``
with one line naming the file.
"""

from __future__ import annotations

import codecs
import mmap
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import zstandard

READ_BLOCK = 1 << 20

# A game starts at a line opening with "[" whose previous line is blank or not a tag line
# (tag lines end with "]"): one match per game, the tag lines inside it never match.
_GAME_START = re.compile(r"\n(?<!\]\n)\[")


class PgnFileError(ValueError):
    """An input file cannot be read as PGN at all (the message names the file)."""


def _raw_blocks(path: Path, digest: Any = None) -> Iterator[bytes]:
    """Decompressed bytes of a file, block by block; zstd streams of many frames too.

    ``digest`` (a hashlib object), if given, is fed the file's bytes as they are read.
    """
    with open(path, "rb") as fh:
        if not path.name.endswith(".zst"):
            while block := fh.read(READ_BLOCK):
                if digest is not None:
                    digest.update(block)
                yield block
            return
        decompressor = zstandard.ZstdDecompressor()
        frame = decompressor.decompressobj()
        seen_input = False
        while block := fh.read(READ_BLOCK):
            if digest is not None:
                digest.update(block)
            seen_input = True
            while block:
                try:
                    out = frame.decompress(block)
                except zstandard.ZstdError as error:
                    raise PgnFileError(f"{path}: not a valid zstd stream ({error})") from None
                if out:
                    yield out
                if not frame.eof:
                    break
                block = frame.unused_data  # the next frame starts here
                frame = decompressor.decompressobj()
                if not block:
                    seen_input = False  # a clean frame boundary at the end is complete
        if seen_input and not frame.eof:
            raise PgnFileError(f"{path}: zstd stream is truncated (incomplete last frame)")


def read_chunks(
    path: Path | str, *, chunk_bytes: int = 4 << 20, digest: Any = None
) -> Iterator[str]:
    """Text of whole games, about ``chunk_bytes`` at a time, with CRLF turned into LF.

    :raises PgnFileError: if the file is missing, not zstd, or truncated.
    """
    for chunk in read_raw_chunks(path, chunk_bytes=chunk_bytes, digest=digest):
        yield decode_chunk(chunk)


def read_raw_chunks(
    path: Path | str, *, chunk_bytes: int = 4 << 20, digest: Any = None
) -> Iterator[bytes]:
    """Bytes of whole games, about ``chunk_bytes`` at a time, cut only where a game starts.

    The cheap half of reading (decompress, find a cut): ``decode_chunk`` does the rest, in
    whichever process parses the chunk.

    :raises PgnFileError: if the file is missing, not zstd, or truncated.
    """
    buffers = Buffers(1, 2 * chunk_bytes, shared=False)
    chunks = read_chunks_into(
        path, buffers, lambda: 0, lambda _: None, chunk_bytes=chunk_bytes, digest=digest
    )
    for chunk in chunks:
        yield chunk if isinstance(chunk, bytes) else buffers.mm[: chunk[1]]


class Buffers:
    """``count`` buffers of ``size`` bytes in one mapping; shared with processes forked after
    it is made (anonymous and shared: no file, no /dev/shm), so a chunk passes from the
    reader to a worker without pickling or a pipe."""

    def __init__(self, count: int, size: int, *, shared: bool = True) -> None:
        self.count, self.size = count, size
        flags = mmap.MAP_SHARED if shared else mmap.MAP_PRIVATE
        self.mm = mmap.mmap(-1, count * size, flags=flags | mmap.MAP_ANONYMOUS)

    def view(self, index: int, length: int) -> memoryview:
        start = index * self.size
        return memoryview(self.mm)[start : start + length]


def read_chunks_into(
    path: Path | str,
    buffers: Buffers,
    take: Callable[[], int],
    release: Callable[[int], None],
    *,
    chunk_bytes: int = 4 << 20,
    digest: Any = None,
) -> Iterator[tuple[int, int] | bytes]:
    """Whole-game chunks of ``path``, each written into a free buffer that ``take()`` names
    (it may block until a consumer gives one back): yields ``(buffer, length)``, or the
    chunk's bytes where one game alone is longer than a buffer. The consumer gives each
    yielded buffer back when done with it; a buffer left empty at the end goes to ``release``.

    One copy per byte (decompressed block into the buffer); only a cut chunk's tail, part
    of one game, is copied again into the next buffer.

    :raises PgnFileError: if the file is missing, not zstd, or truncated.
    """
    path = Path(path)
    if not path.is_file():
        raise PgnFileError(f"{path}: no such file")
    mm, size = buffers.mm, buffers.size
    index, fill = take(), 0
    spill: bytearray | None = None  # a chunk that outgrew its buffer (no game start in it)
    first = True
    for block in _raw_blocks(path, digest):
        if first:
            block = block.removeprefix(b"\xef\xbb\xbf")  # UTF-8 byte order mark
            first = False
        data = memoryview(block)
        while data:
            if spill is not None:  # the buffer's content so far is part of one long game
                seen = len(spill)
                spill += data
                cut = _first_game_start(spill, max(0, seen - 2))
                if cut < 0:
                    break  # all of this block belongs to the long game
                yield bytes(spill[:cut])
                data, spill = memoryview(bytes(spill[cut:])), None  # the rest: as usual
                continue
            base = index * size
            n = min(len(data), size - fill)
            mm[base + fill : base + fill + n] = data[:n]
            fill, data = fill + n, data[n:]
            if fill < chunk_bytes and fill < size:
                continue
            cut = _last_game_start(mm, base, base + fill)
            if cut > base:
                yield index, cut - base
                tail = mm[cut : base + fill]
                index, fill = take(), len(tail)
                buffers.view(index, fill)[:] = tail
            elif fill == size:  # no game starts in a whole buffer: keep it in memory instead
                spill, fill = bytearray(mm[base : base + fill]), 0
    base = index * size
    if spill is not None and spill.strip():
        yield bytes(spill)
    if spill is None and mm[base : base + fill].strip():
        yield index, fill
    else:
        release(index)


def _first_game_start(data: Any, start: int) -> int:
    """Offset of the first game start in ``data`` after ``start``, or -1 (as below)."""
    i = data.find(b"\n[", start)
    while i > 0 and (data[i - 1 : i] == b"]" or data[i - 2 : i] == b"]\r"):
        i = data.find(b"\n[", i + 1)
    return i + 1 if i > 0 else -1


def _last_game_start(data: Any, start: int = 0, end: int | None = None) -> int:
    """Offset of the last game start in ``data[start:end]`` (a line opening with ``[`` after
    a line that is not a tag line, CRLF or LF), or -1. ``data`` is bytes or an mmap."""
    end = len(data) if end is None else end
    i = data.rfind(b"\n[", start, end)
    while i > start and (data[i - 1 : i] == b"]" or data[i - 2 : i] == b"]\r"):
        i = data.rfind(b"\n[", start, i)
    return i + 1 if i > start else -1


def decode_chunk(data: bytes | memoryview) -> str:
    """A raw chunk as text: CRLF turned into LF; a stray latin-1 byte in a header must not
    lose the game (moves are ASCII)."""
    return codecs.decode(data, "utf-8", "replace").replace("\r\n", "\n")


def split_games(chunk: str) -> list[str]:
    """One string per game (headers and movetext); blank pieces dropped."""
    starts = [0, *(m.start() + 1 for m in _GAME_START.finditer(chunk, 1)), len(chunk)]
    pieces = (chunk[a:b] for a, b in zip(starts, starts[1:], strict=False))
    return [p for p in pieces if p.strip()]
