"""Shared fixtures: tiny token caches made from the embedded Lichess sample."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import chess.pgn
import numpy as np
import pytest
import zstandard

from chesslm.data import cache, gamearrays, metadata, tokens

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "resources" / "lichess-sample.pgn.zst"


def sample_games(n: int, *, max_plies: int) -> list[np.ndarray]:
    """The first ``n`` sample games with at least one move, cut to ``max_plies`` plies."""
    out = []
    with open(SAMPLE, "rb") as fh:
        text = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(fh), encoding="utf-8")
        while len(out) < n:
            game = chess.pgn.read_game(text)
            if game is None:
                break
            moves = list(game.mainline_moves())[:max_plies]
            if moves:
                out.append(np.array(tokens.encode_moves(moves), dtype=np.uint8))
    return out


def make_cache(
    directory: Path,
    *,
    n_train: int,
    n_val: int,
    max_plies: int = 24,
    fingerprint: str = "test-fingerprint",
    legality_games: int | None = cache.LEGALITY_GAMES,
    ratings: bool = False,
) -> Path:
    """``ratings``: give the games seeded White and Black Elos (every 5th one unknown, -1)
    instead of none at all (every column at its sentinel)."""
    games = sample_games(n_train + n_val, max_plies=max_plies)
    shards = directory / "shards"
    shards.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(26)
    for split, part in (("train", games[:n_train]), ("validation", games[n_train:])):
        gamearrays.save(
            shards / split, gamearrays.pack(part, [f"{split}{i}" for i in range(len(part))])
        )
        for column in ("white_elo", "black_elo") if ratings else ():
            elo = rng.integers(600, 3500, len(part)).astype(np.int16)
            elo[::5] = -1
            gamearrays.save_npy(metadata.column_path(shards / split, column), elo)
    out = directory / "token-cache"
    cache.build(
        out,
        {"train": [shards / "train"], "validation": [shards / "validation"]},
        meta={"dataset_fingerprint": fingerprint},
        legality_games=legality_games,
    )
    return out


@pytest.fixture(scope="session")
def trained_workflow(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real snakemake run of tests/train-workflow.yaml (dataset and run ``mini``: the first
    300 sample games, two gloo workers, two segments of 3 updates) to results.json, shared by
    tests/test_train_workflow.py, tests/test_report_browser.py and tests/test_docs.py."""
    from tests.helpers import first_games_pgn, snakemake

    target, args = "results/mini/results.json", ("--configfile", "train-workflow.yaml")
    workdir = tmp_path_factory.mktemp("train-wf")
    (workdir / "config").mkdir()
    shutil.copy(ROOT / "config" / "config.yaml", workdir / "config" / "config.yaml")
    (workdir / "resources").symlink_to(ROOT / "resources")
    (workdir / "mini.pgn").write_text(first_games_pgn(300))
    shutil.copy(ROOT / "tests" / "train-workflow.yaml", workdir / "train-workflow.yaml")
    plan = snakemake(workdir, target, *args, "-n")
    # the segments are planned once the probe (a checkpoint) has run: workflow/rules/train.smk
    for rule in ("token_cache", "probe", "results"):
        assert rule in plan.stdout, plan.stdout
    snakemake(workdir, target, *args, "--cores", "2")
    return workdir


@pytest.fixture(scope="session")
def tiny_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """24 training and 6 validation games of at most 24 plies."""
    return make_cache(tmp_path_factory.mktemp("cache"), n_train=24, n_val=6)


@pytest.fixture(scope="session")
def rated_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``tiny_cache``'s games with seeded ratings (conditioned runs' tests)."""
    return make_cache(tmp_path_factory.mktemp("rated"), n_train=24, n_val=6, ratings=True)


def segment_args(cache: Path, run_dir: Path, n: int) -> list[str]:
    """The paths of segment ``n`` of the run in ``run_dir`` (resuming segment n-1's status)."""
    args = [
        "train",
        f"--cache={cache}",
        f"--run-dir={run_dir}",
        f"--segment={n}",
        f"--status-out={run_dir}/segments/{n}.json",
    ]
    if n > 0:
        args.append(f"--previous-status={run_dir}/segments/{n - 1}.json")
    return args


def run_segment(
    args: list[str], *, workers: int = 2, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``torchrun --standalone --nproc-per-node=workers -m chesslm.train.segment args`` (gloo)."""
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={workers}",
        "-m",
        "chesslm.train.segment",
        "--dataset=tiny",  # a run key; the cache is named by --cache
        *args,
        f"--workers={workers}",
    ]
    return subprocess.run(
        command, capture_output=True, text=True, env=full_env, timeout=timeout, cwd=ROOT
    )
