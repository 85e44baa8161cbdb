"""chesslm-uci on input that is not UTF-8, where Python decodes stdin strictly
(``PYTHONIOENCODING=utf-8:strict``, as some locales do): every byte is survived, an
undecodable line gets one ``info string`` and the engine goes on (it used to lose its input
thread on the first such byte and never answer again)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import chess
import pytest

from tests.helpers import ROOT, model_checkpoint

ENGINE = [sys.executable, "-m", "chesslm.engine.uci"]
STRICT = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
STRICT["PYTHONIOENCODING"] = "utf-8:strict"


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return model_checkpoint(tmp_path_factory.mktemp("uci-bytes") / "best.pt", spread=0.3)


def raw(ckpt: Path, data: bytes) -> subprocess.CompletedProcess[bytes]:
    command = [*ENGINE, "--checkpoint", str(ckpt)]
    return subprocess.run(command, input=data, capture_output=True, env=STRICT, timeout=120)


def test_a_byte_that_is_not_utf8_gets_one_info_line_and_the_engine_goes_on(ckpt: Path) -> None:
    """The issue's input: the bad line is ignored (the position stays the start), ``go``
    still answers, and nothing reaches stderr."""
    done = raw(ckpt, b"uci\nisready\nposition startpos moves e2e4 \xff\ngo\n")
    assert done.returncode == 0 and done.stderr == b"", done.stderr.decode(errors="replace")
    out = done.stdout.decode().splitlines()
    said = [line for line in out if "not UTF-8" in line]
    assert said == ["info string input line not UTF-8 (byte b'\\xff' at 29); ignored"], out
    best = [line.split()[1] for line in out if line.startswith("bestmove")]
    assert len(best) == 1 and chess.Move.from_uci(best[0]) in chess.Board().legal_moves, out


def test_every_byte_value_is_survived(ckpt: Path) -> None:
    """Each of the 256 byte values alone on a line, and all of them on one line, then a
    position and ``go``: one ``bestmove``, one info line per line that is not UTF-8."""
    lines = [bytes([value]) for value in range(256) if value not in b"\n"]
    lines.append(bytes(range(256)).replace(b"\n", b""))
    data = b"uci\n" + b"\n".join(lines) + b"\nposition startpos moves d2d4\ngo\n"
    done = raw(ckpt, data)
    assert done.returncode == 0 and done.stderr == b"", done.stderr.decode(errors="replace")
    out = done.stdout.decode().splitlines()
    undecodable = sum(1 for line in lines if not _utf8(line))
    assert sum("not UTF-8" in line for line in out) == undecodable == 129, out
    best = [line.split()[1] for line in out if line.startswith("bestmove")]
    board = chess.Board()
    board.push_uci("d2d4")
    assert len(best) == 1 and chess.Move.from_uci(best[0]) in board.legal_moves, out


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
