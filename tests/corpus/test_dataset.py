"""Conversion of PGN into a dataset, checked against python-chess, and every bad input."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import re
from pathlib import Path

import chess.pgn
import numpy as np
import pytest
import zstandard

from chesslm.data import convert, damage, filters, gamearrays, pgn, split, tokens, workers
from chesslm.data.pgn import PgnFileError
from tests import metadata_oracle
from tests.helpers import SAMPLE, all_sample_games, first_games_pgn

SETTINGS = convert.Settings()
SAMPLE_FILTERS = convert.Settings(
    filters=filters.Filters(
        speeds=("blitz", "rapid", "classical"),
        rated=True,
        min_elo=1000,
        max_elo=2500,
        exclude_bots=True,
        exclude_terminations=("Abandoned", "Rules infraction"),
        date_from="2013-02-02",
        date_to="2026-01-01",
    )
)


def load_dataset(out: Path) -> dict[str, tuple[str, list[int]]]:
    """id -> (split, tokens) of every game in a converted dataset."""
    manifest = json.loads((out / "manifest.json").read_text())
    games = {}
    for name in split.SPLITS:
        for prefix in manifest["shards"][name]:
            shard = gamearrays.Games(out / prefix)
            for i in range(len(shard)):
                games[shard.id(i)] = (name, shard[i].tolist())
    return games


def oracle(text: str, context: int = 1024) -> dict[str, list[int]]:
    """What python-chess says the kept games are: id -> tokens."""
    handle = io.StringIO(text)
    kept = {}
    while (game := chess.pgn.read_game(handle)) is not None:
        moves = list(game.mainline_moves())
        standard = game.headers.get("Variant", "Standard").lower() in ("standard", "chess")
        if game.errors or not moves or not standard or "FEN" in game.headers:
            continue
        if 2 + 3 * len(moves) > context:
            continue
        gid = re.search(r"lichess\.org/(\w{8})", game.headers.get("Site", "")).group(1)
        kept.setdefault(gid, tokens.encode_moves(moves))
    return kept


def write(tmp_path: Path, text: str | bytes, name: str = "in.pgn") -> Path:
    path = tmp_path / name
    if name.endswith(".zst"):
        data = text.encode() if isinstance(text, str) else text
        path.write_bytes(zstandard.ZstdCompressor().compress(data))
    elif isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def game(site: str, moves: str, extra: str = "") -> str:
    return (
        f'[Event "Rated Blitz game"]\n[Site "https://lichess.org/{site}"]\n{extra}'
        f'[Result "*"]\n\n{moves} *\n\n'
    )


@pytest.mark.xdist_group("sample")  # all_sample_games parsed once
def test_sample_agrees_with_python_chess_on_every_game(tmp_path):
    sample_games = all_sample_games()
    manifest = convert.convert([SAMPLE], tmp_path / "ds", SETTINGS, workers=2)
    converted = load_dataset(tmp_path / "ds")
    assert sum(manifest["games"].values()) == len(converted) == 4754
    assert set(manifest["skipped"].values()) == {0}
    for g in sample_games:
        gid = g.headers["Site"].rsplit("/", 1)[1]
        assert converted[gid][1] == tokens.encode_moves(g.mainline_moves()), gid
    assert all(isinstance(v, int) for v in manifest["games"].values())
    for name in split.SPLITS:
        assert manifest["games"][name] > 0
    columns = metadata_oracle.converted(tmp_path / "ds")
    metas = {g.headers["Site"].rsplit("/", 1)[1]: metadata_oracle.expected(g) for g in sample_games}
    for gid, want in metas.items():
        assert columns[gid] == {k: v for k, v in want.items() if k != "speed_name"}, gid
    # the Lichess filters on the same games, against the same oracle
    filtered = convert.convert([SAMPLE], tmp_path / "f", SAMPLE_FILTERS, workers=2)
    verdicts = {
        gid: metadata_oracle.reason(m, SAMPLE_FILTERS.filters.as_dict()) for gid, m in metas.items()
    }
    counts = {reason: list(verdicts.values()).count(reason) for reason in filters.REASONS}
    assert {r: filtered["skipped"][r] for r in filters.REASONS} == counts
    assert all(counts.values())
    assert set(load_dataset(tmp_path / "f")) == {gid for gid, v in verdicts.items() if not v}


def test_split_depends_only_on_the_id(tmp_path):
    text = first_games_pgn(400)
    parts = text.split("\n\n[Event ")
    a = "\n\n[Event ".join(parts[:150]) + "\n"
    b = "[Event " + "\n\n[Event ".join(parts[150:])
    whole = load_dataset(
        (convert.convert([write(tmp_path, text)], tmp_path / "one", SETTINGS), tmp_path / "one")[1]
    )
    convert.convert(
        [write(tmp_path, b, "b.pgn.zst"), write(tmp_path, a, "a.pgn")],
        tmp_path / "two",
        convert.Settings(shard_games=37),
        workers=2,
    )
    swapped = load_dataset(tmp_path / "two")
    assert whole == swapped  # same games, same splits, whatever the order and sharding
    assert {s for s, _ in whole.values()} == set(split.SPLITS)


@pytest.mark.parametrize(("validation", "test"), [(0.05, 0.05), (0.3, 0.0), (0.0, 0.45)])
def test_splits_of_many_ids_at_once_are_each_ids_split(validation, test):
    """The converter's vectorised assignment (one keyed hasher copied per id, the rank turned
    into [0, 1) by NumPy) gives every id the split ``assign`` gives it alone."""
    rng = np.random.default_rng(7)
    letters = np.frombuffer(b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", "S1")
    ids = [b"".join(rng.choice(letters, 8)).decode() for _ in range(3000)] + ["c0123456789abcdef"]
    key = "chesslm-split-v1"
    got = split.assign_all(ids, key=key, validation=validation, test=test)
    want = [
        split.SPLITS.index(split.assign(i, key=key, validation=validation, test=test)) for i in ids
    ]
    assert got.tolist() == want
    assert split.ranks(ids, key).tolist() == [split.rank(i, key) for i in ids]
    with pytest.raises(ValueError, match="split fractions"):
        split.assign_all(ids, key=key, validation=0.5, test=0.5)


def test_bad_games_are_counted_by_reason_and_good_ones_kept(tmp_path):
    long_moves = " ".join("Nf3 Nf6 Ng1 Ng8" for _ in range(3))
    annotated = game("aaaaaaa7", "1. e4 {a comment} $1 (1. d4 d5 (1... Nf6)) 1... e5 $2 2. Nf3 !?")
    text = (
        game("aaaaaaa1", "1. e4 e5 2. Nf3 Nc6")
        + game("aaaaaaa2", "1. e4 e5 2. Ke3", "")  # illegal move mid-game
        + game("aaaaaaa3", "1. e4", '[Variant "Atomic"]\n')
        + game("aaaaaaa4", "1. Kb1", '[FEN "8/8/8/8/8/8/8/K6k w - - 0 1"]\n[SetUp "1"]\n')
        + game("aaaaaaa5", "")  # zero moves
        + game("aaaaaaa1", "1. d4 d5")  # duplicate id
        + game("aaaaaaa6", long_moves)  # 12 plies: over a context of 32 tokens
        + "\x00\xff garbage }{ after a result ;; 1. e4\n\n"  # ignored, as python-chess does
        + "[garbage \x00\xff }{ between games\n\n"  # no game at all: unparsable
        + game("aaaaaaa8", "1. e4 e5 2. Qxz9 Nc6")  # a move that is not SAN: unparsable
        + annotated
    )
    path = write(tmp_path, text)
    manifest = convert.convert([path], tmp_path / "ds", convert.Settings(context=32))
    games = load_dataset(tmp_path / "ds")
    assert set(games) == {"aaaaaaa1", "aaaaaaa7"}
    assert manifest["skipped"] == {
        "custom_start": 1,
        "duplicate_id": 1,
        "illegal_move": 1,
        "no_moves": 1,
        "too_long": 1,
        "too_short": 0,
        "train_cap": 0,
        "unparsable": 2,
        "variant": 1,
        **dict.fromkeys(filters.REASONS, 0),
    }
    assert games["aaaaaaa7"][1] == oracle(annotated)["aaaaaaa7"]  # mainline only
    assert games["aaaaaaa1"][1] == tokens.encode_moves(
        chess.Move.from_uci(u) for u in ("e2e4", "e7e5", "g1f3", "b8c6")
    )


def damage_fifth_moves(text: str, numbers: list[int]) -> str:
    """``text`` with one byte damaged in each numbered game (1: the first): the first letter
    of its fifth white move becomes a ``Z``, which is no SAN."""
    games = text.split("\n\n[Event ")
    for n in numbers:
        games[n - 1], found = re.subn(r"(\n|\s)5\. \S", r"\g<1>5. Z", games[n - 1], count=1)
        assert found == 1, f"game {n} has no fifth move"
    return "\n\n[Event ".join(games)


@pytest.mark.parametrize("workers_", [1, 2])
def test_damaged_games_are_one_warning_naming_the_file_and_their_numbers(
    tmp_path, monkeypatch, caplog, workers_
):
    """Issue 63 item 5: a PGN whose games were damaged is one WARNING line naming the file,
    the counts and the first few game numbers in the file (counted across its chunks); an
    intact file beside it is not named. python-chess, read on the same text, agrees on which
    games are damaged."""
    numbers = [3, 11, 12, 30, 41, 47, 52]  # 7: five named, "and 2 more"
    intact = write(tmp_path, first_games_pgn(20), "intact.pgn")
    damaged = write(tmp_path, damage_fifth_moves(first_games_pgn(60), numbers), "damaged.pgn")
    with open(damaged) as fh:
        read = iter(lambda: chess.pgn.read_game(fh), None)
        assert [n for n, g in enumerate(read, start=1) if g.errors] == numbers
    monkeypatch.setattr(workers, "CHUNK_BYTES", 3000)  # several games a chunk, many chunks
    with caplog.at_level(logging.WARNING, logger="chesslm.data.convert"):
        manifest = convert.convert([intact, damaged], tmp_path / "ds", SETTINGS, workers=workers_)
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    skipped = manifest["skipped"]["unparsable"] + manifest["skipped"]["illegal_move"]
    assert skipped == len(numbers)
    assert len(said) == 1 and said[0].startswith(f"{damaged}: skipped "), said
    shown = ", ".join(map(str, numbers[: damage.SHOWN]))
    assert f"(games {shown} and {len(numbers) - damage.SHOWN} more of the file)" in said[0], said
    assert "may be damaged" in said[0] and "\n" not in said[0]


def test_crlf_bom_and_latin1_headers_give_the_same_games(tmp_path):
    text = first_games_pgn(50)
    plain = load_dataset(
        (convert.convert([write(tmp_path, text)], tmp_path / "a", SETTINGS), tmp_path / "a")[1]
    )
    odd = ("\ufeff" + text.replace("\n", "\r\n")).encode("utf-8")
    odd = odd.replace(b'[Event "Rated', b'[Event "R\xe9ted')  # latin-1 byte in a header
    convert.convert(
        [write(tmp_path, odd, "odd.pgn.zst")],
        tmp_path / "b",
        convert.Settings(),
    )
    assert load_dataset(tmp_path / "b") == plain
    assert len(plain) == 50


def test_games_without_a_lichess_id_get_a_content_id(tmp_path):
    text = '[Event "casual"]\n\n1. e4 e5 *\n\n[Event "casual"]\n\n1. d4 d5 *\n'
    convert.convert([write(tmp_path, text)], tmp_path / "ds", SETTINGS)
    ids = set(load_dataset(tmp_path / "ds"))
    assert len(ids) == 2 and all(i.startswith("c") for i in ids)


def test_a_single_game_converts_and_records_empty_splits(tmp_path):
    manifest = convert.convert(
        [write(tmp_path, game("abcdefgh", "1. e4 e5"))], tmp_path / "ds", SETTINGS
    )
    assert sum(manifest["games"].values()) == 1
    assert sorted(manifest["games"].values()) == [0, 0, 1]


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("empty.pgn", b"", "empty file"),
        ("none.pgn", b"just some words\nno games here\n", "no usable games"),
        ("notzstd.pgn.zst", b"plain text pretending to be zstd", "not a valid zstd stream"),
        ("missing.pgn", None, "no such file"),
    ],
)
def test_unreadable_input_stops_with_one_line_naming_the_file(tmp_path, name, content, message):
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    out = tmp_path / "ds"
    with pytest.raises((convert.ConvertError, PgnFileError)) as error:
        convert.convert([path], out, SETTINGS)
    text = str(error.value)
    assert message in text and str(path) in text and "\n" not in text
    assert not (out / "manifest.json").exists()
    assert not any((out / s).exists() for s in split.SPLITS)


def test_truncated_zstd_is_refused_and_leaves_nothing(tmp_path):
    whole = SAMPLE.read_bytes()
    path = tmp_path / "cut.pgn.zst"
    path.write_bytes(whole[: len(whole) // 2])
    out = tmp_path / "ds"
    with pytest.raises(PgnFileError, match="truncated") as error:
        convert.convert([path], out, SETTINGS, workers=2)
    assert str(path) in str(error.value)
    assert sorted(p.name for p in out.iterdir()) == []


def test_a_failed_reconversion_keeps_the_previous_dataset(tmp_path):
    out = tmp_path / "ds"
    good = convert.convert([write(tmp_path, first_games_pgn(20))], out, SETTINGS)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    with pytest.raises(convert.ConvertError):
        convert.convert([write(tmp_path, b"", "empty.pgn")], out, SETTINGS)
    after = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert before == after and json.loads((out / "manifest.json").read_text()) == good


def test_shards_are_plain_npy_without_pickle(tmp_path):
    convert.convert([write(tmp_path, first_games_pgn(30))], tmp_path / "ds", SETTINGS)
    for path in (tmp_path / "ds").rglob("*.npy"):
        array = np.load(path, allow_pickle=False)
        assert array.dtype != object


@pytest.mark.parametrize("chunk_bytes", [700, 5000])
def test_chunks_cut_only_between_games_whatever_their_size(tmp_path, chunk_bytes):
    """The reader's chunks (in shared buffers of 2 x chunk_bytes, or spilled to memory when one
    game is longer than a buffer: 700 bytes is shorter than most games) are the file's text
    cut only where a game starts, CRLF included."""
    text = "\ufeff" + first_games_pgn(40).replace("\n", "\r\n")
    path = write(tmp_path, text, "in.pgn.zst")
    chunks = list(pgn.read_raw_chunks(path, chunk_bytes=chunk_bytes))
    assert b"".join(chunks).decode() == text.removeprefix("\ufeff")
    assert len(chunks) > 5 and all(c.startswith(b"[Event ") for c in chunks)


def test_many_workers_with_small_chunks_give_the_one_worker_dataset(tmp_path, monkeypatch):
    """Shared buffers smaller than many games (so the spill path runs), several inputs, more
    chunks than buffers: the same files as one worker with the default chunks."""
    inputs = [write(tmp_path, first_games_pgn(60), "a.pgn"), SAMPLE]
    one = convert.convert(inputs, tmp_path / "one", SETTINGS)
    monkeypatch.setattr(workers, "CHUNK_BYTES", 700)
    many = convert.convert(inputs, tmp_path / "many", SETTINGS, workers=3)
    assert many["files"] == one["files"] and many["skipped"] == one["skipped"]
    digests = [hashlib.sha256(p.read_bytes()).hexdigest() for p in inputs]
    assert [i["sha256"] for i in many["inputs"]] == digests  # hashed as read, buffers reused


def test_zstd_frames_of_every_kind_are_read_and_any_cut_is_refused(tmp_path):
    """Frames with and without checksums and sizes, a skippable frame between them: read
    whole; the same file cut anywhere inside a frame: refused as truncated, naming it."""
    text = first_games_pgn(30)
    thirds = [text[: len(text) // 3], text[len(text) // 3 : 2 * len(text) // 3]]
    thirds.append(text[2 * len(text) // 3 :])
    frames = [
        zstandard.ZstdCompressor(write_checksum=True).compress(thirds[0].encode()),
        (0x184D2A53).to_bytes(4, "little") + (5).to_bytes(4, "little") + b"skip!",
        zstandard.ZstdCompressor(write_content_size=False).compress(thirds[1].encode()),
        b"".join(zstandard.ZstdCompressor().read_to_iter(io.BytesIO(thirds[2].encode()))),
    ]
    whole = b"".join(frames)
    path = tmp_path / "month.pgn.zst"
    path.write_bytes(whole)
    assert b"".join(pgn.read_raw_chunks(path, chunk_bytes=4096)).decode() == text
    for cut in (len(whole) - 1, len(whole) - 4, len(frames[0]) - 2, len(frames[0]) + 7, 6):
        path.write_bytes(whole[:cut])
        with pytest.raises(PgnFileError, match="truncated") as error:
            list(pgn.read_raw_chunks(path))
        assert str(path) in str(error.value)
