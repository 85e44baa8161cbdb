"""Which games go into which optimizer update, and one update's forward/backward passes.

An epoch is a deterministic function of ``(seed, epoch)``: the games are shuffled, cut into
large chunks, sorted by length inside each chunk (so a microbatch wastes little padding) and
cut into *global batches* of ``micro * world`` whole games; the global batches are shuffled
again. Rank ``r`` takes games ``[r*micro, (r+1)*micro)`` of a global batch. ``accum`` global
batches make one *group*, i.e. one optimizer update. The position in this plan (epoch, next
group, step) is all a resume needs, so no data-loader state is saved.

>>> plan = groups(global_batches([5, 3, 9, 4, 7], epoch=0, seed=1, micro=2, world=1), accum=2)
>>> sorted(int(i) for group in plan for batch in group for i in batch)
[0, 1, 2, 3, 4]

The *packed* (throughput) plan instead fills rows of ``row_tokens`` tokens (the model's
context) with whole games (``pack_rows``); ``micro`` then counts rows per microbatch, i.e. the
microbatch is a token budget of ``micro * row_tokens``. Inside a row, positions restart at
every game and a document mask keeps every game from seeing another (``document_mask``).
"""

from __future__ import annotations

import bisect
import contextlib
import random
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

from chesslm.data import tokens
from chesslm.train import distributed
from chesslm.train.loss import HEADS, IGNORE, loss_sum, loss_sums

CHUNK_BATCHES = 64  # global batches per length bucket: large enough to group similar lengths


def index_dtype(n: int) -> np.dtype:
    """The smallest index type for ``n`` games: a plan is NumPy arrays, never one Python
    object per game, so a rank's memory stays small however large the dataset."""
    return np.dtype(np.int32 if n < 2**31 else np.int64)


class Chunked(Sequence):
    """Consecutive pieces of ``size`` items of ``items`` (the last may be shorter), made when
    asked for: an epoch's batches and groups are views of one index array, not one Python
    object each. A slice gives a list of pieces."""

    def __init__(self, items: Any, size: int) -> None:
        self.items, self.size = items, size

    def __len__(self) -> int:
        return -(-len(self.items) // self.size)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            return [self[k] for k in range(*key.indices(len(self)))]
        k = range(len(self))[key]  # negative indices; IndexError past the end
        return self.items[k * self.size : (k + 1) * self.size]

    def __iter__(self) -> Iterator[Any]:
        return (self[k] for k in range(len(self)))


def global_batches(
    lengths: Sequence[int] | np.ndarray, *, epoch: int, seed: int, micro: int, world: int
) -> Chunked:
    """Game indices of every global batch of an epoch (views of one array); only the very
    last may be partial."""
    rng = random.Random(f"chesslm-batches:{seed}:{epoch}")  # str seeds hash stably (sha512)
    lengths = np.asarray(lengths)
    n = len(lengths)
    order = np.arange(n, dtype=index_dtype(n))
    rng.shuffle(order)  # in place, the same swaps (hence plan) as on a list
    size = micro * world
    chunk = size * CHUNK_BATCHES
    for start in range(0, n, chunk):
        bucket = order[start : start + chunk]
        # stable sort: ties keep the shuffled order, so the plan depends on (seed, epoch) only
        bucket[:] = bucket[np.argsort(-lengths[bucket].astype(np.int64), kind="stable")]
    # every chunk but the last is whole batches, so only the last batch can be partial; it
    # stays last, where a dummy rank is cheap
    full = n // size
    perm = np.arange(full, dtype=index_dtype(full))
    rng.shuffle(perm)  # shuffling depends on the length only: as shuffling the batch list
    order[: full * size] = order[: full * size].reshape(full, size)[perm].reshape(-1)
    return Chunked(order, size)


def groups(batches: Sequence[Any], accum: int) -> Chunked:
    """Accumulation groups of ``accum`` global batches (the last may have fewer); a group is
    a list of batches."""
    return Chunked(batches, accum)


def padded_length(T: int, multiple: int, cap: int | None = None) -> int:
    """``T`` rounded up to a multiple of ``multiple`` (at most ``cap``): few distinct shapes
    for the compiler. Right padding never changes a valid target under causal attention.

    >>> padded_length(130, 64), padded_length(1023, 64, 1024), padded_length(5, 1)
    (192, 1024, 5)
    """
    if multiple <= 1:
        return T
    T = -(-T // multiple) * multiple
    return min(T, cap) if cap is not None else T


def to_device(t: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """Host tensor to ``device``; on CUDA through pinned memory without a host sync."""
    if torch.device(device).type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def collate(
    games: Sequence[np.ndarray],
    device: torch.device | str,
    *,
    pad_multiple: int = 1,
    max_len: int | None = None,
    rows: int | None = None,
    prefixes: np.ndarray | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded inputs (PAD) and targets (IGNORE), each (B, T) with T = longest game - 1
    (rounded up to ``pad_multiple``, at most ``max_len``) and B = the games (at least
    ``rows``: missing rows are all padding, so shapes stay fixed).

    ``prefixes``: (games, P) tokens in front of each game (the rating prefix), inputs only:
    the targets of their P positions are IGNORE, so the first target is still the first
    move's source predicted from BOS; T counts them."""
    if not games and rows is None:  # a rank with no games in a partial global batch: one dummy row
        T = padded_length(1, pad_multiple, max_len)
        x = torch.full((1, T), tokens.PAD, dtype=torch.long)
        y = torch.full((1, T), IGNORE, dtype=torch.long)
        return to_device(x, device), to_device(y, device)
    P = 0 if prefixes is None else prefixes.shape[1]
    T = padded_length(max((len(g) for g in games), default=2) + P - 1, pad_multiple, max_len)
    xy = torch.empty((2, max(len(games), rows or 0), T), dtype=torch.long)
    x, y = xy[0], xy[1]
    x.fill_(tokens.PAD)
    y.fill_(IGNORE)
    for row, game in enumerate(games):
        g = torch.from_numpy(np.asarray(game, dtype=np.int64))
        if P:
            x[row, :P] = torch.from_numpy(prefixes[row])
        x[row, P : P + len(g) - 1] = g[:-1]
        y[row, P : P + len(g) - 1] = g[1:]
    xy = to_device(xy, device)
    return xy[0], xy[1]


# ----------------------------------------------------------------------------- packing


PACK_CHUNK = 8192  # games packed together: large enough for full rows, small enough to mix


class Rows:
    """Rows of packed games as two arrays: row ``r`` is ``games[offsets[r]:offsets[r + 1]]``.
    ``rows[k]`` is a row (an index array), ``rows[a:b]`` the rows a..b-1 as ``Rows``."""

    def __init__(self, games: np.ndarray, offsets: np.ndarray) -> None:
        self.games, self.offsets = games, offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, key: int | slice) -> Any:
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            if step != 1:
                raise ValueError("Rows slices take a step of 1")
            stop = max(start, stop)
            return Rows(self.games, self.offsets[start : stop + 1])
        key = range(len(self))[key]
        return self.games[self.offsets[key] : self.offsets[key + 1]]

    def __iter__(self) -> Iterator[np.ndarray]:
        return (self[k] for k in range(len(self)))


def pack_rows(
    lengths: Sequence[int] | np.ndarray,
    *,
    epoch: int,
    seed: int,
    row_tokens: int,
    prefix: int = 0,
) -> Rows:
    """Whole games packed into rows of at most ``row_tokens`` inputs, deterministically.

    A game of n tokens takes n - 1 positions (inputs; targets shifted by one), plus
    ``prefix`` for its rating prefix (which its document holds too). The games are
    shuffled by ``(seed, epoch)``, cut into chunks of ``PACK_CHUNK`` and packed best-fit
    decreasing inside each chunk; the rows are shuffled again.

    >>> lengths = [5, 9, 4, 7, 3]
    >>> rows = pack_rows(lengths, epoch=0, seed=1, row_tokens=12)
    >>> sorted(int(i) for r in rows for i in r), max(sum(lengths[i] - 1 for i in r) for r in rows)
    ([0, 1, 2, 3, 4], 12)
    """
    rng = random.Random(f"chesslm-packing:{seed}:{epoch}")
    lengths = np.asarray(lengths)
    n = len(lengths)
    order = np.arange(n, dtype=index_dtype(n))
    rng.shuffle(order)  # in place, the same swaps (hence rows) as on a list
    packed = np.empty(n, dtype=order.dtype)  # games in row order, before the row shuffle
    ends: list[np.ndarray] = []  # each chunk's row ends (per row, not per game)
    at = 0
    for start in range(0, n, PACK_CHUNK):
        part = order[start : start + PACK_CHUNK]
        chunk = part[np.argsort(-lengths[part].astype(np.int64), kind="stable")].tolist()
        local = _best_fit(chunk, lengths, row_tokens, prefix)
        flat = [i for row in local for i in row]
        packed[at : at + len(flat)] = flat
        ends.append(at + np.cumsum([len(row) for row in local], dtype=np.int64))
        at += len(flat)
    bounds = np.concatenate([np.zeros(1, np.int64), *ends])
    n_rows = len(bounds) - 1
    perm = np.arange(n_rows, dtype=np.int64)
    rng.shuffle(perm)  # shuffling depends on the length only: as shuffling the row list
    sizes = np.diff(bounds)[perm]
    offsets = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    # gather the rows in shuffled order: each game's source position in ``packed``
    source = np.repeat(bounds[:-1][perm] - offsets[:-1], sizes) + np.arange(at, dtype=np.int64)
    return Rows(packed[source], offsets)


def _best_fit(
    chunk: list[int], lengths: np.ndarray, row_tokens: int, prefix: int = 0
) -> list[list[int]]:
    """Rows of the games ``chunk`` (longest first), each game (with its ``prefix`` tokens)
    into the open row it fills best (the least room left), or a new row."""
    # free[c]: open rows with exactly c positions left; caps: the sorted c with free[c]
    free: list[list[int]] = [[] for _ in range(row_tokens + 1)]
    caps: list[int] = []
    local: list[list[int]] = []
    for i in chunk:
        need = int(lengths[i]) - 1 + prefix
        if need > row_tokens:
            raise ValueError(
                f"game {i} has {need + 1 - prefix} tokens (+{prefix} of prefix); rows hold"
                f" {row_tokens} inputs"
            )
        at_cap = bisect.bisect_left(caps, need)  # best fit: the smallest capacity >= need
        if at_cap == len(caps):
            local.append([i])
            r, left = len(local) - 1, row_tokens - need
        else:
            best = caps[at_cap]
            r = free[best].pop()
            if not free[best]:
                caps.pop(at_cap)
            local[r].append(i)
            left = best - need
        if not free[left]:
            bisect.insort(caps, left)
        free[left].append(r)
    return local


def packed_batches(
    lengths: Sequence[int] | np.ndarray,
    *,
    epoch: int,
    seed: int,
    micro: int,
    world: int,
    row_tokens: int,
    prefix: int = 0,
) -> Chunked:
    """Global batches of ``micro * world`` packed rows (``Rows``; only the last may be
    partial); ``prefix``: tokens in front of every game (``pack_rows``)."""
    rows = pack_rows(lengths, epoch=epoch, seed=seed, row_tokens=row_tokens, prefix=prefix)
    return Chunked(rows, micro * world)


def collate_packed(
    games: Any,
    rows: Sequence[Sequence[int]],
    device: torch.device | str,
    *,
    row_tokens: int,
    n_rows: int | None = None,
    prefixes: Sequence[np.ndarray] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(x, y, pos, doc), each (n_rows, row_tokens): games back to back, positions restarting
    at each game, ``doc`` numbering the games of a row (the padding after them is one more
    document). Missing rows (up to ``n_rows``) are all padding, so shapes stay fixed.

    ``prefixes[r]``: (games of row r, P) tokens in front of each game, as ``collate``'s
    (inputs only, IGNORE targets); a game's positions and document start at its prefix."""
    B = max(len(rows), n_rows or 0, 1)
    t = torch.empty((4, B, row_tokens), dtype=torch.long)
    x, y, pos, doc = t[0], t[1], t[2], t[3]
    x.fill_(tokens.PAD)
    y.fill_(IGNORE)
    pos.zero_()
    doc.zero_()
    P = prefixes[0].shape[1] if prefixes else 0
    for r, row in enumerate(rows):
        at = 0
        for d, i in enumerate(row):
            g = torch.from_numpy(np.asarray(games[i], dtype=np.int64))
            n = len(g) - 1 + P
            if P:
                x[r, at : at + P] = torch.from_numpy(prefixes[r][d])
            x[r, at + P : at + n] = g[:-1]
            y[r, at + P : at + n] = g[1:]
            pos[r, at : at + n] = torch.arange(n)
            doc[r, at : at + n] = d
            at += n
        doc[r, at:] = len(row)
        pos[r, at:] = torch.arange(row_tokens - at)
    t = to_device(t, device)
    return t[0], t[1], t[2], t[3]


def dense_document_mask(doc: torch.Tensor) -> torch.Tensor:
    """bool (B, 1, T, T): query q may see key k iff same game and k <= q."""
    T = doc.size(1)
    causal = torch.ones(T, T, dtype=torch.bool, device=doc.device).tril()
    return (doc.unsqueeze(2) == doc.unsqueeze(1)).logical_and(causal).unsqueeze(1)


def document_mask(doc: torch.Tensor) -> Any:
    """The attention mask of packed rows: a FlexAttention ``BlockMask`` on CUDA (sparse
    blocks, no T x T tensor), the dense boolean mask elsewhere (FlexAttention is only fast
    compiled on a GPU; the CPU fallback must stay exact and simple)."""
    if doc.device.type != "cuda":
        return dense_document_mask(doc)
    from torch.nn.attention.flex_attention import create_block_mask

    def mask_mod(b, h, q, k):  # noqa: ANN001
        return (doc[b, q] == doc[b, k]) & (k <= q)

    B, T = doc.shape
    # compiled: the eager build materialises B x T x T and costs more host time than the step
    return create_block_mask(mask_mod, B, None, T, T, device=doc.device, _compile=True)


# ----------------------------------------------------------------------------- one update


def n_targets(games: Any, item: Any, packed: bool) -> int:
    """Valid targets of one batch item: a game index, or (packed) a row of game indices."""
    return sum(len(games[i]) - 1 for i in item) if packed else len(games[item]) - 1


class Microbatch(NamedTuple):
    """One rank's share of one global batch, collated (``pos``, ``doc``: packed rows only),
    with its valid targets and the padded tokens of its games' rows (added padding rows and
    a dummy rank's row count none)."""

    x: torch.Tensor
    y: torch.Tensor
    pos: torch.Tensor | None
    doc: torch.Tensor | None
    targets: int
    padded: int
    # the outcome head's targets and their count (runs.NAME.outcome; None, 0 without it)
    outcome: torch.Tensor | None = None
    outcome_targets: int = 0
    # the time inputs' rows (runs.NAME.time_inputs; None without them)
    time: torch.Tensor | None = None
    # the think-time head's targets and their count (runs.NAME.think_time; None, 0 without it)
    think_time: torch.Tensor | None = None
    think_time_targets: int = 0

    def forward(self) -> dict[str, Any]:
        """The model's inputs besides ``x``: packed rows' positions and document mask, and
        the time rows."""
        out = {} if self.doc is None else {"pos": self.pos, "mask": document_mask(self.doc)}
        if self.time is not None:
            out["time"] = self.time
        return out

    def heads(self) -> dict[str, torch.Tensor]:
        """The side heads' targets of this microbatch, in ``loss.HEADS``' order."""
        return {h: getattr(self, h) for h in HEADS if getattr(self, h) is not None}


class GroupPass:
    """The microbatch core of one optimizer update on one rank, shared by both update paths
    (``backward_group`` here, ``cuda_graphs.MicrobatchGraphs`` with its graphs): this rank's
    microbatches and how they are collated, the loss scale, and the statistics.

    The loss is the sum of token cross-entropies divided by the number of valid targets of
    the whole group on all ranks, so every target weighs the same however games fall on ranks;
    ``averaged_over`` multiplies it back where the gradient all-reduce averages (DDP: the
    world size) instead of summing. ``rows``: pad every padded-path microbatch to this many
    rows (fixed shapes for CUDA graphs; packed microbatches always have ``micro`` rows).
    ``prefixes``: the rating prefix of each game (``chesslm.train.prefix.Prefixes``, called
    with game indices); its positions have no targets, so the loss counts moves only.
    ``outcomes``: the games' results (``chesslm.train.outcome.Outcomes``) under
    ``outcome: true``: each microbatch then carries outcome targets, scaled by
    ``head_scales["outcome"]`` (the weight over the group's outcome targets on all ranks), and
    the statistics add the outcome loss and its targets. ``times``: the games' clocks
    (``chesslm.train.human_time.GameTimes``) under ``time_inputs`` or ``think_time``: the
    microbatches carry the time rows (``times.inputs``) and the think-time targets
    (``times.think``, scaled and counted as the outcome's).

    Every count comes from the game lengths on the host, so nothing waits for the device.
    """

    def __init__(
        self,
        games: Any,
        group: list[list[Any]],
        *,
        micro: int,
        rank: int,
        device: torch.device | str,
        pad_multiple: int = 1,
        max_len: int | None = None,
        row_tokens: int | None = None,
        rows: int | None = None,
        averaged_over: int = 1,
        prefixes: Any = None,
        outcomes: Any = None,
        times: Any = None,
    ) -> None:
        self.games, self.micro, self.device = games, micro, device
        # None under conditioning none: the batches are built exactly as before it existed
        self.prefixes = prefixes if prefixes is not None and prefixes.length else None
        self.prefix_length = 0 if self.prefixes is None else self.prefixes.length
        self.pad_multiple, self.max_len, self.row_tokens, self.rows = (
            pad_multiple,
            max_len,
            row_tokens,
            rows,
        )
        self.packed = row_tokens is not None
        self.parts = [batch[rank * micro : (rank + 1) * micro] for batch in group]
        total = sum(n_targets(games, item, self.packed) for batch in group for item in batch)
        self.scale = averaged_over / float(total)
        # None under outcome: false, and times under neither time setting: today's batches
        self.outcomes, self.times = outcomes, times
        self.labels = {"outcome": outcomes, "think_time": times if times and times.think else None}
        self.labels = {h: v for h, v in self.labels.items() if v is not None}
        self.head_scales = {}
        for head, labels in self.labels.items():
            told = sum(labels.count(games, batch, self.packed) for batch in group)
            # a group without any target of the head: no gradient from it
            self.head_scales[head] = labels.weight * averaged_over / told if told else 0.0
        width = 3 + 2 * len(self.labels)  # + each head's loss sum and targets
        self.stats = torch.zeros(width, dtype=torch.float64, device=device)

    @property
    def heads(self) -> tuple[str, ...]:
        """The side heads this pass trains, in ``loss.HEADS``' order."""
        return tuple(self.labels)

    @property
    def outcome_scale(self) -> float:
        return self.head_scales.get("outcome", 0.0)

    def __len__(self) -> int:
        return len(self.parts)

    def __iter__(self) -> Iterator[Microbatch]:
        return (self.collate(part) for part in self.parts)

    def collate(self, part: list[Any]) -> Microbatch:
        games = self.games
        targets = sum(n_targets(games, item, self.packed) for item in part)
        pre = self.prefixes
        if self.packed:
            x, y, pos, doc = collate_packed(
                games,
                part,
                self.device,
                row_tokens=self.row_tokens,
                n_rows=self.micro,
                prefixes=None if pre is None else [pre(row) for row in part],
            )
            padded = len(part) * self.row_tokens
            return self._with_labels(Microbatch(x, y, pos, doc, targets, padded), part)
        x, y = collate(
            [games[i] for i in part],
            self.device,
            pad_multiple=self.pad_multiple,
            max_len=self.max_len,
            rows=self.rows,
            prefixes=None if pre is None or not len(part) else pre(part),
        )
        batch = Microbatch(x, y, None, None, targets, len(part) * y.size(1))
        return self._with_labels(batch, part)

    def _with_labels(self, batch: Microbatch, part: list[Any]) -> Microbatch:
        """The microbatch with its side heads' targets and its time rows (built on the
        host), where the run has them."""
        shape, kw = tuple(batch.y.shape), {"prefix": self.prefix_length, "packed": self.packed}
        if self.times is not None:  # rows and targets from one pass over the clocks
            rows, think, count = self.times.microbatch(self.games, part, shape, **kw)
            if rows is not None:
                batch = batch._replace(time=to_device(rows, self.device))
            if think is not None:
                batch = batch._replace(think_time=to_device(think, self.device))
                batch = batch._replace(think_time_targets=count)
        if self.outcomes is not None:
            o = self.outcomes.targets(self.games, part, shape, **kw)
            count = self.outcomes.count(self.games, part, self.packed)
            batch = batch._replace(outcome=to_device(o, self.device), outcome_targets=count)
        return batch

    def add(self, loss: torch.Tensor, batch: Microbatch, heads: Sequence[Any] = ()) -> None:
        """Account for one microbatch's summed loss (and each side head's summed loss, in
        ``heads`` order): device tensors, no host sync."""
        self.stats[0] += loss.detach().double()
        self.stats[1] += float(batch.targets)
        self.stats[2] += float(batch.padded)
        for k, (head, value) in enumerate(zip(self.heads, heads, strict=True)):
            self.stats[3 + 2 * k] += value.detach().double()
            self.stats[4 + 2 * k] += float(getattr(batch, f"{head}_targets"))

    def total_loss(self, loss: torch.Tensor, heads: Sequence[torch.Tensor]) -> torch.Tensor:
        """The microbatch's share of the update's loss: moves, then each head's, scaled."""
        total = loss * self.scale
        for head, value in zip(self.heads, heads, strict=True):
            total = total + value * self.head_scales[head]
        return total

    def result(self, *, as_tensor: bool) -> Any:
        """The group's (loss_sum, valid_targets, padded_tokens[, per head: loss sum, targets])
        summed over ranks: a float64 device tensor if ``as_tensor`` (no host sync), else a
        dict of numbers."""
        stats = distributed.all_reduce_sum(self.stats)
        if as_tensor:
            return stats
        return stats_dict(stats.tolist(), self.heads)


def stats_dict(values: list[float], heads: Sequence[str] = ("outcome",)) -> dict[str, Any]:
    """A group's statistics by name: (loss_sum, valid_targets, padded_tokens), then each
    side head's ``{head}_loss_sum`` and ``{head}_targets``, ``heads`` naming those present
    (in ``loss.HEADS``' order)."""
    out = {
        "loss_sum": values[0],
        "valid_targets": int(values[1]),
        "padded_tokens": int(values[2]),
    }
    for k, head in enumerate(heads[: (len(values) - 3) // 2]):
        out[f"{head}_loss_sum"], out[f"{head}_targets"] = values[3 + 2 * k], int(values[4 + 2 * k])
    return out


def backward_group(
    net: torch.nn.Module,
    games: Any,
    group: list[list[Any]],
    *,
    world: int,
    as_tensor: bool = False,
    **layout: Any,
) -> Any:
    """Forward and backward every microbatch of one group on this rank; gradients accumulate.

    ``layout``: ``GroupPass``'s keywords (``micro``, ``rank``, ``device``, ``pad_multiple``,
    ``max_len``, ``row_tokens``, ``prefixes``, ``outcomes``, ``times``). Loss scale and
    statistics as ``GroupPass`` says; DDP averages gradients over ranks, hence
    ``averaged_over=world``. A rank with no games runs a zero-target dummy so that its DDP
    all-reduce still matches the other ranks'. With ``row_tokens`` the global batches are packed
    rows (lists of games, ``packed_batches``) and each microbatch runs with per-game positions
    and a document mask.

    Returns ``GroupPass.result``: the group's (loss_sum, valid_targets, padded_tokens[, heads])
    summed over ranks, as a float64 device tensor if ``as_tensor``, else as a dict of numbers.
    """
    core = GroupPass(games, group, averaged_over=world, **layout)
    device = core.device
    for k, batch in enumerate(core):
        forward = batch.forward()
        last = k == len(core) - 1
        # gradients are all-reduced only on the group's last microbatch
        sync = contextlib.nullcontext() if last or not hasattr(net, "no_sync") else net.no_sync()
        with sync:
            heads = batch.heads()
            if not heads:
                loss, sums = loss_sum(net, batch.x, batch.y, device, **forward), []
            else:
                loss, sums = loss_sums(net, batch.x, batch.y, heads, device, **forward)
            core.total_loss(loss, sums).backward()
        core.add(loss, batch, sums)
    return core.result(as_tensor=as_tensor)
