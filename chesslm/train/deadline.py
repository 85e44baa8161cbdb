"""The job-wide deadline: CHESS_JOB_DEADLINE holds unix seconds by which the whole job must end.

A *soft stop* is requested ``margin_s`` before it, so the trainer can still validate, write
``last.pt`` and its status file.

>>> Deadline(0.0).soft_stop()
True
"""

from __future__ import annotations

import math
import os
import time

ENV = "CHESS_JOB_DEADLINE"


def read_deadline(text: str) -> float:
    """Parse the deadline (unix seconds).

    :raises ValueError: if it is not a finite number.
    """
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{ENV} must be unix seconds, got {text!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"{ENV} must be finite, got {text!r}")
    return value


class Deadline:
    def __init__(self, value: float, *, margin_s: float = 30.0) -> None:
        self.value = value
        self.margin_s = margin_s

    def soft_stop(self) -> bool:
        return time.time() >= self.value - self.margin_s

    @classmethod
    def from_env(cls) -> Deadline | None:
        text = os.environ.get(ENV)
        return cls(read_deadline(text)) if text else None
