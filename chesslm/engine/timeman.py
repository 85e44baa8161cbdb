"""The engine's time manager under ``HumanTime`` (issue 64 item 2): the think-time head
proposes a time, this bounds it, as strong engines bound their search (Stockfish's
``timeman.cpp``: an optimum from the clock, the increment and an estimate of the moves to go,
and a maximum that keeps a reserve).

The bound for a move is the smaller of ``STRETCH`` optimums and ``MAX_SHARE`` of the usable
clock. The usable clock is the clock less ``Move Overhead`` and less a latency kept back for
every move still to play (``RESERVE_HORIZON`` less the moves played, at least the moves to go:
a move costs the pipe and the engine's compute however short its wait); the optimum is the
usable clock plus the increments of the moves to go (``HORIZON`` less the moves played, at
least ``MIN_MOVES_TO_GO``), shared out over them. A head that asked for more than the bound at
every move would leave the clock shrinking geometrically, the kept latency untouched: alive to
move 100 of a game without increment, and for good with one (tests/unit/test_timeman.py plays
such games against the clock). Each side's first move is bounded alike: it has no training
target (``chesslm.model.human_time``), and Lichess's first moves cost no clock but a client's
may.

The shares are set by hand, not fitted on the training split's clocked games (issue 64 asks
for that fit; it is open): they bound, the head proposes.

>>> round(bound_seconds(180_000, 0, overhead_ms=100, moves_played=10), 2)  # 3+0, move 11
13.29
>>> round(bound_seconds(18_000, 0, overhead_ms=100, moves_played=35), 2)  # a tenth of it left
2.39
>>> bound_seconds(1_000, 2_000, overhead_ms=100, moves_played=40)  # the increment comes after
0.0
"""

from __future__ import annotations

HORIZON = 50  # moves to go estimated at a game's start: 50 less the moves played,
MIN_MOVES_TO_GO = 20  # but never fewer (a long game goes on)
RESERVE_HORIZON = 100  # the moves whose latency is kept back: a long game's, less those played
STRETCH = 3.0  # a move may take this many optimums when the head asks for it
MAX_SHARE = 0.2  # and never more than this share of the usable clock
LATENCY_S = 0.03  # the pipe and the engine's compute beyond Move Overhead, each move, at least


def moves_to_go(moves_played: int, movestogo: int | None = None) -> int:
    """The moves still to play before the clock ends or is refilled."""
    if movestogo:
        return max(1, movestogo)
    return max(MIN_MOVES_TO_GO, HORIZON - moves_played)


def bound_seconds(
    left_ms: int,
    inc_ms: int | None,
    *,
    overhead_ms: int,
    moves_played: int,
    movestogo: int | None = None,
    latency_s: float = LATENCY_S,
) -> float:
    """Seconds from ``go`` to ``bestmove`` that this move may take at most. ``latency_s``: what
    a move costs the clock whatever it waits (the engine passes its own compute, measured)."""
    inc = max(0, inc_ms or 0) / 1000
    togo = moves_to_go(moves_played, movestogo)
    # every move still to play costs its latency, however short its wait: kept back for each
    kept = max(togo, RESERVE_HORIZON - moves_played) * max(latency_s, LATENCY_S)
    usable = max(0.0, left_ms / 1000 - overhead_ms / 1000 - kept)
    optimum = (usable + inc * (togo - 1)) / togo
    return max(0.0, min(STRETCH * optimum, MAX_SHARE * usable))
