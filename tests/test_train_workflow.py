"""The training stages through real snakemake: probe, a chain of segments, results, reruns."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.helpers import ROOT, first_games_pgn, snakemake

pytestmark = pytest.mark.slow
TARGET = "results/mini/results.json"
ARGS = ("--configfile", "train-workflow.yaml")


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    workdir = tmp_path_factory.mktemp("train-wf")
    (workdir / "config").mkdir()
    shutil.copy(ROOT / "config" / "config.yaml", workdir / "config" / "config.yaml")
    (workdir / "resources").symlink_to(ROOT / "resources")
    (workdir / "mini.pgn").write_text(first_games_pgn(300))
    shutil.copy(ROOT / "tests" / "train-workflow.yaml", workdir / "train-workflow.yaml")
    plan = snakemake(workdir, TARGET, *ARGS, "-n")
    for rule in ("token_cache", "probe", "train_segment", "results"):
        assert rule in plan.stdout, plan.stdout
    snakemake(workdir, TARGET, *ARGS, "--cores", "2")
    return workdir


def test_chain_reaches_a_terminal_status(trained: Path) -> None:
    results = json.loads((trained / TARGET).read_text())
    assert results["status"] == "max_updates" and results["test_evaluated"] is False
    assert results["segment_count"] == 2
    assert [s["status"] for s in results["segments"]] == ["segment_updates", "max_updates"]
    assert [s["step_end"] for s in results["segments"]] == [3, 6]
    assert (
        json.loads((trained / "results/mini/probe-results.json").read_text())["status"] == "passed"
    )
    for log in ("probe.log", "train_segment/0.log", "train_segment/1.log", "results.log"):
        assert (trained / "logs/mini" / log).exists(), log


def test_rerun_is_nothing_to_be_done(trained: Path) -> None:
    again = snakemake(trained, TARGET, *ARGS, "--cores", "2")
    assert "Nothing to be done" in again.stdout + again.stderr


def test_forcerun_probe_never_restarts_the_segments(trained: Path) -> None:
    plan = snakemake(trained, TARGET, *ARGS, "--forcerun", "probe", "-n")
    assert "probe" in plan.stdout and "train_segment" not in plan.stdout, plan.stdout
    before = (trained / "results/mini/segments/0.json").read_text()
    snakemake(trained, TARGET, *ARGS, "--forcerun", "probe", "--cores", "2")
    assert (trained / "results/mini/segments/0.json").read_text() == before
