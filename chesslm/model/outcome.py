"""What the outcome head (``GPTConfig.outcome``) predicts, NumPy only: the one definition that
training's targets and loss (``chesslm.train.outcome``) and play's measure
(``chesslm.match.outcome``) both read.

A game's *positions* are BOS and each move's last token: a game of n plies (3n + 2 tokens with
BOS and EOS) has n + 1, White to move at even plies. At each, the target is the game's result
(``metadata.RESULTS``) from the side to move: ``OUTCOME_CLASSES`` win, draw, loss; none (-1)
where the result is unknown (``*``). The frequency baseline is each class's share by side to
move, add-one smoothed.

>>> targets(np.array([0, 0, 1, 2, -1]), np.array([0, 1, 0, 3, 0])).tolist()
[0, 2, 2, 1, -1]
>>> positions(np.array([2, 5, 8])).tolist()
[1, 2, 3]
>>> side_counts(np.array([8, 5]), np.array([0, 2])).tolist()  # 2 and 1 plies
[[2, 1, 0], [0, 1, 1]]
>>> side_shares(np.array([[2, 0, 0], [0, 1, 1]])).round(3).tolist()
[[0.6, 0.2, 0.2], [0.2, 0.4, 0.4]]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from chesslm.data.metadata import RESULTS
from chesslm.model.presets import OUTCOME_CLASSES

WIN, DRAW, LOSS = (OUTCOME_CLASSES.index(c) for c in ("win", "draw", "loss"))
WHITE_WINS, BLACK_WINS, DRAWN = (RESULTS.index(r) for r in ("1-0", "0-1", "1/2-1/2"))
SIDES = ("white_to_move", "black_to_move")


def positions(lengths: Any) -> Any:
    """Positions (outcome slots) of games of these token lengths: plies + 1."""
    return (lengths + 1) // 3


def targets(result: Any, ply: Any) -> np.ndarray:
    """The class from the side to move at each position (its game's ``result``, an index into
    RESULTS, -1 unknown, and its ply); -1 where the result is unknown."""
    result, ply = np.asarray(result, np.int64), np.asarray(ply, np.int64)
    win = result == ply % 2  # RESULTS' index of a win is its winner's (0 White, 1 Black)
    y = np.where(result == DRAWN, DRAW, np.where(win, WIN, LOSS))
    return np.where(result >= 0, y, -1).astype(np.int64)


def side_counts(lengths: Any, results: Any) -> np.ndarray:
    """(2, 3) targets of a split's games (token ``lengths``, ``results``) by side to move
    (rows: White, Black) and class: every position of a game, its last included."""
    n = positions(np.asarray(lengths, dtype=np.int64))
    sides = np.stack([(n + 1) // 2, n // 2])  # White moves at even plies 0, 2, ...
    results = np.asarray(results)
    counts = np.zeros((2, len(OUTCOME_CLASSES)), dtype=np.int64)
    for result, (white, black) in (
        (WHITE_WINS, (WIN, LOSS)),
        (BLACK_WINS, (LOSS, WIN)),
        (DRAWN, (DRAW, DRAW)),
    ):
        games = results == result
        counts[0, white] += int(sides[0][games].sum())
        counts[1, black] += int(sides[1][games].sum())
    return counts


def side_shares(counts: np.ndarray) -> np.ndarray:
    """(side, class) shares of (2, 3) counts, add-one smoothed: the frequency baseline."""
    fitted = np.asarray(counts, dtype=np.float64) + 1.0
    return fitted / fitted.sum(axis=1, keepdims=True)


def shares_record(shares: np.ndarray) -> dict[str, dict[str, float]]:
    """(side, class) shares as a record's ``{side: {class: share}}``."""
    return {
        side: dict(zip(OUTCOME_CLASSES, map(float, row), strict=True))
        for side, row in zip(SIDES, shares, strict=True)
    }
