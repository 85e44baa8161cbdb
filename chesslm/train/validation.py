"""Validation metrics on raw, teacher-forced next-token logits, computed on the device.

Nothing is masked or renormalised. Legality comes from the token cache's precomputed tables
(``validation.legal_mask`` rows and per-ply legal move codes), so this module needs no chess
engine and no per-token Python loop. The triple legality is teacher-forced: the destination
is predicted after the *gold* source and the promotion after the gold source and destination;
it is not a free-running legal-move rate.

Under rating conditioning the games are fed with their rating prefix; the prefix positions
(which have no targets) are cut from the logits before anything is counted, so every metric
counts move positions only, with phases relative to BOS, exactly as without conditioning.

With the outcome head (``runs.NAME.outcome``) the same forward also gives the outcome logits:
the record's ``outcome`` entry has their NLL over every validation position of a game with a
known result, and the frequency baseline's (``chesslm.train.outcome``). Best and patience
stay the move NLL's. With the time inputs (``runs.NAME.time_inputs``) the games are fed with
their time rows; with the think-time head (``runs.NAME.think_time``) the record's
``think_time`` entry has its NLL over every validation position whose time spent is known, and
the frequency baseline's (``chesslm.train.human_time``).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from chesslm.data import tokens
from chesslm.data.cache import N_MOVE_CODES, TokenCache
from chesslm.data.tokens import PHASES
from chesslm.model import gpt
from chesslm.train import batching
from chesslm.train.deadline import Deadline
from chesslm.train.human_time import GameTimes, ValidationThinkTimes
from chesslm.train.loss import IGNORE
from chesslm.train.outcome import ValidationOutcomes
from chesslm.train.prefix import Prefixes
from chesslm.train.settings import legality_request_error

logger = logging.getLogger(__name__)

LEGALITY_SUBSET = (
    "N evenly spaced game indices across immutable validation shard order, within the token"
    " cache's legality subset (itself evenly spaced); N=None means the whole subset"
)
PROTOCOL = (
    "raw128 teacher-forced next-token logits; triple destination/promotion conditioned on gold"
    " prefix; not free-running"
)


# Games per validation forward. On a GPU a batch of 8 (the training microbatch) is launch-bound:
# validating 10k games took 12.3 s on an H200 where 64 a batch keeps it busy. The CPU keeps 8,
# so the CPU runs' figures stay what they were.
GAMES_PER_BATCH = {"cpu": 8, "cuda": 64}


def games_per_batch(device: torch.device) -> int:
    return GAMES_PER_BATCH.get(device.type, 8)


def legality_indices(n_games: int, sample: int | None) -> set[int]:
    """``sample`` evenly spaced game indices (all games when None).

    >>> sorted(legality_indices(10, 3))
    [0, 3, 6]
    """
    if n_games < 1:
        raise ValueError("validation data must be nonempty")
    size = min(n_games, sample) if sample is not None else n_games
    if size < 1:
        raise ValueError(f"legality sample must be positive, got {sample!r}")
    return {i * n_games // size for i in range(size)}


class ValidationSet:
    """The validation games and their legality tables, moved to ``device`` once.

    NLL and accuracy cover every validation game; legality covers ``legality_games`` games
    picked evenly within the cache's legality subset (the games it has tables for).
    """

    def __init__(
        self,
        cache: TokenCache,
        device: torch.device,
        *,
        legality_games: int | None,
        key: str = "legality_eval_games",
        conditioning: str = "none",
        outcome: bool = False,
        time_inputs: bool = False,
        think_time: bool = False,
    ) -> None:
        """``conditioning``: the run's layout (the games' rating prefix, from the cache's Elo
        columns); ``outcome``: score the outcome head too (the cache's result columns);
        ``time_inputs``: feed the games' time rows; ``think_time``: score the think-time head
        (both from the cache's clock and time-control columns).
        :raises ValueError: naming ``key`` if ``legality_games`` is more games than
        the cache has legality tables for."""
        self.games = cache.validation
        self.device = device
        self.prefixes = Prefixes.of_cache(cache, "validation", conditioning)
        self.outcomes = ValidationOutcomes(cache, device) if outcome else None
        self.times = GameTimes.of_cache(cache, "validation") if time_inputs else None
        self.think_times = ValidationThinkTimes(cache, device) if think_time else None
        n = len(self.games)
        subset = cache.legality_games()
        error = legality_request_error(
            legality_games,
            available=len(subset),
            validation_games=n,
            key=key,
            cache=cache.directory,
        )
        if error:
            raise ValueError(error)
        chosen = subset[sorted(legality_indices(len(subset), legality_games))]
        row_start, sub_ply_start = cache.legality_starts()
        at = np.searchsorted(subset, chosen)  # positions of the chosen games in the tables
        # per validation game: its first mask row and first ply in the tables (0 for a game
        # without tables: its rows are read but never counted)
        token_offsets = np.zeros(n, dtype=np.int64)
        token_offsets[chosen] = row_start[at]
        ply_start = np.zeros(n, dtype=np.int64)
        ply_start[chosen] = sub_ply_start[at]
        self.token_offsets = torch.from_numpy(token_offsets).to(device)
        self.ply_start = torch.from_numpy(ply_start).to(device)
        self.packed_mask = torch.from_numpy(np.array(cache.legal_mask())).to(
            device
        )  # copy: mmap is read-only
        codes, offsets = cache.legal_moves()
        ply_of_code = np.repeat(np.arange(len(offsets) - 1, dtype=np.int64), np.diff(offsets))
        # one globally sorted key per legal move: plies in order, codes sorted within a ply
        keys = ply_of_code * N_MOVE_CODES + np.asarray(codes, dtype=np.int64)
        self.legal_keys = torch.from_numpy(keys).to(device)
        selected = np.zeros(n, dtype=bool)
        selected[chosen] = True
        self.selected = torch.from_numpy(selected).to(device)
        self.bit_shifts = torch.arange(8, dtype=torch.uint8, device=device)

    def __len__(self) -> int:
        return len(self.games)

    def legal(self, games: torch.Tensor, T: int) -> torch.Tensor:
        """bool (B, T, vocab): tokens legal as target t of each game (its mask row t)."""
        rows = self.token_offsets[games].unsqueeze(1) + torch.arange(T, device=self.device)
        rows = rows.clamp(
            max=self.packed_mask.size(0) - 1
        )  # padding positions: any row, masked later
        packed = self.packed_mask[rows]  # (B, T, 16)
        bits = (packed.unsqueeze(-1) >> self.bit_shifts) & 1  # (B, T, 16, 8), little bit order
        return bits.view(*packed.shape[:2], -1)[..., : tokens.VOCAB_SIZE].bool()


Forward = Callable[[torch.Tensor], torch.Tensor]


@torch.no_grad()
def evaluate(
    net: torch.nn.Module,
    data: ValidationSet,
    *,
    micro: int = 8,
    deadline: Deadline | None = None,
    pad_multiple: int = 1,
    forward: Forward | None = None,
) -> dict[str, Any] | None:
    """The validation metrics, or None if the deadline cut it short (a partial validation
    must change neither best nor patience). ``forward``: the model's inference forward
    (``Trainer.inference``: compiled on its own when the run compiles); default ``net``.

    Everything is summed on the device; the only host syncs are the final read-back (and the
    deadline check's clock, which needs none). ``pad_multiple`` buckets the padded lengths
    like training does, so a compiled model meets the shapes it already knows.
    """
    start = time.perf_counter()
    with _eval_mode(net):
        sums = _accumulate(net, data, micro, deadline, pad_multiple, forward or net)
    if sums is None:
        return None
    keys = list(sums)
    s = dict(zip(keys, torch.stack([sums[k].double() for k in keys]).tolist(), strict=True))
    targets = int(s["targets"])
    result = {
        "nll": s["nll_sum"] / targets,
        "valid_targets": targets,
        "games": len(data),
        "phase_accuracy": {
            p: (s[f"correct_{p}"] / s[f"n_{p}"] if s[f"n_{p}"] else None) for p in PHASES
        },
        "phase_counts": {p: int(s[f"n_{p}"]) for p in PHASES},
        "teacher_forced_triple_legality": s["legal_triples"] / max(1.0, s["moves"]),
        "raw_reserved_probability": s["reserved_sum"] / targets,
        "raw_illegal_token_probability": s["illegal_sum"] / max(1.0, s["legality_targets"]),
        "legality_games": int(data.selected.sum().item()),
        "legality_targets": int(s["legality_targets"]),
        "legality_subset": LEGALITY_SUBSET,
        "protocol": PROTOCOL,
    }
    if data.outcomes is not None:
        result["outcome"] = data.outcomes.result(s)
    if data.think_times is not None:
        result["think_time"] = data.think_times.result(s)
    result["seconds"] = time.perf_counter() - start
    return result


@torch.no_grad()
def warm_up(
    net: torch.nn.Module,
    games: Any,
    device: torch.device,
    *,
    micro: int,
    pad_multiple: int = 1,
    forward: Forward | None = None,
    prefixes: Prefixes | None = None,
    outcome: bool = False,
    times: GameTimes | None = None,
    think_time: bool = False,
) -> float:
    """One validation forward of the first ``micro`` games (with their ``prefixes`` and their
    time rows from ``times``), exactly as ``evaluate`` runs it (``outcome``, ``think_time``:
    with those heads' logits); returns its seconds. The probe calls it so that a
    compiled model's inference graph is compiled (into the run's compile cache) before
    segment 0's first validation needs it."""
    start = time.perf_counter()
    with _eval_mode(net):
        index = list(range(min(micro, len(games))))
        inputs = Inputs(
            prefixes=None if prefixes is None else prefixes(index),
            times=times,
            heads=_heads(outcome, think_time),
        )
        logits, _, _ = _forward(net, forward or net, games, index, device, pad_multiple, inputs)
        logits.sum().item()  # wait for it
    return time.perf_counter() - start


@contextlib.contextmanager
def _eval_mode(net: torch.nn.Module) -> Iterator[None]:
    """``net`` in eval mode for the block, then back to the mode it was in."""
    was_training = net.training
    net.eval()
    try:
        yield
    finally:
        net.train(was_training)


class Inputs(NamedTuple):
    """What a validation batch feeds besides its tokens: the rating prefix's tokens
    ((games, P) or None), the split's clocks for the time rows (or None), and the side heads
    whose logits it reads (``loss.HEADS``' order)."""

    prefixes: np.ndarray | None = None
    times: GameTimes | None = None
    heads: tuple[str, ...] = ()


def _heads(outcome: bool, think_time: bool) -> tuple[str, ...]:
    return tuple(h for h, on in (("outcome", outcome), ("think_time", think_time)) if on)


def _forward(
    net: torch.nn.Module,
    forward: Forward,
    games: Any,
    index: list[int],
    device: torch.device,
    pad_multiple: int,
    inputs: Inputs,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """FP32 logits, targets and the side heads' logits (by name) of one validation batch
    (the games ``index`` of ``games``), from BOS on: the positions of the games' rating
    prefix are fed, then cut (they have no target)."""
    prefixes = inputs.prefixes
    P = 0 if prefixes is None else prefixes.shape[1]
    x, y = batching.collate(
        [games[i] for i in index],
        device,
        pad_multiple=pad_multiple,
        max_len=getattr(getattr(net, "config", None), "block_size", None),
        prefixes=prefixes if P else None,
    )
    kw: dict[str, Any] = {h: True for h in inputs.heads}
    if inputs.times is not None:
        rows = inputs.times.rows(games, index, tuple(x.shape), prefix=P)
        kw["time"] = batching.to_device(rows, device)
    with gpt.autocast(device):
        out = forward(x, **kw)
    logits, *extra = out if inputs.heads else (out,)
    heads = {h: e[:, P:].float() for h, e in zip(inputs.heads, extra, strict=True)}
    if P:  # position t of what is left is target t of the game, as without a prefix
        return logits[:, P:].float().contiguous(), y[:, P:].contiguous(), heads
    return logits.float(), y, heads


def _accumulate(
    net: torch.nn.Module,
    data: ValidationSet,
    micro: int,
    deadline: Deadline | None,
    pad_multiple: int,
    forward: Forward,
) -> dict[str, torch.Tensor] | None:
    """The metrics' sums over the validation games on the device; ``None`` if cut by the
    deadline."""
    device = data.device
    names = [
        "nll_sum",
        "targets",
        "reserved_sum",
        "illegal_sum",
        "legality_targets",
        "moves",
        "legal_triples",
    ] + [f"{k}_{p}" for p in PHASES for k in ("n", "correct")]
    sums = {k: torch.zeros((), dtype=torch.float64, device=device) for k in names}
    heads = _heads(data.outcomes is not None, data.think_times is not None)
    for first in range(0, len(data), micro):
        if deadline is not None and deadline.soft_stop():
            return None
        index = list(range(first, min(first + micro, len(data))))
        inputs = Inputs(prefixes=data.prefixes(index), times=data.times, heads=heads)
        logits, y, extra = _forward(net, forward, data.games, index, device, pad_multiple, inputs)
        _add_batch(sums, data, index, logits, y)
        if data.outcomes is not None:
            lengths = [len(data.games[i]) for i in index]
            data.outcomes.add(sums, index, lengths, extra["outcome"])
        if data.think_times is not None:
            data.think_times.add(sums, index, extra["think_time"])
    return sums


def _add_batch(
    sums: dict[str, torch.Tensor],
    data: ValidationSet,
    index: list[int],
    logits: torch.Tensor,
    y: torch.Tensor,
) -> None:
    """Add one batch (games ``index``) to ``sums``: NLL, reserved and illegal probability,
    per-phase accuracy, then its teacher-forced triples."""
    device = data.device
    B, T = y.shape
    valid = y.ne(IGNORE)
    sums["nll_sum"] += F.cross_entropy(
        logits.view(-1, logits.size(-1)),
        y.view(-1),
        ignore_index=IGNORE,
        reduction="sum",
    ).double()
    probs = logits.softmax(-1)
    pred = probs.argmax(-1)
    sums["targets"] += valid.sum()
    sums["reserved_sum"] += (probs[..., tokens.FIRST_RESERVED :].sum(-1) * valid).sum().double()

    phase = torch.arange(T, device=device).remainder(3)  # 0 source, 1 destination, 2 promotion
    is_eos = y.eq(tokens.EOS)
    correct = pred.eq(y)
    for p, selected in (
        ("source", valid & phase.eq(0) & ~is_eos),
        ("destination", valid & phase.eq(1) & ~is_eos),
        ("promotion", valid & phase.eq(2) & ~is_eos),
        ("eos", valid & is_eos),
    ):
        sums[f"n_{p}"] += selected.sum()
        sums[f"correct_{p}"] += (selected & correct).sum()

    games = batching.to_device(torch.tensor(index), device)
    counted = valid & data.selected[games].unsqueeze(1)  # targets of the legality sample
    legal = data.legal(games, T)
    sums["illegal_sum"] += ((probs * ~legal).sum(-1) * counted).sum().double()
    sums["legality_targets"] += counted.sum()
    moves = counted & phase.eq(0) & ~is_eos
    sums["moves"] += moves.sum()
    sums["legal_triples"] += (moves & _legal_triples(data, games, pred)).sum()


def _legal_triples(data: ValidationSet, games: torch.Tensor, pred: torch.Tensor) -> torch.Tensor:
    """Teacher-forced triples: whether the argmax at each position and the two after it (the
    source, destination and promotion of a move starting there) is a legal move of its ply."""
    T = pred.shape[1]
    device = pred.device
    padded = F.pad(pred, (0, 2), value=tokens.PAD)
    src, dst, promo = padded[:, :T], padded[:, 1 : T + 1], padded[:, 2 : T + 2]
    decodable = (
        (src < 64)
        & (dst < 64)
        & (src != dst)
        & (promo >= tokens.PROMO_NONE)
        & (promo <= tokens.PROMO_NONE + 4)
    )
    code = (src * 64 + dst) * 5 + (promo - tokens.PROMO_NONE)
    ply = data.ply_start[games].unsqueeze(1) + torch.arange(T, device=device) // 3
    key = ply * N_MOVE_CODES + code.clamp(min=0, max=N_MOVE_CODES - 1)
    at = torch.searchsorted(data.legal_keys, key).clamp(max=max(0, data.legal_keys.numel() - 1))
    hit = (
        data.legal_keys[at].eq(key)
        if data.legal_keys.numel()
        else torch.zeros_like(pred, dtype=torch.bool)
    )
    return decodable & hit
