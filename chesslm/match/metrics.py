"""The move-matching metrics, one row each: the one table every reader and writer iterates
(move-matching's tables and their bootstrap, the counterfactual tables, the records, the
report, the comparison's tables and figures, the model card, play's figure).

A metric is a mean over positions of a per-position value computed from two things every
scorer keeps: the played move's ``rank`` among the legal moves (0 = the model's most likely)
and its ``nll`` (nats). So adding one is one row here; nothing stored changes (rule score's
``positions.npz`` keeps rank and nll, not the metrics).

>>> [m.name for m in METRICS]
['top1', 'top3', 'top5', 'nll']
>>> by_name("top5").format(0.5)
'50.0%'
>>> import numpy as np
>>> values(np.array([0, 2, 4, 7]), np.array([0.1, 0.2, 0.3, 0.4]))["top3"].tolist()
[1.0, 1.0, 0.0, 0.0]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the table itself is read without numpy (the report reads records only)
    import numpy as np


@dataclass(frozen=True)
class Metric:
    """One metric: its column ``name``, a short ``label`` for tables and axes, its ``kind``
    (``share``: a fraction shown in percent, higher is better; ``nats``: lower is better), a
    ``caption`` saying what it is, and its ``per_position`` value from (rank, nll)."""

    name: str
    label: str
    kind: str
    caption: str
    per_position: Callable[[np.ndarray, np.ndarray], np.ndarray]

    def format(self, value: float | None) -> str:
        if value is None:
            return "n/a"
        return f"{value:.1%}" if self.kind == "share" else f"{value:.3f}"

    @property
    def higher_is_better(self) -> bool:
        return self.kind == "share"


def _top(k: int) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    return lambda rank, nll: rank < k


METRICS: tuple[Metric, ...] = (
    Metric("top1", "top-1", "share", "the share of positions where the model's most likely"
           " legal move is the move played (Maia's move-matching accuracy)", _top(1)),
    Metric("top3", "top-3", "share", "the share of positions where the move played is among"
           " the model's three most likely legal moves", _top(3)),
    Metric("top5", "top-5", "share", "the share of positions where the move played is among"
           " the model's five most likely legal moves (as ChessMimic reports)", _top(5)),
    Metric("nll", "NLL (nats/move)", "nats", "the mean negative log-likelihood of the move"
           " played under the model, over the legal moves", lambda rank, nll: nll),
)  # fmt: skip
NAMES: tuple[str, ...] = tuple(m.name for m in METRICS)
SHARES: tuple[Metric, ...] = tuple(m for m in METRICS if m.kind == "share")


def by_name(name: str) -> Metric:
    """The metric called ``name`` (KeyError naming the known ones)."""
    for metric in METRICS:
        if metric.name == name:
            return metric
    raise KeyError(f"no metric {name!r} (known: {', '.join(NAMES)})")


def values(rank: np.ndarray, nll: np.ndarray) -> dict[str, np.ndarray]:
    """Every metric's per-position value (float64), in table order."""
    import numpy as np

    return {m.name: np.asarray(m.per_position(rank, nll), dtype=np.float64) for m in METRICS}
