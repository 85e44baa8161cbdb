"""verify and the token cache refuse a dataset changed by one byte, naming the file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from chesslm import files
from chesslm.data import cache, convert, gamearrays, integrity, tokens
from tests.helpers import first_games_pgn


def convert_and_verify(tmp_path: Path, games: int, settings: convert.Settings) -> tuple[Path, Path]:
    """A dataset of the sample's first games and its receipt: (dataset dir, receipt path)."""
    pgn = tmp_path / "in.pgn"
    pgn.write_text(first_games_pgn(games))
    ds = tmp_path / "ds"
    convert.convert([pgn], ds, settings)
    receipt = ds / "integrity-receipt.json"
    files.write_json_atomic(receipt, integrity.verify_dataset(ds))
    return ds, receipt


@pytest.fixture
def verified(tmp_path) -> tuple[Path, Path]:
    return convert_and_verify(tmp_path, 200, convert.Settings(validation=0.1, test=0.1))


def flip_byte(path: Path, offset: int = -1) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def test_receipt_covers_every_file_of_all_three_splits(verified):
    ds, receipt_path = verified
    receipt = json.loads(receipt_path.read_text())
    on_disk = {p.relative_to(ds).as_posix() for p in ds.rglob("*.npy")}
    assert set(receipt["files"]) == on_disk
    assert {name.split("/")[0] for name in on_disk} == {"train", "validation", "test"}
    assert receipt["all_files_verified"] and receipt["test_decoded"] is False


@pytest.mark.parametrize("split_name", ["train", "validation", "test"])
def test_verify_refuses_a_tampered_shard(verified, split_name):
    ds, _ = verified
    shard = ds / f"{split_name}/00000.tokens.npy"
    flip_byte(shard)
    with pytest.raises(integrity.IntegrityError, match="does not match the manifest") as error:
        integrity.verify_dataset(ds)
    assert str(shard) in str(error.value)


def test_verify_refuses_a_tampered_manifest(verified):
    ds, _ = verified
    manifest = ds / "manifest.json"
    text = manifest.read_text()
    digit = text.index('"validation": ', text.index('"games"')) + len('"validation": ')
    manifest.write_text(text[:digit] + str((int(text[digit]) + 1) % 10) + text[digit + 1 :])
    with pytest.raises(integrity.IntegrityError, match="fingerprint") as error:
        integrity.verify_dataset(ds)
    assert str(manifest) in str(error.value)


def test_the_fingerprint_is_the_content_not_the_input_files_name(verified, tmp_path):
    """The same games from a file of another name are the same dataset; a manifest of the
    earlier fingerprint (the whole manifest, inputs' names included) still verifies."""
    ds, _ = verified
    again = tmp_path / "again.pgn"
    again.write_text(first_games_pgn(200))
    other = convert.convert([again], tmp_path / "other", convert.Settings(validation=0.1, test=0.1))
    first = files.read_json(ds / "manifest.json")
    assert other["inputs"] != first["inputs"] and other["fingerprint"] == first["fingerprint"]
    earlier = {k: v for k, v in first.items() if k != "fingerprint"}
    files.write_json_atomic(
        ds / "manifest.json", {**earlier, "fingerprint": files.digest_json(earlier)}
    )
    assert integrity.verify_dataset(ds)["dataset_fingerprint"] == files.digest_json(earlier)


def test_token_cache_refuses_a_shard_changed_after_verify(verified, tmp_path):
    ds, receipt = verified
    shard = ds / "validation/00000.tokens.npy"
    flip_byte(shard)
    with pytest.raises(integrity.IntegrityError, match="does not match the receipt") as error:
        cache.build_from_dataset(ds, receipt, tmp_path / "cache")
    assert str(shard) in str(error.value)
    assert not (tmp_path / "cache").exists()


def test_token_cache_refuses_a_tampered_receipt_or_manifest(verified, tmp_path):
    ds, receipt = verified
    original = receipt.read_text()
    receipt.write_text(original.replace('"test_decoded": false', '"test_decoded": true'))
    with pytest.raises(integrity.IntegrityError, match="receipt has been altered") as error:
        cache.build_from_dataset(ds, receipt, tmp_path / "cache")
    assert str(receipt) in str(error.value)
    receipt.write_text(original)
    flip_byte(ds / "manifest.json", offset=-3)
    with pytest.raises(integrity.IntegrityError, match="manifest changed") as error:
        cache.build_from_dataset(ds, receipt, tmp_path / "cache")
    assert "manifest.json" in str(error.value)


def test_token_cache_holds_train_and_validation_only(verified, tmp_path):
    ds, receipt = verified
    info = cache.build_from_dataset(ds, receipt, tmp_path / "cache")
    opened = cache.TokenCache(tmp_path / "cache", verify=True)
    test_ids = set(gamearrays.Games(ds / "test/00000").ids.tolist())
    assert test_ids, "the fixture must have test games for this check to mean anything"
    cached = set(opened.train.ids.tolist()) | set(opened.validation.ids.tolist())
    assert not cached & test_ids
    manifest = json.loads((ds / "manifest.json").read_text())
    assert len(opened.train) == manifest["games"]["train"] == info["splits"]["train"]["games"]
    assert len(opened.validation) == manifest["games"]["validation"]
    assert opened.fingerprint == manifest["fingerprint"]


@pytest.mark.parametrize("bound", [cache.LEGALITY_GAMES, 5])
def test_cached_legal_masks_match_the_tokenizer_state(verified, tmp_path, bound):
    """Tables for ``bound`` evenly spaced validation games only (all when fewer), in order."""
    ds, receipt = verified
    info = cache.build_from_dataset(
        ds, receipt, tmp_path / "cache", workers=2, legality_games=bound
    )
    opened = cache.TokenCache(tmp_path / "cache")
    n = len(opened.validation)
    assert n > 5  # the bound of 5 leaves games out
    subset = opened.legality_games().tolist()
    assert subset == (list(range(n)) if bound >= n else [i * n // bound for i in range(bound)])
    assert info["legality_games"] == {"bound": bound, "games": len(subset)}
    bits = np.asarray(opened.legal_mask())  # uint8 [tokens, 16], little-endian bits
    masks = np.unpackbits(bits, axis=-1, bitorder="little", count=tokens.VOCAB_SIZE).astype(bool)
    codes, code_offsets = opened.legal_moves()
    row = ply = 0
    for g in subset:
        game = opened.validation[g]
        state = tokens.State()
        for j, token in enumerate(game):
            state.feed(token)
            assert masks[row + j].tolist() == state.mask(legal=True)
            if j % 3 == 0 and j + 1 < len(game) - 1:  # a move starts after token j
                legal = {cache.move_code(*tokens.move_tokens(m)) for m in state.board.legal_moves}
                assert set(codes[code_offsets[ply] : code_offsets[ply + 1]].tolist()) == legal
                ply += 1
        row += len(game)
    assert row == len(masks) and ply == len(code_offsets) - 1


def test_token_cache_refuses_an_empty_validation_split(tmp_path):
    ds, receipt = convert_and_verify(tmp_path, 5, convert.Settings(validation=0.0, test=0.0))
    with pytest.raises(ValueError, match="validation split is empty"):
        cache.build_from_dataset(ds, receipt, tmp_path / "cache")


def test_cache_arrays_are_memory_mapped(verified, tmp_path):
    ds, receipt = verified
    cache.build_from_dataset(ds, receipt, tmp_path / "cache")
    opened = cache.TokenCache(tmp_path / "cache")
    assert isinstance(opened.train.tokens, np.memmap)


def test_two_writers_of_one_file_at_once_never_collide(tmp_path):
    """A second writer (another --nolock snakemake's job) writes the same file while the first
    is mid-write: each has its own temporary, both complete, the last rename wins whole."""
    target = tmp_path / "scores.json"
    with files.open_atomic(target) as first:
        first.write(b'{"writer": ')
        files.write_json_atomic(target, {"writer": 2})
        assert files.read_json(target) == {"writer": 2}
        first.write(b"1}")
    assert files.read_json(target) == {"writer": 1}
    assert not list(tmp_path.glob("*.tmp"))


def test_only_a_dead_writers_temporaries_are_stale(tmp_path):
    dead = tmp_path / ".last.pt.999999999.0badf00d.tmp"  # beyond any pid_max
    old = tmp_path / "last.pt.tmp"  # the shared name of before
    live = files.tmp_path(tmp_path / "last.pt")
    other = tmp_path / ".best.pt.999999999.0badf00d.tmp"
    for path in (dead, old, live, other):
        path.write_bytes(b"partial")
    assert files.stale_temporaries(tmp_path, "last.pt") == [dead, old]
    assert files.remove_stale_temporaries(tmp_path) == [other, dead, old]  # sorted by name
    assert live.read_bytes() == b"partial"
