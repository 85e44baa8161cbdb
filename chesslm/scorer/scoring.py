"""Scores of every legal move of many positions in one forward pass per batch of games.

The model's move distribution over the legal moves factorises as
``P(source) · P(destination | source) · P(promotion | source, destination)``, each factor
renormalised over the tokens that are legal at that step (so the promotion factor of a
non-promotion move is exactly 1, and the scores of a position's legal moves sum to one).
Scoring every legal move needs the model's outputs after every legal *source* (and, for
promotions, after every promoting source-destination pair), not only after the played one.

Each game is one *branched* sequence (``chesslm.scorer.branched``: the main line and, after it,
one token per unplayed legal source and promoting destination, each seeing exactly what it
would see in a plain causal pass over its own prefix), so one forward pass scores every legal
move of a batch of games; ``chesslm.scorer.split`` computes that pass's attention without the
branch-against-branch scores a dense mask would throw away (``attention="split"``, the
default). ``chesslm.scorer.oracle`` is the plain loop (one causal pass per legal move) the tests
compare with.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, NamedTuple

import chess
import numpy as np
import torch

from chesslm.data import tokens
from chesslm.model import gpt
from chesslm.scorer import branched, decode, kernels, split, times
from chesslm.scorer.branched import Batch, GameInput
from chesslm.scorer.prepare import board_codes

NEG_INF = float("-inf")
ATTENTION = ("split", "dense", "flex")  # the branched rows' masks (mask_for; match.attention)
IN_FLIGHT = 2  # score_chunks' passes queued on the device (and batches prepared ahead)
WAITED = "play: the next batch's host half"  # what score_chunks waits for (a profile's label)


def dense_mask(prefix: torch.Tensor, extra: torch.Tensor) -> torch.Tensor:
    """bool (B, 1, T, T), True = may attend: the main line before ``prefix``, ``extra``, self."""
    T = prefix.size(1)
    k = torch.arange(T, device=prefix.device)
    q = k.view(1, T, 1)
    allowed = (k < prefix.unsqueeze(-1)) | (k == q) | (k == extra.unsqueeze(-1))
    return allowed.unsqueeze(1)


def block_mask(prefix: torch.Tensor, extra: torch.Tensor):  # noqa: ANN201
    """The same mask as a FlexAttention BlockMask (CUDA): no T x T tensor."""
    from torch.nn.attention.flex_attention import create_block_mask

    def mask_mod(b, h, q, k):  # noqa: ANN001
        return (k < prefix[b, q]) | (k == q) | (k == extra[b, q])

    B, T = prefix.shape
    return create_block_mask(mask_mod, B, None, T, T, device=prefix.device, _compile=True)


@kernels.uses_play_kernels
def hidden_states(net: gpt.GPT, batch: Batch, mask) -> torch.Tensor:  # noqa: ANN001
    """The last block's output (B, T, C) for explicit positions and mask (GPT.forward with
    ``pos``/``mask`` minus its length check: a branched row may be longer than the context,
    its positions never are); a ``split.Split`` mask runs each block's arithmetic with
    ``split.attention`` in place of its attention's."""
    t = net.transformer
    x = t.wte(batch.idx) + t.wpe(batch.pos)
    if batch.time is not None:  # a timed model's rows at the main lines' positions
        x = x + net.time_input(batch.time)
    elif times.timed(net):  # games without clocks: every time unknown
        x = x + net.time_input(times.input_rows(net, batch.pos))
    if isinstance(mask, split.Split):
        layer, mask = split.layer_for(net, mask)
        for block in t.h:
            x = layer(block, x, mask)
        return x
    for block in t.h:
        x = block(x, mask)
    return x


def compile_layers(net: gpt.GPT) -> None:
    """``match.compile``: every block's pass compiled, dynamic (each batch has its own rows
    and length): ``Block.forward`` for the dense and flex masks, ``split.layer`` for split."""
    for block in net.transformer.h:
        block.compile(dynamic=True)
    split.compile_layer(net)


@dataclass
class Scores:
    """Per scored ply: log-probability and rank of the played move; per move: its score."""

    move_logp: torch.Tensor  # (M,) float32
    played_logp: torch.Tensor  # (P,) float32 (nan where no played move)
    rank: torch.Tensor  # (P,) moves scoring strictly higher than the played one
    n_legal: torch.Tensor  # (P,)
    wdl: torch.Tensor | None = None  # (P, 3) float32: the outcome head's softmax (with one)
    think: torch.Tensor | None = None  # (P, BINS) float32: the think-time head's (with one)


def mask_for(batch: Batch, attention: str):  # noqa: ANN201
    """The branched rows' attention mask: ``split`` (``split.Split``: the main lines causal,
    the branches over them), ``dense`` (a bool tensor) or ``flex`` (BlockMask)."""
    if attention == "split":
        aside = tuple(batch.dev[k] for k in branched.ASIDE)
        return split.mask(batch.prefix, batch.extra, batch.width, aside, batch.n_aside)
    if attention == "flex":
        return block_mask(batch.prefix, batch.extra)
    if attention == "dense":
        return dense_mask(batch.prefix, batch.extra)
    raise ValueError(f"attention must be one of {ATTENTION}, not {attention!r}")


@torch.no_grad()
def logits_at(net: gpt.GPT, batch: Batch, mask) -> torch.Tensor:  # noqa: ANN001
    """FP32 logits at the rows that score moves (before-source, keys, pairs), in one pass."""
    return heads_at(net, batch, mask)[0]


@torch.no_grad()
def heads_at(net: gpt.GPT, batch: Batch, mask) -> tuple[torch.Tensor, Any, Any]:  # noqa: ANN001
    """``logits_at``'s logits and, with an outcome head, its FP32 win/draw/loss probabilities
    (P, 3), with a think-time head its FP32 distribution over the think-time bins (P, BINS),
    each at each ply's before-source row: the position, the heads' targets' token."""
    if batch.max_pos >= net.config.block_size:
        raise ValueError(f"a game is longer than the model's context {net.config.block_size}")
    with gpt.autocast(batch.idx.device):
        if isinstance(mask, torch.Tensor):  # dense: one bias for every layer
            mask = kernels.additive(mask)
        elif isinstance(mask, split.Split):
            mask = mask.in_dtype()
        x = hidden_states(net, batch, mask)
        h = net.transformer.ln_f(x.reshape(-1, x.size(-1))[batch.dev["rows"]])
        logits = net.lm_head(h)
        at = h[: len(batch.before_rows)]
        head = net.outcome_head(at) if net.config.outcome else None
        think = net.think_head(at) if net.config.think_time else None
    probabilities = [None if z is None else z.float().softmax(-1) for z in (head, think)]
    return logits.float(), *probabilities


@torch.no_grad()
def score_logits(batch: Batch, logits: torch.Tensor) -> Scores:
    """Every legal move's log-probability (legal-renormalised factorisation) from the logits
    of ``logits_at``; device work only (no host sync)."""
    device = logits.device
    d = batch.dev
    P, K = len(batch.before_rows), len(batch.key_rows)

    move_ply, move_key, move_pair = d["move_ply"], d["move_key"], d["move_pair"]
    move_dst, move_pro = d["move_dst"], d["move_pro"]
    key_ply, key_src = d["key_ply"], d["key_src"]

    def masked_log_softmax(z: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(z.masked_fill(~allowed, NEG_INF), dim=-1)

    src_ok = torch.zeros(P, 64, dtype=torch.bool, device=device)
    src_ok[key_ply, key_src] = True
    ls_src = masked_log_softmax(logits[:P, :64], src_ok)
    dst_ok = torch.zeros(K, 64, dtype=torch.bool, device=device)
    dst_ok[move_key, move_dst] = True
    ls_dst = masked_log_softmax(logits[P : P + K, :64], dst_ok)
    logp = ls_src[key_ply[move_key], key_src[move_key]] + ls_dst[move_key, move_dst]
    promo = move_pair >= 0
    if (batch.move_pair >= 0).any():  # host arrays: no device sync
        # no boolean indexing (it would wait for the device): non-promotions add 0
        Q = len(batch.pair_rows)
        pair = move_pair.clamp(min=0)
        hits = torch.zeros(Q * 5, dtype=torch.int32, device=device)
        hits.index_add_(0, pair * 5 + move_pro, promo.to(torch.int32))
        z = logits[P + K :, tokens.PROMO_NONE : tokens.PROMO_NONE + 5]
        ls_pro = masked_log_softmax(z, hits.view(Q, 5) > 0)
        logp = logp + torch.where(promo, ls_pro[pair, move_pro], 0.0)
    played = d["played"]
    played_logp = torch.where(played >= 0, logp[played.clamp(min=0)], float("nan"))
    better = (logp > played_logp[move_ply]).to(torch.int64)
    rank = torch.zeros(P, dtype=torch.int64, device=device).index_add_(0, move_ply, better)
    n_legal = torch.zeros(P, dtype=torch.int64, device=device).index_add_(
        0, move_ply, torch.ones_like(move_ply)
    )
    return Scores(logp, played_logp, rank, n_legal)


@torch.no_grad()
def score(net: gpt.GPT, batch: Batch, *, attention: str = "dense") -> Scores:
    """Every legal move's log-probability (legal-renormalised factorisation) in one pass.
    ``dense`` by default: a pass over a few boards (a move to play) is one kernel a layer
    where ``split`` launches several; batches of whole games (``score_chunks``) are ``split``."""
    logits, wdl, think = heads_at(net, batch, mask_for(batch, attention))
    return dataclasses.replace(score_logits(batch, logits), wdl=wdl, think=think)


@torch.no_grad()
def cached_scores(
    decoder: decode.Decoder,
    last: torch.Tensor,
    at: int,
    rows: torch.Tensor,
    boards: Sequence[chess.Board],
) -> tuple[list[GameInput], Batch, torch.Tensor]:
    """``score``'s move log-probabilities of ``boards``, whose sequences are the decoder's
    ``rows`` (a device index), cached before position ``at`` (their next source's), ``last``
    the logits there (B, vocab): the branches (every legal source, every promoting
    destination) stepped over the cache, so no pass reads the games again. Each board is
    scored as a one-token game (BOS alone) whose branches, shifted to ``at``, are the new
    tokens: the same rows, mask and arithmetic as ``score``'s dense pass. Returns the
    one-token games (their ``legal(0)``: each board's codes), their batch and the (M,) CPU
    log-probabilities, board after board (``chesslm.ladder.games.cached_best_moves``, the
    engine's ``chesslm.engine.kvcache``)."""
    inputs = [GameInput.from_plies([tokens.BOS], [legal_codes(b)]) for b in boards]
    batch = branched.build_batch(inputs, last.device)
    B, T = batch.shape
    sees = dense_mask(batch.prefix, batch.extra)[:, :, 1:]  # (B, 1, T - 1, T)
    # what the one-token game's BOS stands for: every cached token before ``at``
    mask = torch.cat([sees[..., :1].expand(-1, -1, -1, at), sees[..., 1:]], -1)
    new = decoder.branch(rows, batch.idx[:, 1:], batch.pos[:, 1:] + (at - 1), mask)
    logits = torch.cat([last[rows].unsqueeze(1), new], 1).view(B * T, -1)[batch.dev["rows"]]
    return inputs, batch, score_logits(batch, logits).move_logp.cpu()


def score_many(net: gpt.GPT, games: Sequence[GameInput], **kw: Any) -> Iterator[tuple]:
    """Score ``games`` batch by batch (``score_chunks``' keywords, one chunk): yields (game
    indices, batch, host results with ``rank``, ``played_logp``, ``n_legal`` per scored ply,
    ``wdl`` (P, 3) with an outcome head and ``think`` (P, BINS) with a think-time head)."""
    for chunk in score_chunks(net, [games], **kw):
        yield chunk.group, chunk.batch, chunk.host


class Scored(NamedTuple):
    """One batch's results (``score_chunks``): its chunk's number, the games of that chunk it
    holds (indices into the chunk), the batch, host results (``score_many``'s), and whether
    it is the chunk's last batch."""

    chunk: int
    group: list[int]
    batch: Batch
    host: dict[str, np.ndarray]
    last: bool


def score_chunks(
    net: gpt.GPT,
    chunks: Iterable[Sequence[GameInput]],
    *,
    batch_tokens: int,
    device: torch.device | str,
    attention: str = "split",
    pad_to: int = 1,
) -> Iterator[Scored]:
    """Score chunks of games (each batched on its own) in one pipeline, so that the device
    does not wait at a chunk's end: a host thread takes the next chunk from ``chunks`` (a lazy
    iterable is consumed in that thread, so building a chunk's inputs overlaps the scoring) and
    prepares its batches (NumPy, into pinned memory), ``IN_FLIGHT`` ahead, while this thread
    copies the current batch (non-blocking), launches its pass and, only then, waits for the
    results of the batch ``IN_FLIGHT`` before it (one sync per batch, a non-blocking copy to
    pinned memory): a host that falls behind for a batch (a busy core) leaves the device
    that many passes queued. An empty chunk yields nothing."""
    cuda = branched.is_cuda(device)

    def planned() -> Iterator[tuple[int, list[int], Batch, bool]]:
        for c, games in enumerate(chunks):
            groups = branched.plan_batches(branched.branched_lengths(games).tolist(), batch_tokens)
            for k, group in enumerate(groups):
                batch = branched.prepare([games[i] for i in group], pad_to=pad_to, pin=cuda)
                yield c, group, batch, k == len(groups) - 1

    items = planned()
    pending: deque[tuple] = deque()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="play-prepare") as pool:
        ahead = deque(pool.submit(next, items, None) for _ in range(IN_FLIGHT))
        while (item := _waited(ahead.popleft())) is not None:
            ahead.append(pool.submit(next, items, None))
            c, group, host_batch, last = item
            batch = branched.to_device(host_batch, device)
            fetch = start_fetch(score(net, batch, attention=attention), cuda)
            pending.append((c, group, batch, fetch, last))
            if len(pending) > IN_FLIGHT:
                yield finish(*pending.popleft())
        while pending:
            yield finish(*pending.popleft())


def _waited(prepared: Future) -> Any:
    """A prepared batch, the wait for it labelled in a profile (``WAITED``): the device has
    nothing queued but ``IN_FLIGHT`` passes while the host half lags."""
    with torch.profiler.record_function(WAITED):
        return prepared.result()


def start_fetch(s: Scores, cuda: bool) -> tuple[Any, ...]:
    """Start copying a batch's results to the host (pinned, non-blocking on CUDA): rank,
    played log-probability, W/D/L and think time (None without their heads) and the event to
    wait for."""
    results = (s.rank, s.played_logp, s.wdl, s.think)
    if not cuda:
        return *results, None
    out = [None if t is None else torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
           for t in results]  # fmt: skip
    for host, t in zip(out, results, strict=True):
        if t is not None:
            host.copy_(t, non_blocking=True)
    done = torch.cuda.Event()
    done.record()
    return (*out, done)


def finish(chunk: int, group: list[int], batch: Batch, fetch: tuple, last: bool) -> Scored:
    rank, logp, wdl, think, done = fetch
    if done is not None:
        done.synchronize()
    host = {
        "rank": rank.numpy(),
        "played_logp": logp.numpy(),
        "n_legal": batch.counts.copy(),
    }
    if wdl is not None:  # the outcome head's (P, 3) win/draw/loss at each scored position
        host["wdl"] = wdl.numpy()
    if think is not None:  # the think-time head's (P, BINS) distribution at each position
        host["think"] = think.numpy()
    return Scored(chunk, group, batch, host, last)


legal_codes = board_codes  # a board's sorted legal move codes (the one rule, torch-free)


def decode_code(code: int) -> chess.Move:
    code = int(code)
    return tokens.decode_move((code // 320, (code // 5) % 64, tokens.PROMO_NONE + code % 5))
