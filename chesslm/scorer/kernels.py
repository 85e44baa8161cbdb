"""The attention kernels play's masked passes may use: every backend but cuDNN's.

Play's passes rarely repeat a shape: every move-matching batch has its own games' length and
count, every ply's illegal replacements branch over their own rows, every ladder step scores
the games in flight whole. On an H100/H200, torch picks cuDNN's attention for a masked
``scaled_dot_product_attention`` first, and cuDNN builds an execution plan for each new
shape (tens of milliseconds), so a pass of a new shape pays it again. The memory-efficient
kernel takes the same boolean masks with no plan to build; on the CPU, where cuDNN's attention
does not exist, the list is torch's own, and nothing changes. Training's attention
(``chesslm.model.gpt``) is left to torch: its shapes repeat, and its code is part of a run's
identity.

``BACKENDS = None`` leaves torch's choice (the benchmarks' reference: ``--sdpa torch``).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

PLAY = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
BACKENDS: list[SDPBackend] | None = PLAY


def play_kernels() -> contextlib.AbstractContextManager:
    """A context in which attention uses ``BACKENDS`` (read at entry)."""
    return contextlib.nullcontext() if BACKENDS is None else sdpa_kernel(BACKENDS)


def uses_play_kernels(fn: Callable) -> Callable:
    """``fn`` run inside ``play_kernels()``."""

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        with play_kernels():
            return fn(*args, **kwargs)

    return wrapped


def additive(mask: torch.Tensor) -> torch.Tensor:
    """A boolean mask (True: may attend) as the additive bias (0 or -inf) that attention makes
    of it, made once for a pass's every layer: in the pass's dtype (autocast's, else FP32),
    its rows a multiple of 8 elements apart, so the memory-efficient kernel neither converts
    it nor copies it to align it at each layer (9 % of an H200's move-matching time), and
    always padded (never contiguous: a compiled pass, ``match.compile``, guards on whether it
    is, which would double its graphs)."""
    kind = mask.device.type
    dtype = torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else torch.float32
    width = mask.size(-1)
    bias = torch.full((*mask.shape[:-1], width + 8 - width % 8), float("-inf"), dtype=dtype,
                      device=mask.device)  # fmt: skip
    return bias[..., :width].masked_fill_(mask, 0.0)


CHOICES = ("play", "torch", "efficient", "cudnn", "math")  # the benchmarks' --sdpa


def choose(name: str) -> None:
    """Set ``BACKENDS`` by name: ``play`` (the default above), ``torch`` (torch's own choice),
    or one backend alone."""
    global BACKENDS
    one = {"efficient": SDPBackend.EFFICIENT_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
           "math": SDPBackend.MATH}  # fmt: skip
    if name not in CHOICES:
        raise ValueError(f"attention kernels must be one of {CHOICES}, not {name!r}")
    BACKENDS = PLAY if name == "play" else None if name == "torch" else [one[name]]
