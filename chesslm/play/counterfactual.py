"""Counterfactual ratings: how far a rating-conditioned model's predictions move with the
ratings it is given.

The move-matching positions (the same games, ``match.games``, and the same protocols) are
scored once at each game's true ratings (its ``white_elo``/``black_elo``) and once per
counterfactual setting with both players at one rating (``counterfactual.ratings``). Per
setting: top-1, top-3 and NLL per move of the played move, and against the true-rating
distribution over the legal moves of each position: the share of positions whose argmax move
changes, the mean total variation distance and the mean KL(true || setting) in nats.

Each chunk of games is scored under every setting batch by batch (the settings of one batch
in a row, so only one batch's move distributions are in memory) and its per-position results
written at once (``state/``): a run stopped by its time budget resumes at the next chunk.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from chesslm import files
from chesslm.data import conditioning
from chesslm.play import matching, scoring
from chesslm.play import ratings as rating_prefix
from chesslm.play.progress import Progress
from chesslm.play.protocols import Protocol

TRUE = "true"  # the setting of each game's own ratings
FIELDS = ("rank", "nll", "changed", "tv", "kl")
STATS = ("top1", "top3", "nll", "argmax_changed", "tv", "kl")
DEFINITION = (
    "each position scored at the game's true ratings and with both players at each"
    " counterfactual rating; argmax_changed: share of positions whose best legal move differs"
    " from the true-rating one; tv: mean total variation distance between the two"
    " distributions over the legal moves; kl: mean KL(true || setting), nats"
)


def settings_of(elos: list[int]) -> list[tuple[str, tuple[int, int] | None]]:
    """(name, both players' ratings) of each setting, the true ratings first."""
    return [(TRUE, None)] + [(str(r), (r, r)) for r in elos]


class Counterfactual:
    """One dataset's counterfactual scoring, chunk by chunk, resumable."""

    def __init__(self, evaluator: matching.Evaluator, elos: list[int]) -> None:
        """``evaluator``: move-matching's of the dataset (its games, chunks, true prefixes),
        with its own state directory for this part's chunks."""
        self.ev = evaluator
        self.settings = settings_of(elos)
        n = len(evaluator.games)
        self.prefixes = [evaluator.prefixes] + [
            np.tile(conditioning.prefix(*both), (n, 1)) for _, both in self.settings[1:]
        ]

    def run(self, deadline: float, progress: Progress | None = None) -> bool:
        """Score the chunks not yet on disk until ``deadline``; True when all are done."""
        ev = self.ev
        done = 0
        for i, chunk in enumerate(ev.chunks):
            if ev.chunk_path(i).exists():
                done += int(ev.plies[chunk].sum())
                continue
            if time.monotonic() >= deadline:
                return False
            result = self.score_games(chunk)
            files.write_atomic(ev.chunk_path(i), lambda fh, r=result: np.savez(fh, **r))
            done += int(ev.plies[chunk].sum())
            if progress is not None:
                progress.update(done)
        return True

    def score_games(self, games: np.ndarray) -> dict[str, np.ndarray]:
        """Per position of ``games``: game, ply and (positions, settings) of each FIELDS."""
        ids = np.asarray(games, dtype=np.int64)
        plain = [self.ev.game(int(g)) for g in ids]
        groups = scoring.plan_batches(scoring.branched_lengths(plain).tolist(),
                                      self.ev.batch_tokens)  # fmt: skip
        out: dict[str, list[np.ndarray]] = {k: [] for k in ("game", "ply", *FIELDS)}
        for group in groups:
            per_setting = []
            for lead in self.prefixes:
                inputs = [dataclasses.replace(plain[i], prefix=lead[ids[i]]) for i in group]
                batch = scoring.build_batch(inputs, self.ev.device)
                s = scoring.score(self.ev.net, batch, attention=self.ev.attention)
                per_setting.append((s.move_logp.cpu().numpy().astype(np.float64),
                                    s.rank.cpu().numpy(), s.played_logp.cpu().numpy()))  # fmt: skip
            out["game"].append(ids[np.asarray(group)][batch.ply_game])
            out["ply"].append(batch.ply_number.astype(np.int16))
            for name, value in compare(batch.move_ply, len(batch.ply_game), per_setting).items():
                out[name].append(value)
        return {k: np.concatenate(v) for k, v in out.items()}

    def positions(self) -> dict[str, np.ndarray]:
        """Every position scored so far (all chunks on disk)."""
        parts = [
            np.load(p, allow_pickle=False) for p in sorted(self.ev.state_dir.glob("chunk-*.npz"))
        ]
        if not parts:
            empty = np.zeros((0, len(self.settings)))
            return {"game": np.zeros(0, np.int64), "ply": np.zeros(0, np.int64),
                    **{k: empty for k in FIELDS}}  # fmt: skip
        return {k: np.concatenate([p[k] for p in parts]) for k in ("game", "ply", *FIELDS)}


def compare(
    move_ply: np.ndarray, plies: int, per_setting: list[tuple[np.ndarray, ...]]
) -> dict[str, np.ndarray]:
    """(plies, settings) rank, nll, argmax changed, TV and KL against the first setting, from
    each setting's (move log-probabilities, rank, played log-probability)."""
    true_logp = per_setting[0][0]
    true_best = _argmax(move_ply, true_logp, plies)
    p = np.exp(true_logp)
    cols: dict[str, list[np.ndarray]] = {k: [] for k in FIELDS}
    for logp, rank, played in per_setting:
        q = np.exp(logp)
        cols["rank"].append(rank.astype(np.int32))
        cols["nll"].append((-played).astype(np.float32))
        cols["changed"].append(_argmax(move_ply, logp, plies) != true_best)
        cols["tv"].append(0.5 * np.bincount(move_ply, np.abs(p - q), minlength=plies))
        kl = np.where(p > 0, p * (true_logp - logp), 0.0)
        cols["kl"].append(np.bincount(move_ply, kl, minlength=plies))
    return {k: np.stack(v, axis=1) for k, v in cols.items()}


def _argmax(move_ply: np.ndarray, logp: np.ndarray, plies: int) -> np.ndarray:
    """Per ply, the index (among all moves) of its highest-scoring move."""
    order = np.lexsort((-logp, move_ply))
    first = np.searchsorted(move_ply[order], np.arange(plies))
    return order[first]


def table(
    pos: dict[str, np.ndarray],
    meta: dict[str, np.ndarray],
    protocols: list[Protocol],
    settings: list[tuple[str, Any]],
) -> list[dict[str, Any]]:
    """Rows (protocol, grouping, group, setting, positions, games, STATS): overall and per
    band of the mover's true Elo."""
    feats = matching.position_features({"game": pos["game"], "ply": pos["ply"]}, meta)
    bands = matching.elo_band(feats["elo"])
    rows = []
    for protocol in protocols:
        keep = protocol.keep(pos["game"], pos["ply"], meta)
        groups = [("overall", "all", keep)] + [
            ("band", band, keep & (bands == band))
            for band in matching._ordered(set(bands[keep]), "band")
        ]
        for grouping, group, mask in groups:
            for k, (name, both) in enumerate(settings):
                rows.append(_row(pos, mask, k, protocol.name, grouping, group, name, both))
    return rows


def _row(pos: dict[str, np.ndarray], mask: np.ndarray, k: int, protocol: str, grouping: str,
         group: str, name: str, both: tuple[int, int] | None) -> dict[str, Any]:  # fmt: skip
    n = int(mask.sum())

    def mean(values: np.ndarray) -> float | None:
        return float(np.mean(values[mask, k])) if n else None

    bin_label = "each game's own" if both is None else conditioning.bin_label(
        conditioning.rating_bin(both[0]))  # fmt: skip
    return {"protocol": protocol, "grouping": grouping, "group": group, "setting": name,
            "rating_bin": bin_label, "positions": n,
            "games": int(len(np.unique(pos["game"][mask]))),
            "top1": mean(pos["rank"] < 1), "top3": mean(pos["rank"] < 3), "nll": mean(pos["nll"]),
            "argmax_changed": mean(pos["changed"]), "tv": mean(pos["tv"]),
            "kl": mean(pos["kl"])}  # fmt: skip


def not_conditioned(net: torch.nn.Module) -> dict[str, Any]:
    """The record of a model that reads no ratings: nothing to move."""
    return {"conditioned": False, "conditioning": rating_prefix.layout(net),
            "note": "not conditioned: the model reads no ratings, so there is no counterfactual"
            " to score (table empty)"}  # fmt: skip


def state_dir(state: Path, dataset: str) -> Path:
    return state / "counterfactual" / dataset
