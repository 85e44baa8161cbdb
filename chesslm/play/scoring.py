"""Scores of every legal move of many positions in one forward pass per batch of games.

The model's move distribution over the legal moves factorises as
``P(source) · P(destination | source) · P(promotion | source, destination)``, each factor
renormalised over the tokens that are legal at that step (so the promotion factor of a
non-promotion move is exactly 1, and the scores of a position's legal moves sum to one).
Scoring every legal move needs the model's outputs after every legal *source* (and, for
promotions, after every promoting source-destination pair), not only after the played one.

One game becomes one *branched* sequence: the main line (BOS and the played triples) and,
after it (in a batch, after the longest main line: every row's branches start at ``width``),
one extra token per unplayed legal source of each ply (placed at the position the
source would have, attending only to the main line before that ply and to itself) and one
per unplayed promoting destination (attending to that prefix, its source token and itself).
An explicit attention mask and explicit position ids make every branch token see exactly what
it would see in a plain causal pass over its own prefix, so one forward pass scores them
all; ``chesslm.play.split`` computes that pass's attention without the branch-against-branch
scores the mask would throw away (``attention="split"``, the default).
``chesslm.play.oracle`` is the plain loop (one causal pass per legal move) the tests compare
with.

A rating-conditioned model (``chesslm.data.conditioning``) reads each game as its rating
prefix, then BOS and the triples: a game's ``prefix`` goes in front of its main line, every
position id shifts by its length, and every branch token attends to it as to the rest of the
main line before its ply (an empty prefix leaves every row exactly as without conditioning).
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import chess
import numpy as np
import torch

from chesslm.data import tokens
from chesslm.model import gpt
from chesslm.play import kernels, split
from chesslm.play.prepare import board_codes

NEG_INF = float("-inf")
ATTENTION = ("split", "dense", "flex")  # the branched rows' masks (mask_for; match.attention)


@dataclass
class GameInput:
    """One game to score: its main line and the legal move codes of each ply scored.

    ``main`` is BOS followed by the played triples (no EOS). Plies ``start .. start +
    len(counts) - 1`` are scored; ``codes`` holds their legal move codes back to back
    (``counts`` per ply), sorted within each ply as the token cache stores them. A ply whose
    triple is not in ``main`` (the position after the main line, when the model is to move)
    has no played move. ``prefix``: the input tokens before BOS (a conditioned model's rating
    tokens; empty for a model without conditioning)."""

    main: np.ndarray
    codes: np.ndarray
    counts: np.ndarray
    start: int = 0
    prefix: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @classmethod
    def from_plies(
        cls,
        main: Sequence[int],
        legal: Sequence[np.ndarray],
        start: int = 0,
        prefix: Sequence[int] = (),
    ):  # noqa: ANN206
        """From one array of legal codes per scored ply."""
        codes = [np.sort(np.asarray(c, dtype=np.int64)) for c in legal]
        return cls(
            main=np.asarray(main, dtype=np.int64),
            codes=np.concatenate(codes) if codes else np.zeros(0, np.int64),
            counts=np.array([len(c) for c in codes], dtype=np.int64),
            start=start,
            prefix=np.asarray(prefix, dtype=np.int64),
        )

    @property
    def plies(self) -> int:
        return len(self.counts)

    def legal(self, ply: int) -> np.ndarray:
        """The legal codes of the ``ply``-th scored ply."""
        first = int(self.counts[:ply].sum())
        return self.codes[first : first + int(self.counts[ply])]


DEVICE_ARRAYS = ("move_ply", "move_key", "move_pair", "move_dst", "move_pro", "key_ply",
                 "key_src", "played")  # fmt: skip


IN_FLIGHT = 2  # score_chunks' passes queued on the device (and batches prepared ahead)
ASIDE = ("aside_row", "aside_at", "aside_src")  # split.Split.aside, on the device


@dataclass
class Batch:
    """Branched token rows and the index arrays that read the moves' scores off them."""

    before_rows: np.ndarray  # (P,) flat row of the token before each ply's source
    key_rows: np.ndarray  # (K,) flat row of each (ply, legal source) token
    key_ply: np.ndarray
    key_src: np.ndarray
    pair_rows: np.ndarray  # (Q,) flat row of each promoting (ply, source, destination) token
    move_ply: np.ndarray  # (M,) every legal move: its ply (0..P-1), key, pair (-1), tokens
    move_key: np.ndarray
    move_pair: np.ndarray
    move_dst: np.ndarray
    move_pro: np.ndarray  # promotion token - PROMO_NONE (0 = none)
    played: np.ndarray  # (P,) index into the moves of the played move, -1 when none
    ply_game: np.ndarray  # (P,) game index in the batch
    ply_number: np.ndarray  # (P,) ply index within its game
    max_pos: int = 0  # the largest position id (checked against the context on the host)
    shape: tuple[int, int] = (0, 0)  # (B, T)
    width: int = 0  # the longest main line: every row's branch tokens start here
    n_aside: int = 0  # promoting pairs whose source is a branch token (``split``)
    counts: np.ndarray | None = None  # (P,) legal moves per ply
    packed: torch.Tensor | None = None  # every device array in one host buffer (``layout``)
    layout: dict[str, tuple[int, int]] | None = None  # name -> (offset, length) in ``packed``
    # on the device (``to_device``): views of the one copy of ``packed``
    idx: torch.Tensor | None = None  # (B, T) token ids
    pos: torch.Tensor | None = None  # (B, T) position ids
    prefix: torch.Tensor | None = None  # (B, T) a token attends to main-line tokens before this
    extra: torch.Tensor | None = None  # (B, T) and to this one more token (branch source; -1)
    dev: dict[str, torch.Tensor] | None = None


def _cumsum0(counts: np.ndarray) -> np.ndarray:
    out = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=out[1:])
    return out


def _starts(flags: np.ndarray) -> np.ndarray:
    """True where a non-decreasing key array takes a new value."""
    new = np.ones(len(flags), dtype=bool)
    new[1:] = flags[1:] != flags[:-1]
    return new


def _rank_in_game(game: np.ndarray, n_games: int) -> tuple[np.ndarray, np.ndarray]:
    """Each item's index among its game's items (items grouped by game) and the counts."""
    counts = np.bincount(game, minlength=n_games)
    return np.arange(len(game)) - _cumsum0(counts)[game], counts


def branched_length(game: GameInput) -> int:
    """Tokens of a game's branched sequence, at most (for planning batches)."""
    ply = np.repeat(np.arange(game.plies), game.counts)
    return len(game.prefix) + len(game.main) + int(_starts(ply * 64 + game.codes // 320).sum())


def branched_lengths(games: Sequence[GameInput]) -> np.ndarray:
    """``branched_length`` of every game, vectorised over all of them (plans a whole
    evaluation before its first batch: the device waits for it)."""
    if not games:
        return np.zeros(0, dtype=np.int64)
    counts = np.concatenate([g.counts for g in games]).astype(np.int64)
    codes = np.concatenate([g.codes for g in games]).astype(np.int64)
    ply_game = np.repeat(np.arange(len(games)), [g.plies for g in games])
    move_ply = np.repeat(np.arange(len(counts)), counts)
    keys = _starts(move_ply * 64 + codes // 320)
    sources = np.bincount(ply_game[move_ply[keys]], minlength=len(games))
    return np.array([len(g.prefix) + len(g.main) for g in games], dtype=np.int64) + sources


@dataclass
class _Flat:
    """A batch's games flattened: per game (``B`` games), per ply (``P``), per legal move."""

    B: int
    L: np.ndarray  # (B,) main-line tokens of each game (its prefix included)
    lead: np.ndarray  # (P,) prefix tokens of each ply's game: where its BOS is in the row
    main: np.ndarray  # every game's prefix and main line back to back
    main_off: np.ndarray  # (B + 1,) where each game's main line starts in ``main``
    counts: np.ndarray  # (P,) legal moves per ply
    ply_game: np.ndarray  # (P,) game of each ply
    ply_abs: np.ndarray  # (P,) ply number within its game
    move_ply: np.ndarray  # (M,) ply of each legal move
    src: np.ndarray  # (M,) source, destination, promotion (0 = none) of each legal move
    dst: np.ndarray
    pro: np.ndarray
    played: list[np.ndarray]  # (P,) x 3 the played source, destination, promotion; -1: none


def _flatten(games: Sequence[GameInput]) -> _Flat:
    B = len(games)
    lead_of = np.array([len(g.prefix) for g in games], dtype=np.int64)
    L = np.array([len(g.main) for g in games], dtype=np.int64) + lead_of
    n = np.array([g.plies for g in games], dtype=np.int64)
    start = np.array([g.start for g in games], dtype=np.int64)
    main = np.concatenate([np.concatenate([g.prefix, g.main]) for g in games]).astype(np.int64)
    main_off = _cumsum0(L)
    codes = np.concatenate([g.codes for g in games]).astype(np.int64)
    counts = np.concatenate([g.counts for g in games]).astype(np.int64)
    P = len(counts)
    ply_game = np.repeat(np.arange(B), n)
    ply_abs = start[ply_game] + np.arange(P) - _cumsum0(n)[ply_game]
    lead = lead_of[ply_game]
    # the played triple of each ply (-1 where the main line stops before it)
    has = ply_abs < (L[ply_game] - lead - 1) // 3
    first = main_off[ply_game] + lead + 1 + 3 * ply_abs
    played = [
        np.where(has, np.take(main, first + j, mode="clip") - (tokens.PROMO_NONE if j == 2 else 0),
                 -1)
        for j in range(3)
    ]  # fmt: skip
    return _Flat(B, L, lead, main, main_off, counts, ply_game, ply_abs,
                 move_ply=np.repeat(np.arange(P), counts), src=codes // 320,
                 dst=(codes // 5) % 64, pro=codes % 5, played=played)  # fmt: skip


def _keys(f: _Flat) -> dict[str, np.ndarray]:
    """(ply, source) keys, in move order; an unplayed source is a branch token after the main
    line (``branch``), the played one is the main line's token."""
    new_key = _starts(f.move_ply * 64 + f.src)
    key_first = np.nonzero(new_key)[0]
    key_ply, key_src = f.move_ply[key_first], f.src[key_first]
    key_game = f.ply_game[key_ply]
    branch = key_src != f.played[0][key_ply]
    rank, n_src = _rank_in_game(key_game[branch], f.B)
    local = f.lead[key_ply] + 1 + 3 * f.ply_abs[key_ply]
    local[branch] = f.L.max() + rank
    return {"of_move": np.cumsum(new_key) - 1, "ply": key_ply, "src": key_src, "game": key_game,
            "branch": branch, "local": local, "n_src": n_src}  # fmt: skip


def _pairs(f: _Flat, keys: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Promoting (ply, source, destination) pairs, likewise: an unplayed pair is a branch token
    after the game's source branches."""
    promo_moves = np.nonzero(f.pro > 0)[0]
    new_pair = _starts(
        (f.move_ply[promo_moves] * 64 + f.src[promo_moves]) * 64 + f.dst[promo_moves]
    )
    pair_first = promo_moves[new_pair]
    move_pair = np.full(len(f.src), -1, dtype=np.int64)
    move_pair[promo_moves] = np.cumsum(new_pair) - 1
    pair_ply, pair_src = f.move_ply[pair_first], f.src[pair_first]
    pair_dst = f.dst[pair_first]
    pair_game = f.ply_game[pair_ply]
    branch = (pair_src != f.played[0][pair_ply]) | (pair_dst != f.played[1][pair_ply])
    rank, n_pair = _rank_in_game(pair_game[branch], f.B)
    local = f.lead[pair_ply] + 2 + 3 * f.ply_abs[pair_ply]
    local[branch] = f.L.max() + keys["n_src"][pair_game[branch]] + rank
    return {"of_move": move_pair, "ply": pair_ply, "dst": pair_dst, "game": pair_game,
            "key": keys["of_move"][pair_first], "branch": branch, "local": local,
            "n_pair": n_pair}  # fmt: skip


def _rows(
    f: _Flat, keys: dict[str, np.ndarray], pairs: dict[str, np.ndarray], T: int
) -> dict[str, np.ndarray]:
    """The (B * T) token ids, position ids and attention bounds of the padded rows."""
    idx = np.full(f.B * T, tokens.PAD, dtype=np.int64)
    pos = np.zeros(f.B * T, dtype=np.int64)
    prefix = np.zeros(f.B * T, dtype=np.int64)  # padding attends to itself only
    extra = np.full(f.B * T, -1, dtype=np.int64)
    main_game = np.repeat(np.arange(f.B), f.L)
    local = np.arange(len(f.main)) - f.main_off[main_game]
    rows = main_game * T + local
    idx[rows], pos[rows], prefix[rows] = f.main, local, local + 1
    bk = keys["branch"]
    rows = keys["game"][bk] * T + keys["local"][bk]
    at = f.lead[keys["ply"][bk]] + 3 * f.ply_abs[keys["ply"][bk]]  # the ply's BOS-relative 0
    idx[rows], pos[rows], prefix[rows] = keys["src"][bk], 1 + at, 1 + at
    bp = pairs["branch"]
    rows = pairs["game"][bp] * T + pairs["local"][bp]
    at = f.lead[pairs["ply"][bp]] + 3 * f.ply_abs[pairs["ply"][bp]]
    idx[rows], pos[rows], prefix[rows] = pairs["dst"][bp], 2 + at, 1 + at
    extra[rows] = keys["local"][pairs["key"][bp]]  # the pair's source token, in the same row
    return {"idx": idx, "pos": pos, "prefix": prefix, "extra": extra}


def _pack(parts: dict[str, np.ndarray], pin: bool) -> tuple[torch.Tensor, dict]:
    """Everything the device needs in ONE (pinned, on CUDA) host buffer: one non-blocking copy
    per batch instead of a dozen synchronous ones from pageable memory."""
    total = sum(len(a) for a in parts.values())
    packed = torch.empty(total, dtype=torch.int64, pin_memory=pin)
    flat = packed.numpy()
    layout, at = {}, 0
    for name, a in parts.items():
        flat[at : at + len(a)] = a
        layout[name] = (at, len(a))
        at += len(a)
    return packed, layout


def prepare(games: Sequence[GameInput], *, pad_to: int = 1, pin: bool = False) -> Batch:
    """The host half of a batch: the branched sequences of ``games`` padded into rows (to a
    multiple of ``pad_to`` tokens), vectorised over the whole batch (no per-game or per-ply
    Python loop), packed into one buffer (``pin``: page-locked, for a non-blocking copy)."""
    f = _flatten(games)
    keys = _keys(f)
    pairs = _pairs(f, keys)
    T = int(f.L.max() + (keys["n_src"] + pairs["n_pair"]).max())
    T = -(-T // pad_to) * pad_to  # fewer distinct shapes (compiled kernels) and aligned rows
    rows = _rows(f, keys, pairs, T)
    W = int(f.L.max())
    aside = np.nonzero(rows["extra"] >= W)[0]  # a pair whose source is a branch: split's case
    played = f.played
    is_played = (f.src == played[0][f.move_ply]) & (f.dst == played[1][f.move_ply])
    is_played &= f.pro == played[2][f.move_ply]
    played_move = np.full(len(f.counts), -1, dtype=np.int64)
    played_move[f.move_ply[is_played]] = np.nonzero(is_played)[0]
    arrays = {
        "before_rows": f.ply_game * T + f.lead + 3 * f.ply_abs,
        "key_rows": keys["game"] * T + keys["local"],
        "key_ply": keys["ply"],
        "key_src": keys["src"],
        "pair_rows": pairs["game"] * T + pairs["local"],
        "move_ply": f.move_ply,
        "move_key": keys["of_move"],
        "move_pair": pairs["of_move"],
        "move_dst": f.dst,
        "move_pro": f.pro,
        "played": played_move,
        "ply_game": f.ply_game,
        "ply_number": f.ply_abs,
    }
    packed, layout = _pack({
        **rows,
        **{k: arrays[k] for k in DEVICE_ARRAYS},
        "rows": np.concatenate([arrays["before_rows"], arrays["key_rows"], arrays["pair_rows"]]),
        "aside_row": aside // T, "aside_at": aside % T - W, "aside_src": rows["extra"][aside] - W,
    }, pin)  # fmt: skip
    return Batch(**arrays, max_pos=int(rows["pos"].max()), shape=(f.B, T),
                 width=W, n_aside=len(aside), counts=f.counts, packed=packed,
                 layout=layout)  # fmt: skip


def to_device(batch: Batch, device: torch.device | str) -> Batch:
    """Copy a prepared batch's packed buffer to ``device`` (non-blocking from pinned memory)
    and fill in its device tensors (views of that one copy)."""
    buf = batch.packed.to(torch.device(device), non_blocking=True)
    B, T = batch.shape
    view = {name: buf[at : at + n] for name, (at, n) in batch.layout.items()}
    batch.idx, batch.pos = view["idx"].view(B, T), view["pos"].view(B, T)
    batch.prefix, batch.extra = view["prefix"].view(B, T), view["extra"].view(B, T)
    batch.dev = {k: view[k] for k in (*DEVICE_ARRAYS, "rows", *ASIDE)}
    return batch


def build_batch(
    games: Sequence[GameInput], device: torch.device | str, *, pad_to: int = 1
) -> Batch:
    """The branched sequences of ``games`` padded into one batch of rows, on ``device``."""
    return to_device(prepare(games, pad_to=pad_to, pin=_is_cuda(device)), device)


def _is_cuda(device: torch.device | str) -> bool:
    return torch.device(device).type == "cuda"


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


def mask_for(batch: Batch, attention: str):  # noqa: ANN201
    """The branched rows' attention mask: ``split`` (``split.Split``: the main lines causal,
    the branches over them), ``dense`` (a bool tensor) or ``flex`` (BlockMask)."""
    if attention == "split":
        aside = tuple(batch.dev[k] for k in ASIDE)
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
def heads_at(net: gpt.GPT, batch: Batch, mask) -> tuple[torch.Tensor, Any]:  # noqa: ANN001
    """``logits_at``'s logits and, with an outcome head, its FP32 win/draw/loss probabilities
    (P, 3) at each ply's before-source row: the position, the outcome targets' token."""
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
        head = net.outcome_head(h[: len(batch.before_rows)]) if net.config.outcome else None
    return logits.float(), None if head is None else head.float().softmax(-1)


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
    logits, wdl = heads_at(net, batch, mask_for(batch, attention))
    return dataclasses.replace(score_logits(batch, logits), wdl=wdl)


def plan_batches(lengths: Sequence[int], batch_tokens: int) -> list[list[int]]:
    """Game indices grouped into batches of at most ``batch_tokens`` padded tokens, shortest
    games first (a batch pads to its longest game; a game longer than the budget is alone)."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    groups: list[list[int]] = []
    for i in order:
        if groups and (len(groups[-1]) + 1) * lengths[i] <= batch_tokens:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def score_many(net: gpt.GPT, games: Sequence[GameInput], **kw: Any) -> Iterator[tuple]:
    """Score ``games`` batch by batch (``score_chunks``' keywords, one chunk): yields (game
    indices, batch, host results with ``rank``, ``played_logp``, ``n_legal`` per scored ply,
    and ``wdl`` (P, 3) with an outcome head)."""
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
    cuda = _is_cuda(device)

    def planned() -> Iterator[tuple[int, list[int], Batch, bool]]:
        for c, games in enumerate(chunks):
            groups = plan_batches(branched_lengths(games).tolist(), batch_tokens)
            for k, group in enumerate(groups):
                batch = prepare([games[i] for i in group], pad_to=pad_to, pin=cuda)
                yield c, group, batch, k == len(groups) - 1

    items = planned()
    pending: deque[tuple] = deque()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="play-prepare") as pool:
        ahead = deque(pool.submit(next, items, None) for _ in range(IN_FLIGHT))
        while (item := ahead.popleft().result()) is not None:
            ahead.append(pool.submit(next, items, None))
            c, group, host_batch, last = item
            batch = to_device(host_batch, device)
            fetch = start_fetch(score(net, batch, attention=attention), cuda)
            pending.append((c, group, batch, fetch, last))
            if len(pending) > IN_FLIGHT:
                yield finish(*pending.popleft())
        while pending:
            yield finish(*pending.popleft())


def start_fetch(s: Scores, cuda: bool) -> tuple[Any, ...]:
    """Start copying a batch's results to the host (pinned, non-blocking on CUDA): rank,
    played log-probability, W/D/L (None without the head) and the event to wait for."""
    if not cuda:
        return s.rank, s.played_logp, s.wdl, None
    out = [None if t is None else torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
           for t in (s.rank, s.played_logp, s.wdl)]  # fmt: skip
    for host, t in zip(out, (s.rank, s.played_logp, s.wdl), strict=True):
        if t is not None:
            host.copy_(t, non_blocking=True)
    done = torch.cuda.Event()
    done.record()
    return (*out, done)


def finish(chunk: int, group: list[int], batch: Batch, fetch: tuple, last: bool) -> Scored:
    rank, logp, wdl, done = fetch
    if done is not None:
        done.synchronize()
    host = {
        "rank": rank.numpy(),
        "played_logp": logp.numpy(),
        "n_legal": batch.counts.copy(),
    }
    if wdl is not None:  # the outcome head's (P, 3) win/draw/loss at each scored position
        host["wdl"] = wdl.numpy()
    return Scored(chunk, group, batch, host, last)


def game_input(
    game_tokens: np.ndarray, codes: np.ndarray, offsets: np.ndarray, prefix: Sequence[int] = ()
) -> GameInput:
    """A cached validation game (tokens with BOS and EOS) and its plies' legal codes
    (``codes[offsets[i]:offsets[i + 1]]`` for its ply ``i``); ``prefix``: the tokens before
    BOS (a conditioned model's ratings)."""
    g = np.asarray(game_tokens, dtype=np.int64)
    plies = (len(g) - 2) // 3
    return GameInput(
        main=g[:-1],
        codes=np.asarray(codes[offsets[0] : offsets[plies]], dtype=np.int64),
        counts=np.diff(np.asarray(offsets[: plies + 1], dtype=np.int64)),
        prefix=np.asarray(prefix, dtype=np.int64),
    )


legal_codes = board_codes  # a board's sorted legal move codes (the one rule, torch-free)


def decode_code(code: int) -> chess.Move:
    code = int(code)
    return tokens.decode_move((code // 320, (code // 5) % 64, tokens.PROMO_NONE + code % 5))
