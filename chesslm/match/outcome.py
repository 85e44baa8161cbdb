"""The outcome head measured on move-matching's validation positions (issue 35): at each
scored position (the input after which the move is predicted: BOS or the previous move's last
token, the outcome targets' token; the position after a game's last move is not scored), the
head's win/draw/loss from the side to move against the game's result, beside two baselines.

* **frequency**: each class's share by side to move (White at even plies), add-one smoothed,
  of the train split's outcome targets (``chesslm.model.outcome.side_counts``, what
  validation's ``baseline_nll`` uses) or, where the cache has no train results, of these
  positions themselves (the record says which);
* **elo**: the expected score of the mover, E = 1 / (1 + 10^((R_opponent - R_mover) / 400))
  (0.5 where either rating is unknown), with P(draw) = d, the dataset's draw rate (share of
  drawn games among those with a known result), P(win) = E - d/2, P(loss) = 1 - E - d/2,
  clipped at ``FLOOR`` and renormalised. It reads only the ratings: a model that reads
  nothing more should not beat it.

Metrics, per position of a game with a known result: NLL (-ln p of the observed class), the
multi-class Brier score (sum over classes of (p - observed)^2, 0 to 2) and the argmax's
accuracy; overall, by the mover's rating band and by ply bucket (``PLY_BUCKETS``), with 95 %
percentile bootstrap intervals over games. The calibration table bins the predicted win
probability in ten bins of 0.1 and sets each bin's mean prediction against the observed win
frequency (its bootstrap interval over games). The record also keeps White's win/draw/loss at
every scored ply of ``GAMES`` real games (``game_curves``), for the report's figure. NumPy only.

>>> y = np.array([WIN, DRAW, LOSS])
>>> p = np.array([[0.5, 0.25, 0.25], [0.5, 0.25, 0.25], [0.2, 0.2, 0.6]])
>>> np.round(nll(p, y), 4).tolist()
[0.6931, 1.3863, 0.5108]
>>> np.round(brier(p, y), 4).tolist()
[0.375, 0.875, 0.24]
>>> hits(p, y).tolist()
[1.0, 0.0, 1.0]
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from chesslm.data import metadata
from chesslm.data.cache import TokenCache
from chesslm.data.metadata import RESULTS
from chesslm.model.outcome import (
    DRAW,
    DRAWN,
    LOSS,
    WIN,
    shares_record,
    side_counts,
    side_shares,
    targets,
)
from chesslm.model.presets import OUTCOME_CLASSES

PREDICTORS = ("model", "frequency", "elo")
METRICS = ("nll", "brier", "accuracy")
PLY_BUCKETS = ((0, 20, "plies 0-19"), (20, 40, "plies 20-39"), (40, 80, "plies 40-79"),
               (80, None, "plies 80+"))  # fmt: skip
CALIBRATED = ("model", "elo")  # the predictors of the calibration table
BINS = 10
FLOOR = 1e-6  # the Elo baseline's least probability of a class
GAMES = 4  # games whose curves the record keeps: a few, so the record stays small


def nll(p: np.ndarray, y: np.ndarray) -> np.ndarray:
    """-ln of each row's probability of its class ``y``."""
    return -np.log(p[np.arange(len(y)), y])


def brier(p: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Each row's multi-class Brier score: sum over classes of (p - one-hot of y)^2."""
    onehot = np.eye(p.shape[1])[y]
    return ((p - onehot) ** 2).sum(axis=1)


def hits(p: np.ndarray, y: np.ndarray) -> np.ndarray:
    """1.0 where a row's most probable class is ``y``."""
    return (p.argmax(axis=1) == y).astype(np.float64)


def position_counts(ply: np.ndarray, y: np.ndarray) -> np.ndarray:
    """(2, 3) positions by side to move and observed class (y >= 0 only)."""
    counts = np.zeros((2, len(OUTCOME_CLASSES)), dtype=np.int64)
    known = y >= 0
    np.add.at(counts, (np.asarray(ply, np.int64)[known] % 2, y[known]), 1)
    return counts


def elo_expectation(mover: np.ndarray, opponent: np.ndarray) -> np.ndarray:
    """The mover's expected score on the 400-point logistic scale; 0.5 where either rating is
    unknown (negative).

    >>> elo_expectation(np.array([1500, 1900, -1]), np.array([1500, 1500, 1500])).round(4)
    array([0.5   , 0.9091, 0.5   ])
    """
    mover, opponent = np.asarray(mover, np.float64), np.asarray(opponent, np.float64)
    e = 1.0 / (1.0 + 10.0 ** ((opponent - mover) / 400.0))
    return np.where((mover >= 0) & (opponent >= 0), e, 0.5)


def elo_probabilities(mover: np.ndarray, opponent: np.ndarray, draw_rate: float) -> np.ndarray:
    """(N, 3) win/draw/loss: E - d/2, d, 1 - E - d/2, clipped at FLOOR and renormalised.

    >>> elo_probabilities(np.array([1500, 2300]), np.array([1500, 1500]), 0.2).round(4)
    array([[0.4   , 0.2   , 0.4   ],
           [0.8165, 0.1835, 0.    ]])
    """
    e = elo_expectation(mover, opponent)
    p = np.zeros((len(e), len(OUTCOME_CLASSES)))
    p[:, WIN], p[:, DRAW], p[:, LOSS] = e - draw_rate / 2, draw_rate, 1 - e - draw_rate / 2
    p = np.clip(p, FLOOR, None)
    return p / p.sum(axis=1, keepdims=True)


def ply_bucket(ply: np.ndarray) -> np.ndarray:
    """Each position's PLY_BUCKETS label."""
    ply = np.asarray(ply, np.int64)
    labels = np.empty(len(ply), dtype=object)
    for low, high, name in PLY_BUCKETS:
        labels[(ply >= low) & (ply < (high if high is not None else np.iinfo(np.int64).max))] = name
    return labels


def game_sums(game: np.ndarray, values: np.ndarray, masks: Sequence[np.ndarray]) -> np.ndarray:
    """(games, columns, 1 + stats): per game and column (a mask of positions) the positions
    and the sums of each stat (``values``: positions x stats)."""
    _, game_of = np.unique(game, return_inverse=True)
    G = int(game_of.max()) + 1 if len(game_of) else 0
    sums = np.zeros((G, len(masks), 1 + values.shape[1]))
    for c, m in enumerate(masks):
        sums[:, c, 0] = np.bincount(game_of[m], minlength=G)
        for j in range(values.shape[1]):
            sums[:, c, 1 + j] = np.bincount(game_of[m], weights=values[m, j], minlength=G)
    return sums


def resample_sums(sums: np.ndarray, replicates: int, seed: int) -> np.ndarray:
    """The column sums (games x ...) of ``replicates`` resamples of the games (with
    replacement): move-matching's and the outcome's bootstrap."""
    G = len(sums)
    rng = np.random.default_rng(seed)
    boot = np.zeros((replicates, *sums.shape[1:]))
    for r in range(replicates):
        draws = np.bincount(rng.integers(0, G, G), minlength=G).astype(np.float64)
        boot[r] = np.tensordot(draws, sums, axes=1)
    return boot


def bootstrap_intervals(sums: np.ndarray, replicates: int, seed: int) -> np.ndarray:
    """(columns, stats, 2) 2.5 and 97.5 percentiles of each stat's mean (sum / positions)
    over ``replicates`` resamples of the games (nan where no replicate drew a position).

    >>> one = np.array([[[2.0, 1.0]], [[2.0, 1.0]]])  # two games, each mean 0.5
    >>> bootstrap_intervals(one, 50, 0).tolist()
    [[[0.5, 0.5]]]
    """
    boot = resample_sums(sums, replicates, seed)
    out = np.full((sums.shape[1], sums.shape[2] - 1, 2), np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = boot[:, :, 1:] / boot[:, :, :1]
    for c in range(out.shape[0]):
        for j in range(out.shape[1]):
            finite = means[:, c, j][np.isfinite(means[:, c, j])]
            if len(finite):
                out[c, j] = np.percentile(finite, [2.5, 97.5])
    return out


def value_or_none(x: float) -> float | None:
    return None if not np.isfinite(x) else float(x)


def predictions(
    pos: dict[str, np.ndarray], meta: dict[str, np.ndarray], shares: np.ndarray, draw_rate: float
) -> dict[str, np.ndarray]:
    """(N, 3) win/draw/loss of each predictor at the positions ``pos`` (move-matching's
    chunks: ``game``, ``ply``, ``p_win``, ``p_draw``, ``p_loss``); ``shares``: the frequency
    baseline's (side, class) shares; ``meta``: the validation metadata columns."""
    g, ply = pos["game"].astype(np.int64), pos["ply"].astype(np.int64)
    white = ply % 2 == 0
    w, b = meta["white_elo"][g].astype(np.int64), meta["black_elo"][g].astype(np.int64)
    model = np.stack([pos[f"p_{c}"] for c in OUTCOME_CLASSES], axis=1).astype(np.float64)
    return {
        "model": model / model.sum(axis=1, keepdims=True),
        "frequency": shares[ply % 2],
        "elo": elo_probabilities(np.where(white, w, b), np.where(white, b, w), draw_rate),
    }


def _metric_values(preds: dict[str, np.ndarray], y: np.ndarray) -> np.ndarray:
    """positions x (predictor, metric) values, in PREDICTORS x METRICS order."""
    functions = {"nll": nll, "brier": brier, "accuracy": hits}
    return np.stack([functions[m](preds[p], y) for p in PREDICTORS for m in METRICS], axis=1)


def _row(head: dict[str, Any], total: np.ndarray, ci: np.ndarray, few: bool) -> dict[str, Any]:
    """One column's row: its identity ``head``, sums ``total`` (positions first), intervals."""
    n = total[0]
    scores: dict[str, dict[str, float | None]] = {}
    for k, (p, m) in enumerate((p, m) for p in PREDICTORS for m in METRICS):
        s = scores.setdefault(p, {})
        s[m] = float(total[1 + k] / n) if n else None
        s[f"{m}_low"] = None if few else value_or_none(ci[k, 0])
        s[f"{m}_high"] = None if few else value_or_none(ci[k, 1])
    return {**head, "scores": scores}


def tables(
    pos: dict[str, np.ndarray],
    y: np.ndarray,
    preds: dict[str, np.ndarray],
    columns: list[tuple[str, str, str, np.ndarray]],
    *,
    replicates: int,
    seed: int,
    min_games: int,
) -> list[dict[str, Any]]:
    """Rows (protocol, grouping, group, positions, games, few_games, scores: per predictor
    NLL, Brier, accuracy and their 95 % intervals over games, none for a group of fewer than
    ``min_games``) of each column (protocol, grouping, group, mask of positions); positions
    of games with an unknown result (y < 0) count nowhere."""
    known = y >= 0
    masks = [m & known for *_, m in columns]
    if not masks:
        return []
    values = _metric_values(preds, np.where(known, y, 0))
    sums = game_sums(pos["game"], values, masks)
    ci = bootstrap_intervals(sums, replicates, seed)
    rows = []
    for c, (protocol, grouping, group, _) in enumerate(columns):
        games = int((sums[:, c, 0] > 0).sum())
        head = {"protocol": protocol, "grouping": grouping, "group": group,
                "positions": int(sums[:, c, 0].sum()), "games": games,
                "few_games": games < min_games}  # fmt: skip
        rows.append(_row(head, sums[:, c].sum(axis=0), ci[c], games < min_games))
    return rows


def calibration(
    pos: dict[str, np.ndarray],
    y: np.ndarray,
    preds: dict[str, np.ndarray],
    protocols: dict[str, np.ndarray],
    *,
    replicates: int,
    seed: int,
) -> list[dict[str, Any]]:
    """Per protocol (name -> mask) and CALIBRATED predictor, the BINS bins of predicted win
    probability ([0, 0.1), ..., [0.9, 1]): positions, games, mean predicted and observed win
    frequency, with its 95 % interval over games; empty bins are left out.

    >>> pos = {"game": np.array([0, 0, 1, 1])}
    >>> p = np.array([[0.05, 0.5, 0.45], [0.15, 0.5, 0.35], [0.12, 0.5, 0.38], [0.95, 0, 0.05]])
    >>> rows = calibration(pos, np.array([LOSS, WIN, LOSS, WIN]), {"model": p, "elo": p},
    ...                    {"all": np.ones(4, bool)}, replicates=20, seed=0)
    >>> [(r["bin"], r["positions"], round(r["predicted"], 3), r["observed"]) for r in rows[:3]]
    [('0.0-0.1', 1, 0.05, 0.0), ('0.1-0.2', 2, 0.135, 0.5), ('0.9-1.0', 1, 0.95, 1.0)]
    """
    known = y >= 0
    rows = []
    for protocol, keep in protocols.items():
        for predictor in CALIBRATED:
            p_win = preds[predictor][:, WIN]
            which = np.minimum((p_win * BINS).astype(np.int64), BINS - 1)
            masks = [keep & known & (which == b) for b in range(BINS)]
            values = np.stack([p_win, (y == WIN).astype(np.float64)], axis=1)
            sums = game_sums(pos["game"], values, masks)
            ci = bootstrap_intervals(sums, replicates, seed)
            for b in range(BINS):
                total = sums[:, b].sum(axis=0)
                if total[0] == 0:
                    continue
                rows.append({"protocol": protocol, "predictor": predictor,
                             "bin": f"{b / BINS:.1f}-{(b + 1) / BINS:.1f}",
                             "positions": int(total[0]), "games": int((sums[:, b, 0] > 0).sum()),
                             "predicted": float(total[1] / total[0]),
                             "observed": float(total[2] / total[0]),
                             "observed_low": value_or_none(ci[b, 1, 0]),
                             "observed_high": value_or_none(ci[b, 1, 1])})  # fmt: skip
    return rows


def train_split(cache_dir: Path) -> tuple[np.ndarray, np.ndarray] | None:
    """The train split's games' token lengths and results; None without a result column."""
    lengths = np.diff(np.asarray(TokenCache(cache_dir, verify=True).train.offsets, dtype=np.int64))
    try:
        results = np.load(metadata.column_path(Path(cache_dir) / "train", "result"), mmap_mode="r")
    except (OSError, ValueError):
        return None
    return (lengths, np.asarray(results)) if results.shape == lengths.shape else None


def baseline(
    train: tuple[np.ndarray, np.ndarray] | None, pos_ply: np.ndarray, y: np.ndarray,
    val_results: np.ndarray,
) -> dict[str, Any]:  # fmt: skip
    """The frequency shares (side, class) and the draw rate: of the train split (``train``:
    its games' token lengths and results) where given, else of the validation positions
    ``pos_ply``/``y`` and games ``val_results``; ``source`` says which."""
    if train is not None and (np.asarray(train[1]) >= 0).any():
        lengths, results = (np.asarray(a) for a in train)
        counts, source = side_counts(lengths, results), "train"
    else:
        counts, source, results = position_counts(pos_ply, y), "validation", val_results
    known = np.asarray(results) >= 0
    draw_rate = float((np.asarray(results)[known] == DRAWN).mean()) if known.any() else 0.0
    return {"source": source, "shares": side_shares(counts), "draw_rate": draw_rate}


def section(
    pos: dict[str, np.ndarray],
    meta: dict[str, np.ndarray],
    keeps: dict[str, np.ndarray],
    band: tuple[np.ndarray, Sequence[str]],
    train: tuple[np.ndarray, np.ndarray] | None,
    **boot: Any,
) -> dict[str, Any]:
    """A dataset's outcome entry: the baselines' fit, the table (``tables``: per protocol,
    ``keeps``' masks, overall, by ``band`` (the mover's band of each position, the bands in
    order) and by ply bucket) and the calibration. ``boot``: replicates, seed, min_games."""
    g = pos["game"].astype(np.int64)
    y = targets(meta["result"][g], pos["ply"])
    evaluated = np.unique(g)
    fit = baseline(train, pos["ply"], y, meta["result"][evaluated])
    preds = predictions(pos, meta, fit["shares"], fit["draw_rate"])
    labels, bands = band
    buckets = ply_bucket(pos["ply"])
    columns = []
    for name, keep in keeps.items():
        columns.append((name, "overall", "all", keep))
        columns += [(name, "band", b, keep & (labels == b)) for b in bands if (labels == b).any()]
        columns += [(name, "ply", b, keep & (buckets == b)) for *_, b in PLY_BUCKETS
                    if (buckets == b).any()]  # fmt: skip
    table = tables(pos, y, preds, columns, **boot)
    cal = calibration(pos, y, preds, keeps, replicates=boot["replicates"], seed=boot["seed"])
    return {
        "positions": int(len(y)),
        "unknown_result_positions": int((y < 0).sum()),
        "baseline_source": fit["source"],
        "frequency_shares": shares_record(fit["shares"]),
        "draw_rate": fit["draw_rate"],
        "table": table,
        "calibration": cal,
        "games": game_curves(pos, meta),
    }


def game_curves(pos: dict[str, np.ndarray], meta: dict[str, np.ndarray],
                count: int = GAMES) -> list[dict[str, Any]]:  # fmt: skip
    """White's win/draw/loss at each scored ply (the head's, from the side to move, turned to
    White's at Black's plies) of ``count`` games with a known result, evenly spaced among
    those evaluated (by validation index, so a rerun picks the same ones).

    >>> pos = {"game": np.array([3, 3, 5]), "ply": np.array([1, 0, 0]),
    ...        "p_win": np.array([0.2, 0.5, 0.6]), "p_draw": np.array([0.3, 0.3, 0.3]),
    ...        "p_loss": np.array([0.5, 0.2, 0.1])}
    >>> meta = {"result": np.array([-1, -1, -1, 0, -1, -1], dtype=np.int8)}
    >>> [(c["game"], c["result"], c["ply"], c["white_win"]) for c in game_curves(pos, meta)]
    [(3, '1-0', [0, 1], [0.5, 0.5])]
    """
    g, ply = pos["game"].astype(np.int64), pos["ply"].astype(np.int64)
    known = np.unique(g[meta["result"][g] >= 0])
    picks = np.unique(np.linspace(0, len(known) - 1, min(count, len(known))).round())
    curves = []
    for game in known[picks.astype(np.int64)]:
        at = np.flatnonzero(g == game)
        at = at[np.argsort(ply[at], kind="stable")]
        p = np.stack([pos[f"p_{c}"][at] for c in OUTCOME_CLASSES], axis=1).astype(np.float64)
        p /= p.sum(axis=1, keepdims=True)
        black = ply[at] % 2 == 1
        p[black] = p[black][:, [LOSS, DRAW, WIN]]  # the mover's loss is White's win
        curves.append({"game": int(game), "result": RESULTS[int(meta["result"][game])],
                       "ply": ply[at].tolist(),
                       **{f"white_{c}": np.round(p[:, i], 4).tolist()
                          for i, c in enumerate(OUTCOME_CLASSES)}})  # fmt: skip
    return curves


DEFINITION = (
    "the outcome head's win/draw/loss from the side to move at each move-matching position"
    " (the input after which the move is predicted), against the game's result; games with"
    " an unknown result left out. NLL = -ln p(observed class); Brier = sum over classes of"
    " (p - observed)^2; accuracy = the argmax is the observed class. Baselines: frequency ="
    " class shares by side to move, add-one smoothed (of baseline_source's split); elo ="
    " E = 1/(1+10^((R_opponent-R_mover)/400)) (0.5 where a rating is unknown), P(draw) = the"
    " draw rate, P(win) = E - d/2, P(loss) = 1 - E - d/2, clipped at 1e-6 and renormalised."
    " Groups: overall, the mover's rating band, ply buckets 0-19, 20-39, 40-79, 80+."
    " Calibration: 10 bins of predicted win probability, mean predicted vs observed win"
    " frequency"
)
