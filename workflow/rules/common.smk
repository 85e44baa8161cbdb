# Helpers only: config validation, settings with defaults, paths and input functions.
import json
import math
import os
import sys
from pathlib import Path

import jsonschema
import yaml
from snakemake.utils import validate

from chesslm.data import dataset as chesslm_dataset


def _check_schema():
    """One line naming the first bad key; then snakemake's validate fills in the defaults."""
    schema_path = Path(workflow.basedir) / "workflow/schemas/config.schema.yaml"
    schema = yaml.safe_load(schema_path.read_text())
    errors = jsonschema.Draft202012Validator(schema).iter_errors(config)
    first = min(errors, key=lambda e: [str(p) for p in e.absolute_path], default=None)
    if first is not None:
        where = ".".join(str(p) for p in first.absolute_path) or "(top level)"
        raise ValueError(f"config: {where}: {first.message}")


_check_schema()
validate(config, schema="../schemas/config.schema.yaml")

DATASETS = sorted(config["datasets"])
RUNS = sorted(config.get("runs", {}))


def _check_config():
    """Cross-key checks the schema cannot express; one line naming the key."""
    chesslm_dataset.check_config(config["datasets"])
    for run, settings in config.get("runs", {}).items():
        if settings["dataset"] not in config["datasets"]:
            raise ValueError(
                f"config: runs.{run}.dataset is {settings['dataset']!r}, "
                f"which is not a dataset (known: {', '.join(DATASETS)})"
            )
        warmup, horizon = settings.get("warmup_steps"), settings.get("schedule_steps")
        if warmup is not None and horizon is not None and warmup >= horizon:
            raise ValueError(
                f"config: runs.{run}.warmup_steps ({warmup}) must be shorter than "
                f"runs.{run}.schedule_steps ({horizon})"
            )


_check_config()


wildcard_constraints:
    dataset="|".join(DATASETS) or "NONE",
    run="|".join(RUNS) or "NONE",
    n=r"\d+",


def get_dataset_settings(wildcards):
    """The conversion settings of a dataset (schema defaults already applied)."""
    return chesslm_dataset.Settings.from_config(config["datasets"][wildcards.dataset])


def get_pgn_inputs(wildcards):
    return config["datasets"][wildcards.dataset]["pgn"]


def dataset_dir(name):
    return f"results/datasets/{name}"


def run_settings(run):
    """A run's settings with every default filled in."""
    return dict(config["runs"][run])


def run_dataset(run):
    return config["runs"][run]["dataset"]


def cache_dir(run):
    return f"{dataset_dir(run_dataset(run))}/token-cache"


def receipt_path(run):
    return f"{dataset_dir(run_dataset(run))}/integrity-receipt.json"


# --- training -------------------------------------------------------------------------


def get_previous_segment(wildcards):
    """Segment n's input: the status of segment n-1 (none for the first segment)."""
    n = int(wildcards.n)
    return [] if n == 0 else f"results/{wildcards.run}/segments/{n - 1}.json"


def get_previous_status_flag(wildcards):
    """The trainer's --previous-status flag for segment n (none for the first segment)."""
    previous = get_previous_segment(wildcards)
    return f"--previous-status={previous}" if previous else ""


def get_run_cache(wildcards):
    return f"{cache_dir(wildcards.run)}/cache.json"


def get_run_receipt(wildcards):
    return receipt_path(wildcards.run)


def get_trainer_args(wildcards):
    """The chesslm.train.segment flags of a run (shared by probe and train_segment)."""
    s = run_settings(wildcards.run)
    args = [
        f"--run-name={wildcards.run}",
        f"--cache={cache_dir(wildcards.run)}",
        f"--run-dir=results/{wildcards.run}",
        f"--integrity-receipt={receipt_path(wildcards.run)}",
        f"--model={s['model']}",
        f"--device={s['device']}",
        f"--workers={s['workers']}",
        f"--threads={s['threads_per_worker']}",
        f"--micro={s['micro']}",
        f"--accum={s['accum']}",
        f"--lr={s['lr']}",
        f"--epochs={s['epochs']}",
        f"--seed={s['seed']}",
        f"--max-seconds={s['max_seconds']}",
    ]
    for key in (
        "validation_every_steps",
        "legality_eval_games",
        "schedule_steps",
        "warmup_steps",
        "max_updates",
        "segment_updates",
    ):
        if s.get(key) is not None:
            args.append(f"--{key.replace('_', '-')}={s[key]}")
    # speed: compile and CUDA graphs (null = auto: on for cuda, off for cpu), packed rows
    if s.get("compile") is not None:
        args.append(f"--compile={'on' if s['compile'] else 'off'}")
    if s.get("cuda_graphs") is not None:
        args.append(f"--cuda-graphs={'on' if s['cuda_graphs'] else 'off'}")
    if s.get("packing"):
        args.append("--packing=on")
    return " ".join(args)


def get_torchrun(wildcards):
    """torchrun for the run's workers; OMP_NUM_THREADS is set per rank because Snakemake
    exports OMP_NUM_THREADS={threads} and torchrun hands it to every rank unchanged."""
    s = run_settings(wildcards.run)
    return (
        f"OMP_NUM_THREADS={s['threads_per_worker']} {sys.executable} -m torch.distributed.run"
        f" --standalone --nproc-per-node={s['workers']}"
    )


def get_segment_threads(wildcards):
    s = run_settings(wildcards.run)
    return s["workers"] * s["threads_per_worker"]


def get_segment_statuses(wildcards):
    """Input function: the status files of segments 0..k, k being the first terminal one."""
    run = wildcards.run
    cap = run_settings(run)["max_segments"]
    paths = []
    for n in range(cap):
        path = checkpoints.train_segment.get(run=run, n=n).output.status
        paths.append(path)
        with open(path) as fh:
            if json.load(fh).get("terminal"):
                return paths
    raise ValueError(
        f"run {run}: no terminal status after runs.{run}.max_segments={cap} segments"
        f" (see results/{run}/segments/); raise max_segments to continue"
    )


# Cluster resources of probe and train_segment (docs/slurm.md). Local runs ignore them, except
# the deadline: a segment stops DEADLINE_MARGIN_S (+ the trainer's own 30 s) before its
# `runtime` ends, so it never outlives its allocation, also when `--set-resources` shortens it.
# SEGMENT_OVERHEAD_S: torchrun start, data and model setup, last validation, last.pt.
# DEADLINE_MARGIN_S: checkpoint write and process exit after the soft stop.
SEGMENT_OVERHEAD_S = 180
DEADLINE_MARGIN_S = 60


def get_segment_gpus(wildcards):
    """GPUs of a probe/segment job: one per worker on cuda, none on cpu."""
    s = run_settings(wildcards.run)
    return s["workers"] if s["device"] == "cuda" else 0


def get_segment_cpus_per_gpu(wildcards):
    return run_settings(wildcards.run)["threads_per_worker"]


def get_segment_mem_mb(wildcards):
    """Host memory: measured RSS per rank (tiny/cpu under 1 GiB; baseline/cuda 2.4 GiB, plus
    checkpoint copies), with headroom."""
    s = run_settings(wildcards.run)
    return 1000 + s["workers"] * (8000 if s["device"] == "cuda" else 1500)


def get_segment_runtime(wildcards):
    """Minutes: the segment's training budget (max_seconds) plus its overhead."""
    budget_s = run_settings(wildcards.run)["max_seconds"]
    return math.ceil((budget_s + SEGMENT_OVERHEAD_S) / 60)


def get_data_runtime(wildcards):
    """Minutes for a data rule: 15 plus 1 per 300 MB of the dataset's PGN input (convert
    measured >= 10,000 games/s per core, about 3 MB/s of .pgn.zst)."""
    pgn = config["datasets"][wildcards.dataset]["pgn"]
    size_mb = sum(os.path.getsize(p) for p in pgn if os.path.exists(p)) / 2**20
    return 15 + math.ceil(size_mb / 300)


def get_launcher(wildcards, resources):
    """The command that starts the run's ranks: CHESS_JOB_DEADLINE (job start + runtime - margin)
    and torchrun. With resources.nodes > 1 (SLURM, docs/slurm.md): one torchrun per node through
    `srun --overlap` (the jobstep's own srun holds the CPUs), c10d rendezvous on the first node,
    workers split evenly over the nodes."""
    deadline = int(resources.runtime) * 60 - DEADLINE_MARGIN_S
    env = f"CHESS_JOB_DEADLINE=$(( $(date +%s) + {deadline} ))"
    nodes = int(resources.get("nodes", 1) or 1)
    if nodes == 1:
        return f"{env} {get_torchrun(wildcards)}"
    s = run_settings(wildcards.run)
    if s["workers"] % nodes:
        raise ValueError(
            f"runs.{wildcards.run}.workers ({s['workers']}) must split over {nodes} nodes"
        )
    return (
        f"{env} OMP_NUM_THREADS={s['threads_per_worker']}"
        f" srun --overlap --nodes={nodes} --ntasks={nodes} --ntasks-per-node=1 --kill-on-bad-exit=1"
        f" {sys.executable} -m torch.distributed.run --nnodes={nodes}"
        f" --nproc-per-node={s['workers'] // nodes} --rdzv-backend=c10d --rdzv-id=$SLURM_JOB_ID"
        f' --rdzv-endpoint="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)":29500'
    )


# --- reports and targets -----------------------------------------------------------------


def get_summary_targets(runs=None):
    """summary.md of each run (default: every run in config['runs']); one file pulls all."""
    return [f"results/{run}/report/summary.md" for run in (runs or RUNS)]


def get_final_outputs():
    """What `snakemake` with no target builds: every dataset's cache, every run's summary."""
    outputs = [f"{dataset_dir(d)}/token-cache/cache.json" for d in DATASETS]
    outputs += get_summary_targets()
    return outputs
