"""The time inputs and the think-time head of a run's batches (``runs.NAME.time_inputs``,
``runs.NAME.think_time``), read from the token cache's clock and time-control columns.

What they are, where they sit and the bins: ``chesslm.model.human_time``; the clock rule:
``chesslm.data.clocks``. Both sit at a game's *positions*, the inputs ``t`` with ``t - P`` a
multiple of 3 (``P``: the rating prefix), as the outcome head's targets
(``chesslm.train.outcome``): ply k's at ``P + 3k``, k = 0..n.

**Inputs.** (B, T, 4) row indices beside the tokens: a position's four time rows, row 0
elsewhere (the prefix, the moves' other tokens, padding, dummy rows).

**The loss.** The think-time cross-entropy summed over the positions whose time spent is
known, divided by the update's think-time targets (all ranks, counted on the host) and
multiplied by ``think_time_weight``, added to the move loss (and the outcome loss):
mean move NLL + weight x mean think-time NLL.

``GameTimes`` reads a split's columns memory-mapped and builds a game's rows and targets when
a batch asks for them: nothing per game is held.

>>> times = GameTimes(np.array([60.0, 60, 57, 52]), np.array([0, 4]), np.array([60]),
...                   np.array([0]), weight=0.5)
>>> times.targets([np.zeros(14)], [0], (1, 14), prefix=0).tolist()
[[-100, -100, -100, -100, -100, -100, 3, -100, -100, 7, -100, -100, -100, -100]]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from chesslm.data import metadata
from chesslm.model import human_time
from chesslm.train.loss import IGNORE
from chesslm.train.prefix import game_column

BASELINE = (
    "each bin's share of the train split's think-time targets, add-one smoothed: the best"
    " prediction knowing nothing of the game"
)


class GameTimes:
    """The per-ply clocks and the time controls of a split's games (memory-mapped), and the
    think-time loss weight. ``inputs``: the batches carry the time rows; ``think``: they carry
    the think-time targets."""

    def __init__(
        self,
        clock: Any,
        ply_offsets: Any,
        base: Any,
        increment: Any,
        *,
        weight: float = 0.0,
        inputs: bool = True,
        think: bool = True,
        alias: np.ndarray | None = None,
    ) -> None:
        self.clock, self.ply_offsets = clock, ply_offsets
        self.base, self.increment = base, increment
        self.weight, self.inputs, self.think = weight, inputs, think
        self.alias = alias  # the probe's copies: game i is game alias[i]
        self._counts: np.ndarray | None = None  # game_counts(), once asked for

    @classmethod
    def of_cache(cls, cache: Any, split: str, **kw: Any) -> GameTimes:
        """A token cache's ``split`` (``kw``: ``GameTimes``'s keywords).

        :raises ValueError: naming a column file that is missing or misshapen."""
        games = len(getattr(cache, split))
        prefix = Path(cache.directory) / split
        plies = metadata.ply_offsets(np.asarray(getattr(cache, split).offsets))
        clock = np.load(metadata.column_path(prefix, "clock"), mmap_mode="r")
        if clock.shape != (int(plies[-1]),):
            path = metadata.column_path(prefix, "clock")
            raise ValueError(f"{path}: shape {clock.shape}, want one value per ply ({plies[-1]},)")
        base = game_column(prefix, "base_seconds", games)
        increment = game_column(prefix, "increment_seconds", games)
        return cls(clock, plies, base, increment, **kw)

    def repeated(self, game: int, n: int) -> GameTimes:
        """Game ``game``'s times for games 0..n-1 (the probe's copies of one game)."""
        alias = np.full(n, self._source(game), dtype=np.int64)
        return GameTimes(
            self.clock, self.ply_offsets, self.base, self.increment, weight=self.weight,
            inputs=self.inputs, think=self.think, alias=alias,
        )  # fmt: skip

    def _source(self, i: int) -> int:
        return int(i) if self.alias is None else int(self.alias[int(i)])

    def game_clock(self, i: int) -> tuple[np.ndarray, int, int]:
        """Game ``i``'s per-ply readings and its time control (base, increment)."""
        g = self._source(i)
        clock = self.clock[self.ply_offsets[g] : self.ply_offsets[g + 1]]
        return np.asarray(clock), int(self.base[g]), int(self.increment[g])

    def positions(self, index: Any) -> human_time.Positions:
        """The time rows and think-time targets at every position of games ``index``, back
        to back (``human_time.positions_of``), gathered and computed at once."""
        g = np.asarray(index, dtype=np.int64)
        g = g if self.alias is None else self.alias[g]
        starts, ends = self.ply_offsets[g], self.ply_offsets[g + 1]
        plies = ends - starts
        offsets = np.zeros(len(g) + 1, dtype=np.int64)
        np.cumsum(plies, out=offsets[1:])
        at = np.arange(int(offsets[-1])) + np.repeat(starts - offsets[:-1], plies)
        clock = np.asarray(self.clock[at]) if len(at) else np.zeros(0, np.float32)
        return human_time.positions_of(clock, offsets, self.base[g], self.increment[g])

    def features(self, i: int) -> np.ndarray:
        """(plies + 1, 4) time rows of game ``i`` at its positions."""
        return self.positions([i]).rows

    def think_targets(self, i: int) -> np.ndarray:
        """(plies + 1,) think-time bins of game ``i`` at its positions (-1: none)."""
        return self.positions([i]).targets

    def game_counts(self) -> np.ndarray:
        """Think-time targets of every game of the split (int32), computed once, a block of
        games at a time: counting a group's targets then reads no clock."""
        if self._counts is None:
            g = len(self.ply_offsets) - 1
            self._counts = np.zeros(g, dtype=np.int32)
            split = GameTimes(**self._parts(alias=None))  # every game, not the probe's copies
            for first in range(0, g, human_time.BLOCK_GAMES):
                index = np.arange(first, min(first + human_time.BLOCK_GAMES, g))
                p = split.positions(index)
                known = np.add.reduceat(p.targets >= 0, p.offsets[:-1]) if len(index) else []
                self._counts[index] = known
        return self._counts

    def count(self, games: Any, items: Any, packed: bool) -> int:
        """Think-time targets of batch items (game indices, or packed rows of them)."""
        index = [int(i) for item in items for i in item] if packed else [int(i) for i in items]
        if not index:
            return 0
        source = np.asarray(index) if self.alias is None else self.alias[index]
        return int(self.game_counts()[source].sum(dtype=np.int64))

    def microbatch(
        self, games: Any, part: list[Any], shape: tuple[int, int], *, prefix: int,
        packed: bool = False,
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, int]:  # fmt: skip
        """One microbatch's (B, T, 4) time rows (if ``inputs``), (B, T) think-time targets
        (if ``think``; IGNORE elsewhere) and their count, from one computation: padded
        (``part``: game indices, row r game r, its BOS at ``prefix``) or, with ``packed``,
        packed rows (games back to back, each taking its prefix and length - 1 inputs)."""
        rows = part if packed else [[i] for i in part]
        index = [int(i) for row in rows for i in row]
        p = self.positions(index)
        at = _places(games, rows, index, p, prefix)
        time = targets = None
        if self.inputs:
            time = torch.full((*shape, len(human_time.FEATURES)), human_time.NONE, dtype=torch.long)
            time[at] = torch.from_numpy(p.rows)
        known = p.targets >= 0
        if self.think:
            targets = torch.full(shape, IGNORE, dtype=torch.long)
            targets[at] = torch.from_numpy(np.where(known, p.targets, IGNORE))
        return time, targets, int(known.sum())

    def rows(self, games: Any, part: list[Any], shape: tuple[int, int], **kw: Any) -> Any:
        """One microbatch's (B, T, 4) time rows (``microbatch``'s arguments)."""
        return GameTimes(**self._parts(inputs=True)).microbatch(games, part, shape, **kw)[0]

    def targets(self, games: Any, part: list[Any], shape: tuple[int, int], **kw: Any) -> Any:
        """One microbatch's (B, T) think-time targets (``microbatch``'s arguments)."""
        return GameTimes(**self._parts(think=True)).microbatch(games, part, shape, **kw)[1]

    def _parts(self, **kw: Any) -> dict[str, Any]:
        keys = ("clock", "ply_offsets", "base", "increment", "alias")
        return {k: getattr(self, k) for k in keys} | {"inputs": False, "think": False} | kw


def _places(
    games: Any, rows: list[list[int]], index: list[int], p: human_time.Positions, prefix: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(row, column) of every position of games ``index`` (laid out as ``p``) in the
    microbatch whose rows hold ``rows`` (each game taking its prefix and length - 1 inputs)."""
    if not index:
        return torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long)
    lengths = np.fromiter((len(games[i]) for i in index), dtype=np.int64, count=len(index))
    row_of = np.repeat(np.arange(len(rows)), [len(row) for row in rows])
    taken = lengths - 1 + prefix
    ends = np.cumsum(taken)
    row_start = np.concatenate([[0], ends])[np.searchsorted(row_of, np.arange(len(rows)))]
    first = ends - taken - row_start[row_of] + prefix  # each game's BOS in its row
    n = np.diff(p.offsets)  # its positions: plies + 1
    ply = np.arange(len(p.targets)) - np.repeat(p.offsets[:-1], n)
    column = np.repeat(first, n) + 3 * ply
    return torch.from_numpy(np.repeat(row_of, n)), torch.from_numpy(column)


# ----------------------------------------------------------------------------- validation


class ValidationThinkTimes:
    """The validation games' think-time targets, and the frequency baseline (``BASELINE``)
    fitted on the train split's and scored on these."""

    def __init__(self, cache: Any, device: torch.device) -> None:
        self.times = GameTimes.of_cache(cache, "validation")
        self.games, self.device = cache.validation, device
        counts, _ = _bin_counts(GameTimes.of_cache(cache, "train"))
        self.baseline = (counts + 1.0) / (counts + 1.0).sum()
        here, self.clocked_games = _bin_counts(self.times)
        total = int(here.sum())
        self.baseline_nll = -(here * np.log(self.baseline)).sum() / total if total else None

    def add(self, sums: dict[str, torch.Tensor], index: list[int], logits: Any) -> None:
        """Add one batch's think-time NLL, targets and argmax hits (games ``index``;
        ``logits``: (B, T, BINS) from BOS on) to ``sums``."""
        t = self.times.targets(self.games, index, tuple(logits.shape[:2]), prefix=0)
        t = t.to(self.device)
        valid = t.ne(IGNORE)
        for key in ("think_nll_sum", "think_targets", "think_correct"):
            sums.setdefault(key, torch.zeros((), dtype=torch.float64, device=self.device))
        sums["think_nll_sum"] += F.cross_entropy(
            logits.reshape(-1, logits.size(-1)), t.view(-1), ignore_index=IGNORE, reduction="sum"
        ).double()
        sums["think_targets"] += valid.sum()
        sums["think_correct"] += (valid & logits.argmax(-1).eq(t)).sum()

    def result(self, s: dict[str, float]) -> dict[str, Any]:
        """The validation record's ``think_time`` entry from the read-back sums."""
        targets = int(s.get("think_targets", 0))
        return {
            "nll": s["think_nll_sum"] / targets if targets else None,
            "baseline_nll": None if self.baseline_nll is None else float(self.baseline_nll),
            "accuracy": s["think_correct"] / targets if targets else None,
            "targets": targets,
            "games": self.clocked_games,
            "bins": [human_time.bin_label(k) for k in range(human_time.BINS)],
            "baseline": BASELINE,
        }


def _bin_counts(times: GameTimes) -> tuple[np.ndarray, int]:
    """(BINS,) think-time targets by bin over a split's games, and the games with one."""
    return human_time.split_counts(times.clock, times.ply_offsets, times.base, times.increment)
