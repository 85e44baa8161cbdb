"""Counterfactual ratings: how far a rating-conditioned model's predictions move with the
ratings it is given.

The move-matching positions (the same games, ``match.games``, and the same protocols) are
scored once at each game's true ratings (its ``white_elo``/``black_elo``) and once per
counterfactual setting with both players at one rating (``counterfactual.ratings``). Per
setting: top-1, top-3 and NLL per move of the played move, and against the true-rating
distribution over the legal moves of each position: the share of positions whose argmax move
changes, the mean total variation distance and the mean KL(true || setting) in nats.

A model with the outcome head also gets, per setting, the head's mean win/draw/loss from the
side to move, and the rating-gap sweep (``gaps``) at the same positions.

Each chunk of games is scored under every setting (and gap) batch by batch (the settings of
one batch in a row, so only one batch's move distributions are in memory) and its per-position
results written at once (``state/``): a run stopped by its time budget resumes at the next chunk.
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
from chesslm.match import gaps, matching, metrics, outcome
from chesslm.match.protocols import Protocol
from chesslm.model.outcome import DRAW, LOSS, WIN
from chesslm.progress import Progress
from chesslm.scorer import branched, scoring
from chesslm.scorer import ratings as rating_prefix

TRUE = "true"  # the setting of each game's own ratings
FIELDS = ("rank", "nll", "changed", "tv", "kl")
STATS = (*metrics.NAMES, "argmax_changed", "tv", "kl")
DEFINITION = (
    "each position scored at the game's true ratings and with both players at each"
    " counterfactual rating; argmax_changed: share of positions whose best legal move differs"
    " from the true-rating one; tv: mean total variation distance between the two"
    " distributions over the legal moves; kl: mean KL(true || setting), nats"
)
OUTCOME_DEFINITION = (
    "with the outcome head, per setting: p_win, p_draw, p_loss = the head's mean win/draw/loss"
    " from the side to move; expected_score = the mean of the mover's W + D/2; elo_expectation"
    " = the mean of the mover's Elo expectation at the setting's ratings (0.5 where a rating"
    " is unknown, so at every setting of equal ratings)"
)


def settings_of(elos: list[int]) -> list[tuple[str, tuple[int, int] | None]]:
    """(name, both players' ratings) of each setting, the true ratings first."""
    return [(TRUE, None)] + [(str(r), (r, r)) for r in elos]


class Counterfactual:
    """One dataset's counterfactual scoring, chunk by chunk, resumable."""

    def __init__(
        self,
        evaluator: matching.Evaluator,
        elos: list[int],
        *,
        gap_centre: int,
        gap_list: list[int],
    ) -> None:
        """``evaluator``: move-matching's of the dataset (its games, chunks, true prefixes),
        with its own state directory for this part's chunks; ``elos``, ``gap_centre`` and
        ``gap_list``: the run's ``play.counterfactual`` ratings, gap_centre and gaps."""
        self.ev = evaluator
        self.settings = settings_of(elos)
        n = len(evaluator.games)
        self.prefixes = [evaluator.prefixes] + [
            np.tile(conditioning.prefix(*both), (n, 1)) for _, both in self.settings[1:]
        ]
        self.head = bool(evaluator.net.config.outcome)
        self.centre = gap_centre
        self.gaps = list(gap_list) if self.head else []  # the sweep reads the head
        self.gap_leads = gaps.leads(self.centre, self.gaps)
        self.fields = ("game", "ply", *FIELDS, *(("wdl",) if self.head else ()),
                       *(("gap_wdl",) if self.gaps else ()))  # fmt: skip

    def run(self, deadline: float, progress: Progress | None = None) -> bool:
        """Score the chunks not yet on disk until ``deadline``, checked at a window's start
        (``matching.Evaluator.ends_window``); True when all are done."""
        ev = self.ev
        done = 0
        for i, chunk in enumerate(ev.chunks):
            if ev.chunk_path(i).exists():
                done += int(ev.plies[chunk].sum())
                continue
            if time.monotonic() >= deadline and (i == 0 or ev.ends_window(i - 1)):
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
        groups = branched.plan_batches(branched.branched_lengths(plain).tolist(),
                                      self.ev.batch_tokens)  # fmt: skip
        out: dict[str, list[np.ndarray]] = {k: [] for k in self.fields}
        for group in groups:
            per_setting, wdl = [], []
            for lead in self.prefixes:
                inputs = [dataclasses.replace(plain[i], prefix=lead[ids[i]]) for i in group]
                batch = branched.build_batch(inputs, self.ev.device)
                s = scoring.score(self.ev.net, batch, attention=self.ev.attention)
                per_setting.append((s.move_logp.cpu().numpy().astype(np.float64),
                                    s.rank.cpu().numpy(), s.played_logp.cpu().numpy()))  # fmt: skip
                wdl += [] if s.wdl is None else [s.wdl.cpu().numpy()]
            out["game"].append(ids[np.asarray(group)][batch.ply_game])
            out["ply"].append(batch.ply_number.astype(np.int16))
            for name, value in compare(batch.move_ply, len(batch.ply_game), per_setting).items():
                out[name].append(value)
            if self.head:
                out["wdl"].append(np.stack(wdl, axis=1))
            if self.gaps:  # the scorer's ply order, so rows line up with the fields above
                out["gap_wdl"].append(gaps.sweep(self.ev.net, [plain[i] for i in group],
                                                 self.gap_leads, self.ev.device))  # fmt: skip
        return {k: np.concatenate(v) for k, v in out.items()}

    def positions(self) -> dict[str, np.ndarray]:
        """Every position scored so far (all chunks on disk)."""
        parts = [
            np.load(p, allow_pickle=False) for p in sorted(self.ev.state_dir.glob("chunk-*.npz"))
        ]
        if not parts:
            S, G = len(self.settings), len(self.gaps)
            shapes = {"game": (0,), "ply": (0,), "wdl": (0, S, 3), "gap_wdl": (0, G, 3)}
            return {k: np.zeros(shapes.get(k, (0, S)), np.int64 if k in ("game", "ply")
                                else np.float64) for k in self.fields}  # fmt: skip
        return {k: np.concatenate([p[k] for p in parts]) for k in self.fields}

    def tables(
        self, pos: dict[str, np.ndarray], meta: dict[str, np.ndarray], protocols: list[Protocol],
        *, replicates: int, seed: int,
    ) -> dict[str, list[dict[str, Any]]]:  # fmt: skip
        """``table``'s rows and, with a gap sweep, ``gaps.table``'s (``gap_table``: bootstrap
        intervals as move-matching's, ``replicates`` and ``seed`` as its)."""
        rows = {"table": table(pos, meta, protocols, self.settings)}
        if self.gaps:
            rows["gap_table"] = gaps.table(
                pos, meta, protocols, self.centre, self.gaps, replicates=replicates,
                seed=seed, min_games=matching.MIN_INTERVAL_GAMES)  # fmt: skip
        return rows


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
    """Rows (protocol, grouping, group, setting, positions, games, STATS and, with the outcome
    head, OUTCOME_STATS): overall and per band of the mover's true Elo."""
    feats = matching.position_features({"game": pos["game"], "ply": pos["ply"]}, meta)
    bands = matching.elo_band(feats["elo"])
    columns = _columns(pos, meta, settings)
    rows = []
    for protocol in protocols:
        keep = protocol.keep(pos["game"], pos["ply"], meta)
        groups = [("overall", "all", keep)] + [
            ("band", band, keep & (bands == band))
            for band in matching._ordered(set(bands[keep]), "band")
        ]
        for grouping, group, mask in groups:
            for k, (name, both) in enumerate(settings):
                bin_label = "each game's own" if both is None else conditioning.bin_label(
                    conditioning.rating_bin(both[0]))  # fmt: skip
                n = int(mask.sum())
                rows.append({
                    "protocol": protocol.name, "grouping": grouping, "group": group,
                    "setting": name, "rating_bin": bin_label, "positions": n,
                    "games": int(len(np.unique(pos["game"][mask]))),
                    **{c: float(np.mean(v[mask, k])) if n else None for c, v in columns.items()},
                })  # fmt: skip
    return rows


OUTCOME_STATS = ("p_win", "p_draw", "p_loss", "expected_score", "elo_expectation")


def _columns(
    pos: dict[str, np.ndarray], meta: dict[str, np.ndarray], settings: list[tuple[str, Any]]
) -> dict[str, np.ndarray]:
    """(positions, settings) values each row averages: STATS, and OUTCOME_STATS where the
    positions hold the head's ``wdl``."""
    columns = {**metrics.values(pos["rank"], pos["nll"]),
               "argmax_changed": pos["changed"], "tv": pos["tv"], "kl": pos["kl"]}  # fmt: skip
    if "wdl" not in pos:
        return columns
    wdl = pos["wdl"].astype(np.float64)
    g, white = pos["game"].astype(np.int64), pos["ply"] % 2 == 0
    expect = []
    for _, both in settings:
        w, b = (meta["white_elo"][g], meta["black_elo"][g]) if both is None else both
        w, b = np.broadcast_to(w, g.shape), np.broadcast_to(b, g.shape)
        expect.append(outcome.elo_expectation(np.where(white, w, b), np.where(white, b, w)))
    return {**columns, "p_win": wdl[..., WIN], "p_draw": wdl[..., DRAW], "p_loss": wdl[..., LOSS],
            "expected_score": wdl[..., WIN] + 0.5 * wdl[..., DRAW],
            "elo_expectation": np.stack(expect, axis=1).reshape(len(g), len(settings))}  # fmt: skip


def not_conditioned(net: torch.nn.Module) -> dict[str, Any]:
    """The record of a model that reads no ratings: nothing to move."""
    return {"conditioned": False, "conditioning": rating_prefix.layout(net),
            "note": "not conditioned: the model reads no ratings, so there is no counterfactual"
            " to score (table empty)"}  # fmt: skip


def settings_record(elos: list[int]) -> dict[str, dict[str, int] | None]:
    """Each setting's ratings as the record writes them (None: each game's own)."""
    return {n: None if b is None else {"white": b[0], "black": b[1]} for n, b in settings_of(elos)}


def head_record(net: torch.nn.Module, gap_centre: int, gap_list: list[int],
                gap_rows: list[dict[str, Any]]) -> dict[str, Any]:  # fmt: skip
    """What the record adds for a model with the outcome head (none without): the definition
    of the settings' outcome columns and, with ``counterfactual.gaps``, the gap sweep's rows."""
    if not net.config.outcome:
        return {}
    sweep = {"centre": gap_centre, "gaps": list(gap_list), "perspective": "white",
             "definition": gaps.DEFINITION, "min_interval_games": matching.MIN_INTERVAL_GAMES,
             "rows": gap_rows}  # fmt: skip
    return {"outcome_definition": OUTCOME_DEFINITION, **({"gap_sweep": sweep} if gap_list else {})}


def gap_csv_rows(gap_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The gap sweep's rows as the csv's (grouping ``gap``, setting ``gap +N``), after the
    settings' rows."""
    own = ("dataset", "protocol", "rating_bins")
    return [{"dataset": r["dataset"], "protocol": r["protocol"], "grouping": "gap", "group": "all",
             "setting": f"gap {r['gap']:+d}", "rating_bin": r["rating_bins"],
             **{k: v for k, v in r.items() if k not in own}} for r in gap_rows]  # fmt: skip


def state_dir(state: Path, dataset: str) -> Path:
    return state / "counterfactual" / dataset
