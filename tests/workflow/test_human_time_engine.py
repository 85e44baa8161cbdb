"""The bot takes a human's time (issue 48 item 4): ``chesslm-uci`` with ``HumanTime`` and a
checkpoint with the think-time head, driven through python-chess with clocks. The head here
is set to say "1-2 s" (median 1.5 s), so the time between ``go`` and ``bestmove`` is known
ahead; the engine never waits past its clock less ``Move Overhead``, ``go movetime`` and a
checkpoint without the head answer at once, and the clocks it is given reach a timed model's
inputs."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import chess
import chess.engine
import numpy as np
import pytest
import torch

from chesslm.engine import think
from chesslm.model import checkpoint, gpt, human_time
from chesslm.scorer import times
from tests.helpers import (
    LICHESS_BOT_FIRST_GO,
    LICHESS_BOT_OPTIONS,
    SOMEBOT,
    EngineTalk,
    lichess_bot_second_go,
    small_payload,
)

ONE_TO_TWO = 1  # the bin [1, 2) s: the head below gives it (almost) all the probability


def timed_checkpoint(path: Path, *, head: bool = True, says: int = ONE_TO_TWO) -> Path:
    """A tiny checkpoint with the time inputs (and the think-time head, saying bin ``says``:
    1-2 s unless told)."""
    torch.manual_seed(0)
    net = gpt.build("tiny", time_inputs=True, think_time=head)
    if head:
        with torch.no_grad():
            net.think_head.weight.zero_()
            net.think_head.bias.fill_(-30.0)
            net.think_head.bias[says] = 0.0
    payload = small_payload()
    payload["model"] = net.state_dict()
    payload["identity"] = {"model": {"preset": "tiny", **net.config.to_dict()}}
    checkpoint.save(path, payload)
    return path


def engine(ckpt: Path) -> chess.engine.SimpleEngine:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "chesslm.engine.uci", "--checkpoint", str(ckpt)]
    return chess.engine.SimpleEngine.popen_uci(command, env=env, timeout=120)


def timed_play(uci: chess.engine.SimpleEngine, board: chess.Board, limit: chess.engine.Limit):
    """(result, seconds between go and bestmove as the client saw them)."""
    uci.ping()  # the model loaded (in the background since uci): not part of the move's time
    start = time.perf_counter()
    result = uci.play(board, limit, info=chess.engine.INFO_ALL)
    return result, time.perf_counter() - start


def test_the_engine_waits_the_heads_time_and_never_its_whole_clock(tmp_path: Path) -> None:
    with engine(timed_checkpoint(tmp_path / "t.pt")) as uci:
        uci.configure({"HumanTime": True, "Move Overhead": 300})
        board = chess.Board()
        board.push_uci("e2e4")
        clock = chess.engine.Limit(white_clock=170, black_clock=180, white_inc=2, black_inc=2)
        result, seconds = timed_play(uci, board, clock)
        said = result.info.get("string", "")
        assert "human time 1.50 s (median of the think-time head)" in said, said
        assert 1.5 <= seconds < 1.5 + 5.0  # the wait, plus a loaded machine's replies
        # a clock of 0.8 s with 0.3 s of overhead: never more than 0.5 s (plus the reply)
        low = chess.engine.Limit(white_clock=170, black_clock=0.8, white_inc=0, black_inc=0)
        result, seconds = timed_play(uci, board, low)
        assert "clock 800 ms, overhead 300 ms" in result.info.get("string", "")
        assert seconds < 0.8, seconds
        # go movetime keeps its meaning: one pass, at once
        result, seconds = timed_play(uci, board, chess.engine.Limit(time=30))
        assert "human time" not in result.info.get("string", "")
        assert seconds < 1.5
        # HumanTime off: at once under the same clocks
        uci.configure({"HumanTime": False})
        result, seconds = timed_play(uci, board, clock)
        assert "human time" not in result.info.get("string", "") and seconds < 1.5


def test_a_sampled_time_is_drawn_from_the_heads_bin(tmp_path: Path) -> None:
    with engine(timed_checkpoint(tmp_path / "t.pt")) as uci:
        uci.configure({"HumanTime": True, "HumanTimePick": "sample", "Seed": 3})
        clock = chess.engine.Limit(white_clock=60, black_clock=60)
        result, seconds = timed_play(uci, chess.Board(), clock)
        said = result.info.get("string", "")
        chosen = float(said.split("human time ")[1].split(" s")[0])
        assert 1.0 <= chosen < 2.0 and "(sample of the think-time head)" in said
        assert seconds >= chosen - 0.01


def test_sampled_times_differ_game_to_game_and_a_seed_replays_the_match(tmp_path: Path) -> None:
    """``ucinewgame`` moves the think-time stream on (one Seed gave every game the same times);
    setting the Seed again replays the match's times from its first game."""

    def chosen(uci: chess.engine.SimpleEngine, game: object) -> float:
        clock = chess.engine.Limit(white_clock=2, black_clock=2)  # a short wait: a small bound
        result = uci.play(chess.Board(), clock, game=game, info=chess.engine.INFO_ALL)
        return float(result.info["string"].split("human time ")[1].split(" s")[0])

    with engine(timed_checkpoint(tmp_path / "t.pt")) as uci:
        uci.configure({"HumanTime": True, "HumanTimePick": "sample", "Seed": 3})
        first, second = chosen(uci, "a"), chosen(uci, "b")
        uci.configure({"Seed": 4})
        uci.configure({"Seed": 3})
        assert first != second and [chosen(uci, "c"), chosen(uci, "d")] == [first, second]


def test_a_checkpoint_without_the_head_answers_at_once(tmp_path: Path) -> None:
    with engine(timed_checkpoint(tmp_path / "t.pt", head=False)) as uci:
        uci.configure({"HumanTime": True})
        result = uci.play(chess.Board(), chess.engine.Limit(white_clock=60, black_clock=60),
                          info=chess.engine.INFO_ALL)  # fmt: skip
        # no wait said (the engine names every wait: "human time X s ..., waiting Y s")
        assert result.move in chess.Board().legal_moves
        assert "human time" not in result.info.get("string", "")


def test_quit_ends_a_human_time_wait(tmp_path: Path) -> None:
    """A head saying 100-125 s and a 10-minute clock: the engine waits past the hang guard
    (30 s) unless the ``quit`` sent during the wait ends it; no ``bestmove`` is wanted after
    ``quit``, but the wait's own is allowed (the stop ends the wait, then quit the engine)."""
    ckpt = timed_checkpoint(tmp_path / "t.pt", says=human_time.EDGES.index(100))
    with EngineTalk(ckpt, {**os.environ, "OMP_NUM_THREADS": "1"}) as uci:
        uci.send("uci\nsetoption name HumanTime value true\nisready\nposition startpos\n")
        uci.until("readyok")
        uci.send("go wtime 600000 btime 600000\n")
        said = uci.until("info")  # the move's line, then the wait's
        while "human time" not in said[-1]:
            said = uci.until("info")
        chosen = float(said[-1].split("human time ")[1].split(" s")[0])
        assert chosen >= 100 > EngineTalk.HANG_S, said[-1]
        uci.send("quit\n")
        status, rest = uci.end()
    assert status == 0 and [line for line in rest if not line.startswith("bestmove")] == []


def test_the_go_clocks_are_the_readings_the_model_trained_on() -> None:
    """Two goes of a game (plies 0 and 2, Lichess 3+2): the readings after plies 0 and 1 are
    the clocks at the second go, the base the first go's; the rows are the training's."""
    clocks = think.Clocks()
    clocks.record(0, wtime=180_000, btime=180_000)
    clocks.record(2, wtime=176_500, btime=179_000)
    assert clocks.readings(2).tolist() == [176.5, 179.0] and clocks.base == 180
    rows = clocks.rows(2, increment=2000)
    want = times.of_game(np.array([176.5, 179.0]), 180, 2)
    assert (rows == want).all() and rows.shape == (3, 4)
    # before ply 2 White has the time left after its first move, Black its reading
    mover, opponent = rows[2, 2] - 1 - 2 * human_time.VALUES, rows[2, 3] - 1 - 3 * human_time.VALUES
    assert mover - 1 == human_time.seconds_bin(176.5)
    assert opponent - 1 == human_time.seconds_bin(179.0)
    # a game joined late: no base
    late = think.Clocks()
    late.record(10, wtime=50_000, btime=60_000)
    assert late.base is None and late.readings(10)[8:].tolist() == [50.0, 60.0]


def test_the_base_is_read_in_lichess_bots_order_of_commands(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 64 item 4: the engine as Black, driven as lichess-bot drives it through
    python-chess (lib/engine_wrapper.py: the engine started, its uci_options set, the opponent's
    information, then play: ``go movetime 10000`` before its first move, the clocks before the
    next, its own clock less its 2 s move_overhead): at 3+2 it reads the base, 180 s, at
    its first clocked go, and the readings it gave."""
    caplog.set_level("DEBUG", logger="chess.engine")
    board = chess.Board()
    board.push_uci("e2e4")
    with engine(timed_checkpoint(tmp_path / "t.pt")) as uci:
        uci.configure({**LICHESS_BOT_OPTIONS, "HumanTime": True})
        uci.send_opponent_information(opponent=SOMEBOT, engine_rating=1500)
        first = uci.play(board, LICHESS_BOT_FIRST_GO, info=chess.engine.INFO_ALL)
        board.push(first.move)
        board.push(next(iter(board.legal_moves)))  # White's second move
        go = lichess_bot_second_go(180_000, 2000, white=False)
        clock = chess.engine.Limit(white_clock=go["wtime"] / 1000, black_clock=go["btime"] / 1000,
                                   white_inc=2, black_inc=2)  # fmt: skip
        second = uci.play(board, clock, info=chess.engine.INFO_ALL)
    assert second.move in board.legal_moves
    talk = [r.getMessage().split(": ", 1)[1] for r in caplog.records if ": " in r.getMessage()]
    sent = [line[3:] for line in talk if line.startswith("<< ")]
    goes = [line for line in sent if line.startswith(("go", "position", "ucinewgame"))]
    assert goes == [
        "ucinewgame",
        "position startpos moves e2e4",
        "go movetime 10000",
        f"position startpos moves {' '.join(m.uci() for m in board.move_stack)}",
        f"go wtime {go['wtime']} btime {go['btime']} winc 2000 binc 2000",
    ], sent
    said = [line[3:] for line in talk if line.startswith(">> info string")]
    bases = [line for line in said if "time control base" in line]
    assert bases == [f"info string time control base 180 s, read at ply 3 from the mover's"
                     f" clock {go['btime'] / 1000:.3f} s (a Lichess base)"], said  # fmt: skip
    assert "human time 1.50 s" in second.info["string"]  # the clocked go waited, the first not
    assert "human time" not in first.info.get("string", "")


@pytest.mark.parametrize("spent", [0.0, 3.0])
def test_the_wait_is_the_rest_of_the_chosen_time_within_the_clock(spent: float) -> None:
    assert think.wait_seconds(2.0, limit_s=10.0, spent=spent) == max(0.0, 2.0 - spent)
    assert think.wait_seconds(30.0, limit_s=0.0, spent=spent) == 0.0


def test_the_analysis_has_each_moves_time_taken_and_predicted(tmp_path: Path) -> None:
    """chesslm-analyse on the sample's first games (clocked, 60+0 and others): the time taken
    from the PGN's own [%clk] comments (the mover's previous reading less this one plus the
    increment; none for the first two plies and an increment game's last), the head's median
    (1.5 s here) beside it, and both in each PGN comment."""
    import csv

    import chess.pgn

    from chesslm.engine import analyse
    from tests.helpers import first_games_pgn

    pgn = tmp_path / "games.pgn"
    pgn.write_text(first_games_pgn(6))
    ckpt = timed_checkpoint(tmp_path / "t.pt")
    out_csv, out_pgn = tmp_path / "a.csv", tmp_path / "a.pgn"
    code = analyse.main([str(pgn), "--checkpoint", str(ckpt), "--csv", str(out_csv),
                         "--pgn", str(out_pgn)])  # fmt: skip
    assert code == 0
    rows = list(csv.DictReader(out_csv.open()))
    assert set(analyse.TIME_FIELDS) <= set(rows[0])
    games = []
    with pgn.open() as fh:
        while (game := chess.pgn.read_game(fh)) is not None:
            games.append(game)
    checked = 0
    for number, game in enumerate(games, 1):
        clock = [node.clock() for node in game.mainline()]
        inc = int(game.headers["TimeControl"].split("+")[1])
        mine = [r for r in rows if r["game"] == str(number)]
        for k, row in enumerate(mine):
            assert float(row["predicted_think_seconds"]) == pytest.approx(1.5)
            known = 2 <= k < len(clock) - (inc > 0) and None not in (clock[k - 2], clock[k])
            want = clock[k - 2] - clock[k] + inc if known else None
            if want is None or want < 0:
                assert row["think_seconds"] == "", (number, k)
            else:
                assert float(row["think_seconds"]) == want, (number, k)
                checked += 1
    assert checked > 100
    assert "predicted=1.5s" in out_pgn.read_text() and " think=" in out_pgn.read_text()
