"""The tokenizer against python-chess, on every game of the embedded sample."""

from __future__ import annotations

import chess
import pytest

from chesslm.data import tokens
from chesslm.data.tokens import BOS, EOS, PROMO_NONE, State, decode_move, encode_moves
from tests.helpers import all_sample_games


def expected_masks(board: chess.Board, move: chess.Move | None, plies: int) -> list[set[int]]:
    """The legal next tokens before each of a move's three tokens, from python-chess alone."""
    legal = list(board.legal_moves)
    starts = {m.from_square for m in legal} | ({EOS} if plies > 0 else set())
    if move is None:
        return [starts]
    dests = {m.to_square for m in legal if m.from_square == move.from_square}
    promos = {
        PROMO_NONE if m.promotion is None else tokens.promotion_token(m.promotion)
        for m in legal
        if (m.from_square, m.to_square) == (move.from_square, move.to_square)
    }
    return [starts, dests, promos]


def allowed(state: State) -> set[int]:
    return {i for i, ok in enumerate(state.mask(legal=True)) if ok}


@pytest.mark.xdist_group("sample")  # all_sample_games parsed once
def test_every_sample_game_round_trips_and_masks_match_python_chess():
    sample_games = all_sample_games()
    assert len(sample_games) == 4754
    checked_tokens = 0
    for game in sample_games:
        moves = list(game.mainline_moves())
        encoded = encode_moves(moves)
        assert encoded[0] == BOS and encoded[-1] == EOS and len(encoded) == 2 + 3 * len(moves)
        assert all(0 <= t < tokens.FIRST_RESERVED for t in encoded)
        assert [decode_move(encoded[1 + 3 * i : 4 + 3 * i]) for i in range(len(moves))] == moves
        state = State()
        state.feed(BOS)
        board = chess.Board()
        for ply, move in enumerate(moves):
            triple = tokens.move_tokens(move)
            for want, token in zip(expected_masks(board, move, ply), triple, strict=True):
                assert allowed(state) == want, (game.headers.get("Site"), ply)
                state.feed(token)
                checked_tokens += 1
            board.push(move)
            assert state.board == board
        assert allowed(state) == expected_masks(board, None, len(moves))[0]
        state.feed(EOS)
        assert allowed(state) == set()
    assert checked_tokens == 3 * 334_602


def test_castling_is_the_kings_two_square_move():
    board = chess.Board("r3k2r/8/8/8/8/8/8/R3K2R w KQkq - 0 1")
    castles = [m for m in board.legal_moves if board.is_castling(m)]
    assert {tokens.move_tokens(m)[:2] for m in castles} == {
        (chess.E1, chess.G1),
        (chess.E1, chess.C1),
    }
    state = State(board)
    state.feed(BOS)
    state.feed(chess.E1)
    assert not state.mask()[chess.H1]  # king-takes-rook is not a token sequence we produce
    assert state.mask()[chess.G1]


def test_promotion_tokens_and_underpromotion():
    board = chess.Board("8/P7/8/8/8/8/8/k6K w - - 0 1")
    state = State(board)
    state.feed(BOS)
    state.feed(chess.A7)
    state.feed(chess.A8)
    assert allowed(state) == {65, 66, 67, 68}  # N, B, R, Q; never "none"
    state.feed(65)
    assert state.board.piece_at(chess.A8) == chess.Piece(chess.KNIGHT, chess.WHITE)


def test_game_over_allows_only_eos():
    board = chess.Board()
    for uci in ("f2f3", "e7e5", "g2g4"):
        board.push_uci(uci)
    state = State(board)
    state.feed(BOS)
    for token in tokens.move_tokens(chess.Move.from_uci("d8h4")):
        state.feed(token)
    assert state.board.is_checkmate()
    assert allowed(state) == {EOS}


def test_grammar_mask_ignores_the_board():
    state = State()
    state.feed(BOS)
    grammar = state.mask(legal=False)
    assert sum(grammar[:64]) == 64 and not grammar[EOS]  # EOS only after a move
    assert not any(grammar[tokens.FIRST_RESERVED :])


@pytest.mark.parametrize(
    "triple",
    [(12, 12, PROMO_NONE), (64, 28, PROMO_NONE), (12, 28, 3), (12, 28, 72), (12, 28), (-1, 5, 64)],
)
def test_decode_move_rejects_nonsense(triple):
    with pytest.raises(ValueError):
        decode_move(triple)


def test_feed_rejects_illegal_and_reserved_tokens():
    state = State()
    state.feed(BOS)
    with pytest.raises(ValueError, match="not legal"):
        state.feed(chess.E4)  # no piece there
    with pytest.raises(ValueError):
        state.feed(100)
