"""The rating prefix of a run's batches (``runs.NAME.conditioning``, layout in
chesslm/data/conditioning.py), read from the token cache's Elo columns.

A ``Prefixes`` gives the prefix tokens of any games of one split, batch by batch, from the
memory-mapped ``white_elo``/``black_elo`` columns opened once: nothing per game is held in
memory. Under ``none`` it has length 0 and the batches are built exactly as without it.

>>> p = Prefixes("elo", np.array([1523, -1]), np.array([900, 3400]))
>>> p.length, p([1, 0]).tolist()
(2, [[72, 127], [81, 103]])
>>> longest_game(1024), context_error("elo", context=1024, model_context=1024, key="k")
(1022, None)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from chesslm.data import conditioning, metadata


class Prefixes:
    """The ``length`` prefix tokens of each game of a split under a layout (0 for ``none``)."""

    def __init__(self, layout: str, white: Any = None, black: Any = None) -> None:
        self.layout = conditioning.check(layout)
        self.length = conditioning.PREFIX_LENGTH[layout]
        self.white, self.black = white, black

    @classmethod
    def of_cache(cls, cache: Any, split: str, layout: str) -> Prefixes:
        """The prefixes of a token cache's ``split`` (its Elo columns, memory-mapped).

        :raises ValueError: naming the column file if it is missing or not one Elo per game.
        """
        if conditioning.PREFIX_LENGTH[conditioning.check(layout)] == 0:
            return cls(layout)
        games = len(getattr(cache, split))
        columns = [game_column(Path(cache.directory) / split, name, games) for name in _ELO]
        return cls(layout, *columns)

    def unrated(self, chunk: int = 1 << 20) -> int:
        """The games with no rating for one side or both (the "unknown" bin), counted a chunk
        at a time (memory flat in the number of games); 0 without conditioning."""
        if self.length == 0:
            return 0
        return sum(
            int(np.count_nonzero((self.white[i : i + chunk] < 0) | (self.black[i : i + chunk] < 0)))
            for i in range(0, len(self.white), chunk)
        )

    def __call__(self, games: Any) -> np.ndarray:
        """(len(games), length) int64 prefix tokens of the games with these indices."""
        index = np.asarray(games, dtype=np.int64).reshape(-1)
        if self.length == 0:
            return np.zeros((len(index), 0), dtype=np.int64)
        return conditioning.prefixes(self.white[index], self.black[index])

    def repeated(self, game: int, n: int) -> Prefixes:
        """Game ``game``'s prefix for games 0..n-1 (the probe's copies of one game)."""
        if self.length == 0:
            return self
        return Prefixes(
            self.layout,
            np.full(n, int(self.white[game]), dtype=np.int64),
            np.full(n, int(self.black[game]), dtype=np.int64),
        )


_ELO = ("white_elo", "black_elo")


def game_column(prefix: Path, name: str, games: int) -> np.ndarray:
    """A per-game metadata column of a cache split (memory-mapped), one value per game
    (the rating prefix's Elos, the outcome head's results)."""
    path = metadata.column_path(prefix, name)
    try:
        column = np.load(path, mmap_mode="r")
    except OSError as error:
        raise ValueError(f"{path}: {error.strerror or error}; rebuild the token cache") from None
    if column.shape != (games,):
        raise ValueError(f"{path}: shape {column.shape}, want one value per game ({games},)")
    return column


def longest_game(context: int) -> int:
    """The most tokens a game of a dataset of context ``context`` has: 2 + 3 per ply."""
    return 2 + 3 * ((context - 2) // 3)


def context_error(layout: str, *, context: int, model_context: int, key: str) -> str | None:
    """One line if the longest game of a dataset of context ``context``, with the prefix of
    ``layout`` (the run key ``key``), has more inputs than the model context, else None."""
    extra = conditioning.PREFIX_LENGTH[conditioning.check(layout, key)]
    if extra == 0:
        return None
    longest = longest_game(context)
    inputs = longest + extra - 1
    if inputs <= model_context:
        return None
    return (
        f"{key} is {layout}: the dataset's longest game ({longest} tokens at context {context})"
        f" with its {extra}-token prefix has {inputs} inputs, more than the model context of"
        f" {model_context}; lower the dataset's context to at most {model_context - extra + 1}"
        " or use conditioning: none"
    )
