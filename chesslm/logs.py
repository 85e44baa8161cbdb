"""Logging for pipeline steps: progress to the rule's log file and to stderr, errors as one line."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def step(name: str, log_path: str | Path | None) -> Iterator[logging.Logger]:
    """Run a pipeline step: set up logging, and turn expected failures into one line.

    A ``ValueError`` (bad input or config, with a message naming the file or key) or an
    ``OSError`` ends the process with exit status 1 and the message alone, no traceback.
    """
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_path:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(log_path, mode="w"))
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        handlers=handlers,
        force=True,
    )
    logger = logging.getLogger(f"chesslm.{name}")
    try:
        yield logger
    except (ValueError, OSError) as error:
        logger.error("%s failed: %s", name, error)
        logging.shutdown()
        raise SystemExit(1) from None
