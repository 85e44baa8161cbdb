"""Helpers for data and workflow tests: the embedded sample read with python-chess (the rules
oracle), and real snakemake runs in a scratch directory."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import chess.pgn
import zstandard

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "resources" / "lichess-sample.pgn.zst"


def sample_text() -> str:
    with open(SAMPLE, "rb") as fh:
        return zstandard.ZstdDecompressor().stream_reader(fh).read().decode("utf-8")


def all_sample_games() -> list[chess.pgn.Game]:
    """Every game of the embedded sample, parsed by python-chess."""
    handle = io.StringIO(sample_text())
    games = []
    while (game := chess.pgn.read_game(handle)) is not None:
        games.append(game)
    return games


def first_games_pgn(n: int) -> str:
    """The PGN text of the sample's first n games (n <= 900: all of those have an Event tag)."""
    pieces = sample_text().split("\n\n[Event ")
    return "\n\n[Event ".join(pieces[:n]) + "\n"


def snakemake(
    workdir: Path, *args: str, check: bool = True, snakefile: Path = ROOT / "Snakefile"
) -> subprocess.CompletedProcess[str]:
    """Run real snakemake on the project's workflow with ``workdir`` as working directory."""
    exe = shutil.which("snakemake", path=str(Path(sys.executable).parent)) or "snakemake"
    cmd = [exe, "--snakefile", str(snakefile), "--directory", str(workdir), *args]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900, cwd=workdir)
    if check and result.returncode != 0:
        raise AssertionError(
            f"snakemake {' '.join(args)} failed ({result.returncode}):\n"
            f"{result.stdout[-4000:]}\n{result.stderr[-6000:]}"
        )
    return result
