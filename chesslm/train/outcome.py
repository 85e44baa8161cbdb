"""The outcome head's targets, loss and validation (``runs.NAME.outcome``).

**Where it reads.** At every *position* of a game: BOS and each move's last token (its
promotion slot), i.e. each input after which the next move's source square (or EOS) is
predicted. That hidden state has seen the whole game up to the position and nothing of the
move about to be played, and the side to move is its ply's (White at even plies). These are
the inputs ``t`` with ``t - P`` a multiple of 3 (``P``: the rating prefix), validation's
phase "source" and "eos" positions; a game of n plies has n + 1 of them, the last one after
its final move. (A move's source or destination token would see half a move of the future.)

**What it predicts.** The game's result (``metadata.RESULTS``: 1-0, 0-1, 1/2-1/2) from the side
to move there: ``OUTCOME_CLASSES`` win, draw, loss. A game whose result is unknown (``*``:
the column's -1) has IGNORE at every position: it adds no outcome target (validation counts
such games).

**The loss.** Cross-entropy summed over the outcome targets (``chesslm.train.loss.loss_sums``),
divided by the outcome targets of the whole update (all ranks, counted on the host like the
move targets) and multiplied by ``outcome_weight``, added to the move loss: mean move NLL +
weight x mean outcome NLL.

The classes, positions and the frequency baseline's counts are ``chesslm.model.outcome``'s.

>>> padded_targets([0, -1], [5, 5], (2, 5), prefix=0).tolist()
[[0, -100, -100, 2, -100], [-100, -100, -100, -100, -100]]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from chesslm.model.outcome import positions, shares_record, side_counts, side_shares, targets
from chesslm.model.presets import OUTCOME_CLASSES
from chesslm.train.loss import IGNORE
from chesslm.train.prefix import game_column

BASELINE = (
    "each class's share of the train split's outcome targets (positions of games with a known"
    " result) by side to move, add-one smoothed: the best prediction knowing only who moves"
)


def classes(result: int, n: int) -> torch.Tensor:
    """The classes at a game's positions 0..n-1 (``result`` known), as a tensor."""
    return torch.from_numpy(targets(np.full(n, result), np.arange(n)))


def padded_targets(
    results: Any, lengths: Any, shape: tuple[int, int], *, prefix: int
) -> torch.Tensor:
    """(B, T) outcome targets of right-padded games (``batching.collate``'s layout; row r is
    game r, its BOS at ``prefix``), IGNORE elsewhere; on the host."""
    o = torch.full(shape, IGNORE, dtype=torch.long)
    for row, (result, length) in enumerate(zip(results, lengths, strict=True)):
        if result >= 0:
            n = positions(int(length))
            o[row, prefix : prefix + 3 * n : 3] = classes(int(result), n)
    return o


def packed_targets(
    results: Any, lengths: Any, shape: tuple[int, int], *, prefix: int
) -> torch.Tensor:
    """(rows, row_tokens) outcome targets of packed rows (``batching.collate_packed``'s
    layout: games back to back, each taking its prefix and length - 1 inputs);
    ``results[r]``, ``lengths[r]``: those of row r's games."""
    o = torch.full(shape, IGNORE, dtype=torch.long)
    for r, (row_results, row_lengths) in enumerate(zip(results, lengths, strict=True)):
        at = 0
        for result, length in zip(row_results, row_lengths, strict=True):
            if result >= 0:
                n = positions(int(length))
                start = at + prefix
                o[r, start : start + 3 * n : 3] = classes(int(result), n)
            at += int(length) - 1 + prefix
    return o


class Outcomes:
    """The results of a split's games (memory-mapped ``result`` column) and the loss weight."""

    def __init__(self, results: Any, weight: float = 0.0) -> None:
        self.results, self.weight = results, weight

    @classmethod
    def of_cache(cls, cache: Any, split: str, weight: float = 0.0) -> Outcomes:
        """:raises ValueError: naming the column file if it is missing or misshapen."""
        games = len(getattr(cache, split))
        return cls(game_column(Path(cache.directory) / split, "result", games), weight)

    def __call__(self, games: Any) -> np.ndarray:
        """int64 results (index into RESULTS, -1 unknown) of the games with these indices."""
        return np.asarray(self.results[np.asarray(games, dtype=np.int64).reshape(-1)], np.int64)

    def repeated(self, game: int, n: int) -> Outcomes:
        """Game ``game``'s result for games 0..n-1 (the probe's copies of one game)."""
        return Outcomes(np.full(n, int(self.results[game]), dtype=np.int64), self.weight)

    def count(self, games: Any, items: Any, packed: bool) -> int:
        """Outcome targets of batch items (game indices, or packed rows of them)."""
        index = [int(i) for item in items for i in item] if packed else [int(i) for i in items]
        if not index:
            return 0
        lengths = np.array([len(games[i]) for i in index], dtype=np.int64)
        return int((positions(lengths) * (self(index) >= 0)).sum())

    def targets(self, games: Any, part: list[Any], shape: tuple[int, int], **kw: Any) -> Any:
        """One microbatch's outcome targets, padded (``part``: game indices) or, with
        ``packed=True``, packed rows; ``prefix``: the rating prefix's length."""
        prefix = kw["prefix"]
        if kw.get("packed"):
            results = [self(row) for row in part]
            lengths = [[len(games[i]) for i in row] for row in part]
            return packed_targets(results, lengths, shape, prefix=prefix)
        lengths = [len(games[i]) for i in part]
        return padded_targets(self(part), lengths, shape, prefix=prefix)


# ----------------------------------------------------------------------------- validation


class ValidationOutcomes:
    """The validation games' results, and the frequency baseline (``BASELINE``) fitted on
    the train split and scored on these games' outcome targets."""

    def __init__(self, cache: Any, device: torch.device) -> None:
        self.outcomes = Outcomes.of_cache(cache, "validation")
        self.device = device
        results = self.outcomes(np.arange(len(cache.validation)))
        lengths = np.diff(np.asarray(cache.validation.offsets, dtype=np.int64))
        train = Outcomes.of_cache(cache, "train")(np.arange(len(cache.train)))
        train_lengths = np.diff(np.asarray(cache.train.offsets, dtype=np.int64))
        self.baseline = side_shares(side_counts(train_lengths, train))  # (side, class)
        counts = side_counts(lengths, results)
        total = int(counts.sum())
        self.baseline_nll = -(counts * np.log(self.baseline)).sum() / total if total else None
        self.known_games = int((results >= 0).sum())
        self.unknown_games = int((results < 0).sum())

    def add(
        self, sums: dict[str, torch.Tensor], index: list[int], lengths: list[int], logits: Any
    ) -> None:
        """Add one batch's outcome NLL, targets and argmax hits (``logits``: (B, T, 3) from
        BOS on) to ``sums``."""
        o = padded_targets(self.outcomes(index), lengths, tuple(logits.shape[:2]), prefix=0)
        o = o.to(self.device)
        valid = o.ne(IGNORE)
        for key in ("outcome_nll_sum", "outcome_targets", "outcome_correct"):
            sums.setdefault(key, torch.zeros((), dtype=torch.float64, device=self.device))
        sums["outcome_nll_sum"] += F.cross_entropy(
            logits.reshape(-1, logits.size(-1)), o.view(-1), ignore_index=IGNORE, reduction="sum"
        ).double()
        sums["outcome_targets"] += valid.sum()
        sums["outcome_correct"] += (valid & logits.argmax(-1).eq(o)).sum()

    def result(self, s: dict[str, float]) -> dict[str, Any]:
        """The validation record's ``outcome`` entry from the read-back sums."""
        targets = int(s.get("outcome_targets", 0))
        return {
            "nll": s["outcome_nll_sum"] / targets if targets else None,
            "baseline_nll": None if self.baseline_nll is None else float(self.baseline_nll),
            "accuracy": s["outcome_correct"] / targets if targets else None,
            "targets": targets,
            "games": self.known_games,
            "unknown_games": self.unknown_games,
            "classes": list(OUTCOME_CLASSES),
            "baseline": BASELINE,
            "baseline_probabilities": shares_record(self.baseline),
        }
