# Helpers only: config validation, settings with defaults, paths and input functions.
from pathlib import Path

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


def get_final_outputs():
    """What `snakemake` with no target builds: every dataset's cache, every run's summary."""
    outputs = [f"{dataset_dir(d)}/token-cache/cache.json" for d in DATASETS]
    outputs += [f"results/{run}/report/summary.md" for run in RUNS]
    return outputs
