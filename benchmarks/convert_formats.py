"""Conversion throughput from Parquet against from ``.pgn.zst``, on the same games, in one run.

The games: a generated month (``benchmarks/month_pgn.py``, ``--games N``) as ``.pgn.zst``,
and the same games written in the Hugging Face ``Lichess/standard-chess-games`` schema
(``tests/lichess_parquet.py``: zstd, row groups of ``--row-group-games``). Each conversion is
``convert.convert`` end to end in a fresh process (``convert_throughput.start``), with 1
worker and with every core, the two formats alternating, the best of ``--repeat`` runs each.
Prints, for each worker count, games/s per format and the ratio Parquet / PGN (the figure to
compare: both are measured in the same run); games per CPU second of all the conversion's
processes and its ratio (on a machine shared with other work, the wall clock follows their
load, the CPU seconds much less); the peak RSS of the main process and of the largest worker;
and checks that both formats gave the same dataset (the manifests' shard hashes).

Usage: python benchmarks/convert_formats.py [--games 200000] [--workers 1,N] [--repeat 2]
       [--row-group-games 10000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import convert_throughput
import month_pgn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from chesslm.data import pgn  # noqa: E402
from tests import lichess_parquet  # noqa: E402

FORMATS = ("pgn", "parquet")


def pgn_games(path: Path) -> Iterator[str]:
    """The games of a PGN file, one string each, a chunk at a time (memory flat)."""
    for chunk in pgn.read_raw_chunks(path):
        yield from pgn.split_games(pgn.decode_chunk(chunk))


def inputs(directory: Path, games: int, row_group_games: int) -> dict[str, Path]:
    """The month as ``.pgn.zst`` and the same games as Parquet."""
    month = directory / f"month-{games}.pgn.zst"
    month_pgn.write(month, games, workers=min(os.cpu_count() or 1, 16))
    table = directory / f"month-{games}.parquet"
    lichess_parquet.write(pgn_games(month), table, row_group_games=row_group_games)
    return {"pgn": month, "parquet": table}


def convert_once(path: Path, workers: int, directory: Path) -> dict:
    """One conversion in a fresh process: its figures and the hash of its shards' hashes."""
    out = directory / f"ds-{path.name}-{workers}"
    process = convert_throughput.start(path, workers, out)
    stdout, stderr = process.communicate()
    if process.returncode != 0:
        raise SystemExit(f"{path.name} with {workers} worker(s) failed:\n{stderr[-3000:]}")
    manifest = json.loads((out / "manifest.json").read_text())
    shutil.rmtree(out)
    info = json.loads(stdout.strip().splitlines()[-1])
    info["files"] = manifest["files"]
    info["games_per_second"] = info["games_read"] / info["seconds"]
    # the reader and the workers are the conversion's children
    cpu = info["convert_main_cpu_seconds"] + info["workers_cpu_seconds"]
    info["games_per_cpu_second"] = info["games_read"] / cpu
    return info


def measure(paths: dict[str, Path], workers: int, repeat: int, directory: Path) -> dict:
    """Both formats with ``workers`` workers, alternating, best of ``repeat`` each."""
    runs: dict[str, list[dict]] = {f: [] for f in FORMATS}
    for _ in range(repeat):
        for name in FORMATS:
            runs[name].append(convert_once(paths[name], workers, directory))
    if any(r["files"] != runs["pgn"][0]["files"] for name in FORMATS for r in runs[name]):
        raise SystemExit(f"{workers} worker(s): the formats gave different datasets")
    for info in runs["pgn"] + runs["parquet"]:
        del info["files"]
    best = {name: max(r, key=lambda i: i["games_per_second"]) for name, r in runs.items()}
    cpu = {name: max(i["games_per_cpu_second"] for i in r) for name, r in runs.items()}
    return {
        "workers": workers,
        "ratio": best["parquet"]["games_per_second"] / best["pgn"]["games_per_second"],
        "cpu_ratio": cpu["parquet"] / cpu["pgn"],
        "games_per_cpu_second": cpu,
        "best": best,
        "runs": runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=200_000)
    parser.add_argument("--workers", default=f"1,{os.cpu_count() or 1}")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--row-group-games", type=int, default=10_000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    workers = [int(w) for w in args.workers.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        paths = inputs(Path(tmp), args.games, args.row_group_games)
        sizes = {name: path.stat().st_size for name, path in paths.items()}
        print(
            f"{args.games} games: .pgn.zst {sizes['pgn'] / 2**20:.1f} MiB, .parquet"
            f" {sizes['parquet'] / 2**20:.1f} MiB (row groups of {args.row_group_games})"
        )
        print(
            "workers  games/s: PGN  Parquet  Parquet/PGN  games/CPU s: PGN  Parquet  Parquet/PGN"
            "  main MB: PGN  Parquet  worker MB: PGN  Parquet"
        )
        rows = []
        for n in workers:
            row = measure(paths, n, args.repeat, Path(tmp))
            rows.append(row)
            a, b = row["best"]["pgn"], row["best"]["parquet"]
            cpu = row["games_per_cpu_second"]
            print(
                f"{n:7d} {a['games_per_second']:12.0f} {b['games_per_second']:8.0f}"
                f" {row['ratio']:12.2f} {cpu['pgn']:16.0f} {cpu['parquet']:8.0f}"
                f" {row['cpu_ratio']:12.2f} {a['main_peak_rss_mb']:13.0f}"
                f" {b['main_peak_rss_mb']:8.0f} {a['worker_peak_rss_mb']:15.0f}"
                f" {b['worker_peak_rss_mb']:8.0f}"
            )
    if args.json:
        result = {
            "machine": platform.processor() or platform.machine(),
            "cores": os.cpu_count() or 1,
            "games": args.games,
            "row_group_games": args.row_group_games,
            "input_bytes": sizes,
            "results": rows,
        }
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
