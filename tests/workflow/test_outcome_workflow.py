"""Rule outcome_figures for real (issue 35 item 2): a tiny run with the outcome head beside the
staged run, its table and figures made from the head's own predictions on real validation
games, planned for that run only, and shown in its report with their captions."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from chesslm.data.cache import TokenCache
from chesslm.match import outcome
from chesslm.model import weights
from chesslm.record.play_files import OUTCOME
from tests.helpers import ROOT, snakemake

pytestmark = pytest.mark.slow
ARGS = ("--configfile", "train-workflow.yaml", "outcome-workflow.yaml")
SUMMARY = "results/mini-o/report/summary.md"
PLAY = Path("results/mini-o/play")


@pytest.fixture
def played(trained_workflow: Path) -> Path:
    """The staged run with a second tiny run, ``mini-o`` (outcome: true), trained, played and
    summarised (by the first test; nothing to be done for the others)."""
    shutil.copy(ROOT / "tests" / "outcome-workflow.yaml", trained_workflow)
    snakemake(trained_workflow, SUMMARY, *ARGS, "--cores", "2")
    return trained_workflow


def test_only_a_run_with_the_head_plans_the_figures(trained_workflow: Path) -> None:
    shutil.copy(ROOT / "tests" / "outcome-workflow.yaml", trained_workflow)
    plain = snakemake(trained_workflow, "results/mini/report/summary.md", *ARGS, "-n",
                      "--forcerun", "play")  # fmt: skip
    assert "play" in plain.stdout and "outcome_figures" not in plain.stdout + plain.stderr
    both = snakemake(trained_workflow, *ARGS, "-n", "--forcerun", "play")  # every run's summary
    assert "outcome_figures" in both.stdout, both.stdout


def _record(workdir: Path) -> dict:
    record = json.loads((workdir / PLAY / "move-match.json").read_text())
    return record["datasets"]["mini"]["outcome"]


def test_the_table_holds_every_metric_and_each_bin_its_positions(played: Path) -> None:
    o = _record(played)
    frame = pd.read_csv(played / PLAY / "outcome.csv")
    assert {"model", "frequency", "elo"} == set(frame["predictor"])
    assert {"overall", "band", "ply", "calibration"} == set(frame["scope"])
    assert set(frame["protocol"]) == {"maia2", "all"}  # the default protocols
    frame = frame[frame["protocol"] == "all"]  # every position
    overall = frame[(frame["scope"] == "overall") & (frame["predictor"] == "model")]
    assert set(overall["metric"]) == set(outcome.METRICS)
    nll = overall[overall["metric"] == "nll"].iloc[0]
    row = next(r for r in o["table"] if (r["protocol"], r["grouping"]) == ("all", "overall"))
    assert nll["value"] == pytest.approx(row["scores"]["model"]["nll"])
    assert nll["low"] <= nll["value"] <= nll["high"]
    known = o["positions"] - o["unknown_result_positions"]
    assert known == row["positions"] > 0
    for predictor in outcome.CALIBRATED:
        bins = frame[(frame["scope"] == "calibration") & (frame["predictor"] == predictor)
                     & (frame["metric"] == "observed_win")]  # fmt: skip
        assert bins["positions"].sum() == known, predictor
        assert ((bins["value"] >= 0) & (bins["value"] <= 1)).all()


def test_the_games_are_the_heads_white_chances_at_every_ply(played: Path) -> None:
    """Each kept game: one point per ply of the validation game, White's win the head's own
    (a plain forward pass of best.pt: the mover's win at White's plies, its loss at Black's);
    the figure names every game and the calibration figure draws the diagonal."""
    games = _record(played)["games"]
    assert 1 <= len(games) <= outcome.GAMES
    assert [g["game"] for g in games] == sorted({g["game"] for g in games})
    validation = TokenCache(played / "results/datasets/mini/token-cache").validation
    net = weights.load_model(played / "results/mini-o/train/best.pt", torch.device("cpu"))
    for g in games:
        tokens = np.asarray(validation[g["game"]], dtype=np.int64)
        plies = (len(tokens) - 2) // 3
        assert g["ply"] == list(range(plies)) and len(g["white_win"]) == plies
        with torch.no_grad():
            head = net(torch.tensor(tokens[:-1]).unsqueeze(0), outcome=True)[1]
        wdl = head[0, 0 : 3 * plies : 3].float().softmax(-1).numpy()
        white = np.where(np.arange(plies) % 2 == 0, wdl[:, 0], wdl[:, 2])
        np.testing.assert_allclose(g["white_win"], white, atol=1e-4)
        total = np.add(np.add(g["white_win"], g["white_draw"]), g["white_loss"])
        np.testing.assert_allclose(total, 1, atol=3e-4)
    svg = (played / PLAY / "outcome-games.svg").read_text()
    assert all(f"validation game {g['game']}: {g['result']}" in svg for g in games)
    assert "perfect calibration" in (played / PLAY / "outcome-calibration.svg").read_text()


def test_the_report_shows_the_figures_with_their_captions(played: Path) -> None:
    snakemake(played, SUMMARY, *ARGS, "--report", "outcome-report.html")
    html = (played / "outcome-report.html").read_text()
    for out in OUTCOME:
        assert out.file in html, out.file
    assert "the probability that" in html and "White" in html
