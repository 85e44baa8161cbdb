"""Move-matching speed: the batched branched-sequence scoring against the oracle loop (one
causal pass per legal move), same model, same run. Prints positions per second.

    python benchmarks/play_speed.py --preset baseline --device cuda          # one H200
    python benchmarks/play_speed.py --preset tiny --device cpu --games 200   # a laptop
    python benchmarks/play_speed.py phases --run demo --json out/play-phases.json \
        --ladder results/ladders/small-KEY/ladder.json  # see below

Comma-separated ``--batch-tokens``, ``--attention``, ``--compile`` and ``--pad-to`` try every
combination in one process (one JSON line each, as it finishes; then a summary line with the
fastest). Each variant reports the pipelined rate (``score_many``, what the evaluation runs)
and a second pass one stage at a time with a sync after each (plan, prepare = host NumPy,
copy = host to device, mask, forward, post = log-softmax/rank over the legal moves, fetch =
results to the host), so a GPU run shows where the time goes.

Games: the embedded Lichess sample, tokenised (the PGN parse timed apart), their legal moves
from python-chess as rule play prepares the games its token cache lacks (``chesslm.scorer.
prepare`` on ``--prep-workers`` processes): each variant's ``end_to_end_positions_per_s``
counts that preparation and the scoring, one after the other, beside the scorer's own rate.
The weights are freshly initialised: the speed does not depend on them. Target: >= 100,000
positions/s for ``baseline`` on one H200.

``phases``: the whole play evaluation (``python -m chesslm.play.evaluate``, a fresh process and
run directory each time) of a trained run's best.pt with its config's play settings, with 1
and 2 torch threads, on the machine as it is ("idle") and with a busy-loop process on each
core started by the benchmark ("loaded"), interleaved; each phase's seconds (move-matching,
legality, Elo) and their ratio to the idle 1-thread figure of the same run. Then
``--elo-repeats`` repeats of the Elo part alone (the other parts cut to one game), for the
spread of the estimate over runs of the same weights: Stockfish's limited-strength play is
unseeded, and the number of distinct move sequences each game took shows it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import os
import sys
import time
from pathlib import Path

import chess
import chess.pgn
import numpy as np
import torch
import zstandard

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chesslm import files  # noqa: E402
from chesslm.data import tokens  # noqa: E402
from chesslm.model import gpt  # noqa: E402
from chesslm.record import play_files as outputs
from chesslm.scorer import branched, prepare, scoring  # noqa: E402
from chesslm.scorer.oracle import oracle_scores  # noqa: E402

SAMPLE = Path(__file__).resolve().parents[1] / "resources" / "lichess-sample.pgn.zst"


def load_games(n: int | None, context: int) -> tuple[list[np.ndarray], list]:
    """The sample's first ``n`` games that fit ``context``: tokens (as the token cache holds
    them, BOS to EOS) and moves."""
    games, moves_of = [], []
    with open(SAMPLE, "rb") as fh:
        text = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(fh), encoding="utf-8")
        while n is None or len(games) < n:
            game = chess.pgn.read_game(text)
            if game is None:
                break
            moves = list(game.mainline_moves())
            if not moves or 2 + 3 * len(moves) > context:
                continue
            games.append(np.array(tokens.encode_moves(moves), dtype=np.uint8))
            moves_of.append(moves)
    return games, moves_of


def prepare_inputs(games: list[np.ndarray], workers: int) -> list[branched.GameInput]:
    """Every game's legal moves (python-chess), as rule play prepares the games its token
    cache lacks: ``chesslm.scorer.prepare`` on ``workers`` processes (0: this one)."""
    with prepare.Preparer(workers) as prep:
        tables = prep.submit(range(len(games)), games).tables()
    return [branched.game_input(g, *tables[i]) for i, g in enumerate(games)]


STAGES = ("plan", "prepare", "copy", "mask", "forward", "post", "fetch")


def _sync(device: str):  # noqa: ANN202
    return torch.cuda.synchronize if device == "cuda" else (lambda: None)


def batched(net, inputs, device: str, v: dict) -> tuple[int, float, dict]:  # noqa: ANN001
    """The pipelined path the evaluation uses (``score_many``): positions, seconds and two
    sanity figures (variants must agree on them up to BF16 rounding)."""
    positions, top1, nll = 0, 0, 0.0
    sync = _sync(device)
    sync()
    start = time.perf_counter()
    for _, _, host in scoring.score_many(
        net, inputs, batch_tokens=v["batch_tokens"], device=device, attention=v["attention"],
        pad_to=v["pad_to"],
    ):  # fmt: skip
        positions += len(host["rank"])
        top1 += int((host["rank"] == 0).sum())
        nll -= float(np.nansum(host["played_logp"]))
    sync()
    seconds = time.perf_counter() - start
    sanity = {"top1": round(top1 / positions, 4), "nll": round(nll / positions, 4)}
    return positions, seconds, sanity


def stages(net, inputs, device: str, v: dict) -> dict[str, float]:  # noqa: ANN001
    """The same work one stage at a time, synchronising after each: seconds per stage (the
    pipelined run overlaps ``prepare`` with the device stages; the sum is an upper bound)."""
    cuda, sync = device == "cuda", _sync(device)
    out = dict.fromkeys(STAGES, 0.0)
    sync()
    t = time.perf_counter()

    def lap(stage: str) -> None:
        nonlocal t
        sync()
        now = time.perf_counter()
        out[stage] += now - t
        t = now

    groups = branched.plan_batches(branched.branched_lengths(inputs).tolist(), v["batch_tokens"])
    lap("plan")
    for group in groups:
        batch = branched.prepare([inputs[i] for i in group], pad_to=v["pad_to"], pin=cuda)
        lap("prepare")
        branched.to_device(batch, device)
        lap("copy")
        mask = scoring.mask_for(batch, v["attention"])
        lap("mask")
        logits = scoring.logits_at(net, batch, mask)
        lap("forward")
        result = scoring.score_logits(batch, logits)
        lap("post")
        scoring.finish(0, group, batch, scoring.start_fetch(result, cuda), True)
        lap("fetch")
    return out


VARIANT_KEYS = ("attention", "compile", "batch_tokens", "pad_to")


def profile(net, inputs, args, v: dict) -> None:  # noqa: ANN001
    """The top operators of a few batches (the longest games: the biggest rows)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    order = sorted(range(len(inputs)), key=lambda i: -len(inputs[i].main))
    groups = branched.plan_batches(
        branched.branched_lengths([inputs[i] for i in order]).tolist(), v["batch_tokens"]
    )
    chosen = [inputs[order[i]] for g in groups[: args.profile_batches] for i in g]
    cuda = args.device == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with torch_profile(activities=activities) as prof:
        batched(net, chosen, args.device, v)
    key = "self_cuda_time_total" if cuda else "self_cpu_time_total"
    print(f"profile of {len(chosen)} games, variant {json.dumps(v)}", flush=True)
    print(prof.key_averages().table(sort_by=key, row_limit=25), flush=True)


def _list(kind):  # noqa: ANN001, ANN202
    return lambda text: [kind(x) for x in text.split(",")]


def build_net(preset: str, device: str, compile_blocks: bool) -> gpt.GPT:
    torch.manual_seed(0)
    net = gpt.build(preset, device=device).eval()
    if compile_blocks:
        scoring.compile_layers(net)
    return net


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="baseline")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--games", type=int, default=None, help="sample games (default: all)")
    parser.add_argument("--batch-tokens", type=_list(int), default=[65536],
                        help="comma-separated: one variant each")  # fmt: skip
    parser.add_argument("--attention", type=_list(str), default=["split"],
                        help="comma-separated, of " + ",".join(scoring.ATTENTION))  # fmt: skip
    parser.add_argument("--compile", type=_list(str), nargs="?", default=["no"], const=["yes"],
                        help="no,yes: torch.compile the blocks (dynamic); bare: yes")  # fmt: skip
    parser.add_argument("--pad-to", type=_list(int), default=[1],
                        help="pad rows to a multiple of this many tokens")  # fmt: skip
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--prep-workers", type=int, default=max(0, (os.cpu_count() or 1) - 1),
                        help="processes preparing legal moves (default: cores - 1)")  # fmt: skip
    parser.add_argument("--oracle-plies", type=int, default=12)
    parser.add_argument("--budget-s", type=float, default=420.0,
                        help="start no new variant after this many seconds")  # fmt: skip
    parser.add_argument("--json", type=Path, help="also write every result here")
    parser.add_argument("--profile-batches", type=int, default=0,
                        help="torch.profiler over this many batches of each compile setting's "
                        "fastest variant: the top kernels by device time")  # fmt: skip
    args = parser.parse_args()
    for a in args.attention:
        if a not in scoring.ATTENTION:
            parser.error(f"--attention: {a!r} is not one of {scoring.ATTENTION}")
    for c in args.compile:
        if c not in ("no", "yes"):
            parser.error(f"--compile: {c!r} is not no or yes")
    began = time.perf_counter()
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    block_size = gpt.config_for(args.preset).block_size
    t0 = time.perf_counter()
    games, moves_of = load_games(args.games, block_size)
    t1 = time.perf_counter()
    inputs = prepare_inputs(games, args.prep_workers)
    prep = time.perf_counter() - t1
    plies = sum(g.plies for g in inputs)
    common = {"preset": args.preset, "device": args.device,
              "gpu": torch.cuda.get_device_name() if args.device == "cuda" else None,
              "torch": torch.__version__, "games": len(inputs), "positions": plies,
              "pgn_parse_seconds": round(t1 - t0, 1), "preparation_workers": args.prep_workers,
              "game_preparation_seconds": round(prep, 2)}  # fmt: skip
    print(json.dumps(common), flush=True)
    results, skipped = [], []
    net = None
    for compile_blocks in args.compile:
        net = build_net(args.preset, args.device, compile_blocks == "yes")
        for attention, batch_tokens, pad_to in itertools.product(
            args.attention, args.batch_tokens, args.pad_to
        ):
            v = {"attention": attention, "compile": compile_blocks, "batch_tokens": batch_tokens,
                 "pad_to": pad_to}  # fmt: skip
            if attention == "flex" and compile_blocks == "no":
                # uncompiled flex_attention materialises every score (the model's blocks call
                # it; only a compiled block fuses it): slower than dense, not worth device time
                continue
            if time.perf_counter() - began > args.budget_s:
                skipped.append(v)
                continue
            try:
                results.append(run_variant(net, inputs, args, v, plies, prep))
            except Exception as error:  # noqa: BLE001 - one failing variant must not end the run
                results.append({**v, "error": f"{type(error).__name__}: {error}"[:500]})
            print(json.dumps(results[-1]), flush=True)
        group = [r for r in results if r["compile"] == compile_blocks and "error" not in r]
        if args.profile_batches and group:
            fastest = max(group, key=lambda r: r["batched_positions_per_s"])
            profile(net, inputs, args, {k: fastest[k] for k in VARIANT_KEYS})
    # the oracle: one causal pass per legal move, over the first plies of the first game
    sync = _sync(args.device)
    sync()
    t1 = time.perf_counter()
    oracle_scores(net, moves_of[0][: args.oracle_plies])
    sync()
    oracle_rate = min(args.oracle_plies, len(moves_of[0])) / (time.perf_counter() - t1)
    ok = [r for r in results if "error" not in r]
    best = max(ok, key=lambda r: r["batched_positions_per_s"]) if ok else None
    summary = {
        **common,
        "best": best,
        "oracle_positions_per_s": round(oracle_rate, 2),
        "speedup": round(best["batched_positions_per_s"] / oracle_rate, 1) if best else None,
        "target_positions_per_s": 100_000,
        "skipped_for_budget": skipped,
        "total_seconds": round(time.perf_counter() - began, 1),
    }
    print(json.dumps(summary), flush=True)
    if args.json:
        files.write_json_atomic(args.json, {"summary": summary, "variants": results})


def run_variant(net, inputs, args, v: dict, plies: int, prep: float) -> dict:  # noqa: ANN001
    t0 = time.perf_counter()
    # warm-up: one whole pass, so that every batch shape is compiled before the timed runs
    batched(net, inputs, args.device, v)
    warm_s = time.perf_counter() - t0
    graphs = _compiled_graphs()
    runs = [batched(net, inputs, args.device, v) for _ in range(args.repeats)]
    graphs = _compiled_graphs() - graphs
    positions, seconds, sanity = min(runs, key=lambda r: r[1])
    assert positions == plies, (positions, plies)
    parts = stages(net, inputs, args.device, v)
    device_s = parts["mask"] + parts["forward"] + parts["post"]
    return {
        **v,
        "batched_seconds": round(seconds, 3),
        "batched_positions_per_s": round(positions / seconds),
        # raw (tokenised) games to results: the preparation, then the scoring (not overlapped,
        # as rule play overlaps them: a lower bound; benchmarks/play_rule_speed.py times that)
        "end_to_end_positions_per_s": round(positions / (prep + seconds)),
        "stage_seconds": {k: round(x, 4) for k, x in parts.items()},
        "stage_share": {k: round(x / sum(parts.values()), 3) for k, x in parts.items()},
        "stages_positions_per_s": round(positions / sum(parts.values())),
        # pipelined time over the device stages' time: near 1 = the device sets the pace
        "pipelined_over_device": round(seconds / device_s, 3) if device_s else None,
        "warmup_seconds": round(warm_s, 1),
        "sanity": sanity,
        # graphs compiled during the timed runs: > 0 means recompiles (shapes) were timed
        "compiled_graphs_in_timed_runs": graphs,
    }


def _compiled_graphs() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


# ------------------------------------------------------------------- phases of the evaluation


def play_settings(config_path: Path, run: str) -> dict:
    """The run's play settings with the schema's defaults, as the pipeline fills them."""
    import yaml
    from snakemake.utils import validate

    root = Path(__file__).resolve().parents[1]
    config = yaml.safe_load(config_path.read_text())
    validate(config, str(root / "workflow/schemas/config.schema.yaml"))
    return config["runs"][run]["play"]


def evaluate_once(
    work: Path, checkpoint: Path, cache: Path, settings: dict, threads: int, ladder: Path | None
) -> dict:
    """One evaluation in a fresh process and run directory: each part's seconds, the Elo fit
    (on the ``ladder`` file's anchors) and each game's moves."""
    import shutil
    import subprocess

    shutil.rmtree(work, ignore_errors=True)
    (work / "train").mkdir(parents=True)
    (work / "train" / "best.pt").symlink_to(checkpoint.resolve())
    cmd = [sys.executable, "-m", "chesslm.play.evaluate", "--run-dir", str(work), "--settings",
           json.dumps(settings), "--cache", f"d={cache}", "--threads", str(threads),
           *(["--ladder", str(ladder)] if ladder else [])]  # fmt: skip
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    wall = time.perf_counter() - t0
    play = {part: json.loads((work / "play" / outputs.FILES[name]).read_text())
            for part, name in outputs.RECORDS.items()}  # fmt: skip
    state = work / "play" / "state" / "elo-games.json"
    played = json.loads(state.read_text())["anchors"] if state.exists() else {}
    return {
        "match_s": round(play["match"]["seconds"], 2),
        "legality_s": round(play["legality"]["seconds"], 2),
        "elo_s": round(play["elo"]["seconds"], 2),
        "process_s": round(wall, 2),
        "torch_threads": play["elo"]["host"]["torch_threads"],
        "elo": play["elo"]["fit"],
        "moves": {
            f"{anchor}-{i}": row["moves"]
            for anchor, d in played.items()
            for i, row in enumerate(d["rows"])
        },  # fmt: skip
    }


class BusyLoad:
    """A busy-loop process on each of ``n`` cores while the block runs (killed by pid)."""

    def __init__(self, n: int) -> None:
        self.n, self.procs = n, []

    def __enter__(self) -> BusyLoad:
        import subprocess

        loop = [sys.executable, "-c", "while True: pass"]
        self.procs = [subprocess.Popen(loop) for _ in range(self.n)]
        time.sleep(1.0)  # let the scheduler see them
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait()


PHASES = ("match_s", "legality_s", "elo_s", "process_s")


def phase_timings(args, settings: dict) -> tuple[list[dict], list[dict]]:  # noqa: ANN001
    """Every (load, threads) condition ``args.repeats`` times, interleaved; medians."""
    runs = []
    for rep in range(args.repeats):
        for load in ("idle", "loaded"):
            for threads in args.threads:
                busy = BusyLoad(os.cpu_count() or 1) if load == "loaded" else None
                with busy or contextlib.nullcontext():
                    before = os.getloadavg()[0]
                    r = evaluate_once(args.work / "t", args.checkpoint, args.cache, settings,
                                      threads, args.ladder)  # fmt: skip
                r.update(load=load, threads=threads, repeat=rep, loadavg_1min_before=before)
                print(json.dumps({k: v for k, v in r.items() if k != "moves"}), flush=True)
                runs.append(r)
    rows = []
    for load in ("idle", "loaded"):
        for threads in args.threads:
            mine = [r for r in runs if r["load"] == load and r["threads"] == threads]
            medians = {k: float(np.median([r[k] for r in mine])) for k in PHASES}
            rows.append({"load": load, "threads": threads, **medians})
    ref = next((r for r in rows if r["load"] == "idle" and r["threads"] == 1), None)
    for r in rows if ref else []:
        r["ratio_to_idle_1_thread"] = {k: round(r[k] / ref[k], 2) for k in PHASES}
    return rows, runs


def elo_spread(args, settings: dict, earlier: list[dict]) -> dict:  # noqa: ANN001
    """The Elo part alone, repeated: the estimates, their spread, and how many distinct move
    sequences each game took (1 everywhere would mean reproducible games)."""
    cut = json.loads(json.dumps(settings))
    cut["match"]["games"] = 1
    cut["legality"].update(games=1, max_plies=1)
    if args.elo_games_per_anchor:
        cut["elo"]["games_per_anchor"] = args.elo_games_per_anchor
        earlier = []  # other games than the timing runs'
    runs = [evaluate_once(args.work / f"e{i}", args.checkpoint, args.cache, cut, 1, args.ladder)
            for i in range(args.elo_repeats)]  # fmt: skip
    runs += earlier  # the timing runs played the same Elo games
    fits = [r["elo"] for r in runs]
    finite = [f["elo"] for f in fits if f["elo"] is not None]
    keys = sorted(runs[0]["moves"])
    distinct = {k: len({r["moves"][k] for r in runs}) for k in keys}
    out = {
        "runs": len(runs),
        "games_per_run": fits[0]["games"],
        "estimates": [None if f["elo"] is None else round(f["elo"]) for f in fits],
        "intervals": [
            [None if f[k] is None else round(f[k]) for k in ("low", "high")] for f in fits
        ],  # fmt: skip
        "scores": [f["score"] for f in fits],
        "finite": len(finite),
        "min": round(min(finite)) if finite else None,
        "max": round(max(finite)) if finite else None,
        "sd": round(float(np.std(finite, ddof=1)), 1) if len(finite) > 1 else None,
        "distinct_move_sequences_per_game": distinct,
    }
    print(json.dumps(out), flush=True)
    return out


def phases_main(argv: list[str]) -> None:
    root = Path(__file__).resolve().parents[1]
    parser = argparse.ArgumentParser(prog="play_speed.py phases", description=__doc__)
    parser.add_argument("--run", default="demo")
    parser.add_argument("--config", type=Path, default=root / "config/config.yaml")
    parser.add_argument("--checkpoint", type=Path, help="default: results/RUN/train/best.pt")
    parser.add_argument("--cache", type=Path, default=root / "results/datasets/sample/token-cache")
    parser.add_argument("--threads", type=_list(int), default=[1, 2])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--elo-repeats", type=int, default=10)
    parser.add_argument("--elo-games-per-anchor", type=int,
                        help="for the repeats only (default: the run's)")  # fmt: skip
    parser.add_argument("--work", type=Path, default=Path("/tmp/play-phases"))
    parser.add_argument("--json", type=Path)
    parser.add_argument("--ladder", type=Path, help="the ladder file (rule ladder's; for games)")
    args = parser.parse_args(argv)
    args.checkpoint = args.checkpoint or root / f"results/{args.run}/train/best.pt"
    settings = play_settings(args.config, args.run)
    common = {"run": args.run, "checkpoint": str(args.checkpoint), "cores": os.cpu_count(),
              "torch": torch.__version__, "settings": settings}  # fmt: skip
    print(json.dumps(common), flush=True)
    rows, runs = phase_timings(args, settings) if args.repeats else ([], [])
    for r in rows:
        print(json.dumps(r), flush=True)
    spread = elo_spread(args, settings, runs) if args.elo_repeats else None
    if args.json:
        files.write_json_atomic(args.json, {**common, "phases": rows, "runs": runs,
                                            "elo_spread": spread})  # fmt: skip


if __name__ == "__main__":
    if sys.argv[1:2] == ["phases"]:
        phases_main(sys.argv[2:])
    else:
        main()
