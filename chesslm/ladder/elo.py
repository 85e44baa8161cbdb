"""Elo ratings by maximum likelihood, as BayesElo and Ordo fit them: the ladder's joint fit
(``fit_ratings``: every anchor at once, the ``UCI_Elo`` anchors held fixed, with a prior of
virtual draws) and one new player's fit against fixed ratings (``fit_player``, a run's model),
with their intervals. The protocol is ``chesslm.ladder.round_robin``'s docstring.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

SCALE = 400.0 / math.log(10.0)  # Elo points per natural-log unit of the odds
Z95 = 1.959963984540054
CHI2_95 = 3.841458820694124
FIT_METHOD = (
    "maximum likelihood, logistic 400-point scale, draws as half; UCI_Elo anchors fixed;"
    " {prior} virtual draw(s) between every pair that met (BayesElo's prior);"
    " 95 % Wald intervals from the observed Fisher information"
)
PLAYER_METHOD = (
    "maximum likelihood against the ladder's ratings held fixed, logistic 400-point scale,"
    " draws as half; 95 % likelihood-ratio interval (ladder uncertainty not included)"
)


class LadderError(ValueError):
    """Ladder settings, games or a ladder file that cannot give ratings; says which and why."""


# ------------------------------------------------------------------ the joint fit


@dataclass
class Tally:
    """Games and points between every pair of players (points to the first of the pair)."""

    names: list[str]
    games: np.ndarray = field(init=False)
    points: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        n = len(self.names)
        self.games, self.points = np.zeros((n, n)), np.zeros((n, n))

    @classmethod
    def of(cls, rows: Iterable[dict[str, Any]], names: Iterable[str] = ()) -> Tally:
        rows = list(rows)
        seen = {r["white"] for r in rows} | {r["black"] for r in rows} | set(names)
        tally = cls(sorted(seen))
        at = {name: i for i, name in enumerate(tally.names)}
        for r in rows:
            w, b, s = at[r["white"]], at[r["black"]], float(r["score"])
            if w == b:
                raise LadderError(f"game {r['white']}-{r['black']}: a player against itself")
            if s not in (0.0, 0.5, 1.0):
                raise LadderError(f"game {r['white']}-{r['black']}: score {s} not 0, 1/2 or 1")
            tally.games[w, b] += 1
            tally.games[b, w] += 1
            tally.points[w, b] += s
            tally.points[b, w] += 1 - s
        return tally


def unbounded(tally: Tally, fixed: Iterable[str]) -> dict[str, str]:
    """Free players whose likelihood has no finite maximum, and which way they run off: a
    rating is bounded above only through points lost to a player bounded above (and below
    through points won from one bounded below), the fixed players being bounded both ways."""
    out = {}
    for direction, scored in (("above", tally.points.T), ("below", tally.points)):
        bounded = {tally.names.index(f) for f in fixed}
        grew = True
        while grew:
            new = {i for i in range(len(tally.names)) for j in bounded if scored[i, j] > 0}
            grew = bool(new - bounded)
            bounded |= new
        for i, name in enumerate(tally.names):
            if i not in bounded:
                out.setdefault(name, direction)
    return out


def _expected(diff: np.ndarray) -> np.ndarray:
    """Expected score at rating differences ``diff`` (Elo)."""
    return 1.0 / (1.0 + np.exp(-diff / SCALE))


def expected(rating: float, opponent: float) -> float:
    """A player's expected score against an ``opponent`` (both Elo)."""
    return float(_expected(np.asarray(rating - opponent)))


def _log_likelihood(tally: Tally, ratings: np.ndarray) -> float:
    """Each game once: its score's log-odds from White's side plus the rest from Black's."""
    p = np.clip(_expected(ratings[:, None] - ratings[None, :]), 1e-300, 1.0)
    return float(np.sum(tally.points * np.log(p)))


def _derivatives(tally: Tally, ratings: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Gradient and Hessian of the log-likelihood in Elo."""
    p = _expected(ratings[:, None] - ratings[None, :])
    gradient = (tally.points - tally.games * p).sum(1) / SCALE
    weight = tally.games * p * (1 - p) / SCALE**2
    hessian = weight - np.diag(weight.sum(1))
    return gradient, hessian


def _newton(tally: Tally, ratings: np.ndarray, free: np.ndarray) -> np.ndarray:
    """The free ratings that maximise the likelihood (concave: Newton with halving steps)."""
    for _ in range(200):
        gradient, hessian = _derivatives(tally, ratings)
        step = np.linalg.solve(-hessian[np.ix_(free, free)], gradient[free])
        step = np.clip(step, -400.0, 400.0)  # far-off starts stay within the float range
        before = _log_likelihood(tally, ratings)
        for _ in range(60):
            trial = ratings.copy()
            trial[free] += step
            if _log_likelihood(tally, trial) >= before - 1e-12:
                break
            step /= 2
        ratings = trial
        if np.max(np.abs(step)) < 1e-9:
            break
    return ratings


def with_prior(tally: Tally, draws: float) -> Tally:
    """``tally`` plus ``draws`` virtual draws between every pair that met (half a point each
    way)."""
    out, met = Tally(tally.names), tally.games > 0
    out.games = tally.games + draws * met
    out.points = tally.points + 0.5 * draws * met
    return out


def fit_ratings(
    rows: Iterable[dict[str, Any]], fixed: dict[str, float], prior_draws: float = 0.0
) -> dict[str, Any]:
    """Every player's rating from game rows (white, black, White's score), the players in
    ``fixed`` held at their values, with ``prior_draws`` virtual draws between every pair that
    met (0: the plain maximum likelihood). A free player with no finite maximum (it won, or
    lost, every point that links it to the fixed players) is an error that names it."""
    played = Tally.of(rows, fixed)
    tally = with_prior(played, prior_draws)
    if not fixed:
        raise LadderError("ladder fit: no fixed rating to anchor the scale")
    runaway = unbounded(tally, fixed)
    if runaway:
        said = ", ".join(f"{name} (runs off {way})" for name, way in sorted(runaway.items()))
        raise LadderError(
            f"ladder fit: no finite rating for {said}: every game linking it to the fixed"
            " anchors went one way; play more games per pair or add an anchor between"
        )
    free = np.array([name not in fixed for name in tally.names])
    start = float(np.mean(list(fixed.values())))
    ratings = np.array([fixed.get(name, start) for name in tally.names], dtype=float)
    ratings = _newton(tally, ratings, free) if free.any() else ratings
    _, hessian = _derivatives(tally, ratings)
    cov = np.zeros((len(ratings), len(ratings)))
    if free.any():
        cov[np.ix_(free, free)] = np.linalg.inv(-hessian[np.ix_(free, free)])
    se = np.sqrt(np.diag(cov))
    return {
        "method": FIT_METHOD.format(prior=f"{prior_draws:g}"),
        "prior": {"virtual_draws_per_pair": prior_draws, "between": "every pair that met"},
        "ratings": _rating_table(played, ratings, se, fixed),
        "covariance": {"names": tally.names, "matrix": cov.tolist()},
    }


def _rating_table(
    tally: Tally, ratings: np.ndarray, se: np.ndarray, fixed: dict[str, float]
) -> dict[str, dict[str, Any]]:
    out = {}
    for i, name in enumerate(tally.names):
        games = int(tally.games[i].sum())
        out[name] = {
            "elo": float(ratings[i]),
            "low": float(ratings[i] - Z95 * se[i]),
            "high": float(ratings[i] + Z95 * se[i]),
            "se": float(se[i]),
            "fixed": name in fixed,
            "games": games,
            "score": float(tally.points[i].sum() / games) if games else None,
        }
    return out


# ------------------------------------------------------------------ one player on the ladder


def _player_log_likelihood(rating: float, games: np.ndarray) -> float:
    """Log-likelihood of one rating over (opponent's rating, points, games) rows."""
    p = np.clip(_expected(rating - games[:, 0]), 1e-300, 1 - 1e-16)
    return float(np.sum(games[:, 1] * np.log(p) + (games[:, 2] - games[:, 1]) * np.log1p(-p)))


def _bisect(f: Callable[[float], float], low: float, high: float) -> float:
    """The root of decreasing ``f`` in [low, high] (to far below 0.01 Elo)."""
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if f(mid) > 0 else (low, mid)
    return (low + high) / 2


def player_games(
    rows: Iterable[dict[str, Any]], player: str, ratings: dict[str, float]
) -> list[tuple[str, float]]:
    """(opponent, ``player``'s score) for each of ``player``'s games in ``rows``."""
    out = []
    for r in rows:
        if player not in (r["white"], r["black"]):
            continue
        opponent = r["black"] if r["white"] == player else r["white"]
        if opponent not in ratings:
            raise LadderError(f"{player}'s game against {opponent!r}: not on the ladder")
        score = float(r["score"]) if r["white"] == player else 1 - float(r["score"])
        out.append((opponent, score))
    return out


def _by_opponent(played: Sequence[tuple[str, float]], ratings: dict[str, float]) -> np.ndarray:
    """(opponent's rating, points, games) per opponent: the likelihood needs no more."""
    rows = {}
    for opponent, score in played:
        points, games = rows.get(opponent, (0.0, 0))
        rows[opponent] = (points + score, games + 1)
    return np.array([(ratings[o], points, games) for o, (points, games) in rows.items()])


def fit_player(
    rows: Iterable[dict[str, Any]],
    ratings: dict[str, float],
    player: str = "model",
    covariance: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``player``'s rating from its games against players of known ``ratings`` (the ladder's),
    with a 95 % likelihood-ratio interval. Finite once it scores above 0 and below 100 %;
    after only losses the rating is "below ``high``", after only wins "above ``low``".
    With the ladder's ``covariance`` (``fit_ratings``'), also ``ladder_se``, the spread the
    ladder's own uncertainty adds, and ``low_total``/``high_total``, the interval widened by
    it (half-widths added in quadrature)."""
    played = player_games(rows, player, ratings)
    if not played:
        raise LadderError(f"{player}: no games against the ladder's anchors")
    games = _by_opponent(played, ratings)
    total, n = float(games[:, 1].sum()), len(played)
    span = (min(ratings.values()) - 4000.0, max(ratings.values()) + 4000.0)
    if 0 < total < n:
        best = _bisect(lambda r: total - float(games[:, 2] @ _expected(r - games[:, 0])), *span)
        peak = _player_log_likelihood(best, games)
    else:  # the likelihood's supremum, 0, is approached at one end of the scale
        best, peak = (span[1] if total == n else span[0]), 0.0

    def drop(r: float) -> float:
        return 2 * (peak - _player_log_likelihood(r, games)) - CHI2_95

    low = None if total == 0 else _bisect(drop, span[0], best)
    high = None if total == n else _bisect(lambda r: -drop(r), best, span[1])
    bound = "below" if total == 0 else "above" if total == n else None
    result = {
        "player": player,
        "games": n,
        "score": total / n,
        "elo": None if bound else best,
        "low": low,
        "high": high,
        "bound": bound,
        "text": _rating_text(best, low, high, bound),
        "method": PLAYER_METHOD,
    }
    if covariance is not None:
        at = best if bound is None else high if bound == "below" else low
        result |= _with_ladder(result, played, ratings, covariance, at)
    return result


def ladder_spread(
    played: Sequence[tuple[str, float]],
    ratings: dict[str, float],
    covariance: dict[str, Any],
    at: float,
) -> float:
    """The standard error a player's rating at ``at`` inherits from its opponents' ratings
    (delta method: the estimate moves with opponent j by j's share of the information)."""
    names = covariance["names"]
    missing = sorted({o for o, _ in played} - set(names))
    if missing:
        raise LadderError(f"ladder covariance: no row for {missing}: not this ladder's")
    counts = np.array([sum(o == name for o, _ in played) for name in names], dtype=float)
    p = _expected(at - np.array([ratings.get(name, at) for name in names]))
    share = counts * p * (1 - p)
    share /= share.sum()
    return float(np.sqrt(max(share @ np.array(covariance["matrix"]) @ share, 0.0)))


def _with_ladder(
    result: dict[str, Any],
    played: Sequence[tuple[str, float]],
    ratings: dict[str, float],
    covariance: dict[str, Any],
    at: float,
) -> dict[str, Any]:
    spread = ladder_spread(played, ratings, covariance, at)
    widen = Z95 * spread
    low, high = result["low"], result["high"]
    return {
        "ladder_se": spread,
        "low_total": None if low is None else at - math.hypot(at - low, widen),
        "high_total": None if high is None else at + math.hypot(high - at, widen),
        "method": PLAYER_METHOD.replace(
            " (ladder uncertainty not included)",
            "; low_total/high_total: widened by the ladder's own uncertainty (delta method)",
        ),
    }


def _rating_text(best: float, low: float | None, high: float | None, bound: str | None) -> str:
    if bound == "below":
        return f"below {high:.0f} (95 %; no game won or drawn)"
    if bound == "above":
        return f"above {low:.0f} (95 %; every game won)"
    return f"{best:.0f} [{low:.0f}, {high:.0f}]"


# ------------------------------------------------------------------ the ladder file
