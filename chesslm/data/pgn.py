"""Reading PGN streams: `.pgn` or `.pgn.zst`, in chunks of whole games, never the whole file.

``read_chunks`` yields text chunks that each hold whole games; ``split_games`` cuts a chunk
into one string per game. Both are forgiving where PGN is (CRLF, a BOM, latin-1 bytes in
headers, garbage between games: the parser counts what it cannot read), and strict where
the file itself is broken (not zstd, a truncated stream): those raise ``PgnFileError``
with one line naming the file.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import zstandard

READ_BLOCK = 1 << 20

# A game starts at a line opening with "[" whose previous line is blank or not a tag line
# (tag lines end with "]"). Candidates are found by the literal "\n[" (fast), then filtered.
_LINE_BRACKET = re.compile(r"\n\[")


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
    path = Path(path)
    if not path.is_file():
        raise PgnFileError(f"{path}: no such file")
    blocks: list[bytes] = []
    size = 0
    first = True
    for block in _raw_blocks(path, digest):
        if first:
            block = block.removeprefix(b"\xef\xbb\xbf")  # UTF-8 byte order mark
            first = False
        blocks.append(block)
        size += len(block)
        if size < chunk_bytes:
            continue
        pending = b"".join(blocks)
        cut = _last_game_start(pending)
        if cut > 0:
            yield pending[:cut]
            pending = pending[cut:]
        blocks, size = [pending], len(pending)
    pending = b"".join(blocks)
    if pending.strip():
        yield pending


def _last_game_start(data: bytes) -> int:
    """Offset of the last game start in ``data`` (a line opening with ``[`` after a line
    that is not a tag line, CRLF or LF), or -1."""
    i = data.rfind(b"\n[")
    while i > 0 and (data[i - 1 : i] == b"]" or data[i - 2 : i] == b"]\r"):
        i = data.rfind(b"\n[", 0, i)
    return i + 1 if i > 0 else -1


def decode_chunk(data: bytes) -> str:
    """A raw chunk as text: CRLF turned into LF; a stray latin-1 byte in a header must not
    lose the game (moves are ASCII)."""
    return data.replace(b"\r\n", b"\n").decode("utf-8", errors="replace")


def split_games(chunk: str) -> list[str]:
    """One string per game (headers and movetext); blank pieces dropped."""
    starts = [0]
    for match in _LINE_BRACKET.finditer(chunk):
        i = match.start()
        if i > 0 and chunk[i - 1] != "]":
            starts.append(i + 1)
    starts.append(len(chunk))
    pieces = (chunk[a:b] for a, b in zip(starts, starts[1:], strict=False))
    return [p for p in pieces if p.strip()]
