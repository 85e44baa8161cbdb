"""Progress lines of the play evaluation: ``what: done/total unit`` on the log, at the start,
then whenever ``every`` seconds have passed since the last line, and at the end."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

logger = logging.getLogger("chesslm.play")

EVERY_SECONDS = 10.0


class Progress:
    """Counts of one phase. ``update`` is called after each unit of work (a batch, a ply), so
    lines are at most ``every`` seconds plus one unit apart."""

    def __init__(
        self,
        what: str,
        total: int,
        unit: str,
        *,
        every: float = EVERY_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        done: int = 0,
    ) -> None:
        """``done``: units an earlier job finished (a resumed one starts from them)."""
        self.what, self.total, self.unit = what, total, unit
        self.every, self.clock = every, clock
        self.done = done
        self.last = clock()
        self._line("")

    def update(self, done: int, detail: str = "") -> None:
        self.done = done
        now = self.clock()
        if now - self.last >= self.every:
            self.last = now
            self._line(detail)

    def finish(self, detail: str = "") -> None:
        self._line(detail)

    def _line(self, detail: str) -> None:
        share = f" ({self.done / self.total:.0%})" if self.total else ""
        tail = f"; {detail}" if detail else ""
        logger.info("%s: %d/%d %s%s%s", self.what, self.done, self.total, self.unit, share, tail)
