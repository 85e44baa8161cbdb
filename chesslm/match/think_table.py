"""The time table (issue 64 item 5): a baseline of the think-time head with no model at all,
the mean ln(1 + seconds) of the train split's timed moves in each cell of (time-control class,
10-ply bucket): Lichess's speed class of the game (``metadata.SPEEDS``, -1 unreadable) and the
ply // 10. A position's prediction is its cell's mean; a cell of fewer than ``MIN_CELL`` train
moves falls back to its ply bucket over every class, then to the mean of every move. The mean
of the log, not the median: it is the least-squares fit on the scale Pearson's r is read on.

Why it is a baseline: on held-out Lichess games a lookup of time control x ply bucket reached
r 0.708 against the head's 0.656 (issue 64), so think time is largely a ply curve per time
control, and a head that does not beat this table has learned little else.

>>> t = TimeTable(min_cell=2)
>>> t.add(np.array([2, 2, 2]), np.array([0, 5, 12]), np.array([1.0, 3.0, 5.0]))
>>> t.predict(np.array([2, 2, 3]), np.array([9, 15, 1])).tolist()  # cell; every move; bucket
[2.0, 3.0, 2.0]
"""

from __future__ import annotations

import numpy as np

PLY_STEP = 10  # plies per bucket
MIN_CELL = 20  # train moves a cell needs to stand on its own (think_time's MIN_CELL)


def cell_keys(speed: np.ndarray, ply: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each position's (class x bucket) key and its bucket alone."""
    bucket = np.asarray(ply, np.int64) // PLY_STEP
    return (np.asarray(speed, np.int64) + 1) * 1_000_000 + bucket, bucket


class TimeTable:
    """Sums and counts of ln(1 + seconds) per cell, added a block of moves at a time."""

    def __init__(self, min_cell: int = MIN_CELL) -> None:
        self.min_cell = min_cell
        self.cells: dict[int, list[float]] = {}  # key -> [sum, count]
        self.buckets: dict[int, list[float]] = {}
        self.total = [0.0, 0.0]

    def add(self, speed: np.ndarray, ply: np.ndarray, log_seconds: np.ndarray) -> None:
        """Count moves (their class, ply and ln(1 + seconds taken))."""
        y = np.asarray(log_seconds, np.float64)
        for table, keys in zip((self.cells, self.buckets), cell_keys(speed, ply), strict=True):
            unique, inverse = np.unique(keys, return_inverse=True)
            sums = np.bincount(inverse, weights=y, minlength=len(unique))
            counts = np.bincount(inverse, minlength=len(unique))
            for key, s, n in zip(unique.tolist(), sums, counts, strict=True):
                cell = table.setdefault(key, [0.0, 0.0])
                cell[0] += float(s)
                cell[1] += float(n)
        self.total[0] += float(y.sum())
        self.total[1] += len(y)

    def means(self) -> dict[tuple[int, int], tuple[float, int]]:
        """(speed index, bucket) -> (mean ln(1 + s), moves) of every cell seen."""
        return {(k // 1_000_000 - 1, k % 1_000_000): (s / n, int(n))
                for k, (s, n) in self.cells.items()}  # fmt: skip

    def predict(self, speed: np.ndarray, ply: np.ndarray) -> np.ndarray:
        """Each position's predicted ln(1 + seconds): the finest level with enough moves."""
        overall = self.total[0] / self.total[1] if self.total[1] else 0.0
        out = np.full(len(np.asarray(ply)), overall)
        cell_key, bucket = cell_keys(speed, ply)
        for table, keys in ((self.buckets, bucket), (self.cells, cell_key)):
            for i, key in enumerate(keys.tolist()):  # the coarser level first, the finer wins
                cell = table.get(key)
                if cell is not None and cell[1] >= self.min_cell:
                    out[i] = cell[0] / cell[1]
        return out
