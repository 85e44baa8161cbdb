"""The engine's clocks: what ``chesslm-uci`` knows of the game's clocks from its ``go``
commands, fed to a model with time inputs, and how long it waits before ``bestmove`` under
option ``HumanTime`` (issue 48).

**What a go tells.** ``go wtime W btime B winc I binc J`` before ply k (the engine to move) is,
by Lichess's clock rule (``chesslm.data.clocks``), the mover's reading after its previous move
(ply k - 2, increment included) and the opponent's after its last (ply k - 1): each go fills
two readings of the game's per-ply clock, so the rows of every earlier position the engine
was asked at are the ones the model trained on; readings it never saw are unknown. The
increment is the mover's ``winc``/``binc``.

**The base** is not in UCI; it is read from the game's first *clocked* go (one with the mover's
clock), whatever came before it: lichess-bot's first go for either side is ``go movetime
10000``, so its first clocked go is before ply 2 for White and ply 3 for Black. That go must
come before ply 4 (until then the mover has made at most one move, which Lichess's clock does
not charge); a first clocked go from ply 4 on (a game joined late) leaves the base unknown, and
no later go changes it. The mover's clock at that go is its starting clock (the base, or for a
0+inc game the increment but at least 3 s: ``chesslm.data.clocks.start_seconds``) less what
the client takes off (lichess-bot: its ``move_overhead``, 2 s by default, and its own time
since the opponent's move). So the base is the Lichess base (``LICHESS_BASES``: 0, 15, 30, 45,
60 and 90 s and every whole minute to 180 min, all a challenge may set: lila's
``ApiConfig.clockLimitSeconds``) with the smallest starting clock at or above the mover's clock
by at most ``SNAP_S``; else the one with the largest starting clock at most one increment below
it (a GUI whose clock ran for the first move, the increment added); else, no Lichess base near
(a GUI's own time control), the mover's clock rounded to the second. Where two bases start
within ``SNAP_S`` of each other (0+inc against 15 s, an increment of 10-15 s) the smaller
start wins.

**The wait.** With ``HumanTime`` on, a checkpoint with the think-time head and a ``go`` with
the mover's clock, the engine reads the head's distribution at the position (the same scoring
pass as its move), takes its median or, with ``HumanTimePick`` ``sample``, a draw from it
(seeded as the moves are), and answers ``bestmove`` when that long has passed since ``go``: it
waits the rest after its own compute, never beyond the time manager's bound
(``chesslm.engine.timeman``: a share of the clock that keeps it alive to the game's end), and
a ``stop`` or ``quit`` ends the wait at once. ``go movetime``, ``nodes``, ``depth``,
``infinite`` and a go without the mover's clock answer as before, at once.

>>> clocks = Clocks()
>>> clocks.record(0, wtime=180000, btime=180000)
>>> clocks.record(2, wtime=176000, btime=179000)
>>> clocks.readings(2).tolist(), clocks.base
([176.0, 179.0], 180)
>>> black = Clocks()  # lichess-bot's order for Black at 3+2: go movetime, then its clocks
>>> black.record(1, wtime=None, btime=None)
>>> black.record(3, wtime=181_400, btime=177_900, winc=2000, binc=2000)
>>> black.base, base_of(178.0, 0), base_of(61.5, 2), base_of(100.0, 0), base_of(1.0, 1)
(180, 180, 60, 100, 0)
>>> wait_seconds(12.0, limit_s=4.9, spent=0.5)
4.4
"""

from __future__ import annotations

import numpy as np

from chesslm.data import clocks
from chesslm.model import human_time
from chesslm.scorer import times

# every base a Lichess game may have (lila's ApiConfig.clockLimitSeconds): 0, 15, 30, 45, 60
# and 90 s, then each whole minute from 2 to 180
LICHESS_BASES = np.array([0, 15, 30, 45, 60, 90, *range(120, 180 * 60 + 1, 60)])
SNAP_S = 5.0  # a client's overhead off its clock: lichess-bot's 2 s move_overhead and more
BASE_BEFORE_PLY = 4  # a first clocked go from here on is a game joined late: no base


class Clocks:
    """The per-ply readings a game's ``go`` commands gave, and its time control's base."""

    def __init__(self) -> None:
        self.seen: dict[int, float] = {}  # ply -> the mover's seconds after it
        self.base: int | None = None
        self.clocked: tuple[int, float] | None = None  # the first clocked go: ply, mover's clock

    def new_game(self) -> None:
        self.__init__()

    def record(
        self,
        ply: int,
        *,
        wtime: int | None,
        btime: int | None,
        winc: int | None = None,
        binc: int | None = None,
    ) -> None:
        """A ``go`` before ply ``ply`` with these clocks and increments (milliseconds; None:
        not given)."""
        mover, other = (wtime, btime) if ply % 2 == 0 else (btime, wtime)
        if self.clocked is None and mover is not None:
            self.clocked = ply, mover / 1000
            if ply < BASE_BEFORE_PLY:
                inc = winc if ply % 2 == 0 else binc
                self.base = base_of(mover / 1000, (inc or 0) / 1000)
        if other is not None and ply >= 1:
            self.seen[ply - 1] = other / 1000
        if mover is not None and ply >= 2:
            self.seen[ply - 2] = mover / 1000

    def base_note(self) -> str:
        """What the first clocked go told of the base, for the engine's ``info string``."""
        if self.clocked is None:
            return "time control base unknown: no go gave the mover's clock yet"
        ply, clock = self.clocked
        if self.base is None:
            return (f"time control base unknown: the first clocked go came at ply {ply}"
                    f" (from ply {BASE_BEFORE_PLY} on a game is joined late)")  # fmt: skip
        how = "a Lichess base" if self.base in LICHESS_BASES else "no Lichess base fits"
        return (f"time control base {self.base} s, read at ply {ply} from the mover's clock"
                f" {clock:.3f} s ({how})")  # fmt: skip

    def readings(self, plies: int) -> np.ndarray:
        """The readings after plies 0..plies-1 (-1 where no go gave one)."""
        return np.array([self.seen.get(k, -1.0) for k in range(plies)], dtype=np.float64)

    def rows(self, plies: int, increment: int | None) -> np.ndarray:
        """(plies + 1, 4) time rows of the game's positions up to the one to move."""
        base = -1 if self.base is None else self.base
        inc = -1 if increment is None else int(round(increment / 1000))
        return times.of_game(self.readings(plies), base, inc)


def base_of(mover_s: float, inc_s: float) -> int:
    """The base of a game whose first clocked go gave the mover ``mover_s`` seconds, the
    increment ``inc_s`` (the module's rule)."""
    inc = max(0.0, inc_s)
    start = clocks.start_seconds(LICHESS_BASES, inc)
    lichess = (LICHESS_BASES > 0) | (inc > 0)  # Lichess has no 0+0
    up = lichess & (start >= mover_s) & (start - mover_s <= SNAP_S)
    if up.any():  # a client's overhead taken off
        return int(LICHESS_BASES[up][np.argmin(start[up])])
    down = lichess & (start < mover_s) & (mover_s - start <= inc)
    if down.any():  # an increment added to a clock that ran for the first move
        return int(LICHESS_BASES[down][np.argmax(start[down])])
    return round(mover_s)


def wait_seconds(predicted: float, *, limit_s: float, spent: float) -> float:
    """Seconds still to wait after ``spent`` seconds of compute, to answer ``predicted``
    seconds after ``go``, never past ``limit_s`` (the time manager's bound:
    ``chesslm.engine.timeman``)."""
    return round(max(0.0, min(predicted, limit_s) - spent), 6)


def chosen_seconds(probabilities: np.ndarray, pick: str, rng: np.random.Generator) -> float:
    """The think time taken from the head's distribution: its median, or a draw (``pick``:
    one of ``chesslm.engine.options.PICKS``)."""
    if pick == "sample":
        return human_time.sample_seconds(probabilities, rng)
    return float(human_time.median_seconds(probabilities))
