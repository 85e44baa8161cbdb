"""Progress lines of a probe or segment for the console: rank 0 logs one at most every
``EVERY_S`` seconds of work, and workflow/scripts/logged.sh copies every line holding
``MARK`` from the job's log to snakemake's console, so a segment of minutes is not silent.

>>> clock = iter([0.0, 4.0, 11.0, 12.0]).__next__
>>> p = Progress("segment 0 of at most 5", enabled=True, clock=clock, budget_s=60)
>>> p.update(step=1, epoch=1, loss_sum=8.0, targets=4, seconds=0.5)  # 4 s: too soon
>>> p.update(step=2, epoch=1, loss_sum=4.0, targets=4, seconds=0.5)  # 11 s: a line
'progress: segment 0 of at most 5: step 2, epoch 1, train NLL 1.500, 8 targets/s, 49 s left'
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)
EVERY_S = 10.0
MARK = "progress: "  # what logged.sh looks for (keep the two in step)


class Progress:
    """Accumulates updates between lines; ``update`` returns the line it logged, if any."""

    def __init__(
        self,
        what: str,
        *,
        enabled: bool,
        budget_s: float | None = None,
        every_s: float = EVERY_S,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.what, self.enabled, self.budget_s, self.every_s = what, enabled, budget_s, every_s
        self.clock = clock
        self.start = self.last = clock()
        self.loss_sum = self.targets = self.seconds = 0.0

    def update(
        self, *, step: int, epoch: int, loss_sum: float, targets: float, seconds: float
    ) -> str | None:
        if not self.enabled:
            return None
        self.loss_sum, self.targets = self.loss_sum + loss_sum, self.targets + targets
        self.seconds += seconds
        now = self.clock()
        if now - self.last < self.every_s:
            return None
        line = (
            f"step {step}, epoch {epoch}, train NLL {self.loss_sum / max(1.0, self.targets):.3f},"
            f" {self.targets / max(1e-9, self.seconds):,.0f} targets/s"
        )
        if self.budget_s is not None:
            line += f", {max(0.0, self.budget_s - (now - self.start)):.0f} s left"
        self.last, self.loss_sum, self.targets, self.seconds = now, 0.0, 0.0, 0.0
        return self.say(line)

    def say(self, text: str) -> str | None:
        """One progress line now (rank 0), whatever the interval."""
        if not self.enabled:
            return None
        line = f"{MARK}{self.what}: {text}"
        logger.info("%s", line)
        return line
