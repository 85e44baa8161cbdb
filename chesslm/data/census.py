"""The manifest's ``census``: how many kept games have each edge case worth knowing about.

Per-user Lichess exports bring games against the Lichess computer, arena and team-battle
events, games without clocks or without an Elo; the filters may keep them, so the manifest
says how many there are. Counted from the stored metadata columns, one shard at a time
(memory is one shard's columns, never the whole dataset's).
"""

from __future__ import annotations

from collections import Counter
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


def shard_counts(prefix: Path) -> Counter[str]:
    """The census of one shard's games."""
    offsets = gamearrays.load_npy(gamearrays.part_path(prefix, "offsets"), mmap=True)
    meta = metadata.Metadata(prefix, offsets)
    white, black, bot = meta["white_elo"], meta["black_elo"], meta["bot"]
    rated, speed = meta["rated"], meta["speed"]
    computer = metadata.COMPUTER_WHITE | metadata.COMPUTER_BLACK
    # a game has clocks if any ply has one; reduceat needs a non-empty game at each start
    plies = np.diff(meta.ply_offsets)
    with_clock = np.zeros(len(plies), dtype=bool)
    has = plies > 0
    if has.any():
        clocked = (np.asarray(meta["clock"]) >= 0).astype(np.int64)
        with_clock[has] = np.add.reduceat(clocked, meta.ply_offsets[:-1][has]) > 0
    counts = Counter(
        games=len(plies),
        missing_elo=int(np.count_nonzero((white < 0) | (black < 0))),
        computer_opponent=int(np.count_nonzero(bot & computer)),
        bot_title=int(np.count_nonzero(bot & metadata.BOT_TITLES)),
        no_clocks=int(np.count_nonzero(~with_clock)),
        no_time_control=int(np.count_nonzero(speed < 0)),
        correspondence=int(np.count_nonzero(speed == metadata.SPEEDS.index("correspondence"))),
    )
    for name, value in RATED.items():
        counts[f"rated_{name}"] = int(np.count_nonzero(rated == value))
    return counts


def census(prefixes: list[Path]) -> dict[str, int]:
    """The census of every game under ``prefixes`` (keys in a fixed order, zeros kept)."""
    total: Counter[str] = Counter()
    for prefix in prefixes:
        total.update(shard_counts(prefix))
    keys = ["games", "missing_elo", "computer_opponent", "bot_title", "no_clocks"]
    keys += ["no_time_control", "correspondence", *(f"rated_{name}" for name in RATED)]
    return {key: int(total[key]) for key in keys}
