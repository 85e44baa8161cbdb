"""chesslm-analyse's peak memory against the number of games: the console script run on the
first ``--small`` and the first ``--large`` games of the embedded sample repeated (four zstd
frames: 19,016 games), each in its own process, its peak resident set read from ``wait4``.
Prints one JSON line: each run's games, peak RSS and seconds, and the large run's peak over the
small one's (flat memory: near 1).

    python benchmarks/analyse_memory.py --small 1000 --large 17000

The weights are freshly initialised (the memory does not depend on them); one torch thread.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "resources" / "lichess-sample.pgn.zst"
REPEATS = 4


def peak(argv: list[str], cwd: Path) -> tuple[float, float]:
    """(peak RSS in MB, seconds) of one process running ``argv``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    started = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{' '.join(argv)} failed")
    return usage.ru_maxrss / 1024, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", type=int, default=1000)
    parser.add_argument("--large", type=int, default=17000)
    parser.add_argument("--preset", default="tiny")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from tests.helpers import model_checkpoint

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        model_checkpoint(folder / "fresh.pt", preset=args.preset)
        (folder / "games.pgn.zst").write_bytes(SAMPLE.read_bytes() * REPEATS)
        out = {"preset": args.preset}
        for name, games in (("small", args.small), ("large", args.large)):
            argv = [sys.executable, "-m", "chesslm.engine.analyse", "--checkpoint", "fresh.pt",
                    "games.pgn.zst", "--games", str(games), "--csv", f"{name}/a.csv"]  # fmt: skip
            mb, seconds = peak(argv, folder)
            out[name] = {"games": games, "peak_rss_mb": round(mb), "seconds": round(seconds, 1)}
        out["large_over_small_peak"] = round(
            out["large"]["peak_rss_mb"] / out["small"]["peak_rss_mb"], 3
        )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
