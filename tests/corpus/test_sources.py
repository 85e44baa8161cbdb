"""The input formats' table (chesslm.data.sources): every row is chosen by its file's name,
and cut and parsed through its row alone, each gives the same games from the same PGN."""

from __future__ import annotations

import numpy as np
import pytest
import zstandard

from chesslm.data import parquet, parsing, pgn, sources
from chesslm.data.settings import Settings
from tests import lichess_parquet
from tests.helpers import first_games_pgn


@pytest.mark.parametrize(
    ("name", "row"),
    [
        ("june.parquet", "Parquet"),
        ("JUNE.PARQUET", "Parquet"),
        ("june.pgn.zst", "zstd PGN"),
        ("june.pgn", "PGN"),
        ("june.txt", "PGN"),  # any other name is read as PGN text, as before the table
    ],
)
def test_a_file_is_read_by_the_row_its_name_picks(name, row):
    assert sources.of(name).name == row


def _files(tmp_path, text: str) -> dict[str, object]:
    """The same games as a file of each row's format."""
    plain = tmp_path / "games.pgn"
    plain.write_text(text)
    packed = tmp_path / "games.pgn.zst"
    packed.write_bytes(zstandard.ZstdCompressor().compress(text.encode()))
    table = tmp_path / "games.parquet"
    lichess_parquet.write(pgn.split_games(text), table, row_group_games=40)
    return {"PGN": plain, "zstd PGN": packed, "Parquet": table}


def test_every_row_cuts_and_parses_the_same_games(tmp_path, monkeypatch):
    monkeypatch.setattr(parquet, "PIECE_GAMES", 30)  # several tasks and pieces per file
    monkeypatch.setattr(parquet, "TASK_GAMES", 60)
    files = _files(tmp_path, first_games_pgn(150))
    assert set(files) == {row.name for row in sources.TABLE}  # a new row needs its file here
    settings = Settings()
    expected = parsing.parse_chunk(pgn.decode_chunk(files["PGN"].read_bytes()), settings)
    for row in sources.TABLE:
        path = files[row.name]
        assert sources.of(path) is row
        pool = sources.Pool.private(1 << 14)  # small: several chunks per file
        results, pieces = [], 0
        for chunk in row.cut(path, pool, None, 1 << 13):
            pieces += row.pieces(chunk)
            results += list(row.parse(chunk, pool, settings))
        assert pieces == len(results) > 1, row.name
        got = parsing.ChunkResult.concat(results)
        np.testing.assert_array_equal(got.ids, expected.ids, err_msg=row.name)
        np.testing.assert_array_equal(got.tokens, expected.tokens, err_msg=row.name)
        assert got.skipped == expected.skipped, row.name


def test_each_row_names_a_place_as_its_format_does(tmp_path):
    files = _files(tmp_path, first_games_pgn(100))
    places = {}
    for row in sources.TABLE:
        pool = sources.Pool.private(1 << 14)
        chunk = next(iter(row.cut(files[row.name], pool, None, 1 << 13)))
        places[row.name] = (row.places, row.where(chunk, 7))
    assert places == {
        "Parquet": ("rows", "row groups 0..2"),  # 100 rows in groups of 40: one task
        "zstd PGN": ("games", "chunk 7"),
        "PGN": ("games", "chunk 7"),
    }
