"""Rating conditioning: the players' ratings as two input tokens in front of a game.

A run with ``conditioning: elo`` feeds every game as ``WHITE_RATING, BLACK_RATING, BOS,
moves…, EOS``. The two prefix tokens are reserved ids (72-127 of ``tokens``), so the model
keeps its vocabulary and its exact parameter count. They are inputs only: nothing predicts
them, and the loss and every metric count move tokens (from BOS on) as without conditioning.

Each side has 28 ids: one for "unknown" (no numeric Elo), one below 800, one per 100 Elo from
800 to 3299, and one from 3300 up.

====== ==============================================
72     White's rating unknown
73     White below 800
74-98  White 800-899, 900-999, …, 3200-3299
99     White 3300 or more
100    Black's rating unknown
101    Black below 800
102-126 Black 800-899, …, 3200-3299
127    Black 3300 or more
====== ==============================================

>>> prefix(1523, -1)
[81, 100]
>>> bin_label(rating_bin(1523))
'1500-1599'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from chesslm.data import tokens

LAYOUTS = ("none", "elo")
# written next to the tokenizer's version wherever a checkpoint says how its inputs were built
LAYOUT_VERSION = {"none": tokens.VERSION, "elo": f"{tokens.VERSION}+elo-prefix-v1"}
PREFIX_LENGTH = {"none": 0, "elo": 2}

BINS = 28  # per side: unknown, < 800, 25 bins of 100 Elo, >= 3300
WHITE_FIRST = tokens.FIRST_RESERVED
BLACK_FIRST = WHITE_FIRST + BINS
LOW, WIDTH = 800, 100
assert BLACK_FIRST + BINS == tokens.VOCAB_SIZE  # the prefix uses the reserved ids exactly


def rating_bin(elo: Any) -> Any:
    """0 for unknown (a negative Elo, as the metadata's -1), else 1 .. BINS - 1 (numpy-wise)."""
    elo = np.asarray(elo, dtype=np.int64)
    known = np.clip((elo - LOW) // WIDTH + 2, 1, BINS - 1)
    out = np.where(elo < 0, 0, known)
    return int(out) if out.ndim == 0 else out


def bin_label(k: int) -> str:
    """What a bin holds, as a person reads it."""
    if k == 0:
        return "unknown"
    if k == 1:
        return f"<{LOW}"
    if k == BINS - 1:
        return f"{LOW + WIDTH * (BINS - 3)}+"
    low = LOW + WIDTH * (k - 2)
    return f"{low}-{low + WIDTH - 1}"


def prefix(white_elo: int, black_elo: int) -> list[int]:
    """The two input tokens for a game between these ratings (-1: unknown)."""
    return [WHITE_FIRST + rating_bin(white_elo), BLACK_FIRST + rating_bin(black_elo)]


def prefixes(white_elo: np.ndarray, black_elo: np.ndarray) -> np.ndarray:
    """(n, 2) int64 prefix tokens for n games' rating columns."""
    return np.stack(
        [WHITE_FIRST + rating_bin(white_elo), BLACK_FIRST + rating_bin(black_elo)], axis=-1
    ).astype(np.int64)


def check(layout: str, where: str = "conditioning") -> str:
    """:raises ValueError: naming ``where`` for a layout that is not one of ``LAYOUTS``."""
    if layout not in LAYOUTS:
        raise ValueError(f"{where}: {layout!r} is not a conditioning ({', '.join(LAYOUTS)})")
    return layout


def of_identity(identity: Mapping[str, Any]) -> str:
    """The layout a checkpoint was trained with (``none`` for checkpoints from before it)."""
    return check(identity.get("conditioning", "none"), "identity.conditioning")
