"""The think-time head measured on move-matching's validation positions (issue 48): at each
scored position whose time spent is known (``chesslm.data.clocks``: the clock rule; games with
clocks, each side's first move and an increment game's last move left out), the head's
distribution over the think-time bins (``chesslm.model.human_time``) against the time the
mover took, beside three baselines fitted on the train split:

* **median_time**: the train split's think times in the position's cell, (time control, ply
  bucket): the exact base+increment pair, or where it has fewer than ``MIN_CELL`` train
  targets its speed class, or else the ply bucket alone. Its distribution is the cell's
  histogram over the bins, add-one smoothed (its NLL), its point prediction the histogram's
  median;
* **clock_rule**: a fixed share of the mover's time left plus the increment, the share fitted
  on the train split (the ``SHARES`` candidate with the least MAE of log-seconds): a point
  prediction, no NLL;
* **time_table**: the mean ln(1 + seconds) of the train split's moves in the position's
  (time-control class, 10-ply bucket) cell (``chesslm.match.think_table``): a point
  prediction, no NLL.

Metrics, per position: NLL over the bins (-ln p of the bin of the time taken), MAE of
log-seconds (|ln(1 + predicted) - ln(1 + taken)|, the prediction the distribution's median,
``human_time.median_seconds``), and Pearson's r of ln(1 + predicted) against ln(1 + taken) and
Spearman's rho of predicted against taken, overall, by the mover's rating band, by time-control
class (Lichess's speed) and by ply bucket (``outcome.PLY_BUCKETS``), with 95 % percentile
bootstrap intervals over games (the outcome measure's resampling). A time-control class of at
least ``CLASS_FLOOR`` scored moves is one whose within-class r the report shows (fewer say
little: at r = 0.4 the standard error of r on 500 independent moves is already 0.04, and a
game's moves are not independent). Spearman's ranks are taken
once per group over all its positions; a replicate reuses them (an approximation of the rank
correlation of the resample that keeps the bootstrap a sum over games). NumPy only.

>>> x, y = np.array([1.0, 2, 3, 4]), np.array([2.0, 4, 5, 9])
>>> round(pearson(correlation_sums(x, y)), 4), round(float(np.corrcoef(x, y)[0, 1]), 4)
(0.9648, 0.9648)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from chesslm.data import clocks, metadata
from chesslm.data.cache import TokenCache
from chesslm.match import outcome, think_table
from chesslm.model import human_time

PREDICTORS = ("model", "median_time", "clock_rule", "time_table")
POINT_ONLY = ("clock_rule", "time_table")  # point predictions: no distribution, no NLL
CLASS_FLOOR = 500  # scored moves a time-control class needs for the report's within-class r
METRICS = ("nll", "mae_log", "pearson", "spearman")
MIN_CELL = 20  # train targets a (time control, ply bucket) cell needs to stand on its own
SHARES = tuple(1.0 / d for d in (5, 10, 15, 20, 25, 30, 40, 50, 60, 80, 100, 150, 200))
# per predictor: nll, |error|, then the correlation sums of (x, y) and of their ranks
SUMS = ("nll", "abs", "x", "y", "xx", "yy", "xy", "rx", "ry", "rxrx", "ryry", "rxry")


def correlation_sums(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """(n, x, y, xx, yy, xy) sums of two samples: what Pearson's r is computed from."""
    return np.array([len(x), x.sum(), y.sum(), (x * x).sum(), (y * y).sum(), (x * y).sum()])


def pearson(s: np.ndarray) -> float | None:
    """Pearson's r from ``correlation_sums``; None where either sample is constant."""
    n, x, y, xx, yy, xy = (float(v) for v in s)
    denominator = (n * xx - x * x) * (n * yy - y * y)
    return float((n * xy - x * y) / np.sqrt(denominator)) if denominator > 0 else None


def ranks(values: np.ndarray) -> np.ndarray:
    """Average ranks (ties share their mean rank)."""
    order = np.argsort(values, kind="stable")
    sorted_values = values[order]
    first = np.concatenate([[True], sorted_values[1:] != sorted_values[:-1]])
    group = np.cumsum(first) - 1
    starts = np.flatnonzero(first)
    ends = np.append(starts[1:], len(values))
    mean_rank = (starts + ends - 1) / 2.0
    out = np.empty(len(values))
    out[order] = mean_rank[group]
    return out


# ----------------------------------------------------------------------------- the baselines


def _cell_keys(base: np.ndarray, increment: np.ndarray, speed: np.ndarray, ply: np.ndarray):  # noqa: ANN202
    """Each position's three cell keys, finest first: (base, increment, bucket), (speed,
    bucket), (bucket)."""
    bucket = np.searchsorted([low for low, *_ in outcome.PLY_BUCKETS], ply, side="right") - 1
    fine = (base.astype(np.int64) * 100_000 + increment.astype(np.int64)) * 8 + bucket
    return fine, (speed.astype(np.int64) + 1) * 8 + bucket, bucket.astype(np.int64)


class TrainFit:
    """The baselines fitted on a split's clocks (a pass over its games, a block at a time):
    the think-time histograms of each cell, the clock rule's share and the time table."""

    def __init__(self, split_dir: Path, offsets: np.ndarray) -> None:
        meta = metadata.Metadata(split_dir, offsets)
        ply_offsets = meta.ply_offsets
        self.histograms: list[dict[int, np.ndarray]] = [{}, {}, {}]
        self.table = think_table.TimeTable()
        errors = np.zeros(len(SHARES))
        self.targets = 0
        for g in range(0, len(ply_offsets) - 1, human_time.BLOCK_GAMES):
            end = min(g + human_time.BLOCK_GAMES, len(ply_offsets) - 1)
            block = ply_offsets[g : end + 1]
            clock = np.asarray(meta["clock"][block[0] : block[-1]])
            base = np.asarray(meta["base_seconds"][g:end])
            increment = np.asarray(meta["increment_seconds"][g:end])
            took = clocks.spent_plies(clock, block, base, increment)
            known = took >= 0
            at = clocks.Plies.of(block)
            left = clocks.time_left_plies(clock, block, base, increment).mover[known]
            game, ply = at.game[known], at.index[known]
            speed = np.asarray(meta["speed"][g:end])[game]
            keys = _cell_keys(base[game], increment[game], speed, ply)
            bins = human_time.seconds_bin(took[known])
            for histograms, key in zip(self.histograms, keys, strict=True):
                _add_counts(histograms, key, bins)
            predicted = np.outer(left, SHARES) + np.maximum(increment[game], 0)[:, None]
            actual = human_time.log_seconds(took[known])[:, None]
            self.table.add(speed, ply, actual[:, 0])
            errors += np.abs(human_time.log_seconds(predicted) - actual).sum(axis=0)
            self.targets += int(known.sum())
        self.share = float(SHARES[int(np.argmin(errors))]) if self.targets else SHARES[0]

    def distributions(
        self, base: np.ndarray, increment: np.ndarray, speed: np.ndarray, ply: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(N, BINS) each position's cell histogram, add-one smoothed, and which cell level
        it came from (0 time control, 1 speed class, 2 ply bucket alone, 3 none)."""
        keys = _cell_keys(base, increment, speed, ply)
        out = np.ones((len(ply), human_time.BINS))
        level = np.full(len(ply), 3, dtype=np.int64)
        for k in range(2, -1, -1):  # the finest level with enough targets wins
            for i, key in enumerate(keys[k]):
                counts = self.histograms[k].get(int(key))
                if counts is not None and counts.sum() >= MIN_CELL:
                    out[i] = counts + 1.0
                    level[i] = k
        return out / out.sum(axis=1, keepdims=True), level


def _add_counts(histograms: dict[int, np.ndarray], keys: np.ndarray, bins: np.ndarray) -> None:
    unique, inverse = np.unique(keys, return_inverse=True)
    for u, key in enumerate(unique):
        counts = histograms.setdefault(int(key), np.zeros(human_time.BINS, dtype=np.int64))
        counts += np.bincount(bins[inverse == u], minlength=human_time.BINS)


# ----------------------------------------------------------------------------- the measure


def positions_taken(pos: dict[str, np.ndarray], meta: dict[str, np.ndarray]) -> dict[str, Any]:
    """The time each scored position's mover took, its time left and its time control (NaN
    where the clock rule gives none), from the validation metadata."""
    g, ply = pos["game"].astype(np.int64), pos["ply"].astype(np.int64)
    offsets = meta["ply_offsets"]
    games = np.unique(g)
    taken = np.full(len(g), np.nan)
    left = np.full(len(g), np.nan)
    for game in games:  # per evaluated game: its clocks once
        clock = meta["clock"][offsets[game] : offsets[game + 1]]
        base, inc = int(meta["base_seconds"][game]), int(meta["increment_seconds"][game])
        at = np.flatnonzero(g == game)
        took = clocks.spent(clock, base=base, increment=inc)
        taken[at] = took[ply[at]]
        left[at] = clocks.time_left(clock, base=base, increment=inc).mover[ply[at]]
    return {"taken": taken, "left": left}


def predictions(
    pos: dict[str, np.ndarray], meta: dict[str, np.ndarray], fit: TrainFit, left: np.ndarray
) -> dict[str, tuple[np.ndarray | None, np.ndarray]]:
    """Per predictor: (its (N, BINS) distribution or None, its point prediction in seconds)."""
    g, ply = pos["game"].astype(np.int64), pos["ply"].astype(np.int64)
    model = np.asarray(pos["p_think"], dtype=np.float64)
    model = model / model.sum(axis=1, keepdims=True)
    base, inc = meta["base_seconds"][g], meta["increment_seconds"][g]
    cells, _ = fit.distributions(base, inc, meta["speed"][g], ply)
    rule = fit.share * left + np.maximum(inc, 0)
    table = np.expm1(fit.table.predict(meta["speed"][g], ply))  # seconds: ln(1 + s) its mean
    return {
        "model": (model, human_time.median_seconds(model)),
        "median_time": (cells, human_time.median_seconds(cells)),
        "clock_rule": (None, rule),
        "time_table": (None, table),
    }


def _sums(
    preds: dict[str, tuple[np.ndarray | None, np.ndarray]], taken: np.ndarray, m: np.ndarray
) -> np.ndarray:
    """(positions of ``m``, predictors x SUMS) per-position terms of one column (ranks within
    the column)."""
    y = human_time.log_seconds(taken[m])
    ry = ranks(taken[m])
    bins = human_time.seconds_bin(taken[m])
    parts = []
    for p in PREDICTORS:
        dist, point = preds[p]
        x = human_time.log_seconds(point[m])
        rx = ranks(point[m])
        nll = -np.log(dist[m][np.arange(m.sum()), bins]) if dist is not None else np.zeros(len(y))
        parts += [nll, np.abs(x - y), x, y, x * x, y * y, x * y, rx, ry, rx * rx, ry * ry, rx * ry]
    return np.stack(parts, axis=1)


def _stats(total: np.ndarray, n: float) -> dict[str, dict[str, float | None]]:
    """Each predictor's METRICS from a column's summed terms (``_sums``' order)."""
    out = {}
    for k, p in enumerate(PREDICTORS):
        s = dict(zip(SUMS, total[k * len(SUMS) : (k + 1) * len(SUMS)], strict=True))
        plain = np.array([n, s["x"], s["y"], s["xx"], s["yy"], s["xy"]])
        ranked = np.array([n, s["rx"], s["ry"], s["rxrx"], s["ryry"], s["rxry"]])
        out[p] = {
            "nll": float(s["nll"] / n) if n and p not in POINT_ONLY else None,
            "mae_log": float(s["abs"] / n) if n else None,
            "pearson": pearson(plain) if n else None,
            "spearman": pearson(ranked) if n else None,
        }
    return out


def tables(
    pos: dict[str, np.ndarray],
    taken: np.ndarray,
    preds: dict[str, tuple[np.ndarray | None, np.ndarray]],
    columns: list[tuple[str, str, str, np.ndarray]],
    *,
    replicates: int,
    seed: int,
    min_games: int,
) -> list[dict[str, Any]]:
    """Rows (protocol, grouping, group, positions, games, few_games, scores: per predictor
    METRICS and their 95 % intervals over games, none for a group of fewer than
    ``min_games``) of each column (protocol, grouping, group, mask of positions); positions
    without a known time count nowhere."""
    known = ~np.isnan(taken)
    _, game_of = np.unique(pos["game"], return_inverse=True)
    G = int(game_of.max()) + 1 if len(game_of) else 0
    width = len(PREDICTORS) * len(SUMS)
    sums = np.zeros((G, len(columns), 1 + width))
    for c, (*_, mask) in enumerate(columns):
        m = mask & known
        if not m.any():
            continue
        sums[:, c, 0] = np.bincount(game_of[m], minlength=G)
        terms = _sums(preds, taken, m)
        for j in range(width):
            sums[:, c, 1 + j] = np.bincount(game_of[m], weights=terms[:, j], minlength=G)
    boot = outcome.resample_sums(sums, replicates, seed) if G else np.zeros((0, *sums.shape[1:]))
    rows = []
    for c, (protocol, grouping, group, _) in enumerate(columns):
        games = int((sums[:, c, 0] > 0).sum())
        if not games:
            continue
        few = games < min_games
        total = sums[:, c].sum(axis=0)
        scores = _stats(total[1:], total[0])
        replicated = [_stats(b[c, 1:], b[c, 0]) for b in boot] if not few else []
        for p, values in scores.items():
            for metric in METRICS:
                drawn = [r[p][metric] for r in replicated if r[p][metric] is not None]
                low, high = np.percentile(drawn, [2.5, 97.5]) if drawn else (None, None)
                values[f"{metric}_low"] = None if low is None else float(low)
                values[f"{metric}_high"] = None if high is None else float(high)
        rows.append({"protocol": protocol, "grouping": grouping, "group": group,
                     "positions": int(total[0]), "games": games, "few_games": few,
                     "scores": scores})  # fmt: skip
    return rows


def section(
    pos: dict[str, np.ndarray],
    meta: dict[str, np.ndarray],
    keeps: dict[str, np.ndarray],
    band: tuple[np.ndarray, list[str]],
    speed: np.ndarray,
    cache_dir: Path,
    **boot: Any,
) -> dict[str, Any]:
    """A dataset's think-time entry: the baselines' fit on the train split, and the table per
    protocol (``keeps``' masks): overall, by ``band`` (the mover's band of each position, the
    bands in order), by ``speed`` class and by ply bucket. ``boot``: replicates, seed,
    min_games."""
    cache = TokenCache(cache_dir, verify=True)
    fit = TrainFit(Path(cache_dir) / "train", np.asarray(cache.train.offsets))
    times = positions_taken(pos, meta)
    taken = times["taken"]
    preds = predictions(pos, meta, fit, times["left"])
    labels, bands = band
    buckets = outcome.ply_bucket(pos["ply"])
    columns = []
    for name, keep in keeps.items():
        columns.append((name, "overall", "all", keep))
        columns += [(name, "band", b, keep & (labels == b)) for b in bands if (labels == b).any()]
        columns += [(name, "speed", s, keep & (speed == s)) for s in (*metadata.SPEEDS, "unknown")
                    if (speed == s).any()]  # fmt: skip
        columns += [(name, "ply", b, keep & (buckets == b)) for *_, b in outcome.PLY_BUCKETS
                    if (buckets == b).any()]  # fmt: skip
    known = ~np.isnan(taken)
    return {
        "positions": int(known.sum()),
        "games": int(len(np.unique(pos["game"][known]))),
        "positions_scored": int(len(taken)),
        "baseline_source": "train",
        "train_targets": fit.targets,
        "clock_rule_share": fit.share,
        "class_floor": CLASS_FLOOR,
        "table": tables(pos, taken, preds, columns, **boot),
    }


DEFINITION = (
    "the think-time head's distribution over its 39 log-spaced bins at each move-matching"
    " position whose time spent is known (the clock rule of chesslm/data/clocks.py: the"
    " mover's reading after its previous move less the one after this move plus the"
    " increment; not for either side's first move, nor an increment game's last move), against"
    " the time taken. NLL = -ln p(bin of the time taken); MAE = mean |ln(1 + predicted) -"
    " ln(1 + taken)|, the prediction a distribution's median; Pearson's r of ln(1 + predicted)"
    " and ln(1 + taken); Spearman's rho of predicted and taken (ranks taken once per group)."
    " Baselines fitted on the train split: median_time = the think times of the position's"
    " (time control, ply bucket) cell (its histogram, add-one smoothed, for the NLL; its"
    " median), falling back to (speed class, ply bucket), then the ply bucket, for cells of"
    f" fewer than {MIN_CELL} train targets; clock_rule = clock_rule_share x the mover's time"
    " left + the increment (the share with the least train MAE); time_table = the mean"
    " ln(1 + seconds) of the train moves in the position's (time-control class, 10-ply bucket)"
    " cell, falling back to the 10-ply bucket, then to every move, for cells of fewer than"
    f" {think_table.MIN_CELL}. Groups: overall, the"
    " mover's rating band, the speed class, ply buckets 0-19, 20-39, 40-79, 80+"
)
