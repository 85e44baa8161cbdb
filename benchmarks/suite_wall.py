"""README's test command on fresh clones of two commits, one after the other: wall seconds,
the machine's busy CPU seconds over the run (/proc/stat: every process, the killed and orphaned
ones too), the tests' tally, and each run's ratio to the reference's run beside it.

    python benchmarks/suite_wall.py --reference 2b42b06 --order ABBA --json /tmp/suite.json

Each clone is installed editable into this environment before its run (``pip install
--no-deps -e``) and this checkout again at the end, so nothing else may use the environment
meanwhile. The machine is noisy (a fifth from one hour to the next here): only runs back to
back compare, and ABBA puts each commit once early and once late.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEST_COMMAND = [sys.executable, "-m", "pytest", "-q"]  # README.md's, in the clone


def busy_cpu_seconds() -> float:
    """The machine's CPU seconds spent in user, nice, system, irq and softirq so far."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq = (int(f) for f in fields[:7])
    return (user + nice + system + irq + softirq) / 100  # USER_HZ


def install(tree: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "-e", str(tree)], check=True
    )


def clone(commit: str, where: Path) -> Path:
    tree = where / "chesslm"  # README's commands run in a clone named so (.ci/run)
    subprocess.run(["git", "clone", "-q", str(ROOT), str(tree)], check=True)
    subprocess.run(["git", "-C", str(tree), "checkout", "-q", commit], check=True)
    return tree


def suite(commit: str) -> dict:
    """README's test command on a fresh clone of ``commit``."""
    with tempfile.TemporaryDirectory(prefix="suite-wall-") as scratch:
        tree = clone(commit, Path(scratch))
        install(tree)
        cpu, start = busy_cpu_seconds(), time.monotonic()
        done = subprocess.run(TEST_COMMAND, cwd=tree, capture_output=True, text=True)
        wall, cpu = time.monotonic() - start, busy_cpu_seconds() - cpu
    tally = re.findall(r"(\d+) (passed|failed|skipped|errors?)", done.stdout.splitlines()[-1])
    return {
        "commit": commit,
        "wall_s": round(wall, 1),
        "busy_cpu_s": round(cpu, 1),
        "returncode": done.returncode,
        "tally": {kind: int(n) for n, kind in tally},
        "at": time.strftime("%H:%M:%S"),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reference", required=True, help="the commit compared against (A)")
    p.add_argument("--commit", default="HEAD", help="the commit measured (B)")
    p.add_argument("--order", default="AB", help="the runs' order, e.g. AB, BA or ABBA")
    p.add_argument("--json", type=Path, help="write the runs here too")
    a = p.parse_args()
    commits = {
        name: subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", ref],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        for name, ref in (("A", a.reference), ("B", a.commit))
    }
    runs = []
    try:
        for name in a.order:
            runs.append({"run": name, **suite(commits[name])})
            print(json.dumps(runs[-1]), flush=True)
    finally:
        install(ROOT)
    for i, run in enumerate(runs):  # each B against the A run next to it
        if run["run"] == "B":
            beside = [r for r in runs[max(0, i - 1) : i + 2] if r["run"] == "A"]
            if beside:
                ratio = run["wall_s"] / beside[0]["wall_s"]
                run["wall_ratio_to_A_beside"] = round(ratio, 3)
                print(f"B {run['commit']} at {run['at']}: {ratio:.3f}x the wall of A beside it")
    if a.json:
        a.json.write_text(json.dumps(runs, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
