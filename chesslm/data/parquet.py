"""Lichess months as Parquet (Hugging Face ``Lichess/standard-chess-games``), read by row
group, never the whole file.

One row per game: its PGN tags as columns and its moves, with their ``[%clk]``/``[%eval]``
comments, as ``movetext``. ``read_tasks`` cuts a file into tasks (runs of whole row groups,
from its footer alone); a worker reads a task ``PIECE_GAMES`` rows at a time
(``parse_task``): the movetext column goes to the native parser as Arrow strings, and the
tags become the header dicts a PGN game gives, so both formats meet in
``parsing.parse_view``: the same games give the same dataset from either.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import rust_pgn_reader_python_binding as native

from chesslm.data import parsing
from chesslm.data.parsing import ChunkResult
from chesslm.data.settings import Settings

SUFFIX = ".parquet"
MOVETEXT = "movetext"
# the tags the converter reads (metadata.header_row, parsing.game_id); of the schema's other
# columns, UTCTime, ECO and Opening are never read
TAGS = (
    "Event",
    "Site",
    "White",
    "Black",
    "Result",
    "WhiteTitle",
    "BlackTitle",
    "WhiteElo",
    "BlackElo",
    "WhiteRatingDiff",
    "BlackRatingDiff",
    "UTCDate",
    "Termination",
    "TimeControl",
)
# rows per result a worker sends back: about the games of a 4 MiB PGN chunk
PIECE_GAMES = 4 * parsing.BATCH_GAMES
# a task holds whole row groups, at least this many rows where the file's groups are small
# (each task opens the file and reads its footer once: a millisecond or so)
TASK_GAMES = PIECE_GAMES
READ_BLOCK = 1 << 20
# a row with no moves goes to the parser as the result token alone: it drops an empty string,
# where the row must stay a game (skipped as no_moves, as a PGN game without moves is)
_NO_MOVES = "*"


class ParquetFileError(ValueError):
    """An input file cannot be read as a Lichess Parquet file (the message names the file)."""


@dataclass(frozen=True)
class Task:
    """Row groups ``row_groups`` of ``path``, ``rows`` rows in all: ``pieces`` results."""

    path: Path
    row_groups: tuple[int, ...]
    rows: int

    @property
    def pieces(self) -> int:
        return -(-self.rows // PIECE_GAMES)


def is_parquet(path: Path | str) -> bool:
    """Whether a dataset input is read as Parquet (by its name's suffix; else it is PGN)."""
    return Path(path).name.lower().endswith(SUFFIX)


def read_tasks(path: Path | str, digest: Any = None) -> Iterator[Task]:
    """The tasks of one file, in row order; the file's bytes go to ``digest.update`` (read
    in a thread beside, as a PGN file's bytes are fed as they are read).

    :raises ParquetFileError: the file is missing, not Parquet, has no rows, or lacks the
        movetext column or holds a column of a type that cannot be read.
    """
    path = Path(path)
    file = _open(path)
    columns(path, file.schema_arrow)
    if file.metadata.num_rows == 0:
        raise ParquetFileError(f"{path}: no games in it (0 rows)")
    feeder = _Feeder(path, digest) if digest is not None else None
    try:
        yield from _tasks(path, file.metadata)
    except BaseException:  # the caller stops early: no need to read the rest
        if feeder is not None:
            feeder.stop.set()
        raise
    finally:
        if feeder is not None:
            feeder.join()


def _tasks(path: Path, footer: pq.FileMetaData) -> Iterator[Task]:
    groups: list[int] = []
    rows = 0
    for group in range(footer.num_row_groups):
        groups.append(group)
        rows += footer.row_group(group).num_rows
        if rows >= TASK_GAMES:
            yield Task(path, tuple(groups), rows)
            groups, rows = [], 0
    if rows:
        yield Task(path, tuple(groups), rows)


def parse_task(task: Task, settings: Settings) -> Iterator[ChunkResult]:
    """The results of a task's rows, ``PIECE_GAMES`` rows each (``task.pieces`` of them).

    :raises ParquetFileError: where the rows are not as the file's footer said.
    """
    file = _open(task.path)
    names = columns(task.path, file.schema_arrow)
    batches = file.iter_batches(
        batch_size=PIECE_GAMES, row_groups=list(task.row_groups), columns=names, use_threads=False
    )
    done = 0
    pieces = _pieces(batches, PIECE_GAMES)
    while True:
        try:
            piece = next(pieces, None)
        except (pa.ArrowException, OSError) as error:  # a damaged page: zstd, thrift, ...
            raise ParquetFileError(
                f"{task.path}: row groups {task.row_groups[0]}..{task.row_groups[-1]} cannot be"
                f" read ({error}): the file is damaged; fetch it again"
            ) from None
        if piece is None:
            break
        done += 1
        if done > task.pieces:
            break
        yield parse_rows(piece, settings, task.path)
    if done != task.pieces:
        raise ParquetFileError(
            f"{task.path}: row groups {task.row_groups[0]}..{task.row_groups[-1]} do not hold"
            f" the {task.rows} rows its footer gives them"
        )


def parse_rows(table: pa.Table, settings: Settings, path: Path | str = "") -> ChunkResult:
    """Parse, filter, tokenise and assign splits for the games of ``table``'s rows,
    ``parsing.BATCH_GAMES`` per call of the native parser."""
    headers = header_dicts(table)
    moves = _movetext(table.column(MOVETEXT))
    parts = []
    for first in range(0, table.num_rows, parsing.BATCH_GAMES):
        batch = moves.slice(first, parsing.BATCH_GAMES)
        parsed = native.parse_games(batch, num_threads=1, chunk_multiplier=1)
        at = first
        for view in parsed.chunks:
            parts.append(parsing.parse_view(view, headers[at : at + view.num_games], settings))
            at += view.num_games
        if at != first + len(batch):
            raise ParquetFileError(
                f"{path}: the movetext of rows {first}..{first + len(batch) - 1} of a piece"
                f" reads as {at - first} games, not one per row"
            )
        del parsed  # its arrays (a board per position among them) go before the next batch's
    return ChunkResult.concat(parts)


def header_dicts(table: pa.Table) -> list[dict[str, str]]:
    """Each row's tags as PGN header text (a null is an absent tag)."""
    names = [name for name in TAGS if name in table.column_names]
    values = [_as_text(table.column(name)).to_pylist() for name in names]
    return [
        {name: value for name, value in zip(names, row, strict=True) if value is not None}
        for row in zip(*values, strict=True)
    ]


def columns(path: Path | str, schema: pa.Schema) -> list[str]:
    """The columns a conversion reads from a file of ``schema``, checked.

    :raises ParquetFileError: naming the file and the column missing or of a wrong type.
    """
    if MOVETEXT not in schema.names:
        raise ParquetFileError(
            f"{path}: no {MOVETEXT!r} column (it has {', '.join(schema.names) or 'none'}; a"
            " Lichess/standard-chess-games file has the PGN tags as columns and movetext)"
        )
    names = [name for name in TAGS if name in schema.names]
    for name in [*names, MOVETEXT]:
        kind = schema.field(name).type
        if _kind(kind) is None or (name == MOVETEXT and _kind(kind) != "text"):
            wanted = "text" if name == MOVETEXT else "text, a whole number or a date"
            raise ParquetFileError(f"{path}: column {name!r} is {kind}, not {wanted}")
    return [*names, MOVETEXT]


def _kind(kind: pa.DataType) -> str | None:
    """How a column of type ``kind`` becomes header text, or None if it cannot."""
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return "text"
    if pa.types.is_integer(kind):
        return "number"
    if pa.types.is_date(kind) or pa.types.is_timestamp(kind):
        return "date"
    return None


def _as_text(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """A column as the text of its PGN tag: numbers in digits, dates ``YYYY.MM.DD``."""
    kind = _kind(column.type)
    if kind == "number":
        return pc.cast(column, pa.string())
    if kind == "date":
        if pa.types.is_date(column.type):
            column = pc.cast(column, pa.timestamp("s"))
        return pc.strftime(column, format="%Y.%m.%d")
    return column


def _movetext(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """The movetext column with a blank or null row as ``_NO_MOVES``."""
    blank = pc.or_kleene(pc.is_null(column), pc.match_substring_regex(column, r"^\s*$"))
    return pc.if_else(blank, _repeated(_NO_MOVES, len(column), column.type), column)


def _repeated(text: str, n: int, kind: pa.DataType) -> pa.Array:
    """``n`` rows of ``text``, built from buffers: pa.scalar and pa.array import pandas
    (about half a second and 35 MB in each worker)."""
    offsets = np.arange(n + 1, dtype=np.int64) * len(text.encode())
    data = pa.py_buffer(text.encode() * n)
    array = pa.Array.from_buffers(pa.large_string(), n, [None, pa.py_buffer(offsets), data])
    return array.cast(kind)


def _pieces(batches: Iterable[pa.RecordBatch], size: int) -> Iterator[pa.Table]:
    """The rows of ``batches`` as tables of exactly ``size`` rows (the last: the rest),
    whatever sizes the reader's batches have."""
    pending: list[pa.RecordBatch] = []
    count = 0
    for batch in batches:
        while batch.num_rows:
            take = min(size - count, batch.num_rows)
            pending.append(batch.slice(0, take))
            count += take
            batch = batch.slice(take)
            if count == size:
                yield pa.Table.from_batches(pending)
                pending, count = [], 0
    if count:
        yield pa.Table.from_batches(pending)


def _open(path: Path) -> pq.ParquetFile:
    if not path.is_file():
        raise ParquetFileError(f"{path}: no such file")
    try:
        return pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as error:
        raise ParquetFileError(f"{path}: not a Parquet file ({error})") from None


class _Feeder:
    """Reads a file in a thread and gives its bytes to ``digest.update``."""

    def __init__(self, path: Path, digest: Any) -> None:
        self.path, self.digest = path, digest
        self.stop = threading.Event()
        self.error: OSError | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            with open(self.path, "rb") as fh:
                while not self.stop.is_set() and (block := fh.read(READ_BLOCK)):
                    self.digest.update(block)
        except OSError as error:
            self.error = error

    def join(self) -> None:
        """Wait for the thread; :raises ParquetFileError: if the file could not be read."""
        self.thread.join()
        if self.error is not None:
            raise ParquetFileError(f"{self.path}: cannot read ({self.error})")
