"""The counterfactual part of a conditioned model with the outcome head (issue 35 item 5): each
setting's mean W/D/L, and the rating-gap sweep against the Elo expectation, checked against a
plain forward pass with the prefix built here; a model without the head or without
conditioning writes what it wrote before."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from chesslm.data import conditioning
from chesslm.data.cache import TokenCache
from chesslm.match import counterfactual, gaps, matching, metrics, protocols
from chesslm.model import gpt, weights
from chesslm.play import evaluate
from chesslm.record.counterfactual import read_counterfactual
from chesslm.report.play_section import markdown_section
from chesslm.scorer.settings import PlaySettings
from tests.conftest import make_cache
from tests.helpers import model_checkpoint
from tests.unit.test_play_outcome import SETTINGS as OUTCOME_SETTINGS

typed = PlaySettings.from_dict  # rule play's script types the play settings so

GAPS = [-800, -400, -200, 0, 200, 400, 800]
MATCH = {**OUTCOME_SETTINGS["match"], "protocols": ["maia2", "all"]}  # maia2: none of these
SETTINGS = {**OUTCOME_SETTINGS, "match": MATCH,
            "counterfactual": {"ratings": [1100, 1500], "seconds": 600, "gaps": GAPS,
                               "gap_centre": 1500}}  # fmt: skip
CF = SETTINGS["counterfactual"]
# counterfactual.csv's columns and the record's keys before the outcome head's (issue 35 item 5)
PLAIN_COLUMNS = ["dataset", "protocol", "grouping", "group", "setting", "rating_bin", "positions",
                 "games", *metrics.NAMES, "argmax_changed", "tv", "kl"]  # fmt: skip
PLAIN_KEYS = {"model", "host", "conditioned", "conditioning", "settings", "definition",
              "protocols", "split", "seconds", "datasets", "summary_rows"}  # fmt: skip


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    """Rated games (every 5th rating unknown) with their results."""
    directory = tmp_path_factory.mktemp("gap-sweep")
    return make_cache(directory, n_train=12, n_val=14, max_plies=30, ratings=True, results=True)


def _checkpoint(tmp_path: Path, conditioning_: str | None, head: bool) -> Path:
    run_dir = tmp_path / f"{conditioning_}-{head}"
    (run_dir / "train").mkdir(parents=True)
    model_checkpoint(run_dir / "train/best.pt", spread=0.3, conditioning=conditioning_,
                     outcome=head)  # fmt: skip
    return run_dir


def _white_wdl(net: gpt.GPT, game: np.ndarray, white_elo: int, black_elo: int) -> np.ndarray:
    """(plies, 3) White's win/draw/loss at each scored position of one plain causal pass,
    the prefix of these ratings in front: White first, Black second."""
    lead = [conditioning.WHITE_FIRST + conditioning.rating_bin(white_elo),
            conditioning.BLACK_FIRST + conditioning.rating_bin(black_elo)]  # fmt: skip
    x = torch.tensor([lead + [int(t) for t in game[:-1]]])
    with torch.no_grad():
        _, head = net(x, outcome=True)
    plies = (len(game) - 2) // 3
    mover = head[0, 2 : 2 + 3 * plies : 3].float().softmax(-1).numpy()
    mover[1::2] = mover[1::2, ::-1]  # Black to move: its loss is White's win
    return mover


def test_the_sweep_gives_white_the_higher_rating_of_a_positive_gap(cache_dir, tmp_path):
    """Per position, the sweep's gap 0 is the scorer's own W/D/L at the 1500 setting; its
    +400 is a plain pass behind White 1700, Black 1300 (and not the swapped prefix)."""
    assert gaps.ratings(1500, 400) == (1700, 1300) and gaps.ratings(1500, -400) == (1300, 1700)
    assert gaps.leads(1500, [400])[0].tolist() == conditioning.prefix(1700, 1300)
    run_dir = _checkpoint(tmp_path, "elo", head=True)
    net = weights.load_model(run_dir / "train/best.pt", "cpu")
    ev = matching.Evaluator(net, cache_dir, tmp_path / "state", games=None, chunk_games=4,
                            batch_tokens=4096, device=torch.device("cpu"))  # fmt: skip
    scorer = counterfactual.Counterfactual(
        ev, CF["ratings"], gap_centre=CF["gap_centre"], gap_list=CF["gaps"]
    )
    pos = scorer.score_games(ev.selected)
    assert pos["wdl"].shape == (len(pos["game"]), 3, 3)
    assert pos["gap_wdl"].shape == (len(pos["game"]), len(GAPS), 3)
    setting = [name for name, _ in scorer.settings].index("1500")
    np.testing.assert_allclose(pos["gap_wdl"][:, GAPS.index(0)], pos["wdl"][:, setting],
                               atol=1e-5, rtol=0)  # fmt: skip
    swept = gaps.white_view(pos["gap_wdl"][:, GAPS.index(400)], pos["ply"])
    games = TokenCache(cache_dir).validation
    for g in np.unique(pos["game"]):
        game, at = np.asarray(games[int(g)]), pos["game"] == g
        right = _white_wdl(net, game, 1700, 1300)[pos["ply"][at]]
        np.testing.assert_allclose(swept[at], right, atol=1e-5, rtol=0)
        assert np.abs(_white_wdl(net, game, 1300, 1700) - right).max() > 1e-4  # the sign shows


def test_the_sweep_is_kept_in_the_resumable_chunks(cache_dir, tmp_path):
    """A chunk scored again after a stop holds the same sweep; no chunk yet: a row per gap,
    none of them a number; a budget stops the part where a window of chunks ends only."""
    run_dir = _checkpoint(tmp_path, "elo", head=True)
    net = weights.load_model(run_dir / "train/best.pt", "cpu")
    ev = matching.Evaluator(net, cache_dir, tmp_path / "state", games=None, chunk_games=4,
                            batch_tokens=4096, device=torch.device("cpu"), window=2)  # fmt: skip
    assert len(ev.chunks) >= 3
    scorer = counterfactual.Counterfactual(
        ev, CF["ratings"], gap_centre=CF["gap_centre"], gap_list=CF["gaps"]
    )
    meta, _ = matching.load_metadata(cache_dir, ev.games.offsets)
    chosen = protocols.chosen(["all"])
    empty = scorer.tables(
        scorer.positions(),
        meta,
        chosen,
        replicates=SETTINGS["match"]["bootstrap"],
        seed=SETTINGS["seed"],
    )["gap_table"]
    assert [r["gap"] for r in empty] == GAPS and {r["white_score"] for r in empty} == {None}
    assert not scorer.run(deadline=0.0) and scorer.run(deadline=float("inf"))
    whole = scorer.positions()
    ev.chunk_path(1).unlink()
    assert scorer.run(deadline=float("inf"))
    again = scorer.positions()
    assert set(again) == {"game", "ply", *counterfactual.FIELDS, "wdl", "gap_wdl"}
    for key in whole:
        np.testing.assert_array_equal(whole[key], again[key])
    for i in (1, 2):
        ev.chunk_path(i).unlink()
    assert not scorer.run(deadline=0.0)  # chunk 1 ends its window, chunk 2 starts the next
    assert ev.chunk_path(1).exists() and not ev.chunk_path(2).exists()


def test_the_gap_rows_are_whites_chances_beside_the_elo_expectation(cache_dir, tmp_path):
    """The record, the csv and the summary: a row per protocol and gap, probabilities that sum
    to one, the Elo expectation of the formula, White's score of a plain pass over every
    position, its interval around it; each setting's W/D/L from the side to move."""
    run_dir = _checkpoint(tmp_path, "elo", head=True)
    out = evaluate.run(run_dir, typed(SETTINGS), {"sample": cache_dir}, device="cpu")
    record = json.loads(out["counterfactual"].read_text())
    sweep = record["gap_sweep"]
    assert sweep["centre"] == 1500 and sweep["perspective"] == "white"
    assert [(r["protocol"], r["gap"]) for r in sweep["rows"]] == [
        (p, g) for p in ("maia2", "all") for g in GAPS
    ]
    for r in sweep["rows"]:
        if r["protocol"] == "maia2":  # no position of these games counts (unrated speeds)
            assert r["positions"] == 0 and r["white_score"] is None
            continue
        wdl = np.array([r["white_win"], r["draw"], r["black_win"]])
        assert ((wdl >= 0) & (wdl <= 1)).all() and wdl.sum() == pytest.approx(1, abs=1e-6)
        assert r["elo_expectation"] == pytest.approx(1 / (1 + 10 ** (-r["gap"] / 400)), abs=1e-12)
        assert r["white_elo"] - r["black_elo"] == r["gap"]
        assert r["white_score"] == pytest.approx(r["white_win"] + r["draw"] / 2)
        assert r["white_score_low"] <= r["white_score"] <= r["white_score_high"]
    net = weights.load_model(run_dir / "train/best.pt", "cpu")
    games = TokenCache(cache_dir).validation
    for r in (r for r in sweep["rows"] if r["protocol"] == "all"):
        white = np.concatenate([_white_wdl(net, np.asarray(games[g]), r["white_elo"],
                                           r["black_elo"]) for g in range(len(games))])  # fmt: skip
        assert r["positions"] == len(white)
        assert r["white_score"] == pytest.approx(float(np.mean(white[:, 0] + white[:, 1] / 2)),
                                                 abs=1e-6)  # fmt: skip
    table = pd.read_csv(out["counterfactual_table"])
    rows = table[table["grouping"] == "gap"]
    assert rows["setting"].tolist() == [f"gap {g:+d}" for g in GAPS] * 2
    settings = table[(table["grouping"] != "gap") & (table["positions"] > 0)]
    assert len(settings) > 6  # every setting, overall and in bands
    total = settings[["p_win", "p_draw", "p_loss"]].sum(axis=1)
    np.testing.assert_allclose(total, 1, atol=1e-6)
    assert (settings[settings["setting"] != "true"]["elo_expectation"] == 0.5).all()
    read = read_counterfactual(out["counterfactual"])
    assert len(read.gap_sweep.rows) == 2 * len(GAPS) and read.summary_rows[-1].p_win is not None
    section = markdown_section(run_dir / "play")
    assert "Rating-gap sweep around 1500" in section and "| 1900 / 1100 |" in section
    assert "| P(win) | P(draw) | P(loss) | score | Elo expectation |" in section


@pytest.mark.parametrize(("conditioned", "head"), [(True, False), (False, True)])
def test_without_the_head_or_the_conditioning_the_files_are_as_before(
    cache_dir, tmp_path, conditioned, head
):
    """The csv's columns and the record's keys are those from before the sweep; nothing about
    it in the summary."""
    run_dir = _checkpoint(tmp_path, "elo" if conditioned else None, head)
    out = evaluate.run(run_dir, typed(SETTINGS), {"sample": cache_dir}, device="cpu")
    record = json.loads(out["counterfactual"].read_text())
    record.pop("record_sha256", None)  # the seal
    section = markdown_section(run_dir / "play").split("### Counterfactual ratings")[1]
    assert "Rating-gap sweep" not in section and "P(win)" not in section
    if not conditioned:
        assert set(record) == {"model", "host", "conditioned", "conditioning", "note"}
        return
    assert set(record) == PLAIN_KEYS
    assert pd.read_csv(out["counterfactual_table"]).columns.tolist() == PLAIN_COLUMNS
    assert set(record["summary_rows"][0]) == set(PLAIN_COLUMNS)
