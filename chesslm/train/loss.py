"""The training loss: summed token cross-entropy of one microbatch (and of its side heads'
targets), and the target that counts for nothing (``IGNORE``: padding, a dummy rank's rows)."""

from __future__ import annotations

from collections.abc import Mapping
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


HEADS = ("outcome", "think_time")  # the side heads, in the order the model returns them


def loss_sums(
    net: torch.nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    heads: Mapping[str, torch.Tensor],
    device: torch.device | str,
    autocast_cache: bool = True,
    **forward: Any,
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """(summed move cross-entropy, [summed cross-entropy of each head in ``heads``]), FP32,
    of one microbatch: ``heads`` maps a side head's name (``HEADS``) to its targets (IGNORE:
    none), in ``HEADS``' order; ``forward``: the model's other inputs (``pos``, ``mask``,
    ``time``)."""
    if list(heads) != [h for h in HEADS if h in heads]:
        raise ValueError(f"heads {list(heads)} are not in the order {HEADS}")
    with gpt.autocast(device, cache=autocast_cache):
        logits, *extra = net(x, **{name: True for name in heads}, **forward)
    moves = F.cross_entropy(
        logits.float().view(-1, logits.size(-1)), y.view(-1), ignore_index=IGNORE, reduction="sum"
    )
    sums = [
        F.cross_entropy(
            out.float().view(-1, out.size(-1)), t.view(-1), ignore_index=IGNORE, reduction="sum"
        )
        for out, t in zip(extra, heads.values(), strict=True)
    ]
    return moves, sums
