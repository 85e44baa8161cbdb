"""The Elo ladder: anchors from a random mover up past Stockfish's ``UCI_Elo`` 2000, rated on
one scale, so that every model's Elo is finite once it scores at all.

Protocol. The anchors (``anchors.DEFAULT_ANCHORS``, weakest first: a random mover; Stockfish
at 1 node with 75 % of its moves random; a one-ply material-greedy mover with half its moves
random, and with none; Stockfish at 1 node with 50 %, 25 %, 10 % of its moves random, and
with none; then Stockfish at ``UCI_Elo`` 1350, 1600, 2000 and 2400, 20,000 nodes a move)
play a round robin on CPU: every pair of anchors within ``reach`` places of each other in
that order (all pairs by default), except pairs of two ``UCI_Elo`` anchors, whose games say
nothing about the ratings to fit (60 pairs by default). A pair plays ``games_per_pair``
games (16 by default: 960 games in all): games 2k and 2k+1 start from the same
``opening_plies`` (2) random plies with colours swapped. A game still going after
``max_plies`` (300) plies is scored a draw. Every game's seed derives from the ladder's
``seed``, the pair and the game's index, so the random, greedy and node-limited anchors'
games replay move for move on one engine build; the ``UCI_Elo`` anchors' games do not (the
engine weakens itself with a random generator no client can seed).

Fit. Maximum likelihood of the Bradley-Terry (logistic) model, expected score
``1 / (1 + 10^((R_b - R_a) / 400))``, draws as half a point (as BayesElo and Ordo), over all
the ladder's games jointly, with the ``UCI_Elo`` anchors held at their calibrated values and
every other anchor free; Newton iterations in NumPy. Prior (as BayesElo's): ``prior_draws``
virtual draws (1 by default) added between every pair of anchors that met, so that a ladder of
few games has a finite maximum even where one anchor won every game of a pair; it pulls each
pair's rating gap towards 0 by about as much as one drawn game would. Intervals: 95 % Wald
intervals from the observed Fisher information at the maximum (virtual draws included),
conditional on the fixed anchors' values.

A run's model then plays the anchors; ``fit_player`` fits its one rating against the ladder's
ratings, held fixed, with a 95 % likelihood-ratio (profile) interval; given the ladder's
covariance it also states that interval widened by the ladder's own uncertainty (delta
method, half-widths in quadrature: ``low_total``/``high_total``).

Cost: 240 games (4 a pair) took 253 s with 2 workers on 2 shared CPU cores; the config's
``small`` ladder (5 anchors, 10 pairs, 4 games a pair: 40 games, 150 plies at most) 24 s.

A ladder is computed once per settings and engine build (``ladder_key``) and stored as JSON
(``write_ladder``); ``is_current`` says whether a stored one still holds.
"""

from __future__ import annotations

import concurrent.futures
import math
import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import chess
import numpy as np

from chesslm import files
from chesslm.play import anchors as anchor_players
from chesslm.play.anchors import AnchorSpec, Player

FORMAT = 1
SCALE = 400.0 / math.log(10.0)  # Elo points per natural-log unit of the odds
Z95 = 1.959963984540054
CHI2_95 = 3.841458820694124
RESULTS = {"1-0": 1.0, "0-1": 0.0, "1/2-1/2": 0.5}
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


@dataclass(frozen=True)
class LadderSettings:
    anchors: tuple[AnchorSpec, ...] = anchor_players.DEFAULT_ANCHORS
    games_per_pair: int = 16  # 4 left the weakest anchors' ratings +-200 to 290
    seed: int = 0
    max_plies: int = 300
    opening_plies: int = 2
    reach: int | None = None  # each anchor plays the next ``reach`` ones; None: all
    prior_draws: float = 1.0  # virtual draws between each pair that met (the fit's prior)

    def __post_init__(self) -> None:
        # 1 and 1.0 (YAML, JSON) are one setting: one key
        object.__setattr__(self, "prior_draws", float(self.prior_draws))
        names = [a.name for a in self.anchors]
        if len(set(names)) != len(names):
            raise LadderError(f"ladder anchors: names repeat: {names}")
        if not any(a.fixed for a in self.anchors):
            raise LadderError("ladder anchors: none is a stockfish_elo anchor to fix the scale")
        if self.games_per_pair < 1 or self.max_plies < 1 or self.opening_plies < 0:
            raise LadderError("ladder: games_per_pair, max_plies >= 1, opening_plies >= 0")
        if self.reach is not None and self.reach < 1:
            raise LadderError(f"ladder: reach must be >= 1 or None, not {self.reach}")
        if self.prior_draws < 0:
            raise LadderError(f"ladder: prior_draws must be >= 0, not {self.prior_draws}")

    def pairs(self) -> list[tuple[AnchorSpec, AnchorSpec]]:
        """The pairs that play: within ``reach``, never two fixed anchors."""
        out = []
        for i, a in enumerate(self.anchors):
            for b in self.anchors[i + 1 :][: self.reach]:
                if not (a.fixed and b.fixed):
                    out.append((a, b))
        return out

    def fixed_ratings(self) -> dict[str, float]:
        return {a.name: float(a.elo) for a in self.anchors if a.fixed}

    def as_dict(self) -> dict[str, Any]:
        return {
            "anchors": [a.as_dict() for a in self.anchors],
            "games_per_pair": self.games_per_pair,
            "seed": self.seed,
            "max_plies": self.max_plies,
            "opening_plies": self.opening_plies,
            "reach": self.reach,
            "prior_draws": self.prior_draws,
        }

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> LadderSettings:
        rest = {k: v for k, v in record.items() if k != "anchors"}
        if "anchors" in record:
            rest["anchors"] = tuple(AnchorSpec.from_dict(a) for a in record["anchors"])
        try:
            return cls(**rest)
        except TypeError as error:
            raise LadderError(f"ladder settings: {error}") from None


# ------------------------------------------------------------------ games


def game_seed(seed: int, *parts: object) -> int:
    """A game's seed from the ladder's and the game's place: independent of play order."""
    return int(files.digest_json([seed, *map(str, parts)])[:15], 16)


def random_opening(seed: int, plies: int) -> list[chess.Move]:
    """``plies`` uniformly random legal moves from the start (fewer if the game ends)."""
    rng, board = random.Random(seed), chess.Board()
    for _ in range(plies):
        if board.is_game_over():
            break
        board.push(rng.choice(list(board.legal_moves)))
    return list(board.move_stack)


def play_game(
    white: Player, black: Player, *, seed: int, opening: Sequence[chess.Move], max_plies: int
) -> dict[str, Any]:
    """One game from ``opening``; a row with White's score (a draw after ``max_plies``)."""
    white.new_game(game_seed(seed, "white"))
    black.new_game(game_seed(seed, "black"))
    board = chess.Board()
    for move in opening:
        board.push(move)
    while not board.is_game_over(claim_draw=True) and len(board.move_stack) < max_plies:
        player = white if board.turn == chess.WHITE else black
        move = player.move(board)
        if not board.is_legal(move):
            raise LadderError(f"{player.name} played an illegal move {move} in {board.fen()}")
        board.push(move)
    over = board.is_game_over(claim_draw=True)
    result = board.result(claim_draw=True) if over else "1/2-1/2"
    return {
        "white": white.name,
        "black": black.name,
        "score": RESULTS[result],
        "result": result,
        "plies": len(board.move_stack),
        "adjudicated": not over,
        "moves": " ".join(m.uci() for m in board.move_stack),
    }


def play_pair(
    a: Player,
    b: Player,
    settings: LadderSettings,
    games: int,
    deadline: float | None = None,
) -> list[dict[str, Any]]:
    """``games`` games of ``a`` against ``b``: game 2k with ``a`` White, 2k+1 with ``b`` White,
    both from the same random opening; none started at or after ``deadline`` (monotonic)."""
    rows = []
    for index in range(games):
        if deadline is not None and time.monotonic() >= deadline:
            break
        opening_seed = game_seed(settings.seed, a.name, b.name, index // 2)
        opening = random_opening(opening_seed, settings.opening_plies)
        white, black = (a, b) if index % 2 == 0 else (b, a)
        seed = game_seed(settings.seed, a.name, b.name, index)
        rows.append(
            play_game(white, black, seed=seed, opening=opening, max_plies=settings.max_plies)
        )
    return rows


def play_anchor(
    player: Player,
    spec: AnchorSpec,
    settings: LadderSettings,
    engine_path: str,
    games: int,
    deadline: float | None = None,
) -> list[dict[str, Any]]:
    """``player`` against the one anchor ``spec``: ``play_anchors``' games against it."""
    anchor = anchor_players.open_player(spec, engine_path)
    try:
        return play_pair(player, anchor, settings, games, deadline)
    finally:
        anchor.close()


def play_anchors(
    player: Player,
    settings: LadderSettings,
    engine_path: str,
    games_per_anchor: int,
    *,
    deadline: float | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[dict[str, Any]]:
    """``player`` (a run's model: ``anchors.ModelPlayer``) against every anchor of the ladder,
    ``games_per_anchor`` games each, colours and openings as in the ladder's own games (the
    same openings for every run's model); no game started at or after ``deadline``
    (monotonic); ``progress(done, total)`` after each anchor."""
    rows: list[dict[str, Any]] = []
    for done, spec in enumerate(settings.anchors, 1):
        rows += play_anchor(player, spec, settings, engine_path, games_per_anchor, deadline)
        if progress is not None:
            progress(done, len(settings.anchors))
    return rows


def _pair_games(
    settings: LadderSettings, pair: tuple[AnchorSpec, AnchorSpec], engine_path: str
) -> list[dict[str, Any]]:
    """One pair's games with players of their own (a task of ``play_round_robin``)."""
    a = anchor_players.open_player(pair[0], engine_path)
    try:
        b = anchor_players.open_player(pair[1], engine_path)
        try:
            return play_pair(a, b, settings, settings.games_per_pair)
        finally:
            b.close()
    finally:
        a.close()


def play_round_robin(
    settings: LadderSettings,
    engine_path: str,
    progress: Callable[[int, int], None] | None = None,
    workers: int = 1,
) -> list[dict[str, Any]]:
    """Every pair of ``settings.pairs()`` plays its games, ``workers`` pairs at a time (each
    game seeded by its place, so the rows do not depend on ``workers``); ``progress(done,
    total)`` as pairs finish."""
    pairs = settings.pairs()
    rows: list[dict[str, Any]] = []
    if workers == 1:
        for done, pair in enumerate(pairs, 1):
            rows += _pair_games(settings, pair, engine_path)
            if progress is not None:
                progress(done, len(pairs))
        return rows
    # threads, not processes: the engines search in processes of their own, and a process
    # pool would re-run the caller's main module (a Snakemake script) in every worker
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        futures = [pool.submit(_pair_games, settings, pair, engine_path) for pair in pairs]
        for done, future in enumerate(futures, 1):
            rows += future.result()
            if progress is not None:
                progress(done, len(pairs))
    return rows


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


def engine_identity(engine_path: str) -> dict[str, str]:
    """The engine build the ladder's games depend on: its UCI ``id name`` and the sha256 of
    its executable (one version can be built several ways, with different play)."""
    return {
        "id_name": anchor_players.engine_build(engine_path),
        "sha256": files.sha256_file(engine_path),
    }


def ladder_key(settings: LadderSettings, identity: dict[str, str]) -> str:
    """The identity of a ladder: its settings, the engine build and this file format. Equal
    keys, equal games (bar the UCI_Elo anchors' randomness) and so one ladder to reuse."""
    engine = {"id_name": identity["id_name"], "sha256": identity["sha256"]}
    return files.digest_json({"format": FORMAT, "settings": settings.as_dict(), "engine": engine})


KEY_CHARS = 12  # of the key in a ladder's path: enough to tell builds and settings apart
NOT_SETTINGS = ("engine", "threads")  # config keys of a ladder that are not its settings
"""The engine enters through its build (``engine_identity``); threads change no game."""


def settings_from_config(record: dict[str, Any], name: str) -> LadderSettings:
    """``ladders.NAME`` of the config (schema defaults applied; ``anchors`` null: the default
    anchors) as settings; an error names the ladder."""
    rest = {k: v for k, v in record.items() if k not in NOT_SETTINGS}
    if rest.get("anchors") is None:
        rest.pop("anchors", None)
    try:
        return LadderSettings.from_dict(rest)
    except ValueError as error:
        raise LadderError(f"ladders.{name}: {error}") from None


def ladder_path(name: str, settings: LadderSettings, identity: dict[str, str]) -> str:
    """Where ladder ``name`` is stored: a new path for new settings or a new engine build, so
    that a workflow rebuilds it by its path alone."""
    return f"results/ladders/{name}-{ladder_key(settings, identity)[:KEY_CHARS]}/ladder.json"


def reproducibility(settings: LadderSettings) -> dict[str, Any]:
    random_ones = [a.name for a in settings.anchors if not a.reproducible]
    return {
        "replayable_anchors": [a.name for a in settings.anchors if a.reproducible],
        "random_anchors": random_ones,
        "note": "games between two replayable anchors replay move for move from the seed on"
        " the same engine build; games with a random anchor (" + ", ".join(random_ones) + ")"
        " do not (Stockfish's UCI_LimitStrength draws from an unseeded generator), so a"
        " rebuilt ladder's ratings move within their intervals; the fit is deterministic"
        " given the games",
    }


def build_ladder(
    settings: LadderSettings,
    engine_path: str,
    progress: Callable[[int, int], None] | None = None,
    workers: int = 1,
) -> dict[str, Any]:
    """Play the round robin (``workers`` pairs at a time) and fit it: the ladder file's
    content."""
    identity = {"path": engine_path, **engine_identity(engine_path)}
    start = time.monotonic()
    rows = play_round_robin(settings, engine_path, progress, workers)
    seconds = time.monotonic() - start
    fit = fit_ratings(rows, settings.fixed_ratings(), settings.prior_draws)
    return {
        "format": FORMAT,
        "key": ladder_key(settings, identity),
        "settings": settings.as_dict(),
        "engine": identity,
        "protocol": " ".join(__doc__.split("\n\n")[1:3]).replace("\n", " "),
        "reproducible": reproducibility(settings),
        "wall_seconds": seconds,
        "games": rows,
        **fit,
    }


def write_ladder(path: Path | str, ladder: dict[str, Any]) -> None:
    files.write_json_atomic(path, ladder)


def read_ladder(path: Path | str) -> dict[str, Any]:
    """A stored ladder, checked for the keys its users read."""
    ladder = files.read_json(path)
    if ladder.get("format") != FORMAT:
        raise LadderError(f"{path}: ladder format {ladder.get('format')!r}, expected {FORMAT}")
    for key in ("key", "settings", "engine", "games", "ratings", "covariance"):
        if key not in ladder:
            raise LadderError(f"{path}: ladder file has no {key!r}")
    for name, rating in ladder["ratings"].items():
        if not isinstance(rating, dict) or not isinstance(rating.get("elo"), int | float):
            raise LadderError(f"{path}: ratings.{name} has no numeric elo")
    return ladder


def is_current(ladder: dict[str, Any], settings: LadderSettings, identity: dict[str, str]) -> bool:
    """Whether a stored ladder was computed with these settings on this engine build."""
    return ladder.get("key") == ladder_key(settings, identity)


def ladder_covariance(ladder: dict[str, Any]) -> dict[str, Any]:
    """The fitted ratings' covariance (names, matrix): ``fit_player``'s ``covariance``."""
    return ladder["covariance"]


def ladder_ratings(ladder: dict[str, Any]) -> dict[str, float]:
    """Each anchor's fitted (or fixed) Elo: what ``fit_player`` places a model against."""
    return {name: float(r["elo"]) for name, r in ladder["ratings"].items()}
