"""Lichess's clock read back from a game's ``[%clk]`` readings: the time each side had left
before each ply, and the time each ply took. NumPy only.

**The rule**, from Lichess's own code (lichess-org/scalachess ``core/src/main/scala/Clock.scala``,
``Game.scala``, ``LagTracker.scala``; lichess-org/lila ``modules/game/src/main/PgnDump.scala``):

* ``[%clk]`` after a ply is the mover's clock after that ply, rounded to whole seconds
  (``PgnDump.makeTree``: ``roundSeconds``).
* Each side starts with ``initTime``: the base, or when the base is 0 the increment but at least
  3 s (``Clock.Config.initTime``). A side that goes berserk (arenas) starts with half the base
  (``berserkPenalty``; none when base < 40 x increment) and gets no increment
  (``ClockPlayer.increment``).
* The clock does not run for either side's first move: it starts once Black has played
  (``Game.applyClock`` starts it when ``ply - startedAtPly == 1``); before that a move costs
  nothing and adds no increment (``Clock.step`` without a timer).
* A timed move costs its wall time less Lichess's lag compensation (at most the mover's lag
  quota, ``LagTracker.onMove``: under a second a move, up to 7 s banked), then the increment is
  added (``Clock.step``: ``takeTime(moveTime - inc)``), unless the move ends the game or comes
  after the flag (``clockActive``): the clock then stops without it.
* Time given by the opponent (``giveTime``, "+15 seconds") raises a clock between two readings.

**Time spent** on ply k >= 2 (the mover's previous reading is after ply k - 2)::

    spent[k] = clock[k - 2] - clock[k] + increment      (increment 0 for a berserk side)

the time the clock charged (wall time less any lag compensation), to the rounding of two
readings. Unknown (NaN) where: k < 2 (the clock was not running), a reading or the increment
is unknown, the result is negative (time was given), or the ply is the game's last and the
increment positive (the clock may have stopped without adding it).

**Time left before** ply k, what the mover and the opponent have when the ply starts::

    mover:    clock[k - 2] for k >= 2, else the starting time (each side's first move)
    opponent: clock[k - 1] for k >= 1, else the starting time (before ply 0)

The starting time is the time control's ``initTime``; a berserk side's halved clock shows from
its second move on. So the time left before ply k is a function of the time control and the
readings of plies before k only: nothing the ply itself took
(``tests/workflow/test_human_time.py``).

>>> spent(np.array([60.0, 60, 57, 52, 50]), base=60, increment=0).tolist()
[nan, nan, 3.0, 8.0, 7.0, nan]
>>> left = time_left(np.array([60.0, 60, 57, 52]), base=60, increment=0)
>>> left.mover.tolist(), left.opponent.tolist()
([60.0, 60.0, 60.0, 60.0, 57.0], [60.0, 60.0, 60.0, 57.0, 52.0])
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

MIN_START_SECONDS = 3  # Clock.Config.initTime: a 0+inc game starts with max(inc, 3) s
BERSERK_TOLERANCE = 0.5  # a rounded reading of half the base: within half a second of it


def start_seconds(base: Any, increment: Any) -> Any:
    """Each side's clock before its first move (``initTime``), NumPy-wise; NaN for an
    unreadable time control (the metadata's -1)."""
    base, increment = np.asarray(base, np.float64), np.asarray(increment, np.float64)
    start = np.where(base > 0, base, np.maximum(increment, MIN_START_SECONDS))
    out = np.where((base < 0) | (increment < 0), np.nan, start)
    return float(out) if out.ndim == 0 else out


def readings(clock: Any) -> np.ndarray:
    """Per-ply ``clock`` column values as float64 seconds, NaN where absent (-1)."""
    c = np.asarray(clock, dtype=np.float64).copy()
    c[~(c >= 0)] = np.nan
    return c


class Plies(NamedTuple):
    """Games laid out ply by ply (a split's per-ply column): each ply's game and its index
    in the game, and each game's plies."""

    game: np.ndarray
    index: np.ndarray
    plies: np.ndarray

    @classmethod
    def of(cls, ply_offsets: Any) -> Plies:
        offsets = np.asarray(ply_offsets, dtype=np.int64)
        plies = np.diff(offsets)
        game = np.repeat(np.arange(len(plies)), plies)
        return cls(
            game, np.arange(int(offsets[-1]) - offsets[0]) - (offsets[game] - offsets[0]), plies
        )


class TimeLeft(NamedTuple):
    """Seconds the mover and the opponent have left before each ply."""

    mover: np.ndarray
    opponent: np.ndarray


def time_left_plies(clock: Any, ply_offsets: Any, base: Any, increment: Any) -> TimeLeft:
    """Time left before every ply of some games laid out ply by ply (``clock``: their
    readings, ``ply_offsets``: each game's first ply and one past the last; ``base`` and
    ``increment`` per game), NaN where unknown."""
    c, at = readings(clock), Plies.of(ply_offsets)
    start = np.asarray(start_seconds(base, increment), dtype=np.float64).reshape(-1)[at.game]
    mover, opponent = start.copy(), start.copy()
    mover[2:] = np.where(at.index[2:] >= 2, c[:-2], start[2:])
    opponent[1:] = np.where(at.index[1:] >= 1, c[:-1], start[1:])
    return TimeLeft(mover, opponent)


def time_left(clock: Any, *, base: int, increment: int) -> TimeLeft:
    """The mover's and the opponent's time left before each of a game's n plies and after
    its last (n + 1 values each; NaN where unknown)."""
    c = readings(clock)
    return time_left_plies(np.append(c, np.nan), [0, len(c) + 1], [base], [increment])


def spent_plies(clock: Any, ply_offsets: Any, base: Any, increment: Any) -> np.ndarray:
    """Seconds each ply took by the rule above (NaN where unknown), for some games laid out
    ply by ply (as ``time_left_plies``'s arguments)."""
    c, at = readings(clock), Plies.of(ply_offsets)
    base, increment = np.asarray(base, np.int64), np.asarray(increment, np.int64)
    inc = increment[at.game].astype(np.float64)
    first = np.asarray(ply_offsets, dtype=np.int64)[:-1] - int(np.asarray(ply_offsets)[0])
    # berserk: the reading after the side's first move (which cost nothing) is the starting
    # time less half the base, where berserk has a penalty at all (base >= 40 x increment)
    halved = start_seconds(base, increment) - base / 2
    penalty = (base > 0) & (base >= 40 * increment)
    for side in (0, 1):
        has = at.plies > side
        after_first = np.full(len(at.plies), np.nan)
        after_first[has] = c[first[has] + side]
        went = penalty & (np.abs(after_first - halved) <= BERSERK_TOLERANCE)
        inc[went[at.game] & (at.index % 2 == side)] = 0.0
    took = np.full(len(c), np.nan)
    took[2:] = c[:-2] - c[2:] + inc[2:]
    took[at.index < 2] = np.nan  # the clock was not running (and c[:-2] is another game's)
    took[~(took >= 0)] = np.nan  # negative (time was given) or a reading missing
    took[increment[at.game] < 0] = np.nan
    last = at.index == at.plies[at.game] - 1
    took[last & (increment[at.game] > 0)] = np.nan  # the clock may have stopped before it
    return took


def spent(clock: Any, *, base: int, increment: int) -> np.ndarray:
    """Seconds each of a game's n plies took (NaN where unknown), n + 1 values: the last
    (after the final move) is always NaN."""
    c = readings(clock)
    return np.append(spent_plies(c, [0, len(c)], [base], [increment]), np.nan)
