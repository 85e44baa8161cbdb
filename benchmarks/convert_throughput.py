"""Conversion throughput, games per second per core, against python-chess and pgn-extract.

All three read the same uncompressed PGN file in the same run (ratios are what to compare;
these machines are noisy):

* chesslm: ``convert.convert`` end to end (read, validate, tokenise, split, write shards),
  with 1 worker and with every core;
* python-chess: ``chess.pgn.read_game`` over the file (parse and validate only);
* pgn-extract (Debian package, C): ``pgn-extract -s -Wuci`` (parse, validate, write UCI).

A generated month (``benchmarks/month_pgn.py``) is read with ``--pgn FILE.pgn.zst``; then
only chesslm runs (``--compare`` adds the other two). Each chesslm run is a fresh process, so
its peak RSS is its own: the main process's (``RUSAGE_SELF``) and the largest worker's
(``RUSAGE_CHILDREN``); the reader's CPU seconds come from the conversion's own phase record.
Parallel efficiency is games/s per core used over games/s with 1 worker (one process), in the
same invocation; N workers use N + 2 cores (a reader and the main process beside them), at
most every core of the machine.

Usage: python benchmarks/convert_throughput.py [--copies 4 | --pgn FILE | --games N]
       [--workers 1,16] [--compare] [--independent 16] [--json out.json]

``--games N`` generates a month of N games first (in a temporary folder) and measures it as
``--pgn`` would: e.g. ``--games 1000000 --workers 1,16`` prints one worker, 16 workers and the
efficiency in one run.

``--independent N`` measures the machine's own ceiling instead: N one-worker conversions at
once, each in its own process, against one alone.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import chess.pgn
import month_pgn
import zstandard

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "resources" / "lichess-sample.pgn.zst"
WIDTHS = (5, 7, 8, 13, 15)


def make_input(directory: Path, copies: int) -> tuple[Path, int]:
    """The sample repeated ``copies`` times, each copy with its own game ids."""
    with open(SAMPLE, "rb") as fh:
        text = zstandard.ZstdDecompressor().stream_reader(fh).read().decode()
    parts = [
        re.sub(r"lichess\.org/\w\w", f"lichess.org/Z{k}", text) if k else text
        for k in range(copies)
    ]
    path = directory / "bench.pgn"
    path.write_text("\n".join(parts))
    return path, 4754 * copies


_ONE_RUN = """
import json, resource, sys, time
from pathlib import Path
import chesslm
try:
    from chesslm.data import convert
except ImportError:  # a commit before the converter's split into stages (v2 and older)
    from chesslm.data import dataset as convert
start, cpu_start = time.perf_counter(), time.process_time()
stats = {}
manifest = convert.convert([Path(sys.argv[1])], Path(sys.argv[2]), convert.Settings(),
                           workers=int(sys.argv[3]), stats=stats)
elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
kb = 1024  # ru_maxrss is in KiB on Linux
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({
    "main_cpu_seconds": me.ru_utime + me.ru_stime,
    "convert_main_cpu_seconds": cpu,  # the conversion alone, without the imports
    "workers_cpu_seconds": kids.ru_utime + kids.ru_stime,
    "seconds": elapsed,
    "games_kept": sum(manifest["games"].values()),
    "games_read": sum(manifest["games"].values()) + sum(manifest["skipped"].values()),
    "main_peak_rss_mb": me.ru_maxrss / kb,
    "worker_peak_rss_mb": kids.ru_maxrss / kb,
    "phases": stats,
    "chesslm": chesslm.__file__,
}))
"""


def start(path: Path, workers: int, out: Path, tree: Path = ROOT) -> subprocess.Popen:
    """One conversion in a fresh process, with ``tree``'s chesslm (this checkout's by default)."""
    # the tree first, then whatever the caller's path holds (a GPU host's carried wheels)
    path_entries = [str(tree), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path_entries)}
    return subprocess.Popen(
        [sys.executable, "-c", _ONE_RUN, str(path.resolve()), str(out.resolve()), str(workers)],
        cwd=tree,  # python -c puts the working directory first on its path
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def finish(process: subprocess.Popen, workers: int, out: Path) -> dict:
    stdout, stderr = process.communicate()
    if process.returncode != 0:
        raise SystemExit(f"conversion with {workers} worker(s) failed:\n{stderr[-3000:]}")
    shutil.rmtree(out)
    info = json.loads(stdout.strip().splitlines()[-1])
    if workers == 1:
        info["worker_peak_rss_mb"] = 0.0  # no pool: the main process does the work
    return info


def run_chesslm(path: Path, workers: int, directory: Path) -> dict:
    """One conversion in a fresh process: seconds, games, peak RSS of main and largest worker."""
    out = directory / f"ds-{workers}"
    return finish(start(path, workers, out), workers, out)


def independent(path: Path, copies: int, directory: Path) -> dict:
    """The machine's own ceiling on parallel efficiency: ``copies`` one-worker conversions at
    once, nothing shared between them, against one alone (same run). Whatever slows each copy
    (clock speed with every core busy, shared caches, memory bandwidth) slows the workers of
    one conversion as much."""
    alone = run_chesslm(path, 1, directory)
    outs = [directory / f"independent-{k}" for k in range(copies)]
    started = time.perf_counter()
    processes = [start(path, 1, out) for out in outs]
    infos = [finish(p, 1, out) for p, out in zip(processes, outs, strict=True)]
    wall = time.perf_counter() - started
    games = sum(i["games_read"] for i in infos)
    one = alone["games_read"] / alone["seconds"]
    ceiling = games / wall / copies / one
    print(
        f"{copies} independent one-worker conversions at once: {games / wall:.0f} games/s in all,"
        f" {games / wall / copies:.0f} per process; one alone {one:.0f} games/s;"
        f" ceiling on parallel efficiency {ceiling:.2f}"
    )
    return {
        "copies": copies,
        "alone": alone,
        "together": infos,
        "wall_seconds": wall,
        "efficiency_ceiling": ceiling,
    }


def time_chesslm(path: Path, workers: int, directory: Path) -> tuple[float, int]:
    info = run_chesslm(path, workers, directory)
    return info["seconds"], info["games_kept"]


def time_python_chess(path: Path, limit: int) -> tuple[float, int]:
    with open(path) as fh:
        text = fh.read()
    handle = io.StringIO(text)
    start = time.perf_counter()
    n = 0
    while n < limit and chess.pgn.read_game(handle) is not None:
        n += 1
    return time.perf_counter() - start, n


def time_pgn_extract(path: Path) -> tuple[float, int] | None:
    exe = shutil.which("pgn-extract") or (
        "/usr/games/pgn-extract" if Path("/usr/games/pgn-extract").exists() else None
    )
    if exe is None:
        return None
    out = path.with_name("pgn-extract-out.pgn")
    start = time.perf_counter()
    subprocess.run([exe, "-s", "-Wuci", "-o", str(out), str(path)], capture_output=True, check=True)
    elapsed = time.perf_counter() - start
    games = out.read_text(errors="replace").count("[Site ")
    out.unlink()
    return elapsed, games


def month_rows(path: Path, workers: list[int], directory: Path) -> list[dict]:
    """chesslm on a given (month) file with each worker count; efficiency against 1 worker."""
    rows = []
    for n in workers:
        info = run_chesslm(path, n, directory)
        info["workers"] = n
        info["games_per_second"] = info["games_read"] / info["seconds"]
        # the reader and the main process need cores too: beyond one worker, workers + 2
        info["cores_used"] = 1 if n == 1 else min(n + 2, os.cpu_count() or n + 2)
        info["games_per_second_per_core"] = info["games_per_second"] / info["cores_used"]
        info["all_processes_peak_rss_mb_bound"] = (
            info["main_peak_rss_mb"] + n * info["worker_peak_rss_mb"]
        )
        rows.append(info)
    base = next((r for r in rows if r["workers"] == 1), None)
    header = (
        "workers  cores    games  seconds  games/s  per core  efficiency  main MB  worker MB"
        "  main CPU s  workers CPU s  reader CPU s"
    )
    print(header)
    for r in rows:
        r["parallel_efficiency"] = (
            r["games_per_second_per_core"] / base["games_per_second_per_core"] if base else None
        )
        eff = f"{r['parallel_efficiency']:10.2f}" if base else f"{'-':>10}"
        print(
            f"{r['workers']:7d} {r['cores_used']:6d} {r['games_read']:8d} {r['seconds']:8.1f} "
            f"{r['games_per_second']:8.0f} {r['games_per_second_per_core']:9.0f} {eff} "
            f"{r['main_peak_rss_mb']:8.0f} {r['worker_peak_rss_mb']:10.0f}"
            f" {r['main_cpu_seconds']:11.1f} {r['workers_cpu_seconds']:14.1f}"
            f" {r['phases'].get('reader_cpu_seconds', 0.0):13.1f}"
        )
    return rows


def _month(args: argparse.Namespace, workers: list[int]) -> None:
    """chesslm alone on a month (``--pgn``, or one of ``--games`` generated here): one worker
    and N workers in the same run, with the parallel efficiency."""
    with tempfile.TemporaryDirectory(dir=args.pgn.parent if args.pgn else None) as tmp:
        path = args.pgn
        if path is None:
            path = Path(tmp) / f"month-{args.games}.pgn.zst"
            month_pgn.write(path, args.games, workers=min(os.cpu_count() or 1, 16))
        if args.independent:
            result = independent(path, args.independent, Path(tmp))
        else:
            rows = month_rows(path, workers, Path(tmp))
            result = {
                "machine": platform.processor() or platform.machine(),
                "cores": os.cpu_count() or 1,
                "python": sys.version.split()[0],
                "input": str(args.pgn or f"month_pgn.py --games {args.games}"),
                "input_bytes": path.stat().st_size,
                "results": rows,
            }
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


def _against_others(args: argparse.Namespace, workers: list[int]) -> None:
    """chesslm, python-chess and pgn-extract on the same file (the sample's copies, or --pgn)."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.pgn is not None:
            path, n_games = args.pgn, 0
        else:
            path, n_games = make_input(Path(tmp), args.copies)
        for n in workers:
            elapsed, kept = time_chesslm(path, n, Path(tmp))
            rows.append(("chesslm convert", n, kept, elapsed))
        elapsed, n = time_python_chess(path, args.python_chess_games)
        rows.append(("python-chess read_game", 1, n, elapsed))
        extract = time_pgn_extract(path)
        if extract is not None:
            rows.append(("pgn-extract -s -Wuci", 1, extract[1], extract[0]))
    reference = next(r for r in rows if r[0].startswith("python-chess"))
    ref_rate = reference[2] / reference[3]
    results = []
    header = ("tool", "cores", "games", "seconds", "games/s/core", "x python-chess")
    print(
        f"{header[0]:24} " + " ".join(f"{h:>{w}}" for h, w in zip(header[1:], WIDTHS, strict=True))
    )
    for tool, cores, games, seconds in rows:
        per_core = games / seconds / cores
        ratio = games / seconds / ref_rate
        results.append(
            {
                "tool": tool,
                "cores": cores,
                "games": games,
                "seconds": seconds,
                "games_per_second_per_core": per_core,
                "vs_python_chess": ratio,
            }
        )
        print(f"{tool:24} {cores:5d} {games:7d} {seconds:8.2f} {per_core:13.0f} {ratio:15.1f}")
    info = {
        "machine": platform.processor() or platform.machine(),
        "cores": os.cpu_count() or 1,
        "python": sys.version.split()[0],
        "input_games": n_games,
        "results": results,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(info, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=4)
    parser.add_argument("--pgn", type=Path, help="a generated month (benchmarks/month_pgn.py)")
    parser.add_argument("--games", type=int, help="generate a month of this many games first")
    parser.add_argument("--workers", help="comma-separated worker counts (default 1,cores)")
    parser.add_argument("--compare", action="store_true", help="python-chess, pgn-extract too")
    parser.add_argument("--python-chess-games", type=int, default=2000)
    parser.add_argument(
        "--independent", type=int, help="run this many one-worker conversions at once instead"
    )
    parser.add_argument("--json")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    workers = sorted({int(w) for w in args.workers.split(",")}) if args.workers else [1, cores]
    if (args.pgn is not None or args.games) and not args.compare:
        _month(args, workers)
    else:
        _against_others(args, workers)


if __name__ == "__main__":
    main()
