"""The model's games against the anchors, all in flight together (``chesslm.ladder.inflight``):
the same rows as the sequential path (``ladder.play_anchors``, one game at a time) with real
Stockfish, the tiny model playing argmax; the deadline; every engine closed."""

from __future__ import annotations

import dataclasses
import time

import psutil
import pytest
import torch

from chesslm.ladder import inflight
from chesslm.ladder import players as anchors
from chesslm.ladder import round_robin as ladder
from chesslm.ladder.players import AnchorSpec
from chesslm.model import gpt

SPECS = (
    AnchorSpec("random", "random"),
    AnchorSpec("sf-n1-r50", "stockfish", nodes=1, random_share=0.5),
    AnchorSpec("greedy-r50", "greedy", random_share=0.5),
    AnchorSpec("sf-n64", "stockfish", nodes=64),
)


def engine_path() -> str:
    try:
        return anchors.find_engine("stockfish")
    except FileNotFoundError:
        pytest.skip("stockfish is not installed")


def settings(**change) -> ladder.LadderSettings:
    fixed = AnchorSpec("elo1350", "stockfish_elo", nodes=8, elo=1350)  # only to be valid
    base = ladder.LadderSettings(anchors=(*SPECS, fixed), max_plies=40, opening_plies=2, seed=5)
    return dataclasses.replace(base, **change)


def model() -> anchors.ModelPlayer:
    torch.manual_seed(0)
    return anchors.ModelPlayer(gpt.build("tiny").eval(), name="model")


def engines_running() -> list[psutil.Process]:
    return [c for c in psutil.Process().children(recursive=True) if "stockfish" in c.name()]


def test_games_in_flight_are_the_sequential_games_move_for_move() -> None:
    path, s, player = engine_path(), settings(), model()
    sequential = {spec.name: ladder.play_anchor(player, spec, s, path, 4) for spec in SPECS}
    seen = []
    together = inflight.play_anchors_together(
        player, SPECS, s, path, 4, on_anchor=lambda spec, rows: seen.append((spec.name, rows))
    )
    assert together == sequential
    assert sorted(seen) == sorted(sequential.items())
    # both colours, games that ended before the cut and games cut at it
    rows = [r for by in sequential.values() for r in by]
    assert {r["white"] for r in rows} == {"model", *sequential}
    assert {r["adjudicated"] for r in rows} == {True, False}
    # two games at a time: games start as others end, anchors' players are reused
    assert inflight.play_anchors_together(player, SPECS, s, path, 4, max_in_flight=2) == together
    assert not engines_running()


def test_a_sampling_model_draws_each_games_moves_from_that_games_seed() -> None:
    path, s = engine_path(), settings(max_plies=16)
    player = model()
    player.sample = True
    specs = SPECS[:2]
    sequential = {spec.name: ladder.play_anchor(player, spec, s, path, 4) for spec in specs}
    assert inflight.play_anchors_together(player, specs, s, path, 4, engines=1) == sequential
    assert len({r["moves"] for r in sequential["random"]}) == 4


def test_no_game_starts_at_the_deadline_and_every_engine_is_closed_on_an_error() -> None:
    path, s, player = engine_path(), settings(), model()
    seen = []
    at_once = inflight.play_anchors_together(
        player, SPECS, s, path, 2, deadline=time.monotonic(), on_anchor=lambda a, r: seen.append(a)
    )
    assert at_once == {spec.name: [] for spec in SPECS} and seen == list(SPECS)
    # the third anchor cannot be opened: the two engines opened before it are closed
    wrong = AnchorSpec("elo9999", "stockfish_elo", nodes=8, elo=9999)
    with pytest.raises(ValueError, match="UCI_Elo 9999 is outside this engine's"):
        inflight.play_anchors_together(player, (SPECS[1], SPECS[3], wrong), s, path, 2)
    assert not engines_running()
    with pytest.raises(ValueError, match="max_in_flight must be at least 1, not 0"):
        inflight.play_anchors_together(player, SPECS, s, path, 2, max_in_flight=0)
