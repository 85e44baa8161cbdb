"""The time manager keeps a HumanTime engine alive (issue 64 item 2): games played against
the clock, move by move, by a head that always asks for more than the bound, each move also
costing the compute and the pipe's latency beyond its wait."""

from __future__ import annotations

import pytest

from chesslm.engine import timeman

COMPUTE_S, PIPE_S = 0.02, 0.01  # a tiny model's move on the CPU, and the pipe's round trip


def lowest_clock(base_s: float, inc_s: float, moves: int, overhead_ms: int = 100) -> float:
    """The lowest clock, in seconds, over ``moves`` moves of one side that each wait the
    whole bound (at least the compute), plus the pipe, before the increment is added."""
    left = low = base_s
    for played in range(moves):
        bound = timeman.bound_seconds(round(left * 1000), round(inc_s * 1000),
                                      overhead_ms=overhead_ms, moves_played=played)  # fmt: skip
        left -= max(bound, COMPUTE_S) + PIPE_S
        low = min(low, left)
        left += inc_s
    return low


@pytest.mark.parametrize("base_s", [15, 60, 180, 600])
def test_no_flag_to_move_100_without_increment_nor_ever_with_one(base_s: float) -> None:
    assert lowest_clock(base_s, 0, 100) > 0.1  # Move Overhead still left at move 100
    for inc_s in (1, 2):
        assert lowest_clock(base_s, inc_s, 300) > 0.1 + inc_s


def test_the_bound_shrinks_with_the_clock_and_grows_with_the_increment() -> None:
    bounds = [timeman.bound_seconds(ms, 0, overhead_ms=100, moves_played=30)
              for ms in (120_000, 60_000, 20_000, 5_000)]  # fmt: skip
    assert bounds == sorted(bounds, reverse=True) and bounds[-1] < 0.5
    plain, with_inc = (timeman.bound_seconds(60_000, inc, overhead_ms=100, moves_played=30)
                       for inc in (0, 2_000))  # fmt: skip
    assert with_inc > plain


def test_movestogo_refills_the_clock_at_its_count() -> None:
    """``go movestogo N``: the clock is shared over those moves, not a game's horizon."""
    last = timeman.bound_seconds(30_000, 0, overhead_ms=100, moves_played=60, movestogo=1)
    many = timeman.bound_seconds(30_000, 0, overhead_ms=100, moves_played=60)
    assert last > many
