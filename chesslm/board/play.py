"""The play view's opponent: the UCI engine's own move choice (``chesslm.engine.session.Engine``,
what ``chesslm-uci`` plays: the argmax of the scorer's legal-move probabilities at its default
options), asked through its own ``position`` and ``go`` commands so the page plays exactly what
a GUI would. The moves come from the page; each is checked legal from the start position before
the engine sees it (an illegal one is one line, and the engine is not asked).

A game may start from a FEN (one line if it is not a position) and, for a rating-conditioned
checkpoint, at chosen ratings: the engine's ``SelfElo`` (the model's) and ``OppoElo`` (the
person's). The model reads games from the standard start only, so from another position the
engine plays a uniformly random legal move, and its own line saying so (``how``) is shown.
"""

from __future__ import annotations

from typing import Any

import chess
import chess.pgn
import torch

from chesslm.board.analysis import BoardError
from chesslm.board.drawing import position
from chesslm.engine import options
from chesslm.engine.session import Engine

MAX_MOVES = 1024  # more plies than any model's context reads


def replayed(moves: list[Any], fen: str | None = None) -> chess.Board:
    """The board after ``moves`` (UCI) from ``fen`` (None: the start); one line at a FEN that
    is not a position or at the first illegal move."""
    if not isinstance(moves, list) or len(moves) > MAX_MOVES:
        raise BoardError(f"moves: a list of at most {MAX_MOVES} UCI moves is needed")
    if fen is not None and (not isinstance(fen, str) or len(fen) > 100):
        raise BoardError("fen: a FEN string of at most 100 characters is needed")
    board = chess.Board() if fen is None or not fen.strip() else position(fen.strip())
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
    net: torch.nn.Module,
    moves: list[Any],
    *,
    answer_it: bool = True,
    fen: str | None = None,
    self_elo: Any = None,
    oppo_elo: Any = None,
) -> dict[str, Any]:
    """The engine's move after ``moves`` from ``fen`` (None when the game is over, or not
    ``answer_it``: the person moves first), at ratings ``self_elo`` (the model's) and
    ``oppo_elo`` (None: the engine's default), what it said of it (``how``: its line on how it
    chose), and the position, legal moves and PGN after it."""
    board = replayed(moves, fen)
    elos = {name: rating(value, name) for name, value in
            (("SelfElo", self_elo), ("OppoElo", oppo_elo)) if value is not None}  # fmt: skip
    said: list[str] = []
    answer: dict[str, Any] = {"reply": None, "san": None, "p": None, "how": None, "info": said}
    if answer_it and not board.is_game_over(claim_draw=False):
        engine = Engine(net, said.append)
        for name, value in elos.items():
            engine.handle(f"setoption name {name} value {value}")
        start = board.root()
        where = "startpos" if start.fen() == chess.STARTING_FEN else f"fen {start.fen()}"
        engine.handle(f"position {where} moves " + " ".join(m.uci() for m in board.move_stack))
        engine.handle("go")
        best = next(line.split()[1] for line in said if line.startswith("bestmove"))
        move = chess.Move.from_uci(best)
        answer.update(reply=best, san=board.san(move), p=probability(said), how=how(said))
        board.push(move)
    return answer | position_after(board)


def rating(value: Any, name: str) -> int:
    """A rating the page sent, in the engine's range; one line naming the option if not."""
    low, high = options.ELO
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise BoardError(f"{name}: a whole number {low}..{high} is needed, not {str(value)[:20]!r}")
    return value


def how(said: list[str]) -> str | None:
    """The engine's last ``info string`` before its move: how it chose it (and the ratings
    it read), or why it could not ask the model."""
    lines = [line.removeprefix("info string ") for line in said if line.startswith("info string")]
    return lines[-1] if lines else None


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
