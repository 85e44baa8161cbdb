"""Bad configuration stops the workflow before any job, with a message naming the key; the
default target runs what fits this machine."""

from __future__ import annotations

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
        ("runs: {demo: {dataset: nowhere}}", "runs.demo.dataset"),
        (
            "runs: {demo: {dataset: sample, schedule_steps: 10, warmup_steps: 10}}",
            "runs.demo.warmup_steps",
        ),
        ("datasets: {sample: {pgn: []}}", "pgn"),
    ],
)
def test_bad_config_is_refused_naming_the_key(tmp_path, extra, named):
    workdir = make_workdir(tmp_path)
    (workdir / "bad.yaml").write_text(extra + "\n")
    result = snakemake(
        workdir, "results/demo/results.json", "--configfile", "bad.yaml", "-n", check=False
    )
    assert result.returncode != 0
    assert named in result.stdout + result.stderr
    assert not (workdir / "results").exists()


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
