"""The engine's KV cache between ``go`` commands (``chesslm.engine.kvcache``, issue 58 item 1):
the session driven by its own commands over real sample games, move by move, every go's legal
moves, win/draw/loss and think-time distribution held to a full pass's
(``session.position_scores``) within 1e-5 in probability, through a takeback, a deviation, a
``position fen`` mid-game, another game without ``ucinewgame`` and a ``ucinewgame``; for a plain
model, a rating-conditioned one and one with time inputs fed the games' clocks. Each go also
says how much of the sequence it read from the cache, which the tests hold to what a game
should reuse."""

from __future__ import annotations

import io

import chess
import chess.pgn
import numpy as np
import pytest
import torch

from chesslm.engine import session
from chesslm.model import gpt
from tests.helpers import first_games_pgn

TOLERANCE = 1e-5  # issue 58: the same probabilities as a full pass


@pytest.fixture(scope="module")
def games() -> list[chess.pgn.Game]:
    """Sample games 22 (88 plies, 120+1) and 29 (59 plies, 120+1, a promotion at ply 56)."""
    handle = io.StringIO(first_games_pgn(30))
    read = []
    while (game := chess.pgn.read_game(handle)) is not None:
        read.append(game)
    return [read[29], read[22]]


def model(kind: str) -> gpt.GPT:
    heads = {"plain": {}, "elo": {"conditioning": "elo"},
             "timed": {"outcome": True, "time_inputs": True, "think_time": True}}[kind]  # fmt: skip
    torch.manual_seed(0)
    net = gpt.build("tiny", **heads).eval()
    with torch.no_grad():  # LayerNorm gains and biases away from 1 and 0
        for p in net.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return net


class Checked:
    """An engine whose every cached scoring is compared with a full pass on the same inputs:
    ``seen`` holds (plies, tokens reused, tokens in all, largest probability gap)."""

    def __init__(self, net: gpt.GPT) -> None:
        self.net, self.lines = net, []
        self.engine = session.Engine(net, self.lines.append)
        self.seen: list[tuple[int, int, int, float]] = []
        cached = self.engine.cache.scores

        def scores(board, prefix, time=None):  # noqa: ANN001, ANN202
            got = cached(board, prefix, time)
            want = session.position_scores(net, board, self.engine.device, prefix, time)
            assert got[0] == want[0]  # the same legal moves in the same order
            gaps = [float((got[1].exp() - want[1].exp()).abs().max())]
            for a, b in zip(got[2:], want[2:], strict=True):
                assert (a is None) == (b is None)
                if a is not None:
                    gaps.append(float(np.abs(np.asarray(a) - np.asarray(b)).max()))
            cache = self.engine.cache
            self.seen.append((len(board.move_stack), cache.reused, cache.length, max(gaps)))
            return got

        self.engine.cache.scores = scores

    def say(self, line: str) -> None:
        assert self.engine.handle(line)

    def go(self, moves: list[chess.Move], clock: str = "", start: str = "startpos") -> None:
        text = " ".join(m.uci() for m in moves)
        self.say(f"position {start}" + (f" moves {text}" if text else ""))
        self.say(f"go {clock}".strip() if clock else "go nodes 1")
        assert self.lines[-1].startswith("bestmove ") and self.lines[-1] != "bestmove (none)"


def clocks(game: chess.pgn.Game) -> list[str]:
    """The ``go`` words before each ply of the game: both clocks from its comments (Lichess's
    rule: a side's clock after its last move) and the increment, in milliseconds."""
    base, _, inc = game.headers["TimeControl"].partition("+")
    left = [float(base), float(base)]
    words = []
    for node in game.mainline():
        words.append(f"wtime {round(1000 * left[0])} btime {round(1000 * left[1])}"
                     f" winc {1000 * int(inc)} binc {1000 * int(inc)}")  # fmt: skip
        left[0 if node.ply() % 2 == 1 else 1] = node.clock()
    return words


@pytest.mark.parametrize("kind", ["plain", "elo", "timed"])
def test_every_go_is_the_full_pass_through_takebacks_fens_and_new_games(games, kind) -> None:
    first, second = (list(g.mainline_moves()) for g in games)
    times = clocks(games[0]) if kind == "timed" else [""] * (len(first) + 1)
    check = Checked(model(kind))
    if kind == "elo":  # the prefix is the mover's: it changes side at every ply
        check.say("setoption name SelfElo value 1800")
        check.say("setoption name OppoElo value 1300")
    check.say("ucinewgame")
    for k in range(len(first)):  # every ply of a game with a promotion (ply 56)
        check.go(first[:k], times[k])
    plies = [s[0] for s in check.seen]
    assert plies == list(range(len(first)))
    if kind == "elo":  # a new prefix at every ply: each go is a rebuild
        assert all(reused == 0 for _, reused, _, _ in check.seen)
    else:  # the first go steps it all, each later one its ply's three tokens
        assert [(r, n - r) for _, r, n, _ in check.seen[1:]] == [
            (n - 3, 3) for _, _, n, _ in check.seen[1:]
        ]
        assert check.seen[0][1] == 0
    length = check.seen[-1][2]

    check.go(first[:40], times[40])  # a takeback: the last token alone is stepped again
    assert check.seen[-1][1] == check.seen[-1][2] - 1  # ply 40 and the last go: White to move
    board = chess.Board()
    for move in first[:40]:
        board.push(move)
    other = next(m for m in board.legal_moves if m != first[40])
    check.go([*first[:40], other], times[41])  # a deviation from ply 40
    if kind != "elo":
        assert check.seen[-1][1:3] == (check.seen[-2][2], check.seen[-2][2] + 3)

    asked = len(check.seen)
    board = chess.Board()
    for move in first[:30]:
        board.push(move)
    check.say(f"position fen {board.fen()}")  # a FEN mid-game: no model, the cache untouched
    check.say("go nodes 1")
    assert len(check.seen) == asked and "standard start" in " ".join(check.lines[-3:])
    check.go(first[:50], times[50])  # back in the game: the cache still holds plies 0-39
    if kind != "elo":
        assert check.seen[-1][1] >= check.seen[-2][2] - 3

    start = chess.STARTING_FEN
    check.go(second[:12], times[12], start=f"fen {start}")  # another game, no ucinewgame
    assert check.seen[-1][1] < check.seen[-1][2] < length

    check.say("ucinewgame")  # the second game, its White moves only: two plies a go
    times = clocks(games[1]) if kind == "timed" else [""] * (len(second) + 1)
    before = len(check.seen)
    for k in range(0, len(second), 2):
        check.go(second[:k], times[k])
    ours = check.seen[before:]
    assert ours[0][1] == 0  # ucinewgame: nothing reused
    # the mover is always White (one prefix, as in a game, for the conditioned model too)
    assert all(n - r == 6 for _, r, n, _ in ours[1:])
    worst = max(gap for *_, gap in check.seen)
    assert worst <= TOLERANCE, worst


def test_a_timed_models_changed_time_control_rebuilds_from_its_first_row(games) -> None:
    moves = list(games[0].mainline_moves())
    times = clocks(games[0])
    check = Checked(model("timed"))
    for k in range(20):
        check.go(moves[:k], times[k])
    # the increment changes: every position's time-control row changes, BOS's first
    changed = times[21].replace("inc 1000", "inc 5000")
    check.go(moves[:21], changed)
    assert check.seen[-1][1] == 0
    check.go(moves[:22], times[22])  # and back: the rows differ again from BOS on
    assert check.seen[-1][1] == 0
    assert max(gap for *_, gap in check.seen) <= TOLERANCE


def test_the_full_pass_switch_and_the_info_line(games) -> None:
    moves = list(games[0].mainline_moves())
    check = Checked(model("plain"))
    check.go(moves[:10])
    check.go(moves[:11])
    assert "kv cache 31 of 34 tokens" in check.lines[-2]
    check.engine.incremental = False  # a full pass at every go: no cache, no word of it
    check.go(moves[:12])
    assert len(check.seen) == 2 and "kv cache" not in check.lines[-2]
    assert "argmax of" in check.lines[-2]
