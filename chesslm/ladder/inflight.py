"""The model's games against the ladder's anchors, all in flight together.

``ladder.play_anchors`` plays them one game at a time: one board per forward pass of the
model, and the model and the engine taking turns to wait. Here the games of every anchor asked
for start together (up to ``max_in_flight``, more as games end, in ``ladder.pair_plan``'s
order, anchor after anchor). Each step, every game where the model is to move gets its move
from one batched ``ModelPlayer.moves`` call, while every game where an anchor is to move asks
that game's own anchor player on a thread (a Stockfish anchor: its own engine process), so the
engines think at once, in their processes, while the model computes.

The games are the sequential path's: each game has players of its own (an anchor player per
game in flight, which the next game of that anchor reuses after ``new_game``, as the
sequential path reuses its one; the model's ``twin`` with a generator of its own), seeded by
the game's place; the same openings, colours and adjudication; the rows in the same order;
and the deadline means the same: no game started at or after it, the games in flight end.
Where the players are deterministic (random, greedy and node-limited anchors, the argmax
model) the rows are identical, but for floating point: a batch of several boards can change
the last bits of the model's scores (padding, BLAS blocking), so a near-tie could go the other
way (the CPU test compares every move).
"""

from __future__ import annotations

import collections
import concurrent.futures
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import chess
import chess.engine

from chesslm.ladder import players as anchor_players
from chesslm.ladder import round_robin as ladder
from chesslm.ladder.players import AnchorSpec, ModelPlayer, Player

# games (so engine processes) at once, each Stockfish about 25 MB (16 MB of hash). More buys
# little: the longest games (against the weakest anchors, up to max_plies) set the number of
# steps anyway, and 96 games of the default ladder end in about as many steps with 32
MAX_IN_FLIGHT = 32
# engines started at once: dozens at once on a busy 2-core machine ran past python-chess's
# 10 s start timeout
OPEN_AT_ONCE = 8


@dataclass
class Flight:
    """One game in flight: its anchor and place, its two players and its board."""

    spec: AnchorSpec
    plan: ladder.GamePlan
    model: ModelPlayer  # the model's twin for this game
    anchor: Player
    board: chess.Board

    @property
    def white(self) -> Player:
        return self.model if self.plan.a_is_white else self.anchor

    @property
    def black(self) -> Player:
        return self.anchor if self.plan.a_is_white else self.model

    def to_move(self) -> Player:
        return self.white if self.board.turn == chess.WHITE else self.black


class AnchorStock:
    """Anchor players by anchor: opened when a game needs one, handed back when it ends for
    that anchor's next game. Once an anchor's games are over its engines serve the anchors
    after it, configured anew (a start costs 0.1-0.4 s; each game starts with ``ucinewgame``
    anyway), so no more engines run than games in flight. ``close`` ends every engine."""

    def __init__(self, engine_path: str) -> None:
        self.engine_path = engine_path
        self.free: dict[str, list[Player]] = collections.defaultdict(list)
        self.idle: list[chess.engine.SimpleEngine] = []  # engines of anchors whose games ended
        self.engines: list[chess.engine.SimpleEngine] = []  # every engine running

    def take(self, specs: Sequence[AnchorSpec]) -> list[Player]:
        got: list[Player | None] = [self.free[s.name].pop() if self.free[s.name] else None
                                    for s in specs]  # fmt: skip
        fresh = [i for i, p in enumerate(got) if p is None]
        if not fresh:
            return got  # type: ignore[return-value]
        reuse = {i: self.idle.pop() for i in fresh if specs[i].kind in ENGINE_KINDS and self.idle}
        # on threads: an engine's start is mostly waiting (process, handshake)
        with concurrent.futures.ThreadPoolExecutor(min(len(fresh), OPEN_AT_ONCE)) as pool:
            opening = [pool.submit(anchor_players.open_player, specs[i], self.engine_path,
                                   reuse.get(i)) for i in fresh]  # fmt: skip
        for i, future in zip(fresh, opening, strict=True):
            if future.exception() is None:  # every engine started is ended, even if one failed
                got[i] = future.result()
                engine = engine_of(got[i])
                if engine is not None and i not in reuse:
                    self.engines.append(engine)
            elif i in reuse:  # EnginePlayer ended it
                self.engines.remove(reuse[i])
        for future in opening:
            future.result()  # the first error, if any
        return got  # type: ignore[return-value]

    def give(self, spec: AnchorSpec, player: Player) -> None:
        self.free[spec.name].append(player)

    def retire(self, spec: AnchorSpec) -> None:
        """The anchor's games are over: its engines wait for the next anchors."""
        for player in self.free.pop(spec.name, []):
            engine = engine_of(player)
            if engine is not None:
                self.idle.append(engine)

    def close(self) -> None:
        for engine in self.engines:
            engine.quit()
        self.engines.clear()
        self.idle.clear()


ENGINE_KINDS = ("stockfish", "stockfish_elo")


def engine_of(player: Player) -> chess.engine.SimpleEngine | None:
    """The engine an anchor player (diluted or not) plays with; None for the others."""
    return getattr(getattr(player, "inner", player), "engine", None)


def default_engines() -> int:
    """Engines thinking at once: the cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def play_anchors_together(
    player: ModelPlayer,
    specs: Sequence[AnchorSpec],
    settings: ladder.LadderSettings,
    engine_path: str,
    games_per_anchor: int,
    *,
    on_anchor: Callable[[AnchorSpec, list[dict[str, Any]]], None] | None = None,
    deadline: float | None = None,
    max_in_flight: int = MAX_IN_FLIGHT,
    engines: int | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """``player`` against each anchor of ``specs``, ``games_per_anchor`` games each, as
    ``ladder.play_anchor`` plays them (the module docstring says how they are played at once):
    each anchor's rows in its games' order, a game not started by ``deadline`` (monotonic)
    left out. ``engines``: anchors' moves computed at once (default: this process's cores);
    ``on_anchor(spec, rows)`` as each anchor's last game ends."""
    if max_in_flight < 1:
        raise ValueError(f"max_in_flight must be at least 1, not {max_in_flight}")
    queue = collections.deque(
        (spec, plan)
        for spec in specs
        for plan in ladder.pair_plan(settings, player.name, spec.name, games_per_anchor)
    )
    left = collections.Counter(spec.name for spec, _ in queue)
    rows: dict[str, dict[int, dict[str, Any]]] = {spec.name: {} for spec in specs}
    stock = AnchorStock(engine_path)
    flying: list[Flight] = []

    def ended(spec: AnchorSpec) -> None:
        left[spec.name] -= 1
        if left[spec.name] == 0:
            stock.retire(spec)
            if on_anchor is not None:
                on_anchor(spec, [rows[spec.name][i] for i in sorted(rows[spec.name])])

    try:
        with concurrent.futures.ThreadPoolExecutor(engines or default_engines()) as pool:
            while queue or flying:
                if deadline is not None and time.monotonic() >= deadline:
                    while queue:  # no game starts at or after the deadline
                        ended(queue.popleft()[0])
                room = min(len(queue), max_in_flight - len(flying))
                flying += _start(player, [queue.popleft() for _ in range(room)], stock)
                for flight in [
                    f for f in flying if not ladder.game_on(f.board, settings.max_plies)
                ]:
                    flying.remove(flight)
                    rows[flight.spec.name][flight.plan.index] = ladder.game_row(
                        flight.white, flight.black, flight.board
                    )
                    stock.give(flight.spec, flight.anchor)
                    ended(flight.spec)
                if flying:
                    _step(player, flying, pool)
    finally:
        stock.close()
    return {name: [by_index[i] for i in sorted(by_index)] for name, by_index in rows.items()}


def _start(
    player: ModelPlayer,
    starts: list[tuple[AnchorSpec, ladder.GamePlan]],
    stock: AnchorStock,
) -> list[Flight]:
    """New games in flight: each with an anchor player (opened or reused) and a model twin,
    both told of the game as ``ladder.play_game`` tells them."""
    out = []
    for (spec, plan), anchor in zip(starts, stock.take([s for s, _ in starts]), strict=True):
        flight = Flight(spec, plan, player.twin(), anchor, chess.Board())
        flight.board = ladder.start_game(flight.white, flight.black, seed=plan.seed,
                                         opening=plan.opening)  # fmt: skip
        out.append(flight)
    return out


def _step(player: ModelPlayer, flying: list[Flight], pool: concurrent.futures.Executor) -> None:
    """One move in every game in flight: the anchors' on threads, meanwhile the model's in one
    batch."""
    anchor_turn = [f for f in flying if f.to_move() is f.anchor]
    thinking = [pool.submit(f.anchor.move, f.board) for f in anchor_turn]
    try:
        model_turn = [f for f in flying if f.to_move() is f.model]
        if model_turn:
            moves = player.moves([f.model for f in model_turn], [f.board for f in model_turn])
            for flight, move in zip(model_turn, moves, strict=True):
                ladder.push_move(flight.model, flight.board, move)
    finally:
        concurrent.futures.wait(thinking)  # no engine is left thinking after an error
    for flight, future in zip(anchor_turn, thinking, strict=True):
        ladder.push_move(flight.anchor, flight.board, future.result())
