"""Which games go into which optimizer update, and one update's forward/backward passes.

An epoch is a deterministic function of ``(seed, epoch)``: the games are shuffled, cut into
large chunks, sorted by length inside each chunk (so a microbatch wastes little padding) and
cut into *global batches* of ``micro * world`` whole games; the global batches are shuffled
again. Rank ``r`` takes games ``[r*micro, (r+1)*micro)`` of a global batch. ``accum`` global
batches make one *group*, i.e. one optimizer update. The position in this plan (epoch, next
group, step) is all a resume needs, so no data-loader state is saved.

>>> plan = groups(global_batches([5, 3, 9, 4, 7], epoch=0, seed=1, micro=2, world=1), accum=2)
>>> sorted(i for group in plan for batch in group for i in batch)
[0, 1, 2, 3, 4]
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from chesslm import distributed, model, tokens

IGNORE = -100  # cross_entropy's ignore_index: padding and dummy targets
CHUNK_BATCHES = 64  # global batches per length bucket: large enough to group similar lengths


def global_batches(
    lengths: Sequence[int], *, epoch: int, seed: int, micro: int, world: int
) -> list[list[int]]:
    """Game indices of every global batch of an epoch; only the very last may be partial."""
    rng = random.Random(f"chesslm-batches:{seed}:{epoch}")  # str seeds hash stably (sha512)
    order = list(range(len(lengths)))
    rng.shuffle(order)
    size = micro * world
    chunk = size * CHUNK_BATCHES
    batches: list[list[int]] = []
    for start in range(0, len(order), chunk):
        # stable sort: ties keep the shuffled order, so the plan depends on (seed, epoch) only
        bucket = sorted(order[start : start + chunk], key=lambda i: -int(lengths[i]))
        batches.extend(bucket[i : i + size] for i in range(0, len(bucket), size))
    partial = batches.pop() if batches and len(batches[-1]) < size else None
    rng.shuffle(batches)
    if partial is not None:
        batches.append(partial)  # the one partial batch goes last, where a dummy rank is cheap
    return batches


def groups(batches: list[list[int]], accum: int) -> list[list[list[int]]]:
    """Accumulation groups of ``accum`` global batches (the last may have fewer)."""
    return [batches[i : i + accum] for i in range(0, len(batches), accum)]


def collate(
    games: Sequence[np.ndarray], device: torch.device | str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded inputs (PAD) and targets (IGNORE), each (B, T) with T = longest game - 1."""
    if not games:  # a rank with no games in a partial global batch: one dummy row
        x = torch.full((1, 1), tokens.PAD, dtype=torch.long)
        return x.to(device), torch.full((1, 1), IGNORE, dtype=torch.long).to(device)
    T = max(len(g) for g in games) - 1
    x = torch.full((len(games), T), tokens.PAD, dtype=torch.long)
    y = torch.full((len(games), T), IGNORE, dtype=torch.long)
    for row, game in enumerate(games):
        g = torch.from_numpy(np.asarray(game, dtype=np.int64))
        x[row, : len(g) - 1] = g[:-1]
        y[row, : len(g) - 1] = g[1:]
    return x.to(device), y.to(device)


def backward_group(
    net: torch.nn.Module,
    games: Any,
    group: list[list[int]],
    *,
    micro: int,
    rank: int,
    world: int,
    device: torch.device | str,
) -> dict[str, float]:
    """Forward and backward every microbatch of one group on this rank; gradients accumulate.

    The loss is the sum of token cross-entropies divided by the number of valid targets of the
    whole group on all ranks, so every target weighs the same however games fall on ranks.
    DDP averages gradients over ranks, hence the factor ``world``. A rank with no games runs a
    zero-target dummy so that its DDP all-reduce still matches the other ranks'.
    Returns the group's loss_sum, valid_targets and padded_tokens summed over ranks.
    """
    local = [[games[i] for i in batch[rank * micro : (rank + 1) * micro]] for batch in group]
    valid = sum(len(g) - 1 for part in local for g in part)
    total = distributed.all_reduce_sum(
        torch.tensor([float(valid)], dtype=torch.float64, device=device)
    )
    scale = world / total.item()
    stats = torch.zeros(3, dtype=torch.float64, device=device)
    for k, part in enumerate(local):
        x, y = collate(part, device)
        last = k == len(local) - 1
        # gradients are all-reduced only on the group's last microbatch
        sync = contextlib.nullcontext() if last or not hasattr(net, "no_sync") else net.no_sync()
        with sync:
            with model.autocast(device):
                logits = net(x)
            loss_sum = F.cross_entropy(
                logits.float().view(-1, logits.size(-1)),
                y.view(-1),
                ignore_index=IGNORE,
                reduction="sum",
            )
            (loss_sum * scale).backward()
        stats[0] += loss_sum.detach().double()
        stats[1] += float(y.ne(IGNORE).sum())
        stats[2] += float(y.numel()) if part else 0.0
    stats = distributed.all_reduce_sum(stats)
    return {
        "loss_sum": stats[0].item(),
        "valid_targets": int(stats[1].item()),
        "padded_tokens": int(stats[2].item()),
    }
