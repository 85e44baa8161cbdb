"""Part ``elo`` of rule play: the model's games against the ladder's anchors
(``chesslm.ladder``), kept anchor by anchor, and its Elo on the ladder's scale."""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Any

import pandas as pd

from chesslm import files
from chesslm.ladder import elo, games, inflight
from chesslm.ladder import players as anchors
from chesslm.ladder import round_robin as ladder
from chesslm.play import plots
from chesslm.play.job import Job, Result
from chesslm.progress import Progress
from chesslm.scorer import ratings
from chesslm.scorer.settings import Elo

logger = logging.getLogger(__name__)

ELO_NOTE = (
    "engine Elo on the ladder's scale, whose UCI_Elo anchors hold Stockfish's calibration (CCRL"
    " Blitz, 120+1 s, anchored to the Stash engine, about +-100 Elo), not a human (Lichess)"
    " rating"
)
MODEL = "model"  # the model's name in its games' rows


def elo_games(job: Job) -> Result:
    """Part ``elo``: the model against the ladder's anchors, its Elo on the ladder's scale."""
    e = job.settings.elo
    if e.games_per_anchor == 0 or job.ladder is None:
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
        "ratings": ratings.record(job.net, *job.settings.ratings.pair()),
        "note": ELO_NOTE,
        **_reproducibility(settings, stored),
        "complete": all(d["complete"] for d in played.values()),
        "protocol": f"{e.games_per_anchor} games against each of the ladder's anchors, colours"
        f" swapped per opening; openings: {settings.opening_plies} random plies seeded by"
        f" {settings.seed} (the ladder's games' openings); the model plays its best legal move;"
        f" games longer than {settings.max_plies} plies are adjudicated draws",
        "seconds": seconds,
    }
    tables = {"elo_table": pd.DataFrame(per_anchor),
              "elo_games": pd.DataFrame([_game_row(r) for r in rows])}  # fmt: skip
    return Result(elo_json, tables, plots.elo_figure(per_anchor, fit))


def run_ladder_settings(stored: dict[str, Any], e: Elo, path: Path) -> ladder.LadderSettings:
    """The ladder's settings with the run's ``play.elo`` seed and max_plies (null: the
    ladder's)."""
    settings = ladder.LadderSettings.from_dict(stored["settings"])
    if MODEL in {a.name for a in settings.anchors}:
        raise ValueError(f"{path}: an anchor is named {MODEL!r}, the model's name in its games")
    return dataclasses.replace(
        settings,
        seed=settings.seed if e.seed is None else e.seed,
        max_plies=settings.max_plies if e.max_plies is None else e.max_plies,
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
    per = job.settings.elo.games_per_anchor
    state_file = job.state / "elo-games.json"
    kept = files.read_json(state_file) if state_file.exists() else {}
    played = kept.get("anchors", {}) if kept.get("ladder_key") == stored["key"] else {}
    player = anchors.ModelPlayer(job.net, name=MODEL, elo=job.settings.ratings.pair())
    deadline = time.monotonic() + job.settings.elo.seconds
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
