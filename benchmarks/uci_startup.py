"""``chesslm-uci``'s start-up (issue 64): seconds from the process's start to ``uciok`` and to
``readyok`` (``uci`` and ``isready`` written at once, as a match runner does), and from
``quit`` to the process's end, for this tree's engine against a reference commit's (default
``main``: before issue 64 it answered ``uci`` only after torch's import and the load, so its
``uciok`` is its ``readyok``). The reference is that commit's ``chesslm/`` (``git archive``)
run by the same interpreter; the two alternate, run by run (ABAB), on the same checkpoint.
Prints one JSON line: each engine's median, minimum and maximum of each time, and the
ratios of the medians (this tree / the reference).

    python benchmarks/uci_startup.py --runs 7
    python benchmarks/uci_startup.py --checkpoint results/demo/train/best.pt --reference main
    python benchmarks/uci_startup.py --preset baseline   # a larger load (86M parameters)

Without ``--checkpoint`` a fresh model of ``--preset`` (default tiny) is saved with the
project's own saver (tests.helpers' recipe).
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


def reference_tree(revision: str, folder: Path) -> Path:
    """The ``chesslm`` package of ``revision``, extracted under ``folder``."""
    archive = subprocess.run(["git", "archive", revision, "chesslm"], cwd=ROOT,
                             capture_output=True, check=True).stdout  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return folder


def one_start(tree: Path, checkpoint: Path) -> dict[str, float]:
    """Seconds from the start to ``uciok`` and ``readyok``, and from ``quit`` to the end."""
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "chesslm.engine.uci", "--checkpoint", str(checkpoint)]
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                            text=True, cwd=tree)  # fmt: skip
    proc.stdin.write("uci\nisready\n")  # type: ignore[union-attr]
    proc.stdin.flush()  # type: ignore[union-attr]
    seen = {}
    while "readyok" not in seen:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        if not line:
            raise SystemExit(f"{tree}: the engine ended before readyok (status {proc.wait()})")
        if line.strip() in ("uciok", "readyok"):
            seen[line.strip()] = time.perf_counter() - start
    quit_at = time.perf_counter()
    proc.stdin.write("quit\n")  # type: ignore[union-attr]
    proc.stdin.flush()  # type: ignore[union-attr]
    proc.communicate()
    return {"uciok_s": seen["uciok"], "readyok_s": seen["readyok"],
            "quit_s": time.perf_counter() - quit_at}  # fmt: skip


def spread(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--reference", default="main", help="a git revision (default main)")
    parser.add_argument("--runs", type=int, default=5, help="starts of each engine")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        checkpoint = args.checkpoint
        if checkpoint is None:
            sys.path.insert(0, str(ROOT))
            from tests.helpers import model_checkpoint

            checkpoint = model_checkpoint(Path(folder) / "fresh.pt", preset=args.preset)
        trees = {"this": ROOT, "reference": reference_tree(args.reference, Path(folder))}
        times: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
        for _ in range(args.runs):
            for name, tree in trees.items():
                times[name].append(one_start(tree, checkpoint))
    record = {"checkpoint": str(args.checkpoint or f"fresh {args.preset}"),
              "revision": args.reference, "runs": args.runs, "load_avg": os.getloadavg()[0],
              **{name: {key: spread([run[key] for run in runs]) for key in runs[0]}
                 for name, runs in times.items()}}  # fmt: skip
    record["ratio_median"] = {key: round(record["this"][key]["median"]
                                         / record["reference"][key]["median"], 3)
                              for key in ("uciok_s", "readyok_s", "quit_s")}  # fmt: skip
    print(json.dumps(record))


if __name__ == "__main__":
    main()
