"""The board as the page shows it: python-chess's ``chess.svg`` (a dependency already, a
well-kept renderer: no board is drawn by hand here), with the model's most probable moves as
green arrows whose opacity follows their probability and the move played as a blue one.

``chess.svg`` draws every arrow at one width (a tenth of a square), so the probability is
carried by opacity alone: each arrow's colour is a ``#rrggbbaa`` (chess.svg 1.11 passes a
colour it has no name for through as the SVG stroke and fill, which browsers read with its
alpha; its ``colors`` map takes no new arrow names). The table beside the board gives the
numbers.

>>> svg = board_svg(chess.Board().fen(), [("e2e4", 0.5), ("d2d4", 0.25)], played="e2e4")
>>> svg.startswith("<svg"), svg.count('class="arrow"'), svg.count('stroke="#15781bff"')
(True, 6, 1)
"""

from __future__ import annotations

import chess
import chess.svg

from chesslm.board.analysis import BoardError

MAX_ARROWS = 5
MODEL_GREEN = "#15781b"
PLAYED_BLUE = "#003088cc"
LOWEST_OPACITY = 0.2  # the least probable arrow still shows


def board_svg(
    fen: str,
    arrows: list[tuple[str, float]],
    *,
    played: str | None = None,
    last: str | None = None,
    flipped: bool = False,
    size: int = 480,
) -> str:
    """The SVG of the position ``fen`` with the model's moves ``arrows`` ((UCI, probability),
    most probable first), the move ``played`` there and the ``last`` move highlighted.

    :raises BoardError: the FEN is not a position, or a move is not legal in it."""
    board = position(fen)
    drawn = []
    top = max((p for _, p in arrows[:MAX_ARROWS]), default=1.0) or 1.0
    for uci, p in arrows[:MAX_ARROWS]:
        move = legal(board, uci)
        alpha = LOWEST_OPACITY + (1 - LOWEST_OPACITY) * max(0.0, min(1.0, p / top))
        color = f"{MODEL_GREEN}{round(255 * alpha):02x}"
        drawn.append(chess.svg.Arrow(move.from_square, move.to_square, color=color))
    if played:
        move = legal(board, played)
        drawn.append(chess.svg.Arrow(move.from_square, move.to_square, color=PLAYED_BLUE))
    lastmove = chess.Move.from_uci(last) if last and valid_uci(last) else None
    check = board.king(board.turn) if board.is_check() else None
    return str(chess.svg.board(board, arrows=drawn, lastmove=lastmove,
                               check=check, flipped=flipped, size=size))  # fmt: skip


def position(fen: str) -> chess.Board:
    """The board of a FEN; one line if it is not a legal position."""
    try:
        board = chess.Board(fen)
    except ValueError as error:
        raise BoardError(f"not a position: FEN {fen[:100]!r} ({error})") from None
    if not board.is_valid():
        raise BoardError(f"not a legal position: FEN {fen[:100]!r} ({board.status()!r})")
    return board


def legal(board: chess.Board, uci: str) -> chess.Move:
    """The legal move ``uci`` in ``board``; one line if it is not one."""
    try:
        move = chess.Move.from_uci(uci)
    except (ValueError, TypeError):
        raise BoardError(f"not a move: {str(uci)[:20]!r} (UCI, e.g. e2e4)") from None
    if move not in board.legal_moves:
        raise BoardError(f"illegal move {uci} in {board.fen()}")
    return move


def valid_uci(text: str) -> bool:
    try:
        chess.Move.from_uci(text)
    except (ValueError, TypeError):
        return False
    return True
