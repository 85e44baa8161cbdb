"""Attention over branched rows in two parts: the main lines causal, the branches over them.

A batch's branched rows (``branched.prepare``) hold every game's main line in their first
``width`` tokens and the branch tokens after them. A branch token attends to the main line
before its ply, to at most one more token (a promoting pair's source, on the main line or a
branch) and to itself; it never attends to another branch's token but that one. One dense
masked pass over a row computes T x T scores, most of them branch against branch and masked
out (a game has about four branch tokens per main-line token). Here:

* the main lines attend causally among themselves (flash attention, no mask: ``width`` x
  ``width``);
* the branch tokens attend to the main lines' keys under a bias (``Nb`` x ``width``), the
  kernel returning its log-sum-exp;
* each branch token's own key (one dot product) is merged into that softmax through the
  log-sum-exp: its output is the kernel's and its own value mixed by one weight (``lerp``); a
  promoting pair whose source is a branch token too (a few per batch, listed on the host)
  merges that key as well.

The same softmax over the same keys as the dense mask's: the scores agree with it and with
the oracle up to rounding (the tests compare).

The kernels with a log-sum-exp are torch's own (``_scaled_dot_product_efficient_attention``
on CUDA, ``_scaled_dot_product_flash_attention_for_cpu`` on the CPU, those SDPA runs); where
one refuses the shapes, the same arithmetic in plain tensor operations. ``layer`` is one
block's arithmetic with this attention; ``match.compile`` compiles it once for every block
(``compile_layer``), ``compilable`` readying each batch's ``Split`` so that batches share its
graphs.
"""

from __future__ import annotations

import dataclasses
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from chesslm.model import gpt
from chesslm.scorer import kernels
from chesslm.scorer.decode import heads, merge


@dataclass
class Split:
    """A batch's two-part attention: its main lines' width, what each branch token sees of
    them, and the pairs whose source is a branch token (row, branch index, its source's)."""

    width: int
    bias: torch.Tensor  # (B, 1, Nb, width) True / 0: main-line keys a branch token sees
    aside: tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # (n,) each: row, at, source
    n_aside: int  # n, known on the host (no device sync to skip the empty case)

    def in_dtype(self) -> Split:
        """The bias additive in the pass's dtype (``kernels.additive``), once for every layer."""
        bias = self.bias if self.bias.is_floating_point() else kernels.additive(self.bias)
        return Split(self.width, bias, self.aside, self.n_aside)


def mask(
    prefix: torch.Tensor, extra: torch.Tensor, width: int, aside: tuple, n_aside: int
) -> Split:
    """``Split`` of rows whose token at ``j`` attends to the main line before ``prefix[j]``,
    to ``extra[j]`` (-1: none) and to itself (``scoring.dense_mask``'s rule); ``aside``: the
    tokens whose ``extra`` is a branch token (row, index among the branches, the source's).
    A padding branch token sees the first token too, so that no row of the bias is empty (its
    output is never read; an empty row would be NaN, and NaN times a zero weight is NaN)."""
    prefix_b, extra_b = prefix[:, width:], extra[:, width:]
    k = torch.arange(width, device=prefix.device)
    sees = (k < prefix_b.clamp(min=1).unsqueeze(-1)) | (k == extra_b.unsqueeze(-1))
    return Split(width, sees.unsqueeze(1), aside, n_aside)


_COMPILED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model: its compiled layer


def compile_layer(net: gpt.GPT) -> None:
    """``layer`` compiled for ``net`` (``match.compile``): one function for all its blocks,
    their weights its inputs; dynamic shapes (each batch has its own rows and length)."""
    _COMPILED[net] = torch.compile(layer, dynamic=True)


def layer_for(net: gpt.GPT, split: Split) -> tuple[Callable, Split]:
    """The layer function ``net``'s blocks run under ``split`` (compiled after
    ``compile_layer``) and ``split`` as that function takes it."""
    compiled = _COMPILED.get(net)
    return (layer, split) if compiled is None else (compiled, compilable(split))


def compilable(split: Split) -> Split:
    """``split`` for a compiled ``layer`` (``match.compile``), so that batches share graphs:
    the aside arrays copied out of the batch's buffer (a compiled graph guards on where a
    view lies) and their count unbacked (a count of 1 gets no graph of its own)."""
    aside = tuple(t.clone() for t in split.aside)
    for tensor in aside if split.n_aside else ():  # none: the graph without them reads none
        torch._dynamo.decorators.mark_unbacked(tensor, 0)
    return dataclasses.replace(split, aside=aside)


def layer(block: gpt.Block, x: torch.Tensor, split: Split) -> torch.Tensor:
    """One block of ``GPT.forward`` (``Block.forward``'s arithmetic) with ``attention`` in
    place of its attention's."""
    x = x + attention(block.attn, block.ln_1(x), split)
    return x + block.mlp(block.ln_2(x))


def attention(attn: gpt.CausalSelfAttention, x: torch.Tensor, split: Split) -> torch.Tensor:
    """The layer ``attn``'s attention output for rows ``x`` (B, T, C) under ``split``."""
    q, k, v = heads(attn, x)
    B, H, T, D = q.shape
    W = split.width
    out = torch.empty(B, T, H, D, dtype=q.dtype, device=q.device)  # merge's layout: no copy
    heads_first = out.transpose(1, 2)
    heads_first[:, :, :W] = F.scaled_dot_product_attention(
        q[:, :, :W], k[:, :, :W], v[:, :, :W], is_causal=True
    )
    if T > W:
        _branches(q, k, v, split, out)
    return merge(attn, heads_first)


def _branches(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, split: Split, out: torch.Tensor
) -> None:
    """The branch tokens' attention into ``out`` (B, T, H, D): over the main lines (and its
    log-sum-exp), then each one's own key merged in: the softmax over both is the kernel's
    output and the token's own value mixed by ``sigmoid(lse - own score)``."""
    W = split.width
    qb, kb, vb = q[:, :, W:], k[:, :, W:], v[:, :, W:]
    over, lse = _with_lse(qb, k[:, :, :W], v[:, :, :W], split.bias)
    own = (qb * kb).sum(-1, dtype=torch.float32) * q.size(-1) ** -0.5
    weight = torch.sigmoid(lse - own).unsqueeze(-1).to(q.dtype)
    into = out.transpose(1, 2)[:, :, W:]
    if torch.compiler.is_compiling():  # Dynamo takes no strided out=; Inductor fuses the copy
        into.copy_(torch.lerp(vb, over, weight))
    else:
        torch.lerp(vb, over, weight, out=into)
    if split.n_aside:  # compiled: a graph with, one without (no zero-size kernel launched)
        _aside((q, k, v), split, over, lse, out)


def _aside(
    qkv: tuple[torch.Tensor, ...], split: Split, over: torch.Tensor, lse: torch.Tensor,
    out: torch.Tensor,
) -> None:  # fmt: skip
    """The pairs whose source is a branch token: that key merged in as well (a few tokens)."""
    q, k, v = qkv
    W, (row, at, src) = split.width, split.aside
    qt, kt, vt = (z.transpose(1, 2) for z in (q, k, v))  # (B, T, H, D)
    qa = qt[row, W + at].float()  # (n, H, D)
    scale = q.size(-1) ** -0.5
    scores = torch.stack([lse[row, :, at], (qa * kt[row, W + at].float()).sum(-1) * scale,
                          (qa * kt[row, W + src].float()).sum(-1) * scale], -1)  # fmt: skip
    p = torch.softmax(scores, -1).unsqueeze(-1)  # (n, H, 3, 1)
    parts = torch.stack([over[row, :, at], vt[row, W + at], vt[row, W + src]], 2).float()
    out[row, W + at] = (p * parts).sum(2).to(out.dtype)


def _with_lse(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of ``q`` over ``k``, ``v`` under the additive ``bias`` (B, 1, M, N) and its
    FP32 log-sum-exp (B, H, M)."""
    B, H, M, _ = q.shape
    full = bias.expand(B, H, M, k.size(2))
    try:
        if q.is_cuda:
            out, lse, *_ = torch.ops.aten._scaled_dot_product_efficient_attention(
                q, k, v, full, True
            )
        else:
            out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                q, k, v, attn_mask=full
            )
        return out, lse[..., :M].float()
    except torch.OutOfMemoryError:
        raise
    except (AttributeError, RuntimeError, NotImplementedError) as error:  # no such kernel here,
        # or shapes or dtypes it refuses: the same arithmetic, its scores held in memory
        warnings.warn(f"attention's log-sum-exp in plain operations: {error}", RuntimeWarning,
                      stacklevel=2)  # fmt: skip
        s = torch.matmul(q.float(), k.float().transpose(-1, -2)) * q.size(-1) ** -0.5 + full
        return (torch.softmax(s, -1) @ v.float()).to(q.dtype), torch.logsumexp(s, -1)
