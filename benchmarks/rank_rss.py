"""Peak host RSS of one training rank's setup against the size of its token cache.

For each ``--games N`` a token cache is built from generated games (the real move sequences of
the embedded sample, drawn with replacement by a seeded generator, written as shards of
100,000 games and concatenated by ``chesslm.data.cache.build``), then a fresh subprocess opens
it as a training rank does: ``open_cache`` (verifying every hash), ``Trainer`` (CPU, tiny model,
which plans epoch 0), ``ValidationSet`` and the batch plan of epoch 1. It prints the peak RSS
(``resource.getrusage``), the resident anonymous and file-backed memory at the end
(/proc/self/status) and the ratio of each peak to the smallest cache's; ``per game`` is the
slope against the smallest cache. What still grows is the plan itself (4-byte indices) and
the uint16 game lengths, a few bytes per game, instead of a Python int per game.

Usage: python benchmarks/rank_rss.py [--games 10000 100000 1000000] [--packing]
       [--workdir DIR] [--validation 0.05] [--legality-games 256]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "resources" / "lichess-sample.pgn.zst"
SHARD_GAMES = 100_000


def pool() -> list[np.ndarray]:
    """The tokenised sample games (at least one move each)."""
    import chess.pgn
    import zstandard

    from chesslm.data import tokens

    out = []
    with open(SAMPLE, "rb") as fh:
        text = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(fh), encoding="utf-8")
        while (game := chess.pgn.read_game(text)) is not None:
            moves = list(game.mainline_moves())[:300]  # well inside the tiny model's context
            if moves and game.board().is_valid():
                out.append(np.array(tokens.encode_moves(moves), dtype=np.uint8))
    return out


def build(out: Path, n: int, games: list[np.ndarray], a: argparse.Namespace) -> float:
    """A token cache of ``n`` generated games; returns the seconds it took."""
    from chesslm.data import cache, gamearrays

    start = time.perf_counter()
    shards = out.with_name(out.name + ".shards")
    shutil.rmtree(shards, ignore_errors=True)
    rng = np.random.default_rng(n)
    n_val = max(1, int(n * a.validation))
    prefixes: dict[str, list[Path]] = {"train": [], "validation": []}
    for split, count in (("train", n - n_val), ("validation", n_val)):
        for first in range(0, count, SHARD_GAMES):
            picked = rng.integers(0, len(games), min(SHARD_GAMES, count - first))
            ids = [f"{split}{first + i:09d}" for i in range(len(picked))]
            prefix = shards / split / f"{first // SHARD_GAMES:05d}"
            prefix.parent.mkdir(parents=True, exist_ok=True)
            gamearrays.save(prefix, gamearrays.pack([games[i] for i in picked], ids))
            prefixes[split].append(prefix)
    cache.build(
        out,
        prefixes,
        meta={"dataset_fingerprint": f"rank-rss-{n}"},
        workers=a.workers,
        legality_games=a.legality_games,
    )
    shutil.rmtree(shards)
    return time.perf_counter() - start


def child(cache_dir: str, packing: bool) -> None:
    """Open the cache as one training rank does (up to its batch plans); print the figures."""
    import torch

    from chesslm.train import distributed, validation
    from chesslm.train.settings import RunSettings
    from chesslm.train.trainer import Trainer, open_cache

    settings = RunSettings(
        dataset="rank-rss", model="tiny", device="cpu", workers=1, compile=False, packing=packing
    )
    ctx = distributed.init("cpu", threads=1)
    start = time.perf_counter()
    cache = open_cache(cache_dir, ctx)
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = Trainer(settings, ctx, cache, run_dir=run_dir)
    val = validation.ValidationSet(
        cache, torch.device("cpu"), legality_games=settings.legality_eval_games
    )
    plan = trainer.plan(1)
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    kib = {k: int(status[k].split()[0]) for k in ("RssAnon", "RssFile")}
    print(
        json.dumps(
            {
                "train_games": len(cache.train),
                "validation_games": len(val),
                "updates_per_epoch": len(plan),
                "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                "rss_anon_kib": kib["RssAnon"],
                "rss_file_kib": kib["RssFile"],
                "seconds": time.perf_counter() - start,
            }
        )
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--games", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    p.add_argument("--packing", action="store_true", help="the packed (throughput) plan")
    p.add_argument("--workdir", type=Path, default=None, help="where the caches go (kept)")
    p.add_argument("--validation", type=float, default=0.05, help="validation fraction")
    p.add_argument("--legality-games", type=int, default=256, help="legality subset bound")
    p.add_argument("--workers", type=int, default=2, help="processes for the legality tables")
    p.add_argument("--child", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        child(a.child, a.packing)
        return
    workdir = a.workdir or Path(tempfile.mkdtemp(prefix="rank-rss-"))
    games = pool()
    print(f"{len(games)} sample games drawn with replacement; caches under {workdir}")
    rows = []
    for n in sorted(a.games):
        out = workdir / f"cache-{n}"
        if not (out / "cache.json").exists():
            print(f"building {n:,} games: {build(out, n, games, a):.1f} s", flush=True)
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
        command = [sys.executable, __file__, "--child", str(out)]
        done = subprocess.run(
            command + (["--packing"] if a.packing else []),
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        if done.returncode:
            sys.exit(f"rank setup on {out} failed:\n{done.stderr}")
        rows.append({"games": n, **json.loads(done.stdout.strip().splitlines()[-1])})
    base = rows[0]
    plan = "packed" if a.packing else "padded"
    print(f"\nrank setup (open_cache + Trainer + ValidationSet + plan), {plan} plan, CPU, tiny")
    print(
        f"{'games':>10} {'train':>10} {'updates':>8} {'peak RSS MiB':>13} {'ratio':>6}"
        f" {'anon MiB':>9} {'file MiB':>9} {'B/game':>7} {'setup s':>8}"
    )
    for r in rows:
        slope = (
            (r["peak_rss_kib"] - base["peak_rss_kib"]) * 1024 / (r["games"] - base["games"])
            if r["games"] > base["games"]
            else float("nan")
        )
        print(
            f"{r['games']:>10,} {r['train_games']:>10,} {r['updates_per_epoch']:>8,}"
            f" {r['peak_rss_kib'] / 1024:>13.1f} {r['peak_rss_kib'] / base['peak_rss_kib']:>6.2f}"
            f" {r['rss_anon_kib'] / 1024:>9.1f} {r['rss_file_kib'] / 1024:>9.1f}"
            f" {slope:>7.1f} {r['seconds']:>8.1f}"
        )


if __name__ == "__main__":
    main()
