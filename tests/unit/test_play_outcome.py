"""The outcome head in play's move-matching (issue 35 item 2): the batched scorer's W/D/L
against a plain forward pass, the measure's numbers against a direct computation, its
baselines against training's, and nothing new for a checkpoint without the head."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import chess
import numpy as np
import pandas as pd
import pytest
import torch

from chesslm.data import metadata, tokens
from chesslm.data.cache import TokenCache
from chesslm.match import outcome
from chesslm.model import gpt, weights
from chesslm.model.outcome import positions, side_counts, targets
from chesslm.play import evaluate, outcome_figures
from chesslm.record.move_match import read_move_match
from chesslm.record.play_files import OUTCOME
from chesslm.report.play_section import markdown_section
from chesslm.scorer import branched, scoring
from chesslm.scorer.settings import PlaySettings
from tests.conftest import make_cache
from tests.helpers import model_checkpoint
from tests.playkit import SETTINGS as PLAY_SETTINGS

typed = PlaySettings.from_dict  # rule play's script types the play settings so

# test_play's settings, smaller: one protocol, no Elo games
SETTINGS = {
    **PLAY_SETTINGS,
    "match": {**PLAY_SETTINGS["match"], "chunk_games": 4, "bootstrap": 30, "protocols": ["all"]},
    "legality": {**PLAY_SETTINGS["legality"], "games": 1, "max_plies": 4},
    "elo": {**PLAY_SETTINGS["elo"], "games_per_anchor": 0},
}


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    """Sample games with their real results (every 7th unknown) and seeded ratings."""
    directory = tmp_path_factory.mktemp("outcome-play")
    return make_cache(directory, n_train=12, n_val=14, max_plies=30, ratings=True, results=True)


def _noisy(outcome_head: bool, seed: int = 3) -> gpt.GPT:
    torch.manual_seed(seed)
    net = gpt.build("tiny", outcome=outcome_head)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return net.eval()


def _plain_wdl(net: gpt.GPT, game: np.ndarray) -> np.ndarray:
    """(plies, 3) softmax of a plain causal pass's outcome logits at BOS and each move's last
    token before the game's last move (the positions move-matching scores)."""
    x = torch.tensor(np.asarray(game[:-1], dtype=np.int64)).unsqueeze(0)
    with torch.no_grad():
        _, head = net(x, outcome=True)
    plies = (len(game) - 2) // 3
    return head[0, 0 : 3 * plies : 3].float().softmax(-1).numpy()


def _input(cache: TokenCache, g: int) -> branched.GameInput:
    game = np.asarray(cache.validation[g], dtype=np.int64)
    board, legal = chess.Board(), []
    plies = (len(game) - 2) // 3
    for k in range(plies):
        legal.append(scoring.legal_codes(board))
        board.push(tokens.decode_move([int(t) for t in game[1 + 3 * k : 4 + 3 * k]]))
    return branched.GameInput.from_plies(game[:-1], legal)


def test_scored_wdl_equals_a_plain_forward_softmax_at_each_position(cache_dir):
    """Games of different lengths in one batch (and batch by batch through score_many): each
    scored ply's W/D/L is the plain pass's at its position token; without the head, none."""
    net, cache = _noisy(True), TokenCache(cache_dir)
    ids = [0, 1, 2, 5]
    inputs = [_input(cache, g) for g in ids]
    batch = branched.build_batch(inputs, "cpu")
    wdl = scoring.score(net, batch).wdl.numpy()
    expected = np.concatenate([_plain_wdl(net, np.asarray(cache.validation[g])) for g in ids])
    assert wdl.shape == (len(batch.before_rows), 3) == expected.shape
    np.testing.assert_allclose(wdl, expected, atol=1e-5, rtol=0)
    assert np.ptp(expected[:, 0]) > 1e-3  # positions differ: a constant read-out would fail
    streamed = np.zeros_like(expected)
    firsts = np.cumsum([0, *(g.plies for g in inputs)])
    for group, _, host in scoring.score_many(net, inputs, batch_tokens=300, device="cpu"):
        rows = np.concatenate([np.arange(firsts[i], firsts[i + 1]) for i in group])
        streamed[rows] = host["wdl"]
    np.testing.assert_allclose(streamed, expected, atol=1e-5, rtol=0)
    plain = _noisy(False)
    assert scoring.score(plain, batch).wdl is None
    assert all("wdl" not in h for *_, h in scoring.score_many(plain, inputs, batch_tokens=300,
                                                               device="cpu"))  # fmt: skip


def test_the_train_baseline_counts_training_targets(cache_dir):
    """The frequency baseline's counts (``side_counts``, training's and play's) are those of
    every position's target of the train split, by side to move."""
    lengths, results = outcome.train_split(cache_dir)
    expected = np.zeros((2, 3), dtype=np.int64)
    for length, result in zip(lengths, results, strict=True):
        if result >= 0:
            ply = np.arange(positions(int(length)))
            np.add.at(expected, (ply % 2, targets(np.full(len(ply), result), ply)), 1)
    assert side_counts(lengths, results).tolist() == expected.tolist()
    assert (results < 0).any() and (results >= 0).any()


def _run(tmp_path: Path, cache_dir: Path, head: bool) -> tuple[Path, dict]:
    run_dir = tmp_path / ("head" if head else "plain")
    (run_dir / "train").mkdir(parents=True)
    model_checkpoint(run_dir / "train/best.pt", spread=0.3, outcome=head)
    out = evaluate.run(run_dir, typed(SETTINGS), {"sample": cache_dir}, device="cpu")
    return run_dir, json.loads(out["move_match"].read_text())


def test_the_measure_is_that_of_a_plain_pass_beside_both_baselines(tmp_path, cache_dir):
    """The record's overall model NLL, Brier, accuracy are those of a plain pass over every
    validation game, positions of games with an unknown result left out; the Elo baseline is
    the formula at each game's ratings; the summary shows the row; the calibration's bins
    cover every known position."""
    run_dir, record = _run(tmp_path, cache_dir, head=True)
    d = record["datasets"]["sample"]["outcome"]
    assert "outcome_definition" in record and d["baseline_source"] == "train"
    cache, net = TokenCache(cache_dir), weights.load_model(run_dir / "train/best.pt", "cpu")
    meta = metadata.Metadata(cache_dir / "validation", cache.validation.offsets)
    result, white, black = (np.asarray(meta[c]) for c in ("result", "white_elo", "black_elo"))
    p, y, elo = [], [], []
    for g in range(len(cache.validation)):
        plies = (len(cache.validation[g]) - 2) // 3
        if result[g] < 0 or plies == 0:
            continue
        p.append(_plain_wdl(net, np.asarray(cache.validation[g])))
        ply = np.arange(plies)
        y.append(targets(np.full(plies, result[g]), ply))
        mover = np.where(ply % 2 == 0, white[g], black[g])
        other = np.where(ply % 2 == 0, black[g], white[g])
        elo.append(outcome.elo_probabilities(mover, other, d["draw_rate"]))
    p, y, elo = np.concatenate(p), np.concatenate(y), np.concatenate(elo)
    row = next(r for r in d["table"] if r["grouping"] == "overall")
    assert row["positions"] == len(y) and d["positions"] - d["unknown_result_positions"] == len(y)
    s = row["scores"]
    assert s["model"]["nll"] == pytest.approx(-np.log(p[np.arange(len(y)), y]).mean(), abs=1e-5)
    assert s["model"]["brier"] == pytest.approx(((p - np.eye(3)[y]) ** 2).sum(1).mean(), abs=1e-5)
    assert s["model"]["accuracy"] == pytest.approx((p.argmax(1) == y).mean())
    assert s["elo"]["nll"] == pytest.approx(-np.log(elo[np.arange(len(y)), y]).mean(), abs=1e-9)
    assert s["model"]["nll_low"] <= s["model"]["nll"] <= s["model"]["nll_high"]
    assert {r["grouping"] for r in d["table"]} == {"overall", "band", "ply"}
    for grouping in ("band", "ply"):
        assert sum(r["positions"] for r in d["table"] if r["grouping"] == grouping) == len(y)
    for predictor in outcome.CALIBRATED:
        bins = [r for r in d["calibration"] if r["predictor"] == predictor]
        assert sum(r["positions"] for r in bins) == len(y)
    parsed = read_move_match(run_dir / "play/move-match.json")
    assert parsed.datasets["sample"].outcome.overall.scores["model"].nll == s["model"]["nll"]
    section = markdown_section(run_dir / "play")
    assert "### Outcome head" in section and f"{s['elo']['nll']:.3f}" in section


def test_a_checkpoint_without_the_head_measures_nothing_new(tmp_path, cache_dir):
    run_dir, record = _run(tmp_path, cache_dir, head=False)
    assert "outcome_definition" not in record and "outcome" not in record["datasets"]["sample"]
    assert read_move_match(run_dir / "play/move-match.json").datasets["sample"].outcome is None
    assert "### Outcome head" not in markdown_section(run_dir / "play")
    # rule outcome_figures is not planned for such a run; given its record, it says why
    out = {o.name: tmp_path / o.file for o in OUTCOME}
    outcome_figures.write(run_dir / "play/move-match.json", out)
    assert pd.read_csv(out["outcome_table"]).empty
    assert outcome_figures.NO_HEAD in out["outcome_games"].read_text()


def test_the_figures_module_imports_no_torch() -> None:
    code = "import sys, chesslm.play.outcome_figures; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
