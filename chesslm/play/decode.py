"""Incremental decoding for free-running play: every layer's keys and values cached, so a
step runs the model on its new tokens only, not on the whole sequence again.

``Decoder.step`` is ``GPT.forward``'s arithmetic in the model's own modules (embeddings,
``ln_1``, ``c_attn``, ``c_proj``, the MLP, ``ln_f``, the head): a new token attends to the
cached keys before it and to the new tokens up to itself, as in a causal pass over the whole
sequence (the tests compare the logits). The batch's sequences have one length (self-play
games advance in lockstep), so the cache is one dense tensor per layer, without padding. A
step writes its tokens' keys and values at their positions, over whatever was there: a
proposal's tokens are replaced by the move played by stepping the played tokens at the same
positions. It lives here, not in ``chesslm.model.gpt``, which is training code (its hash is
part of a run's identity).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from chesslm.model import gpt


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
    def step(self, idx: torch.Tensor, at: int) -> torch.Tensor:
        """FP32 logits (B, n, vocab) after the tokens ``idx`` (B, n) at positions ``at`` ..
        ``at + n - 1``, which see the cache before ``at`` and each other causally."""
        n = idx.size(1)
        if at + n > self.net.config.block_size:
            raise ValueError(
                f"sequence of {at + n} tokens exceeds the context {self.net.config.block_size}"
            )
        t = self.net.transformer
        pos = torch.arange(at, at + n, dtype=torch.long, device=self.device)
        # attention over the whole cache, every position after a new token's own masked out:
        # one shape for every step of n tokens (kernels picked per shape, as cuDNN's attention
        # is, are picked once), not a longer one each step
        seen = torch.arange(self.shape[2], device=self.device) <= pos.unsqueeze(1)  # (n, L)
        with gpt.autocast(self.device):
            x = t.wte(idx) + t.wpe(pos)
            for layer, block in enumerate(t.h):
                x = x + self._attend(layer, block.attn, block.ln_1(x), at, seen)
                x = x + block.mlp(block.ln_2(x))
            logits = self.net.lm_head(t.ln_f(x))
        return logits.float()

    def _attend(
        self,
        layer: int,
        attn: gpt.CausalSelfAttention,
        x: torch.Tensor,
        at: int,
        seen: torch.Tensor,
    ) -> torch.Tensor:
        B, n, C = x.size()
        q, k, v = attn.c_attn(x).split(C, dim=2)
        q, k, v = (z.view(B, n, attn.n_head, C // attn.n_head).transpose(1, 2) for z in (q, k, v))
        if self.keys[layer] is None:  # zeros: masked keys must not be NaN; autocast's dtype
            self.keys[layer] = torch.zeros(self.shape, dtype=k.dtype, device=self.device)
            self.values[layer] = torch.zeros(self.shape, dtype=v.dtype, device=self.device)
        keys, values = self.keys[layer], self.values[layer]
        keys[:, :, at : at + n] = k
        values[:, :, at : at + n] = v
        y = F.scaled_dot_product_attention(q, keys, values, attn_mask=seen)
        return attn.c_proj(y.transpose(1, 2).contiguous().view(B, n, C))

    def keep(self, rows: torch.Tensor) -> None:
        """Only the sequences ``rows`` (indices, in that order) from now on."""
        self.keys = [None if k is None else k[rows] for k in self.keys]
        self.values = [None if v is None else v[rows] for v in self.values]
        self.shape = (len(rows), *self.shape[1:])
