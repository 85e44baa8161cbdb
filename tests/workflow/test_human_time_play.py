"""Human time in play (issue 48 item 3): the scorer feeds a timed model each validation game's
clocks (its one branched pass equals the oracle's plain passes with the same rows), reads the
think-time head at each position, games without clocks are fed "unknown" (scorer, decoder and
plain passes alike), and the think-time measure against its three baselines, each checked
against a direct computation (the time table against a pandas groupby of the train moves), and
summary.md's think-time section read back from the sealed record."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from chesslm import seal
from chesslm.data import clocks, metadata, tokens
from chesslm.data.cache import TokenCache
from chesslm.match import matching, outcome, think_table, think_time
from chesslm.model import gpt, human_time
from chesslm.record.move_match import MoveMatch, read_move_match
from chesslm.report.play_section import think_time_section
from chesslm.scorer import branched, decode, prepare, scoring, times
from chesslm.scorer.oracle import oracle_scores
from tests.playkit import cpu_evaluator


def timed_net(conditioning: str = "none") -> gpt.GPT:
    torch.manual_seed(0)
    return gpt.build("tiny", time_inputs=True, think_time=True, conditioning=conditioning).eval()


def game_rows(cache: TokenCache, g: int) -> np.ndarray:
    meta = cache.metadata("validation")
    return times.of_game(meta.clocks(g), meta["base_seconds"][g], meta["increment_seconds"][g])


def moves_of(game: np.ndarray) -> list:
    plies = (len(game) - 2) // 3
    return [tokens.decode_move([int(t) for t in game[1 + 3 * k : 4 + 3 * k]]) for k in range(plies)]


def test_the_scorer_feeds_a_games_clocks_as_the_oracle_does(clocked_cache: Path) -> None:
    cache = TokenCache(clocked_cache)
    net = timed_net()
    g = 1  # a clocked validation game (every 5th has its readings dropped: games 0 and 5)
    game, rows = np.asarray(cache.validation[g]), game_rows(cache, g)
    assert (rows[2:, 2] != 1 + 2 * human_time.VALUES).all()  # its mover clocks are known
    codes, offsets = prepare.game_tables(game)
    inp = branched.game_input(game, codes, offsets, time=rows)
    scored = scoring.score(net, branched.build_batch([inp], "cpu"))
    plies = [0, 3, 8, 15]
    oracle = oracle_scores(net, moves_of(game), set(plies), time=rows)
    moves = moves_of(game)
    for k in plies:
        assert float(scored.played_logp[k]) == pytest.approx(oracle[k][moves[k]], abs=1e-5)
    # the head's distribution at each position: a plain pass's at BOS and each last token
    x = torch.tensor(game[None, :-1], dtype=torch.long)
    full = torch.zeros((1, x.size(1), 4), dtype=torch.long)
    full[0, ::3] = torch.from_numpy(rows)
    with torch.no_grad():
        _, think = net(x, time=full, think_time=True)
    expect = think[0, ::3][: len(moves)].softmax(-1)
    torch.testing.assert_close(scored.think, expect, rtol=1e-4, atol=1e-6)
    # without the clocks the game is scored with every time unknown, not without time inputs
    blind = scoring.score(net, branched.build_batch([branched.game_input(game, codes, offsets)],
                                                    "cpu"))  # fmt: skip
    unknown = branched.game_input(game, codes, offsets, time=times.unknown(len(rows)))
    same = scoring.score(net, branched.build_batch([unknown], "cpu"))
    torch.testing.assert_close(blind.played_logp, same.played_logp)
    assert not torch.allclose(blind.played_logp, scored.played_logp)


def test_free_running_games_feed_unknown_clocks_step_by_step() -> None:
    """The decoder (self-play's KV cache) and a plain pass with unknown rows agree, with a
    rating prefix: the positions are counted from BOS."""
    net = timed_net("elo")
    x = torch.tensor([[80, 110, tokens.BOS, 12, 28, tokens.PROMO_NONE, 52, 36, tokens.PROMO_NONE]])
    pos = torch.arange(x.size(1))
    rows = times.input_rows(net, pos)
    assert rows[:, 0].nonzero().flatten().tolist() == [2, 5, 8]  # BOS and each last token
    with torch.no_grad():
        plain = net(x, time=rows[None])
    dec = decode.Decoder(net, 1, x.size(1))
    stepped = torch.cat([dec.step(x[:, :4], 0), dec.step(x[:, 4:], 4)], 1)
    torch.testing.assert_close(stepped, plain, rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module")
def measured(clocked_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    net = timed_net()
    ev = cpu_evaluator(net, clocked_cache, tmp_path_factory.mktemp("state"))
    assert ev.run(float("inf"))
    pos = ev.positions()
    meta, _ = matching.load_metadata(clocked_cache, ev.games.offsets)
    features = matching.position_features(pos, meta)
    keeps = {"all": np.ones(len(pos["game"]), dtype=bool)}
    band = (matching.elo_band(features["elo"]), [*(b for *_, b in matching.BANDS), "unknown"])
    section = think_time.section(pos, meta, keeps, band, features["speed"], clocked_cache,
                                 replicates=50, seed=1, min_games=2)  # fmt: skip
    return {"net": net, "ev": ev, "pos": pos, "meta": meta, "section": section}


def test_evaluation_keeps_the_think_time_distribution_of_every_position(measured: dict) -> None:
    pos, ev = measured["pos"], measured["ev"]
    assert pos[matching.THINK_FIELD].shape == (len(pos["game"]), human_time.BINS)
    np.testing.assert_allclose(pos[matching.THINK_FIELD].sum(axis=1), 1.0, rtol=1e-5)
    g = int(pos["game"][0])
    assert (ev.game(g).time == game_rows(TokenCache(ev.cache.directory), g)).all()


def test_the_measure_is_the_direct_computation_beside_both_baselines(
    measured: dict, clocked_cache: Path
) -> None:
    pos, meta, section = measured["pos"], measured["meta"], measured["section"]
    overall = next(r for r in section["table"] if r["grouping"] == "overall")
    # the times taken: the clock rule on each scored position's game
    taken, left = [], []
    for g, ply in zip(pos["game"], pos["ply"], strict=True):
        clock = meta["clock"][meta["ply_offsets"][g] : meta["ply_offsets"][g + 1]]
        control = {
            "base": int(meta["base_seconds"][g]),
            "increment": int(meta["increment_seconds"][g]),
        }
        taken.append(clocks.spent(clock, **control)[ply])
        left.append(clocks.time_left(clock, **control).mover[ply])
    taken, left = np.array(taken), np.array(left)
    known = ~np.isnan(taken)
    assert overall["positions"] == section["positions"] == int(known.sum()) > 0
    p = pos[matching.THINK_FIELD][known].astype(np.float64)
    p /= p.sum(axis=1, keepdims=True)
    bins = human_time.seconds_bin(taken[known])
    model = overall["scores"]["model"]
    assert model["nll"] == pytest.approx(-np.log(p[np.arange(len(bins)), bins]).mean(), rel=1e-6)
    median = human_time.median_seconds(p)
    err = np.abs(np.log1p(median) - np.log1p(taken[known]))
    assert model["mae_log"] == pytest.approx(err.mean(), rel=1e-6)
    r = np.corrcoef(np.log1p(median), np.log1p(taken[known]))[0, 1]
    assert model["pearson"] == pytest.approx(r, rel=1e-6)
    assert model["nll_low"] <= model["nll"] <= model["nll_high"]
    # the clock rule: the share fitted on the train split, times the time left, + increment
    share = section["clock_rule_share"]
    assert share in think_time.SHARES
    inc = np.maximum(meta["increment_seconds"][pos["game"][known]], 0)
    rule = share * left[known] + inc
    rule_err = np.abs(np.log1p(rule) - np.log1p(taken[known])).mean()
    assert overall["scores"]["clock_rule"]["mae_log"] == pytest.approx(rule_err, rel=1e-6)
    assert overall["scores"]["clock_rule"]["nll"] is None  # a point prediction
    # the median-time baseline's cells come from the train split's clocks
    fit = think_time.TrainFit(clocked_cache / "train", TokenCache(clocked_cache).train.offsets)
    assert fit.targets == section["train_targets"] > 0
    groups = {r["grouping"] for r in section["table"]}
    assert {"overall", "band", "speed", "ply"} <= groups


def _train_moves(cache_dir: Path) -> pd.DataFrame:
    """Every timed move of the train split, game by game by the clock rule: class, ply, y."""
    meta = TokenCache(cache_dir).metadata("train")
    rows = []
    for g in range(len(meta.ply_offsets) - 1):
        base, inc = int(meta["base_seconds"][g]), int(meta["increment_seconds"][g])
        took = clocks.spent(meta.clocks(g), base=base, increment=inc)[:-1]
        for ply in np.flatnonzero(took >= 0):  # NaN (unknown) compares False
            rows.append((int(meta["speed"][g]), int(ply), float(np.log1p(took[ply]))))
    return pd.DataFrame(rows, columns=["speed", "ply", "y"])


def test_the_time_table_is_a_groupby_of_the_train_moves(measured: dict, clocked_cache) -> None:
    """The table's cells are the train moves' mean ln(1 + s) by (class, ply // 10); its
    predictions at the validation positions (fallbacks included) give the section's r and MAE."""
    moves = _train_moves(clocked_cache)
    moves["bucket"] = moves["ply"] // think_table.PLY_STEP
    cells = moves.groupby(["speed", "bucket"])["y"].agg(["mean", "count"])
    fit = think_time.TrainFit(clocked_cache / "train", TokenCache(clocked_cache).train.offsets)
    got = fit.table.means()
    assert set(got) == set(cells.index) and fit.targets == len(moves)
    for key, (mean, n) in got.items():
        assert mean == pytest.approx(cells.loc[key, "mean"], rel=1e-12)
        assert n == cells.loc[key, "count"]
    floor = think_table.MIN_CELL
    assert moves["speed"].nunique() > 1  # the sample's real classes, not one "unknown"
    by_bucket = moves.groupby("bucket")["y"].agg(["mean", "count"])
    pos, meta, section = measured["pos"], measured["meta"], measured["section"]
    taken = think_time.positions_taken(pos, meta)["taken"]
    known = ~np.isnan(taken)
    expect = []
    for g, ply in zip(pos["game"][known], pos["ply"][known], strict=True):
        key, bucket = (int(meta["speed"][g]), int(ply) // 10), int(ply) // 10
        if key in cells.index and cells.loc[key, "count"] >= floor:
            expect.append(cells.loc[key, "mean"])
        elif bucket in by_bucket.index and by_bucket.loc[bucket, "count"] >= floor:
            expect.append(by_bucket.loc[bucket, "mean"])
        else:
            expect.append(moves["y"].mean())
    # the fallbacks: a class the train split lacks (correspondence), a ply no train game has
    absent = metadata.SPEEDS.index("correspondence")
    assert absent not in set(moves["speed"]) and by_bucket.loc[0, "count"] >= floor
    fallback = fit.table.predict(np.array([absent, absent]), np.array([5, 10_000]))
    assert fallback.tolist() == pytest.approx([by_bucket.loc[0, "mean"], moves["y"].mean()])
    y = np.log1p(taken[known])
    scores = next(r for r in section["table"] if r["grouping"] == "overall")["scores"]
    table = scores["time_table"]
    assert table["pearson"] == pytest.approx(np.corrcoef(expect, y)[0, 1], rel=1e-6)
    assert table["mae_log"] == pytest.approx(np.abs(np.array(expect) - y).mean(), rel=1e-6)
    assert table["nll"] is None  # a point prediction


def _sealed_record(tmp_path: Path, section: dict, name: str) -> MoveMatch:
    """A move-match.json holding ``section`` as a dataset's think-time entry, read back."""
    record = {
        "model": {"checkpoint": "best.pt", "step": 1, "preset": "tiny"},
        "definition": "move-matching", "protocols": {"all": "every position"},
        "interval": "95 %", "think_time_definition": think_time.DEFINITION,
        "datasets": {"sample": {"positions": section["positions_scored"], "complete": True,
                                "validation_games": 6, "games_evaluated": 6,
                                "metadata": "present", "table": [], "think_time": section}},
    }  # fmt: skip
    seal.write(tmp_path / name, record)
    return read_move_match(tmp_path / name)


def test_the_summarys_think_time_section_shows_the_time_table(measured: dict, tmp_path) -> None:
    section = measured["section"]
    lines = think_time_section(_sealed_record(tmp_path, section, "move-match.json"))
    text = "\n".join(lines)
    overall = next(r for r in section["table"] if r["grouping"] == "overall")
    row = next(line for line in lines if "| overall | all | time table" in line)
    assert f"{overall['scores']['time_table']['pearson']:.3f}" in row
    assert f"at least {think_time.CLASS_FLOOR:,} timed moves" in text
    assert section["class_floor"] == think_time.CLASS_FLOOR
    # a class of at least the floor's moves gets its r; the sample's classes are below 500
    speeds = [r for r in section["table"] if r["grouping"] == "speed"]
    assert speeds and all(r["positions"] < think_time.CLASS_FLOOR for r in speeds)
    assert f"No time-control class has {think_time.CLASS_FLOOR:,} timed moves." in text
    low = {**section, "class_floor": min(r["positions"] for r in speeds)}
    lines = think_time_section(_sealed_record(tmp_path, low, "low.json"))
    within = lines[lines.index(next(x for x in lines if x.startswith("Pearson r of ln"))) :]
    for r in speeds:
        cell = next(x for x in within if x.startswith(f"| sample | all | {r['group']} |"))
        value = r["scores"]["time_table"]["pearson"]
        last = cell.strip("| ").split(" | ")[-1]  # the time table's column
        assert last.startswith("-" if value is None else f"{value:.3f}"), (cell, value)
    # a record from before the table: no time-table row, no within-class table, no error
    before = {k: v for k, v in section.items() if k != "class_floor"}
    before["table"] = [{**r, "scores": {k: v for k, v in r["scores"].items() if k != "time_table"}}
                       for r in section["table"]]  # fmt: skip
    lines = think_time_section(_sealed_record(tmp_path, before, "before.json"))
    assert "| think-time head |" in "\n".join(lines) and "time table" not in "\n".join(lines)
    assert not any(x.startswith("Pearson r of ln") for x in lines)


def test_spearman_ranks_share_ties() -> None:
    assert think_time.ranks(np.array([3.0, 1, 3, 2])).tolist() == [2.5, 0.0, 2.5, 1.0]
    x, y = np.array([1.0, 5, 2, 8, 3]), np.array([2.0, 9, 1, 7, 4])
    rho = think_time.pearson(think_time.correlation_sums(think_time.ranks(x), think_time.ranks(y)))
    assert rho == pytest.approx(0.8)  # 1 - 6 sum d^2 / (n (n^2 - 1)) = 1 - 24 / 120, no ties


def test_outcome_and_think_buckets_are_one_list() -> None:
    keys = think_time._cell_keys(np.array([60]), np.array([0]), np.array([1]), np.array([45]))
    assert keys[2].tolist() == [2]  # plies 40-79: outcome.PLY_BUCKETS' third
    assert outcome.PLY_BUCKETS[2][2] == "plies 40-79" and metadata.SPEEDS[1] == "bullet"


@pytest.mark.slow
def test_a_trained_head_beats_the_median_time_baseline_on_the_samples_clocked_games(
    tmp_path: Path,
) -> None:
    """The tiny model with the clock inputs and the head, 150 updates on 400 of the sample's
    games (their real clocks; every 5th game's readings dropped): on 60 validation games its
    think-time NLL and MAE beat the train split's median time by (time control, ply bucket),
    and both beat the clock rule's MAE (about a minute on 2 cores)."""
    from chesslm.train import batching, optim
    from chesslm.train.human_time import GameTimes
    from tests.conftest import make_cache

    cache_dir = make_cache(tmp_path, n_train=400, n_val=60, max_plies=60, clocks=True)
    cache = TokenCache(cache_dir)
    train = GameTimes.of_cache(cache, "train", weight=1.0)
    torch.manual_seed(0)
    net = gpt.build("tiny", time_inputs=True, think_time=True)
    opt = optim.optimizer(net, 3e-3, device=torch.device("cpu"))
    lengths = np.diff(np.asarray(cache.train.offsets))
    for epoch in range(6):
        plan = batching.global_batches(lengths, epoch=epoch, seed=1, micro=16, world=1)
        for group in batching.groups(plan, 1):
            opt.zero_grad(set_to_none=True)
            batching.backward_group(net, cache.train, group, micro=16, rank=0, world=1,
                                    device="cpu", times=train)  # fmt: skip
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            opt.step()
    ev = cpu_evaluator(net.eval(), cache_dir, tmp_path / "state")
    assert ev.run(float("inf"))
    pos = ev.positions()
    meta, _ = matching.load_metadata(cache_dir, ev.games.offsets)
    features = matching.position_features(pos, meta)
    keeps = {"all": np.ones(len(pos["game"]), dtype=bool)}
    band = (matching.elo_band(features["elo"]), ["unknown"])
    section = think_time.section(pos, meta, keeps, band, features["speed"], cache_dir,
                                 replicates=20, seed=1, min_games=5)  # fmt: skip
    scores = next(r for r in section["table"] if r["grouping"] == "overall")["scores"]
    model, median, rule = scores["model"], scores["median_time"], scores["clock_rule"]
    assert model["nll"] < median["nll"] - 0.03, (model, median)
    assert model["mae_log"] < median["mae_log"] < rule["mae_log"], (model, median, rule)
