"""chesslm.compare: the statistics with known answers, the alignment's refusals, Allie's shape,
the settings' checks."""

from __future__ import annotations

import numpy as np
import pytest

from chesslm.compare import stats
from chesslm.compare.positions import Aligned, align
from chesslm.compare.scores import COLUMNS, PROTOCOL_PREFIX
from chesslm.compare.settings import Comparison
from chesslm.match import metrics, protocols


def aligned(game, runs, elo=None) -> Aligned:
    game = np.asarray(game)
    n = len(game)
    elo = np.full(n, 1500) if elo is None else np.asarray(elo)
    # every metric of the table; those a test does not give (top5) as its top-3
    cols = {r: {k: np.asarray(v.get(k, v["top3"]), dtype=float) for k in metrics.NAMES}
            for r, v in runs.items()}  # fmt: skip
    legal = np.full(n, 30)
    return Aligned(
        game, np.arange(n) % 40, elo, elo, legal, {"all": np.ones(n, bool)}, cols, 0, "x"
    )


def row(rows, kind, run, metric, group="all"):
    (r,) = [x for x in rows if (x["kind"], x["run"], x["metric"], x["group"]) ==
            (kind, run, metric, group)]  # fmt: skip
    return r


def test_identical_runs_differ_by_zero_with_a_zero_width_interval() -> None:
    rng = np.random.default_rng(1)
    game = np.repeat(np.arange(40), 10)
    run = {"top1": rng.random(400) < 0.4, "top3": rng.random(400) < 0.7, "nll": rng.random(400)}
    rows = stats.summarise(aligned(game, {"a": run, "b": dict(run)}), "a", draws=300, seed=0)
    for metric in ("top1", "top3", "nll"):
        r = row(rows, "paired", "b", metric)
        assert r["value"] == 0 and r["low"] == 0 and r["high"] == 0
        own = row(rows, "metric", "b", metric)
        assert own["high"] - own["low"] > 0.01  # the runs themselves are uncertain


def test_paired_interval_is_much_narrower_than_the_unpaired() -> None:
    """Games vary a lot in difficulty; run b gets 2 more moves right per 100 positions, on
    every game alike: the difference is sure, each run's own value is not."""
    rng = np.random.default_rng(2)
    G, per = 60, 50
    game = np.repeat(np.arange(G), per)
    hard = np.repeat(rng.random(G), per)  # per-game accuracy from 0 to 1
    u = rng.random(G * per)
    a = u < hard
    b = u < hard + 0.02
    runs = {"a": {"top1": a, "top3": a, "nll": 1.0 - a},
            "b": {"top1": b, "top3": b, "nll": 1.0 - b}}  # fmt: skip
    rows = stats.summarise(aligned(game, runs), "a", draws=1000, seed=0)
    paired = row(rows, "paired", "b", "top1")
    own_a, own_b = row(rows, "metric", "a", "top1"), row(rows, "metric", "b", "top1")
    assert paired["low"] > 0  # b is better, surely
    paired_width = paired["high"] - paired["low"]
    assert paired_width * 5 < own_a["high"] - own_a["low"]
    # unpaired: the two runs' intervals overlap, they would not tell the runs apart
    assert own_b["low"] < own_a["high"]


def test_the_bootstrap_resamples_games_not_positions() -> None:
    """Ten games, each all right or all wrong: resampling positions would give a narrow
    interval around 0.5; resampling whole games gives the spread of 10 coin flips."""
    game = np.repeat(np.arange(10), 100)
    right = np.repeat(np.arange(10) % 2 == 0, 100)
    run = {"top1": right, "top3": right, "nll": 1.0 - right}
    r = row(stats.summarise(aligned(game, {"a": run}), "a", draws=2000, seed=0),
            "metric", "a", "top1")  # fmt: skip
    assert r["value"] == 0.5
    # games: sd of a mean of 10 Bernoulli(0.5) = 0.158, interval about [0.2, 0.8];
    # positions would give sd 0.016, about [0.47, 0.53]
    assert r["low"] <= 0.25 and r["high"] >= 0.75


def test_a_group_of_few_games_has_no_interval() -> None:
    game = np.repeat(np.arange(5), 4)
    run = {"top1": np.ones(20), "top3": np.ones(20), "nll": np.ones(20)}
    r = row(stats.summarise(aligned(game, {"a": run}), "a", draws=50, seed=0),
            "metric", "a", "top1")  # fmt: skip
    assert r["games"] == 5 and r["low"] is None and r["high"] is None


def test_allie_shape_gives_equal_positions_per_band_and_drops_unknown_ratings() -> None:
    elo = np.array([1000] * 50 + [1500] * 30 + [2100] * 80 + [2500] * 12 + [-1] * 9)
    n = len(elo)
    run = {"top1": np.zeros(n), "top3": np.zeros(n), "nll": np.zeros(n)}
    a = aligned(np.arange(n) // 3, {"a": run}, elo)
    sampled, info = stats.allie_sample(a, per_band=None, seed=3, key="comparisons.x")
    bands = stats.elo_band(sampled.mover_elo)
    assert info["positions_per_band"] == 12 and info["empty_bands"] == []
    assert {b: int((bands == b).sum()) for b in set(bands)} == {
        "<1400": 12,
        "1400-2000": 12,
        "2000-2400": 12,
        "2400+": 12,
    }
    again, _ = stats.allie_sample(a, per_band=None, seed=3, key="comparisons.x")
    assert np.array_equal(again.game, sampled.game)  # seeded: the same draw
    fixed, info = stats.allie_sample(a, per_band=10, seed=3, key="comparisons.x")
    assert len(fixed.game) == 40
    with pytest.raises(
        ValueError, match=r"comparisons.x.positions_per_band is 20, but band 2400\+"
    ):
        stats.allie_sample(a, per_band=20, seed=3, key="comparisons.x")


def test_allie_shape_leaves_an_empty_band_out_and_says_so() -> None:
    elo = np.array([1000] * 20 + [1500] * 7 + [2100] * 30)
    run = {"top1": np.zeros(57), "top3": np.zeros(57), "nll": np.zeros(57)}
    sampled, info = stats.allie_sample(aligned(np.arange(57), {"a": run}, elo),
                                       per_band=None, seed=0, key="k")  # fmt: skip
    assert info["empty_bands"] == ["2400+"] and len(sampled.game) == 21


def table(game_ids, game, ply) -> dict[str, np.ndarray]:
    n = len(game)
    t = {c: np.zeros(n) for c in COLUMNS}
    t |= {"game": np.asarray(game), "ply": np.asarray(ply), "game_ids": np.asarray(game_ids)}
    t |= {PROTOCOL_PREFIX + p: np.ones(n, bool) for p in protocols.PROTOCOLS}
    return t


def test_runs_on_other_positions_are_refused_naming_the_run() -> None:
    ids = np.array([b"g1", b"g2"], dtype="S16")
    ok = table(ids, [0, 0, 1], [0, 1, 0])
    assert len(align({"a": ok, "b": table(ids, [0, 0, 1], [0, 1, 0])}).game) == 3
    with pytest.raises(ValueError, match="run b: scored on other validation games than run a"):
        align({"a": ok, "b": table(np.array([b"g1", b"g3"], dtype="S16"), [0, 0, 1], [0, 1, 0])})
    with pytest.raises(ValueError, match="run c: positions differ from run a's"):
        align({"a": ok, "c": table(ids, [0, 1], [0, 0])})


def test_settings_name_the_bad_key() -> None:
    raw = {"runs": ["a", "x"], "dataset": "d"}
    with pytest.raises(
        ValueError, match=r"comparisons.c.runs names 'x', which is not a run \(known: a, b\)"
    ):
        Comparison.from_config("c", raw, runs=["a", "b"], datasets=["d"])
    raw = {"runs": ["a"], "dataset": "e"}
    with pytest.raises(ValueError, match="comparisons.c.dataset is 'e', which is not a dataset"):
        Comparison.from_config("c", raw, runs=["a", "b"], datasets=["d"])
    raw = {"runs": ["a"], "dataset": "d", "shape": "maia"}
    with pytest.raises(ValueError, match="comparisons.c.shape is 'maia', not one of none, allie"):
        Comparison.from_config("c", raw, runs=["a", "b"], datasets=["d"])
    c = Comparison.from_config("c", {"runs": ["b", "a"], "dataset": "d"}, runs=["a", "b"],
                               datasets=["d"])  # fmt: skip
    assert c.baseline == "b" and Comparison.from_dict(c.as_dict()) == c
