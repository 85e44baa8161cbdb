"""Per-run metrics and paired differences of runs on the same positions, overall and by the
mover's rating band, with 95 % percentile intervals from one set of bootstrap draws over whole
games (as Allie's evaluation reports them): every run and every difference is resampled by the
same draws, so a difference's interval holds only what varies between the runs on the same
games, often far narrower than either run's own interval.

Also Allie's benchmark shape (``shape: allie``): an equal number of positions per mover band,
drawn once, seeded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from chesslm.compare.positions import PER_RUN, Aligned
from chesslm.match.matching import BANDS, MIN_INTERVAL_GAMES, elo_band

ALL = "all"
BLOCK = 250  # bootstrap draws computed at a time: memory bounded by BLOCK x games


@dataclass(frozen=True)
class Column:
    """One statistic: sum of ``values`` over ``mask``'s positions / their number."""

    kind: str  # "metric" or "paired"
    run: str
    group: str
    metric: str
    values: np.ndarray
    mask: np.ndarray


def allie_sample(
    aligned: Aligned, *, per_band: int | None, seed: int, key: str
) -> tuple[Aligned, dict[str, Any]]:
    """Allie's shape: the positions of each band of the mover's rating (< 1400, 1400-2000,
    2000-2400, 2400+), the same number from each, drawn without replacement (seeded). That
    number is ``per_band``, else the smallest non-empty band's count. An empty band is left
    out (listed as such); positions of unknown rating are never drawn."""
    labels = elo_band(aligned.mover_elo)
    names = [name for *_, name in BANDS]
    counts = {name: int((labels == name).sum()) for name in names}
    present = [name for name in names if counts[name]]
    if not present:
        raise ValueError(f"{key}: shape allie, but no position has a known mover rating")
    k = per_band if per_band is not None else min(counts[n] for n in present)
    short = [n for n in present if counts[n] < k]
    if short:
        raise ValueError(
            f"{key}.positions_per_band is {k}, but band {short[0]} has {counts[short[0]]} positions"
        )
    rng = np.random.default_rng(seed)
    chosen = [np.sort(rng.choice(np.flatnonzero(labels == n), k, replace=False)) for n in present]
    index = np.sort(np.concatenate(chosen))
    info = {"positions_per_band": k, "band_positions_available": counts,
            "empty_bands": [n for n in names if not counts[n]], "seed": seed}  # fmt: skip
    return aligned.subset(index), info


def columns(aligned: Aligned, baseline: str, *, bands: bool = True) -> list[Column]:
    """Every statistic: each run's metrics and each other run's difference from
    ``baseline``, overall and (``bands``) per mover band with a position."""
    groups = {ALL: np.ones(len(aligned.game), dtype=bool)}
    if bands:
        labels = elo_band(aligned.mover_elo)
        for name in [*(b for *_, b in BANDS), "unknown"]:
            if (labels == name).any():
                groups[name] = labels == name
    base = aligned.runs[baseline]
    out = []
    for group, mask in groups.items():
        for run, cols in aligned.runs.items():
            for metric in PER_RUN:
                values = cols[metric].astype(np.float64)
                out.append(Column("metric", run, group, metric, values, mask))
                if run != baseline:
                    diff = values - base[metric].astype(np.float64)
                    out.append(Column("paired", run, group, metric, diff, mask))
    return out


def game_sums(game: np.ndarray, cols: list[Column]) -> tuple[np.ndarray, np.ndarray]:
    """Per game x column: the sum of the values and the number of positions."""
    _, of = np.unique(game, return_inverse=True)
    G = int(of.max()) + 1 if len(of) else 0
    S = np.zeros((G, len(cols)))
    N = np.zeros((G, len(cols)))
    for c, col in enumerate(cols):
        S[:, c] = np.bincount(of[col.mask], weights=col.values[col.mask], minlength=G)
        N[:, c] = np.bincount(of[col.mask], minlength=G)
    return S, N


def bootstrap(S: np.ndarray, N: np.ndarray, draws: int, seed: int) -> np.ndarray:
    """Each column's ratio under ``draws`` resamples of the games with replacement (draws x
    columns; NaN where a draw holds none of a column's positions). One draw of the games
    serves every column: paired differences use the same draws as the runs."""
    G = len(S)
    rng = np.random.default_rng(seed)
    out = np.empty((draws, S.shape[1]))
    for start in range(0, draws, BLOCK):
        n = min(BLOCK, draws - start)
        W = np.stack([np.bincount(rng.integers(0, G, G), minlength=G) for _ in range(n)])
        with np.errstate(invalid="ignore", divide="ignore"):
            out[start : start + n] = (W @ S) / (W @ N)
    return out


def summarise(aligned: Aligned, baseline: str, *, draws: int, seed: int) -> list[dict[str, Any]]:
    """One row per statistic: kind, run, baseline (paired), group, metric, value, 95 % low and
    high (None for fewer than MIN_INTERVAL_GAMES games), positions, games."""
    cols = columns(aligned, baseline)
    S, N = game_sums(aligned.game, cols)
    boot = bootstrap(S, N, draws, seed)
    rows = []
    for c, col in enumerate(cols):
        n, games = N[:, c].sum(), int((N[:, c] > 0).sum())
        finite = boot[:, c][np.isfinite(boot[:, c])]
        few = games < MIN_INTERVAL_GAMES or not len(finite)
        low, high = (None, None) if few else map(float, np.percentile(finite, [2.5, 97.5]))
        rows.append({
            "kind": col.kind, "run": col.run,
            "baseline": baseline if col.kind == "paired" else None,
            "group": col.group, "metric": col.metric,
            "value": float(S[:, c].sum() / n) if n else None,
            "low": low, "high": high, "positions": int(n), "games": games,
        })  # fmt: skip
    return rows
