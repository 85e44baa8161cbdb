"""Per-game metadata and the Lichess filters, checked against python-chess on generated games."""

from __future__ import annotations

import importlib.util
import io
import json
import re
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import chess.pgn
import jsonschema
import numpy as np
import pytest
import yaml
import zstandard

from chesslm import files
from chesslm.data import convert, filters, integrity, metadata, parsing, settings, shards
from tests import metadata_oracle
from tests.helpers import ROOT

FILTERS = {
    "speeds": ["blitz", "rapid", "correspondence"],
    "rated": True,
    "min_elo": 1100,
    "max_elo": 2300,
    "exclude_bots": True,
    "exclude_terminations": ["Abandoned", "Rules infraction"],
    "date_from": "2024-05-04",
    "date_to": "2024-05-27",
}
# Hand-written bad input beside the generated month: every sentinel gets exercised.
EDGE_GAMES = """[Event "Rated Blitz game"]
[Site "https://lichess.org/edge0001"]
[UTCDate "2024.05.10"]
[WhiteElo "?"]
[BlackElo "1500"]
[TimeControl "-"]
[Termination "Normal"]
[Result "1-0"]

1. e4 { [%clk 0:0x:00] } 1... e5 { [%clk 0:02:59] } 2. Nf3 { [%clk 1:00] } 1-0

[Site "https://lichess.org/edge0002"]
[Date "2024.05.11"]
[WhiteElo "1500"]
[BlackElo "1600"]
[Result "0-1"]

1. d4 { [%clk 0:05:00] } 1... d5 { [%clk ] } 0-1

[Event "Casual Rapid game"]
[Site "https://lichess.org/edge0003"]
[UTCDate "????.??.??"]
[Date "2024.05.12"]
[WhiteElo "1500"]
[BlackElo "2000"]
[WhiteTitle "BOT"]
[BlackTitle "BOT"]
[TimeControl "abc"]
[Termination "Something else"]
[Result "*"]

1. c4 c5 *

[Event "Rated Classical game"]
[Site "https://lichess.org/edge0004"]
[UTCDate "2024.05.13"]
[WhiteElo "99999"]
[BlackElo "1500"]
[TimeControl "1800+20"]
[Termination "Time forfeit"]
[Result "1/2-1/2"]

1. e4 { [%eval 0.2] [%clk 0:30:00] } 1... e5 { [%clk 0:29:58] [%eval 0.3] } 1/2-1/2

"""


def _month_module():
    spec = importlib.util.spec_from_file_location("month_pgn", ROOT / "benchmarks/month_pgn.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def month(tmp_path_factory) -> tuple[list[Path], list[chess.pgn.Game]]:
    """1,200 generated games plus the hand-written edge cases, and python-chess's reading."""
    directory = tmp_path_factory.mktemp("month")
    generated = directory / "month.pgn.zst"
    _month_module().write(generated, 1200, seed=7, workers=1)
    edge = directory / "edge.pgn"
    edge.write_text(EDGE_GAMES)
    with open(generated, "rb") as fh:
        text = zstandard.ZstdDecompressor().stream_reader(fh).read().decode()
    handle = io.StringIO(text + "\n" + EDGE_GAMES)
    games = []
    while (game := chess.pgn.read_game(handle)) is not None:
        games.append(game)
    return [generated, edge], games


def _id(game: chess.pgn.Game) -> str:
    return game.headers["Site"].rsplit("/", 1)[1]


def test_generated_month_has_every_kind_of_game(month):
    _, games = month
    metas = [metadata_oracle.expected(g) for g in games]
    assert len({_id(g) for g in games}) == len(games) == 1204
    assert {m["speed_name"] for m in metas} >= set(metadata.SPEEDS)
    assert {m["rated"] for m in metas} >= {0, 1}
    assert {m["bot"] for m in metas} >= {0, 1, 2}
    assert {m["termination"] for m in metas} == set(range(len(metadata.TERMINATIONS))) | {-1}
    with_clock = sum(any(c >= 0 for c in m["clock"]) for m in metas)
    assert 0.3 < with_clock / len(metas) < 0.6


def test_columns_match_python_chess(month, tmp_path):
    paths, games = month
    convert.convert(paths, tmp_path / "ds", convert.Settings(), workers=2)
    got = metadata_oracle.converted(tmp_path / "ds")
    assert len(got) == len(games)
    for game in games:
        want = metadata_oracle.expected(game)
        del want["speed_name"]
        assert got[_id(game)] == want, _id(game)
    edge = {k: got[k] for k in ("edge0001", "edge0002", "edge0003", "edge0004")}
    assert edge["edge0001"]["white_elo"] == -1 and edge["edge0001"]["speed"] == 5
    assert edge["edge0001"]["clock"] == [-1.0, 179.0, -1.0]  # malformed [%clk]s are absent
    assert edge["edge0002"]["rated"] == -1 and edge["edge0002"]["speed"] == -1
    assert edge["edge0003"]["utc_date"] == 20240512 and edge["edge0003"]["bot"] == 3
    assert edge["edge0004"]["white_elo"] == -1 and edge["edge0004"]["clock"] == [1800, 1798]


def test_filter_counts_match_python_chess(month, tmp_path):
    paths, games = month
    settings = convert.Settings(filters=filters.Filters.from_config(FILTERS))
    manifest = convert.convert(paths, tmp_path / "ds", settings, workers=2)
    verdicts = {_id(g): metadata_oracle.reason(metadata_oracle.expected(g), FILTERS) for g in games}
    counts = Counter(verdicts.values())
    assert {r: manifest["skipped"][r] for r in filters.REASONS} == {
        r: counts[r] for r in filters.REASONS
    }
    assert all(counts[r] > 0 for r in filters.REASONS)  # every check had something to drop
    kept = {k for k, v in verdicts.items() if not v}
    assert set(metadata_oracle.converted(tmp_path / "ds")) == kept
    assert sum(manifest["games"].values()) == len(kept)
    assert manifest["settings"]["filters"]["speeds"] == FILTERS["speeds"]


def test_defaults_keep_every_game_and_filters_come_before_duplicates(month, tmp_path):
    paths, games = month
    twice = convert.convert(paths + paths[:1], tmp_path / "ds", convert.Settings())
    assert sum(twice["games"].values()) == len(games)
    assert twice["skipped"]["duplicate_id"] == 1200
    assert {r: twice["skipped"][r] for r in filters.REASONS} == dict.fromkeys(filters.REASONS, 0)
    settings = convert.Settings(filters=filters.Filters(rated=True))
    rated = convert.convert(paths + paths[:1], tmp_path / "rated", settings)
    # a repeated game that fails a filter is counted under the filter, never as a duplicate
    unrated = [metadata_oracle.expected(g)["rated"] not in (1, 2) for g in games]
    assert rated["skipped"]["unrated"] == 2 * sum(unrated[:1200]) + sum(unrated[1200:])
    assert rated["skipped"]["duplicate_id"] == 1200 - sum(unrated[:1200])


@pytest.mark.parametrize(
    ("name", "computer"),
    [
        ("lichess AI level 8", True),
        ("  lichess AI level 1 ", True),
        ("LICHESS ai LEVEL 3", True),
        ("lichess AI level", False),
        ("lichess\tAI level 3", False),
        ("lichessAIlevel3", False),
        ("DrNykterstein", False),
        ("", False),
        (None, False),
    ],
)
def test_the_lichess_computer_is_known_by_its_name(name, computer):
    """The converter's check (a space first, then the pattern) agrees with the pattern."""
    assert metadata.is_computer(name) is computer
    headers = {"White": name, "Black": name} if name is not None else {}
    bot = metadata.header_row(headers)[metadata.PER_GAME.index("bot")]
    assert bot == (metadata.COMPUTER_WHITE | metadata.COMPUTER_BLACK if computer else 0)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"min_elo": 2000, "max_elo": 1000}, "filters.min_elo: 2000 is above max_elo"),
        ({"speeds": ["hyperbullet"]}, "filters.speeds: 'hyperbullet' is not a speed"),
        ({"date_from": "2024-13-01"}, "filters.date_from: '2024-13-01' is not a date"),
        ({"date_from": "2024-05-02", "date_to": "2024-05-01"}, "filters.date_from: 2024-05-02"),
        ({"exclude_terminations": ["Nope"]}, "filters.exclude_terminations: 'Nope'"),
        ({"min_plies": 0}, "filters.min_plies: 0"),
        ({"max_plies": 3}, "filters.max_plies: not a filter"),
    ],
)
def test_bad_filter_settings_name_the_key(setting, message):
    with pytest.raises(filters.FilterError) as error:
        settings.check_config({"june": {"inputs": ["x.pgn"], "filters": setting}})
    assert str(error.value).startswith("config: datasets.june.")
    assert message in str(error.value)


@pytest.mark.parametrize(
    ("setting", "where"),
    [
        ({"speeds": ["hyperbullet"]}, ["speeds", 0]),
        ({"date_to": "2024/05/01"}, ["date_to"]),
        ({"min_elo": -5}, ["min_elo"]),
        ({"exclude_terminations": ["Nope"]}, ["exclude_terminations", 0]),
    ],
)
def test_the_schema_refuses_filters_out_of_range(setting, where):
    schema = yaml.safe_load((ROOT / "workflow/schemas/config.schema.yaml").read_text())
    config = {"datasets": {"june": {"inputs": ["x.pgn"], "filters": setting}}}
    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(config))
    assert [list(e.absolute_path) for e in errors] == [["datasets", "june", "filters", *where]]


def test_duplicate_keys_need_no_object_per_game(tmp_path):
    ids = np.array([b"abcdefgh", b"abcdefgi", b"cdeadbeefdeadbeef0", b"abcdefgh"], dtype="S24")
    keys = parsing.id_keys(ids)
    assert keys[0] == keys[3] and len(set(keys[:3].tolist())) == 3
    assert keys[2] >= 1 << 63 > keys[0]  # content ids never meet Lichess ids
    duplicates = shards.Duplicates(tmp_path / "dup")
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, 5000, 700).astype(np.uint64) for _ in range(20)]
    batches[3][:2] = [1 << 63, (1 << 63) + 1]  # content-id keys too
    numbers = np.concatenate([duplicates.add(b) for b in batches])
    flat = np.concatenate(batches)
    assert np.array_equal(numbers, np.arange(len(flat)))
    _, first_index = np.unique(flat, return_index=True)
    later = np.setdiff1d(np.arange(len(flat)), first_index)
    assert np.array_equal(duplicates.later_copies(), later)  # the first copy of a key stays
    assert len(list((tmp_path / "dup").iterdir())) > 100  # spread over the bucket files


def test_duplicates_across_shards_are_dropped_after_the_first(month, tmp_path):
    paths, games = month
    settings = convert.Settings(shard_games=150)
    once = convert.convert(paths, tmp_path / "one", settings, workers=2)
    twice = convert.convert(paths[::-1] + paths, tmp_path / "two", settings, workers=2)
    assert twice["skipped"]["duplicate_id"] == len(games)
    assert twice["games"] == once["games"] and twice["tokens"] == once["tokens"]
    assert metadata_oracle.converted(tmp_path / "two") == metadata_oracle.converted(
        tmp_path / "one"
    )
    assert not [p for p in (tmp_path / "two").rglob("*") if ".order." in p.name or "dup" in p.name]
    integrity.verify_dataset(tmp_path / "two")  # rewritten shards are hashed as written


DISK_FULL = """
import resource, signal, sys
from pathlib import Path
from chesslm.data import convert, gamearrays
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails, as on a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))
try:
    convert.convert([Path(sys.argv[1])], Path(sys.argv[2]), convert.Settings(shard_games=100_000))
except gamearrays.WriteError as error:
    print("ERROR", error)
"""


def test_a_full_disk_during_convert_names_the_file_and_leaves_nothing(month, tmp_path):
    out = tmp_path / "ds"
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(DISK_FULL), str(month[0][0]), str(out)],
        capture_output=True,
        text=True,
        check=True,
    )
    line = result.stdout.strip()
    assert re.match(rf"ERROR {out}/\.convert\.\d+\.\w+\.tmp/train/00000\.", line), line
    assert "cannot write (" in line
    assert not (out / "manifest.json").exists()
    assert not any(out.iterdir())


def test_manifest_lists_and_hashes_the_test_splits_metadata(month, tmp_path):
    manifest = convert.convert(month[0], tmp_path / "ds", convert.Settings())
    names = set(manifest["files"])
    for prefix in manifest["shards"]["test"]:
        assert set(metadata.file_names(prefix)) <= names
    assert json.loads((tmp_path / "ds/manifest.json").read_text()) == manifest


CACHE_DISK_FULL = """
import resource, signal, sys
from pathlib import Path
from chesslm.data import cache, gamearrays
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))
ds = Path(sys.argv[1])
try:
    cache.build_from_dataset(ds, ds / "receipt.json", Path(sys.argv[2]))
except gamearrays.WriteError as error:
    print("ERROR", error)
"""


def test_a_full_disk_during_token_cache_names_the_file_and_leaves_nothing(month, tmp_path):
    ds = tmp_path / "ds"
    convert.convert(month[0], ds, convert.Settings())
    files.write_json_atomic(ds / "receipt.json", integrity.verify_dataset(ds))
    out = tmp_path / "token-cache"
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CACHE_DISK_FULL), str(ds), str(out)],
        capture_output=True,
        text=True,
        check=True,
    )
    line = result.stdout.strip()
    assert re.match(rf"ERROR {out.parent}/\.{out.name}\.\d+\.\w+\.tmp/train\.tokens\.npy: ", line)
    assert "file-size limit" in line or "disk full" in line, line
    assert not out.exists() and not list(out.parent.glob(f".{out.name}.*"))
