"""The manifest's ``census``: how many kept games have each edge case worth knowing about.

Per-user Lichess exports bring games against the Lichess computer, arena and team-battle
events, games without clocks or without an Elo; the filters may keep them, so the manifest
says how many there are. Counted from the metadata columns (``counts``): by the workers, for
each chunk's kept games as they are parsed, less the games dropped later (duplicates, the
``train_games`` cap), so the main process never reads the shards back for it; ``census``
counts stored shards, one at a time, for a check.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from chesslm.data import gamearrays, metadata

# the ``rated`` column's values by name (metadata.is_rated)
RATED = {
    "event": metadata.RATED_BY_EVENT,
    "rating_diff": metadata.RATED_BY_RATING_DIFF,
    "casual": metadata.CASUAL,
    "no_event": metadata.NO_EVENT,
    "unknown": metadata.UNKNOWN,
}
KEYS = (
    "games",
    "missing_elo",
    "computer_opponent",
    "bot_title",
    "no_clocks",
    "no_time_control",
    "correspondence",
    *(f"rated_{name}" for name in RATED),
)


def counts(columns: Mapping[str, np.ndarray], ply_offsets: np.ndarray) -> Counter[str]:
    """The census of some games, from their metadata columns (``clock`` per ply, laid out by
    ``ply_offsets``)."""
    white, black, bot = columns["white_elo"], columns["black_elo"], columns["bot"]
    rated, speed = columns["rated"], columns["speed"]
    computer = metadata.COMPUTER_WHITE | metadata.COMPUTER_BLACK
    # a game has clocks if any ply has one: its largest clock is >= 0 (fmax skips a NaN); no
    # copy of the per-ply column. reduceat needs a non-empty game at each start.
    plies = np.diff(ply_offsets)
    with_clock = np.zeros(len(plies), dtype=bool)
    has = plies > 0
    if has.any():
        clock = np.asarray(columns["clock"])
        with_clock[has] = np.fmax.reduceat(clock, ply_offsets[:-1][has]) >= 0
    total = Counter(
        games=len(plies),
        missing_elo=int(np.count_nonzero((white < 0) | (black < 0))),
        computer_opponent=int(np.count_nonzero(bot & computer)),
        bot_title=int(np.count_nonzero(bot & metadata.BOT_TITLES)),
        no_clocks=int(np.count_nonzero(~with_clock)),
        no_time_control=int(np.count_nonzero(speed < 0)),
        correspondence=int(np.count_nonzero(speed == metadata.SPEEDS.index("correspondence"))),
    )
    for name, value in RATED.items():
        total[f"rated_{name}"] = int(np.count_nonzero(rated == value))
    return total


def shard_counts(prefix: Path) -> Counter[str]:
    """The census of one stored shard's games."""
    offsets = gamearrays.load_npy(gamearrays.part_path(prefix, "offsets"), mmap=True)
    meta = metadata.Metadata(prefix, offsets)
    return counts(meta.columns, meta.ply_offsets)


def ordered(total: Counter[str]) -> dict[str, int]:
    """A census as the manifest records it: keys in a fixed order, zeros kept."""
    return {key: int(total[key]) for key in KEYS}


def census(prefixes: list[Path]) -> dict[str, int]:
    """The census of every game under ``prefixes``, read from the shards."""
    total: Counter[str] = Counter()
    for prefix in prefixes:
        total.update(shard_counts(prefix))
    return ordered(total)
