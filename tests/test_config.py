"""Bad configuration stops the workflow before any job, with a message naming the key; the
default target runs what fits this machine."""

from __future__ import annotations

import json

import pytest
import torch

from tests.helpers import snakemake
from tests.test_workflow_data import make_workdir

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ("runs: {demo: {dataset: sample, epochs: 25}}", "epochs"),
        ("runs: {demo: {dataset: sample, max_seconds: 421}}", "max_seconds"),
        ("runs: {demo: {dataset: sample, micro: 0}}", "micro"),
        ("runs: {demo: {dataset: sample, lernrate: 0.1}}", "lernrate"),
        ("runs: {demo: {dataset: sample, conditioning: maia}}", "runs.demo.conditioning"),
        ("runs: {demo: {dataset: nowhere}}", "runs.demo.dataset"),
        (
            "runs: {demo: {dataset: sample, schedule_steps: 10, warmup_steps: 10}}",
            "runs.demo.warmup_steps",
        ),
        ("datasets: {sample: {pgn: []}}", "pgn"),
        (
            "datasets: {sample: {filters: {min_elo: 3000, max_elo: 1000}}}",
            "datasets.sample.filters.min_elo",
        ),
        ("runs: {demo: {dataset: sample, play: {datasets: [nope]}}}", "runs.demo.play.datasets"),
        (
            "runs: {demo: {dataset: sample, play: {elo: {ladder: nope}}}}",
            "runs.demo.play.elo.ladder is 'nope', which is not a ladder (known: full, small)",
        ),
        (
            "ladders: {small: {anchors: [{name: a, kind: random}, {name: b, kind: greedy}]}}",
            "ladders.small: ladder anchors: none is a stockfish_elo anchor",
        ),
        ("ladders: {small: {games_per_pair: 0}}", "ladders.small.games_per_pair"),
        (
            "runs: {demo: {dataset: sample, legality_eval_games: 5000}}",
            "runs.demo.legality_eval_games is 5000, more than datasets.sample.legality_games",
        ),
        (
            "comparisons: {c: {runs: [demo, x], dataset: sample}}",
            "config: comparisons.c.runs names 'x', which is not a run (known: demo, ",
        ),
        (
            "comparisons: {c: {runs: [demo], dataset: nope}}",
            "comparisons.c.dataset is 'nope', which is not a dataset (known: real, real-1k,",
        ),
        ("comparisons: {c: {runs: [demo], dataset: sample, shape: maia}}", "shape"),
        (
            "comparisons: {c: {runs: [demo], dataset: sample, baseline: pilot}}",
            "comparisons.c.baseline is 'pilot', not one of comparisons.c.runs",
        ),
        (
            "comparisons: {c: {runs: [demo, pilot], dataset: sample}}",
            "comparisons.c.runs score different numbers of validation games"
            " (runs.NAME.play.match.games: demo: 64, pilot: None)",
        ),
        (
            "datasets: {sample: {context: 2048}}",
            "datasets.sample.context is 2048, more than the model context of runs.demo"
            " (model tiny: 1024 tokens)",
        ),
    ],
)
def test_bad_config_is_refused_naming_the_key(tmp_path, extra, named):
    workdir = make_workdir(tmp_path)
    (workdir / "bad.yaml").write_text(extra + "\n")
    result = snakemake(
        workdir, "results/demo/results.json", "--configfile", "bad.yaml", "-n", check=False
    )
    assert result.returncode != 0
    assert_one_config_line(result, named)
    assert not (workdir / "results").exists()


def assert_one_config_line(result, named: str) -> None:
    """snakemake's console holds the refusal as one ``config: `` line naming the key, and no
    traceback or frame."""
    output = result.stdout + result.stderr
    lines = [line for line in output.splitlines() if line.startswith("config: ")]
    assert len(lines) == 1 and named in lines[0], output
    assert "Traceback" not in output and "in file" not in output and "File " not in output, output


def test_more_legality_games_than_the_built_cache_holds_is_refused_at_plan_time(tmp_path):
    """The sample's cache exists (its cache.json, as the token_cache rule writes it, for the
    same legality_games): the plan stops naming the run's key, the number asked and held."""
    workdir = make_workdir(tmp_path)
    cache = workdir / "results/datasets/sample/token-cache"
    cache.mkdir(parents=True)
    held = {"bound": 4096, "games": 258}
    info = {"splits": {"validation": {"games": 258}}, "legality_games": held}
    (cache / "cache.json").write_text(json.dumps(info))
    (workdir / "bad.yaml").write_text("runs: {demo: {legality_eval_games: 300}}\n")
    result = snakemake(
        workdir, "results/demo/results.json", "--configfile", "bad.yaml", "-n", check=False
    )
    assert result.returncode != 0
    assert_one_config_line(result, "runs.demo.legality_eval_games is 300, but the token cache")
    assert "for 258 of 258 validation games: lower it to at most 258" in result.stderr
    # a cache built for another legality_games is rebuilt first: the plan goes on
    (cache / "cache.json").write_text(json.dumps(info | {"legality_games": {"bound": 100}}))
    assert snakemake(workdir, "results/demo/results.json", "--configfile", "bad.yaml", "-n")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
def test_the_default_target_leaves_out_cuda_runs_without_cuda_in_one_line(tmp_path):
    workdir = make_workdir(tmp_path)
    result = snakemake(workdir, "-n")  # config.yaml: demo on cpu, pilot on cuda
    output = result.stdout + result.stderr
    assert output.count("left out: pilot (device cuda, no CUDA here)") == 1, output[-3000:]
    assert "run=demo" in output and "run=pilot" not in output
    # a named target is built as asked, without the line
    named = snakemake(workdir, "results/pilot/probe-results.json", "-n")
    assert "left out" not in named.stdout + named.stderr and "run=pilot" in named.stdout
