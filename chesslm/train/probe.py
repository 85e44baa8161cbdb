"""The probe: step times and memory for microbatches 2 and 8 of the longest training game,
run under torchrun before any training segment (``python -m chesslm.train.segment probe``).

It also warms the run's compile cache for segment 0: its updates compile the training graph
and one validation forward compiles the inference graph (``validation.warm_up``), so the
first segment loads both instead of compiling them."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from chesslm.files import write_json_atomic
from chesslm.record.events import EventLog
from chesslm.train import distributed, resume, validation
from chesslm.train.human_time import GameTimes
from chesslm.train.prefix import Prefixes
from chesslm.train.progress import Progress
from chesslm.train.settings import RunSettings
from chesslm.train.trainer import Trainer, memory_record, open_cache, synchronize


def probe(
    settings: RunSettings,
    *,
    run: str,
    cache_dir: str,
    run_dir: Path | str,
    out: Path | str,
    integrity_receipt: Path | str | None = None,
) -> None:
    """Step times and memory for microbatches 2 and 8 of the longest training game of the run
    ``run`` (a cache at ``cache_dir``), written to ``out`` (probe-results.json)."""
    with distributed.joined(settings.device, threads=settings.threads_per_worker) as ctx:
        train_dir = Path(run_dir) / "train"
        train_dir.mkdir(parents=True, exist_ok=True)
        lock = resume.hold(ctx, train_dir)  # noqa: F841  (a killed run's trainer may linger)
        events = EventLog(train_dir / "events.jsonl", enabled=ctx.is_main)
        cache = open_cache(cache_dir, ctx)
        trainer = Trainer(
            settings, ctx, cache, run_dir=run_dir, integrity_receipt=integrity_receipt
        )
        progress = Progress(f"run {run}, probe", enabled=ctx.is_main)
        games, labels = _longest_game(trainer, cache, ctx.world)
        start = time.perf_counter()
        results = [measure(trainer, ctx, games, labels, micro, progress) for micro in (2, 8)]
        progress.say("one validation forward (it warms the validation graph)")
        if ctx.is_main:  # only rank 0 validates, and writes the results
            warm_up_seconds = validation.warm_up(
                trainer.net,
                cache.validation,
                ctx.device,
                micro=validation.games_per_batch(ctx.device),
                pad_multiple=trainer.pad_multiple,
                forward=trainer.inference,
                prefixes=Prefixes.of_cache(cache, "validation", settings.conditioning),
                outcome=settings.outcome,
                times=GameTimes.of_cache(cache, "validation") if settings.time_inputs else None,
                think_time=settings.think_time,
            )
            result = {
                "status": "passed",
                "run": run,
                "parameters": trainer.parameters,  # the outcome head's too, when it has one
                "outcome": settings.outcome,  # its updates ran the head's forward and loss
                **_time_record(settings),
                "model": settings.model,
                "device": settings.device,
                "world_size": ctx.world,
                "results": results,
                "gpu_work_wall_seconds": time.perf_counter() - start,
                # one validation forward: segment 0 then finds its inference graph compiled
                "validation_warm_up_seconds": warm_up_seconds,
                "scope": "six optimizer steps total, one warmup per shape; repeated longest"
                " training game; discarded weights; not production throughput",
                "test_evaluated": False,
            }
            write_json_atomic(Path(out), result)
            events.write("probe_complete", **result)


def _time_record(settings: RunSettings) -> dict[str, Any]:
    """The probe's record of the time inputs and the think-time head (nothing without them,
    so a run without them writes the record it wrote before)."""
    keys = ("time_inputs", "think_time")
    return {k: True for k in keys if getattr(settings, k)}


def _longest_game(trainer: Trainer, cache: Any, world: int) -> tuple[list[Any], tuple[Any, ...]]:
    """The run's first longest training game (as max() chose), repeated for microbatches up to
    8 a rank, with its labels: its rating prefix, its result and its clocks (the heads'
    targets and loss and the time rows are measured too)."""
    longest = int(np.argmax(trainer.lengths))
    games = [cache.train[longest]] * (8 * world)
    n = len(games)
    prefixes = trainer.prefixes.repeated(longest, n)
    outcomes = None if trainer.outcomes is None else trainer.outcomes.repeated(longest, n)
    times = None if trainer.times is None else trainer.times.repeated(longest, n)
    return games, (prefixes, outcomes, times)


def measure(
    trainer: Trainer,
    ctx: distributed.Context,
    games: list[Any],
    labels: tuple[Any, ...],
    micro: int,
    progress: Progress,
) -> dict[str, Any]:
    """Three updates of ``micro`` copies of the longest game (with its ``labels``: rating
    prefixes, outcome results and clocks, or None) per rank, the last two timed."""
    prefixes, outcomes, clocks = labels
    if ctx.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(ctx.device)
    times = []
    for rep in range(3):  # the first of each shape is a warm-up
        progress.say(f"microbatch {micro}: update {rep + 1} of 3 (the first is a warm-up)")
        distributed.barrier()
        synchronize(ctx)
        t = time.perf_counter()
        batch: list[Any] = list(range(micro * ctx.world))
        if trainer.packing:  # one game per row: the longest game, padded to a row
            batch = [[i] for i in batch]
        values, _ = trainer.update(games, [batch], micro, prefixes, outcomes, clocks)
        synchronize(ctx)
        if rep:
            times.append(time.perf_counter() - t)
    return {
        "microbatch_per_gpu": micro,
        "sequence_length": int(len(games[0]) - 1 + prefixes.length),
        "timed_steps": len(times),
        "step_seconds": times,
        "useful_targets_per_second": values["valid_targets"] * len(times) / sum(times),
        "padded_tokens_per_second": values["padded_tokens"] * len(times) / sum(times),
        "memory": distributed.all_gather_object(memory_record(ctx)),
    }
