"""The pipeline on a real Slurm cluster (docs/slurm.md), through snakemake-executor-plugin-slurm.

Two parts:

* the SLURM profile and the rules' resources, checked on the plan (always runs, no cluster);
* ``-m slurm``: the CPU demo end to end with ``--executor slurm`` against a running slurmctld
  (``.ci/run`` brings one up with tools/slurm-local-up.sh and sets ``CHESSLM_SLURM=1``). A
  segment job is cancelled with ``scancel`` mid-run and the same command recovers it; every
  segment must appear in ``sacct`` as its own job; two torchrun agents meet through c10d.
  Without ``CHESSLM_SLURM=1`` these tests are skipped, and pytest's ``-ra`` summary says why.

The CI run caps the demo at ``CHESSLM_SLURM_MAX_UPDATES`` updates (default 120: the probe and
two segments, to fit the CI budget of 2 cores); set it to 0 for the whole demo (5 segments).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.helpers import ROOT, snakemake

PROFILE = ROOT / "workflow" / "profiles" / "slurm"
TARGET = "results/demo/results.json"
ON_SLURM = os.environ.get("CHESSLM_SLURM") == "1"
MAX_UPDATES = int(os.environ.get("CHESSLM_SLURM_MAX_UPDATES", "120"))
RUN_TIMEOUT_S = 600  # one snakemake invocation; the head is SIGKILLed past it (SIGTERM waits)
DEADLINE = re.compile(r"CHESS_JOB_DEADLINE=\$\(\( \$\(date \+%s\) \+ (\d+) \)\)")


def demo_workdir(path: Path) -> Path:
    (path / "config").mkdir(parents=True)
    shutil.copy(ROOT / "config" / "config.yaml", path / "config" / "config.yaml")
    (path / "resources").symlink_to(ROOT / "resources")
    return path


def job_blocks(plan: str) -> dict[str, str]:
    """rule name -> its block of a ``snakemake -n -p`` plan (the last block of each rule)."""
    blocks = re.split(r"\n(?=(?:localrule|rule|checkpoint) \w+:)", plan)
    return {
        m.group(1): b for b in blocks if (m := re.match(r"(?:localrule|rule|checkpoint) (\w+):", b))
    }


# --- the profile and the resources (no cluster) ------------------------------------------


def test_profile_submits_to_slurm_and_leaves_account_and_partition_to_the_user() -> None:
    profile = yaml.safe_load((PROFILE / "profile.yaml").read_text())
    assert profile["executor"] == "slurm"
    assert profile["rerun-triggers"] == ["mtime", "input"]  # as the default profile
    text = json.dumps(profile)
    for key in ("slurm_account", "slurm_partition", "default-resources"):
        assert key not in text, key


@pytest.fixture(scope="module")
def plan(tmp_path_factory) -> dict[str, str]:
    workdir = demo_workdir(tmp_path_factory.mktemp("slurm-plan"))
    # a segment is planned once the probe has run (a checkpoint): its job is asked for alone
    segment = "results/demo/segments/0.json"
    out = snakemake(workdir, TARGET, "results/pilot/probe-results.json", segment, "-n", "-p")
    short = snakemake(workdir, segment, "-n", "-p", "--set-resources", "train_segment:runtime=3")
    return {"plan": out.stdout, "short": short.stdout}


def test_training_jobs_ask_for_the_runs_gpus_cpus_memory_and_a_runtime(plan) -> None:
    blocks = re.split(r"\n(?=(?:localrule|rule|checkpoint) \w+:)", plan["plan"])
    probes = {
        b.split("wildcards: run=")[1].split()[0]: b for b in blocks if "checkpoint probe:" in b
    }
    # demo: 2 cpu workers -> no GPU, 2 threads, 1000 + 2*1500 MB; pilot: 2 GPUs, 1000 + 2*8000
    assert "gpu=0, cpus_per_gpu=1, runtime=10, mem_mb=4000" in probes["demo"], probes["demo"]
    assert "gpu=2, cpus_per_gpu=1, runtime=10, mem_mb=17000" in probes["pilot"], probes["pilot"]
    segment = job_blocks(plan["plan"])["train_segment"]
    assert "gpu=0, cpus_per_gpu=1, runtime=10, mem_mb=4000" in segment, segment
    # runtime 10 min = max_seconds 420 + 180 s, rounded up; the deadline is 60 s before its end
    assert DEADLINE.search(segment).group(1) == str(10 * 60 - 60)


def test_a_shorter_runtime_moves_the_segment_deadline_with_it(plan) -> None:
    segment = job_blocks(plan["short"])["train_segment"]
    assert "runtime=3" in segment and DEADLINE.search(segment).group(1) == str(3 * 60 - 60)


def test_data_rules_ask_for_memory_and_a_runtime_and_results_is_local(plan) -> None:
    blocks = job_blocks(plan["plan"])  # threads (8, 1, 4) show in sbatch, not in the plan
    for rule, mem in (("convert", 4000), ("verify", 1000), ("token_cache", 4000)):
        assert f"runtime=16, mem_mb={mem}" in blocks[rule], blocks[rule]
    # results waits for the checkpoint, so the plan does not show it; the cluster test checks
    # that it never reaches sacct
    rules = (ROOT / "workflow/rules/train.smk").read_text()
    assert re.search(r"localrules:\n    results,", rules)


# --- a real cluster ------------------------------------------------------------------------

slurm = pytest.mark.skipif(
    not ON_SLURM,
    reason="Slurm end-to-end test off: needs a running cluster and CHESSLM_SLURM=1"
    " (.ci/run brings one up; CHESSLM_SKIP_SLURM=1 skips it there)",
)


def sh(*cmd: str, timeout: float = 30) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=timeout).stdout


def cancel_jobs_in(workdir: Path) -> None:
    """scancel the jobs still queued or running in workdir (after a killed snakemake)."""
    for line in sh("squeue", "-h", "-o", "%i %Z").splitlines():
        job, where = line.split(maxsplit=1)
        if Path(where) == workdir:
            subprocess.run(["scancel", job], timeout=30, check=False)


def slurm_snakemake(workdir: Path) -> subprocess.Popen[str]:
    exe = shutil.which("snakemake", path=str(Path(sys.executable).parent)) or "snakemake"
    cmd = [
        exe, TARGET, "--snakefile", str(ROOT / "Snakefile"), "--directory", str(workdir),
        "--workflow-profile", str(PROFILE),
        "--max-threads", "2",  # the CI node has 2 CPUs; convert asks for 8 (sbatch would refuse)
        "--slurm-init-seconds-before-status-checks", "5",
    ]  # fmt: skip
    if MAX_UPDATES:
        cap = workdir / "cap.yaml"  # merged into config/config.yaml's demo run
        cap.write_text(f"runs:\n  demo:\n    max_updates: {MAX_UPDATES}\n")
        cmd += ["--configfile", str(workdir / "config/config.yaml"), str(cap)]
    log = open(workdir / f"snakemake-{time.time_ns()}.log", "w")  # noqa: SIM115
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        cmd, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT, text=True
    )


def finish(proc: subprocess.Popen[str], workdir: Path) -> int:
    try:
        return proc.wait(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        cancel_jobs_in(workdir)
        raise AssertionError(f"snakemake ran past {RUN_TIMEOUT_S} s; see {workdir}") from None


def running_job(comment: str) -> str | None:
    for line in sh("squeue", "-h", "-t", "R", "-o", "%i %k").splitlines():
        job, text = line.split(maxsplit=1)
        if text == comment:
            return job
    return None


def log_tail(workdir: Path) -> str:
    logs = sorted(workdir.glob("snakemake-*.log"))
    return "".join(p.read_text()[-3000:] for p in logs)


@pytest.fixture(scope="module")
def cluster_run(tmp_path_factory) -> dict:
    """The demo under --executor slurm; segment 1 is scancelled mid-run, then the same command
    runs again and completes."""
    workdir = demo_workdir(tmp_path_factory.mktemp("slurm-demo"))
    since = time.strftime("%Y-%m-%dT%H:%M:%S")
    first = slurm_snakemake(workdir)
    seg_log = workdir / "logs/demo/train_segment/1.log"
    cancelled, t0 = None, time.monotonic()
    while first.poll() is None and time.monotonic() - t0 < RUN_TIMEOUT_S:
        # mid-run: segment 1's first training event is logged and its job is running
        if seg_log.exists() and '"stage": "train"' in seg_log.read_text():
            cancelled = running_job("rule_train_segment_wildcards_demo_1")
            if cancelled:
                sh("scancel", cancelled)
                break
        time.sleep(0.5)
    first_rc = finish(first, workdir)
    assert cancelled, f"segment 1 never ran:\n{log_tail(workdir)}"
    status_after_cancel = (workdir / "results/demo/segments/1.json").exists()
    second_rc = finish(slurm_snakemake(workdir), workdir)
    assert second_rc == 0, f"the rerun failed ({second_rc}):\n{log_tail(workdir)}"
    rows = sh(
        "sacct", "-X", "-n", "-P", "-S", since, "-o", "JobID,State,Comment,WorkDir%200"
    ).splitlines()
    jobs = [
        dict(zip(("id", "state", "comment", "workdir"), r.split("|"), strict=True)) for r in rows
    ]
    return {
        "workdir": workdir,
        "first_rc": first_rc,
        "cancelled": cancelled,
        "status_after_cancel": status_after_cancel,
        "jobs": [j for j in jobs if Path(j["workdir"]) == workdir],
    }


@slurm
@pytest.mark.slurm
def test_the_run_reaches_a_terminal_status(cluster_run) -> None:
    results = json.loads((cluster_run["workdir"] / TARGET).read_text())
    assert results["terminal"] if "terminal" in results else True
    assert results["status"] in ("max_updates", "max_epochs", "early_stop_5_checks"), results
    assert results["test_evaluated"] is False
    if MAX_UPDATES:
        assert results["status"] == "max_updates" and results["segment_count"] == MAX_UPDATES // 60


@slurm
@pytest.mark.slurm
def test_a_cancelled_segment_is_recovered_by_rerunning(cluster_run) -> None:
    assert cluster_run["first_rc"] != 0  # the chain stopped at the cancelled segment
    assert not cluster_run["status_after_cancel"]  # and wrote no status
    states = {j["id"]: j["state"] for j in cluster_run["jobs"]}
    assert states[cluster_run["cancelled"]].startswith("CANCELLED"), states
    segment_1 = json.loads((cluster_run["workdir"] / "results/demo/segments/1.json").read_text())
    assert segment_1["resume_action"] == "resumed" and segment_1["step_start"] == 60, segment_1


@slurm
@pytest.mark.slurm
def test_every_segment_is_its_own_sacct_job(cluster_run) -> None:
    results = json.loads((cluster_run["workdir"] / TARGET).read_text())
    done = {j["comment"]: j["id"] for j in cluster_run["jobs"] if j["state"] == "COMPLETED"}
    for n in range(results["segment_count"]):
        assert f"rule_train_segment_wildcards_demo_{n}" in done, cluster_run["jobs"]
    for rule in ("convert_wildcards_sample", "verify_wildcards_sample", "probe_wildcards_demo"):
        assert f"rule_{rule}" in done, cluster_run["jobs"]
    assert len(set(done.values())) == len(done)
    assert not any("results" in j["comment"] for j in cluster_run["jobs"])  # a local rule


@slurm
@pytest.mark.slurm
def test_two_torchrun_nodes_meet_through_c10d(cluster_run) -> None:
    """Multi-node launch as get_launcher writes it (one torchrun per node under
    `srun --overlap`, c10d rendezvous), with two agents standing for two nodes on this host."""
    workdir = cluster_run["workdir"]
    out = workdir / "c10d"
    out.mkdir()
    launch = (
        "OMP_NUM_THREADS=1 srun --overlap --ntasks=2 --kill-on-bad-exit=1"
        f" {sys.executable} -m torch.distributed.run --nnodes=2 --nproc-per-node=1"
        " --rdzv-backend=c10d --rdzv-id=$SLURM_JOB_ID --rdzv-endpoint=127.0.0.1:29517"
        " -m chesslm.train.segment probe --run-name=demo"
        " --cache=results/datasets/sample/token-cache"
        f" --run-dir={out} --integrity-receipt=results/datasets/sample/integrity-receipt.json"
        f" --dataset=sample --model=tiny --device=cpu --workers=2 --threads-per-worker=1"
        " --micro=8 --accum=2"
        f" --probe-out={out}/probe-results.json"
    )
    result = subprocess.run(
        ["sbatch", "--wait", "-n", "2", "-c", "1", "--mem", "3000", "-t", "5",
         "-o", str(out / "job.log"), "-D", str(workdir), "--wrap", launch],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    log = (out / "job.log").read_text() if (out / "job.log").exists() else ""
    assert result.returncode == 0, f"{result.stderr}\n{log[-4000:]}"
    probe = json.loads((out / "probe-results.json").read_text())
    assert probe["status"] == "passed" and probe["world_size"] == 2, probe
    assert "rank 1 of 2" in log, log[-4000:]
