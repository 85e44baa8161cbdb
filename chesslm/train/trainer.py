"""The model, DDP wrapper, optimizer, schedule and identity of a run on one rank, and its
optimizer update (shared by training segments, the probe and the speed benchmark), built from
the run's ``RunSettings``."""

from __future__ import annotations

import dataclasses
import inspect
import logging
import math
import random
import resource
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from chesslm.data.cache import TokenCache
from chesslm.files import sha256_file
from chesslm.model import gpt
from chesslm.train import (
    batching,
    checkpoint,
    compilation,
    cuda_graphs,
    distributed,
    optim,
    prefix,
)
from chesslm.train.human_time import GameTimes
from chesslm.train.loss import HEADS
from chesslm.train.outcome import Outcomes
from chesslm.train.settings import RunSettings, legality_request_error

logger = logging.getLogger(__name__)

LENGTH_BLOCK = 1 << 22  # offsets read per step: the int64 difference never spans a split


def game_lengths(offsets: np.ndarray) -> np.ndarray:
    """Tokens per game from a split's (memory-mapped) offsets as one compact array (uint16
    when games fit, as they do under any model context): no Python object per game, and no
    split-sized int64 temporary."""
    n = len(offsets) - 1
    longest = 0
    out = np.empty(n, dtype=np.uint16)
    for start in range(0, n, LENGTH_BLOCK):
        block = np.diff(np.asarray(offsets[start : start + LENGTH_BLOCK + 1]))
        longest = max(longest, int(block.max(initial=0)))
        if longest > np.iinfo(np.uint16).max:
            return np.diff(np.asarray(offsets)).astype(np.int64)  # never under a real context
        out[start : start + len(block)] = block
    return out


def ddp_buckets(device: torch.device) -> dict[str, Any]:
    """DDP's bucket arguments on ``device``.

    DDP rebuilds its gradient buckets after a process's first update (in the order the
    gradients came), and with more than 2 gloo ranks a parameter's place in a bucket changes
    the sums: a resumed run's first update would differ (1e-8) from the uninterrupted run's.
    On the CPU every parameter is a bucket of its own, before and after the rebuild (caps of
    0 MiB), so each sum stays as it was. Every parameter gets a gradient (the tied embedding
    and head too), so there is no unused-parameter search, whose per-update graph walk DDP
    warns about in every log. A torch without ``bucket_cap_mb_list`` keeps the first buckets
    for good through that search instead. On CUDA, DDP's defaults (its default path has no
    DDP: cuda_graphs).
    """
    if device.type != "cpu":
        return {}
    if "bucket_cap_mb_list" in inspect.signature(DDP).parameters:
        return {"bucket_cap_mb_list": [0]}
    return {"find_unused_parameters": True}


def check_legality_request(settings: RunSettings, cache: TokenCache, run_dir: Path | str) -> None:
    """Before the model: a run asking for more legality games than the cache holds stops in
    one line naming its key (the workflow checks this at plan time when it can)."""
    error = legality_request_error(
        settings.legality_eval_games,
        available=len(cache.legality_games()),
        validation_games=len(cache.validation),
        key=f"runs.{Path(run_dir).name}.legality_eval_games",
        cache=cache.directory,
    )
    if error:
        raise ValueError(error)


def check_prefix_fits(trainer: Trainer, run_dir: Path | str) -> None:
    """Before any update: the longest training game with its rating prefix fits the model
    context (the workflow checks this at plan time from the dataset's context)."""
    extra = trainer.prefixes.length
    inputs = int(trainer.lengths.max(initial=2)) + extra - 1
    context = trainer.net.config.block_size
    if extra and inputs > context:
        raise ValueError(
            f"runs.{Path(run_dir).name}.conditioning is {trainer.prefixes.layout}: the longest"
            f" training game with its {extra}-token prefix has {inputs} inputs, more than the"
            f" model context of {context}"
        )


def train_times(settings: RunSettings, cache: TokenCache) -> GameTimes | None:
    """The train split's clocks as the run's batches use them: time rows if
    ``time_inputs``, think-time targets (weighted) if ``think_time``; None if neither."""
    s = settings
    if not (s.time_inputs or s.think_time):
        return None
    return GameTimes.of_cache(
        cache, "train", weight=s.think_time_weight, inputs=s.time_inputs, think=s.think_time
    )


def check_ratings(prefixes: prefix.Prefixes, games: int, run_dir: Path | str) -> str | None:
    """A rating-conditioned run's training games without ratings: refused if none has one
    (the prefix would say "unknown" to every game: conditioning on nothing), else how many
    lack one, as a line for the log (None when all have both)."""
    unrated = prefixes.unrated()
    if not unrated:
        return None
    key = f"runs.{Path(run_dir).name}.conditioning"
    if unrated == games:
        raise ValueError(
            f"{key} is elo, but none of the {games} training games has both players' ratings"
            " (WhiteElo and BlackElo): the model would condition on nothing; use a dataset"
            " with ratings, or conditioning: none"
        )
    return (
        f"{key} is elo: {unrated} of the {games} training games ({unrated / games:.1%}) lack"
        " a player's rating; they get the prefix's unknown bin"
    )


class Trainer:
    """Model, DDP wrapper, optimizer, schedule and identity of one run on this rank."""

    def __init__(
        self,
        settings: RunSettings,
        ctx: distributed.Context,
        cache: TokenCache,
        *,
        run_dir: Path | str,
        integrity_receipt: Path | str | None = None,
    ) -> None:
        """``run_dir``: results/{run} (the compiler's caches go to its train/compile-cache);
        ``integrity_receipt``: the dataset's receipt, hashed into the identity."""
        s = self.settings = settings
        self.ctx = ctx
        check_legality_request(s, cache, run_dir)
        self.lengths = game_lengths(cache.train.offsets)
        # the train split's rating prefixes (none: length 0, batches as without conditioning)
        self.prefixes = prefix.Prefixes.of_cache(cache, "train", s.conditioning)
        said = check_ratings(self.prefixes, len(cache.train), run_dir)
        if said and ctx.is_main:
            logger.warning("%s", said)
        # the train split's results for the outcome head (None without it: today's batches)
        self.outcomes = Outcomes.of_cache(cache, "train", s.outcome_weight) if s.outcome else None
        # the train split's clocks for the time inputs and the think-time head (None: neither)
        self.times = train_times(s, cache)
        torch.manual_seed(s.seed)
        random.seed(s.seed)
        self.net = gpt.build(
            s.model,
            device=ctx.device,
            conditioning=s.conditioning,
            outcome=s.outcome,
            time_inputs=s.time_inputs,
            think_time=s.think_time,
        )
        check_prefix_fits(self, run_dir)
        self.parameters = self.net.num_parameters()
        self.compiled = compilation.resolve(s.compile, s.device)
        self.packing = s.packing
        # padded lengths bucketed to multiples of 64 for the compiler; none when eager
        self.pad_multiple = 64 if self.compiled else 1
        self.row_tokens = self.net.config.block_size if self.packing else None
        self.wrap(run_dir)
        self.opt = optim.optimizer(self.net, s.lr, device=ctx.device)
        self.steps_per_epoch = len(self.plan(0))
        self.schedule_steps, self.warmup_steps = optim.horizon(
            epochs=s.epochs,
            steps_per_epoch=self.steps_per_epoch,
            schedule_steps=s.schedule_steps,
            warmup_steps=s.warmup_steps,
        )
        self.sched = optim.scheduler(
            self.opt, warmup_steps=self.warmup_steps, schedule_steps=self.schedule_steps
        )
        self.identity = self.run_identity(cache, integrity_receipt)

    def wrap(self, run_dir: Path | str) -> None:
        """Compile the model, then wrap it in captured graphs or DDP (or neither: one rank)."""
        s, ctx = self.settings, self.ctx
        graphs = cuda_graphs.resolve(
            s.cuda_graphs, s.device, packing=self.packing, compiled=self.compiled
        )
        # opt-in (CHESSLM_GRAD_OVERLAP=1), several ranks, padded games: the gradients are
        # all-reduced during the backward, bucket by bucket, which needs the blocks' gradients
        # to complete one block at a time: a whole-forward compile yields them all at the end
        self.overlap = graphs and distributed.active() and cuda_graphs.OVERLAP and not self.packing
        if self.compiled:
            compilation.cache_env(Path(run_dir) / "train" / "compile-cache")
            compilation.compile_model(
                self.net, static_shapes=self.packing, scope="blocks" if self.overlap else None
            )
        # validation's forward: compiled as its own function (see compile_inference)
        self.inference: Any = compilation.compile_inference(self.net) if self.compiled else self.net
        self.ddp: torch.nn.Module = self.net
        self.graphs: cuda_graphs.MicrobatchGraphs | None = None
        if graphs:
            self.graphs = cuda_graphs.MicrobatchGraphs(
                self.net,
                device=ctx.device,
                pad_multiple=self.pad_multiple,
                max_len=self.net.config.block_size,
                row_tokens=self.row_tokens,
                overlap=self.overlap,
            )
        elif distributed.active():
            ids = [ctx.local_rank] if ctx.device.type == "cuda" else None
            self.ddp = DDP(
                self.net, device_ids=ids, gradient_as_bucket_view=True, **ddp_buckets(ctx.device)
            )

    def run_identity(
        self, cache: TokenCache, integrity_receipt: Path | str | None
    ) -> dict[str, Any]:
        """The run identity (checkpoint.identity) with this rank's resolved horizon and paths."""
        resolved = dataclasses.replace(
            self.settings, schedule_steps=self.schedule_steps, warmup_steps=self.warmup_steps
        )
        identity = checkpoint.identity(
            resolved,
            model_config=self.net.config.to_dict(),
            parameters=self.parameters,
            dataset_fingerprint=cache.fingerprint,
            receipt_sha256=sha256_file(integrity_receipt) if integrity_receipt else None,
            world_size=self.ctx.world,
        )
        identity["compile"] = self.compiled
        identity["packing"] = self.packing
        identity["cuda_graphs"] = self.graphs is not None
        # bucketed reduction compiles block by block: other numerics, so another run identity
        identity["gradient_overlap"] = self.overlap
        return identity

    def plan(self, epoch: int) -> batching.Chunked:
        """The groups of an epoch (a group: ``accum`` global batches of game indices)."""
        a, w = self.settings, self.ctx.world
        if self.packing:
            batches = batching.packed_batches(
                self.lengths,
                epoch=epoch,
                seed=a.seed,
                micro=a.micro,
                world=w,
                row_tokens=self.row_tokens,
                prefix=self.prefixes.length,
            )
            return batching.groups(batches, a.accum)
        return batching.groups(
            batching.global_batches(self.lengths, epoch=epoch, seed=a.seed, micro=a.micro, world=w),
            a.accum,
        )

    def update(self, *args: Any, **kwargs: Any) -> tuple[dict[str, float], float]:
        """One optimizer update (``launch``'s arguments) and its numbers; raises on a
        non-finite gradient norm (the optimizer step was skipped)."""
        return self.launch(*args, **kwargs).result()

    def launch(self, *args: Any, **kwargs: Any) -> PendingUpdate:
        """Queue one optimizer update on the device and return at once (on CUDA): the next
        update can be prepared while this one runs. ``.result()`` reads its numbers back.
        The arguments are ``update_async``'s: ``games``, ``group``, ``micro``, then
        ``prefixes``, the games' rating prefixes (``prefix.Prefixes``; default the train
        split's, for ``games`` the train split), ``outcomes`` likewise their results
        (``outcome.Outcomes``) when the run has the outcome head and ``times`` their clocks
        (``human_time.GameTimes``) when it has the time inputs or the think-time head.

        On CUDA nothing here waits for the device: counts come from the host, the clip does
        not check, and a non-finite norm makes the fused AdamW skip the step on the device
        (``found_inf``); ``result()`` then raises."""
        return PendingUpdate(*self.update_async(*args, **kwargs), heads=self.heads)

    @property
    def heads(self) -> tuple[str, ...]:
        """The side heads the updates train (their statistics' order)."""
        return tuple(h for h in HEADS if getattr(self.net.config, h))

    def update_async(
        self,
        games: Any,
        group: list[list[Any]],
        micro: int,
        prefixes: Any = None,
        outcomes: Any = None,
        times: Any = None,
    ) -> tuple[Any, Any]:
        """The update without reading anything back on CUDA: (stats tensor, norm tensor).

        On the CPU, the exact eager path of before: (values dict, norm)."""
        cuda = self.ctx.device.type == "cuda"
        prefixes = self.prefixes if prefixes is None else prefixes
        outcomes = self.outcomes if outcomes is None else outcomes
        times = self.times if times is None else times
        if self.graphs is not None:
            stats = self.graphs.backward_group(
                games, group, micro=micro, rank=self.ctx.rank, prefixes=prefixes,
                outcomes=outcomes, times=times,
            )  # fmt: skip
            norm = self.graphs.grads.clip(optim.GRAD_CLIP)
        else:
            self.opt.zero_grad(set_to_none=True)
            stats = batching.backward_group(
                self.ddp,
                games,
                group,
                micro=micro,
                rank=self.ctx.rank,
                world=self.ctx.world,
                device=self.ctx.device,
                pad_multiple=self.pad_multiple,
                max_len=self.net.config.block_size,
                row_tokens=self.row_tokens,
                prefixes=prefixes,
                outcomes=outcomes,
                times=times,
                as_tensor=cuda,
            )
            params = self.net.parameters()
            if cuda:
                norm = torch.nn.utils.clip_grad_norm_(params, optim.GRAD_CLIP, foreach=True)
            else:
                norm = torch.nn.utils.clip_grad_norm_(
                    params, optim.GRAD_CLIP, error_if_nonfinite=True
                )
        if cuda:
            self.opt.found_inf = (~torch.isfinite(norm)).float()  # fused AdamW skips if set
        self.opt.step()
        self.sched.step()
        return stats, norm


class PendingUpdate:
    """A launched update whose numbers are not read yet: a pinned host copy and an event
    recorded right after the update, so reading it waits for this update only, not for
    the ones queued after it."""

    def __init__(self, stats: Any, norm: Any, *, heads: tuple[str, ...] = ()) -> None:
        self._values: tuple[dict[str, float], float] | None = None
        self.heads = heads
        if isinstance(stats, dict):  # the CPU's eager path has its numbers already
            self._values = (stats, float(norm))
            return
        self.host = torch.empty(stats.numel() + 1, dtype=torch.float64, pin_memory=True)
        self.host.copy_(torch.cat([stats, norm.double().view(1)]), non_blocking=True)
        self.event = torch.cuda.Event()
        self.event.record()

    def result(self) -> tuple[dict[str, float], float]:
        if self._values is None:
            self.event.synchronize()
            *stats, norm = self.host.tolist()
            if not math.isfinite(norm):
                raise RuntimeError(
                    f"The total norm of order 2.0 for gradients is non-finite ({norm}),"
                    " so it cannot be clipped; the optimizer step was skipped"
                )
            self._values = (batching.stats_dict(stats, self.heads), norm)
        return self._values


def open_cache(path: str, ctx: distributed.Context) -> TokenCache:
    cache = TokenCache(path, verify=ctx.is_main)  # rank 0 re-hashes; the others wait below
    distributed.barrier()
    if len(cache.train) == 0 or len(cache.validation) == 0:
        raise ValueError(f"{path}: nonempty train and validation splits required")
    return cache


def memory_record(ctx: distributed.Context) -> dict[str, Any]:
    cuda = ctx.device.type == "cuda"
    return {
        "rank": ctx.rank,
        "peak_allocated": torch.cuda.max_memory_allocated(ctx.device) if cuda else None,
        "peak_reserved": torch.cuda.max_memory_reserved(ctx.device) if cuda else None,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }


def synchronize(ctx: distributed.Context) -> None:
    if ctx.device.type == "cuda":
        torch.cuda.synchronize(ctx.device)
