"""Conversion speed and main-process memory of several commits, on one month, in one run.

Each commit is unpacked (``git archive``) into a temporary folder and converts the same
generated month (``benchmarks/month_pgn.py``, or ``--pgn FILE``) in a fresh process whose
PYTHONPATH starts with that folder (the child checks that its ``chesslm`` is that commit's).
Runs alternate between the commits, round after round, each round starting one commit later,
so a machine whose load drifts slows every commit alike; the first commit is the reference and
every figure is also given as a ratio to its figure in the same run.

Per commit: games/s per worker (median, min, max over the rounds), games per CPU second of
the conversion (main process and workers, imports left out: less sensitive to other work on
the machine than wall time) and the main process's peak RSS (``RUSAGE_SELF``).

Usage: python benchmarks/convert_commits.py a209dbc 494d458 HEAD [--games 100000 | --pgn F]
       [--workers 1] [--rounds 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import convert_throughput
import month_pgn

ROOT = Path(__file__).resolve().parents[1]


def unpack(commit: str, directory: Path) -> tuple[str, Path]:
    """``commit``'s tree in ``directory``; returns its short hash and the folder. ``NAME=PATH``
    names a tree already unpacked at PATH (a machine without the repository's history)."""
    if "=" in commit:
        name, _, path = commit.partition("=")
        return name, Path(path).resolve()
    rev = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", commit],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    tree = directory / rev
    tree.mkdir()
    archive = subprocess.Popen(["git", "-C", str(ROOT), "archive", rev], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(tree)], stdin=archive.stdout, check=True)
    if archive.wait() != 0:
        raise SystemExit(f"git archive {commit} failed")
    return rev, tree


def rounds(
    trees: dict[str, Path], pgn: Path, workers: int, count: int, directory: Path
) -> dict[str, list[dict]]:
    """``count`` conversions per commit, alternating; each round starts one commit later."""
    names = list(trees)
    runs: dict[str, list[dict]] = {name: [] for name in names}
    for r in range(count):
        for k in range(len(names)):
            name = names[(r + k) % len(names)]
            out = directory / f"ds-{name}"
            process = convert_throughput.start(pgn, workers, out, tree=trees[name])
            info = convert_throughput.finish(process, workers, out)
            if not Path(info["chesslm"]).is_relative_to(trees[name]):
                raise SystemExit(f"{name}: the child imported {info['chesslm']}")
            info["games_per_second"] = info["games_read"] / info["seconds"]
            cpu = info["convert_main_cpu_seconds"] + info["workers_cpu_seconds"]
            info["games_per_cpu_second"] = info["games_read"] / cpu
            runs[name].append(info)
            phases = info["phases"]
            print(
                f"round {r + 1} {name}: {info['games_per_second']:,.0f} games/s,"
                f" main RSS {info['main_peak_rss_mb']:.0f} MB; {info['seconds']:.2f} s:"
                f" parsing {phases.get('parse_seconds', 0):.2f} (main waited"
                f" {phases.get('main_wait_seconds', 0):.2f}), after it"
                f" {info['seconds'] - phases.get('parse_seconds', 0):.2f}; CPU s: main"
                f" {info['convert_main_cpu_seconds']:.2f}, reader"
                f" {phases.get('reader_cpu_seconds', 0):.2f}, all children"
                f" {info['workers_cpu_seconds']:.2f}",
                flush=True,
            )
    return runs


def summary(runs: dict[str, list[dict]], workers: int) -> list[dict]:
    """Per commit: median, min and max of each figure, and the medians' ratios to the first."""
    rows = []
    for name, infos in runs.items():
        row: dict = {"commit": name, "runs": len(infos)}
        for key in ("games_per_second", "games_per_cpu_second", "main_peak_rss_mb"):
            values = [i[key] / (workers if key == "games_per_second" else 1) for i in infos]
            label = "games_per_second_per_worker" if key == "games_per_second" else key
            row[label] = {
                "median": statistics.median(values),
                "min": min(values),
                "max": max(values),
            }
        rows.append(row)
    for row in rows:
        for key in ("games_per_second_per_worker", "games_per_cpu_second", "main_peak_rss_mb"):
            row[key]["ratio"] = row[key]["median"] / rows[0][key]["median"]
    return rows


def print_table(rows: list[dict], workers: int) -> None:
    print(
        f"\n{workers} worker(s); median [min, max] over the rounds; x: the median's ratio to"
        f" {rows[0]['commit']} in this run"
    )
    columns = (
        ("games_per_second_per_worker", "games/s per worker", "{:,.0f}"),
        ("games_per_cpu_second", "games per CPU s", "{:,.0f}"),
        ("main_peak_rss_mb", "main peak RSS MB", "{:.0f}"),
    )
    print(f"{'commit':10}" + "".join(f" {title:>26} {'x':>6}" for _, title, _ in columns))
    for row in rows:
        line = f"{row['commit']:10}"
        for key, _, fmt in columns:
            v = row[key]
            spread = f"{fmt.format(v['median'])} [{fmt.format(v['min'])}, {fmt.format(v['max'])}]"
            line += f" {spread:>26} {v['ratio']:6.3f}"
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("commits", nargs="+", help="commits to compare; the first is the reference")
    parser.add_argument("--games", type=int, default=100_000, help="games of the generated month")
    parser.add_argument("--pgn", type=Path, help="convert this file instead of a generated month")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="convert-commits-") as tmp:
        directory = Path(tmp)
        trees = dict(unpack(commit, directory) for commit in args.commits)
        pgn = args.pgn
        if pgn is None:
            pgn = directory / "month.pgn.zst"
            month_pgn.write(pgn, args.games, workers=min(os.cpu_count() or 1, 16))
        runs = rounds(trees, pgn, args.workers, args.rounds, directory)
    rows = summary(runs, args.workers)
    print_table(rows, args.workers)
    if args.json:
        info = {
            "machine": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "python": sys.version.split()[0],
            "input": str(args.pgn or f"month_pgn.py --games {args.games}"),
            "workers": args.workers,
            "summary": rows,
            "runs": runs,
        }
        Path(args.json).write_text(json.dumps(info, indent=2))


if __name__ == "__main__":
    main()
