"""PGN games written as a Parquet file in the Hugging Face ``Lichess/standard-chess-games``
schema (its dataset card: the tags as columns, Elo and RatingDiff int16, UTCDate date32,
UTCTime time32[s], the moves with their comments as ``movetext``), with pyarrow.

What a game has no tag for is null. The schema has one date, UTCDate: a game without it (the
sample's 297 games of 2017 carry only ``Date``) gets its Date there, as the converter's date
rule reads them (UTCDate, else Date). The movetext is the game's text after its tags, its
lines joined by spaces.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

SCHEMA = pa.schema(
    [
        ("Event", pa.string()),
        ("Site", pa.string()),
        ("White", pa.string()),
        ("Black", pa.string()),
        ("Result", pa.string()),
        ("WhiteTitle", pa.string()),
        ("BlackTitle", pa.string()),
        ("WhiteElo", pa.int16()),
        ("BlackElo", pa.int16()),
        ("WhiteRatingDiff", pa.int16()),
        ("BlackRatingDiff", pa.int16()),
        ("UTCDate", pa.date32()),
        ("UTCTime", pa.time32("s")),
        ("ECO", pa.string()),
        ("Opening", pa.string()),
        ("Termination", pa.string()),
        ("TimeControl", pa.string()),
        ("movetext", pa.string()),
    ]
)
_TAG = re.compile(r'^\[(\w+) "(.*)"\]\s*$', re.M)
_NUMBER = re.compile(r"[+-]?\d+")


def row(game: str) -> dict[str, object]:
    """One game's row (``game``: its PGN text, tags then moves)."""
    head, _, moves = game.strip().partition("\n\n")
    tags = dict(_TAG.findall(head))
    out: dict[str, object] = {}
    for field in SCHEMA:
        text = tags.get(field.name)
        if field.type == pa.int16():
            out[field.name] = int(text) if text and _NUMBER.fullmatch(text) else None
        elif field.name == "UTCDate":
            out[field.name] = _date(text) or _date(tags.get("Date"))
        elif field.name == "UTCTime":
            out[field.name] = _time(text)
        elif field.name == "movetext":
            out[field.name] = " ".join(moves.split("\n")).strip()
        else:
            out[field.name] = text
    return out


def _date(text: str | None) -> datetime.date | None:
    try:
        return datetime.datetime.strptime(text or "", "%Y.%m.%d").date()
    except ValueError:
        return None


def _time(text: str | None) -> datetime.time | None:
    try:
        return datetime.datetime.strptime(text or "", "%H:%M:%S").time()
    except ValueError:
        return None


def write(
    games: Iterable[str], path: Path, *, row_group_games: int = 1000, compression: str = "zstd"
) -> Path:
    """``games`` (PGN text each) as a Parquet file of row groups of ``row_group_games``."""
    with pq.ParquetWriter(path, SCHEMA, compression=compression) as writer:
        for block in _blocks(games, row_group_games):
            table = pa.Table.from_pylist([row(g) for g in block], schema=SCHEMA)
            writer.write_table(table, row_group_size=row_group_games)
    return path


def _blocks(games: Iterable[str], size: int) -> Iterator[list[str]]:
    block: list[str] = []
    for game in games:
        block.append(game)
        if len(block) == size:
            yield block
            block = []
    if block:
        yield block
