"""The optimizer and the learning-rate schedule.

AdamW with betas (0.9, 0.95) and weight decay 0.1 on matrices only (``GPT.param_groups``);
fused on CUDA, the plain implementation (same math) on CPU. The schedule warms up linearly,
then decays along a cosine to ``MIN_LR_RATIO`` of the peak at ``schedule_steps``, and stays
there. It is a pure function of the step, so the scheduler's state is just its step count.
Every update clips the gradients' total norm to ``GRAD_CLIP`` first (``trainer``).

>>> f = lr_lambda(warmup_steps=2, schedule_steps=10)
>>> [round(f(s), 3) for s in (0, 1, 2, 10, 20)]
[0.5, 1.0, 1.0, 0.1, 0.1]
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from chesslm.model.gpt import GPT

BETAS = (0.9, 0.95)
WEIGHT_DECAY = 0.1
MIN_LR_RATIO = 0.1
WARMUP_FRACTION = 0.1
GRAD_CLIP = 1.0  # the max total gradient norm (L2) of every update; in the run identity


def optimizer(model: GPT, lr: float, *, device: torch.device) -> torch.optim.AdamW:
    fused = device.type == "cuda"
    return torch.optim.AdamW(
        model.param_groups(WEIGHT_DECAY), lr=lr, betas=BETAS, fused=fused or None
    )


def horizon(
    *, epochs: int, steps_per_epoch: int, schedule_steps: int | None, warmup_steps: int | None
) -> tuple[int, int]:
    """(schedule_steps, warmup_steps) with the defaults: all epochs, and 10 % of that.

    :raises ValueError: if the warm-up is not shorter than the horizon.
    """
    schedule = schedule_steps or epochs * steps_per_epoch
    warmup = warmup_steps or max(1, round(schedule * WARMUP_FRACTION))
    if warmup >= schedule:
        raise ValueError(
            f"warmup_steps ({warmup}) must be shorter than schedule_steps ({schedule})"
        )
    return schedule, warmup


def lr_lambda(*, warmup_steps: int, schedule_steps: int) -> Callable[[int], float]:
    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = min(1.0, (step - warmup_steps) / (schedule_steps - warmup_steps))
        return MIN_LR_RATIO + (1 - MIN_LR_RATIO) * 0.5 * (1 + math.cos(math.pi * progress))

    return factor


def scheduler(
    opt: torch.optim.Optimizer, *, warmup_steps: int, schedule_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(
        opt, lr_lambda(warmup_steps=warmup_steps, schedule_steps=schedule_steps)
    )
