"""Per-game metadata beside the tokens: ratings, time control, result, date, clocks.

Stored as plain ``.npy`` columns next to a shard's (or the token cache's) game arrays:
``PREFIX.meta.{column}.npy``. Per-game columns have one entry per game, in the games' order;
``clock`` has one entry per ply, game ``i``'s plies being ``clock[ply_offsets[i]:ply_offsets[i
+ 1]]`` (``ply_offsets`` from the token offsets: a game of ``n`` plies has ``2 + 3 n`` tokens).
Every column has a sentinel for "missing or unreadable" (``COLUMNS``).

Speed classes are Lichess's: estimated seconds = base + 40 x increment; under 29 ultrabullet,
under 179 bullet, under 479 blitz, under 1,499 rapid, else classical; ``TimeControl "-"`` is
correspondence.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

SPEEDS = ("ultrabullet", "bullet", "blitz", "rapid", "classical", "correspondence")
# upper bounds (exclusive) of the estimated duration in seconds, per timed speed class
SPEED_LIMITS = ((29, "ultrabullet"), (179, "bullet"), (479, "blitz"), (1499, "rapid"))
RESULTS = ("1-0", "0-1", "1/2-1/2")
TERMINATIONS = ("Normal", "Time forfeit", "Abandoned", "Rules infraction", "Unterminated")
BOT_WHITE, BOT_BLACK = 1, 2


@dataclass(frozen=True)
class Column:
    dtype: str
    missing: int | float
    doc: str
    per_ply: bool = False


COLUMNS: dict[str, Column] = {
    "white_elo": Column("int16", -1, "White's Elo (-1: missing or not a number)"),
    "black_elo": Column("int16", -1, "Black's Elo (-1: missing or not a number)"),
    "base_seconds": Column("int32", -1, "TimeControl base seconds (-1: none or unreadable)"),
    "increment_seconds": Column("int32", -1, "TimeControl increment seconds (-1: none)"),
    "speed": Column("int8", -1, "index into SPEEDS (-1: no readable TimeControl)"),
    "rated": Column("int8", -1, "1 rated, 0 casual (Event has no word 'rated'), -1 no Event"),
    "result": Column("int8", -1, "index into RESULTS (-1: unknown, e.g. '*')"),
    "termination": Column("int8", -1, "index into TERMINATIONS (-1: missing or other)"),
    "utc_date": Column("int32", 0, "UTCDate (else Date) as YYYYMMDD (0: missing)"),
    "bot": Column("int8", 0, "bit 1: White is a BOT, bit 2: Black is a BOT"),
    "clock": Column("float32", -1.0, "seconds left after each ply from [%clk] (-1: absent)", True),
}


def speed_class(base: int, increment: int) -> str:
    """Lichess's speed class of a timed game."""
    estimate = base + 40 * increment
    for limit, name in SPEED_LIMITS:
        if estimate < limit:
            return name
    return "classical"


def parse_time_control(text: str | None) -> tuple[int, int] | None:
    """``"base+inc"`` in seconds; None for ``"-"`` (correspondence), missing or unreadable."""
    if not text:
        return None
    base, plus, inc = text.strip().partition("+")
    if not plus or not base.isdigit() or not inc.isdigit():
        return None
    return int(base), int(inc)


def column_path(prefix: Path, column: str) -> Path:
    return prefix.with_name(f"{prefix.name}.meta.{column}.npy")


def ply_offsets(token_offsets: np.ndarray) -> np.ndarray:
    """Offsets of each game's plies in a per-ply column, from its token offsets."""
    plies = (np.diff(np.asarray(token_offsets, dtype=np.int64)) - 2) // 3
    return np.concatenate([[0], np.cumsum(plies)]).astype(np.int64)


class Metadata:
    """The metadata columns of one set of games (memory-mapped, read-only)."""

    def __init__(self, prefix: Path, token_offsets: np.ndarray, *, mmap: bool = True) -> None:
        self.columns = {
            name: np.load(column_path(prefix, name), mmap_mode="r" if mmap else None)
            for name in COLUMNS
        }
        self.ply_offsets = ply_offsets(token_offsets)

    def __getitem__(self, column: str) -> np.ndarray:
        return self.columns[column]

    def clocks(self, game: int) -> np.ndarray:
        """Seconds left after each ply of a game (-1 where [%clk] is absent)."""
        return self.columns["clock"][self.ply_offsets[game] : self.ply_offsets[game + 1]]
