"""Training speed: the seed's protocol, the project's default step and the packed path.

One run on one device (or under torchrun, DDP) times, on the same data:

* ``reference`` the seed's protocol as the seed ran it: eager, attention with a padding mask
  (no flash kernel), a host sync per microbatch (``.item()``) and per update;
* ``compiled``  the project's training step (``trainer.Trainer.update``) without CUDA graphs:
  same batches and mathematics, compiled (CUDA), lengths bucketed to multiples of 64, causal
  flash attention, fused AdamW, one read-back per update;
* ``graphs``    the same with every microbatch shape replayed as a CUDA graph
  (``chesslm.train.cuda_graphs``): the pipeline's default on CUDA; with several GPUs one
  all-reduce of the whole flat gradient buffer after the last microbatch;
* ``graphs-overlap`` the same with the opt-in reduction (``CHESSLM_GRAD_OVERLAP=1``): the last
  microbatch's gradients all-reduced in buckets during its backward, each block compiled on
  its own so that its gradients complete early (GPU only; on one GPU it is ``graphs``);
* ``packed``    the throughput path (``--packing=on``): whole games packed into full context
  rows, positions restarting at each game, a FlexAttention document mask (CUDA), replayed
  as a CUDA graph on CUDA (the pipeline's setting);
* ``packed-compiled`` the same without CUDA graphs (GPU only: on the CPU it is ``packed``);
* ``PATH+outcome`` any path above with the outcome head (``runs.NAME.outcome: true``): its
  cost is this path's useful targets/s against PATH's, in the same run;
* ``PATH+time`` (also ``PATH+outcome+time``) with the time inputs and the think-time head
  (``runs.NAME.time_inputs``, ``think_time``): the clock rows and think targets built on the
  host for every microbatch, the embedding and the head; ``vs_base_path`` is its useful
  targets/s over the mean of PATH's in the same run (a path may be listed twice: A,B,B,A).

It reports useful targets/s, padded tokens/s, padding fraction, model FLOP utilisation
against a bf16 matmul peak measured in the same run, and peak memory, plus a validation
benchmark (validation time vs a bare forward pass over the same tokens) and optionally the
segment start-up (process start -> first optimizer step, cold and warm compile caches).

    python benchmarks/train_speed.py --json out/speed-1gpu.json                 # 1 GPU
    python benchmarks/train_speed.py --workers 1,2 --json out/speed-scaling.json  # torchrun 1, 2
    python benchmarks/train_speed.py --startup --json out/startup.json          # cold/warm
    python benchmarks/train_speed.py --device cpu --model tiny --steps 2 --json /tmp/s.json
    python benchmarks/train_speed.py --paths graphs,graphs+outcome,packed,packed+outcome \
        --json out/outcome-cost.json                                            # the head's cost
    python benchmarks/train_speed.py --paths graphs,graphs+time,graphs+time,graphs \
        --json out/time-cost.json                              # human time's cost (issue 48)

Data: ``--cache DIR`` (a token cache) or, by default, synthetic games with a Lichess-like
length distribution (random moves and results; speed does not depend on them).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PROCESS_START = time.time()
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from chesslm.data import metadata, tokens  # noqa: E402
from chesslm.data.cache import N_MOVE_CODES, table_starts  # noqa: E402
from chesslm.model import gpt  # noqa: E402
from chesslm.train import (  # noqa: E402
    batching,
    compilation,
    cuda_graphs,
    distributed,
    trainer,
    validation,
)
from chesslm.train.optim import GRAD_CLIP  # noqa: E402
from chesslm.train.settings import RunSettings  # noqa: E402

IMPORTS_DONE = time.time()

PATHS = ("reference", "compiled", "graphs", "graphs-overlap", "packed-compiled", "packed")
GPU_ONLY = ("graphs", "graphs-overlap", "packed-compiled")


OUTCOME = "+outcome"  # a path's suffix: the same path with the outcome head
TIME = "+time"  # a path's last suffix: with the time inputs and the think-time head


def is_packed(path: str) -> bool:
    return path.startswith("packed")


def base_path(path: str) -> str:
    return path.removesuffix(TIME).removesuffix(OUTCOME)


# ----------------------------------------------------------------------------- data


class SyntheticGames:
    """Games of random moves: BOS, (source, destination, promotion) triples, EOS."""

    def __init__(self, n: int, seed: int, mean_plies: float, max_tokens: int) -> None:
        rng = np.random.default_rng(seed)
        max_plies = (max_tokens - 2) // 3
        plies = np.clip(np.rint(rng.gamma(2.0, mean_plies / 2.0, n)), 1, max_plies).astype(int)
        lengths = 2 + 3 * plies
        self.offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=self.offsets[1:])
        t = rng.integers(0, 64, int(self.offsets[-1])).astype(np.uint8)
        self.tokens = t
        pos = np.arange(len(t)) - np.repeat(self.offsets[:-1], lengths)
        t[(pos % 3 == 0) & (pos > 0)] = tokens.PROMO_NONE
        t[self.offsets[:-1]] = tokens.BOS
        t[self.offsets[1:] - 1] = tokens.EOS

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return self.tokens[self.offsets[i] : self.offsets[i + 1]]

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


class SyntheticCache:
    """Duck-types TokenCache: train/validation games, their random results (the outcome
    head's targets) and clocks (a Lichess-like blitz game's readings: the time inputs' and
    the think-time head's), column files in ``directory`` as a cache has, and random legality
    tables."""

    def __init__(
        self, n_train: int, n_val: int, seed: int, mean_plies: float, ctx: int, directory: Path
    ) -> None:
        self.train = SyntheticGames(n_train, seed, mean_plies, ctx)
        self.validation = SyntheticGames(n_val, seed + 1, mean_plies, ctx)
        self.fingerprint = f"synthetic-{n_train}-{n_val}-{seed}-{mean_plies}"
        self.directory = directory
        rng = np.random.default_rng(seed + 2)
        for split, n in (("train", n_train), ("validation", n_val)):
            column = metadata.column_path(directory / split, "result")
            column.parent.mkdir(parents=True, exist_ok=True)
            np.save(column, rng.integers(0, 3, n).astype(np.int8))
            games = getattr(self, split)
            plies = int(((games.lengths - 2) // 3).sum())
            clocks = 180 - np.cumsum(rng.exponential(2.0, plies)) % 180  # falling, in [0, 180]
            for name, values in (
                ("clock", clocks.astype(np.float32)),
                ("base_seconds", np.full(n, 180, dtype=np.int32)),
                ("increment_seconds", np.full(n, 2, dtype=np.int32)),
            ):
                np.save(metadata.column_path(directory / split, name), values)
        self._mask = rng.integers(0, 256, (len(self.validation.tokens), 16), dtype=np.uint8)
        plies = int(((self.validation.lengths - 2) // 3).sum())
        codes = np.sort(rng.integers(0, N_MOVE_CODES, (plies, 30)), axis=1).astype(np.int32)
        self._codes = codes.ravel()
        self._offsets = np.arange(plies + 1, dtype=np.int64) * 30

    def legality_games(self) -> np.ndarray:
        return np.arange(len(self.validation), dtype=np.int64)  # tables for every game

    def legality_starts(self) -> tuple[np.ndarray, np.ndarray]:
        return table_starts(self.validation.lengths)

    def legal_mask(self) -> np.ndarray:
        return self._mask

    def legal_moves(self) -> tuple[np.ndarray, np.ndarray]:
        return self._codes, self._offsets


def open_data(a: argparse.Namespace, ctx_len: int) -> Any:
    if a.cache:
        from chesslm.data.cache import TokenCache

        return TokenCache(a.cache)
    directory = Path(a.out) / "synthetic-cache"
    return SyntheticCache(a.games, a.val_games, a.seed, a.mean_plies, ctx_len, directory)


# ----------------------------------------------------------------------------- helpers


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_peak(device: torch.device) -> float | None:
    """Measured bf16 dense matmul FLOP/s (8192^3), or None on the CPU."""
    if device.type != "cuda":
        return None
    n = 8192
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    sync(device)
    t = time.perf_counter()
    reps = 20
    for _ in range(reps):
        a @ b
    sync(device)
    return 2 * n**3 * reps / (time.perf_counter() - t)


def model_flops(cfg: gpt.GPTConfig, game_lengths: list[int]) -> float:
    """Useful training FLOPs (forward + backward) of games of these token counts: 6 x matmul
    parameters per target plus causal attention 6 * layers * width * n^2 per game."""
    matmul_params = cfg.n_layer * 12 * cfg.n_embd**2 + cfg.vocab_size * cfg.n_embd
    targets = sum(n - 1 for n in game_lengths)
    attention = 6 * cfg.n_layer * cfg.n_embd * sum((n - 1) ** 2 for n in game_lengths)
    return 6 * matmul_params * targets + attention


def trainer_for(a: argparse.Namespace, ctx: distributed.Context, data: Any, path: str) -> Any:
    """The project's Trainer for one path, from the run settings that path stands for."""
    timed = path.endswith(TIME)
    outcome, path = path.removesuffix(TIME).endswith(OUTCOME), base_path(path)
    packed = is_packed(path)
    settings = RunSettings(
        dataset="benchmark",
        model=a.model,
        device=ctx.device.type,
        workers=ctx.world,
        threads_per_worker=a.threads,
        micro=a.packed_rows if packed else a.micro,
        accum=a.accum,
        seed=a.seed,
        compile=False if path == "reference" else compilation.resolve(a.compile, ctx.device.type),
        packing=packed,
        cuda_graphs=None if path in ("graphs", "graphs-overlap", "packed") else False,
        outcome=outcome,
        time_inputs=timed,
        think_time=timed,
    )
    before = cuda_graphs.OVERLAP, cuda_graphs.BUCKET_MB
    # read once, when the Trainer is built
    cuda_graphs.OVERLAP, cuda_graphs.BUCKET_MB = path == "graphs-overlap", a.bucket_mb
    try:
        return trainer.Trainer(settings, ctx, data, run_dir=a.out)
    finally:
        cuda_graphs.OVERLAP, cuda_graphs.BUCKET_MB = before


def reference_update(t: Any, games: Any, group: list[list[int]], micro: int) -> dict[str, float]:
    """The seed's step: eager, padding-mask attention, .item() per microbatch, checked clip."""
    ctx = t.ctx
    t.opt.zero_grad(set_to_none=True)
    local = [[games[i] for i in b[ctx.rank * micro : (ctx.rank + 1) * micro]] for b in group]
    valid = sum(len(g) - 1 for part in local for g in part)
    total = distributed.all_reduce_sum(
        torch.tensor([float(valid)], dtype=torch.float64, device=ctx.device)
    )
    scale = ctx.world / total.item()
    out = {"loss_sum": 0.0, "valid_targets": 0, "padded_tokens": 0}
    for k, part in enumerate(local):
        x, y = batching.collate(part, "cpu")
        x, y = x.to(ctx.device), y.to(ctx.device)  # pageable copies, as the seed's collate
        keys = y.ne(batching.IGNORE) | (torch.arange(y.size(1), device=ctx.device) == 0)
        T = y.size(1)
        causal = torch.ones(T, T, dtype=torch.bool, device=ctx.device).tril()
        mask = (causal & keys[:, None, :]).unsqueeze(1)  # (B, 1, T, T) padding + causal
        last = k == len(local) - 1
        nosync = getattr(t.ddp, "no_sync", None)
        with contextlib.nullcontext() if last or nosync is None else nosync():
            with gpt.autocast(ctx.device):
                logits = t.ddp(x, mask=mask)
            loss = F.cross_entropy(
                logits.float().view(-1, logits.size(-1)),
                y.view(-1),
                ignore_index=-100,
                reduction="sum",
            )
            (loss * scale).backward()
        out["loss_sum"] += loss.item()
        out["valid_targets"] += int(y.ne(-100).sum())
        out["padded_tokens"] += y.numel()
    torch.nn.utils.clip_grad_norm_(t.net.parameters(), GRAD_CLIP, error_if_nonfinite=True)
    t.opt.step()
    t.sched.step()
    sync(ctx.device)
    return out


def pipelined(t: Any, games: Any, groups: list[Any], micro: int) -> Any:
    """Each update's numbers, read back only after the next update is queued."""
    pending = None
    for group in groups:
        launched = t.launch(games, group, micro)
        if pending is not None:
            yield pending.result()[0]
        pending = launched
    if pending is not None:
        yield pending.result()[0]


def unique_graphs() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def group_lengths(games: Any, group: list[list[Any]], packed: bool) -> list[int]:
    if packed:
        return [len(games[i]) for b in group for row in b for i in row]
    return [len(games[i]) for b in group for i in b]


def time_path(
    a: argparse.Namespace, ctx: distributed.Context, data: Any, path: str, peak: float | None
) -> dict[str, Any]:
    device = ctx.device
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    t0 = time.perf_counter()
    t = trainer_for(a, ctx, data, path)
    steps = a.ref_steps if path == "reference" else a.steps
    plan = list(t.plan(0))
    if steps == 0:  # the rest of the first epoch: the same games on any number of GPUs
        steps = len(plan) - a.warmup
    need = a.warmup + steps
    epoch = 1
    while len(plan) < need and epoch < 100:  # small data (packed rows): more epochs' plans
        plan = plan + list(t.plan(epoch))
        epoch += 1
    if len(plan) < need:
        raise SystemExit(f"{path}: the plan has {len(plan)} updates, {need} needed (more --games)")
    packed = is_packed(path)
    micro = a.packed_rows if packed else a.micro
    games = data.train

    def one(group: list[list[Any]]) -> dict[str, float]:
        if path == "reference":
            return reference_update(t, games, group, micro)
        values, _ = t.update(games, group, micro)
        return values

    def run(groups: list[list[list[Any]]]) -> dict[str, float]:
        """Updates as a segment runs them: the reference syncs every update, the project's
        paths keep one update in flight (read back after the next one is queued)."""
        totals = {"loss_sum": 0.0, "valid_targets": 0, "padded_tokens": 0}
        if path == "reference":
            results = (one(group) for group in groups)
        else:
            results = pipelined(t, games, groups, micro)
        for values in results:
            for k in totals:
                totals[k] += values[k]
        return totals

    # warm-up: compiles, and (padded paths) one update of every length bucket, so that no
    # one-time cost of a new shape (graph, kernel specialisation, allocation) is timed
    warm_groups = list(plan[: a.warmup])
    if not packed:  # the reference too, for its allocator: a fair comparison
        # every microbatch shape of the timed and profiled updates (each rank's share; a
        # group's last microbatch has its own graphs when it reduces in buckets), so no
        # compilation or CUDA-graph capture is timed
        seen: set[tuple[int, int, bool]] = set()
        for group in plan[a.warmup :]:
            shapes = {
                (
                    r,
                    batching.padded_length(max(len(games[i]) for i in part) - 1, 64, 1024),
                    k == len(group) - 1,
                )
                for k, batch in enumerate(group)
                for r in range(ctx.world)
                if len(part := batch[r * micro : (r + 1) * micro])
            }
            if not shapes <= seen:
                seen |= shapes
                warm_groups.append(group)
    for group in warm_groups:
        one(group)
    sync(device)
    distributed.barrier()
    warm_seconds = time.perf_counter() - t0
    timed = plan[a.warmup : a.warmup + steps]
    graphs = unique_graphs()
    start = time.perf_counter()
    totals = run(timed)
    sync(device)
    seconds = time.perf_counter() - start
    lengths = [n for g in timed for n in group_lengths(games, g, packed)]
    flops = model_flops(t.net.config, lengths)  # all ranks' games (the group is global)
    world = ctx.world
    result = {
        "path": path,
        "world_size": world,
        "compiled": t.compiled,
        "packing": t.packing,
        "outcome_head": t.outcomes is not None,
        "human_time": t.times is not None,
        "micro": micro,
        "accum": a.accum,
        "timed_updates": steps,
        "seconds": seconds,
        "warmup_seconds": warm_seconds,
        "warmup_updates": len(warm_groups),
        "graphs_compiled_while_timed": unique_graphs() - graphs,
        "cuda_graphs_captured": t.graphs.graphs if t.graphs is not None else 0,
        "gradient_bucket_mb": a.bucket_mb,
        "gradient_buckets": len(t.graphs.buckets)
        if t.graphs is not None and t.graphs.buckets is not None
        else None,
        "useful_targets_per_second": totals["valid_targets"] / seconds,
        "useful_targets_per_second_per_gpu": totals["valid_targets"] / seconds / world,
        "padded_tokens_per_second": totals["padded_tokens"] / seconds,
        "padding_fraction": 1 - totals["valid_targets"] / max(1, totals["padded_tokens"]),
        "train_nll": totals["loss_sum"] / max(1, totals["valid_targets"]),
        "model_tflops_per_gpu": flops / seconds / world / 1e12,
        "mfu": (flops / seconds / world / peak) if peak else None,
        "peak_allocated_gib": (torch.cuda.max_memory_allocated(device) / 2**30)
        if device.type == "cuda"
        else None,
    }
    if a.profile:
        extra = plan[a.warmup + steps : a.warmup + steps + a.profile] or timed[: a.profile]
        result["profile"] = profile_updates(a, run, extra, device, f"{path}-{world}gpu")
        result["profile"]["unprofiled_seconds_per_update"] = seconds / steps
    default = "graphs" if device.type == "cuda" else "compiled"  # the pipeline's default path
    if path == default and ctx.is_main and a.validation:
        result["validation"] = time_validation(a, t, data)
    t = None  # free the model and optimizer before the next path
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return result


def profile_updates(
    a: argparse.Namespace, run: Any, groups: list[Any], device: torch.device, label: str
) -> dict[str, Any]:
    """``torch.profiler`` over a few more updates: device kernel time against wall time (a
    host-bound step shows a busy fraction well below 1), and the top operators, written next
    to the JSON as ``<json stem>-<label>-profile.txt``."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    sync(device)
    with profile(activities=activities) as prof:
        start = time.perf_counter()
        run(groups)
        sync(device)
        wall = time.perf_counter() - start
    events = prof.key_averages()
    on_device = [e for e in events if e.device_type == DeviceType.CUDA]
    kernel_seconds = sum(e.self_device_time_total for e in on_device) / 1e6
    n = max(1, len(groups))
    sort = "self_cuda_time_total" if cuda else "self_cpu_time_total"
    text = [f"{label}: {len(groups)} profiled updates, {wall:.3f} s wall (profiler on)"]
    if cuda:
        text.append(events.table(sort_by=sort, row_limit=30, max_name_column_width=70))
    text.append(events.table(sort_by="self_cpu_time_total", row_limit=30, max_name_column_width=70))
    if int(os.environ.get("RANK", "0")) == 0:
        out = Path(a.json).with_name(f"{Path(a.json).stem}-{label}-profile.txt")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("\n\n".join(text))
    return {
        "updates": len(groups),
        "wall_seconds_per_update": wall / n,
        "device_kernel_seconds_per_update": kernel_seconds / n if cuda else None,
        "device_busy_fraction": kernel_seconds / wall if cuda else None,
        "kernel_launches_per_update": sum(e.count for e in on_device) / n if cuda else None,
    }


def time_validation(a: argparse.Namespace, t: Any, data: Any) -> dict[str, Any]:
    """evaluate.evaluate vs a bare forward pass over the same microbatches (rank 0)."""
    device = t.ctx.device
    val = validation.ValidationSet(data, device, legality_games=None)
    games = [val.games[i] for i in range(len(val))]
    per_batch = validation.games_per_batch(device)

    @torch.no_grad()
    def bare() -> None:
        t.net.eval()
        for first in range(0, len(games), per_batch):
            x, _ = batching.collate(
                games[first : first + per_batch], device, pad_multiple=t.pad_multiple, max_len=1024
            )
            with gpt.autocast(device):
                t.inference(x)
        t.net.train()

    def full() -> None:
        validation.evaluate(
            t.net, val, micro=per_batch, pad_multiple=t.pad_multiple, forward=t.inference
        )

    for fn in (bare, full):  # warm-up: inference graphs compile here
        fn()
    timings = {}
    for name, fn in (("bare_forward", bare), ("validation", full), ("bare_forward_2", bare)):
        sync(device)
        s = time.perf_counter()
        fn()
        sync(device)
        timings[name] = time.perf_counter() - s
    forward = min(timings["bare_forward"], timings["bare_forward_2"])
    return {
        "games": len(games),
        "validation_seconds": timings["validation"],
        "bare_forward_seconds": forward,
        "ratio": timings["validation"] / forward,
        "target_ratio_max": 1.5,
    }


# ----------------------------------------------------------------------------- driver


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", required=True, help="where the results JSON goes")
    p.add_argument("--device", choices=["cuda", "cpu"], default=None, help="default: cuda if any")
    p.add_argument("--model", default="baseline")
    p.add_argument("--paths", default=",".join(PATHS), help=f"subset of {','.join(PATHS)}")
    p.add_argument("--micro", type=int, default=8, help="games per microbatch (seed: 8)")
    p.add_argument("--accum", type=int, default=2)
    p.add_argument("--packed-rows", type=int, default=16, help="rows per microbatch (packed)")
    p.add_argument(
        "--steps",
        type=int,
        default=30,
        help="timed updates (default, packed); 0: the rest of the first epoch, so that 1 and 2"
        " GPUs are timed on the same games",
    )
    p.add_argument("--ref-steps", type=int, default=10, help="timed updates (reference)")
    p.add_argument("--warmup", type=int, default=3, help="untimed updates before timing")
    p.add_argument("--compile", choices=compilation.CHOICES, default="auto")
    p.add_argument(
        "--bucket-mb",
        type=float,
        default=cuda_graphs.BUCKET_MB,
        help="graphs path, several GPUs: gradient all-reduce bucket size",
    )
    p.add_argument("--compile-cache", help="inductor/triton cache dir (default: OUT/compile-cache)")
    p.add_argument("--cache", help="token cache directory (default: synthetic games)")
    p.add_argument("--games", type=int, default=20000, help="synthetic training games")
    p.add_argument("--val-games", type=int, default=512, help="synthetic validation games")
    p.add_argument("--mean-plies", type=float, default=80.0, help="synthetic mean game plies")
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--profile", type=int, default=0, help="updates to profile after timing")
    p.add_argument("--no-validation", dest="validation", action="store_false")
    p.add_argument("--out", default=None, help="scratch dir (default: a temporary directory)")
    p.add_argument("--workers", help="e.g. 1,2: run under torchrun once per worker count")
    p.add_argument("--startup", action="store_true", help="measure cold and warm start-up")
    p.add_argument(
        "--startup-runs",
        default="cold,warm",
        help="labels of the start-up processes, run in turn on one compile cache (the first"
        " is cold only if --compile-cache is new)",
    )
    p.add_argument("--startup-child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--timeout", type=int, default=900, help="seconds per child process")
    a = p.parse_args(argv)
    for path in a.paths.split(","):
        suffixes = path.removeprefix(base_path(path))
        known = suffixes in ("", OUTCOME, TIME, OUTCOME + TIME)
        if base_path(path) not in PATHS or path.startswith("reference+") or not known:
            p.error(
                f"--paths: unknown path {path!r} (known: {', '.join(PATHS)}, each but"
                f" reference also with {OUTCOME}, {TIME} or {OUTCOME}{TIME})"
            )
    if a.device is None:
        a.device = "cuda" if torch.cuda.is_available() else "cpu"
    a.out = a.out or tempfile.mkdtemp(prefix="chesslm-speed-")
    return a


def run_paths(a: argparse.Namespace) -> dict[str, Any]:
    with distributed.joined(a.device, threads=a.threads) as ctx:
        if a.device == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = True  # FP32 leftovers (not under autocast)
        peak = matmul_peak(ctx.device)
        data = open_data(a, gpt.config_for(a.model).block_size)
        results = []
        for path in a.paths.split(","):
            if base_path(path) in GPU_ONLY and a.device != "cuda":
                print(f"{path}: skipped (needs a GPU)", flush=True)
                continue
            r = time_path(a, ctx, data, path, peak)
            results.append(r)
            if ctx.is_main:
                print(json.dumps(r), flush=True)
        ref = next((r for r in results if r["path"] == "reference"), None)
        for r in results:
            if ref:
                r["speedup_vs_reference"] = (
                    r["useful_targets_per_second"] / ref["useful_targets_per_second"]
                )
            # a head's cost: against its own path, every time that path ran (timed in the
            # order A, B, B, A, the drift of a loaded machine cancels)
            base = [
                b["useful_targets_per_second"] for b in results if b["path"] == base_path(r["path"])
            ]
            if base and r["path"] != base_path(r["path"]):
                r["vs_base_path"] = r["useful_targets_per_second"] / float(np.mean(base))
        return {
            "device": torch.cuda.get_device_name(ctx.device) if a.device == "cuda" else "cpu",
            "torch": torch.__version__,
            "world_size": ctx.world,
            "model": a.model,
            "data": a.cache or f"synthetic ({a.games} games, mean {a.mean_plies} plies)",
            "matmul_peak_tflops": peak / 1e12 if peak else None,
            "results": results,
        }


def table(records: list[dict[str, Any]]) -> str:
    head = (
        f"{'path':<15} {'gpus':>4} {'targets/s/gpu':>14} {'x ref':>6} {'padded tok/s':>13}"
        f" {'pad%':>5} {'MFU%':>5} {'peak GiB':>8} {'warm-up s':>9}"
    )
    lines = [head, "-" * len(head)]
    for rec in records:
        for r in rec["results"]:
            per_gpu = r["useful_targets_per_second_per_gpu"]
            speedup = r.get("speedup_vs_reference") or 0
            lines.append(
                f"{r['path']:<15} {r['world_size']:>4} {per_gpu:>14,.0f}"
                f" {speedup:>6.1f} {r['padded_tokens_per_second']:>13,.0f}"
                f" {100 * r['padding_fraction']:>5.1f} {100 * (r['mfu'] or 0):>5.1f}"
                f" {r['peak_allocated_gib'] or 0:>8.1f} {r['warmup_seconds']:>9.1f}"
            )
            if "vs_base_path" in r:
                lines.append(f"  {r['vs_base_path']:.3f} x {base_path(r['path'])}'s targets/s")
            v = r.get("validation")
            if v:
                lines.append(
                    f"  validation {v['validation_seconds']:.3f} s vs bare forward"
                    f" {v['bare_forward_seconds']:.3f} s: {v['ratio']:.2f}x (goal <= 1.5x)"
                )
    return "\n".join(lines)


VALUED = ("--workers", "--json", "--compile-cache", "--startup-runs")  # flags that take a value


def strip_flags(argv: list[str], names: tuple[str, ...]) -> list[str]:
    """``argv`` without the flags ``names`` (``--x=v``, ``--x v`` or plain ``--x``).

    >>> strip_flags(["--a", "1", "--json", "x", "--workers=1,2", "--startup", "--b"],
    ...             ("--json", "--workers", "--startup"))
    ['--a', '1', '--b']
    """
    out, skip = [], False
    for x in argv:
        if skip:
            skip = False
            continue
        name = x.split("=", 1)[0]
        if name in names:
            skip = "=" not in x and name in VALUED
            continue
        out.append(x)
    return out


def child_command(a: argparse.Namespace, argv: list[str], workers: int, out: Path) -> list[str]:
    keep = strip_flags(argv, ("--workers", "--json", "--startup"))
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={workers}",
        str(Path(__file__).resolve()),
        *keep,
        f"--json={out}",
    ]


def startup_child(a: argparse.Namespace) -> None:
    """A fresh process: build, compile, first update, then every length bucket once.

    With ``CHESSLM_STARTUP_PROFILE=1`` the process runs under cProfile and writes the top
    functions by cumulative time next to its marks (``*.profile.txt``)."""
    profiler = None
    if os.environ.get("CHESSLM_STARTUP_PROFILE"):
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    marks = {"process_start": PROCESS_START, "imports_done": IMPORTS_DONE}
    ctx = distributed.init(a.device, threads=a.threads)
    if ctx.device.type == "cuda":
        torch.zeros(1, device=ctx.device)  # the CUDA context exists from here
    marks["device_ready"] = time.time()
    data = open_data(a, gpt.config_for(a.model).block_size)
    marks["data_open"] = time.time()
    t = trainer_for(a, ctx, data, "graphs" if a.device == "cuda" else "compiled")
    marks["model_built"] = time.time()
    plan = t.plan(0)
    t.update(data.train, plan[0], a.micro)
    sync(ctx.device)
    marks["first_update"] = time.time()
    if profiler is not None:
        import io
        import pstats

        profiler.disable()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(80)
        Path(a.json).with_suffix(".profile.txt").write_text(text.getvalue())
    from torch._dynamo.utils import compile_times

    marks["dynamo_compile_times"] = compile_times(repr="str")
    seen: set[int] = set()
    for group in plan:
        T = max(n for n in group_lengths(data.train, group, False))
        bucket = batching.padded_length(T - 1, t.pad_multiple, 1024)
        if bucket not in seen:
            seen.add(bucket)
            t.update(data.train, group, a.micro)
    sync(ctx.device)
    marks["all_buckets"] = time.time()
    marks["buckets"] = len(seen)
    Path(a.json).write_text(json.dumps(marks))


def startup(a: argparse.Namespace, argv: list[str]) -> dict[str, Any]:
    cache_dir = Path(a.compile_cache or tempfile.mkdtemp(prefix="chesslm-compile-cache-"))
    out = {"compile_cache": str(cache_dir)}
    for label in a.startup_runs.split(","):
        marks_path = Path(a.out) / f"startup-{label}.json"
        keep = strip_flags(argv, ("--json", "--startup", "--compile-cache", "--startup-runs"))
        cmd = [sys.executable, str(Path(__file__).resolve()), *keep, "--startup-child"]
        cmd += [f"--json={marks_path}", f"--compile-cache={cache_dir}"]
        launched = time.time()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
        if proc.returncode != 0:
            raise SystemExit(f"startup {label} failed:\n{proc.stdout[-3000:]}{proc.stderr[-5000:]}")
        marks = json.loads(marks_path.read_text())
        out[label] = {
            "process_start_to_first_update_s": marks["first_update"] - launched,
            "interpreter_start_s": marks["process_start"] - launched,
            "imports_done_s": marks["imports_done"] - launched,
            "device_ready_s": marks["device_ready"] - launched,
            "data_open_s": marks["data_open"] - launched,
            "process_start_to_model_built_s": marks["model_built"] - launched,
            "process_start_to_all_buckets_s": marks["all_buckets"] - launched,
            "buckets": marks["buckets"],
            "dynamo_compile_times": marks["dynamo_compile_times"],
        }
        print(f"startup {label}: {json.dumps(out[label])}", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    a = parse(argv)
    cache_dir = a.compile_cache or str(Path(a.out) / "compile-cache")
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(Path(cache_dir, "inductor").resolve()))
    os.environ.setdefault("TRITON_CACHE_DIR", str(Path(cache_dir, "triton").resolve()))
    if a.startup_child:
        startup_child(a)
        return 0
    if a.startup:
        record = startup(a, argv)
        for label in a.startup_runs.split(","):
            r = record[label]
            print(
                f"start-up {label}: process start -> model built"
                f" {r['process_start_to_model_built_s']:.1f} s, first optimizer step"
                f" {r['process_start_to_first_update_s']:.1f} s (goal warm <= 15 s), all"
                f" {r['buckets']} length buckets {r['process_start_to_all_buckets_s']:.1f} s"
            )
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(record, indent=2))
        return 0
    if a.workers and "WORLD_SIZE" not in os.environ:
        records = []
        for w in (int(x) for x in a.workers.split(",")):
            out = Path(a.out) / f"workers-{w}.json"
            cmd = child_command(a, argv, w, out)
            print(f"== {w} worker(s): {' '.join(cmd)}", flush=True)
            proc = subprocess.run(cmd, timeout=a.timeout)
            if proc.returncode != 0:
                print(f"{w} worker(s) failed with exit code {proc.returncode}", flush=True)
                records.append({"world_size": w, "failed": proc.returncode, "results": []})
                continue
            records.append(json.loads(out.read_text()))
        if len(records) > 1 and all(r["results"] for r in records):
            one = {r["path"]: r for r in records[0]["results"]}
            for rec in records[1:]:
                for r in rec["results"]:
                    if r["path"] in one:
                        r["scaling_vs_first"] = (
                            r["useful_targets_per_second"]
                            / one[r["path"]]["useful_targets_per_second"]
                        )
        print(table(records))
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps({"runs": records}, indent=2))
        return 1 if any(r.get("failed") for r in records) else 0
    record = run_paths(a)
    if int(os.environ.get("RANK", "0")) == 0:
        print(table([record]))
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
