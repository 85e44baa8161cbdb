"""Rule play, the conductor: the play evaluation of a run's best checkpoint, part after part
(``outputs.PARTS``: move-matching, free-running legality, Elo on a ladder of anchors, ratings
set counterfactually), each written as soon as it completes, within its time budget.

    python -m chesslm.play.evaluate --run-dir results/demo --settings '{...}' \
        --cache sample=results/datasets/sample/token-cache --threads 1 \
        --ladder results/ladders/small-KEY/ladder.json

``settings`` is the run's ``play`` object of the config, typed (``PlaySettings``; absent keys
take their defaults). The evaluation reads validation splits only; a path to a test split is
refused. Work in progress lives in ``{run_dir}/play/state`` (``workstate``): after a job
stopped by a part's time budget, the next one with the same checkpoint, settings and ladder
resumes its finished chunks and games; any other job starts afresh. torch uses exactly
``threads`` threads (the rule's ``threads:``), less those move-matching gives to preparing games
(``chesslm.scorer.prepare``); each part logs its progress (positions, games) at least every 10 s
of work (the Elo part: after each anchor).
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

from chesslm import files
from chesslm.ladder import round_robin as ladder
from chesslm.layout import RunDir
from chesslm.play import workstate
from chesslm.play.counterfactual_ratings import counterfactual_ratings
from chesslm.play.elo_games import elo_games
from chesslm.play.job import Options, Part, open_job, write
from chesslm.play.legality import legality
from chesslm.play.move_match import move_matching
from chesslm.record import play_files as outputs
from chesslm.scorer.settings import PlaySettings

PARTS: dict[str, Part] = {"match": move_matching, "legality": legality, "elo": elo_games,
                          "counterfactual": counterfactual_ratings}  # fmt: skip
"""Each part of ``outputs.PARTS`` (the order they run in) by name."""
if set(PARTS) != set(outputs.PARTS):
    raise ImportError(f"evaluate.PARTS {sorted(PARTS)} != chesslm.record.play_files' parts"
                      f" {sorted(outputs.PARTS)}")  # fmt: skip


def run(
    run_dir: Path, settings: PlaySettings, caches: dict[str, Path], **options: Any
) -> dict[str, Path]:
    """Evaluate ``run_dir``'s best.pt as ``options`` (``Options``' fields) say, part after
    part, each part's files written as soon as it ends; returns the paths written
    (``outputs.FILES`` keys). The Elo part plays the anchors of the ``ladder`` file."""
    how = Options(**options)
    if settings.elo.games_per_anchor > 0 and how.ladder is None:
        raise ValueError("play.elo.games_per_anchor > 0 needs the ladder file (--ladder)")
    if how.ladder is not None:
        ladder.read_ladder(how.ladder)  # its seal checked before any part spends its budget
    job = open_job(run_dir, settings, caches, how)
    out = {name: Path(RunDir(run_dir).play_file(file)) for name, file in outputs.FILES.items()}
    stopped = []
    for name in outputs.PARTS:
        result = PARTS[name](job)
        write(result, outputs.of_part(name), out)
        stopped += [name] if workstate.stopped(result.record) else []
    workstate.end(job.state, stopped)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--settings", required=True, help="the run's play object as JSON")
    parser.add_argument("--cache", action="append", required=True, help="NAME=TOKEN_CACHE_DIR")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--ladder", type=Path, help="the ladder file (rule ladder's output)")
    args = parser.parse_args(argv)
    files.unwind_on_signals()  # a kill leaves no temporary beside the outputs
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    caches = dict(c.split("=", 1) for c in args.cache)
    run(
        args.run_dir,
        PlaySettings.from_dict(json.loads(args.settings)),
        {k: Path(v) for k, v in caches.items()},
        device=args.device,
        threads=args.threads,
        ladder=args.ladder,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
