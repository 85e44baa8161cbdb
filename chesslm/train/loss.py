"""The training loss: summed token cross-entropy of one microbatch, and the target that
counts for nothing (``IGNORE``: padding, a dummy rank's rows)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from chesslm.model import gpt

IGNORE = -100  # cross_entropy's ignore_index: padding and dummy targets


def loss_sum(
    net: torch.nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    device: torch.device | str,
    autocast_cache: bool = True,
    **forward: Any,
) -> torch.Tensor:
    """Summed token cross-entropy (FP32) of one microbatch; padding targets are ignored."""
    with gpt.autocast(device, cache=autocast_cache):
        logits = net(x, **forward)
    return F.cross_entropy(
        logits.float().view(-1, logits.size(-1)),
        y.view(-1),
        ignore_index=IGNORE,
        reduction="sum",
    )
