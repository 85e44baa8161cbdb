"""Four and eight workers of one host, as far as a machine without GPUs can check them: the
plan of a 4- and an 8-GPU pilot (real ``snakemake -n -p`` with benchmarks/pilot-4gpu.yaml and
pilot-8gpu.yaml), and real torchrun segments of 4 and 8 gloo ranks on the CPU. What has not run
on four or eight GPUs is said in docs/speed.md ("Four and eight GPUs")."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from chesslm.model import checkpoint
from tests.conftest import ROOT, run_segment, segment_args
from tests.helpers import snakemake

pytestmark = pytest.mark.slow
TARGET = "results/pilot/results.json"
JOB = re.compile(r"\n(?=(?:localrule|rule|checkpoint) \w+:)")


@pytest.mark.parametrize(("gpus", "mem_mb"), [(4, 1000 + 4 * 8000), (8, 1000 + 8 * 8000)])
def test_the_pilot_on_n_gpus_asks_for_n_gpus_and_starts_n_ranks(
    tmp_path: Path, gpus: int, mem_mb: int
) -> None:
    (tmp_path / "config").mkdir()
    shutil.copy(ROOT / "config" / "config.yaml", tmp_path / "config" / "config.yaml")
    for name in ("resources", "benchmarks"):
        (tmp_path / name).symlink_to(ROOT / name)
    extra = f"benchmarks/pilot-{gpus}gpu.yaml"
    # a segment is planned once the probe (a checkpoint) has run: segment 0 is asked for too
    segment = "results/pilot/segments/0.json"
    plan = snakemake(
        tmp_path, TARGET, segment, "-n", "-p", "--configfile", "config/config.yaml", extra
    )
    jobs = [b for b in JOB.split(plan.stdout) if re.match(r"checkpoint (probe|train_seg)", b)]
    assert len(jobs) == 2, plan.stdout[-3000:]  # the probe and segment 0
    for job in jobs:
        assert "wildcards: run=pilot" in job, job
        # max_seconds 360 + 180 s of overhead: a 9-minute job, its deadline 60 s before the end
        assert f"gpu={gpus}, cpus_per_gpu=1, runtime=9, mem_mb={mem_mb}," in job, job
        assert "CHESS_JOB_DEADLINE=$(( $(date +%s) + 480 ))" in job, job
        assert f"-m torch.distributed.run --standalone --nproc-per-node={gpus} " in job, job
        assert f" --device=cuda --workers={gpus} " in job, job


TINY = ("--model=tiny", "--validation-every-steps=1", "--seed=7", "--threads-per-worker=1")


def segment(
    cache: Path, run_dir: Path, n: int, workers: int, *hyper: str
) -> subprocess.CompletedProcess[str]:
    args = [*segment_args(cache, run_dir, n), *TINY, *hyper]
    result = run_segment(args, workers=workers)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def status(run_dir: Path, n: int) -> dict:
    return json.loads((run_dir / "segments" / f"{n}.json").read_text())


@pytest.fixture(scope="module")
def four_ranks(tiny_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A run of 4 gloo ranks uninterrupted, and the same run in two segments: 24 games in
    global batches of 4 x 2, accumulation groups of 2 and 1 batches, 2 updates an epoch."""
    hyper = ("--micro=2", "--accum=2", "--epochs=2")
    root = tmp_path_factory.mktemp("four")
    whole, split = root / "whole", root / "split"
    segment(tiny_cache, whole, 0, 4, *hyper)
    segment(tiny_cache, split, 0, 4, *hyper, "--segment-updates=2")
    segment(tiny_cache, split, 1, 4, *hyper)
    return whole, split


def test_four_ranks_train_and_resume(four_ranks: tuple[Path, Path]) -> None:
    whole, split = four_ranks
    assert (status(whole, 0)["status"], status(whole, 0)["step_end"]) == ("max_epochs", 4)
    first = status(split, 0)
    assert (first["status"], first["terminal"], first["world_size"]) == (
        "segment_updates",
        False,
        4,
    )
    assert (first["step_start"], first["step_end"], first["cursor"]["epoch"]) == (0, 2, 1)
    second = status(split, 1)
    assert second["resume_action"] == "resumed" and second["world_size"] == 4
    assert (second["step_start"], second["step_end"], second["status"]) == (2, 4, "max_epochs")
    assert json.loads((split / "train/identity.json").read_text())["world_size"] == 4
    results = json.loads((split / "train/results.json").read_text())
    assert results["status"] == "max_epochs"
    assert [h["step"] for h in results["history"]] == [1, 2, 3, 4]
    assert (
        checkpoint.load(whole / "train/last.pt")["cursor"]
        == checkpoint.load(split / "train/last.pt")["cursor"]
    )


def test_four_ranks_resume_bitwise_as_four_ranks_uninterrupted(
    four_ranks: tuple[Path, Path],
) -> None:
    whole, split = four_ranks
    a, b = checkpoint.load(whole / "train/last.pt"), checkpoint.load(split / "train/last.pt")
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name
    for key, state in a["optimizer"]["state"].items():
        for field, value in state.items():
            assert torch.equal(value, b["optimizer"]["state"][key][field]), (key, field)


def test_eight_ranks_train_through_a_partial_batch_with_four_dummy_ranks(
    tiny_cache: Path, tmp_path: Path
) -> None:
    """24 games in global batches of 8 x 2: one full batch, then 8 games for ranks 0-3 while
    ranks 4-7 run zero-target dummies (chesslm.train.batching)."""
    run_dir = tmp_path / "run"
    segment(tiny_cache, run_dir, 0, 8, "--micro=2", "--accum=1", "--epochs=1")
    done = status(run_dir, 0)
    assert (done["status"], done["terminal"], done["world_size"]) == ("max_epochs", True, 8)
    assert (done["step_end"], done["cursor"]) == (2, {"epoch": 1, "next_group": 0, "step": 2})
    results = json.loads((run_dir / "train/results.json").read_text())
    assert [h["step"] for h in results["history"]] == [1, 2]
    # both updates count their targets: the dummies add none, so the losses stay finite
    losses = [(h["train_nll"], h["validation"]["nll"]) for h in results["history"]]
    assert torch.isfinite(torch.tensor(losses)).all(), losses
