"""The input formats a dataset reads, one row each (``TABLE``): how a file is recognised, how
the reader cuts it into chunks, how a worker parses a chunk into results, and how a message
names a place in it. The conversion's processes (chesslm.data.workers) take a file's row
(``of``) and go through it: they never ask which format a file is.

The rows, first match wins: Parquet (``.parquet``, Lichess's Hugging Face months, cut into
tasks of whole row groups that a worker reads itself; a damaged page names its row groups, a
damage warning numbers rows), zstd-compressed PGN (``.zst``) and PGN (any other name), cut
into text of whole games written into a shared buffer (``Pool``); a warning numbers games.

A CSV source would be one row here and the module that reads it: ``chesslm/data/csv.py``
(cut a file into tasks of rows, and turn a task's rows into the header dicts and movetext
that ``parsing.parse_view`` takes, as parquet.py does), ``TABLE``'s row in this file, its
line in docs/data.md and config/README.md (``inputs``), and its test; workers.py and
convert.py stay as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chesslm.data import parquet, pgn
from chesslm.data.parsing import ChunkResult, parse_chunk
from chesslm.data.settings import Settings


@dataclass(frozen=True)
class Pool:
    """The buffers PGN chunks pass through (``pgn.Buffers``): ``take()`` names a free one,
    waiting until a worker gives one back; ``give(index)`` frees one."""

    buffers: pgn.Buffers
    take: Callable[[], int]
    give: Callable[[int], None]

    @classmethod
    def private(cls, size: int) -> Pool:
        """One buffer of this process's own, reused for every chunk: each chunk is parsed
        (its text copied out) before the next is read into it."""
        return cls(pgn.Buffers(1, size, shared=False), lambda: 0, lambda _: None)


@dataclass(frozen=True)
class Format:
    """One input format: a row of ``TABLE``."""

    name: str
    recognises: Callable[[Path], bool]  # by the file's name
    places: str  # what a damage warning numbers in a file of it ("games", "rows")
    error: type[ValueError]  # what reading a bad file raises: one line naming the file
    # (path, pool, digest, chunk_bytes) -> the file's chunks, in order, its bytes to digest
    cut: Callable[[Path, Pool, Any, int], Iterator[Any]]
    pieces: Callable[[Any], int]  # the results one chunk gives (each takes a number)
    parse: Callable[[Any, Pool, Settings], Iterator[ChunkResult]]  # a chunk's results
    where: Callable[[Any, int], str]  # (chunk, its first number) -> its place, for a message


def _pgn_cut(zstd: bool) -> Callable[[Path, Pool, Any, int], Iterator[Any]]:
    def cut(path: Path, pool: Pool, digest: Any, chunk_bytes: int) -> Iterator[Any]:
        return pgn.read_chunks_into(
            path, pool.buffers, pool.take, pool.give, chunk_bytes=chunk_bytes, digest=digest,
            zstd=zstd,
        )  # fmt: skip

    return cut


def _pgn_parse(chunk: tuple[int, int] | bytes, pool: Pool, settings: Settings):
    """A PGN chunk's one result: ``(buffer, length)`` in the pool, or bytes (one game longer
    than a buffer)."""
    if isinstance(chunk, tuple):
        index, length = chunk
        text = pgn.decode_chunk(pool.buffers.view(index, length))
        pool.give(index)  # the text is this process's own copy now
    else:
        text = pgn.decode_chunk(chunk)
    yield parse_chunk(text, settings)


def _parquet_cut(path: Path, pool: Pool, digest: Any, chunk_bytes: int) -> Iterator[Any]:
    return parquet.read_tasks(path, digest)  # a worker reads the rows: no buffer


def _row_groups(task: parquet.Task, seq: int) -> str:
    return f"row groups {task.row_groups[0]}..{task.row_groups[-1]}"


def _pgn(name: str, recognises: Callable[[Path], bool], zstd: bool) -> Format:
    return Format(
        name=name,
        recognises=recognises,
        places="games",
        error=pgn.PgnFileError,
        cut=_pgn_cut(zstd),
        pieces=lambda chunk: 1,
        parse=_pgn_parse,
        where=lambda chunk, seq: f"chunk {seq}",
    )


TABLE: tuple[Format, ...] = (
    Format(
        name="Parquet",
        recognises=parquet.is_parquet,
        places="rows",
        error=parquet.ParquetFileError,
        cut=_parquet_cut,
        pieces=lambda task: task.pieces,
        parse=lambda task, pool, settings: parquet.parse_task(task, settings),
        where=_row_groups,
    ),
    _pgn("zstd PGN", pgn.is_zstd, zstd=True),
    _pgn("PGN", lambda path: True, zstd=False),  # any other name: PGN text
)
# what reading an input may raise, each naming its file
ERRORS: tuple[type[ValueError], ...] = tuple(dict.fromkeys(row.error for row in TABLE))


def of(path: Path | str) -> Format:
    """The row ``path`` is read by: the first that recognises its name."""
    return next(row for row in TABLE if row.recognises(Path(path)))
