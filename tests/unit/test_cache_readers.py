"""Every reader of a token cache after training verifies it (issue 63 item 2): move-matching
(play, score), think time, the outcome table and the analyser refuse a cache with one flipped
byte in one line naming the file and its rebuild; each file is hashed once per process."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from chesslm.data import cache
from chesslm.engine import analyse
from chesslm.match import matching, outcome, think_time

DAMAGED = "validation.tokens.npy"


def readers(net: torch.nn.Module, tmp: Path) -> dict[str, Callable[[Path], object]]:
    """Each reader's opening of ``cache_dir``, as its job calls it."""
    return {
        "matching": lambda d: matching.Evaluator(
            net,
            d,
            tmp / "state",
            games=None,
            chunk_games=4,
            batch_tokens=4096,
            device=torch.device("cpu"),
        ),  # fmt: skip
        "think_time": lambda d: think_time.section({}, {}, {}, (np.array([]), []), np.array([]), d),
        "outcome": outcome.train_split,
        "analyse": lambda d: analyse.analyse_validation(d, tmp / "a.csv", net=net),
    }


def flipped(play_cache: Path, tmp: Path) -> Path:
    out = shutil.copytree(play_cache, tmp / "cache")
    data = bytearray((out / DAMAGED).read_bytes())
    data[-1] ^= 0x01
    (out / DAMAGED).write_bytes(bytes(data))
    return out


@pytest.mark.parametrize("reader", ["matching", "think_time", "outcome", "analyse"])
def test_every_reader_refuses_a_flipped_byte_naming_the_file_and_the_rebuild(
    play_cache: Path, net: torch.nn.Module, tmp_path: Path, reader: str
) -> None:
    damaged = flipped(play_cache, tmp_path)
    with pytest.raises(ValueError) as refusal:
        readers(net, tmp_path)[reader](damaged)
    line = str(refusal.value)
    assert line.startswith(f"{damaged / DAMAGED}: sha256 "), line
    assert "does not match cache.json" in line and "--forcerun token_cache" in line, line
    assert "\n" not in line
    assert not (tmp_path / "a.csv").exists()  # nothing written


def test_each_file_is_hashed_once_per_process_until_it_changes(
    play_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job opens its cache more than once: the second verify hashes nothing; a file written
    since (same bytes or not) is hashed again."""
    copy = shutil.copytree(play_cache, tmp_path / "cache")
    hashed: list[str] = []
    real = cache.sha256_file
    monkeypatch.setattr(cache, "sha256_file", lambda p: hashed.append(Path(p).name) or real(p))
    names = sorted(cache.TokenCache(copy).meta["sha256"])
    cache.TokenCache(copy, verify=True)
    assert sorted(hashed) == names
    hashed.clear()
    cache.TokenCache(copy, verify=True)
    assert hashed == []
    (copy / DAMAGED).write_bytes((copy / DAMAGED).read_bytes())  # rewritten, same bytes
    cache.TokenCache(copy, verify=True)
    assert hashed == [DAMAGED]
