"""How ranks start and end: the launch commands, job resources and deadline, and workers that
die with their launcher (real torchrun, real signals)."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from chesslm.train import launch, resume
from chesslm.train.settings import RunSettings
from tests.conftest import ROOT
from tests.helpers import alive, children

DEMO = RunSettings(dataset="sample", workers=2)
PILOT = RunSettings(dataset="sample", model="baseline", device="cuda", workers=4)


def test_one_node_launch_sets_the_deadline_and_threads_per_rank() -> None:
    assert launch.launcher(DEMO, run="demo", runtime_min=10) == (
        "CHESS_JOB_DEADLINE=$(( $(date +%s) + 540 )) OMP_NUM_THREADS=1"
        f" {sys.executable} -m torch.distributed.run --standalone --nproc-per-node=2"
    )
    assert "+ 120 ))" in launch.launcher(DEMO, run="demo", runtime_min=3)


def test_multi_node_launch_is_one_torchrun_per_node_meeting_through_c10d() -> None:
    assert launch.launcher(PILOT, run="pilot", runtime_min=10, nodes=2) == (
        "CHESS_JOB_DEADLINE=$(( $(date +%s) + 540 )) OMP_NUM_THREADS=1"
        " srun --overlap --nodes=2 --ntasks=2 --ntasks-per-node=1 --kill-on-bad-exit=1"
        f" {sys.executable} -m torch.distributed.run --nnodes=2"
        " --nproc-per-node=2 --rdzv-backend=c10d --rdzv-id=$SLURM_JOB_ID"
        ' --rdzv-endpoint="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)":29500'
    )
    with pytest.raises(ValueError, match=r"runs\.pilot\.workers \(4\) must split over 3 nodes"):
        launch.launcher(PILOT, run="pilot", runtime_min=10, nodes=3)


def test_job_resources_follow_the_settings() -> None:
    assert (launch.gpus(DEMO), launch.threads(DEMO), launch.mem_mb(DEMO)) == (0, 2, 4000)
    assert (launch.gpus(PILOT), launch.cpus_per_gpu(PILOT), launch.mem_mb(PILOT)) == (4, 1, 33000)
    assert launch.runtime_minutes(RunSettings(dataset="d", max_seconds=60)) == 4  # 60 + 180 s
    assert launch.runtime_minutes(DEMO) == 10 and launch.deadline_seconds(10) == 540


def test_a_held_run_lock_is_waited_for_then_named_with_what_to_do(tmp_path: Path) -> None:
    fd = os.open(tmp_path / ".lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, b"4242 gpu-node-7\n")
    start = time.monotonic()
    with pytest.raises(RuntimeError) as caught:
        resume.lock_run_dir(tmp_path, wait_s=0.5)
    assert time.monotonic() - start >= 0.5
    message = str(caught.value)
    assert "pid 4242 on gpu-node-7" in message and "kill 4242" in message
    assert "run the same command again" in message
    threading.Timer(0.3, os.close, [fd]).start()  # the holder exits during the wait
    mine = resume.lock_run_dir(tmp_path, wait_s=10)
    assert (tmp_path / ".lock").read_text().split()[0] == str(os.getpid())
    os.close(mine)


def test_results_json_is_not_written_while_a_trainer_holds_the_run(tmp_path: Path) -> None:
    """Rule results (another snakemake's, with --nolock) refuses in one line while a trainer
    holds the run's lock, leaving results.json as it was; once the lock is free it writes."""
    from chesslm.files import write_json_atomic
    from chesslm.train import runlock, status

    train = tmp_path / "train"
    train.mkdir()
    write_json_atomic(train / "results.json", {"status": "max_updates"})
    write_json_atomic(tmp_path / "0.json", {"status": "max_updates", "terminal": True})
    out = tmp_path / "results.json"
    out.write_text("the other trainer's\n")
    held = runlock.lock_run_dir(train)  # as a live trainer holds it
    with pytest.raises(ValueError) as refused:
        status.write_run_results(train / "results.json", [tmp_path / "0.json"], out, wait_s=0.3)
    line = str(refused.value)
    assert line.startswith(f"{out} not written: {train}: another trainer (pid {os.getpid()}")
    assert "\n" not in line and out.read_text() == "the other trainer's\n"
    os.close(held)
    record = status.write_run_results(train / "results.json", [tmp_path / "0.json"], out)
    assert record["segment_count"] == 1 and json.loads(out.read_text()) == record


def snapshot(directory: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in directory.rglob("*") if p.is_file()}


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal: Linux")
def test_workers_die_with_their_launcher_and_write_nothing_after(
    tiny_cache: Path, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
        "-m", "chesslm.train.segment", "train", f"--cache={tiny_cache}", f"--run-dir={run_dir}",
        f"--status-out={run_dir}/segments/0.json", "--dataset=tiny", "--workers=2",
        "--micro=2", "--accum=2", "--epochs=20", "--validation-every-steps=1",
    ]  # fmt: skip
    log = open(tmp_path / "torchrun.log", "w")  # noqa: SIM115
    # its own process group, as Snakemake's job is: the group is what gets killed
    launcher = subprocess.Popen(
        command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while not (run_dir / "train" / "last.pt").exists():  # training, past its first save
            assert launcher.poll() is None, (tmp_path / "torchrun.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no checkpoint after 240 s"
            time.sleep(0.1)
        workers = children(launcher.pid)
        assert len(workers) == 2, workers
        os.killpg(launcher.pid, signal.SIGKILL)
        launcher.wait()
        gone_by = time.monotonic() + 5
        while any(alive(pid) for pid in workers) and time.monotonic() < gone_by:
            time.sleep(0.05)
        assert not any(alive(pid) for pid in workers), "workers outlived their launcher"
        before = snapshot(run_dir)
        time.sleep(3)
        assert snapshot(run_dir) == before
        assert not (run_dir / "segments" / "0.json").exists()
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
        for pid in children(launcher.pid):
            os.kill(pid, signal.SIGKILL)
        log.close()


def test_a_worker_whose_torchrun_is_gone_already_exits_at_once() -> None:
    """The race before the parent-death signal is set: the parent is not torchrun's agent."""
    code = "from chesslm.train import launch; launch.bind_to_launcher(); print('still here')"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TORCHELASTIC_RUN_ID": "x"}
    orphan = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert orphan.returncode == 1 and "still here" not in orphan.stdout
    env.pop("TORCHELASTIC_RUN_ID")  # not under torchrun: nothing changes
    plain = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert plain.returncode == 0 and "still here" in plain.stdout
