"""Conversion throughput, games per second per core, against python-chess and pgn-extract.

All three read the same uncompressed PGN file in the same run (ratios are what to compare;
these machines are noisy):

* chesslm: ``dataset.convert`` end to end (read, validate, tokenise, split, write shards),
  with 1 worker and with every core;
* python-chess: ``chess.pgn.read_game`` over the file (parse and validate only);
* pgn-extract (Debian package, C): ``pgn-extract -s -Wuci`` (parse, validate, write UCI).

Usage: python benchmarks/convert_throughput.py [--copies 4] [--json out.json]
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
import zstandard

from chesslm.data import dataset

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


def time_chesslm(path: Path, workers: int, directory: Path) -> tuple[float, int]:
    out = directory / f"ds-{workers}"
    start = time.perf_counter()
    manifest = dataset.convert([path], out, dataset.Settings(), workers=workers)
    elapsed = time.perf_counter() - start
    shutil.rmtree(out)
    return elapsed, sum(manifest["games"].values())


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=4)
    parser.add_argument("--python-chess-games", type=int, default=2000)
    parser.add_argument("--json")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path, n_games = make_input(Path(tmp), args.copies)
        for workers in sorted({1, cores}):
            elapsed, kept = time_chesslm(path, workers, Path(tmp))
            rows.append(("chesslm convert", workers, kept, elapsed))
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
    for tool, workers, games, seconds in rows:
        per_core = games / seconds / workers
        results.append(
            {
                "tool": tool,
                "cores": workers,
                "games": games,
                "seconds": seconds,
                "games_per_second_per_core": per_core,
                "vs_python_chess": games / seconds / ref_rate,
            }
        )
        ratio = games / seconds / ref_rate
        print(f"{tool:24} {workers:5d} {games:7d} {seconds:8.2f} {per_core:13.0f} {ratio:15.1f}")
    info = {
        "machine": platform.processor() or platform.machine(),
        "cores": cores,
        "python": sys.version.split()[0],
        "input_games": n_games,
        "results": results,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(info, indent=2))


if __name__ == "__main__":
    main()
