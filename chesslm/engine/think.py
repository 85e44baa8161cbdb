"""The engine's clocks: what ``chesslm-uci`` knows of the game's clocks from its ``go``
commands, fed to a model with time inputs, and how long it waits before ``bestmove`` under
option ``HumanTime`` (issue 48).

**What a go tells.** ``go wtime W btime B winc I binc J`` before ply k (the engine to move) is,
by Lichess's clock rule (``chesslm.data.clocks``), the mover's reading after its previous move
(ply k - 2, increment included) and the opponent's after its last (ply k - 1): each go fills
two readings of the game's per-ply clock, so the rows of every earlier position the engine
was asked at are the ones the model trained on; readings it never saw are unknown. The time
control's base is not in UCI: it is taken as the larger clock at the game's first go when that
go comes before either side's second move (Lichess's clocks start at the base: the first moves
cost nothing), else unknown; the increment is the mover's ``winc``/``binc``.

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
>>> wait_seconds(12.0, limit_s=4.9, spent=0.5)
4.4
"""

from __future__ import annotations

import numpy as np

from chesslm.model import human_time
from chesslm.scorer import times


class Clocks:
    """The per-ply readings a game's ``go`` commands gave, and its time control's base."""

    def __init__(self) -> None:
        self.seen: dict[int, float] = {}  # ply -> the mover's seconds after it
        self.base: int | None = None
        self.first_go = True

    def new_game(self) -> None:
        self.__init__()

    def record(self, ply: int, *, wtime: int | None, btime: int | None) -> None:
        """A ``go`` before ply ``ply`` with these clocks (milliseconds; None: not given)."""
        mover, other = (wtime, btime) if ply % 2 == 0 else (btime, wtime)
        if self.first_go and ply < 2 and wtime is not None and btime is not None:
            self.base = round(max(wtime, btime) / 1000)
        self.first_go = False
        if other is not None and ply >= 1:
            self.seen[ply - 1] = other / 1000
        if mover is not None and ply >= 2:
            self.seen[ply - 2] = mover / 1000

    def readings(self, plies: int) -> np.ndarray:
        """The readings after plies 0..plies-1 (-1 where no go gave one)."""
        return np.array([self.seen.get(k, -1.0) for k in range(plies)], dtype=np.float64)

    def rows(self, plies: int, increment: int | None) -> np.ndarray:
        """(plies + 1, 4) time rows of the game's positions up to the one to move."""
        base = -1 if self.base is None else self.base
        inc = -1 if increment is None else int(round(increment / 1000))
        return times.of_game(self.readings(plies), base, inc)


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
