"""Scores of every legal move of many positions in one forward pass per batch of games.

The model's move distribution over the legal moves factorises as
``P(source) · P(destination | source) · P(promotion | source, destination)``, each factor
renormalised over the tokens that are legal at that step (so the promotion factor of a
non-promotion move is exactly 1, and the scores of a position's legal moves sum to one).
Scoring every legal move needs the model's outputs after every legal *source* (and, for
promotions, after every promoting source-destination pair), not only after the played one.

One game becomes one *branched* sequence: the main line (BOS and the played triples) and,
after it, one extra token per unplayed legal source of each ply (placed at the position the
source would have, attending only to the main line before that ply and to itself) and one
per unplayed promoting destination (attending to that prefix, its source token and itself).
An explicit attention mask and explicit position ids make every branch token see exactly what
it would see in a plain causal pass over its own prefix, so one forward pass scores them all.
``oracle_scores`` is the plain loop (one causal pass per legal move) the tests compare with.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import chess
import numpy as np
import torch

from chesslm.data import tokens
from chesslm.data.cache import move_code
from chesslm.train import model as gpt

NEG_INF = float("-inf")


@dataclass
class GameInput:
    """One game to score: its main line and the legal move codes of each ply scored.

    ``main`` is BOS followed by the played triples (no EOS). Plies ``start .. start +
    len(legal) - 1`` are scored; a ply whose triple is not in ``main`` (the position after the
    main line, when the model is to move) has no played move."""

    main: np.ndarray
    legal: list[np.ndarray]  # per scored ply: int legal move codes
    start: int = 0  # the first ply scored (earlier plies are context only)


@dataclass
class Batch:
    """Branched token rows and the index arrays that read the moves' scores off them."""

    idx: torch.Tensor  # (B, T) token ids
    pos: torch.Tensor  # (B, T) position ids
    prefix: torch.Tensor  # (B, T) a token attends to the main-line tokens before this index
    extra: torch.Tensor  # (B, T) and to this one more token (its branch source; -1: none)
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


def _branch_game(game: GameInput) -> dict[str, np.ndarray]:
    """The branched sequence of one game (local row numbers)."""
    main = np.asarray(game.main, dtype=np.int64)
    L = len(main)
    n = len(game.legal)
    counts = np.array([len(c) for c in game.legal], dtype=np.int64)
    codes = np.concatenate(game.legal).astype(np.int64) if n else np.zeros(0, np.int64)
    ply = game.start + np.repeat(np.arange(n, dtype=np.int64), counts)  # absolute plies
    src, dst, pro = codes // 320, (codes // 5) % 64, codes % 5
    n_played = (L - 1) // 3
    played = np.full((game.start + n, 3), -1, dtype=np.int64)
    k = min(game.start + n, n_played)
    if k:
        played[:k] = main[1 : 1 + 3 * k].reshape(k, 3)
        played[:k, 2] -= tokens.PROMO_NONE

    # (ply, source) keys: the played source is the main-line token, the others branch
    key_id, key_of_move = np.unique(ply * 64 + src, return_inverse=True)
    key_ply, key_src = key_id // 64, key_id % 64
    key_is_main = key_src == played[key_ply, 0]
    n_branch_src = int((~key_is_main).sum())
    key_rows = np.empty(len(key_id), dtype=np.int64)
    key_rows[key_is_main] = 1 + 3 * key_ply[key_is_main]
    key_rows[~key_is_main] = L + np.arange(n_branch_src)

    # promoting (ply, source, destination) pairs, likewise
    is_promo = pro > 0
    pair_id, pair_inv = np.unique(
        (ply[is_promo] * 64 + src[is_promo]) * 64 + dst[is_promo], return_inverse=True
    )
    pair_ply, pair_src, pair_dst = pair_id // 4096, (pair_id // 64) % 64, pair_id % 64
    pair_is_main = (pair_src == played[pair_ply, 0]) & (pair_dst == played[pair_ply, 1])
    n_branch_pair = int((~pair_is_main).sum())
    pair_rows = np.empty(len(pair_id), dtype=np.int64)
    pair_rows[pair_is_main] = 2 + 3 * pair_ply[pair_is_main]
    pair_rows[~pair_is_main] = L + n_branch_src + np.arange(n_branch_pair)
    pair_key = np.searchsorted(key_id, pair_ply * 64 + pair_src)
    move_pair = np.full(len(codes), -1, dtype=np.int64)
    move_pair[is_promo] = pair_inv.reshape(-1)

    bk = ~key_is_main
    bp = ~pair_is_main
    idx = np.concatenate([main, key_src[bk], pair_dst[bp]])
    pos = np.concatenate([np.arange(L), 1 + 3 * key_ply[bk], 2 + 3 * pair_ply[bp]])
    prefix = np.concatenate([np.arange(1, L + 1), 1 + 3 * key_ply[bk], 1 + 3 * pair_ply[bp]])
    extra = np.concatenate([np.full(L + n_branch_src, -1, dtype=np.int64), key_rows[pair_key[bp]]])
    move_is_played = (src == played[ply, 0]) & (dst == played[ply, 1]) & (pro == played[ply, 2])
    played_move = np.full(n, -1, dtype=np.int64)
    played_move[ply[move_is_played] - game.start] = np.nonzero(move_is_played)[0]
    return {
        "idx": idx, "pos": pos, "prefix": prefix, "extra": extra,
        "before_rows": 3 * (game.start + np.arange(n, dtype=np.int64)),
        "key_rows": key_rows, "key_ply": key_ply - game.start, "key_src": key_src,
        "pair_rows": pair_rows,
        "move_ply": ply - game.start, "move_key": key_of_move.reshape(-1), "move_pair": move_pair,
        "move_dst": dst, "move_pro": pro, "played": played_move,
    }  # fmt: skip


def branched_length(game: GameInput) -> int:
    """Tokens of a game's branched sequence (for batching by length)."""
    keys = sum(len(np.unique(np.asarray(c) // 320)) for c in game.legal)
    return len(game.main) + keys


def build_batch(games: Sequence[GameInput], device: torch.device | str) -> Batch:
    """Pad the branched sequences of ``games`` into one batch of rows."""
    parts = [_branch_game(g) for g in games]
    T = max(len(p["idx"]) for p in parts)
    B = len(parts)
    idx = np.full((B, T), tokens.PAD, dtype=np.int64)
    pos = np.zeros((B, T), dtype=np.int64)
    prefix = np.zeros((B, T), dtype=np.int64)  # padding attends to itself only
    extra = np.full((B, T), -1, dtype=np.int64)
    out: dict[str, list[np.ndarray]] = {
        k: []
        for k in ("before_rows", "key_rows", "key_ply", "key_src", "pair_rows", "move_ply",
                  "move_key", "move_pair", "move_dst", "move_pro", "played", "ply_game",
                  "ply_number")
    }  # fmt: skip
    n_ply = n_key = n_pair = n_move = 0
    for b, p in enumerate(parts):
        n = len(p["idx"])
        idx[b, :n], pos[b, :n], prefix[b, :n], extra[b, :n] = (
            p["idx"],
            p["pos"],
            p["prefix"],
            p["extra"],
        )
        base = b * T
        out["before_rows"].append(base + p["before_rows"])
        out["key_rows"].append(base + p["key_rows"])
        out["key_ply"].append(n_ply + p["key_ply"])
        out["key_src"].append(p["key_src"])
        out["pair_rows"].append(base + p["pair_rows"])
        out["move_ply"].append(n_ply + p["move_ply"])
        out["move_key"].append(n_key + p["move_key"])
        out["move_pair"].append(np.where(p["move_pair"] >= 0, n_pair + p["move_pair"], -1))
        out["move_dst"].append(p["move_dst"])
        out["move_pro"].append(p["move_pro"])
        out["played"].append(np.where(p["played"] >= 0, n_move + p["played"], -1))
        plies = len(p["before_rows"])
        out["ply_game"].append(np.full(plies, b, dtype=np.int64))
        out["ply_number"].append(games[b].start + np.arange(plies, dtype=np.int64))
        n_ply += plies
        n_key += len(p["key_rows"])
        n_pair += len(p["pair_rows"])
        n_move += len(p["move_ply"])
    to = torch.device(device)
    return Batch(
        idx=torch.from_numpy(idx).to(to),
        pos=torch.from_numpy(pos).to(to),
        prefix=torch.from_numpy(prefix).to(to),
        extra=torch.from_numpy(extra).to(to),
        **{k: np.concatenate(v) if v else np.zeros(0, np.int64) for k, v in out.items()},
    )


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


def hidden_states(net: gpt.GPT, batch: Batch, mask) -> torch.Tensor:  # noqa: ANN001
    """The last block's output (B, T, C) for explicit positions and mask (GPT.forward with
    ``pos``/``mask`` minus its length check: a branched row may be longer than the context,
    its positions never are)."""
    t = net.transformer
    x = t.wte(batch.idx) + t.wpe(batch.pos)
    for block in t.h:
        x = block(x, mask)
    return x


@dataclass
class Scores:
    """Per scored ply: log-probability and rank of the played move; per move: its score."""

    move_logp: torch.Tensor  # (M,) float32
    played_logp: torch.Tensor  # (P,) float32 (nan where no played move)
    rank: torch.Tensor  # (P,) moves scoring strictly higher than the played one
    n_legal: torch.Tensor  # (P,)


@torch.no_grad()
def score(net: gpt.GPT, batch: Batch, *, attention: str = "dense") -> Scores:
    """Every legal move's log-probability (legal-renormalised factorisation) in one pass."""
    device = batch.idx.device
    if int(batch.pos.max()) >= net.config.block_size:
        raise ValueError(f"a game is longer than the model's context {net.config.block_size}")
    mask = (
        block_mask(batch.prefix, batch.extra)
        if attention == "flex"
        else dense_mask(batch.prefix, batch.extra)
    )
    with gpt.autocast(device):
        x = hidden_states(net, batch, mask)
        C = x.size(-1)
        x = x.reshape(-1, C)
        rows = np.concatenate([batch.before_rows, batch.key_rows, batch.pair_rows])
        logits = net.lm_head(net.transformer.ln_f(x[torch.from_numpy(rows).to(device)]))
    logits = logits.float()
    P, K = len(batch.before_rows), len(batch.key_rows)

    def t(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(a).to(device)

    move_ply, move_key, move_pair = t(batch.move_ply), t(batch.move_key), t(batch.move_pair)
    move_dst, move_pro = t(batch.move_dst), t(batch.move_pro)
    key_ply, key_src = t(batch.key_ply), t(batch.key_src)

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
    if bool(promo.any()):
        Q = len(batch.pair_rows)
        pro_ok = torch.zeros(Q, 5, dtype=torch.bool, device=device)
        pro_ok[move_pair[promo], move_pro[promo]] = True
        z = logits[P + K :, tokens.PROMO_NONE : tokens.PROMO_NONE + 5]
        ls_pro = masked_log_softmax(z, pro_ok)
        logp = logp.clone()
        logp[promo] += ls_pro[move_pair[promo], move_pro[promo]]
    played = t(batch.played)
    has = played >= 0
    played_logp = torch.full((P,), float("nan"), device=device)
    played_logp[has] = logp[played[has]]
    better = (logp > played_logp[move_ply]).to(torch.int64)
    rank = torch.zeros(P, dtype=torch.int64, device=device).index_add_(0, move_ply, better)
    n_legal = torch.bincount(move_ply, minlength=P)
    return Scores(logp, played_logp, rank, n_legal)


def game_input(game_tokens: np.ndarray, codes: np.ndarray, offsets: np.ndarray) -> GameInput:
    """A cached validation game (tokens with BOS and EOS) and its plies' legal codes
    (``codes[offsets[i]:offsets[i + 1]]`` for its ply ``i``)."""
    g = np.asarray(game_tokens, dtype=np.int64)
    plies = (len(g) - 2) // 3
    legal = [np.asarray(codes[offsets[i] : offsets[i + 1]]) for i in range(plies)]
    return GameInput(main=g[:-1], legal=legal)


def legal_codes(board: chess.Board) -> np.ndarray:
    return np.array(
        sorted(move_code(*tokens.move_tokens(m)) for m in board.legal_moves), dtype=np.int64
    )


def decode_code(code: int) -> chess.Move:
    code = int(code)
    return tokens.decode_move((code // 320, (code // 5) % 64, tokens.PROMO_NONE + code % 5))


@torch.no_grad()
def oracle_scores(
    net: gpt.GPT, moves: Sequence[chess.Move], plies: set[int] | None = None
) -> dict[int, dict[chess.Move, float]]:
    """The test oracle: per ply of a game (``plies``: those only), every legal move's
    log-probability from a plain causal pass over that move's own prefix (one pass per legal
    move), with the legal token sets from ``tokens.State`` (python-chess)."""
    device = next(net.parameters()).device
    out = {}
    board = chess.Board()
    prefix = [tokens.BOS]
    for ply, played in enumerate(moves):
        if plies is not None and ply not in plies:
            board.push(played)
            prefix += list(tokens.move_tokens(played))
            continue
        state = tokens.State(board)
        state.feed(tokens.BOS)
        src_ok = torch.tensor(state.mask(legal=True)[:64])
        per_move = {}
        for move in board.legal_moves:
            s, d, p = tokens.move_tokens(move)
            with gpt.autocast(device):
                logits = net(torch.tensor([prefix + [s, d]], device=device))[0].float().cpu()
            branch = tokens.State(board)
            branch.feed(tokens.BOS)
            branch.feed(s)
            dst_ok = torch.tensor(branch.mask(legal=True)[:64])
            branch.feed(d)
            pro_ok = torch.tensor(branch.mask(legal=True)[64:69])
            lp = torch.log_softmax(logits[-3, :64].masked_fill(~src_ok, NEG_INF), -1)[s]
            lp = lp + torch.log_softmax(logits[-2, :64].masked_fill(~dst_ok, NEG_INF), -1)[d]
            if move.promotion is not None:
                z = logits[-1, 64:69].masked_fill(~pro_ok, NEG_INF)
                lp = lp + torch.log_softmax(z, -1)[p - tokens.PROMO_NONE]
            per_move[move] = float(lp)
        out[ply] = per_move
        board.push(played)
        prefix += list(tokens.move_tokens(played))
    return out
