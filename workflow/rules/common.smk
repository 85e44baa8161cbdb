# Helpers only: config validation, settings with defaults, paths and input functions.
import json
import sys

from snakemake.utils import validate

from chesslm import dataset as chesslm_dataset

validate(config, schema="../schemas/config.schema.yaml")

DATASETS = sorted(config["datasets"])
RUNS = sorted(config.get("runs", {}))


def _check_config():
    """Cross-key checks the schema cannot express; one line naming the key."""
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


def dataset_settings(name):
    """The conversion settings of a dataset (schema defaults already applied)."""
    d = config["datasets"][name]
    return chesslm_dataset.Settings(
        context=d["context"],
        split_key=d["split"]["key"],
        validation=d["split"]["validation"],
        test=d["split"]["test"],
        min_plies=d["filters"]["min_plies"],
        shard_games=d["shard_games"],
    )


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


def get_run_cache(wildcards):
    return f"{cache_dir(wildcards.run)}/cache.json"


def get_run_receipt(wildcards):
    return receipt_path(wildcards.run)


def get_trainer_args(wildcards):
    """The chesslm.segment flags of a run (shared by probe and train_segment)."""
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


# --- reports and targets -----------------------------------------------------------------


def get_summary_targets(runs=None):
    """summary.md of each run (default: every run in config['runs']); one file pulls all."""
    return [f"results/{run}/report/summary.md" for run in (runs or RUNS)]


def get_final_outputs():
    """What `snakemake` with no target builds: every dataset's cache, every run's summary."""
    outputs = [f"{dataset_dir(d)}/token-cache/cache.json" for d in DATASETS]
    outputs += get_summary_targets()
    return outputs
