"""The play evaluation of a run's best checkpoint: move-matching, free-running legality and
Elo on a ladder of anchors (``chesslm.play.ladder``), each written as soon as it completes,
within its time budget.

    python -m chesslm.play.evaluate --run-dir results/demo --settings '{...}' \
        --cache sample=results/datasets/sample/token-cache --threads 1 \
        --ladder results/ladders/small-KEY/ladder.json

``settings`` is the run's ``play`` object of the config (schema defaults applied). The
evaluation reads validation splits only; a path to a test split is refused. Work in progress
lives in ``{run_dir}/play/state`` (``workstate``): after a job stopped by a part's time
budget, the next one with the same checkpoint, settings and ladder resumes its finished chunks
and games; any other job starts afresh. torch uses exactly ``threads`` threads (the rule's
``threads:``), less those move-matching gives to preparing games (``prepare``); each part
logs its progress (positions, games) at least every 10 s of work (the Elo part: after each
anchor).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from matplotlib.figure import Figure

from chesslm import files, seal
from chesslm.figures import save_svg
from chesslm.layout import RunDir
from chesslm.model import checkpoint, gpt, weights
from chesslm.play import (
    anchors,
    counterfactual,
    elo,
    games,
    inflight,
    ladder,
    matching,
    outcome,
    outputs,
    plots,
    prepare,
    protocols,
    ratings,
    scoring,
    workstate,
)
from chesslm.play.progress import EVERY_SECONDS, Progress

logger = logging.getLogger(__name__)

ELO_NOTE = (
    "engine Elo on the ladder's scale, whose UCI_Elo anchors hold Stockfish's calibration (CCRL"
    " Blitz, 120+1 s, anchored to the Stash engine, about +-100 Elo), not a human (Lichess)"
    " rating"
)
MODEL = "model"  # the model's name in its games' rows


def load_model(path: Path, device: torch.device) -> tuple[gpt.GPT, dict[str, Any]]:
    """best.pt's model (``weights.model_of``) and what play's records say of it."""
    payload = checkpoint.load(path)
    net = weights.model_of(payload, path, device)
    info = {
        "checkpoint": str(path),
        "checkpoint_sha256": files.sha256_file(path),
        "preset": payload["identity"]["model"]["preset"],
        "step": payload["cursor"]["step"],
        "best_nll": payload["metrics"].get("best_nll"),
        "conditioning": ratings.layout(net),
    }
    return net, info


def check_validation_only(cache_dir: Path) -> None:
    """Refuse anything but a token cache (which holds train and validation only)."""
    if "test" in cache_dir.parts or not (cache_dir / "cache.json").exists():
        raise ValueError(f"{cache_dir}: not a token cache (play reads validation splits only)")


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
    ladder: Path | None


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


@dataclass(frozen=True)
class Options:
    """How one evaluation runs (what it measures is the ``settings``): the device, torch's
    threads (the rule's ``threads:``), the checkpoint (``None``: the run's ``train/best.pt``),
    the seconds of work between progress lines, and the ladder file (rule ladder's)."""

    device: str
    threads: int = 1
    checkpoint_path: Path | None = None
    progress_every: float = EVERY_SECONDS
    ladder: Path | None = None


def run(
    run_dir: Path, settings: dict[str, Any], caches: dict[str, Path], **options: Any
) -> dict[str, Path]:
    """Evaluate ``run_dir``'s best.pt as ``options`` (``Options``' fields) say, part after
    part, each part's files written as soon as it ends; returns the paths written
    (``outputs.FILES`` keys). The Elo part plays the anchors of the ``ladder`` file."""
    how = Options(**options)
    if settings["elo"]["games_per_anchor"] > 0 and how.ladder is None:
        raise ValueError("play.elo.games_per_anchor > 0 needs the ladder file (--ladder)")
    if how.ladder is not None:
        ladder.read_ladder(how.ladder)  # its seal checked before any part spends its budget
    job = _job(run_dir, settings, caches, how)
    out = {name: Path(RunDir(run_dir).play_file(file)) for name, file in outputs.FILES.items()}
    stopped = []
    for name in outputs.PARTS:
        result = PARTS[name](job)
        _write(result, outputs.of_part(name), out)
        stopped += [name] if workstate.stopped(result.record) else []
    workstate.end(job.state, stopped)
    return out


def _job(run_dir: Path, settings: dict[str, Any], caches: dict[str, Path], how: Options) -> Job:
    """Load the model, and keep or empty the work in progress (``workstate``)."""
    host = {"device": how.device, **use_threads(how.threads)}
    dev = torch.device(how.device)
    torch.manual_seed(settings["seed"])
    prepare.start_job(how.threads, dev.type)  # forked while this process is small
    ckpt = how.checkpoint_path or RunDir(run_dir).best
    net, model_info = load_model(ckpt, dev)
    if settings["match"]["compile"]:
        logger.info("match.compile: the first batches compile (on an H200: 45 s cold, 12 s cached)")
        scoring.compile_layers(net)
    play_dir = Path(RunDir(run_dir).play)
    play_dir.mkdir(parents=True, exist_ok=True)
    wanted = workstate.identity(model_info, settings, caches, how.device) | matching.state_key()
    state = workstate.open_state(play_dir, wanted)
    for cache_dir in caches.values():
        check_validation_only(cache_dir)
    return Job(net, model_info, dev, settings, caches, state, host, how.progress_every, how.ladder)


def _write(result: Result, mine: tuple[outputs.Output, ...], out: dict[str, Path]) -> None:
    """A part's files, in its table order: the record, the tables, the figure."""
    for output in mine:
        path = out[output.name]
        if output.file.endswith(".json"):
            seal.write(path, result.record)  # records.py checks the seal before use
        elif output.file.endswith(".csv"):
            _write_csv(path, result.tables[output.name])
        else:
            save_svg(result.figure, path)


def move_matching(job: Job) -> Result:
    """Part ``match``: move-matching tables of each dataset, their figure."""
    m = job.settings["match"]
    chosen = protocols.chosen(m["protocols"])
    started = time.monotonic()
    deadline = started + m["seconds"]
    per_dataset: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    for name, cache_dir in job.caches.items():
        per_dataset[name] = _match_dataset(job, name, cache_dir, chosen, deadline)
        rows += [{"dataset": name, **r} for r in per_dataset[name]["table"]]
    match_json = {
        "model": job.model_info,
        "host": job.host,
        "definition": "model move = argmax over legal moves of P(source) P(destination|source)"
        " P(promotion|source,destination), each renormalised over the legal tokens of its step;"
        " NLL = -log of the played move's probability under it",
        "protocols": {p.name: p.text for p in chosen},
        "ratings": "each game's own (white_elo, black_elo of the validation metadata; 'unknown'"
        " tokens where missing) as the rating prefix"
        if ratings.conditioned(job.net)
        else "none: the model is not rating-conditioned",
        "bins": "mover's Elo: 100-point bins (label = lower edge) and bands <1400, 1400-2000,"
        " 2000-2400, 2400+; speed: Lichess classes; 'unknown' where metadata is missing",
        "interval": f"95 % percentile bootstrap over games, {m['bootstrap']} replicates; none"
        f" for a group of fewer than {matching.MIN_INTERVAL_GAMES} games (few_games: true)",
        "min_interval_games": matching.MIN_INTERVAL_GAMES,
        "split": "validation",
        "seconds": time.monotonic() - started,
        "datasets": per_dataset,
        **({"outcome_definition": outcome.DEFINITION} if job.net.config.outcome else {}),
    }
    logger.info("move-matching: %.1f s", match_json["seconds"])
    frame = pd.DataFrame(rows)
    return Result(match_json, {"move_match_table": frame}, plots.match_figure(frame))


def _evaluator(job: Job, cache_dir: Path, state: Path) -> matching.Evaluator:
    """The validation positions ``match`` asks for, scored as its settings say (move-matching
    and the counterfactual ratings score the same positions)."""
    m = job.settings["match"]
    return matching.Evaluator(
        job.net,
        cache_dir,
        state,
        games=m["games"],
        chunk_games=m["chunk_games"],
        batch_tokens=m["batch_tokens"],
        device=job.device,
        attention=m["attention"],
        threads=job.host["torch_threads"],
    )


def _match_dataset(
    job: Job, name: str, cache_dir: Path, chosen: list[protocols.Protocol], deadline: float
) -> dict[str, Any]:
    """One dataset's move-matching (its finished chunks kept in the state) and its table."""
    m = job.settings["match"]
    evaluator = _evaluator(job, cache_dir, job.state / "match" / name)
    progress = Progress(f"move-matching {name}", evaluator.positions_total, "positions",
                        every=job.progress_every, done=evaluator.positions_done)  # fmt: skip
    t0 = time.monotonic()
    complete = evaluator.run(deadline, progress)
    progress.finish("complete" if complete else "stopped by the time budget")
    seconds = time.monotonic() - t0
    pos = evaluator.positions()
    meta, meta_state = matching.load_metadata(cache_dir, evaluator.games.offsets)
    table = matching.tables(pos, meta, chosen, replicates=m["bootstrap"],
                            seed=job.settings["seed"])  # fmt: skip
    features = matching.position_features(pos, meta)
    keeps = {p.name: p.keep(pos["game"], pos["ply"], meta) for p in chosen}
    band = (matching.elo_band(features["elo"]), [*(b for *_, b in matching.BANDS), "unknown"])
    head = {"outcome": outcome.section(pos, meta, keeps, band, outcome.train_split(cache_dir),
            replicates=m["bootstrap"], seed=job.settings["seed"],
            min_games=matching.MIN_INTERVAL_GAMES)} if "p_win" in pos else {}  # fmt: skip
    return {
        "cache": str(cache_dir),
        "validation_games": len(evaluator.games),
        "games_selected": int(len(evaluator.selected)),
        "selection": evaluator.selection(),
        "games_evaluated": int(len(np.unique(pos["game"]))),
        "complete": complete,
        "metadata": meta_state,
        "seconds_this_run": seconds,
        "preparation_workers": evaluator.workers,  # chesslm.play.prepare's split of threads
        **matching.counts(pos, meta, features, chosen),
        "table": table,
        **head,  # an outcome head's measure (chesslm.play.outcome): none without one
    }


MODES = {"greedy": 0.0, "temperature_1": 1.0}  # legality's modes: their temperatures


def legality(job: Job) -> Result:
    """Part ``legality``: free-running legality, greedy and at temperature 1."""
    lg = job.settings["legality"]
    elo_pair = ratings.of_settings(job.settings)
    legality_json: dict[str, Any] = {"model": job.model_info, "host": job.host, "modes": {},
                                     "ratings": ratings.record(job.net, *elo_pair)}  # fmt: skip
    cached = job.state / "legality.json"
    done = files.read_json(cached)["modes"] if cached.exists() else {}
    started = time.monotonic()
    deadline = started + lg["seconds"]
    todo = {m: t for m, t in MODES.items() if not (m in done and done[m]["complete"])}
    legality_json["modes"] = {m: done[m] for m in MODES if m not in todo}
    progress = {m: Progress(f"free-running legality {m}", games.self_play_games(lg["games"], t),
                            "games finished", every=job.progress_every)
                for m, t in todo.items()}  # fmt: skip
    if todo:  # every mode's games in one batch per ply
        legality_json["modes"] |= games.self_play_modes(
            job.net, todo, games=lg["games"], max_plies=lg["max_plies"], seed=job.settings["seed"],
            deadline=deadline, progress=progress, elo=elo_pair)  # fmt: skip
    legality_json["modes"] = {m: legality_json["modes"][m] for m in MODES}
    for m in todo:
        progress[m].finish("complete" if legality_json["modes"][m]["complete"] else
                           "stopped by the time budget")  # fmt: skip
    files.write_json_atomic(cached, legality_json)
    legality_json["protocol"] = (
        "self-play from the start position, no legality mask (grammar only: squares, squares,"
        " promotion token); an illegal proposal is counted and replaced by the model's best legal"
        " move (sampled at temperature 1); python-chess judges; greedy games from one start are"
        " identical, so one greedy game is played; a rating-conditioned model plays White at"
        " play.ratings.self and Black at play.ratings.opponent"
    )
    legality_json["seconds"] = time.monotonic() - started
    logger.info("free-running legality: %.1f s", legality_json["seconds"])
    rows = [{"mode": mode, **b} for mode, r in legality_json["modes"].items() for b in r["buckets"]]
    frame = pd.DataFrame(rows)
    return Result(legality_json, {"legality_table": frame}, plots.legality_figure(frame))


def elo_games(job: Job) -> Result:
    """Part ``elo``: the model against the ladder's anchors, its Elo on the ladder's scale."""
    e = job.settings["elo"]
    if e["games_per_anchor"] == 0 or job.ladder is None:
        record = {"model": job.model_info, "host": job.host, "anchors": [], "fit": None}
        return Result(record, {"elo_table": pd.DataFrame(), "elo_games": pd.DataFrame()},
                      plots.elo_figure([], None))  # fmt: skip
    stored = ladder.read_ladder(job.ladder)
    settings = run_ladder_settings(stored, e, job.ladder)
    started = time.monotonic()
    played = _play_ladder(job, stored, settings, _ladder_engine(stored, job.ladder))
    seconds = time.monotonic() - started
    logger.info("games against the ladder's anchors: %.1f s", seconds)
    rows = [r for d in played.values() for r in d["rows"]]
    covariance = ladder.ladder_covariance(stored)
    anchor_ratings = ladder.ladder_ratings(stored)
    fit = elo.fit_player(rows, anchor_ratings, MODEL, covariance) if rows else None
    per_anchor = [
        _anchor_row(spec, stored["ratings"][spec.name], played[spec.name]["rows"])
        for spec in settings.anchors
        if played.get(spec.name, {}).get("rows")
    ]
    elo_json = {
        "model": job.model_info,
        "host": job.host,
        "ladder": _ladder_record(stored, job.ladder),
        "anchors": per_anchor,
        "fit": fit,
        "ratings": ratings.record(job.net, *ratings.of_settings(job.settings)),
        "note": ELO_NOTE,
        **_reproducibility(settings, stored),
        "complete": all(d["complete"] for d in played.values()),
        "protocol": f"{e['games_per_anchor']} games against each of the ladder's anchors, colours"
        f" swapped per opening; openings: {settings.opening_plies} random plies seeded by"
        f" {settings.seed} (the ladder's games' openings); the model plays its best legal move;"
        f" games longer than {settings.max_plies} plies are adjudicated draws",
        "seconds": seconds,
    }
    tables = {"elo_table": pd.DataFrame(per_anchor),
              "elo_games": pd.DataFrame([_game_row(r) for r in rows])}  # fmt: skip
    return Result(elo_json, tables, plots.elo_figure(per_anchor, fit))


def run_ladder_settings(
    stored: dict[str, Any], e: dict[str, Any], path: Path
) -> ladder.LadderSettings:
    """The ladder's settings with the run's ``play.elo`` seed and max_plies (null: the
    ladder's)."""
    settings = ladder.LadderSettings.from_dict(stored["settings"])
    if MODEL in {a.name for a in settings.anchors}:
        raise ValueError(f"{path}: an anchor is named {MODEL!r}, the model's name in its games")
    return dataclasses.replace(
        settings,
        seed=settings.seed if e["seed"] is None else e["seed"],
        max_plies=settings.max_plies if e["max_plies"] is None else e["max_plies"],
    )


def _ladder_engine(stored: dict[str, Any], path: Path) -> str:
    """The engine the ladder was built with, refused if the file there is another build."""
    engine = stored["engine"]
    here = ladder.engine_identity(engine["path"])
    if here["sha256"] != engine["sha256"]:
        raise ValueError(
            f"{path}: built with {engine['id_name']} (sha256 {engine['sha256'][:12]}), but"
            f" {engine['path']} is now {here['id_name']} (sha256 {here['sha256'][:12]});"
            " rebuild the ladder (rule ladder)"
        )
    return str(engine["path"])


def _play_ladder(
    job: Job, stored: dict[str, Any], settings: ladder.LadderSettings, engine: str
) -> dict[str, dict[str, Any]]:
    """The model's games against each anchor (rows, complete), on CUDA up to
    ``inflight.MAX_IN_FLIGHT`` in flight together (``inflight``), each anchor's kept in the
    state as its last game ends and reused by a rerun on the same ladder."""
    per = job.settings["elo"]["games_per_anchor"]
    state_file = job.state / "elo-games.json"
    kept = files.read_json(state_file) if state_file.exists() else {}
    played = kept.get("anchors", {}) if kept.get("ladder_key") == stored["key"] else {}
    player = anchors.ModelPlayer(job.net, name=MODEL, elo=ratings.of_settings(job.settings))
    deadline = time.monotonic() + job.settings["elo"]["seconds"]
    kept_games = sum(len(d["rows"]) for d in played.values() if d["complete"])
    progress = Progress("games against the ladder's anchors", len(settings.anchors) * per,
                        "games", every=job.progress_every, done=kept_games)  # fmt: skip

    def ended(spec: anchors.AnchorSpec, rows: list[dict[str, Any]]) -> None:
        played[spec.name] = {"rows": rows, "complete": len(rows) == per}
        files.write_json_atomic(state_file, {"ladder_key": stored["key"], "anchors": played})
        progress.update(sum(len(d["rows"]) for d in played.values()), f"{spec.name} done")

    todo = [a for a in settings.anchors if not played.get(a.name, {}).get("complete")]
    # on a CPU the batch buys nothing (the forward is bound by the cores the engines need:
    # BENCHMARKS.md, issue 33 item 3): one game at a time there
    cuda = games.model_device(job.net).type == "cuda"
    inflight.play_anchors_together(player, todo, settings, engine, per, deadline=deadline,
                                   on_anchor=ended,
                                   max_in_flight=inflight.MAX_IN_FLIGHT if cuda else 1)  # fmt: skip
    played = {a.name: played[a.name] for a in settings.anchors if a.name in played}  # ladder order
    complete = all(d["complete"] for d in played.values())
    progress.finish("complete" if complete else "stopped by the time budget")
    return played


def _ladder_record(stored: dict[str, Any], path: Path) -> dict[str, Any]:
    """What elo.json says of the ladder: its file and key, engine, fit and games."""
    return {
        "file": str(path),
        "key": stored["key"],
        "engine": stored["engine"],
        "method": stored.get("method"),
        "prior": stored.get("prior"),
        "games": len(stored["games"]),
        "protocol": stored.get("protocol"),
    }


def _reproducibility(settings: ladder.LadderSettings, stored: dict[str, Any]) -> dict[str, Any]:
    """Which of the model's games replay from the seed, and which do not (UCI_Elo anchors)."""
    seeded = [a.name for a in settings.anchors if a.reproducible]
    unseeded = [a.name for a in settings.anchors if not a.reproducible]
    return {
        "reproducible": not unseeded,
        "replayable_anchors": seeded,
        "random_anchors": unseeded,
        "reproducibility": f"Stockfish's UCI_Elo anchors ({', '.join(unseeded)}) play at"
        " UCI_LimitStrength, which picks moves from a generator seeded by the clock (it has no"
        " seed option): their games, and so the estimate, change on a rerun; the model (its"
        f" best legal move) and the anchors {', '.join(seeded)} are seeded and replay move for"
        f" move on the same engine build; the anchors' ratings are the ladder file's (key"
        f" {stored['key'][:12]}), fixed until it is rebuilt",
    }


def _anchor_row(
    spec: anchors.AnchorSpec, rating: dict[str, Any], rows: list[dict[str, Any]]
) -> dict[str, Any]:
    """One anchor: its rating on the ladder, and the model's games, results and score."""
    scores = [_model_score(r) for r in rows]
    return {
        "anchor": spec.name,
        "kind": spec.kind,
        "rating": rating["elo"],
        "rating_low": rating["low"],
        "rating_high": rating["high"],
        "fixed": rating["fixed"],
        "ladder_games": rating["games"],
        "games": len(rows),
        "wins": scores.count(1.0),
        "draws": scores.count(0.5),
        "losses": scores.count(0.0),
        "score": sum(scores) / len(scores),
        "adjudicated_draws": sum(r["adjudicated"] for r in rows),
    }


def _model_score(row: dict[str, Any]) -> float:
    return float(row["score"]) if row["white"] == MODEL else 1 - float(row["score"])


def _game_row(row: dict[str, Any]) -> dict[str, Any]:
    white = row["white"] == MODEL
    return {"anchor": row["black"] if white else row["white"],
            "model_colour": "white" if white else "black",
            "model_score": _model_score(row), **row}  # fmt: skip


def counterfactual_ratings(job: Job) -> Result:
    """Part ``counterfactual``: a conditioned model's move-matching positions at their true
    ratings and at each ``counterfactual.ratings`` for both players (``counterfactual``); a
    model without conditioning writes a record that says so, an empty table and a notice."""
    c = job.settings["counterfactual"]
    record: dict[str, Any] = {"model": job.model_info, "host": job.host}
    if not ratings.conditioned(job.net):
        record.update(counterfactual.not_conditioned(job.net))
        return Result(record, {"counterfactual_table": pd.DataFrame()},
                      plots.counterfactual_figure(pd.DataFrame()))  # fmt: skip
    chosen = protocols.chosen(job.settings["match"]["protocols"])
    started = time.monotonic()
    deadline = started + c["seconds"]
    per_dataset, rows, gap_rows = {}, [], []
    for name, cache_dir in job.caches.items():
        per_dataset[name] = _counterfactual_dataset(job, name, cache_dir, chosen, deadline)
        rows += [{"dataset": name, **r} for r in per_dataset[name].pop("table")]
        gap_rows += [{"dataset": name, **r} for r in per_dataset[name].pop("gap_table", [])]
    record.update({
        "conditioned": True,
        "conditioning": ratings.layout(job.net),
        "settings": counterfactual.settings_record(c["ratings"]),
        "definition": counterfactual.DEFINITION,
        "protocols": {p.name: p.text for p in chosen},
        "split": "validation",
        "seconds": time.monotonic() - started,
        "datasets": per_dataset,
        # the summary reads JSON only: the overall rows of the table, for its section
        "summary_rows": [r for r in rows if r["grouping"] == "overall"],
        **counterfactual.head_record(job.net, c, gap_rows),  # nothing without the outcome head
    })  # fmt: skip
    logger.info("counterfactual ratings: %.1f s", record["seconds"])
    frame = pd.DataFrame(rows + counterfactual.gap_csv_rows(gap_rows))
    return Result(record, {"counterfactual_table": frame}, plots.counterfactual_figure(frame))


def _counterfactual_dataset(
    job: Job, name: str, cache_dir: Path, chosen: list[protocols.Protocol], deadline: float
) -> dict[str, Any]:
    """One dataset's counterfactual scoring (its finished chunks kept) and its table."""
    evaluator = _evaluator(job, cache_dir, counterfactual.state_dir(job.state, name))
    scorer = counterfactual.Counterfactual(evaluator, job.settings["counterfactual"])
    progress = Progress(f"counterfactual ratings {name}", evaluator.positions_total, "positions",
                        every=job.progress_every, done=evaluator.positions_done)  # fmt: skip
    complete = scorer.run(deadline, progress)
    progress.finish("complete" if complete else "stopped by the time budget")
    pos = scorer.positions()
    meta, meta_state = matching.load_metadata(cache_dir, evaluator.games.offsets)
    return {
        "cache": str(cache_dir),
        "selection": evaluator.selection(),
        "games_evaluated": int(len(np.unique(pos["game"]))),
        "positions": int(len(pos["game"])),
        "complete": complete,
        "metadata": meta_state,
        **scorer.tables(pos, meta, chosen, job.settings),
    }


PARTS: dict[str, Part] = {"match": move_matching, "legality": legality, "elo": elo_games,
                          "counterfactual": counterfactual_ratings}  # fmt: skip
"""Each part of ``outputs.PARTS`` (the order they run in) by name."""
if set(PARTS) != set(outputs.PARTS):
    raise ImportError(f"evaluate.PARTS {sorted(PARTS)} != chesslm.play.outputs' parts"
                      f" {sorted(outputs.PARTS)}")  # fmt: skip


def _write_csv(path: Path, frame: pd.DataFrame) -> None:
    files.write_atomic(path, lambda fh: fh.write(frame.to_csv(index=False).encode()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--settings", required=True, help="the run's play object as JSON")
    parser.add_argument("--cache", action="append", required=True, help="NAME=TOKEN_CACHE_DIR")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--ladder", type=Path, help="the ladder file (rule ladder's output)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    caches = dict(c.split("=", 1) for c in args.cache)
    run(
        args.run_dir,
        json.loads(args.settings),
        {k: Path(v) for k, v in caches.items()},
        device=args.device,
        threads=args.threads,
        ladder=args.ladder,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
