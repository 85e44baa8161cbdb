"""The rating prefix of the model's inputs in play: which ratings a game is fed with.

A model trained with ``conditioning: elo`` reads every game as two rating tokens, then BOS
and the moves (``chesslm.data.conditioning``); one trained without reads BOS and the moves.
The layout is the model's config's (``net.config.conditioning``, from the checkpoint's identity:
``chesslm.model.weights``), so the scoring, the games, the UCI engine and the evaluation ask
here instead of each guessing.
"""

from __future__ import annotations

from typing import Any

import chess
import numpy as np

from chesslm.data import conditioning

DEFAULT = 1500  # a rating where none is given (the UCI options' default, play.ratings')


def layout(net: Any) -> str:
    """The model's input layout (``GPTConfig.conditioning``: ``none`` unless built with one)."""
    return net.config.conditioning


def conditioned(net: Any) -> bool:
    return conditioning.PREFIX_LENGTH[layout(net)] > 0


def prefix(net: Any, white_elo: int, black_elo: int) -> list[int]:
    """The tokens before BOS for a game between these ratings (-1: unknown); empty for a
    model without conditioning, whatever the ratings."""
    return conditioning.prefix(white_elo, black_elo) if conditioned(net) else []


def prefixes(net: Any, white_elo: np.ndarray, black_elo: np.ndarray) -> np.ndarray:
    """(n, 2) prefixes of n games' rating columns, (n, 0) for a model without conditioning."""
    if conditioned(net):
        return conditioning.prefixes(white_elo, black_elo)
    return np.zeros((len(white_elo), 0), dtype=np.int64)


def colours(mover: chess.Color, self_elo: int, opponent_elo: int) -> tuple[int, int]:
    """(White's, Black's) rating when the model moves for ``mover``: its own is ``self_elo``."""
    return (self_elo, opponent_elo) if mover == chess.WHITE else (opponent_elo, self_elo)


def record(net: Any, self_elo: int, opponent_elo: int) -> dict[str, Any]:
    """What a play record says of the ratings the model was fed."""
    if not conditioned(net):
        return {"conditioning": layout(net), "ratings": None,
                "note": "not conditioned: the model reads no ratings"}  # fmt: skip
    return {"conditioning": layout(net), "ratings": {"self": self_elo, "opponent": opponent_elo},
            "prefix_bins": {"self": conditioning.bin_label(conditioning.rating_bin(self_elo)),
                            "opponent": conditioning.bin_label(
                                conditioning.rating_bin(opponent_elo))}}  # fmt: skip
