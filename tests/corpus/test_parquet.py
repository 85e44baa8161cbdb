"""Parquet inputs (Hugging Face ``Lichess/standard-chess-games`` schema): the same games give
the same dataset as from PGN, byte for byte, through filters, splits, duplicates, census and
the cache; memory stays flat in the number of games; a bad file is one line naming it."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from chesslm.data import convert, parquet, parsing, pgn, split
from chesslm.data.filters import Filters
from chesslm.data.settings import Settings
from tests import lichess_parquet
from tests.helpers import ROOT, SAMPLE, sample_text

# the filters (a real user's): every Lichess filter at once
LICHESS_FILTERS = Settings(
    filters=Filters.from_config(
        {
            "speeds": ["blitz", "rapid", "classical"],
            "rated": True,
            "min_elo": 1200,
            "max_elo": 2400,
            "exclude_bots": True,
            "exclude_terminations": ["Abandoned", "Rules infraction"],
        },
        "filters",
    )
)


@pytest.fixture(scope="module")
def games() -> list[str]:
    return pgn.split_games(sample_text())


@pytest.fixture(scope="module")
def sample_parquet(games, tmp_path_factory) -> Path:
    """The sample in the schema, row groups of 700 games (tasks and pieces cut mid-file)."""
    path = tmp_path_factory.mktemp("parquet") / "sample.parquet"
    return lichess_parquet.write(games, path, row_group_games=700)


def _same_dataset(a: dict, b: dict) -> None:
    """Two manifests of the same games: every shard file's hash and every count alike."""
    for key in ("files", "shards", "games", "tokens", "skipped", "census", "settings"):
        assert a[key] == b[key], key


def test_the_schema_is_the_dataset_cards(sample_parquet):
    schema = pq.read_schema(sample_parquet)
    assert schema.names == [
        "Event", "Site", "White", "Black", "Result", "WhiteTitle", "BlackTitle", "WhiteElo",
        "BlackElo", "WhiteRatingDiff", "BlackRatingDiff", "UTCDate", "UTCTime", "ECO",
        "Opening", "Termination", "TimeControl", "movetext",
    ]  # fmt: skip
    assert (
        schema.field("WhiteElo").type == pa.int16() and schema.field("UTCDate").type == pa.date32()
    )
    first = pq.read_table(sample_parquet).slice(0, 1).to_pylist()[0]
    assert "[%clk" in first["movetext"] and "\n" not in first["movetext"]
    assert pq.ParquetFile(sample_parquet).metadata.num_row_groups == 7


@pytest.mark.parametrize(
    ("settings", "workers"), [(Settings(), 1), (Settings(), 2), (LICHESS_FILTERS, 2)]
)
def test_the_sample_as_parquet_gives_the_pgns_shards_byte_for_byte(
    sample_parquet, tmp_path, settings, workers
):
    from_pgn = convert.convert([SAMPLE], tmp_path / "pgn", settings, workers=workers)
    from_parquet = convert.convert([sample_parquet], tmp_path / "pq", settings, workers=workers)
    _same_dataset(from_pgn, from_parquet)
    assert from_pgn["fingerprint"] == from_parquet["fingerprint"]  # one dataset (issue 59)
    assert sum(from_parquet["games"].values()) > 1000
    assert from_parquet["inputs"][0]["sha256"] == convert.sha256_file(sample_parquet)


def test_any_row_groups_and_pieces_give_the_same_result(games, tmp_path, monkeypatch):
    """Row groups of 1 .. all games, pieces and tasks of other sizes: one dataset."""
    first = games[:1500]
    reference = parquet.parse_rows(
        pa.Table.from_pylist([lichess_parquet.row(g) for g in first], lichess_parquet.SCHEMA),
        LICHESS_FILTERS,
    )
    for k, (groups, piece) in enumerate([(1, 64), (333, 1000), (1500, 4000), (97, 250)]):
        path = lichess_parquet.write(first, tmp_path / f"{k}.parquet", row_group_games=groups)
        monkeypatch.setattr(parquet, "PIECE_GAMES", piece)
        monkeypatch.setattr(parquet, "TASK_GAMES", piece)
        tasks = list(parquet.read_tasks(path))
        assert [g for t in tasks for g in t.row_groups] == list(range(-(-1500 // groups)))
        results = [r for t in tasks for r in parquet.parse_task(t, LICHESS_FILTERS)]
        assert len(results) == sum(t.pieces for t in tasks)
        joined = parsing.ChunkResult.concat(results)
        for name in ("ids", "tokens", "offsets", "splits"):
            assert (getattr(joined, name) == getattr(reference, name)).all(), name
        assert joined.skipped == reference.skipped and joined.census == reference.census


def test_inputs_of_both_formats_are_read_in_order_with_duplicates_across_them(games, tmp_path):
    head = tmp_path / "head.pgn.zst"
    head.write_bytes(zstandard.ZstdCompressor().compress("".join(games[:3000]).encode()))
    tail = lichess_parquet.write(games[2500:], tmp_path / "tail.parquet", row_group_games=800)
    mixed = convert.convert([head, tail], tmp_path / "mixed", Settings(), workers=2)
    assert mixed["skipped"]["duplicate_id"] == 500  # games 2500..2999 are in both
    whole = convert.convert([SAMPLE], tmp_path / "whole", Settings(), workers=1)
    assert mixed["files"] == whole["files"] and mixed["games"] == whole["games"]


def test_rows_without_moves_or_tags_count_as_their_pgn_games_do(games, tmp_path):
    rows = [lichess_parquet.row(g) for g in games[:6]]
    rows[0]["movetext"] = None  # no moves: no_moves, as a PGN game with tags only
    rows[1]["movetext"] = "  "
    rows[2]["movetext"] = "1. e4 e5 2. Ke3 *"  # illegal_move
    rows[3]["movetext"] = "1. xyz *"  # unparsable
    rows[4]["WhiteElo"] = None  # kept, its Elo -1 (the elo filter would drop it)
    table = pa.Table.from_pylist(rows, lichess_parquet.SCHEMA)
    result = parquet.parse_rows(table, Settings())
    assert +result.skipped == {"no_moves": 2, "illegal_move": 1, "unparsable": 1}
    assert result.columns["white_elo"][0] == -1 and len(result.ids) == 2
    any_elo = Settings(filters=Filters.from_config({"min_elo": 100}, "filters"))
    assert parquet.parse_rows(table, any_elo).skipped["elo"] == 1


def _write_table(path: Path, columns: dict[str, pa.Array]) -> Path:
    pq.write_table(pa.table(columns), path)
    return path


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda p: p.write_bytes(b"PAR1 not really" * 100) and p, "not a Parquet file"),
        (lambda p: _write_table(p, {"Site": pa.array(["x"])}), "no 'movetext' column"),
        (lambda p: _write_table(p, {"movetext": pa.array([1])}), "column 'movetext' is int64"),
        (
            lambda p: _write_table(p, {"movetext": pa.array(["1. e4"]), "Event": pa.array([1.5])}),
            "column 'Event' is double",
        ),
        (lambda p: _write_table(p, {"movetext": pa.array([], pa.string())}), "no games in it"),
        (lambda p: p, "no such file"),
    ],
)
def test_a_file_that_is_not_a_lichess_parquet_file_is_one_line_naming_it(
    tmp_path, make, says, workers
):
    path = make(tmp_path / "month.parquet")
    with pytest.raises(ValueError) as raised:
        convert.convert([path], tmp_path / "ds", Settings(), workers=workers)
    message = str(raised.value)
    assert "\n" not in message and str(tmp_path / "month.parquet") in message
    assert says in message
    assert not (tmp_path / "ds" / "manifest.json").exists()
    assert not any((tmp_path / "ds" / s).exists() for s in split.SPLITS)


def flip_in_movetext(path: Path, row_group: int, at: float) -> None:
    """One bit flipped ``at`` (a share) into the compressed movetext of ``row_group``."""
    chunk = (
        pq.ParquetFile(path)
        .metadata.row_group(row_group)
        .column(lichess_parquet.SCHEMA.get_field_index(parquet.MOVETEXT))
    )
    offset = chunk.data_page_offset + int(chunk.total_compressed_size * at)
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x10
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("at", [0.5, 0.6, 0.8])  # 0.7 changes a move silently
def test_a_damaged_page_is_one_line_naming_the_file_and_its_row_groups_or_a_warning(
    games, tmp_path, caplog, at
):
    """A flipped byte in a row group's compressed moves: the read error names the file and
    the row groups (was: zstd's words alone); a flip that still decompresses drops games as
    illegal or unparsable, which the console is told."""
    path = lichess_parquet.write(games[:1200], tmp_path / "month.parquet", row_group_games=400)
    flip_in_movetext(path, 1, at)
    try:
        with caplog.at_level(logging.WARNING, logger="chesslm.data.convert"):
            convert.convert([path], tmp_path / "ds", Settings(), workers=2)
    except parquet.ParquetFileError as error:
        assert str(error).startswith(f"{path}: row groups "), error
        assert "cannot be read" in str(error) and "damaged" in str(error) and "\n" not in str(error)
        return
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(said) == 1 and said[0].startswith(f"{path}: skipped "), said
    assert "may be damaged" in said[0]


_PEAK = """
import json, resource, sys
from pathlib import Path
import pyarrow as pa
from chesslm.data import convert
convert.convert([Path(sys.argv[1])], Path(sys.argv[2]), convert.Settings(), workers=1)
print(json.dumps({"arrow": pa.default_memory_pool().max_memory(),
                  "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def test_memory_is_flat_in_the_number_of_games(games, tmp_path):
    """4,000 of the sample's games, and 8 copies of them (own ids each), in row groups of
    1,000 (so every copy's groups hold the same games): the same peak of Arrow memory and
    about the same peak RSS."""
    peaks = []
    for copies in (1, 8):
        text = "".join(games[:4000])
        many = (re.sub(r"lichess\.org/\w\w", f"lichess.org/Z{k}", text) for k in range(copies))
        path = lichess_parquet.write(
            (g for t in many for g in pgn.split_games(t)), tmp_path / f"{copies}.parquet"
        )
        run = subprocess.run(
            [sys.executable, "-c", _PEAK, str(path), str(tmp_path / f"ds{copies}")],
            capture_output=True, text=True, check=True, cwd=ROOT,
        )  # fmt: skip
        peaks.append(json.loads(run.stdout.strip().splitlines()[-1]))
    one, eight = peaks
    assert eight["arrow"] <= 1.1 * one["arrow"]
    assert eight["rss"] <= one["rss"] + 30 * 1024  # KiB: within 30 MB for 28,000 more games
