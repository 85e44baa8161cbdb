"""torch's threads for one scoring job (rule play, score, analyse): exactly the rule's
``threads:``, since torch would take every core, and on a shared machine oversubscribed threads
are many times slower."""

from __future__ import annotations

import logging
from typing import Any

import torch

logger = logging.getLogger(__name__)


def use_threads(threads: int) -> dict[str, Any]:
    """torch's intra-op threads: exactly ``threads``; one inter-op thread, as eager inference
    forks no inter-op work. Returns what is in force."""
    if threads < 1:
        raise ValueError(f"play threads: {threads} (must be at least 1)")
    torch.set_num_threads(threads)
    if torch.get_num_interop_threads() != 1:
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:  # settable once per process, before parallel work (tests)
            logger.info("torch inter-op threads stay %d", torch.get_num_interop_threads())
    host = {"torch_threads": torch.get_num_threads(),
            "torch_interop_threads": torch.get_num_interop_threads()}  # fmt: skip
    logger.info("torch threads: %d intra-op, %d inter-op", *host.values())
    return host
