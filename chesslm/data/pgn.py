"""Reading PGN streams: `.pgn` or `.pgn.zst`, in chunks of whole games, never the whole file.

``read_raw_chunks`` (one process) and ``read_chunks_into`` (buffers shared with worker
processes) yield chunks that each hold whole games; ``decode_chunk`` makes one text and
``split_games`` cuts it into one string per game. They are forgiving where PGN is (CRLF, a
BOM, latin-1 bytes in headers, garbage between games: the parser counts what it cannot
read), and strict where the file itself is broken (not zstd, a truncated stream): those
raise ``PgnFileError`` with one line naming the file.
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


def is_zstd(path: Path | str) -> bool:
    """Whether a PGN file is read as zstd-compressed: by its name."""
    return Path(path).name.endswith(".zst")


class _Tee:
    """A file read through ``read`` or ``readinto``, what is read also fed to ``digest``."""

    def __init__(self, fh: Any, digest: Any) -> None:
        self.fh, self.digest = fh, digest

    def read(self, size: int = -1) -> bytes:
        block = self.fh.read(size)
        if self.digest is not None:
            self.digest.update(block)
        return block

    def readinto(self, view: memoryview) -> int:
        n = self.fh.readinto(view)
        if self.digest is not None:
            self.digest.update(bytes(view[:n]))  # a copy: the caller reuses its buffer
        return n


def _check_frames(path: Path, fh: Any) -> None:
    """Every zstd frame of ``fh`` is whole: frame and block headers are walked (RFC 8878),
    nothing is decompressed (about 3,000 seeks per GB). The fast reader below stops quietly
    where a file is cut; this check does not.

    :raises PgnFileError: naming the file, if a frame is cut or a header is not zstd's.
    """
    size, pos = path.stat().st_size, 0
    cut = PgnFileError(f"{path}: zstd stream is truncated (incomplete last frame)")
    while pos < size:
        fh.seek(pos)
        head = fh.read(8)
        magic = int.from_bytes(head[:4], "little")
        if 0x184D2A50 <= magic <= 0x184D2A5F and len(head) == 8:  # a skippable frame
            pos += 8 + int.from_bytes(head[4:8], "little")
            continue
        if magic != 0xFD2FB528:
            raise (
                PgnFileError(f"{path}: not a valid zstd stream (no frame magic at byte {pos})")
                if pos == 0 or len(head) == 8
                else cut
            )
        if len(head) < 5:
            raise cut
        descriptor = head[4]
        single = descriptor >> 5 & 1
        pos += 5 + (1 - single) + (0, 1, 2, 4)[descriptor & 3] + (single, 2, 4, 8)[descriptor >> 6]
        while True:
            fh.seek(pos)
            block = fh.read(3)
            if len(block) < 3:
                raise cut
            header = int.from_bytes(block, "little")
            kind = header >> 1 & 3
            if kind == 3:
                raise PgnFileError(f"{path}: not a valid zstd stream (bad block at byte {pos})")
            pos += 3 + (1 if kind == 1 else header >> 3)
            if header & 1:
                break
        pos += 4 * (descriptor >> 2 & 1)  # the content checksum
    if pos > size:
        raise cut
    fh.seek(0)


class _Source:
    """A PGN file's bytes, decompressed if it is ``.zst`` (zstd's stream reader decompresses
    straight into the caller's buffer, where a decompression object returns new bytes to copy
    again); ``digest`` is fed the file's bytes as they are read."""

    def __init__(self, path: Path, fh: Any, digest: Any, zstd: bool) -> None:
        self.path = path
        if zstd:
            _check_frames(path, fh)
            self.stream = zstandard.ZstdDecompressor().stream_reader(
                _Tee(fh, digest), read_size=READ_BLOCK, read_across_frames=True
            )
        else:
            self.stream = _Tee(fh, digest)
        self.pushed = b""  # bytes given back by ``unread``, read again first

    def unread(self, data: bytes) -> None:
        self.pushed = data + self.pushed

    def readinto(self, view: memoryview) -> int:
        if self.pushed:
            n = min(len(view), len(self.pushed))
            view[:n] = self.pushed[:n]
            self.pushed = self.pushed[n:]
            return n
        try:
            return self.stream.readinto(view)
        except zstandard.ZstdError as error:
            raise PgnFileError(f"{self.path}: not a valid zstd stream ({error})") from None


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
    zstd: bool | None = None,
) -> Iterator[tuple[int, int] | bytes]:
    """Whole-game chunks of ``path``, each written into a free buffer that ``take()`` names
    (it may block until a consumer gives one back): yields ``(buffer, length)``, or the
    chunk's bytes where one game alone is longer than a buffer. The consumer gives each
    yielded buffer back when done with it; a buffer left empty at the end goes to ``release``.

    One copy per byte (decompressed block into the buffer); only a cut chunk's tail, part
    of one game, is copied again into the next buffer. ``zstd``: whether the file is
    zstd-compressed (None: whether its name ends with ``.zst``).

    :raises PgnFileError: if the file is missing, not zstd, or truncated.
    """
    path = Path(path)
    if not path.is_file():
        raise PgnFileError(f"{path}: no such file")
    with open(path, "rb") as fh:
        zstd = is_zstd(path) if zstd is None else zstd
        yield from _cut(_Source(path, fh, digest, zstd), buffers, take, release, chunk_bytes)


def _cut(
    source: _Source,
    buffers: Buffers,
    take: Callable[[], int],
    release: Callable[[int], None],
    chunk_bytes: int,
) -> Iterator[tuple[int, int] | bytes]:
    mm, size = buffers.mm, buffers.size
    index, fill = take(), 0
    spill: bytearray | None = None  # a chunk that outgrew its buffer (no game start in it)
    first = True
    while True:
        if spill is not None:  # the buffer's content so far is part of one long game
            block = bytearray(READ_BLOCK)
            n = source.readinto(memoryview(block))
            if n == 0:
                break
            seen = len(spill)
            spill += memoryview(block)[:n]
            cut = _first_game_start(spill, max(0, seen - 2))
            if cut < 0:
                continue  # all of this block belongs to the long game
            yield bytes(spill[:cut])
            source.unread(bytes(spill[cut:]))  # the games after it: read as usual
            spill = None
            continue
        base = index * size
        # up to chunk_bytes; past it only while no game start has been found
        n = source.readinto(buffers.view(index, chunk_bytes if fill < chunk_bytes else size)[fill:])
        if n == 0:
            break
        fill += n
        if first and fill >= 3:
            first = False
            if mm[base : base + 3] == b"\xef\xbb\xbf":  # UTF-8 byte order mark
                mm.move(base, base + 3, fill - 3)
                fill -= 3
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


def _ends_tag_line(data: Any, i: int) -> bool:
    """Whether the line ending at the newline ``data[i]`` is a tag line (ends with "]", CRLF
    or LF): a "[" after it opens another tag of the same game, not a new game."""
    return data[i - 1 : i] == b"]" or data[i - 2 : i] == b"]\r"


def _first_game_start(data: Any, start: int) -> int:
    """Offset of the first game start in ``data`` after ``start``, or -1 (as below)."""
    i = data.find(b"\n[", start)
    while i > 0 and _ends_tag_line(data, i):
        i = data.find(b"\n[", i + 1)
    return i + 1 if i > 0 else -1


def _last_game_start(data: Any, start: int = 0, end: int | None = None) -> int:
    """Offset of the last game start in ``data[start:end]`` (a line opening with ``[`` after
    a line that is not a tag line), or -1. ``data`` is bytes, a bytearray or an mmap."""
    end = len(data) if end is None else end
    i = data.rfind(b"\n[", start, end)
    while i > start and _ends_tag_line(data, i):
        i = data.rfind(b"\n[", start, i)
    return i + 1 if i > start else -1


def decode_chunk(data: bytes | memoryview) -> str:
    """A raw chunk as text: CRLF turned into LF; a stray latin-1 byte in a header must not
    lose the game (moves are ASCII)."""
    text = codecs.decode(data, "utf-8", "replace")
    # looking for a CR is a memchr; replace scans slower even when there is nothing to replace
    return text.replace("\r\n", "\n") if "\r" in text else text


def split_games(chunk: str) -> list[str]:
    """One string per game (headers and movetext); blank pieces dropped."""
    starts = [0, *(m.start() + 1 for m in _GAME_START.finditer(chunk, 1)), len(chunk)]
    pieces = (chunk[a:b] for a, b in zip(starts, starts[1:], strict=False))
    return [p for p in pieces if p.strip()]
