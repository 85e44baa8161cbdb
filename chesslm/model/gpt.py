"""The GPT that reads a game's tokens and predicts the next one (nanoGPT layout, plain torch).

Weights stay FP32; on CUDA the forward runs under BF16 autocast (``autocast(device)``), on
CPU in FP32. Attention is ``scaled_dot_product_attention(is_causal=True)``: games are right
padded, so every real target only ever attends to real tokens before it and needs no key mask
(flash attention on CUDA). Two other masks exist:

* ``mask=`` a boolean tensor broadcastable to (B, heads, T, T), True = may attend: the seed's
  padding-mask protocol (the reference path of the speed benchmark) and the dense document
  mask of packed rows on CPU;
* ``mask=`` a FlexAttention ``BlockMask``: packed rows on CUDA (``batching.document_mask``).

Packed rows also pass ``pos=`` (B, T) position ids that restart at every game.

``GPTConfig.outcome`` adds ``outcome_head``, a linear map of the same final hidden state the
move logits read to three logits: the game's result from the side to move (win, draw, loss);
``forward(..., outcome=True)`` returns both. Without it the model is exactly the one before
the head existed (no parameter, no random draw at init).

``GPTConfig.time_inputs`` adds ``time_embedding``: at every position (BOS and each move's last
token) the sum of four learned rows, the time control and both clocks, binned
(``chesslm.model.human_time``); ``forward(..., time=)`` takes them as (B, T, 4) row indices, row
0 (zero, never trained) everywhere else. ``GPTConfig.think_time`` adds ``think_head``, a linear
map of the final hidden state to the think-time bins; ``forward(..., think_time=True)`` returns
its logits after the move logits (and the outcome logits). Both are created after everything
else, so a model without them is exactly the one before they existed.

``GPTConfig.conditioning`` is the input layout the model was trained with (``none`` or ``elo``:
two rating tokens before BOS); the network is the same, so what feeds it reads the layout from
``net.config`` (``chesslm.scorer.ratings``) and builds the same inputs.

>>> model = GPT(config_for("tiny"))
>>> model(torch.tensor([[69, 12, 28, 64]])).shape
torch.Size([1, 4, 128])
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
from typing import Any, Union

import torch
import torch.nn as nn
import torch.nn.functional as F

from chesslm.data import conditioning as input_layouts
from chesslm.model import human_time
from chesslm.model.presets import (
    BASELINE_PARAMETERS,
    OUTCOME_CLASSES,
    GPTConfig,
    config_for,
    outcome_parameters,
    time_parameters,
)

try:  # FlexAttention (document masks of packed rows on CUDA)
    from torch.nn.attention.flex_attention import BlockMask, flex_attention
except ImportError:  # pragma: no cover - older torch
    BlockMask, flex_attention = None, None

Mask = Union[torch.Tensor, "BlockMask", None]

# FlexAttention's kernel configuration for packed rows (document masks in 128-token blocks,
# 12 heads of 64, bf16): the configurations Inductor's max-autotune picked on an H200 for the
# forward and the backward (BENCHMARKS.md, issue 16: 611,977 -> 640,328 useful targets/s, all
# of it in these two kernels), given here so a run gets them without 5 minutes of autotuning.
# Small tiles that fit any GPU FlexAttention supports; on the CPU they are ignored.
# CHESSLM_FLEX_OPTIONS=inductor leaves the choice to Inductor (the benchmarks' comparison).
FLEX_KERNEL_OPTIONS = {
    "BLOCK_M": 128,
    "BLOCK_N": 64,
    "BLOCK_M1": 32,
    "BLOCK_N1": 64,
    "BLOCK_M2": 64,
    "BLOCK_N2": 32,
    "num_stages": 3,
    "num_warps": 4,
}


def flex_kernel_options() -> dict[str, int] | None:
    return None if os.environ.get("CHESSLM_FLEX_OPTIONS") == "inductor" else FLEX_KERNEL_OPTIONS


def autocast(
    device: torch.device | str, *, cache: bool = True
) -> contextlib.AbstractContextManager[Any]:
    """BF16 autocast on CUDA; nothing on CPU (FP32 keeps CPU runs bitwise reproducible).

    ``cache=False`` inside a CUDA graph capture: autocast's cast-weight cache must not
    outlive the captured region."""
    if torch.device(device).type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=cache)
    return contextlib.nullcontext()


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.n_head = config.n_head
        self.flex_options = flex_kernel_options()  # read once, not at every forward

    def forward(self, x: torch.Tensor, mask: Mask = None) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        if mask is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, nh, T, hs)
        elif isinstance(mask, torch.Tensor):
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:
            y = flex_attention(q, k, v, block_mask=mask, kernel_options=self.flex_options)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor, mask: Mask = None) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), mask)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        input_layouts.check(config.conditioning, "GPTConfig.conditioning")
        self.config = config
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(config.vocab_size, config.n_embd),
                wpe=nn.Embedding(config.block_size, config.n_embd),
                h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
                ln_f=nn.LayerNorm(config.n_embd, bias=config.bias),
            )
        )
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying, as GPT-2
        self.apply(self._init_weights)
        # scaled init of the residual projections, per the GPT-2 paper
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))
        if config.outcome:  # last, so the trunk's init draws are those of a model without it
            self.outcome_head = nn.Linear(config.n_embd, len(OUTCOME_CLASSES), bias=config.bias)
            self._init_weights(self.outcome_head)
        if config.time_inputs:
            self.time_embedding = nn.Embedding(
                human_time.ROWS, config.n_embd, padding_idx=human_time.NONE
            )
            self._init_weights(self.time_embedding)
            with torch.no_grad():  # normal_ drew over it: "no time input here" adds nothing
                self.time_embedding.weight[human_time.NONE].zero_()
        if config.think_time:
            self.think_head = nn.Linear(config.n_embd, human_time.BINS, bias=config.bias)
            self._init_weights(self.think_head)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def num_parameters(self) -> int:
        """Unique parameters (the tied head counts once)."""
        return sum(p.numel() for p in self.parameters())

    def forward(
        self,
        idx: torch.Tensor,
        *,
        pos: torch.Tensor | None = None,
        mask: Mask = None,
        outcome: bool = False,
        think_time: bool = False,
        time: torch.Tensor | None = None,
    ) -> Any:
        """Logits (B, T, vocab) for token ids (B, T); see the module docstring for the masks.
        ``outcome`` / ``think_time``: a tuple of the logits, then the outcome logits (B, T, 3)
        and / or the think-time logits (B, T, BINS), which need their heads. ``time``: the
        time inputs' rows (B, T, 4), required by a model with them (all unknown:
        ``human_time.unknown_features``)."""
        _, T = idx.size()
        if T > self.config.block_size:
            raise ValueError(f"sequence of {T} tokens exceeds the context {self.config.block_size}")
        if pos is None:
            pos = torch.arange(T, dtype=torch.long, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)  # (B, T, C)
        if self.config.time_inputs:
            if time is None:
                raise ValueError(
                    "this model reads time inputs: forward(time=...) needs them (every time"
                    " unknown: chesslm.model.human_time.unknown_features)"
                )
            x = x + self.time_input(time)
        elif time is not None:
            raise ValueError("forward(time=...) needs a model with GPTConfig.time_inputs")
        for block in self.transformer.h:
            x = block(x, mask)
        if not (outcome or think_time):
            return self.lm_head(self.transformer.ln_f(x))  # (B, T, vocab)
        for wanted, name in ((outcome, "outcome"), (think_time, "think_time")):
            if wanted and not getattr(self.config, name):
                raise ValueError(f"forward({name}=True) needs a model with GPTConfig.{name}")
        h = self.transformer.ln_f(x)
        if not think_time:
            return self.lm_head(h), self.outcome_head(h)
        if not outcome:
            return self.lm_head(h), self.think_head(h)
        return self.lm_head(h), self.outcome_head(h), self.think_head(h)

    def time_input(self, time: torch.Tensor) -> torch.Tensor:
        """(..., C): each position's four time rows summed, for (..., 4) row indices (row 0:
        no time input); one bag each, so no (..., 4, C) tensor."""
        rows = F.embedding_bag(
            time.reshape(-1, time.size(-1)), self.time_embedding.weight, mode="sum",
            padding_idx=human_time.NONE,
        )  # fmt: skip
        return rows.view(*time.shape[:-1], -1)

    def param_groups(self, weight_decay: float) -> list[dict[str, Any]]:
        """Weight decay on matrices (dim >= 2) only; biases and LayerNorm gains are not decayed."""
        params = [p for p in self.parameters() if p.requires_grad]
        return [
            {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ]


def build(
    preset: str,
    *,
    device: torch.device | str = "cpu",
    conditioning: str = "none",
    outcome: bool = False,
    time_inputs: bool = False,
    think_time: bool = False,
) -> GPT:
    """The model of a preset reading inputs of ``conditioning``'s layout (with the outcome
    head if ``outcome``, the time inputs and the think-time head if asked), initialised from
    torch's current RNG, FP32, on ``device``."""
    config = dataclasses.replace(
        config_for(preset),
        conditioning=conditioning,
        outcome=outcome,
        time_inputs=time_inputs,
        think_time=think_time,
    )
    model = GPT(config).to(device)
    expected = BASELINE_PARAMETERS + outcome_parameters(config) + time_parameters(config)
    if preset == "baseline" and model.num_parameters() != expected:
        raise ValueError(f"baseline parameter mismatch: {model.num_parameters()}")
    if any(p.dtype != torch.float32 for p in model.parameters()):
        raise ValueError("expected FP32 weights")
    return model
