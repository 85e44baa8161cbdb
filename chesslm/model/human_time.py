"""What the time inputs (``GPTConfig.time_inputs``) read and the think-time head
(``GPTConfig.think_time``) predicts, NumPy only: the one definition that training
(``chesslm.train.human_time``), play's measure, the engine and the analysis all read. The
clock rule itself (time left, time spent) is ``chesslm.data.clocks``.

**Seconds bins.** One log-spaced scale serves every time: ``EDGES`` are the bins' lower edges,
0, 1, 2, 3, 4, 5, 6, 8 s (Lichess's readings are whole seconds, so each bin below 10 s holds
whole seconds), then the R10 preferred numbers 10, 12.5, 16, 20, 25, 32, 40, 50, 63, 80 of each
decade up to 10,000 s (a ratio of 10^0.1 ~ 1.26 between edges); the last bin is open. 39 bins.

**Inputs: where and why.** At every *position* of a game (BOS and each move's last token: the
input from which the next move's source, or EOS, is predicted; the outcome head's positions,
``chesslm.model.outcome``) the model adds one learned embedding: the sum of four rows, the time
control's base and increment and the mover's and the opponent's time left before the move
(``chesslm.data.clocks.time_left``), each binned, with an "unknown" value of its own (no clock
reading, no readable time control). Not the move's source token: its first prediction (the
source square) is made *at* the position before it, which would then not see the clock; and
not a token of its own: the vocabulary's reserved ids are the rating prefix's, and an extra
token per move would cost a third more context. Ply k's clocks enter at ply k's position,
after ply k - 1 is complete: no input sees the reading after ply k, which gives its think time
away. Every other input (the moves' other tokens, the rating prefix, padding) gets row 0, zero.

**Think time.** At the same positions the head predicts the time the mover spends on the ply
(``chesslm.data.clocks.spent``) as a distribution over the bins; positions where it is unknown
have no target (``-1``). Its point prediction is the distribution's median, read linearly within
the median's bin (``median_seconds``); the last bin is read as [10,000, 12,500) s. Errors are
measured on ``log_seconds``: ln(1 + seconds).

>>> seconds_bin(np.array([0, 0.4, 1, 7, 9.9, 10, 12, 13, 600, 20000, np.nan])).tolist()
[0, 0, 1, 6, 7, 8, 8, 9, 25, 38, -1]
>>> len(EDGES), ROWS
(39, 161)
>>> features(np.array([60.0, 60, 45]), base=60, increment=0).tolist()
[[17, 42, 97, 137], [17, 42, 97, 137], [17, 42, 97, 137], [17, 42, 97, 136]]
>>> targets(np.array([60.0, 60, 57, 52]), base=60, increment=0).tolist()
[-1, -1, 3, 7, -1]
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from chesslm.data import clocks

# the bins' lower edges in seconds (the module docstring says why these)
EDGES = (
    *(0, 1, 2, 3, 4, 5, 6, 8),
    *(10, 12.5, 16, 20, 25, 32, 40, 50, 63, 80),
    *(100, 125, 160, 200, 250, 320, 400, 500, 630, 800),
    *(1000, 1250, 1600, 2000, 2500, 3200, 4000, 5000, 6300, 8000),
    10000,
)
BINS = len(EDGES)
_EDGES = np.asarray(EDGES, dtype=np.float64)
_UPPER = np.append(_EDGES[1:], _EDGES[-1] * 1.25)  # each bin's upper edge (the last: read so)

# the four time inputs at a position, each a bin or unknown: VALUES values a feature
FEATURES = ("base", "increment", "mover_left", "opponent_left")
VALUES = BINS + 1  # 0 unknown, 1 + bin
ROWS = 1 + len(FEATURES) * VALUES  # the embedding's rows: row 0 is "no time input here"
NONE = 0


def seconds_bin(seconds: Any) -> Any:
    """The bin of each time in seconds (NumPy-wise); -1 for NaN or a negative time."""
    t = np.asarray(seconds, dtype=np.float64)
    out = np.searchsorted(_EDGES, t, side="right") - 1
    out = np.where(t >= 0, out, -1)
    return int(out) if out.ndim == 0 else out.astype(np.int64)


def bin_label(k: int) -> str:
    """What a bin holds, as a person reads it."""
    if k == BINS - 1:
        return f">={EDGES[k]:g} s"
    return f"{EDGES[k]:g}-{EDGES[k + 1]:g} s"


def feature_rows(values: np.ndarray) -> np.ndarray:
    """(..., 4) embedding rows of (..., 4) feature values (0 unknown, 1 + bin)."""
    offsets = 1 + VALUES * np.arange(len(FEATURES), dtype=np.int64)
    return np.asarray(values, dtype=np.int64) + offsets


def values_of(seconds: Any) -> np.ndarray:
    """Feature values of times in seconds: 1 + bin, 0 where unknown."""
    return seconds_bin(np.asarray(seconds, dtype=np.float64).reshape(-1)) + 1


class Positions(NamedTuple):
    """Some games' positions laid out back to back (plies + 1 per game): their time rows
    (P, 4) and think-time bins (P,) (-1: none), and each game's first position (G + 1)."""

    rows: np.ndarray
    targets: np.ndarray
    offsets: np.ndarray


def positions_of(clock: Any, ply_offsets: Any, base: Any, increment: Any) -> Positions:
    """The time rows and think-time targets at every position of some games laid out ply by
    ply (``chesslm.data.clocks.spent_plies``'s arguments: their readings, -1 where absent;
    each game's first ply and one past its last; base and increment per game, -1 unreadable),
    all at once."""
    offsets = np.asarray(ply_offsets, dtype=np.int64) - int(np.asarray(ply_offsets)[0])
    base = np.asarray(base, dtype=np.int64).reshape(-1)
    increment = np.asarray(increment, dtype=np.int64).reshape(-1)
    c = clocks.readings(clock)
    took = clocks.spent_plies(c, offsets, base, increment)
    # one more slot per game, after its last ply: the position after the final move
    ends = offsets[1:]
    extended = offsets + np.arange(len(offsets))
    left = clocks.time_left_plies(np.insert(c, ends, np.nan), extended, base, increment)
    plies = np.diff(extended)
    control = [np.where(v < 0, np.nan, v).astype(np.float64) for v in (base, increment)]
    values = np.stack(
        [
            np.repeat(values_of(control[0]), plies),
            np.repeat(values_of(control[1]), plies),
            values_of(left.mover),
            values_of(left.opponent),
        ],
        axis=-1,
    )
    targets = seconds_bin(np.insert(took, ends, np.nan))
    return Positions(feature_rows(values), targets, extended)


def features(clock: Any, *, base: int, increment: int) -> np.ndarray:
    """(n + 1, 4) int64 embedding rows at each position of a game of n plies with these
    per-ply readings (``clock``, -1 where absent) and time control (-1: unreadable)."""
    return positions_of(clock, [0, len(clock)], [base], [increment]).rows


def unknown_features(positions: int) -> np.ndarray:
    """(positions, 4) rows with every time unknown: a game whose clocks are not given."""
    return feature_rows(np.zeros((positions, len(FEATURES)), dtype=np.int64))


def position_features(
    *, base: int, increment: int, mover_left: float, opponent_left: float
) -> np.ndarray:
    """(4,) rows of one position from its times in seconds (NaN or -1: unknown): the engine's
    and the analysis's single positions."""
    seconds = [base, increment, mover_left, opponent_left]
    return feature_rows(values_of([np.nan if s is None or s < 0 else s for s in seconds]))


def targets(clock: Any, *, base: int, increment: int) -> np.ndarray:
    """(n + 1,) int64 think-time bins at each position of a game (-1: no target)."""
    return positions_of(clock, [0, len(clock)], [base], [increment]).targets


def split_counts(clock: Any, ply_offsets: Any, base: Any, increment: Any) -> tuple[np.ndarray, int]:
    """(BINS,) think-time targets by bin of some games laid out ply by ply (a split's
    columns: ``chesslm.data.clocks.spent_plies``'s arguments), and how many games have one;
    a block of games at a time."""
    offsets = np.asarray(ply_offsets, dtype=np.int64)
    counts, games = np.zeros(BINS, dtype=np.int64), 0
    for g in range(0, len(offsets) - 1, BLOCK_GAMES):
        end = min(g + BLOCK_GAMES, len(offsets) - 1)
        block = offsets[g : end + 1]
        took = clocks.spent_plies(clock[block[0] : block[-1]], block, base[g:end], increment[g:end])
        t = seconds_bin(took)
        counts += np.bincount(t[t >= 0], minlength=BINS)
        at = clocks.Plies.of(block)
        games += len(np.unique(at.game[t >= 0]))
    return counts, games


BLOCK_GAMES = 1 << 16  # games a pass over a split reads at once: memory flat in the split


def log_seconds(seconds: Any) -> Any:
    """ln(1 + seconds): the scale errors are measured on (0 s is a common time)."""
    return np.log1p(np.asarray(seconds, dtype=np.float64))


def median_seconds(probabilities: Any) -> Any:
    """The median in seconds of distributions over the bins (..., BINS), read linearly within
    the bin where the cumulative probability passes one half."""
    p = np.asarray(probabilities, dtype=np.float64)
    p = p / p.sum(-1, keepdims=True)
    cdf = np.cumsum(p, -1)
    k = np.minimum((cdf < 0.5).sum(-1), BINS - 1)
    below = (
        np.take_along_axis(cdf, k[..., None], -1)[..., 0]
        - np.take_along_axis(p, k[..., None], -1)[..., 0]
    )
    mass = np.take_along_axis(p, k[..., None], -1)[..., 0]
    share = np.clip((0.5 - below) / np.maximum(mass, 1e-12), 0.0, 1.0)
    return _EDGES[k] + share * (_UPPER[k] - _EDGES[k])


def sample_seconds(probabilities: Any, rng: np.random.Generator) -> float:
    """One time drawn from a distribution over the bins: a bin, then uniformly within it."""
    p = np.asarray(probabilities, dtype=np.float64)
    k = int(rng.choice(BINS, p=p / p.sum()))
    return float(rng.uniform(_EDGES[k], _UPPER[k]))
