"""chesslm-analyse under bad input and at scale (chesslm/engine/analyse.py, pgnfile.py): a game
python-chess cannot parse (or raises on) is named and skipped and every other game written; a
file that is not PGN (another compression, binary, garbage, a .zst that is not zstd, damaged or
truncated zstd) is one line naming it and what is wrong, exit status 1, after writing the games
read before the fault; a bad byte spoils no other game; ``--games N``; progress lines; output
folders made. In process (``analyse.main``), on a tiny checkpoint and the sample's games."""

from __future__ import annotations

import csv
import gzip
import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import zstandard

from chesslm.engine import analyse
from chesslm.export.load import model_at
from tests.helpers import SAMPLE, first_games_pgn, model_checkpoint

BROKEN = '[Event "broken"]\n[Site "https://lichess.org/broken01"]\n\n1. e4 ( e5 ( ) ) ) e5 *\n'


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return model_checkpoint(tmp_path_factory.mktemp("analyse-input") / "best.pt")


def games(n: int) -> list[str]:
    """The sample's first ``n`` games, each its own text."""
    parts = first_games_pgn(n).split("\n\n[Event ")
    return [parts[0] + "\n\n", *(f"[Event {p}\n\n" for p in parts[1:])]


def run(ckpt: Path, source: Path, out: Path, *extra: str) -> tuple[int, list[str]]:
    """``chesslm-analyse``'s exit status and its stderr lines."""
    err = io.StringIO()
    argv = ["--checkpoint", str(ckpt), str(source), "--csv", str(out), *extra]
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("sys.stderr", err)
            status = analyse.main(argv)
    except SystemExit as exited:
        status = exited.code
    return status, err.getvalue().splitlines()


def analysed_games(out: Path) -> list[str]:
    return [row["game"] for row in csv.DictReader(open(analyse.games_csv(out)))]


def test_a_game_python_chess_raises_on_is_named_and_the_rest_written(
    ckpt: Path, tmp_path: Path
) -> None:
    """The issue's IndexError: an unbalanced variation; the games before and after it stand."""
    good = games(5)
    (tmp_path / "g.pgn").write_text("".join([*good[:2], BROKEN, *good[2:]]))
    status, lines = run(ckpt, tmp_path / "g.pgn", tmp_path / "out" / "deep" / "a.csv")
    assert status == 0, lines
    assert lines[0] == (
        f"chesslm-analyse: {tmp_path / 'g.pgn'}: skipped game 3 (https://lichess.org/broken01):"
        " does not parse (IndexError('list index out of range'))"
    )
    assert "5 games" in lines[-1] and "1 skipped" in lines[-1], lines
    assert analysed_games(tmp_path / "out" / "deep" / "a.csv") == ["1", "2", "4", "5", "6"]


def test_games_n_takes_the_files_first_n(ckpt: Path, tmp_path: Path) -> None:
    good = games(5)
    (tmp_path / "g.pgn").write_text("".join([*good[:2], BROKEN, *good[2:]]))
    status, lines = run(ckpt, tmp_path / "g.pgn", tmp_path / "a.csv", "--games", "4")
    assert status == 0 and "3 games" in lines[-1] and "1 skipped" in lines[-1], lines
    assert analysed_games(tmp_path / "a.csv") == ["1", "2", "4"]
    status, lines = run(ckpt, tmp_path / "g.pgn", tmp_path / "b.csv", "--games", "0")
    assert status == 2 and "--games: must be a whole number above 0" in lines[-1], lines


def zst(text: str) -> bytes:
    return zstandard.ZstdCompressor().compress(text.encode())


UNREADABLE = {
    "gzip.pgn.zst": (lambda: gzip.compress(first_games_pgn(3).encode()), "gzip-compressed"),
    "plain.pgn.zst": (lambda: first_games_pgn(3).encode(), "named .zst but not zstd data"),
    "binary.pgn": (lambda: os.urandom(3000) + b"\x00" * 10, "binary data, not PGN text"),
    "list.pgn": (lambda: b"eggs, milk\nbread\n", "not PGN (it starts 'eggs, milk'"),
    "damaged.pgn.zst": (
        lambda: zst(first_games_pgn(3))[:20] + b"\xff" * 64 + zst(first_games_pgn(3))[84:],
        "damaged zstd data",
    ),
}


@pytest.mark.parametrize("name", list(UNREADABLE))
def test_a_file_that_is_not_pgn_is_one_line_naming_it(
    ckpt: Path, tmp_path: Path, name: str
) -> None:
    data, why = UNREADABLE[name]
    (tmp_path / name).write_bytes(data())
    status, lines = run(ckpt, tmp_path / name, tmp_path / "a.csv")
    assert status == 1 and len(lines) == 1, lines
    assert lines[0].startswith(f"chesslm-analyse: {tmp_path / name}: {why}"), lines


def test_a_truncated_zst_writes_the_games_before_its_end_and_says_so(
    ckpt: Path, tmp_path: Path
) -> None:
    """Two frames, the second cut in its middle: the first frame's games are all written."""
    first, second = games(70), games(100)[70:]
    cut = zst("".join(second))
    (tmp_path / "cut.pgn.zst").write_bytes(zst("".join(first)) + cut[: len(cut) // 2])
    status, lines = run(ckpt, tmp_path / "cut.pgn.zst", tmp_path / "a.csv")
    assert status == 1, lines
    assert lines[-1].startswith(f"chesslm-analyse: {tmp_path / 'cut.pgn.zst'}: truncated zstd")
    written = analysed_games(tmp_path / "a.csv")
    assert lines[-1].endswith(f"wrote the {len(written)} games analysed before it")
    # the first frame's last game ends where the cut frame starts: its end is never seen
    assert written[:69] == [str(n) for n in range(1, 70)] and len(written) < 100


def test_a_bad_byte_in_a_zst_spoils_no_other_game(ckpt: Path, tmp_path: Path) -> None:
    good = games(6)
    good[2] = good[2].replace("\n1. ", "\n1. \udcff", 1)  # a byte that is not UTF-8
    data = "".join(good).encode("utf-8", errors="surrogateescape")
    (tmp_path / "g.pgn.zst").write_bytes(zstandard.ZstdCompressor().compress(data))
    status, lines = run(ckpt, tmp_path / "g.pgn.zst", tmp_path / "a.csv")
    named = [line for line in lines if "skipped game" in line]
    assert status == 0 and all("skipped game 3" in line for line in named), lines
    assert set(analysed_games(tmp_path / "a.csv")) | {"3"} == {str(n) for n in range(1, 7)}


def test_progress_lines_say_the_counts(ckpt: Path, tmp_path: Path) -> None:
    """``every=0``: a line after every batch of games (the console's is every 5 s)."""
    (tmp_path / "g.pgn").write_text("".join(games(analyse.BATCH_GAMES + 3)))
    said = io.StringIO()
    counts = analyse.analyse(tmp_path / "g.pgn", tmp_path / "a.csv", None,
                             net=model_at(str(ckpt), "cpu"), say=said, every=0)  # fmt: skip
    lines = said.getvalue().splitlines()
    assert len(lines) == 2 and all(": progress: " in line for line in lines), lines
    assert f"{analyse.BATCH_GAMES} games," in lines[0]
    assert f"{counts['games']} games, {counts['moves']:,} moves analysed" in lines[1]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_killed_analyse_leaves_nothing_behind(ckpt: Path, tmp_path: Path, sig) -> None:
    """SIGTERM (a scheduler's, a user's ``kill``) and Ctrl-C mid-run: the process unwinds and
    removes its temporaries; no partial output is left."""
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "chesslm.engine.analyse", "--checkpoint", str(ckpt),
           str(SAMPLE), "--csv", str(out / "a.csv"), "--pgn", str(out / "a.pgn")]  # fmt: skip
    child = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    try:
        while not list(out.glob(".a.csv.*.tmp")) and child.poll() is None:
            time.sleep(0.05)  # until it writes (the whole sample takes minutes here)
        assert child.poll() is None, child.stderr.read()
        child.send_signal(sig)
        child.wait(timeout=60)
    finally:
        child.kill()
    assert child.returncode != 0
    if sig == signal.SIGTERM:
        assert child.returncode == 128 + signal.SIGTERM, child.stderr.read()
    assert sorted(p.name for p in out.iterdir()) == []


def test_a_sigkilled_analyses_temporaries_are_swept_by_the_next(ckpt: Path, tmp_path: Path) -> None:
    """A SIGKILL cannot be caught: the next run removes what it left (a dead writer's)."""
    dead = subprocess.Popen(["true"])
    dead.wait()  # its pid is no live writer's
    out = tmp_path / "out"
    out.mkdir()
    left = out / f".a.csv.{dead.pid}.0badf00d.tmp"
    left.write_text("torn")
    source = tmp_path / "g.pgn"
    source.write_text(first_games_pgn(2))
    status, _ = run(ckpt, source, out / "a.csv")
    assert status == 0
    assert not left.exists() and (out / "a.csv").is_file()
