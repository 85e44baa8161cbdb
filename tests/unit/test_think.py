"""The engine reads the time control's base from the game's first clocked go (issue 64 item 4,
``chesslm.engine.think``): under lichess-bot, whose first go is ``go movetime 10000`` and whose
clocks lack its own overhead, at every Lichess time control; under a GUI that sends clocks from
the first move; not from a game joined late."""

from __future__ import annotations

import pytest

from chesslm.data import clocks
from chesslm.engine import think
from tests.helpers import lichess_bot_second_go

INCREMENTS = (0, 1, 2, 3, 5, 10)  # seconds: the lobby's and most challenges'


def base_read(goes: list[tuple[int, dict[str, int]]]) -> int | None:
    """The base a fresh game's clocks read from these go numbers (ply, go's numbers)."""
    game = think.Clocks()
    for ply, numbers in goes:
        game.record(ply, **{k: numbers.get(k) for k in ("wtime", "btime", "winc", "binc")})
    return game.base


@pytest.mark.parametrize("overhead_ms", [2000, 3000])
def test_lichess_bots_clocks_give_every_lichess_base(overhead_ms: int) -> None:
    wrong = []
    for base in think.LICHESS_BASES.tolist():
        for inc in INCREMENTS:
            if base == inc == 0:
                continue  # Lichess has no 0+0
            start_ms = round(1000 * clocks.start_seconds(base, inc))
            for white in (True, False):
                first = 0 if white else 1
                second = lichess_bot_second_go(start_ms, inc * 1000, white=white,
                                               overhead_ms=overhead_ms,
                                               spent_ms=min(1500, start_ms // 2))  # fmt: skip
                got = base_read([(first, {"movetime": 10_000}), (first + 2, second)])
                if got != base:
                    wrong.append((base, inc, white, second, got))
    assert wrong == []


@pytest.mark.parametrize("base", [15, 60, 180, 600])
@pytest.mark.parametrize("inc", [0, 2])
def test_a_guis_clocks_from_the_first_move_give_the_base(base: int, inc: int) -> None:
    """python-chess or cutechess as referee: clocks at every go, the first moves charged."""
    start = base * 1000
    assert base_read([(0, {"wtime": start, "btime": start})]) == base
    white_moved = start - 300 + inc * 1000
    assert base_read([(1, {"wtime": white_moved, "btime": start, "binc": inc * 1000})]) == base
    if inc:  # joined at White's second move, its first charged 0.3 s and the increment added
        go = {"wtime": white_moved, "btime": start - 800 + inc * 1000, "winc": inc * 1000}
        assert base_read([(2, go)]) == base


def test_no_lichess_base_near_is_the_clock_rounded_and_a_late_game_has_none() -> None:
    assert base_read([(0, {"wtime": 100_000, "btime": 100_000})]) == 100  # a GUI's own control
    assert base_read([(0, {"wtime": 7_400, "btime": 7_400})]) == 7  # 7+0: 0+0 is no base
    assert base_read([(1, {"movetime": 10_000}), (5, {"wtime": 170_000, "btime": 178_000})]) is None
    # only the first clocked go tells: a later one, or one past ply 3, changes nothing
    later = [(0, {"wtime": 60_000, "btime": 60_000}), (2, {"wtime": 178_000, "btime": 178_000})]
    assert base_read(later) == 60


def test_the_base_note_says_what_was_read() -> None:
    game = think.Clocks()
    assert "unknown" in game.base_note()
    game.record(3, **lichess_bot_second_go(180_000, 2000, white=False))
    assert game.base_note().startswith("time control base 180 s, read at ply 3")
    game.new_game()
    game.record(6, wtime=50_000, btime=60_000)
    assert game.base is None and "ply 6" in game.base_note()
