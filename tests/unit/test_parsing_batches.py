"""Parsing batches (``parsing.BATCH_GAMES`` games per call of the native parser): a batch whose
games are all skipped is an empty result that concatenates, and how a file is cut into batches
never changes the dataset (issue 49: a run of filtered games crashed ``ChunkResult.concat``)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import zstandard

from chesslm.data import convert, metadata, parsing, pgn, split
from chesslm.data.filters import Filters
from chesslm.data.settings import Settings
from tests.helpers import SAMPLE, sample_text

# The sample's third source (2,413 games of 2013, one run) fails this filter; the games
# before and after it pass (2017 .. 2026).
SINCE_2014 = Settings(filters=Filters.from_config({"date_from": "2014-01-01"}, "filters"))


def _year(game: str) -> int:
    """The game's year by the converter's rule: UTCDate, else Date."""
    found = re.search(r'^\[UTCDate "(\d{4})', game, re.M) or re.search(
        r'^\[Date "(\d{4})', game, re.M
    )
    assert found, game[:200]
    return int(found.group(1))


@pytest.fixture(scope="module")
def games() -> list[str]:
    return pgn.split_games(sample_text())


def test_the_sample_has_a_run_of_filtered_games_longer_than_a_batch(games):
    years = [_year(g) for g in games]
    runs, length = [], 0
    for year in years:
        length = length + 1 if year < 2014 else 0
        runs.append(length)
    assert max(runs) > parsing.BATCH_GAMES
    assert 0 < sum(y >= 2014 for y in years) < len(years)


def _write_zst(path: Path, games: list[str]) -> Path:
    path.write_bytes(zstandard.ZstdCompressor().compress("".join(games).encode()))
    return path


def _shard_files(out: Path) -> dict[str, bytes]:
    return {
        f"{s}/{p.name}": p.read_bytes() for s in split.SPLITS for p in sorted((out / s).iterdir())
    }


@pytest.mark.parametrize("workers", [1, 2])
def test_a_run_of_filtered_games_longer_than_a_batch_converts_to_the_right_games(
    games, tmp_path, workers
):
    manifest = convert.convert([SAMPLE], tmp_path / "filtered", SINCE_2014, workers=workers)
    kept = [g for g in games if _year(g) >= 2014]
    # the reference: the passing games alone, converted with no filter
    alone = _write_zst(tmp_path / "kept.pgn.zst", kept)
    reference = convert.convert([alone], tmp_path / "reference", Settings(), workers=1)
    assert manifest["skipped"]["date"] == len(games) - len(kept)
    assert manifest["games"] == reference["games"]
    assert sum(manifest["games"].values()) == len(kept)
    assert _shard_files(tmp_path / "filtered") == _shard_files(tmp_path / "reference")
    site_ids = {re.search(r'^\[Site "https://lichess\.org/(\w{8})', g, re.M)[1] for g in kept}
    stored = set()
    for name in split.SPLITS:
        for ids in sorted((tmp_path / "filtered" / name).glob("*.ids.npy")):
            stored |= {i.decode() for i in np.load(ids)}
    assert stored == site_ids


def test_a_batch_whose_games_are_all_skipped_is_an_empty_result_that_concatenates(games):
    filtered = [g for g in games if _year(g) < 2014][:5]
    passing = [g for g in games if _year(g) >= 2014][:5]
    empty = parsing.parse_batch(filtered, SINCE_2014)
    assert len(empty.ids) == 0 and list(empty.offsets) == [0]
    assert empty.skipped["date"] == 5
    assert {n: c.dtype for n, c in empty.columns.items()} == {
        n: np.dtype(c.dtype) for n, c in metadata.COLUMNS.items()
    }
    one = parsing.parse_batch(passing, SINCE_2014)
    for parts in ([empty, empty, one], [one, empty, empty, one], [empty, empty, empty]):
        joined = parsing.ChunkResult.concat(parts)
        whole = parsing.parse_batch(
            [g for p in parts for g in (filtered if p is empty else passing)], SINCE_2014
        )
        _assert_same(joined, whole)
    _assert_same(parsing.ChunkResult.concat([]), parsing.parse_batch([], SINCE_2014))


def _assert_same(got: parsing.ChunkResult, want: parsing.ChunkResult) -> None:
    for name in ("ids", "keys", "splits", "tokens", "offsets", "order"):
        a, b = getattr(got, name), getattr(want, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    assert got.columns.keys() == want.columns.keys()
    for name in got.columns:
        a, b = got.columns[name], want.columns[name]
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    assert +got.skipped == +want.skipped
    assert +got.census == +want.census


@pytest.mark.parametrize("seed", range(6))
def test_any_split_of_a_file_into_batches_gives_the_same_result(games, seed):
    """Random cut points, repeats among them (empty batches), over the run of filtered games
    and its edges: the batches' results concatenated are one call's on the whole file."""
    rng = np.random.default_rng(seed)
    start = int(rng.integers(0, 1200))  # before, inside or across the 2013 run (986..3399)
    texts = games[start : start + 2600]
    cuts = np.sort(rng.integers(0, len(texts) + 1, size=int(rng.integers(1, 40))))
    bounds = [0, *cuts.tolist(), len(texts)]
    batches = [texts[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    joined = parsing.ChunkResult.concat([parsing.parse_batch(b, SINCE_2014) for b in batches])
    _assert_same(joined, parsing.parse_batch(texts, SINCE_2014))
    assert sum(joined.skipped.values()) + len(joined.ids) == len(texts)


def test_the_batch_size_does_not_change_a_chunks_result(games, monkeypatch):
    text = "".join(games[500:3600])
    whole = parsing.parse_chunk(text, SINCE_2014)
    for size in (1, 7, 333, 2413):
        monkeypatch.setattr(parsing, "BATCH_GAMES", size)
        _assert_same(parsing.parse_chunk(text, SINCE_2014), whole)
