"""Launch the probe and a one-update segment again and again (two gloo ranks on the CPU, many
launches at once to load the host) and count the launches that abort at exit or fail:

    python benchmarks/exit_stress.py --launches 300 --parallel 8 [--teardown]

``--teardown`` keeps the interpreter's own teardown at exit (CHESSLM_EXIT_TEARDOWN=1), as the
trainer exited before ``launch.end_process``. Every rank runs with PYTHONFAULTHANDLER=1, so an
abort prints the Python stack of each thread. Prints one JSON line of counts; the logs of the
launches that went wrong go to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.conftest import make_cache  # noqa: E402

TINY = ["--dataset=tiny", "--model=tiny", "--micro=2", "--accum=1", "--threads-per-worker=1"]


def launch(index: int, cache: Path, scratch: Path, teardown: bool, until: float) -> dict | None:
    if time.perf_counter() > until:  # the time budget is spent: launch no more
        return None
    run_dir = scratch / f"run{index}"
    mode = "probe" if index % 2 == 0 else "train"  # index -1: a segment
    paths = (
        [f"--probe-out={run_dir}/probe-results.json"]
        if mode == "probe"
        else [f"--status-out={run_dir}/segments/0.json", "--segment-updates=1", "--epochs=1"]
    )
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
        "-m", "chesslm.train.segment", mode, f"--cache={cache}", f"--run-dir={run_dir}",
        "--workers=2", *TINY, *paths,
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    if teardown:
        env["CHESSLM_EXIT_TEARDOWN"] = "1"
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)
    text = done.stdout + done.stderr
    return {
        "index": index,
        "mode": mode,
        "returncode": done.returncode,
        "abort": "terminate called" in text or "Fatal Python error" in text,
        "log": text,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--launches", type=int, default=300)
    p.add_argument("--parallel", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    p.add_argument("--teardown", action="store_true", help="keep the interpreter's teardown")
    p.add_argument("--out", type=Path, default=Path("results/exit-stress"))
    p.add_argument("--seconds", type=float, default=float("inf"), help="launch no more after")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="exit-stress-") as scratch:
        cache = make_cache(Path(scratch) / "cache", n_train=24, n_val=6)
        first = launch(-1, cache, Path(scratch), args.teardown, float("inf"))
        if first["returncode"]:  # a broken set-up, not a race: say why and stop
            raise SystemExit(f"the first launch failed:\n{first['log'][-3000:]}")
        start = time.perf_counter()
        until = start + args.seconds
        with ThreadPoolExecutor(args.parallel) as pool:
            runs = pool.map(
                lambda i: launch(i, cache, Path(scratch), args.teardown, until),
                range(args.launches),
            )
            runs = [r for r in runs if r is not None]
        seconds = time.perf_counter() - start
    bad = [r for r in runs if r["abort"] or r["returncode"]]
    for r in bad:
        (args.out / f"{'teardown' if args.teardown else 'end'}-{r['index']}.log").write_text(
            r["log"]
        )
    summary = {
        "launches": len(runs),
        "probes": sum(r["mode"] == "probe" for r in runs),
        "segments": sum(r["mode"] == "train" for r in runs),
        "parallel": args.parallel,
        "teardown": args.teardown,
        "aborts": sum(r["abort"] for r in runs),
        "failed": sum(bool(r["returncode"]) for r in runs),
        "seconds": round(seconds, 1),
        "cpus": os.cpu_count(),
    }
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
