"""The runs' position tables (rule score's ``positions.npz``), loaded and aligned: a comparison
is on the same positions, so two tables whose validation games differ (ids, order) or whose
rows differ (game, ply) are refused, naming the run."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from chesslm.compare.scores import COLUMNS, PROTOCOL_PREFIX, ids_digest, read_record
from chesslm.match import metrics, protocols
from chesslm.seal import rebuild

PER_RUN = metrics.NAMES  # each run's per-position values, from its table's rank and nll


@dataclass
class Aligned:
    """The positions every run was scored on, and each run's results there."""

    game: np.ndarray  # validation game index per position
    ply: np.ndarray
    mover_elo: np.ndarray
    opponent_elo: np.ndarray
    n_legal: np.ndarray
    keep: dict[str, np.ndarray]  # protocol name -> the positions it counts
    runs: dict[str, dict[str, np.ndarray]]  # run -> each metric per position
    validation_games: int
    ids_sha256: str

    def subset(self, mask: np.ndarray) -> Aligned:
        """The positions of ``mask`` (bool or indices) only."""
        return Aligned(
            self.game[mask], self.ply[mask], self.mover_elo[mask], self.opponent_elo[mask],
            self.n_legal[mask],
            {k: v[mask] for k, v in self.keep.items()},
            {r: {k: v[mask] for k, v in cols.items()} for r, cols in self.runs.items()},
            self.validation_games, self.ids_sha256,
        )  # fmt: skip


def load(out_dir: Path) -> dict[str, np.ndarray]:
    """One run's table (``out_dir``/positions.npz), trusted only once it matches the sealed
    scores.json beside it (``scores.read_record``); ValueError naming the file when a column
    is missing."""
    read_record(out_dir)
    path = out_dir / "positions.npz"
    with np.load(path, allow_pickle=False) as data:  # no pickle: nothing in a table runs
        missing = [c for c in (*COLUMNS, "game_ids") if c not in data.files]
        if missing == ["rank"] and "top1" in data.files:  # written before the metric table
            raise ValueError(
                f"{path}: a score table from before rule score kept each position's"
                f" rank; rebuild it: {rebuild(out_dir / 'scores.json', 'score')}"
            )
        if missing:
            raise ValueError(f"{path}: not a score table (no {', '.join(missing)})")
        return {k: data[k] for k in data.files}


def align(tables: dict[str, dict[str, np.ndarray]]) -> Aligned:
    """The runs' tables (run -> load()) on their common positions; ValueError naming the first
    run whose validation games or positions differ from the first run's."""
    (first, ref), *_ = tables.items()
    digest = ids_digest(ref["game_ids"])
    for run, t in tables.items():
        if ids_digest(t["game_ids"]) != digest:
            raise ValueError(
                f"run {run}: scored on other validation games than run {first}"
                f" ({len(t['game_ids'])} vs {len(ref['game_ids'])} games, ids differ):"
                " a comparison is on the same positions"
            )
        same = len(t["game"]) == len(ref["game"]) and bool(
            np.array_equal(t["game"], ref["game"]) and np.array_equal(t["ply"], ref["ply"])
        )
        if not same:
            raise ValueError(
                f"run {run}: positions differ from run {first}'s ({len(t['game'])} vs"
                f" {len(ref['game'])}) on the same validation games (runs.NAME.play.match.games"
                " bounds the games scored: the runs of a comparison need the same)"
            )
    keep = {name: ref[PROTOCOL_PREFIX + name].astype(bool) for name in protocols.PROTOCOLS}
    runs = {run: metrics.values(t["rank"], t["nll"]) for run, t in tables.items()}
    return Aligned(
        ref["game"].astype(np.int64), ref["ply"].astype(np.int64),
        ref["mover_elo"].astype(np.int64), ref["opponent_elo"].astype(np.int64),
        ref["n_legal"].astype(np.int64), keep, runs, len(ref["game_ids"]), digest,
    )  # fmt: skip
