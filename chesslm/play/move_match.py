"""Part ``match`` of rule play: each dataset's move-matching (``chesslm.match.matching``) on
its validation positions, its tables with game-bootstrap intervals and its figure."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from chesslm.match import matching, outcome, protocols, think_time
from chesslm.play import plots
from chesslm.play.job import Job, Result
from chesslm.progress import Progress
from chesslm.scorer import ratings

logger = logging.getLogger(__name__)

DEFINITION = (
    "model move = argmax over legal moves of P(source) P(destination|source)"
    " P(promotion|source,destination), each renormalised over the legal tokens of its step;"
    " NLL = -log of the played move's probability under it"
)


def move_matching(job: Job) -> Result:
    """Part ``match``: move-matching tables of each dataset, their figure."""
    m = job.settings.match
    chosen = protocols.chosen(m.protocols)
    started = time.monotonic()
    deadline = started + m.seconds
    per_dataset: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    for name, cache_dir in job.caches.items():
        per_dataset[name] = _match_dataset(job, name, cache_dir, chosen, deadline)
        rows += [{"dataset": name, **r} for r in per_dataset[name]["table"]]
    match_json = {
        "model": job.model_info,
        "host": job.host,
        "definition": DEFINITION,
        "protocols": {p.name: p.text for p in chosen},
        "ratings": "each game's own (white_elo, black_elo of the validation metadata; 'unknown'"
        " tokens where missing) as the rating prefix"
        if ratings.conditioned(job.net)
        else "none: the model is not rating-conditioned",
        "bins": "mover's Elo: 100-point bins (label = lower edge) and bands <1400, 1400-2000,"
        " 2000-2400, 2400+; speed: Lichess classes; 'unknown' where metadata is missing",
        "interval": f"95 % percentile bootstrap over games, {m.bootstrap} replicates; none"
        f" for a group of fewer than {matching.MIN_INTERVAL_GAMES} games (few_games: true)",
        "min_interval_games": matching.MIN_INTERVAL_GAMES,
        "split": "validation",
        "seconds": time.monotonic() - started,
        "datasets": per_dataset,
        **({"outcome_definition": outcome.DEFINITION} if job.net.config.outcome else {}),
        **({"think_time_definition": think_time.DEFINITION} if job.net.config.think_time else {}),
    }
    logger.info("move-matching: %.1f s", match_json["seconds"])
    frame = pd.DataFrame(rows)
    return Result(match_json, {"move_match_table": frame}, plots.match_figure(frame))


def evaluator(job: Job, cache_dir: Path, state: Path) -> matching.Evaluator:
    """The validation positions ``match`` asks for, scored as its settings say (move-matching
    and the counterfactual ratings score the same positions)."""
    m = job.settings.match
    return matching.Evaluator(
        job.net,
        cache_dir,
        state,
        games=m.games,
        chunk_games=m.chunk_games,
        batch_tokens=m.batch_tokens,
        device=job.device,
        attention=m.attention,
        threads=job.host["torch_threads"],
    )


def _match_dataset(
    job: Job, name: str, cache_dir: Path, chosen: list[protocols.Protocol], deadline: float
) -> dict[str, Any]:
    """One dataset's move-matching (its finished chunks kept in the state) and its table."""
    bootstrap, seed = job.settings.match.bootstrap, job.settings.seed
    ev = evaluator(job, cache_dir, job.state / "match" / name)
    progress = Progress(f"move-matching {name}", ev.positions_total, "positions",
                        every=job.progress_every, done=ev.positions_done)  # fmt: skip
    t0 = time.monotonic()
    complete = ev.run(deadline, progress)
    progress.finish("complete" if complete else "stopped by the time budget")
    seconds = time.monotonic() - t0
    pos = ev.positions()
    meta, meta_state = matching.load_metadata(cache_dir, ev.games.offsets)
    table = matching.tables(pos, meta, chosen, replicates=bootstrap, seed=seed)
    features = matching.position_features(pos, meta)
    keeps = {p.name: p.keep(pos["game"], pos["ply"], meta) for p in chosen}
    band = (matching.elo_band(features["elo"]), [*(b for *_, b in matching.BANDS), "unknown"])
    head = {"outcome": outcome.section(pos, meta, keeps, band, outcome.train_split(cache_dir),
            replicates=bootstrap, seed=seed,
            min_games=matching.MIN_INTERVAL_GAMES)} if "p_win" in pos else {}  # fmt: skip
    if matching.THINK_FIELD in pos:  # a think-time head's measure against its baselines
        head["think_time"] = think_time.section(
            pos, meta, keeps, band, features["speed"], cache_dir, replicates=bootstrap,
            seed=seed, min_games=matching.MIN_INTERVAL_GAMES,
        )  # fmt: skip
    return {
        "cache": str(cache_dir),
        "validation_games": len(ev.games),
        "games_selected": int(len(ev.selected)),
        "selection": ev.selection(),
        "games_evaluated": int(len(np.unique(pos["game"]))),
        "complete": complete,
        "metadata": meta_state,
        "seconds_this_run": seconds,
        "preparation_workers": ev.workers,  # chesslm.scorer.prepare's split of threads
        **matching.counts(pos, meta, features, chosen),
        "table": table,
        **head,  # the outcome and think-time heads' measures (chesslm.match): none without
    }
