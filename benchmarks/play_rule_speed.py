"""Move-matching as rule play runs it, against the batched scorer alone, same run.

    python benchmarks/play_rule_speed.py --preset tiny --device cpu --threads 2      # here
    python benchmarks/play_rule_speed.py --preset baseline --device cuda --threads 16 \\
        --pgn resources/lichess-sample.pgn.zst resources/lichess-github.pgn.zst \\
        --validation 0.35 --legality-games 1024                                # one H200
    python benchmarks/play_rule_speed.py --preset baseline --device cuda --threads 16 \\
        --pgn month.pgn.zst --validation 0.05 --games 10000 --compile   # a month, as the rule

The PGN files become a dataset and a token cache (``chesslm.data.convert``, ``cache``; no
snakemake) whose ``legality_games`` is smaller than the validation split, so move-matching
must prepare the other games' legal moves (python-chess), as the rule does. Then, alternating
``--repeats`` times:

* part: ``matching.Evaluator`` over the validation split (``--games``: the rule's ``match.games``,
  games chosen by its seeded key; every game by default; ``--chunk-games``, chunks
  written to a fresh state directory; ``--window``, chunks ordered by length together,
  ``matching.chunked``: 1 is the contiguous chunks of the code before windows), with the
  job's ``--threads`` split between torch and preparation as ``chesslm.scorer.prepare`` says;
  its wall time from the evaluator's opening to its last chunk written;
* scorer: ``scoring.score_chunks`` over the same chunks' inputs, prepared beforehand, in one
  pipeline (``score_many``'s batches, what ``benchmarks/play_speed.py`` times), torch with
  every one of ``--threads`` (on the CPU; on a GPU one, as the part).

Each part's ``part_phases`` says where its time went: the evaluator opened, the first batch's
results back (the preparation pool started and the first chunk prepared), the last batch's.
``--prep-workers 14,12`` also runs the part with those preparation processes, same rounds;
``--profile`` runs the parts of rounds 0 and 1 under torch.profiler (what a first pass adds);
``--no-warm-up`` leaves out the warm-up pass (one chunk) before round 0, so that round 0's
part is a fresh job's (with ``--compile``, its compiling too);
``--sdpa torch`` leaves the attention kernels to torch (``chesslm.scorer.kernels``; the rule's:
``play``, no cuDNN plan per new shape), ``efficient``/``cudnn``/``math`` pin one.

Prints one JSON line per run and a summary: positions/s of each, their ratio (part over
scorer; 1 = preparation costs nothing), its median and spread, and the rows' tables (the
bootstrap) timed apart. Weights are freshly initialised: the speed does not depend on them.
Needs torch, numpy, chess, zstandard and rust-pgn-reader only.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from chesslm import files  # noqa: E402
from chesslm.data import cache, convert, integrity  # noqa: E402
from chesslm.match import matching, protocols  # noqa: E402
from chesslm.model import gpt  # noqa: E402
from chesslm.scorer import branched, kernels, prepare, scoring  # noqa: E402


def build_cache(work: Path, pgns: list[Path], args: argparse.Namespace) -> Path:
    """A verified dataset of ``pgns`` and its token cache (legality tables for a subset)."""
    dataset, out = work / "dataset", work / "token-cache"
    settings = convert.Settings(context=args.context, validation=args.validation, test=0.01)
    convert.convert(pgns, dataset, settings, workers=args.threads)
    receipt = dataset / "integrity-receipt.json"
    files.write_json_atomic(receipt, integrity.verify_dataset(dataset))
    cache.build_from_dataset(dataset, receipt, out, workers=args.threads,
                             legality_games=args.legality_games)  # fmt: skip
    return out


def evaluator(net, cache_dir: Path, state: Path, args, workers: int | None = None):  # noqa: ANN001, ANN201
    """The rule's evaluator (``workers``: preparation processes instead of the rule's; 0 is
    as before chesslm.scorer.prepare, every game's tables computed in-process when its chunk is
    scored, torch on every core)."""
    shutil.rmtree(state, ignore_errors=True)
    torch.set_num_threads(args.threads)
    ev = matching.Evaluator(net, cache_dir, state, games=args.games, chunk_games=args.chunk_games,
                            batch_tokens=args.batch_tokens, device=torch.device(args.device),
                            attention=args.attention, threads=args.threads,
                            window=args.window)  # fmt: skip
    if workers is not None:
        ev.workers = workers
    return ev


class Batches:
    """The part's progress callback: when each batch's results were back (perf_counter)."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def update(self, done: int) -> None:
        self.times.append(time.perf_counter())


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def part(net, cache_dir: Path, state: Path, args, workers: int | None = None):  # noqa: ANN001, ANN201
    """The rule's move-matching of every validation game: positions, wall seconds, evaluator,
    and where the time went (seconds from the start: the evaluator opened, the first batch's
    results back, the last one's; the rest is writing the last chunk and closing)."""
    sync(args.device)
    t0 = time.perf_counter()
    ev = evaluator(net, cache_dir, state, args, workers)
    opened, batches = time.perf_counter(), Batches()
    assert ev.run(float("inf"), progress=batches)
    sync(args.device)
    end = time.perf_counter()
    first, last = (batches.times[0], batches.times[-1]) if batches.times else (end, end)
    phases = {"opening_s": round(opened - t0, 3), "first_batch_s": round(first - t0, 3),
              "last_batch_s": round(last - t0, 3), "batches": len(batches.times),
              "workers": ev.workers}  # fmt: skip
    return ev.positions_total, end - t0, ev, phases


def scorer(net, chunks: list[list[branched.GameInput]], args) -> tuple[int, float]:  # noqa: ANN001
    """``score_chunks`` over the chunks' prepared inputs (one pipeline, as the part scores
    them): positions and seconds. On a GPU torch runs on one thread, as in the part (and a
    compiled pass is keyed to torch's thread count: the same graphs serve both)."""
    torch.set_num_threads(1 if args.device == "cuda" else args.threads)
    positions = 0
    sync(args.device)
    t0 = time.perf_counter()
    for scored in scoring.score_chunks(
        net, chunks, batch_tokens=args.batch_tokens, device=args.device, attention=args.attention
    ):
        positions += len(scored.host["rank"])
    sync(args.device)
    return positions, time.perf_counter() - t0


def prepared_chunks(ev: matching.Evaluator) -> tuple[list[list[branched.GameInput]], float]:
    """Every chunk's inputs, tables computed with the job's workers (timed: seconds)."""
    t0 = time.perf_counter()
    prep = prepare.started(ev.workers)
    pending = [ev._submit(prep, chunk) for chunk in ev.chunks]  # noqa: SLF001
    chunks = []
    for chunk, p in zip(ev.chunks, pending, strict=True):
        tables = p.tables()
        chunks.append([ev.game(int(g), tables.get(int(g))) for g in chunk])
    return chunks, time.perf_counter() - t0


LABELS = (scoring.WAITED, matching.TABLES, matching.WRITE)  # the rule's waits, in a profile


def all_threads():  # noqa: ANN201
    """The profiler's setting that records every thread's operations, not only the thread
    that started it: the scoring pipeline prepares batches (``matching.TABLES``) in its own."""
    from torch._C._profiler import _ExperimentalConfig

    try:
        return _ExperimentalConfig(profile_all_threads=True)
    except TypeError:  # an older torch: the starting thread's only
        print("== this torch profiles the starting thread only", flush=True)
        return None


def profiled(fn, device: str, title: str):  # noqa: ANN001, ANN201
    """``fn()`` under torch.profiler; prints the operators and runtime calls taking the most
    host time (a first pass's allocations and waits show there), and on CUDA device time."""
    from torch.profiler import ProfilerActivity, profile

    cuda = device == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities, experimental_config=all_threads()) as prof:
        out = fn()
    for key in ("self_cpu_time_total", *(("self_cuda_time_total",) if cuda else ())):
        print(f"== {title}: by {key}", flush=True)
        print(prof.key_averages().table(sort_by=key, row_limit=20), flush=True)
    waits = {e.key: {"ms": round(e.cpu_time_total / 1e3, 1), "count": e.count}
             for e in prof.key_averages() if e.key in LABELS}  # fmt: skip
    print(f"== {title}: the rule's labelled waits {json.dumps(waits)}", flush=True)
    if cuda:
        print(f"== {title}: the device idle", flush=True)
        print(json.dumps(device_idle(prof.events()), indent=1), flush=True)
    return out


def merged(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of ``spans`` (start, end) as disjoint spans in order.

    >>> merged([(5, 7), (0, 2), (1, 3), (7, 8)])
    [(0, 3), (5, 8)]
    """
    out: list[tuple[float, float]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def gaps(busy: list[tuple[float, float]], start: float, end: float) -> list[tuple[float, float]]:
    """The spans of [start, end] outside the disjoint, ordered ``busy`` spans.

    >>> gaps([(2, 3), (5, 8)], 0, 10)
    [(0, 2), (3, 5), (8, 10)]
    """
    edges = [start, *(x for span in busy for x in span), end]
    return [(a, b) for a, b in zip(edges[::2], edges[1::2], strict=True) if b > a]


def device_idle(events, top: int = 12, kind=torch.autograd.DeviceType.CUDA) -> dict:  # noqa: ANN001
    """Where a profiled part left the device idle: its busy time (the union of its kernels'
    and copies' spans: events of ``kind``), the profile's span (its host events'), and the
    ``top`` longest idle spans, each with the host's top-level operations and labels
    (``scoring.WAITED``, ``matching.WRITE``, ``matching.TABLES``) that overlap it most."""
    device = [(e.time_range.start, e.time_range.end) for e in events
              if e.device_type == kind]  # fmt: skip
    host = [e for e in events if e.device_type == torch.autograd.DeviceType.CPU
            and e.cpu_parent is None]  # fmt: skip
    if not device or not host:
        return {"device_events": len(device)}
    start, end = min(e.time_range.start for e in host), max(e.time_range.end for e in host)
    busy = merged(device)
    idle = sorted(gaps(busy, start, end), key=lambda g: g[0] - g[1])[:top]

    def during(a: float, b: float) -> list[str]:
        over = [(min(b, e.time_range.end) - max(a, e.time_range.start), e) for e in host]
        return [f"{e.name} (thread {e.thread}, {o / 1e3:.1f} ms)"
                for o, e in sorted(over, key=lambda x: -x[0])[:4] if o > 0]  # fmt: skip

    return {
        "span_ms": round((end - start) / 1e3, 1),
        "device_busy_ms": round(sum(b - a for a, b in busy) / 1e3, 1),
        "idle_ms": round(sum(b - a for a, b in gaps(busy, start, end)) / 1e3, 2),
        "longest_idle": [
            {
                "from_ms": round((a - start) / 1e3, 1),
                "ms": round((b - a) / 1e3, 2),
                "host": during(a, b),
            }
            for a, b in idle
        ],  # fmt: skip
    }


def one_round(net, cache_dir: Path, work: Path, chunks, args, rep: int = 0) -> dict:  # noqa: ANN001
    """The part, the scorer (and with ``--serial`` the part as before), one after the other;
    with ``--profile``, the part of rounds 0 and 1 under torch.profiler (its time with it)."""
    run_part = functools.partial(part, net, cache_dir, work / "state", args)
    if args.profile and rep < 2:
        n_part, part_s, done, phases = profiled(run_part, args.device, f"round {rep}'s part")
    else:
        n_part, part_s, done, phases = run_part()
    n_score, score_s = scorer(net, chunks, args)
    assert n_part == n_score == done.positions_total, (n_part, n_score)
    t1 = time.perf_counter()
    meta = matching.load_metadata(cache_dir, done.games.offsets)[0]
    chosen = protocols.chosen(list(protocols.DEFAULT))
    matching.tables(done.positions(), meta, chosen, replicates=1000, seed=0)
    row = {"part_seconds": round(part_s, 2), "part_positions_per_s": round(n_part / part_s),
           "scorer_seconds": round(score_s, 2),
           "scorer_positions_per_s": round(n_score / score_s),
           "ratio": round(score_s / part_s, 3),
           "tables_seconds": round(time.perf_counter() - t1, 2), "part_phases": phases}  # fmt: skip
    if args.serial:
        _, serial_s, _, _ = part(net, cache_dir, work / "serial", args, workers=0)
        row |= {"serial_part_positions_per_s": round(n_part / serial_s),
                "serial_ratio": round(score_s / serial_s, 3)}  # fmt: skip
    for w in args.prep_workers:  # the part again with other preparation processes
        _, w_s, _, w_phases = part(net, cache_dir, work / f"workers-{w}", args, workers=w)
        row[f"workers_{w}"] = {"part_positions_per_s": round(n_part / w_s),
                               "ratio": round(score_s / w_s, 3), **w_phases}  # fmt: skip
    return row | {"loadavg_1min": os.getloadavg()[0]}


def summary(runs: list[dict], common: dict) -> dict:
    """Medians over the rounds, and the ratio's spread."""
    ratios = [r["ratio"] for r in runs]
    keys = ["part_positions_per_s", "scorer_positions_per_s", "serial_part_positions_per_s",
            "serial_ratio"]  # fmt: skip
    medians = {f"{k}_median": round(float(np.median([r[k] for r in runs])), 3)
               for k in keys if k in runs[0]}  # fmt: skip
    return {**common, "runs": len(runs), "ratio_median": round(float(np.median(ratios)), 3),
            "ratio_min": min(ratios), "ratio_max": max(ratios), **medians}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="the job's cores (rule play's threads:)")  # fmt: skip
    parser.add_argument("--pgn", type=Path, nargs="+",
                        default=[ROOT / "resources/lichess-sample.pgn.zst"])  # fmt: skip
    parser.add_argument("--validation", type=float, default=0.05, help="validation fraction")
    parser.add_argument("--legality-games", type=int, default=64,
                        help="validation games whose tables the cache stores")  # fmt: skip
    parser.add_argument("--cache", type=Path, help="an existing token cache instead")
    parser.add_argument("--chunk-games", type=int, default=512)
    parser.add_argument("--window", type=int, default=matching.WINDOW_CHUNKS,
                        help="chunks ordered by length together (1: contiguous)")  # fmt: skip
    parser.add_argument("--batch-tokens", type=int, default=65536)
    parser.add_argument("--attention", default="split", choices=scoring.ATTENTION)
    parser.add_argument("--games", type=int, help="rule play's match.games (default: every game)")
    parser.add_argument("--compile", action="store_true", help="rule play's match.compile: true")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--serial", action="store_true",
                        help="also the part as before (no workers), same rounds")  # fmt: skip
    parser.add_argument("--prep-workers", type=lambda v: [int(x) for x in v.split(",")],
                        default=[], help="e.g. 14,12: also the part with these preparation"
                        " processes (the rule's: threads - 2 on a GPU), same rounds")  # fmt: skip
    parser.add_argument("--sdpa", choices=kernels.CHOICES, default="play",
                        help="attention kernels (the rule's: play; torch: its own)")  # fmt: skip
    parser.add_argument("--in-flight", type=int, default=scoring.IN_FLIGHT,
                        help="passes queued on the device (scoring.IN_FLIGHT)")  # fmt: skip
    parser.add_argument("--no-warm-up", dest="warm_up", action="store_false",
                        help="no warm-up pass first: round 0's part is a fresh job's (its"
                        " compile and first kernels inside it)")  # fmt: skip
    parser.add_argument("--profile", action="store_true",
                        help="torch.profiler over the parts of rounds 0 and 1")  # fmt: skip
    parser.add_argument("--json", type=Path, help="also write every result here")
    args = parser.parse_args()
    args.context = gpt.config_for(args.preset).block_size
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    with tempfile.TemporaryDirectory(prefix="play-rule-speed-") as tmp:
        work = Path(tmp)
        t0 = time.perf_counter()
        cache_dir = args.cache or build_cache(work, args.pgn, args)
        setup_s = time.perf_counter() - t0
        torch.manual_seed(0)
        prepare.start_job(args.threads, args.device)  # as rule play: before the model
        for n in args.prep_workers:
            prepare.started(n)
        net = gpt.build(args.preset, device=args.device).eval()
        if args.compile:  # as rule play's match.compile (chesslm.play.evaluate)
            scoring.compile_layers(net)
        ev = evaluator(net, cache_dir, work / "state", args)
        chunks, prep_s = prepared_chunks(ev)
        common = {
            "preset": args.preset, "device": args.device, "threads": args.threads,
            "cores": os.cpu_count(), "torch": torch.__version__, "compile": args.compile,
            "gpu": torch.cuda.get_device_name() if args.device == "cuda" else None,
            "validation_games": len(ev.games), "games_selected": len(ev.selected),
            "positions": ev.positions_total, "selection": ev.selection(),
            "preparation_workers": ev.workers, "cache_seconds": round(setup_s, 1),
            "preparation_alone_seconds": round(prep_s, 2), "sdpa": args.sdpa,
            "attention": args.attention, "in_flight": args.in_flight, "warm_up": args.warm_up,
            "chunk_games": args.chunk_games, "window": args.window,
        }  # fmt: skip
        print(json.dumps(common), flush=True)
        runs = []
        kernels.choose(args.sdpa)
        scoring.IN_FLIGHT = args.in_flight
        if args.warm_up:
            scorer(net, chunks[:1], args)  # allocator, kernels, compile for the first shapes
        for rep in range(args.repeats):
            runs.append(one_round(net, cache_dir, work, chunks, args, rep) | {"repeat": rep})
            print(json.dumps(runs[-1]), flush=True)
        out = summary(runs, common)
        print(json.dumps(out), flush=True)
        if args.json:
            files.write_json_atomic(args.json, {"summary": out, "runs": runs})


if __name__ == "__main__":
    main()
