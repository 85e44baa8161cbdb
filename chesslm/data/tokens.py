"""The move tokenizer: a game is BOS, one (source, destination, promotion) triple per move, EOS.

Vocabulary of 128 ids:

====== =====================================================
0-63   squares a1..h8 (python-chess numbering: a1=0, h8=63)
64     promotion "none" (every non-promotion move)
65-68  promotion to knight, bishop, rook, queen
69     BOS
70     EOS (only where a move would start)
71     PAD (input padding; never a target)
72-127 reserved: never produced
====== =====================================================

Castling is the king's two-square move (e1g1), never king-takes-rook (e1h1), because
that is what python-chess produces for standard chess.

>>> encode_moves([chess.Move.from_uci("e2e4")])
[69, 12, 28, 64, 70]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import chess

VERSION = "sq-triple-v1"
# the four kinds of token a move position predicts, in order (validation reports each)
PHASES = ("source", "destination", "promotion", "eos")
VOCAB_SIZE = 128
PROMO_NONE = 64
PROMO_PIECES = (chess.KNIGHT, chess.BISHOP, chess.ROOK, chess.QUEEN)
BOS = 69
EOS = 70
PAD = 71
FIRST_RESERVED = 72

_PROMO_TOKEN = {piece: PROMO_NONE + 1 + i for i, piece in enumerate(PROMO_PIECES)}
_TOKEN_PROMO = {token: piece for piece, token in _PROMO_TOKEN.items()}


def promotion_token(piece: chess.PieceType | None) -> int:
    """The token for a promotion piece, or PROMO_NONE for None."""
    return PROMO_NONE if piece is None else _PROMO_TOKEN[piece]


def move_tokens(move: chess.Move) -> tuple[int, int, int]:
    """The (source, destination, promotion) triple of a move."""
    return move.from_square, move.to_square, promotion_token(move.promotion)


def encode_moves(moves: Iterable[chess.Move]) -> list[int]:
    """Tokens of a whole game: BOS, a triple per move, EOS."""
    tokens = [BOS]
    for move in moves:
        tokens.extend(move_tokens(move))
    tokens.append(EOS)
    return tokens


def decode_move(triple: Sequence[int]) -> chess.Move:
    """The move a (source, destination, promotion) triple stands for.

    :raises ValueError: if the triple is not three tokens in the right phases, or names
        the same square twice. Legality is the caller's business.
    """
    if len(triple) != 3:
        raise ValueError(f"a move is three tokens, got {list(triple)!r}")
    source, destination, promotion = (int(t) for t in triple)
    if not (0 <= source < 64 and 0 <= destination < 64):
        raise ValueError(f"not a pair of squares: {list(triple)!r}")
    if source == destination:
        raise ValueError(f"source equals destination: {list(triple)!r}")
    if promotion == PROMO_NONE:
        return chess.Move(source, destination)
    if promotion not in _TOKEN_PROMO:
        raise ValueError(f"not a promotion token: {promotion!r} in {list(triple)!r}")
    return chess.Move(source, destination, promotion=_TOKEN_PROMO[promotion])


class State:
    """A game being read token by token: knows the board and which tokens may come next.

    >>> state = State()
    >>> state.feed(BOS)
    >>> sum(state.mask(legal=True))  # 10 pieces can move from the start position
    10
    """

    def __init__(self, board: chess.Board | None = None) -> None:
        self.board = board.copy() if board is not None else chess.Board()
        self._pending: list[int] = []  # tokens of the move being read
        self.started = False
        self.ended = False
        self.plies = 0
        self._legal: list[chess.Move] | None = None  # legal moves of the board, once per ply

    def feed(self, token: int) -> None:
        """Advance by one token.

        :raises ValueError: if the token is not legal here (the message says why).
        """
        token = int(token)
        if not (0 <= token < VOCAB_SIZE) or not self.mask(legal=True)[token]:
            raise ValueError(f"token {token!r} is not legal after {self._describe()}")
        if token == BOS:
            self.started = True
        elif token == EOS:
            self.ended = True
        else:
            self._pending.append(token)
            if len(self._pending) == 3:
                self.board.push(decode_move(self._pending))
                self._pending = []
                self._legal = None
                self.plies += 1

    def mask(self, *, legal: bool = True) -> list[bool]:
        """A VOCAB_SIZE list: True for each token that may come next.

        With ``legal=True`` it follows the rules of chess on the current board (EOS at any
        move boundary after the first move, since a game may end by resignation or time;
        only EOS once the game is over). With ``legal=False`` it follows only the grammar
        (the token's phase).
        """
        allowed = [False] * VOCAB_SIZE
        if self.ended:
            return allowed
        if not self.started:
            allowed[BOS] = True
            return allowed
        phase = len(self._pending)
        if not legal:
            if phase == 2:
                allowed[PROMO_NONE : PROMO_NONE + 5] = [True] * 5
            else:
                allowed[:64] = [True] * 64
                allowed[EOS] = phase == 0 and self.plies > 0
            return allowed
        if self._legal is None:
            self._legal = list(self.board.legal_moves)
        if phase == 0:
            for move in self._legal:
                allowed[move.from_square] = True
            allowed[EOS] = self.plies > 0
        elif phase == 1:
            for move in self._legal:
                if move.from_square == self._pending[0]:
                    allowed[move.to_square] = True
        else:
            for move in self._legal:
                if (move.from_square, move.to_square) == tuple(self._pending):
                    allowed[promotion_token(move.promotion)] = True
        return allowed

    def _describe(self) -> str:
        return f"{self.plies} plies and partial move {self._pending!r} (board {self.board.fen()!r})"
