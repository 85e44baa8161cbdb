"""Part ``counterfactual`` of rule play: a conditioned model's move-matching positions scored
at their true ratings and at each ``counterfactual.ratings`` for both players
(``chesslm.match.counterfactual``)."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from chesslm.match import counterfactual, matching, protocols
from chesslm.play import move_match, plots
from chesslm.play.job import Job, Result
from chesslm.progress import Progress
from chesslm.scorer import ratings

logger = logging.getLogger(__name__)


def counterfactual_ratings(job: Job) -> Result:
    """Part ``counterfactual``: a conditioned model's move-matching positions at their true
    ratings and at each ``counterfactual.ratings`` for both players (``counterfactual``); a
    model without conditioning writes a record that says so, an empty table and a notice."""
    c = job.settings.counterfactual
    record: dict[str, Any] = {"model": job.model_info, "host": job.host}
    if not ratings.conditioned(job.net):
        record.update(counterfactual.not_conditioned(job.net))
        return Result(record, {"counterfactual_table": pd.DataFrame()},
                      plots.counterfactual_figure(pd.DataFrame()))  # fmt: skip
    chosen = protocols.chosen(job.settings.match.protocols)
    started = time.monotonic()
    deadline = started + c.seconds
    per_dataset, rows, gap_rows = {}, [], []
    for name, cache_dir in job.caches.items():
        per_dataset[name] = _counterfactual_dataset(job, name, cache_dir, chosen, deadline)
        rows += [{"dataset": name, **r} for r in per_dataset[name].pop("table")]
        gap_rows += [{"dataset": name, **r} for r in per_dataset[name].pop("gap_table", [])]
    record.update({
        "conditioned": True,
        "conditioning": ratings.layout(job.net),
        "settings": counterfactual.settings_record(c.ratings),
        "definition": counterfactual.DEFINITION,
        "protocols": {p.name: p.text for p in chosen},
        "split": "validation",
        "seconds": time.monotonic() - started,
        "datasets": per_dataset,
        # the summary reads JSON only: the overall rows of the table, for its section
        "summary_rows": [r for r in rows if r["grouping"] == "overall"],
        # nothing without the outcome head
        **counterfactual.head_record(job.net, c.gap_centre, c.gaps, gap_rows),
    })  # fmt: skip
    logger.info("counterfactual ratings: %.1f s", record["seconds"])
    frame = pd.DataFrame(rows + counterfactual.gap_csv_rows(gap_rows))
    return Result(record, {"counterfactual_table": frame}, plots.counterfactual_figure(frame))


def _counterfactual_dataset(
    job: Job, name: str, cache_dir: Path, chosen: list[protocols.Protocol], deadline: float
) -> dict[str, Any]:
    """One dataset's counterfactual scoring (its finished chunks kept) and its table."""
    c = job.settings.counterfactual
    evaluator = move_match.evaluator(job, cache_dir, counterfactual.state_dir(job.state, name))
    scorer = counterfactual.Counterfactual(
        evaluator, c.ratings, gap_centre=c.gap_centre, gap_list=c.gaps
    )
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
        **scorer.tables(
            pos, meta, chosen, replicates=job.settings.match.bootstrap, seed=job.settings.seed
        ),  # fmt: skip
    }
