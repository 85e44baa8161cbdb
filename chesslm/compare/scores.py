"""Rule score: one run's best.pt on every position of a dataset's validation split, one row per
position, written as ``positions.npz`` (+ ``scores.json``), the table every comparison of runs
on that dataset aligns; ``scores.json`` is sealed and holds the table's sha256, and
``read_record`` checks both before a comparison uses them (``chesslm.seal``). The scorer is
play's (``matching.Evaluator``, ``scoring``), so whatever a model needs there (a rating prefix,
say) it gets here too; its finished chunks are kept under
``state/`` (keyed by the checkpoint's sha256), so a stopped job resumes.

    python -m chesslm.compare.scores --run-dir results/demo --dataset sample \
        --cache results/datasets/sample/token-cache --out results/demo/scores/sample
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import math
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from chesslm import files, seal
from chesslm.data.cache import check_validation_only
from chesslm.layout import RunDir
from chesslm.match import matching, protocols
from chesslm.model import weights
from chesslm.scorer.settings import Match
from chesslm.scorer.threads import use_threads

logger = logging.getLogger(__name__)

# rank and nll: every metric of chesslm.match.metrics derives from them, so a new metric
# leaves the table as it is
COLUMNS = ("game", "ply", "mover_elo", "opponent_elo", "rank", "nll", "n_legal")
MATCH = Match()  # play.match's defaults: one per key, play's, score's and analyse's alike
PROTOCOL_PREFIX = "protocol_"  # one bool column per protocol: the position counts under it


def ids_digest(ids: np.ndarray) -> str:
    """sha256 of the split's game ids in order: two tables are on the same positions only
    when their splits hold the same games in the same order."""
    return hashlib.sha256(np.ascontiguousarray(ids).tobytes()).hexdigest()


def read_record(out_dir: Path, *, table: bool = True) -> dict[str, Any]:
    """``out_dir``'s scores.json, its seal checked, once ``positions.npz`` matches the sha256
    it holds (``table=False``: a caller that checked the table already, not hashed again).

    :raises seal.SealError: naming the file and the command that rebuilds both."""
    command = seal.rebuild(out_dir / "scores.json", "score")
    record = seal.read(out_dir / "scores.json", command)
    if table:
        path = out_dir / "positions.npz"
        seal.check_file(path, record.get("positions_sha256"), out_dir / "scores.json", command)
    return record


def write_table(
    out_dir: Path, ids: np.ndarray, columns: dict[str, np.ndarray], record: dict[str, Any]
) -> dict[str, Any]:
    """positions.npz, then scores.json sealed with the table's sha256 (what ``read_record``
    checks); returns the record as written."""
    table_path = out_dir / "positions.npz"
    files.write_atomic(table_path, lambda fh: np.savez(fh, game_ids=ids, **columns))
    return seal.write(
        out_dir / "scores.json", {**record, "positions_sha256": files.sha256_file(table_path)}
    )


def table(pos: dict[str, np.ndarray], meta: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The per-position columns from the evaluator's results, sorted by (game, ply)."""
    order = np.lexsort((pos["ply"], pos["game"]))
    game = pos["game"][order].astype(np.int64)
    ply = pos["ply"][order].astype(np.int64)
    rank = pos["rank"][order]
    white = ply % 2 == 0
    w, b = meta["white_elo"][game].astype(np.int64), meta["black_elo"][game].astype(np.int64)
    out = {
        "game": game,
        "ply": ply.astype(np.int16),
        "mover_elo": np.where(white, w, b).astype(np.int32),
        "opponent_elo": np.where(white, b, w).astype(np.int32),
        "rank": rank.astype(np.int16),
        "nll": pos["nll"][order].astype(np.float64),
        "n_legal": pos["n_legal"][order].astype(np.int16),
    }
    for name, protocol in protocols.PROTOCOLS.items():
        out[PROTOCOL_PREFIX + name] = np.asarray(protocol.keep(game, ply, meta), dtype=bool)
    return out


def score(
    run_dir: Path,
    run: str,
    dataset: str,
    cache_dir: Path,
    out_dir: Path,
    *,
    device: str = "cpu",
    threads: int = 1,
    chunk_games: int = MATCH.chunk_games,
    batch_tokens: int = MATCH.batch_tokens,
    games: int | None = None,
) -> dict[str, Any]:
    """Score ``run_dir``'s best.pt on ``cache_dir``'s validation split into ``out_dir``;
    returns the record written as scores.json. ``games``: that many evenly spaced validation
    games (the run's ``play.match.games``), None for all of them."""
    check_validation_only(cache_dir)
    started = time.monotonic()
    host = use_threads(threads)
    net, model = weights.load_with_record(Path(RunDir(run_dir).best), torch.device(device))
    window = matching.state_key()["window_chunks"]
    state = out_dir / "state" / f"{model['checkpoint_sha256'][:16]}-{games or 'all'}-w{window}"
    for old in (out_dir / "state").glob("*"):
        if old != state:  # another checkpoint's (or chunking's) chunks
            shutil.rmtree(old)
    evaluator = matching.Evaluator(
        net, cache_dir, state, games=games, chunk_games=chunk_games,
        batch_tokens=batch_tokens, device=torch.device(device),
    )  # fmt: skip
    evaluator.run(math.inf)
    meta, meta_state = matching.load_metadata(cache_dir, evaluator.games.offsets)
    columns = table(evaluator.positions(), meta)
    ids = np.asarray(evaluator.games.ids)
    record = {
        "run": run,
        "dataset": dataset,
        "split": "validation",
        "cache": str(cache_dir),
        "dataset_fingerprint": evaluator.cache.fingerprint,
        "validation_games": len(ids),
        "validation_ids_sha256": ids_digest(ids),
        "games_bound": games,
        "games_scored": int(len(np.unique(columns["game"]))),
        "positions": int(len(columns["game"])),
        "protocol_positions": {
            name: int(columns[PROTOCOL_PREFIX + name].sum()) for name in protocols.PROTOCOLS
        },
        "protocols": {name: p.text for name, p in protocols.PROTOCOLS.items()},
        "metadata": meta_state,
        "model": model,
        "host": {"device": device, **host},
        "seconds": time.monotonic() - started,
    }
    record = write_table(out_dir, ids, columns, record)
    shutil.rmtree(out_dir / "state")  # the table holds it all now
    logger.info("%s on %s: %d positions in %.1f s", run, dataset, record["positions"],
                record["seconds"])  # fmt: skip
    return record


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run-dir", type=Path, required=True)
    p.add_argument("--run", default=None)
    p.add_argument("--dataset", required=True)
    p.add_argument("--cache", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--games", type=int, default=None, help="evenly spaced validation games")
    a = p.parse_args(argv)
    files.unwind_on_signals()  # a kill leaves no temporary beside the outputs
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    score(a.run_dir, a.run or a.run_dir.name, a.dataset, a.cache, a.out, device=a.device,
          threads=a.threads, games=a.games)  # fmt: skip


if __name__ == "__main__":
    main()
