"""Incremental decoding for free-running play: every layer's keys and values cached, so a
step runs the model on its new tokens only, not on the whole sequence again.

``Decoder.step`` is ``GPT.forward``'s arithmetic in the model's own modules (embeddings,
``ln_1``, ``c_attn``, ``c_proj``, the MLP, ``ln_f``, the head): a new token attends to the
cached keys before it and to the new tokens up to itself, as in a causal pass over the whole
sequence (the tests compare the logits). The batch's sequences have one length (self-play
games advance in lockstep), so the cache is one dense tensor per layer, without padding. A
step writes its tokens' keys and values at their positions, over whatever was there: a
proposal's tokens are replaced by the move played by stepping the played tokens at the same
positions. ``Decoder.branch`` runs tokens beside the cache without writing it (an illegal
proposal's replacement: every legal move's branch, ``scoring``'s tokens and mask, over the
cached prefix instead of the whole game). It lives here, not in ``chesslm.model.gpt``, which
is training code (its hash is part of a run's identity).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from chesslm.model import gpt
from chesslm.scorer import kernels, times


class Decoder:
    """Keys and values of a batch of ``batch`` sequences, up to ``length`` tokens each."""

    def __init__(self, net: gpt.GPT, batch: int, length: int) -> None:
        c = net.config
        self.net = net
        self.device = next(net.parameters()).device
        self.shape = (batch, c.n_head, min(length, c.block_size), c.n_embd // c.n_head)
        self.keys: list[torch.Tensor | None] = [None] * c.n_layer
        self.values: list[torch.Tensor | None] = [None] * c.n_layer

    @torch.no_grad()
    def step(
        self, idx: torch.Tensor, at: int, *, time: torch.Tensor | None = None, final: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """FP32 logits (B, n, vocab) after the tokens ``idx`` (B, n) at positions ``at`` ..
        ``at + n - 1``, which see the cache before ``at`` and each other causally. ``time``:
        a timed model's rows (B, n, 4) of those tokens (None: every time unknown, as in
        free-running games); ``final``: the final hidden states (B, n, C, after ``ln_f``, in
        the pass's dtype) too, which the outcome and think-time heads read (the engine's
        ``chesslm.engine.kvcache``)."""
        n = idx.size(1)
        if at + n > self.net.config.block_size:
            raise ValueError(
                f"sequence of {at + n} tokens exceeds the context {self.net.config.block_size}"
            )
        pos = torch.arange(at, at + n, dtype=torch.long, device=self.device)
        # attention over the whole cache, every position after a new token's own masked out:
        # one shape for every step of n tokens (kernels picked per shape, as cuDNN's attention
        # is, are picked once), not a longer one each step
        seen = torch.arange(self.shape[2], device=self.device) <= pos.unsqueeze(1)  # (n, L)

        def attend(layer: int, attn: gpt.CausalSelfAttention, x: torch.Tensor) -> torch.Tensor:
            q, k, v = heads(attn, x)
            if self.keys[layer] is None:  # zeros: masked keys must not be NaN; autocast's dtype
                self.keys[layer] = torch.zeros(self.shape, dtype=k.dtype, device=self.device)
                self.values[layer] = torch.zeros(self.shape, dtype=v.dtype, device=self.device)
            keys, values = self.keys[layer], self.values[layer]
            keys[:, :, at : at + n] = k
            values[:, :, at : at + n] = v
            return merge(attn, F.scaled_dot_product_attention(q, keys, values, attn_mask=seen))

        return self._forward(idx, pos, attend, time, final)

    @torch.no_grad()
    def branch(
        self, rows: torch.Tensor, idx: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        """FP32 logits (R, n, vocab) of the tokens ``idx`` (R, n) at positions ``pos`` after
        the cached tokens before ``at`` of the sequences ``rows``; ``mask`` (R, 1, n, at + n):
        what each token may see of those and of the new tokens. The cache is left as it was:
        the legal moves' branches (``games.cached_best_moves``) are scored, not played."""
        at = mask.size(-1) - idx.size(1)

        def attend(layer: int, attn: gpt.CausalSelfAttention, x: torch.Tensor) -> torch.Tensor:
            q, k, v = heads(attn, x)
            keys = torch.cat([self.keys[layer][rows, :, :at], k], 2)
            values = torch.cat([self.values[layer][rows, :, :at], v], 2)
            return merge(attn, F.scaled_dot_product_attention(q, keys, values, attn_mask=mask))

        return self._forward(idx, pos, attend)

    @kernels.uses_play_kernels
    def _forward(
        self,
        idx: torch.Tensor,
        pos: torch.Tensor,
        attend,  # noqa: ANN001
        time: torch.Tensor | None = None,
        final: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """``GPT.forward``'s arithmetic on new tokens, ``attend`` giving each layer's attention;
        ``time`` and ``final``: ``step``'s."""
        t = self.net.transformer
        with gpt.autocast(self.device):
            x = t.wte(idx) + t.wpe(pos)
            if times.timed(self.net):  # free-running games have no clock: every time unknown
                rows = times.input_rows(self.net, pos) if time is None else time
                x = x + self.net.time_input(rows)
            for layer, block in enumerate(t.h):
                x = x + attend(layer, block.attn, block.ln_1(x))
                x = x + block.mlp(block.ln_2(x))
            h = t.ln_f(x)
            logits = self.net.lm_head(h)
        return (logits.float(), h) if final else logits.float()

    def keep(self, rows: torch.Tensor) -> None:
        """Only the sequences ``rows`` (indices, in that order) from now on."""
        self.keys = [None if k is None else k[rows] for k in self.keys]
        self.values = [None if v is None else v[rows] for v in self.values]
        self.shape = (len(rows), *self.shape[1:])


def heads(attn: gpt.CausalSelfAttention, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Queries, keys and values (B, heads, n, head size) of ``x`` (B, n, C)."""
    B, n, C = x.size()
    q, k, v = attn.c_attn(x).split(C, dim=2)
    return tuple(z.view(B, n, attn.n_head, C // attn.n_head).transpose(1, 2) for z in (q, k, v))


def merge(attn: gpt.CausalSelfAttention, y: torch.Tensor) -> torch.Tensor:
    """The attention's output projection of the heads ``y`` (B, heads, n, head size)."""
    B, _, n, _ = y.size()
    return attn.c_proj(y.transpose(1, 2).contiguous().view(B, n, -1))
