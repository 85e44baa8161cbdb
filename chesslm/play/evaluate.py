"""The play evaluation of a run's best checkpoint: move-matching, free-running legality and
Elo against Stockfish, each written as soon as it completes, within its time budget.

    python -m chesslm.play.evaluate --run-dir results/demo --settings '{...}' \
        --cache sample=results/datasets/sample/token-cache --threads 1

``settings`` is the run's ``play`` object of the config (schema defaults applied). The
evaluation reads validation splits only; a path to a test split is refused. Work in progress
lives in ``{run_dir}/play/state``: finished move-matching chunks and finished engine games are
kept and reused when the rule runs again with the same checkpoint and settings. torch uses
exactly ``threads`` threads (the rule's ``threads:``); each part logs its progress (positions,
games) at least every 10 s of work.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import chess.engine
import numpy as np
import pandas as pd
import torch
from matplotlib.figure import Figure

from chesslm import files
from chesslm.data.cache import TokenCache
from chesslm.figures import save_svg
from chesslm.play import elo, games, matching, outputs, plots
from chesslm.play.progress import EVERY_SECONDS, Progress
from chesslm.train import checkpoint
from chesslm.train import model as gpt

logger = logging.getLogger(__name__)

ELO_NOTE = (
    "engine Elo on Stockfish's UCI_Elo calibration (CCRL Blitz, 120+1 s, anchored to the Stash"
    " engine, about +-100 Elo), not a human (Lichess) rating"
)


def load_model(path: Path, device: torch.device) -> tuple[gpt.GPT, dict[str, Any]]:
    payload = checkpoint.load(path)
    preset = payload["identity"]["model"]["preset"]
    net = gpt.build(preset, device=device)
    net.load_state_dict(payload["model"])
    net.eval()
    info = {
        "checkpoint": str(path),
        "checkpoint_sha256": files.sha256_file(path),
        "preset": preset,
        "step": payload["cursor"]["step"],
        "best_nll": payload["metrics"].get("best_nll"),
    }
    return net, info


def check_validation_only(cache_dir: Path) -> None:
    """Refuse anything but a token cache (which holds train and validation only)."""
    if "test" in cache_dir.parts or not (cache_dir / "cache.json").exists():
        raise ValueError(f"{cache_dir}: not a token cache (play reads validation splits only)")


def _state(play_dir: Path, identity: dict[str, Any]) -> Path:
    """The work-in-progress directory, emptied when the checkpoint or settings changed."""
    state = play_dir / "state"
    marker = state / "identity.json"
    if state.exists():
        try:
            same = files.read_json(marker) == identity
        except (OSError, ValueError):
            same = False
        if not same:
            logger.info("%s: checkpoint or settings changed; starting over", state)
            shutil.rmtree(state)
    state.mkdir(parents=True, exist_ok=True)
    if not marker.exists():
        files.write_json_atomic(marker, identity)
    return state


ELO_REPRODUCIBILITY = (
    "Stockfish plays at UCI_LimitStrength by picking among its candidate moves"
    " at random, from a generator seeded by the clock (it has no seed option), so the same"
    " weights and settings play other games and give another estimate on every run; the 95 %"
    " interval is that of these games alone and does not say how far a rerun moves"
    " (BENCHMARKS.md measures the spread over repeats)"
)


@dataclass
class Job:
    """What the parts share: the model, the datasets, where state goes, the settings."""

    net: gpt.GPT
    model_info: dict[str, Any]
    device: torch.device
    settings: dict[str, Any]
    caches: dict[str, Path]
    state: Path
    host: dict[str, Any]
    progress_every: float


@dataclass
class Result:
    """What a part hands back for writing: its record (the ``.json``), its tables by output
    name (the ``.csv`` files) and its figure (the ``.svg``)."""

    record: dict[str, Any]
    tables: dict[str, pd.DataFrame]
    figure: Figure


Part = Callable[[Job], Result]
"""One part of the evaluation, bounded by its own ``seconds``; its outputs are the rows of
``chesslm.play.outputs`` with its name."""


def use_threads(threads: int) -> dict[str, Any]:
    """torch's intra-op threads: exactly the rule's ``threads:`` (torch would take every core,
    and on a shared machine oversubscribed threads are many times slower); one inter-op thread,
    as eager inference forks no inter-op work. Returns what is in force."""
    if threads < 1:
        raise ValueError(f"play threads: {threads} (must be at least 1)")
    torch.set_num_threads(threads)
    if torch.get_num_interop_threads() != 1:
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:  # settable once per process, before parallel work (tests)
            logger.info("torch inter-op threads stay %d", torch.get_num_interop_threads())
    host = {"torch_threads": torch.get_num_threads(),
            "torch_interop_threads": torch.get_num_interop_threads()}  # fmt: skip
    logger.info("torch threads: %d intra-op, %d inter-op", *host.values())
    return host


def check_engine_limit(settings: dict[str, Any]) -> None:
    """The rule's config check refuses this first; the command line gets it here, before any
    work, as the engine would otherwise never stop."""
    e = settings["elo"]
    if e["games_per_anchor"] > 0 and e["nodes"] is None and e["move_seconds"] is None:
        raise ValueError("play.elo: nodes and move_seconds are both null (the engine would"
                         " never stop); set one")  # fmt: skip


def run(
    run_dir: Path,
    settings: dict[str, Any],
    caches: dict[str, Path],
    *,
    device: str,
    checkpoint_path: Path | None = None,
    threads: int = 1,
    progress_every: float = EVERY_SECONDS,
) -> dict[str, Path]:
    """Evaluate ``run_dir``'s best.pt with ``threads`` torch threads, part after part, each
    part's files written as soon as it ends; returns the paths written (``outputs.FILES``
    keys). Progress lines come at most ``progress_every`` seconds of work apart."""
    check_engine_limit(settings)
    job = _job(run_dir, settings, caches, device=device, threads=threads,
               checkpoint_path=checkpoint_path, progress_every=progress_every)  # fmt: skip
    out = {name: run_dir / "play" / file for name, file in outputs.FILES.items()}
    for name in outputs.PARTS:
        _write(PARTS[name](job), outputs.of_part(name), out)
    return out


def _job(
    run_dir: Path,
    settings: dict[str, Any],
    caches: dict[str, Path],
    *,
    device: str,
    threads: int,
    checkpoint_path: Path | None,
    progress_every: float,
) -> Job:
    """Load the model, and keep or empty the work in progress (``_state``)."""
    host = {"device": device, **use_threads(threads)}
    dev = torch.device(device)
    torch.manual_seed(settings["seed"])
    ckpt = checkpoint_path or run_dir / "train" / "best.pt"
    net, model_info = load_model(ckpt, dev)
    if settings["match"]["compile"]:
        for block in net.transformer.h:  # dynamic: every batch has its own (rows, length)
            block.compile(dynamic=True)
    play_dir = run_dir / "play"
    play_dir.mkdir(parents=True, exist_ok=True)
    identity = {
        "checkpoint_sha256": model_info["checkpoint_sha256"],
        # threads change the speed, not the results: work done with others is kept
        "settings": {k: v for k, v in settings.items() if k != "threads"},
        "caches": {k: str(v) for k, v in caches.items()},
        "device": device,
    }
    state = _state(play_dir, identity)
    for cache_dir in caches.values():
        check_validation_only(cache_dir)
    return Job(net, model_info, dev, settings, caches, state, host, progress_every)


def _write(result: Result, mine: tuple[outputs.Output, ...], out: dict[str, Path]) -> None:
    """A part's files, in its table order: the record, the tables, the figure."""
    for output in mine:
        path = out[output.name]
        if output.file.endswith(".json"):
            files.write_json_atomic(path, result.record)
        elif output.file.endswith(".csv"):
            _write_csv(path, result.tables[output.name])
        else:
            save_svg(result.figure, path)


def move_matching(job: Job) -> Result:
    """Part ``match``: move-matching tables of each dataset, their figure."""
    m = job.settings["match"]
    protocol = matching.Protocol(m["skip_plies"], m["min_clock_seconds"])
    started = time.monotonic()
    deadline = started + m["seconds"]
    per_dataset: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    for name, cache_dir in job.caches.items():
        per_dataset[name] = _match_dataset(job, name, cache_dir, protocol, deadline)
        rows += [{"dataset": name, **r} for r in per_dataset[name]["table"]]
    match_json = {
        "model": job.model_info,
        "host": job.host,
        "definition": "model move = argmax over legal moves of P(source) P(destination|source)"
        " P(promotion|source,destination), each renormalised over the legal tokens of its step;"
        " NLL = -log of the played move's probability under it",
        "protocols": {"maia": protocol.describe(), "all": "every position"},
        "bins": "mover's Elo: 100-point bins (label = lower edge) and bands <1400, 1400-2000,"
        " 2000-2400, 2400+; speed: Lichess classes; 'unknown' where metadata is missing",
        "interval": f"95 % percentile bootstrap over games, {m['bootstrap']} replicates; none"
        f" for a group of fewer than {matching.MIN_INTERVAL_GAMES} games (few_games: true)",
        "min_interval_games": matching.MIN_INTERVAL_GAMES,
        "split": "validation",
        "seconds": time.monotonic() - started,
        "datasets": per_dataset,
    }
    logger.info("move-matching: %.1f s", match_json["seconds"])
    frame = pd.DataFrame(rows)
    return Result(match_json, {"move_match_table": frame}, plots.match_figure(frame))


def _match_dataset(
    job: Job, name: str, cache_dir: Path, protocol: matching.Protocol, deadline: float
) -> dict[str, Any]:
    """One dataset's move-matching (its finished chunks kept in the state) and its table."""
    m = job.settings["match"]
    evaluator = matching.Evaluator(
        job.net,
        cache_dir,
        job.state / "match" / name,
        games=m["games"],
        chunk_games=m["chunk_games"],
        batch_tokens=m["batch_tokens"],
        device=job.device,
        attention=m["attention"],
    )
    progress = Progress(f"move-matching {name}", evaluator.positions_total, "positions",
                        every=job.progress_every)  # fmt: skip
    t0 = time.monotonic()
    complete = evaluator.run(deadline, progress)
    progress.finish("complete" if complete else "stopped by the time budget")
    seconds = time.monotonic() - t0
    pos = evaluator.positions()
    meta, meta_state = matching.load_metadata(cache_dir, evaluator.games.offsets)
    table = matching.tables(pos, meta, protocol, replicates=m["bootstrap"],
                            seed=job.settings["seed"])  # fmt: skip
    features = matching.position_features(pos, meta)
    return {
        "cache": str(cache_dir),
        "validation_games": len(evaluator.games),
        "games_selected": int(len(evaluator.selected)),
        "games_evaluated": int(len(np.unique(pos["game"]))),
        "complete": complete,
        "metadata": meta_state,
        "seconds_this_run": seconds,
        **matching.counts(pos, features, protocol),
        "table": table,
    }


def legality(job: Job) -> Result:
    """Part ``legality``: free-running legality, greedy and at temperature 1."""
    lg = job.settings["legality"]
    legality_json: dict[str, Any] = {"model": job.model_info, "host": job.host, "modes": {}}
    cached = job.state / "legality.json"
    done = files.read_json(cached)["modes"] if cached.exists() else {}
    started = time.monotonic()
    deadline = started + lg["seconds"]
    for mode, temperature in (("greedy", 0.0), ("temperature_1", 1.0)):
        if mode in done and done[mode]["complete"]:
            legality_json["modes"][mode] = done[mode]
            continue
        progress = Progress(f"free-running legality {mode}",
                            games.self_play_games(lg["games"], temperature), "games finished",
                            every=job.progress_every)  # fmt: skip
        legality_json["modes"][mode] = result = games.self_play(
            job.net,
            games=lg["games"],
            max_plies=lg["max_plies"],
            temperature=temperature,
            seed=job.settings["seed"],
            deadline=deadline,
            progress=progress,
        )
        progress.finish("complete" if result["complete"] else "stopped by the time budget")
        files.write_json_atomic(cached, legality_json)
    legality_json["protocol"] = (
        "self-play from the start position, no legality mask (grammar only: squares, squares,"
        " promotion token); an illegal proposal is counted and replaced by the model's best legal"
        " move (sampled at temperature 1); python-chess judges; greedy games from one start are"
        " identical, so one greedy game is played"
    )
    legality_json["seconds"] = time.monotonic() - started
    logger.info("free-running legality: %.1f s", legality_json["seconds"])
    rows = [{"mode": mode, **b} for mode, r in legality_json["modes"].items() for b in r["buckets"]]
    frame = pd.DataFrame(rows)
    return Result(legality_json, {"legality_table": frame}, plots.legality_figure(frame))


def elo_games(job: Job) -> Result:
    """Part ``elo``: games against Stockfish at each anchor, the Elo fit, its tables, figure."""
    e = job.settings["elo"]
    games_file = job.state / "elo-games.json"
    records: dict[str, dict[str, Any]] = (
        {r["key"]: r for r in files.read_json(games_file)["games"]} if games_file.exists() else {}
    )
    started = time.monotonic()
    info = _play_anchors(job, records, games_file) if e["games_per_anchor"] > 0 else {}
    seconds = time.monotonic() - started
    logger.info("games against Stockfish: %.1f s", seconds)
    played = list(records.values())
    fit = elo.fit([(r["anchor_effective"], r["score"]) for r in played])
    per_anchor = [_anchor_row(a, [r for r in played if r["anchor"] == a]) for a in e["anchors"]]
    per_anchor = [row for row in per_anchor if row]
    elo_json = {
        "model": job.model_info,
        "host": job.host,
        "fit": fit,
        "anchors": per_anchor,
        "note": ELO_NOTE,
        "reproducible": False,
        "reproducibility": ELO_REPRODUCIBILITY,
        "engine": {k: v for k, v in info.items() if k != "complete"},
        "complete": info.get("complete", True),
        "limit": {"nodes": e["nodes"], "move_seconds": e["move_seconds"]},
        "protocol": f"openings: the first {e['opening_plies']} plies of evenly spaced validation"
        f" games, each played with both colours; the model plays its best legal move; games"
        f" longer than {e['max_plies']} plies are adjudicated draws",
        "seconds": seconds,
    }
    tables = {
        "elo_table": pd.DataFrame(per_anchor),
        "elo_games": pd.DataFrame(played).drop(columns=["key"], errors="ignore"),
    }
    return Result(elo_json, tables, plots.elo_figure(per_anchor, fit))


PARTS: dict[str, Part] = {"match": move_matching, "legality": legality, "elo": elo_games}
"""Each part of ``outputs.PARTS`` (the order they run in) by name."""
if set(PARTS) != set(outputs.PARTS):
    raise ImportError(f"evaluate.PARTS {sorted(PARTS)} != chesslm.play.outputs' parts"
                      f" {sorted(outputs.PARTS)}")  # fmt: skip


def _play_anchors(job: Job, records: dict[str, dict[str, Any]], games_file: Path) -> dict[str, Any]:
    """Play the games not yet in ``records``, each kept in ``games_file`` as it ends."""
    e = job.settings["elo"]
    first = next(iter(job.caches.values()))
    val = TokenCache(first).validation
    openings = games.openings_from(
        (val[int(i)] for i in matching.evenly_spaced(len(val), 4 * e["games_per_anchor"])),
        e["opening_plies"],
    )
    if not openings:
        raise ValueError(
            f"{first}: no validation game has play.elo.opening_plies={e['opening_plies']} plies"
        )

    def keep(record: dict[str, Any]) -> None:
        records[record["key"]] = record
        files.write_json_atomic(games_file, {"games": list(records.values())})

    total = len(e["anchors"]) * e["games_per_anchor"]
    progress = Progress("games against Stockfish", total, "games", every=job.progress_every)
    progress.update(len(records))
    info = games.play_engine_games(
        job.net,
        engine_path=games.find_engine(e["engine"]),
        anchors=e["anchors"],
        games_per_anchor=e["games_per_anchor"],
        openings=openings,
        limit=chess.engine.Limit(nodes=e["nodes"], time=e["move_seconds"]),
        max_plies=e["max_plies"],
        deadline=time.monotonic() + e["seconds"],
        done=records,
        on_result=keep,
        progress=progress,
    )
    progress.finish("complete" if info["complete"] else "stopped by the time budget")
    return info


def _anchor_row(anchor: int, mine: list[dict[str, Any]]) -> dict[str, Any] | None:
    """One anchor's games, wins, draws, losses and score (None when it has no game)."""
    if not mine:
        return None
    return {
        "anchor": anchor,
        "anchor_effective": mine[0]["anchor_effective"],
        "games": len(mine),
        "wins": sum(r["score"] == 1 for r in mine),
        "draws": sum(r["score"] == 0.5 for r in mine),
        "losses": sum(r["score"] == 0 for r in mine),
        "score": sum(r["score"] for r in mine) / len(mine),
        "adjudicated_draws": sum(r["adjudicated_draw"] for r in mine),
    }


def _write_csv(path: Path, frame: pd.DataFrame) -> None:
    files.write_atomic(path, lambda fh: fh.write(frame.to_csv(index=False).encode()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--settings", required=True, help="the run's play object as JSON")
    parser.add_argument("--cache", action="append", required=True, help="NAME=TOKEN_CACHE_DIR")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    caches = dict(c.split("=", 1) for c in args.cache)
    run(
        args.run_dir,
        json.loads(args.settings),
        {k: Path(v) for k, v in caches.items()},
        device=args.device,
        threads=args.threads,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
