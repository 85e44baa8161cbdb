"""``chess-tokenizer.json`` of an export: the move tokenizer (``chesslm.data.tokens``) as plain
JSON, so a game can be encoded without this package. Not a Hugging Face ``tokenizers`` file: a move
is three ids (source, destination, promotion) from a fixed table, no text is split. A
rating-conditioned model's file (``layout`` ``elo``) also names its rating tokens and their
bins (``chesslm.data.conditioning``): each game starts with White's and Black's rating id.

>>> record()["example"]
{'moves': ['e2e4', 'e7e5', 'g1f3'], 'ids': [69, 12, 28, 64, 52, 36, 64, 6, 21, 64, 70]}
"""

from __future__ import annotations

from typing import Any

import chess

from chesslm.data import conditioning, tokens
from chesslm.files import sha256_file

FORMAT = "chesslm-tokenizer-v1"
EXAMPLE = ("e2e4", "e7e5", "g1f3")
EXAMPLE_RATINGS = (1500, 1650)  # White's, Black's


def rating_bins() -> list[dict[str, Any]]:
    """Each bin's label, exclusive upper bound (``below``; None: the top bin and "unknown")
    and its White and Black ids. Bin 0 is "unknown" (no numeric Elo)."""
    out = []
    for k in range(conditioning.BINS):
        top = k in (0, conditioning.BINS - 1)
        below = None if top else conditioning.LOW + conditioning.WIDTH * (k - 1)
        white, black = conditioning.WHITE_FIRST + k, conditioning.BLACK_FIRST + k
        out.append({"label": conditioning.bin_label(k), "below": below,
                    "white": white, "black": black})  # fmt: skip
    return out


def ratings(layout: str) -> dict[str, Any]:
    """What a conditioned model's file says of its rating prefix."""
    w, b = EXAMPLE_RATINGS
    return {
        "layout": layout,
        "layout_version": conditioning.LAYOUT_VERSION[layout],
        "prefix": "two ids before BOS: White's rating bin's 'white' id, then Black's 'black' id;"
        " a bin holds ratings from the previous bin's 'below' up to (not including) its own;"
        " 'unknown' for a player without a numeric rating. Inputs only: never predicted",
        "bins": rating_bins(),
        "example": {"white_elo": w, "black_elo": b, "prefix": conditioning.prefix(w, b)},
    }


def record(layout: str = "none") -> dict[str, Any]:
    """Every id the model reads or writes, and how a game becomes ids (``layout``: the
    checkpoint's conditioning, ``chesslm.data.conditioning``)."""
    conditioning.check(layout, "layout")
    promotion = {"none": tokens.PROMO_NONE}
    for piece in tokens.PROMO_PIECES:
        promotion[chess.piece_symbol(piece)] = tokens.promotion_token(piece)
    moves = [chess.Move.from_uci(text) for text in EXAMPLE]
    out = {
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
        "conditioning": layout,
    }
    if conditioning.PREFIX_LENGTH[layout]:
        out["ratings"] = ratings(layout)
        out["game"] = "White's and Black's rating ids (see 'ratings'), then " + out["game"]
        out["example"]["ids"] = out["ratings"]["example"]["prefix"] + out["example"]["ids"]
        out["example"].update(white_elo=EXAMPLE_RATINGS[0], black_elo=EXAMPLE_RATINGS[1])
        out["reserved"]["note"] = (
            "never produced; give them no probability when decoding; the rating ids among them"
            " are inputs (before BOS) only"
        )
    return out
