"""A run's training state (its cursor and metrics) and its stop reasons.

``TrainState`` is what a checkpoint carries besides tensors (``state_dict()`` gives its
``cursor`` and ``metrics`` entries), what a segment's loop advances, and what status files and
``results.json`` report. ``terminal_status`` says whether it ends the run. No torch here:
chesslm.report reads ``TERMINAL`` without loading it.

>>> state = TrainState(epoch=2, step=30)
>>> state.terminal_status(max_updates=None, epochs=2)
'max_epochs'
>>> TrainState.from_state_dict(state.state_dict()) == state
True
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# a segment that stops for one of these ends the run; resuming it is a no-op with a receipt
TERMINAL = ("early_stop_5_checks", "max_updates", "max_epochs")
# a segment that stops for one of these leaves the run to the next segment
RESUMABLE = ("time_budget", "total_deadline_soft_stop", "segment_updates")
# the parts of a segment's wall time (its status's ``wall_split``); "other" is the rest
WALL_PARTS = ("startup", "training", "validation", "checkpointing", "other")
PATIENCE = 5  # validation checks without improvement before early stop
CURSOR = {"cursor": True}  # metadata of the fields that make the cursor


def terminal_status(
    *, bad_checks: int, step: int, epoch: int, max_updates: int | None, epochs: int
) -> str | None:
    """The terminal status a training state has reached, or None if it may go on.

    Patience comes first, then the update cap, then the epoch schedule; a time-budget or
    deadline pause is never terminal.
    """
    if bad_checks >= PATIENCE:
        return "early_stop_5_checks"
    if max_updates is not None and step >= max_updates:
        return "max_updates"
    if epoch >= epochs:
        return "max_epochs"
    return None


@dataclass
class TrainState:
    """Where a run is in its batch plan (the cursor) and what it has measured so far."""

    epoch: int = field(default=0, metadata=CURSOR)  # epochs completed
    next_group: int = field(default=0, metadata=CURSOR)  # next update of this epoch's plan
    step: int = field(default=0, metadata=CURSOR)  # optimizer updates done
    history: list[dict[str, Any]] = field(default_factory=list)  # one entry per validation
    best_nll: float = math.inf
    best_step: int | None = None
    bad_checks: int = 0  # validations since the last improvement
    initial_validation: dict[str, Any] | None = None
    totals: dict[str, float] = field(default_factory=dict)  # summed update numbers
    work_seconds: float = 0.0
    segments: int = 0  # segments that trained
    test_evaluated: bool = False

    def cursor(self) -> dict[str, int]:
        """The position in the batch plan: ``{"epoch", "next_group", "step"}``."""
        return {f.name: getattr(self, f.name) for f in _fields(cursor=True)}

    def metrics(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in _fields(cursor=False)}

    def state_dict(self) -> dict[str, Any]:
        """``{"cursor": ..., "metrics": ...}``: plain containers, a copy (a checkpoint's
        entries)."""
        return copy.deepcopy({"cursor": self.cursor(), "metrics": self.metrics()})

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Take the ``cursor`` and ``metrics`` of ``state`` (a checkpoint payload will do);
        a metric it lacks keeps its default.

        :raises ValueError: naming any entry this state does not know.
        """
        values = {**state["cursor"], **state["metrics"]}
        known = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"training state: unknown entries {', '.join(unknown)}")
        fresh = TrainState()
        for name in known:
            setattr(self, name, values.get(name, getattr(fresh, name)))

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> TrainState:
        out = cls()
        out.load_state_dict(state)
        return out

    def advance(self, *, epoch: int, next_group: int) -> None:
        """One optimizer update done: it was update ``next_group - 1`` of ``epoch``'s plan."""
        self.epoch, self.next_group, self.step = epoch, next_group, self.step + 1

    def next_epoch(self) -> None:
        self.epoch, self.next_group = self.epoch + 1, 0

    def terminal_status(self, *, max_updates: int | None, epochs: int) -> str | None:
        return terminal_status(
            bad_checks=self.bad_checks,
            step=self.step,
            epoch=self.epoch,
            max_updates=max_updates,
            epochs=epochs,
        )


def _fields(*, cursor: bool) -> list[dataclasses.Field[Any]]:
    return [f for f in dataclasses.fields(TrainState) if bool(f.metadata.get("cursor")) == cursor]
