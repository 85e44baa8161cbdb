"""``chess-tokenizer.json`` of an export: the move tokenizer (``chesslm.data.tokens``) as plain
JSON, so a game can be encoded without this package. Not a Hugging Face ``tokenizers`` file: a move
is three ids (source, destination, promotion) from a fixed table, no text is split.

>>> record()["example"]
{'moves': ['e2e4', 'e7e5', 'g1f3'], 'ids': [69, 12, 28, 64, 52, 36, 64, 6, 21, 64, 70]}
"""

from __future__ import annotations

from typing import Any

import chess

from chesslm.data import tokens
from chesslm.files import sha256_file

FORMAT = "chesslm-tokenizer-v1"
EXAMPLE = ("e2e4", "e7e5", "g1f3")


def record() -> dict[str, Any]:
    """Every id the model reads or writes, and how a game becomes ids."""
    promotion = {"none": tokens.PROMO_NONE}
    for piece in tokens.PROMO_PIECES:
        promotion[chess.piece_symbol(piece)] = tokens.promotion_token(piece)
    moves = [chess.Move.from_uci(text) for text in EXAMPLE]
    return {
        "format": FORMAT,
        "version": tokens.VERSION,
        "tokens_py_sha256": sha256_file(tokens.__file__),
        "vocab_size": tokens.VOCAB_SIZE,
        "game": (
            "BOS, then for each move its source square, its destination square and its"
            " promotion id ('none' for every move that does not promote), then EOS (which"
            " stands only where a move would start); right-padded with PAD in batches"
        ),
        "castling": "the king's two-square move (e1g1, e8c8), never king-takes-rook",
        "squares": {chess.square_name(s): s for s in chess.SQUARES},
        "promotion": promotion,
        "special": {"BOS": tokens.BOS, "EOS": tokens.EOS, "PAD": tokens.PAD},
        "reserved": {
            "first": tokens.FIRST_RESERVED,
            "last": tokens.VOCAB_SIZE - 1,
            "note": "never produced; give them no probability when decoding",
        },
        "example": {"moves": list(EXAMPLE), "ids": tokens.encode_moves(moves)},
    }
