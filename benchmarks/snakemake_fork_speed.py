"""The tests' snakemake runs: the ``snakemake`` command against the same command forked from a
process that imported snakemake once (tests/forked.py), alternating, same dry run.
Prints one JSON line: the wall seconds of each kind of run (median, min, max) and their ratio.

    python benchmarks/snakemake_fork_speed.py --runs 5

The dry run: ``snakemake -n results/demo/results.json`` in a folder that links the repository's
workflow, as tests/workflow/test_docs.py does.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests import forked  # noqa: E402


def workdir(parent: Path) -> Path:
    for name in ("Snakefile", "workflow", "profiles", "resources", "config"):
        (parent / name).symlink_to(ROOT / name)
    return parent


def timed(kind: str, where: Path, env: dict[str, str]) -> float:
    args = ["-n", "results/demo/results.json"]
    start = time.perf_counter()
    if kind == "command":
        exe = Path(sys.executable).parent / "snakemake"
        done = subprocess.run([str(exe), *args], cwd=where, env=env, capture_output=True)
    else:
        done = forked.run("snakemake", args, cwd=where, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="dry runs of each kind")
    runs = parser.parse_args().runs
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryDirectory() as scratch:
        where = workdir(Path(scratch))
        timed("forked", where, env)  # starts the forking process (its imports), untimed
        seconds: dict[str, list[float]] = {"command": [], "forked": []}
        for _ in range(runs):
            for kind, spent in seconds.items():
                spent.append(timed(kind, where, env))
    summary = {
        kind: {"median_s": statistics.median(s), "min_s": min(s), "max_s": max(s)}
        for kind, s in seconds.items()
    }
    ratio = summary["forked"]["median_s"] / summary["command"]["median_s"]
    print(json.dumps({"runs": runs, **summary, "forked_over_command": round(ratio, 3)}))


if __name__ == "__main__":
    main()
