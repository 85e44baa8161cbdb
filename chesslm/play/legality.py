"""Part ``legality`` of rule play: free-running legality, greedy and at temperature 1, from
self-play with no legality mask (``chesslm.ladder.games``)."""

from __future__ import annotations

import logging
import time
from typing import Any

import pandas as pd

from chesslm import files
from chesslm.ladder import games
from chesslm.play import plots
from chesslm.play.job import Job, Result
from chesslm.progress import Progress
from chesslm.scorer import ratings

logger = logging.getLogger(__name__)

MODES = {"greedy": 0.0, "temperature_1": 1.0}  # legality's modes: their temperatures
PROTOCOL = (
    "self-play from the start position, no legality mask (grammar only: squares, squares,"
    " promotion token); an illegal proposal is counted and replaced by the model's best legal"
    " move (sampled at temperature 1); python-chess judges; greedy games from one start are"
    " identical, so one greedy game is played; a rating-conditioned model plays White at"
    " play.ratings.self and Black at play.ratings.opponent"
)


def legality(job: Job) -> Result:
    """Part ``legality``: free-running legality, greedy and at temperature 1."""
    lg = job.settings.legality
    elo_pair = job.settings.ratings.pair()
    legality_json: dict[str, Any] = {"model": job.model_info, "host": job.host, "modes": {},
                                     "ratings": ratings.record(job.net, *elo_pair)}  # fmt: skip
    cached = job.state / "legality.json"
    done = files.read_json(cached)["modes"] if cached.exists() else {}
    started = time.monotonic()
    deadline = started + lg.seconds
    todo = {m: t for m, t in MODES.items() if not (m in done and done[m]["complete"])}
    legality_json["modes"] = {m: done[m] for m in MODES if m not in todo}
    progress = {m: Progress(f"free-running legality {m}", games.self_play_games(lg.games, t),
                            "games finished", every=job.progress_every)
                for m, t in todo.items()}  # fmt: skip
    if todo:  # every mode's games in one batch per ply
        legality_json["modes"] |= games.self_play_modes(
            job.net, todo, games=lg.games, max_plies=lg.max_plies, seed=job.settings.seed,
            deadline=deadline, progress=progress, elo=elo_pair)  # fmt: skip
    legality_json["modes"] = {m: legality_json["modes"][m] for m in MODES}
    for m in todo:
        progress[m].finish("complete" if legality_json["modes"][m]["complete"] else
                           "stopped by the time budget")  # fmt: skip
    files.write_json_atomic(cached, legality_json)
    legality_json["protocol"] = PROTOCOL
    legality_json["seconds"] = time.monotonic() - started
    logger.info("free-running legality: %.1f s", legality_json["seconds"])
    rows = [{"mode": mode, **b} for mode, r in legality_json["modes"].items() for b in r["buckets"]]
    frame = pd.DataFrame(rows)
    return Result(legality_json, {"legality_table": frame}, plots.legality_figure(frame))
