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

Fit (``chesslm.ladder.elo``). Maximum likelihood of the Bradley-Terry (logistic) model,
expected score ``1 / (1 + 10^((R_b - R_a) / 400))``, draws as half a point (as BayesElo and
Ordo), over all the ladder's games jointly, with the ``UCI_Elo`` anchors held at their
calibrated values and every other anchor free; Newton iterations in NumPy. Prior (as
BayesElo's): ``prior_draws`` virtual draws (1 by default) added between every pair of anchors
that met, so that a ladder of few games has a finite maximum even where one anchor won every
game of a pair; it pulls each pair's rating gap towards 0 by about as much as one drawn game
would. Intervals: 95 % Wald intervals from the observed Fisher information at the maximum
(virtual draws included), conditional on the fixed anchors' values.

A run's model then plays the anchors; ``chesslm.ladder.elo.fit_player`` fits its one rating
against the ladder's ratings, held fixed, with a 95 % likelihood-ratio (profile) interval; given
the ladder's covariance it also states that interval widened by the ladder's own uncertainty
(delta method, half-widths in quadrature: ``low_total``/``high_total``).

Cost: BENCHMARKS.md (the full ladder on 12 cores, the config's ``small`` one on 2).

A ladder is computed once per settings and engine build (``ladder_key``) and stored as sealed
JSON (``write_ladder``; ``read_ladder`` checks the seal); ``is_current`` says whether a stored
one still holds.
"""

from __future__ import annotations

import concurrent.futures
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import chess

from chesslm import files, layout, seal
from chesslm.ladder import elo
from chesslm.ladder import players as anchor_players
from chesslm.ladder.elo import LadderError
from chesslm.ladder.players import AnchorSpec, Player

FORMAT = 1
RESULTS = {"1-0": 1.0, "0-1": 0.0, "1/2-1/2": 0.5}


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


def start_game(
    white: Player, black: Player, *, seed: int, opening: Sequence[chess.Move]
) -> chess.Board:
    """Both players told of a new game (seeded by its place); the board after ``opening``."""
    white.new_game(game_seed(seed, "white"))
    black.new_game(game_seed(seed, "black"))
    board = chess.Board()
    for move in opening:
        board.push(move)
    return board


def game_on(board: chess.Board, max_plies: int) -> bool:
    return not board.is_game_over(claim_draw=True) and len(board.move_stack) < max_plies


def push_move(player: Player, board: chess.Board, move: chess.Move) -> None:
    if not board.is_legal(move):
        raise LadderError(f"{player.name} played an illegal move {move} in {board.fen()}")
    board.push(move)


def game_row(white: Player, black: Player, board: chess.Board) -> dict[str, Any]:
    """A finished game's row with White's score (a draw when it was cut at ``max_plies``)."""
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


def play_game(
    white: Player, black: Player, *, seed: int, opening: Sequence[chess.Move], max_plies: int
) -> dict[str, Any]:
    """One game from ``opening``; a row with White's score (a draw after ``max_plies``)."""
    board = start_game(white, black, seed=seed, opening=opening)
    while game_on(board, max_plies):
        player = white if board.turn == chess.WHITE else black
        push_move(player, board, player.move(board))
    return game_row(white, black, board)


@dataclass(frozen=True)
class GamePlan:
    """One game of ``a`` against ``b`` in ``play_pair``'s order: its index, seed and opening."""

    index: int
    seed: int
    opening: tuple[chess.Move, ...]

    @property
    def a_is_white(self) -> bool:
        return self.index % 2 == 0


def pair_plan(settings: LadderSettings, a: str, b: str, games: int) -> list[GamePlan]:
    """Game 2k with ``a`` White, 2k+1 with ``b`` White, both from the same random opening."""
    plans = []
    for index in range(games):
        opening_seed = game_seed(settings.seed, a, b, index // 2)
        opening = tuple(random_opening(opening_seed, settings.opening_plies))
        plans.append(GamePlan(index, game_seed(settings.seed, a, b, index), opening))
    return plans


def play_pair(
    a: Player, b: Player, settings: LadderSettings, games: int, deadline: float | None = None
) -> list[dict[str, Any]]:
    """``games`` games of ``a`` against ``b`` (``pair_plan``); none started at or after
    ``deadline`` (monotonic)."""
    rows = []
    for plan in pair_plan(settings, a.name, b.name, games):
        if deadline is not None and time.monotonic() >= deadline:
            break
        white, black = (a, b) if plan.a_is_white else (b, a)
        rows.append(play_game(white, black, seed=plan.seed, opening=plan.opening,
                              max_plies=settings.max_plies))  # fmt: skip
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
    (monotonic); ``progress(done, total)`` after each anchor. One game at a time: the
    reference that ``inflight.play_anchors_together`` (what play runs, every game in flight
    at once) is tested and timed against."""
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


def engine_identity(engine_path: str, id_name: str | None = None) -> dict[str, str]:
    """The engine build the ladder's games depend on: its UCI ``id name`` (``id_name``, else
    asked in a handshake) and the sha256 of its executable (one version can be built several
    ways, with different play)."""
    if id_name is None:
        id_name = anchor_players.handshake(engine_path).name
    return {"id_name": id_name, "sha256": files.sha256_file(engine_path)}


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
    return layout.ladder_file(name, ladder_key(settings, identity)[:KEY_CHARS])


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
    fit = elo.fit_ratings(rows, settings.fixed_ratings(), settings.prior_draws)
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
    seal.write(path, ladder)  # read_ladder checks the seal before any rating is used


def read_ladder(path: Path | str) -> dict[str, Any]:
    """A stored ladder, its seal checked (``chesslm.seal``: an edited rating, a damaged or an
    unsealed file is refused, naming the file and the command that rebuilds it), then the keys
    its users read."""
    try:
        ladder = seal.read(path, seal.rebuild(path, "ladder"))
    except seal.SealError as error:
        raise LadderError(str(error)) from None
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
    """The fitted ratings' covariance (names, matrix): ``elo.fit_player``'s ``covariance``."""
    return ladder["covariance"]


def ladder_ratings(ladder: dict[str, Any]) -> dict[str, float]:
    """Each anchor's fitted (or fixed) Elo: what ``elo.fit_player`` places a model against."""
    return {name: float(r["elo"]) for name, r in ladder["ratings"].items()}
