"""The shipped corpora (resources/): their recorded hashes, the `rated` rule and the census on
their real edge cases against python-chess, and the training-size cap (``train_games``)."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import re
from pathlib import Path

import chess.pgn
import pytest
import yaml
import zstandard

from chesslm.data import census, convert, gamearrays, metadata, pgn, settings, train_cap
from chesslm.train.settings import schema_error
from tests import metadata_oracle

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "resources" / "lichess-sample.pgn.zst"
GITHUB = ROOT / "resources" / "lichess-github.pgn.zst"
REAL = [SAMPLE, GITHUB]


def _text(path: Path) -> str:
    with open(path, "rb") as fh:
        return zstandard.ZstdDecompressor().stream_reader(fh).read().decode()


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_the_readme_records_each_resources_size_and_hashes(path):
    """resources/README.md's table of each file: size and both sha256 match the file."""
    readme = (ROOT / "resources" / "README.md").read_text()
    section = readme.split(f"# resources/{path.name}", 1)[1].split("\n# ", 1)[0]
    raw = path.read_bytes()
    plain = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw)).read()
    assert f"| size | {len(raw):,} bytes ({len(plain):,} bytes decompressed) |" in section
    assert f"| sha256 (compressed) | `{hashlib.sha256(raw).hexdigest()}` |" in section
    assert f"| sha256 (decompressed) | `{hashlib.sha256(plain).hexdigest()}` |" in section


def test_the_real_datasets_are_configured_on_both_corpora():
    datasets = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["datasets"]
    real = ["resources/lichess-sample.pgn.zst", "resources/lichess-github.pgn.zst"]
    assert datasets["real"]["inputs"] == real
    for n in (1000, 2000, 4000, 8000):
        assert datasets[f"real-{n // 1000}k"] == {"inputs": real, "train_games": n}
    assert datasets["sample"]["inputs"] == real[:1]


@pytest.fixture(scope="module")
def edge_games(tmp_path_factory):
    """The corpus games whose Event does not say "rated" (arenas, team battles, casual, none)
    or that involve the Lichess computer, plus every 40th other game, as one PGN file."""
    picked = []
    for k, text in enumerate(pgn.split_games(_text(GITHUB))):
        event = re.search(r'^\[Event "(.*)"\]$', text, re.MULTILINE)
        plain = event is not None and re.search(r"\brated\b", event[1], re.IGNORECASE)
        if not plain or "lichess AI level" in text or k % 40 == 0:
            picked.append(text.strip() + "\n\n")
    path = tmp_path_factory.mktemp("edge") / "edge.pgn"
    path.write_text("".join(picked))
    handle = io.StringIO(path.read_text())
    games = []
    while (game := chess.pgn.read_game(handle)) is not None:
        games.append(game)
    return path, games


def test_rated_rule_and_columns_match_python_chess_on_arena_games(edge_games, tmp_path):
    path, games = edge_games
    convert.convert([path], tmp_path / "ds", convert.Settings(), workers=2)
    got = metadata_oracle.converted(tmp_path / "ds")
    assert len(got) == len(games)
    wants = {}
    for game in games:
        want = metadata_oracle.expected(game)
        del want["speed_name"]
        gid = game.headers["Site"].rsplit("/", 1)[1]
        assert got[gid] == want, gid
        wants[gid] = want
    arena = [
        w["rated"]
        for g, w in zip(games, wants.values(), strict=True)
        if "Arena" in g.headers["Event"]
    ]
    # the corpus has arena games with and without RatingDiff, and casual games
    assert {2, -2} <= set(arena) and {w["rated"] for w in wants.values()} >= {-2, 0, 1, 2}
    assert any(
        w["bot"] & (metadata.COMPUTER_WHITE | metadata.COMPUTER_BLACK) for w in wants.values()
    )


def test_the_rated_filter_keeps_arena_games_rated_by_rating_diff(edge_games, tmp_path):
    path, games = edge_games
    rated = convert.Settings(filters=convert.filters.Filters(rated=True))
    manifest = convert.convert([path], tmp_path / "ds", rated)
    verdicts = [metadata_oracle.reason(metadata_oracle.expected(g), {"rated": True}) for g in games]
    assert manifest["skipped"]["unrated"] == verdicts.count("unrated") > 0
    assert sum(manifest["games"].values()) == verdicts.count("")
    assert manifest["census"]["rated_rating_diff"] > 0  # arenas kept by their RatingDiff


def test_census_counts_what_python_chess_sees(edge_games, tmp_path):
    path, games = edge_games
    census = convert.convert([path], tmp_path / "ds", convert.Settings())["census"]
    metas = [metadata_oracle.expected(g) for g in games]
    rated = {"event": 1, "rating_diff": 2, "casual": 0, "no_event": -1, "unknown": -2}
    want = {
        "games": len(metas),
        "missing_elo": sum(m["white_elo"] < 0 or m["black_elo"] < 0 for m in metas),
        "computer_opponent": sum(m["bot"] >= 4 for m in metas),
        "bot_title": sum(m["bot"] % 4 > 0 for m in metas),
        "no_clocks": sum(not any(c >= 0 for c in m["clock"]) for m in metas),
        "no_time_control": sum(m["speed"] < 0 for m in metas),
        "correspondence": sum(m["speed"] == 5 for m in metas),
    } | {f"rated_{k}": sum(m["rated"] == v for m in metas) for k, v in rated.items()}
    assert census == want
    assert all(census[k] > 0 for k in ("missing_elo", "computer_opponent", "no_clocks"))


def test_the_census_is_of_the_games_kept_after_duplicates_and_the_cap(edge_games, tmp_path):
    """The workers count each chunk's kept games; what duplicates and the cap rewrite out of
    the shards is taken off: the manifest's census is that of the shards as stored."""
    path, games = edge_games
    capped = convert.Settings(train_games=len(games) // 2)
    manifest = convert.convert([path, path], tmp_path / "ds", capped, workers=2)
    assert manifest["skipped"]["duplicate_id"] == len(games)
    assert manifest["skipped"]["train_cap"] > 0
    shards = [tmp_path / "ds" / p for names in manifest["shards"].values() for p in names]
    assert manifest["census"] == census.census(shards)
    assert manifest["census"]["games"] == sum(manifest["games"].values())


# --- the training-size cap ---


def _train_ids(out: Path) -> list[str]:
    manifest = json.loads((out / "manifest.json").read_text())
    ids = []
    for prefix in manifest["shards"]["train"]:
        shard = gamearrays.Games(out / prefix)
        ids += [shard.id(i) for i in range(len(shard))]
    return ids


@pytest.fixture(scope="module")
def capped(tmp_path_factory):
    """`real` uncapped and capped at 1,000 (one worker) and 2,000 (two workers, small shards;
    and with the inputs reversed): manifests and train ids by name."""
    root = tmp_path_factory.mktemp("cap")
    runs = {
        "all": (REAL, convert.Settings(), 2),
        "1k": (REAL, convert.Settings(train_games=1000), 1),
        "2k": (REAL, convert.Settings(train_games=2000, shard_games=5000), 2),
        "2k-reversed": (REAL[::-1], convert.Settings(train_games=2000), 2),
    }
    out = {}
    for name, (inputs, s, workers) in runs.items():
        manifest = convert.convert(inputs, root / name, s, workers=workers)
        out[name] = (manifest, _train_ids(root / name))
    return out


def test_a_cap_keeps_exactly_n_train_games_the_smallest_by_keyed_hash(capped):
    full, all_ids = capped["all"]
    hashes = train_cap.ranks([i.encode() for i in all_ids], "chesslm-split-v1")
    ranked = [i for _, i in sorted(zip(hashes.tolist(), all_ids, strict=True))]
    for name, n in (("1k", 1000), ("2k", 2000)):
        manifest, ids = capped[name]
        assert manifest["games"]["train"] == len(ids) == len(set(ids)) == n
        assert manifest["skipped"]["train_cap"] == full["games"]["train"] - n
        assert manifest["settings"]["train_games"] == n
        assert set(ids) == set(ranked[:n])  # whatever the workers
    assert set(capped["2k-reversed"][1]) == set(capped["2k"][1])  # or the input order
    assert full["skipped"]["train_cap"] == 0 and full["settings"]["train_games"] is None


def test_caps_are_nested_and_leave_validation_and_test_byte_identical(capped):
    full, _ = capped["all"]
    small, bigger = set(capped["1k"][1]), set(capped["2k"][1])
    assert small < bigger
    for name in ("1k", "2k"):
        manifest = capped[name][0]
        for split_name in ("validation", "test"):
            files = {k: v for k, v in manifest["files"].items() if k.startswith(split_name)}
            assert files and files == {
                k: v for k, v in full["files"].items() if k.startswith(split_name)
            }
        assert manifest["games"]["validation"] == full["games"]["validation"]
        assert manifest["fingerprint"] != full["fingerprint"]


def test_a_cap_above_the_train_games_keeps_them_all_and_says_so(tmp_path, caplog):
    full = convert.convert([SAMPLE], tmp_path / "all", convert.Settings())
    caplog.set_level(logging.INFO, logger="chesslm.data.convert")
    manifest = convert.convert([SAMPLE], tmp_path / "ds", convert.Settings(train_games=10**6))
    assert manifest["files"] == full["files"]  # the same shards, byte for byte
    assert manifest["games"] == full["games"] and manifest["skipped"]["train_cap"] == 0
    train = full["games"]["train"]
    assert f"train_games 1000000 is not below the {train} train games: keeping them all" in (
        caplog.text
    )


@pytest.mark.parametrize("value", [0, -5, 1.5, "100", True])
def test_a_bad_cap_is_one_line_naming_the_key(value):
    with pytest.raises(settings.SettingsError, match=r"^config: datasets\.real\.train_games: "):
        settings.check_config({"real": {"inputs": ["x.pgn"], "train_games": value}})
    with pytest.raises(settings.SettingsError, match=r"^datasets\.real\.train_games: "):
        settings.Settings.from_config(
            {
                "context": 1024,
                "split": {"key": "k", "validation": 0.05, "test": 0.05},
                "shard_games": 10,
                "train_games": value,
            },
            "datasets.real",
        )
    schema = yaml.safe_load((ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text())
    error = schema_error(schema, {"datasets": {"real": {"inputs": ["x"], "train_games": value}}})
    assert error is not None and error.startswith("datasets.real.train_games: ")
