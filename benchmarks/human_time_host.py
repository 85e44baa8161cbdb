"""The host's cost of human time in a training microbatch: building the time rows and the
think-time targets (``GameTimes.microbatch``: one pass over the games' clocks) against
collating the same microbatch's tokens (``batching.collate`` / ``collate_packed``), on the same
games in the same run, padded and packed; alternated, so the drift of a loaded machine falls on
both.

    python benchmarks/human_time_host.py                       # synthetic blitz games
    python benchmarks/human_time_host.py --microbatches 400 --json /tmp/host.json

Prints, per layout, milliseconds per microbatch of each and their ratio (human time over the
collation): what the trainer's host adds per microbatch when a run has ``time_inputs`` or
``think_time`` (the device's cost is ``train_speed.py``'s ``PATH+time``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import train_speed  # noqa: E402

from chesslm.train import batching  # noqa: E402
from chesslm.train.human_time import GameTimes  # noqa: E402


def layouts(data: train_speed.SyntheticCache, n: int) -> dict[str, tuple[list, bool]]:
    lengths = data.train.lengths
    padded = batching.global_batches(lengths, epoch=0, seed=1, micro=8, world=1)
    packed = batching.packed_batches(lengths, epoch=0, seed=1, micro=16, world=1, row_tokens=1024)
    return {
        "padded (8 games)": ([list(b) for b in list(padded)[:n]], False),
        "packed (16 rows of 1024)": ([list(b) for b in list(packed)[: max(1, n // 10)]], True),
    }


def seconds(parts: list, packed: bool, data: train_speed.SyntheticCache, times: GameTimes):
    """(collation, human time) seconds over ``parts``."""
    t0 = time.perf_counter()
    for p in parts:
        if packed:
            batching.collate_packed(data.train, p, "cpu", row_tokens=1024, n_rows=len(p))
        else:
            batching.collate([data.train[i] for i in p], "cpu")
    t1 = time.perf_counter()
    for p in parts:
        T = 1024 if packed else max(len(data.train[i]) for i in p) - 1
        times.microbatch(data.train, p, (len(p), T), prefix=0, packed=packed)
    return t1 - t0, time.perf_counter() - t1


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--games", type=int, default=4000)
    p.add_argument("--microbatches", type=int, default=200)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json")
    a = p.parse_args(argv)
    torch.set_num_threads(1)  # a training rank's (threads_per_worker: 1)
    directory = Path(tempfile.mkdtemp(prefix="chesslm-host-"))
    data = train_speed.SyntheticCache(a.games, 50, 0, 40, 1024, directory)
    times = GameTimes.of_cache(data, "train", weight=0.2)
    times.game_counts()  # once per run, before the first update
    out = {}
    for name, (parts, packed) in layouts(data, a.microbatches).items():
        rows = [seconds(parts, packed, data, times) for _ in range(a.rounds)]
        collate, human = (np.median([r[k] for r in rows]) / len(parts) for k in (0, 1))
        out[name] = {"collate_ms": 1e3 * collate, "human_time_ms": 1e3 * human,
                     "ratio": human / collate, "microbatches": len(parts)}  # fmt: skip
        print(f"{name}: collation {1e3 * collate:.2f} ms, human time {1e3 * human:.2f} ms a"
              f" microbatch: {human / collate:.2f}x the collation")  # fmt: skip
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
