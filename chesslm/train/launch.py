"""How a run's ranks are started, what a probe or segment job asks a scheduler for, and how the
ranks end with their launcher.

The rules ``probe`` and ``train_segment`` (workflow/rules/train.smk) take their shell prefix
from ``launcher`` and their resources from ``gpus``, ``threads``, ``cpus_per_gpu``, ``mem_mb``
and ``runtime_minutes``. Local runs ignore the resources except the deadline: a segment stops
``DEADLINE_MARGIN_S`` (+ the trainer's own 30 s, chesslm.train.deadline) before its
``runtime`` ends, so it never outlives its allocation, also when ``--set-resources`` shortens
it. Multi-node launches (SLURM) are described in docs/slurm.md.

Each rank calls ``bind_to_launcher`` first: torchrun starts its workers in sessions of their
own, so killing the launcher's process group alone would leave them training and writing.

>>> s = RunSettings(dataset="sample", workers=2)
>>> runtime_minutes(s), deadline_seconds(runtime_minutes(s))
(10, 540)
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import sys

from chesslm import watch
from chesslm.train.settings import RunSettings

# SEGMENT_OVERHEAD_S: torchrun start, data and model setup, last validation, last.pt.
SEGMENT_OVERHEAD_S = 180
# DEADLINE_MARGIN_S: checkpoint write and process exit after the soft stop.
DEADLINE_MARGIN_S = 60
C10D_PORT = 29500


def gpus(s: RunSettings) -> int:
    """GPUs of a probe/segment job: one per worker on cuda, none on cpu."""
    return s.workers if s.device == "cuda" else 0


def threads(s: RunSettings) -> int:
    return s.workers * s.threads_per_worker


def cpus_per_gpu(s: RunSettings) -> int:
    return s.threads_per_worker


def mem_mb(s: RunSettings) -> int:
    """Host memory: measured RSS per rank (tiny/cpu under 1 GiB; baseline/cuda 2.4 GiB, plus
    checkpoint copies), with headroom."""
    return 1000 + s.workers * (8000 if s.device == "cuda" else 1500)


def runtime_minutes(s: RunSettings) -> int:
    """A job's runtime: the segment's training budget (max_seconds) plus its overhead."""
    return math.ceil((s.max_seconds + SEGMENT_OVERHEAD_S) / 60)


def deadline_seconds(runtime_min: int) -> int:
    """Seconds from a job's start to its CHESS_JOB_DEADLINE."""
    return runtime_min * 60 - DEADLINE_MARGIN_S


def torchrun(s: RunSettings) -> str:
    """torchrun for the run's workers on one node. OMP_NUM_THREADS is set per rank because
    Snakemake exports OMP_NUM_THREADS={threads} and torchrun hands it to every rank unchanged."""
    return (
        f"OMP_NUM_THREADS={s.threads_per_worker} {sys.executable} -m torch.distributed.run"
        f" --standalone --nproc-per-node={s.workers}"
    )


def launcher(s: RunSettings, *, run: str, runtime_min: int, nodes: int = 1) -> str:
    """The shell command that starts the run's ranks: CHESS_JOB_DEADLINE (job start + runtime -
    margin), then torchrun. With ``nodes`` > 1 (SLURM): one torchrun per node through
    ``srun --overlap`` (the jobstep's own srun holds the CPUs), c10d rendezvous on the first
    node, workers split evenly over the nodes.

    :raises ValueError: if the workers do not split evenly over the nodes.
    """
    env = f"CHESS_JOB_DEADLINE=$(( $(date +%s) + {deadline_seconds(runtime_min)} ))"
    if nodes == 1:
        return f"{env} {torchrun(s)}"
    if s.workers % nodes:
        raise ValueError(f"runs.{run}.workers ({s.workers}) must split over {nodes} nodes")
    return (
        f"{env} OMP_NUM_THREADS={s.threads_per_worker}"
        f" srun --overlap --nodes={nodes} --ntasks={nodes} --ntasks-per-node=1 --kill-on-bad-exit=1"
        f" {sys.executable} -m torch.distributed.run --nnodes={nodes}"
        f" --nproc-per-node={s.workers // nodes} --rdzv-backend=c10d --rdzv-id=$SLURM_JOB_ID"
        f' --rdzv-endpoint="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)"'
        f":{C10D_PORT}"
    )


def left_out_here(s: RunSettings) -> str | None:
    """Why this machine cannot run ``s`` locally (None if it can): a cuda run needs CUDA."""
    return "device cuda, no CUDA here" if no_cuda_here(s.device) else None


def no_cuda_here(device: str) -> bool:
    """Whether ``device`` is cuda and this machine has none."""
    if device != "cuda":
        return False
    import torch  # only for cuda: torch's import is the slow part of a plan

    return not torch.cuda.is_available()


def bind_to_launcher() -> None:
    """A torchrun worker dies with its torchrun (Linux): SIGKILL when the agent exits, and
    exit now if it has exited already. Elsewhere (no torchrun, not Linux) nothing changes.

    torchrun starts every worker in a session of its own, so ``kill -9 -- -PGID`` of Snakemake,
    a closed terminal or a job's cleanup kills torchrun but not the workers, which would go on
    to write ``last.pt`` and a status file beside a rerun.
    """
    if not sys.platform.startswith("linux") or "TORCHELASTIC_RUN_ID" not in os.environ:
        return
    watch.die_with_parent()
    # the parent is torchrun's agent; if it was killed before the prctl above, this process
    # was handed to init or a subreaper, and nobody waits for it
    if not _is_torchrun(os.getppid()):
        os._exit(1)


def _is_torchrun(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            words = fh.read().split(b"\0")
    except OSError:
        return False
    return any(
        w in (b"torch.distributed.run", b"torchrun") or w.endswith(b"/torchrun") for w in words
    )


# CHESSLM_EXIT_TEARDOWN=1 keeps the interpreter's own teardown (benchmarks/exit_stress.py)
TEARDOWN_ENV = "CHESSLM_EXIT_TEARDOWN"


def end_process(code: int) -> None:
    """Exit with ``code`` once this rank's work is done and its process group destroyed: the
    atexit functions run and the streams are flushed, but the interpreter's teardown is
    skipped. In that teardown torch's and gloo's C++ objects, threads among them, are
    destroyed in an order nobody controls, and now and then a rank aborted there after an
    orderly end ("terminate called without an active exception": about 1 launch in 250 on a
    busy host; benchmarks/exit_stress.py), failing a job whose outputs were complete."""
    if os.environ.get(TEARDOWN_ENV) == "1":
        raise SystemExit(code)
    atexit._run_exitfuncs()  # logging's flush among them
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)
