"""The Elo ladder: the anchors play real, legal games (Stockfish through python-chess), the
fit recovers known ratings from games simulated at those ratings, and the ladder file says
when it still holds."""

from __future__ import annotations

import dataclasses
import json
import math
import time

import chess
import numpy as np
import pytest
import torch

from chesslm import seal
from chesslm.ladder import elo
from chesslm.ladder import players as anchors
from chesslm.ladder import round_robin as ladder
from chesslm.ladder.players import AnchorSpec
from chesslm.model import gpt

ENGINE = "/usr/games/stockfish"


def engine_path() -> str:
    try:
        return anchors.find_engine("stockfish")
    except FileNotFoundError:
        pytest.skip("stockfish is not installed")


# ------------------------------------------------------------------ the fit, known answers


def simulate(true: dict[str, float], games: int, seed: int) -> list[dict]:
    """A round robin of ``games`` games per pair, each game's score drawn so that its mean is
    the logistic expectation at the true ratings (a draw a third as likely as the rest)."""
    rng = np.random.default_rng(seed)
    names, rows = sorted(true), []
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            p = 1 / (1 + 10 ** ((true[b] - true[a]) / 400))
            draw = min(p, 1 - p) / 1.5
            for k in range(games):
                u = rng.random()
                score = 1.0 if u < p - draw / 2 else 0.5 if u < p + draw / 2 else 0.0
                white, black = (a, b) if k % 2 == 0 else (b, a)
                rows.append({"white": white, "black": black,
                             "score": score if white == a else 1 - score})  # fmt: skip
    return rows


TRUE = {"random": 300.0, "greedy": 800.0, "sf1": 1500.0, "elo1350": 1350.0, "elo2000": 2000.0}
FIXED = {"elo1350": 1350.0, "elo2000": 2000.0}


def test_a_75_percent_score_is_400_log10_3_above_the_opponent() -> None:
    rows = [{"white": "b", "black": "a", "score": s} for s in (1, 1, 1, 0)]
    expected = 1500 + 400 * math.log10(3)  # 190.85 above
    joint = elo.fit_ratings(rows, {"a": 1500.0})["ratings"]["b"]
    assert joint["elo"] == pytest.approx(expected, abs=1e-6)
    # observed information of 4 games at p = 3/4: 4 p (1 - p) / (400 / ln 10)^2
    assert joint["se"] == pytest.approx(400 / math.log(10) / math.sqrt(4 * 0.75 * 0.25))
    one = elo.fit_player(rows, {"a": 1500.0}, player="b")
    assert one["elo"] == pytest.approx(expected, abs=0.01)
    assert one["low"] < one["elo"] < one["high"] and one["bound"] is None


def test_the_joint_fit_recovers_simulated_ratings_within_intervals_that_shrink() -> None:
    se = {}
    for games in (100, 400):
        fit = elo.fit_ratings(simulate(TRUE, games, seed=1), FIXED)["ratings"]
        for name, truth in TRUE.items():
            r = fit[name]
            assert r["low"] <= truth <= r["high"], (games, name, r)
            assert r["fixed"] == (name in FIXED)
        se[games] = {n: fit[n]["se"] for n in TRUE if n not in FIXED}
    for name, wide in se[100].items():
        assert 0.4 < se[400][name] / wide < 0.6, name  # 1 / sqrt(4)


def test_the_intervals_cover_the_truth_about_95_percent_of_the_time() -> None:
    true = {"a": 1100.0, "c": 1800.0, **FIXED}  # close: no pair one-sided
    covered, trials = 0, 100
    for seed in range(trials):
        fit = elo.fit_ratings(simulate(true, 30, seed=seed), FIXED)["ratings"]
        covered += all(r["low"] <= true[n] <= r["high"] for n, r in fit.items())
    # two free ratings jointly: about 0.95^2 at least
    assert 0.85 <= covered / trials <= 0.99


def test_a_players_interval_widened_by_the_ladders_uncertainty_covers_the_truth() -> None:
    """A player of 1500 with many games against a ladder fitted from few: its own interval
    is too narrow for the ladder's error; widened by the ladder's covariance it is not."""
    true = {"a": 1100.0, "c": 1800.0, **FIXED}
    plain, total, trials = 0, 0, 100
    for seed in range(trials):
        fit = elo.fit_ratings(simulate(true, 16, seed=seed), FIXED)
        ratings = {n: r["elo"] for n, r in fit["ratings"].items()}
        rows = [r for r in simulate({**true, "b": 1500.0}, 200, seed=1000 + seed)
                if "b" in (r["white"], r["black"])]  # fmt: skip
        one = elo.fit_player(rows, ratings, player="b", covariance=fit["covariance"])
        assert one["low_total"] < one["low"] < one["elo"] < one["high"] < one["high_total"]
        plain += one["low"] <= 1500 <= one["high"]
        total += one["low_total"] <= 1500 <= one["high_total"]
    assert plain / trials < 0.85 and 0.90 <= total / trials <= 0.99, (plain, total)


def test_one_draw_against_the_weakest_anchor_gives_a_finite_rating() -> None:
    ratings = {"random": -200.0, "greedy": 400.0, "elo1350": 1350.0}
    rows = [{"white": "model", "black": name, "score": 0.0} for name in ratings for _ in range(8)]
    lost = elo.fit_player(rows, ratings)
    assert lost["elo"] is None and lost["bound"] == "below" and lost["low"] is None
    assert lost["high"] < -200 and lost["text"].startswith("below ")
    rows[0] = {"white": "random", "black": "model", "score": 0.5}
    drew = elo.fit_player(rows, ratings)
    assert drew["bound"] is None and drew["low"] < drew["elo"] < drew["high"]
    assert drew["high"] > lost["high"]  # half a point more: a higher upper bound
    assert all(math.isfinite(drew[k]) for k in ("elo", "low", "high"))
    assert drew["elo"] < -200  # half a point of 24 games: far below the weakest anchor
    won = elo.fit_player([{**r, "score": 1 - r["score"]} for r in rows], ratings)
    assert won["bound"] is None  # one draw is not a win: still finite
    only = [{"white": "model", "black": "greedy", "score": 1.0}] * 3
    assert elo.fit_player(only, ratings)["bound"] == "above"


def test_a_player_who_lost_every_linking_game_is_named_not_given_a_rating() -> None:
    rows = simulate({"greedy": 800.0, "elo1350": 1350.0}, 20, seed=0)
    rows += [{"white": "random", "black": "greedy", "score": 0.0}] * 4
    with pytest.raises(ladder.LadderError, match=r"random \(runs off below\)"):
        elo.fit_ratings(rows, {"elo1350": 1350.0})
    with pytest.raises(ladder.LadderError, match="not on the ladder"):
        elo.fit_player(rows, {"elo1350": 1350.0}, player="random")


def test_the_prior_makes_a_one_sided_pair_finite_and_is_one_draw_of_the_gap() -> None:
    """One anchor won all 4 games against the fixed one: no finite maximum without the prior;
    with one virtual draw the pair reads 4.5 of 5, the closed form 400 log10(4.5 / 0.5)."""
    rows = [{"white": "sf1", "black": "elo1350", "score": 1.0}] * 4
    with pytest.raises(ladder.LadderError, match=r"sf1 \(runs off above\)"):
        elo.fit_ratings(rows, {"elo1350": 1350.0})
    fit = elo.fit_ratings(rows, {"elo1350": 1350.0}, prior_draws=1.0)
    sf1 = fit["ratings"]["sf1"]
    assert sf1["elo"] == pytest.approx(1350 + 400 * math.log10(9), abs=1e-6)
    assert sf1["games"] == 4 and sf1["score"] == 1.0  # the table counts real games only
    assert math.isfinite(sf1["low"]) and math.isfinite(sf1["high"])
    assert fit["prior"]["virtual_draws_per_pair"] == 1.0 and "virtual draw" in fit["method"]
    # a pair that never met gets no virtual draw: a player linked to nothing stays refused
    lone = rows + [{"white": "x", "black": "y", "score": 1.0}]
    with pytest.raises(ladder.LadderError, match="no finite rating for x"):
        elo.fit_ratings(lone, {"elo1350": 1350.0}, prior_draws=1.0)


# ------------------------------------------------------------------ anchors


def replay(row: dict) -> chess.Board:
    board = chess.Board()
    for uci in row["moves"].split():
        move = chess.Move.from_uci(uci)
        assert board.is_legal(move), (row["white"], row["black"], uci)
        board.push(move)
    return board


def test_the_random_mover_is_reproducible_from_its_seed() -> None:
    def game(seed: int) -> str:
        a, b = anchors.RandomPlayer("a"), anchors.RandomPlayer("b")
        return ladder.play_game(a, b, seed=seed, opening=[], max_plies=80)["moves"]

    assert game(3) == game(3)
    assert game(3) != game(4)


def material(board: chess.Board, colour: chess.Color) -> int:
    return sum(
        anchors.VALUES[piece.piece_type]
        for piece in board.piece_map().values()
        if piece.color == colour and piece.piece_type != chess.KING
    )


def after(board: chess.Board, move: chess.Move) -> chess.Board:
    out = board.copy(stack=False)
    out.push(move)
    return out


def swing(board: chess.Board, move: chess.Move) -> int:
    """Material ``move`` wins: the opponent's lost and the mover's gained (a promotion)."""
    us, them, next_board = board.turn, not board.turn, after(board, move)
    lost = material(board, them) - material(next_board, them)
    return lost + material(next_board, us) - material(board, us)


def test_the_greedy_mover_mates_first_then_wins_the_most_material() -> None:
    """Over the positions of random games: a mate in one whenever there is one, else a move
    that wins as much material (counted on the board: theirs lost, ours promoted) as any."""
    greedy, mover, checked = anchors.GreedyPlayer(), anchors.RandomPlayer(), 0
    for seed in range(4):
        mover.new_game(seed)
        greedy.new_game(seed)
        board = chess.Board()
        while not board.is_game_over() and checked < 50 * (seed + 1):
            choice = greedy.move(board)
            mates = [m for m in board.legal_moves if after(board, m).is_checkmate()]
            if mates:
                assert choice in mates
            else:
                assert swing(board, choice) == max(swing(board, m) for m in board.legal_moves)
            checked += 1
            board.push(mover.move(board))
    assert checked == 200  # random games last far longer than 50 plies


def test_every_anchor_plays_legal_games_that_replay_but_for_the_uci_elo_anchor() -> None:
    path = engine_path()
    specs = (
        AnchorSpec("random", "random"),
        AnchorSpec("greedy-r50", "greedy", random_share=0.5),
        AnchorSpec("sf-n1-r50", "stockfish", nodes=1, random_share=0.5),
        AnchorSpec("sf-n16", "stockfish", nodes=16),
        AnchorSpec("elo1350", "stockfish_elo", nodes=16, elo=1350),
    )
    settings = ladder.LadderSettings(anchors=specs, games_per_pair=2, max_plies=40, seed=5)
    rows = ladder.play_round_robin(settings, path)
    assert len(rows) == 2 * len(settings.pairs()) == 2 * 10  # every pair but none fixed-fixed
    for row in rows:
        board = replay(row)
        over = board.is_game_over(claim_draw=True)
        assert row["adjudicated"] == (not over) and row["plies"] == len(board.move_stack)
        assert row["result"] == (board.result(claim_draw=True) if over else "1/2-1/2")
    again = ladder.play_round_robin(settings, path, workers=2)  # and in any order
    for first, second in zip(rows, again, strict=True):
        replayable = "elo1350" not in (first["white"], first["black"])
        assert not replayable or first["moves"] == second["moves"], first


def test_a_game_plays_to_its_end_without_a_ply_cap() -> None:
    greedy, rnd = anchors.GreedyPlayer(), anchors.RandomPlayer()
    row = ladder.play_game(greedy, rnd, seed=0, opening=[], max_plies=10_000)
    assert not row["adjudicated"] and replay(row).is_game_over(claim_draw=True)


def test_the_model_plays_through_the_same_interface() -> None:
    torch.manual_seed(0)
    model = anchors.ModelPlayer(gpt.build("tiny").eval())
    rnd = anchors.RandomPlayer()
    rows = [ladder.play_game(model, rnd, seed=s, opening=[], max_plies=12) for s in range(2)]
    assert all(len(replay(r).move_stack) == 12 for r in rows)
    # argmax over the same start: the same first move, whatever the opponent's seed
    assert rows[0]["moves"].split()[0] == rows[1]["moves"].split()[0]


# ------------------------------------------------------------------ the ladder file


def tiny_settings(**change) -> ladder.LadderSettings:
    """Games cut at 3 plies: every one a draw, so every rating is the fixed one (the earliest
    mate is at ply 4, the fool's mate, which a random mover met Stockfish into at 6 plies)."""
    specs = (
        AnchorSpec("random", "random"),
        AnchorSpec("sf-n1", "stockfish", nodes=1),
        AnchorSpec("elo1350", "stockfish_elo", nodes=8, elo=1350),
    )
    return dataclasses.replace(
        ladder.LadderSettings(anchors=specs, games_per_pair=2, max_plies=3, opening_plies=0),
        **change,
    )


def test_the_ladder_file_round_trips_and_knows_when_it_is_stale(tmp_path) -> None:
    path = engine_path()
    settings = tiny_settings()
    built = ladder.build_ladder(settings, path)
    target = tmp_path / "ladder.json"
    ladder.write_ladder(target, built)
    stored = ladder.read_ladder(target)
    assert stored["engine"]["id_name"].startswith("Stockfish")
    assert stored["reproducible"]["random_anchors"] == ["elo1350"]
    assert ladder.ladder_ratings(stored) == pytest.approx(
        {"random": 1350, "sf-n1": 1350, "elo1350": 1350}
    )
    identity = ladder.engine_identity(path)
    assert ladder.is_current(stored, settings, identity)
    assert not ladder.is_current(stored, tiny_settings(games_per_pair=4), identity)
    assert not ladder.is_current(stored, settings, {**identity, "sha256": "0" * 64})
    assert not list(tmp_path.glob("*.tmp"))
    torch.manual_seed(0)
    model = anchors.ModelPlayer(gpt.build("tiny").eval())
    rows = ladder.play_anchors(model, settings, path, games_per_anchor=2)
    assert [(r["white"], r["black"]) for r in rows[:2]] == [
        ("model", "random"),
        ("random", "model"),
    ]
    assert len(rows) == 6 and all(r["adjudicated"] for r in rows)
    assert ladder.play_anchors(model, settings, path, 2, deadline=time.monotonic()) == []
    fit = elo.fit_player(rows, ladder.ladder_ratings(stored))
    assert fit["elo"] == pytest.approx(1350) and fit["low"] < 1350 < fit["high"]


def test_a_broken_ladder_file_is_refused_naming_the_file_and_key(tmp_path) -> None:
    target = tmp_path / "ladder.json"
    target.write_text(json.dumps(seal.seal({"format": ladder.FORMAT, "key": "k", "settings": {},
                                            "engine": {}, "games": []})))  # fmt: skip
    with pytest.raises(ladder.LadderError, match=rf"{target}: ladder file has no 'ratings'"):
        ladder.read_ladder(target)
    with pytest.raises(ValueError, match="kind 'engine' is not one of"):
        ladder.LadderSettings.from_dict({"anchors": [{"name": "x", "kind": "engine"}]})
    with pytest.raises(ladder.LadderError, match="none is a stockfish_elo anchor"):
        ladder.LadderSettings(anchors=(AnchorSpec("random", "random"),))


def test_the_pairs_are_neighbours_within_reach_and_never_two_fixed_anchors() -> None:
    settings = ladder.LadderSettings(reach=2)
    names = [a.name for a in settings.anchors]
    pairs = [(names.index(a.name), names.index(b.name)) for a, b in settings.pairs()]
    assert all(0 < j - i <= 2 for i, j in pairs)
    assert not any(settings.anchors[i].fixed and settings.anchors[j].fixed for i, j in pairs)
    assert len(ladder.LadderSettings().pairs()) == 66 - 6  # 12 anchors, 4 of them fixed
    with pytest.raises(ladder.LadderError, match="unexpected keyword argument 'games'"):
        ladder.LadderSettings.from_dict({"games": 4})
