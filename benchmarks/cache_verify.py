"""What verifying the token cache costs a job that reads it (issue 63 item 2): every reader
after training (play, score, analyse) re-hashes the cache's files against cache.json once per
process. Against it, in the same process: move-matching of ``--games`` validation games of the
same cache with the tiny preset (freshly initialised; the speed does not depend on the
weights), the cheapest part of a play job (the job also plays legality and Elo games, and a
real model is larger), so the share printed is an upper bound. Interleaved ``--repeats``
times; the page cache is warm, as it is right after the cache is built.

    snakemake --cores 2 results/datasets/real/token-cache/cache.json
    python benchmarks/cache_verify.py --cache results/datasets/real/token-cache --games 10000
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chesslm.data import cache  # noqa: E402
from chesslm.match import matching  # noqa: E402
from chesslm.model import gpt  # noqa: E402


def verify_seconds(directory: Path) -> float:
    cache._HASHED.clear()  # as a fresh job: nothing hashed yet
    start = time.perf_counter()
    cache.TokenCache(directory, verify=True)
    return time.perf_counter() - start


def match_seconds(directory: Path, games: int, net: torch.nn.Module) -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as state:
        ev = matching.Evaluator(net, directory, Path(state), games=games, chunk_games=500,
                                batch_tokens=32768, device=torch.device("cpu"))  # fmt: skip
        start = time.perf_counter()
        ev.run(deadline=float("inf"))
        return time.perf_counter() - start, ev.positions_done


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cache", type=Path, required=True, help="a token cache directory")
    p.add_argument("--games", type=int, default=10000, help="validation games move-matched")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    torch.set_num_threads(1)  # play's default threads
    torch.manual_seed(0)
    net = gpt.build("tiny").eval()
    size = sum(f.stat().st_size for f in args.cache.iterdir() if f.is_file())
    rows = []
    for _ in range(args.repeats):
        verify = verify_seconds(args.cache)
        match, positions = match_seconds(args.cache, args.games, net)
        rows.append({"verify_s": verify, "match_s": match, "positions": positions,
                     "share": verify / (verify + match)})  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    shares = [r["share"] for r in rows]
    summary = {"cache": str(args.cache), "cache_bytes": size, "games": args.games,
               "share_median": statistics.median(shares), "share_max": max(shares)}  # fmt: skip
    for key in ("verify_s", "match_s"):
        summary[f"{key}_median"] = statistics.median(r[key] for r in rows)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
