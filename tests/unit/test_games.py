"""Games (chesslm.ladder.games): free-running legality judged by python-chess, a conditioned
player behind its ratings, self-play progress, the engine's refusals."""

from __future__ import annotations

import dataclasses
import logging
import time

import chess
import chess.engine
import chess.pgn
import pytest

from chesslm.data import conditioning, tokens
from chesslm.ladder import games
from chesslm.ladder import players as anchors
from chesslm.progress import Progress
from chesslm.scorer.oracle import oracle_scores
from chesslm.scorer.settings import PlaySettings

typed = PlaySettings.from_dict  # rule play's script types the play settings so


# ---------------------------------------------------------------- legality and engine games


def test_self_play_legality_is_judged_by_python_chess(net):
    result = games.self_play(
        net, games=3, max_plies=12, temperature=1.0, seed=3, deadline=time.monotonic() + 120
    )
    assert result["games"] == 3 and result["complete"]
    assert result["proposals"] == sum(b["proposals"] for b in result["buckets"]) == 36
    assert result["illegal"] == sum(b["illegal"] for b in result["buckets"])
    assert result["illegal"] > 0  # an untrained model proposes illegal moves
    greedy = games.self_play(
        net, games=3, max_plies=5, temperature=0.0, seed=3, deadline=time.monotonic() + 120
    )
    assert greedy["games"] == 1 and greedy["games_asked"] == 3


def test_a_conditioned_player_moves_behind_its_ratings_from_the_side_it_moves(noisy):
    """ModelPlayer's ``elo`` is (its own, its opponent's): playing Black, the prefix is
    (opponent, own); its move is the oracle's argmax behind that prefix."""
    import copy

    net = copy.deepcopy(noisy)
    net.config = dataclasses.replace(net.config, conditioning="elo")  # the same weights
    board = chess.Board()
    board.push_uci("e2e4")
    assert games.mover_prefix(net, board, 2000, 1000) == conditioning.prefix(1000, 2000)
    assert games.mover_prefix(noisy, board, 2000, 1000) == []  # no conditioning: no prefix
    move = anchors.ModelPlayer(net, elo=(2000, 1000)).move(board)
    probe = [*board.move_stack, move]
    for lead in (conditioning.prefix(1000, 2000), conditioning.prefix(2000, 1000)):
        scores = oracle_scores(net, probe, {1}, lead=lead)[1]
        if lead == conditioning.prefix(1000, 2000):
            assert move == max(scores, key=scores.get)
            mine = scores
    assert any(abs(mine[m] - scores[m]) > 1e-4 for m in scores)  # the prefix matters


def test_judge_refuses_illegal_and_malformed_triples():
    board = chess.Board()
    assert games._judge(board, (12, 28, tokens.PROMO_NONE)) == chess.Move.from_uci("e2e4")
    assert games._judge(board, (12, 36, tokens.PROMO_NONE)) is None  # e2e5
    assert games._judge(board, (12, 12, tokens.PROMO_NONE)) is None
    assert games._judge(board, (12, 20, tokens.PROMO_NONE + 4)) is None  # e2e3=Q


def test_missing_engine_is_one_clear_line():
    with pytest.raises(FileNotFoundError, match="ladders.NAME.engine: 'no-such-engine'"):
        anchors.find_engine("no-such-engine")


def test_progress_lines_come_when_the_interval_has_passed(caplog):
    now = [100.0]
    with caplog.at_level(logging.INFO, logger="chesslm.play"):
        p = Progress("games against Stockfish", 8, "games", every=10, clock=lambda: now[0])
        for done, t in ((1, 104.0), (2, 109.9), (3, 110.0), (4, 115.0), (5, 120.5)):
            now[0] = t
            p.update(done, f"{8 - done} games in play")
        p.finish("complete")
    assert [r.getMessage() for r in caplog.records] == [
        "games against Stockfish: 0/8 games (0%)",
        "games against Stockfish: 3/8 games (38%); 5 games in play",
        "games against Stockfish: 5/8 games (62%); 3 games in play",
        "games against Stockfish: 5/8 games (62%); complete",
    ]


def test_self_play_reports_games_finished_as_it_goes(net, caplog):
    now = [0.0]

    def clock() -> float:  # every reading 6 s later: a line every second ply
        now[0] += 6
        return now[0]

    with caplog.at_level(logging.INFO, logger="chesslm.play"):
        progress = Progress("legality", 3, "games finished", every=10, clock=clock)
        games.self_play(net, games=3, max_plies=6, temperature=1.0, seed=3,
                        deadline=time.monotonic() + 120, progress=progress)  # fmt: skip
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == "legality: 0/3 games finished (0%)"
    assert [x.split("; ")[1] for x in lines[1:]] == ["ply 2 of 6", "ply 4 of 6", "ply 6 of 6"]
    assert lines[-1].startswith("legality: 3/3 games finished (100%)")


def test_stockfish_has_no_seed_option():
    """Why elo.json says "reproducible": false: the engine offers no way to seed its play (if
    one appears, play.elo should set it)."""
    engine = chess.engine.SimpleEngine.popen_uci(anchors.find_engine("stockfish"))
    try:
        assert "UCI_LimitStrength" in engine.options
        assert not [name for name in engine.options if "seed" in name.lower()]
    finally:
        engine.quit()
