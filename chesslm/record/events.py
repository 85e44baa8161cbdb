"""One JSON-lines writer for every stage's events; each record carries ``time_unix``."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


class EventLog:
    """Append-only ``events.jsonl``.

    Each record is written with one ``write`` of one line to a file opened in append mode and
    flushed at once, so concurrent or killed writers leave whole lines (a torn last line at
    worst).
    """

    def __init__(self, path: Path | str, *, enabled: bool = True) -> None:
        self.path = Path(path)
        self.enabled = enabled  # only the main rank writes

    def write(self, stage: str, **fields: Any) -> dict[str, Any]:
        record = {"time_unix": time.time(), "stage": stage, **fields}
        if self.enabled:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            line = json.dumps(record, default=str) + "\n"
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)
            logger.info("%s", line.rstrip())
        return record
