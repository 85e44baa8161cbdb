"""A batch of games as *branched* token rows, built on the host (NumPy, one pinned buffer) and
copied to the device in one piece: what ``chesslm.scorer.scoring`` scores in one forward pass.

One game becomes one branched sequence: the main line (BOS and the played triples) and,
after it (in a batch, after the longest main line: every row's branches start at ``width``),
one extra token per unplayed legal source of each ply (placed at the position the
source would have, attending only to the main line before that ply and to itself) and one
per unplayed promoting destination (attending to that prefix, its source token and itself).
Explicit attention bounds (``prefix``, ``extra``) and explicit position ids make every branch
token see exactly what it would see in a plain causal pass over its own prefix, so one
forward pass scores them all; ``chesslm.scorer.split`` computes that pass's attention without
the branch-against-branch scores a mask would throw away.

A rating-conditioned model (``chesslm.data.conditioning``) reads each game as its rating
prefix, then BOS and the triples: a game's ``prefix`` goes in front of its main line, every
position id shifts by its length, and every branch token attends to it as to the rest of the
main line before its ply (an empty prefix leaves every row exactly as without conditioning).

``plan_batches`` groups games into batches of a token budget; a batch pads every row to its
longest main line plus its most branch tokens (``chesslm.match.matching.chunked`` orders games
so that a batch's are of about one length).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from chesslm.data import tokens


@dataclass
class GameInput:
    """One game to score: its main line and the legal move codes of each ply scored.

    ``main`` is BOS followed by the played triples (no EOS). Plies ``start .. start +
    len(counts) - 1`` are scored; ``codes`` holds their legal move codes back to back
    (``counts`` per ply), sorted within each ply as the token cache stores them. A ply whose
    triple is not in ``main`` (the position after the main line, when the model is to move)
    has no played move. ``prefix``: the input tokens before BOS (a conditioned model's rating
    tokens; empty for a model without conditioning). ``time``: a timed model's (positions, 4)
    time rows at the main line's positions (BOS and each triple's last token:
    ``chesslm.scorer.times``), None for a model without time inputs."""

    main: np.ndarray
    codes: np.ndarray
    counts: np.ndarray
    start: int = 0
    prefix: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    time: np.ndarray | None = None

    @classmethod
    def from_plies(
        cls,
        main: Sequence[int],
        legal: Sequence[np.ndarray],
        start: int = 0,
        prefix: Sequence[int] = (),
        time: np.ndarray | None = None,
    ):  # noqa: ANN206
        """From one array of legal codes per scored ply."""
        codes = [np.sort(np.asarray(c, dtype=np.int64)) for c in legal]
        return cls(
            main=np.asarray(main, dtype=np.int64),
            codes=np.concatenate(codes) if codes else np.zeros(0, np.int64),
            counts=np.array([len(c) for c in codes], dtype=np.int64),
            start=start,
            prefix=np.asarray(prefix, dtype=np.int64),
            time=time,
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
    time: torch.Tensor | None = None  # (B, T, 4) a timed model's time rows (0 off positions)
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
    lead_of: np.ndarray  # (B,) prefix tokens of each game
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
    return _Flat(B, L, lead_of, lead, main, main_off, counts, ply_game, ply_abs,
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


def _time_rows(games: Sequence[GameInput], f: _Flat, T: int) -> dict[str, np.ndarray]:
    """A timed batch's (B * T * 4) time rows: each game's at its main line's positions (BOS
    and each triple's last token), row 0 elsewhere (branch tokens, padding); none (an empty
    dict) for games without time rows."""
    given = [g.time is not None for g in games]
    if not any(given):
        return {}
    if not all(given):
        raise ValueError("a batch mixes games with time rows and games without")
    rows = [np.asarray(g.time, dtype=np.int64) for g in games]
    n = np.array([len(r) for r in rows], dtype=np.int64)
    want = np.array([(len(g.main) - 1) // 3 + 1 for g in games], dtype=np.int64)
    if (n != want).any():
        k = int(np.flatnonzero(n != want)[0])
        raise ValueError(f"game {k} of the batch has {n[k]} time rows for {want[k]} positions")
    game = np.repeat(np.arange(len(games)), n)
    k = np.arange(int(n.sum())) - _cumsum0(n)[game]
    out = np.zeros((f.B * T, 4), dtype=np.int64)
    out[game * T + f.lead_of[game] + 3 * k] = np.concatenate(rows)
    return {"time": out.reshape(-1)}


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
        **_time_rows(games, f, T),
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
    batch.time = view["time"].view(B, T, 4) if "time" in view else None
    batch.dev = {k: view[k] for k in (*DEVICE_ARRAYS, "rows", *ASIDE)}
    return batch


def build_batch(
    games: Sequence[GameInput], device: torch.device | str, *, pad_to: int = 1
) -> Batch:
    """The branched sequences of ``games`` padded into one batch of rows, on ``device``."""
    return to_device(prepare(games, pad_to=pad_to, pin=is_cuda(device)), device)


def is_cuda(device: torch.device | str) -> bool:
    return torch.device(device).type == "cuda"


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


def game_input(
    game_tokens: np.ndarray,
    codes: np.ndarray,
    offsets: np.ndarray,
    prefix: Sequence[int] = (),
    time: np.ndarray | None = None,
) -> GameInput:
    """A cached validation game (tokens with BOS and EOS) and its plies' legal codes
    (``codes[offsets[i]:offsets[i + 1]]`` for its ply ``i``); ``prefix``: the tokens before
    BOS (a conditioned model's ratings); ``time``: its time rows (a timed model's)."""
    g = np.asarray(game_tokens, dtype=np.int64)
    plies = (len(g) - 2) // 3
    return GameInput(
        main=g[:-1],
        codes=np.asarray(codes[offsets[0] : offsets[plies]], dtype=np.int64),
        counts=np.diff(np.asarray(offsets[: plies + 1], dtype=np.int64)),
        prefix=np.asarray(prefix, dtype=np.int64),
        time=None if time is None else np.asarray(time)[: plies + 1],
    )
