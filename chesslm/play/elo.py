"""The Elo of a player from its scores against anchors of known Elo.

Maximum likelihood of the logistic model ``P(score) = 1 / (1 + 10^((R_anchor - R) / 400))``
over every game (a draw counts as half a win), with a likelihood-ratio 95 % interval (the
R where twice the log-likelihood drop reaches 3.841, the chi-square(1) 95 % point). The
log-likelihood is concave in R, so the estimate and both bounds are found by bisection.

>>> round(fit([(1600, 0.75)] * 4)["elo"], 1)  # one anchor: 1600 - 400 log10(1/0.75 - 1)
1790.8
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

CHI2_95 = 3.841458820694124
SEARCH = (-2000.0, 6000.0)  # Elo range searched; beyond it the estimate is reported unbounded


def expected(rating: float, anchor: float) -> float:
    return 1.0 / (1.0 + 10.0 ** ((anchor - rating) / 400.0))


def log_likelihood(rating: float, games: Sequence[tuple[float, float]]) -> float:
    total = 0.0
    for anchor, score in games:
        p = min(max(expected(rating, anchor), 1e-300), 1 - 1e-16)
        total += score * math.log(p) + (1 - score) * math.log1p(-p)
    return total


def _bisect(f: Any, low: float, high: float, iterations: int = 200) -> float:
    """A root of decreasing ``f`` in [low, high]."""
    for _ in range(iterations):
        mid = (low + high) / 2
        if f(mid) > 0:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def fit(games: Sequence[tuple[float, float]]) -> dict[str, Any]:
    """Elo estimate and 95 % likelihood-ratio interval from (anchor Elo, score) per game.

    With only wins (or only losses) there is no finite maximum: ``elo`` is None and the
    interval is one-sided (``high`` None after only wins, ``low`` None after only losses)."""
    games = [(float(a), float(s)) for a, s in games]
    result: dict[str, Any] = {
        "games": len(games),
        "score": sum(s for _, s in games) / len(games) if games else None,
        "method": "maximum likelihood, logistic 400-point scale, draws as half;"
        " 95 % likelihood-ratio interval",
    }
    if not games:
        return {**result, "elo": None, "low": None, "high": None}
    total = sum(s for _, s in games)
    lo, hi = SEARCH
    if 0 < total < len(games):

        def gradient(r: float) -> float:
            return sum(s - expected(r, a) for a, s in games)

        best = _bisect(gradient, lo, hi)
    else:
        best = hi if total == len(games) else lo
    peak = log_likelihood(best, games)

    def drop(r: float) -> float:
        return 2 * (peak - log_likelihood(r, games)) - CHI2_95

    # only wins: no upper bound; only losses: no lower bound
    low = None if total == 0 else _bisect(drop, lo, best)
    high = None if total == len(games) else _bisect(lambda r: -drop(r), best, hi)
    if low is not None and drop(lo) < 0:
        low = None
    if high is not None and drop(hi) < 0:
        high = None
    elo = best if 0 < total < len(games) else None
    return {**result, "elo": elo, "low": low, "high": high}
