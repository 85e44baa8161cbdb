"""Which positions move-matching counts: each protocol as its anchor's code selects them, with a
text that names the anchor's file and is written next to every number it gives.

Clocks come from the cache's metadata: ``clock[ply_offsets[g] + p]`` is the clock comment
(``[%clk]``) of game ``g``'s ply ``p``, the mover's time left *after* that move; before a
player's first move their clock is the game's base time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

SKIP_PLIES = 10  # Maia-2 cfg.first_n_moves; Maia-3 "the first 10 moves", plies in Allie's code
CLOCK_SECONDS = 30.0  # Maia-2 cfg.clock_threshold; Maia-3 "fewer than 30 seconds"
MAIA2_MAX_PLY = 300  # Maia-2 cfg.max_ply: process_per_game stops after this ply

Meta = dict[str, np.ndarray]
Rule = Callable[[np.ndarray, np.ndarray, Meta], np.ndarray]


@dataclass(frozen=True)
class Protocol:
    name: str
    text: str
    keep: Rule  # (game, ply, metadata columns) -> mask of the positions kept


def clock_after(game: np.ndarray, ply: np.ndarray, meta: Meta) -> np.ndarray:
    """The clock comment of each position's move (seconds; -1 where absent)."""
    if not len(meta["clock"]):
        return np.full(len(ply), -1.0)
    at = meta["ply_offsets"][np.asarray(game, dtype=np.int64)] + np.asarray(ply, dtype=np.int64)
    return meta["clock"][at].astype(np.float64)


def first_low_ply(games: np.ndarray, meta: Meta) -> np.ndarray:
    """Per game, the first ply whose mover has under CLOCK_SECONDS before moving (the clock
    after their previous move, the base time before their first); the game's length if none.
    An absent clock never counts as low."""
    offsets, clock, base = meta["ply_offsets"], meta["clock"], meta["base_seconds"]
    out = np.empty(len(games), dtype=np.int64)
    for i, g in enumerate(games):
        mine = clock[offsets[g] : offsets[g + 1]]
        before = np.concatenate(
            [np.full(min(len(mine), 2), base[g]), mine[: max(len(mine) - 2, 0)]]
        )
        low = np.flatnonzero((before >= 0) & (before < CLOCK_SECONDS))
        out[i] = low[0] if len(low) else len(mine)
    return out


def _maia2(game: np.ndarray, ply: np.ndarray, meta: Meta) -> np.ndarray:
    # extract_clock_time reads an absent clock as 0.0, which fails "> clock_threshold"
    after = clock_after(game, ply, meta)
    return (ply >= SKIP_PLIES) & (ply <= MAIA2_MAX_PLY) & (after > CLOCK_SECONDS)


def _maia3(game: np.ndarray, ply: np.ndarray, meta: Meta) -> np.ndarray:
    ids, inverse = np.unique(np.asarray(game, dtype=np.int64), return_inverse=True)
    stop = first_low_ply(ids, meta)[inverse]
    return (ply >= SKIP_PLIES) & (ply < stop)


def _all(game: np.ndarray, ply: np.ndarray, meta: Meta) -> np.ndarray:
    return np.ones(len(ply), dtype=bool)


PROTOCOLS = {
    "maia2": Protocol(
        "maia2",
        f"Maia-2's process_per_game (CSSLab/maia2, maia2/main.py): the first {SKIP_PLIES} plies"
        f" skipped; a position kept when the clock comment of the move played there (the mover's"
        f" clock after it) is above {CLOCK_SECONDS:g} s, strictly; a move without a clock comment"
        f" dropped (maia2/utils.py extract_clock_time reads it as 0); plies after"
        f" {MAIA2_MAX_PLY} unused (max_ply in maia2/configs/maia2-training-rapid.yaml)",
        _maia2,
    ),
    "maia3": Protocol(
        "maia3",
        f"Maia-3's, as the original Allie's trim_games applies it (y0mingzhang/allie,"
        f" docs/DETAILS.md): the first {SKIP_PLIES} plies dropped, and every ply from the first"
        f" at which the player to move has under {CLOCK_SECONDS:g} s (their clock after their"
        f" previous move; the base time before their first); a ply without a clock never stops"
        f" the game",
        _maia3,
    ),
    "all": Protocol("all", "every position", _all),
}
DEFAULT = ("maia2", "all")  # the first named is the headline in the summary and the figure


def chosen(names: list[str] | tuple[str, ...]) -> list[Protocol]:
    """The protocols ``names`` (config ``match.protocols``), in order."""
    unknown = [n for n in names if n not in PROTOCOLS]
    if unknown or not names:
        raise ValueError(f"match.protocols: {unknown or 'empty'} not among {sorted(PROTOCOLS)}")
    return [PROTOCOLS[n] for n in names]
