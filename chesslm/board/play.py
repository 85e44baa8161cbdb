"""The play view's opponent: the UCI engine's own move choice (``chesslm.engine.session.Engine``,
what ``chesslm-uci`` plays: the argmax of the scorer's legal-move probabilities at its default
options), asked through its own ``position`` and ``go`` commands so the page plays exactly what
a GUI would. The moves come from the page; each is checked legal from the start position before
the engine sees it (an illegal one is one line, and the engine is not asked).
"""

from __future__ import annotations

from typing import Any

import chess
import chess.pgn
import torch

from chesslm.board.analysis import BoardError
from chesslm.engine.session import Engine

MAX_MOVES = 1024  # more plies than any model's context reads


def replayed(moves: list[Any]) -> chess.Board:
    """The board after ``moves`` (UCI) from the start; one line at the first illegal one."""
    if not isinstance(moves, list) or len(moves) > MAX_MOVES:
        raise BoardError(f"moves: a list of at most {MAX_MOVES} UCI moves is needed")
    board = chess.Board()
    for i, text in enumerate(moves, 1):
        try:
            move = chess.Move.from_uci(str(text))
        except ValueError:
            raise BoardError(f"move {i}: not a move: {str(text)[:20]!r}") from None
        if move not in board.legal_moves:
            raise BoardError(f"move {i}: illegal move {move.uci()} in {board.fen()}")
        board.push(move)
    return board


def reply(
    net: torch.nn.Module, moves: list[Any], *, answer_it: bool = True, elo: int | None = None
) -> dict[str, Any]:
    """The engine's move after ``moves`` (None when the game is over, or not ``answer_it``: a
    new game where the person moves first), what it said of it, and the position, legal moves
    and PGN after it."""
    board = replayed(moves)
    said: list[str] = []
    answer: dict[str, Any] = {"reply": None, "san": None, "p": None, "info": said}
    if answer_it and not board.is_game_over(claim_draw=False):
        engine = Engine(net, said.append)
        if elo is not None:
            engine.handle(f"setoption name Elo value {int(elo)}")
        engine.handle("position startpos moves " + " ".join(m.uci() for m in board.move_stack))
        engine.handle("go")
        best = next(line.split()[1] for line in said if line.startswith("bestmove"))
        move = chess.Move.from_uci(best)
        answer.update(reply=best, san=board.san(move), p=probability(said))
        board.push(move)
    return answer | position_after(board)


def probability(said: list[str]) -> str | None:
    """The ``p=…`` the engine's ``info`` line gives its move (its own printed digits)."""
    for line in said:
        if line.startswith("info depth") and " string p=" in line:
            return line.rsplit("p=", 1)[1]
    return None


def position_after(board: chess.Board) -> dict[str, Any]:
    """What the page needs to go on: FEN, legal moves, the result and the game so far as PGN."""
    over = board.outcome(claim_draw=False)
    game = chess.pgn.Game.from_board(board)
    game.headers["Event"] = "chesslm-board play"
    return {
        "fen": board.fen(),
        "legal": [m.uci() for m in board.legal_moves],
        "last": board.peek().uci() if board.move_stack else None,
        "result": over.result() if over else None,
        "pgn": str(game),
    }
