"""A finished run whose config or dataset changed since it trained: real snakemake warns on
every invocation (``-n`` included) and summary.md opens with the same line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chesslm.data.convert import CONVERTER_VERSION, Settings
from chesslm.report import staleness
from tests.helpers import snakemake

TARGET = "results/mini/results.json"
SUMMARY = "results/mini/report/summary.md"


@pytest.mark.slow
def test_changed_epochs_and_split_are_loud(trained_workflow: Path) -> None:
    (trained_workflow / "stale.yaml").write_text(
        "runs: {mini: {epochs: 2}}\ndatasets: {mini: {split: {validation: 0.2}}}\n"
    )
    stale = ("--configfile", "train-workflow.yaml", "stale.yaml")
    plan = snakemake(trained_workflow, TARGET, *stale, "-n")
    assert "Nothing to be done" in plan.stdout + plan.stderr  # Snakemake itself sees no change
    warning = next(line for line in plan.stderr.splitlines() if line.startswith("WARNING: run "))
    assert warning.startswith("WARNING: run mini no longer matches the config: ")
    assert "runs.mini.epochs: trained with 1, config now 2" in warning
    assert (
        "datasets.mini.split.validation: the dataset was built (and the run trained) with 0.1, "
        "config now 0.2" in warning
    )
    assert "use a new run name, or remove the run" in warning
    try:
        snakemake(trained_workflow, SUMMARY, *stale, "--forcerun", "summarise", "--cores", "1")
        first = (trained_workflow / SUMMARY).read_text().splitlines()[0]
        assert first.startswith("**Warning: run mini no longer matches the config: runs.mini.")
        assert "datasets.mini.split.validation" in first
    finally:  # leave the shared run as it was
        current = ("--configfile", "train-workflow.yaml")
        snakemake(trained_workflow, SUMMARY, *current, "--forcerun", "summarise", "--cores", "1")
    assert (trained_workflow / SUMMARY).read_text().startswith("# Run `mini`")
    plan = snakemake(trained_workflow, TARGET, "--configfile", "train-workflow.yaml", "-n")
    assert "WARNING" not in plan.stderr


def write(path: Path, value: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value))


def test_run_changes_compares_identity_manifest_and_receipt(tmp_path: Path) -> None:
    run_dir, dataset_dir = tmp_path / "results" / "r", tmp_path / "results" / "datasets" / "d"
    settings = {"model": "tiny", "device": "cpu", "workers": 2, "seed": 1, "micro": 4}
    settings |= {"accum": 1, "lr": 3e-3, "epochs": 1, "max_updates": 6, "packing": False}
    settings |= {"validation_every_steps": 3, "legality_eval_games": 8, "schedule_steps": None}
    built = {"context": 1024, "split": {"key": "k", "validation": 0.1, "test": 0.1}}
    args = {"dataset": "d", "dataset_dir": dataset_dir, "dataset_settings": built}
    assert staleness.run_changes("r", run_dir, settings, **args) == []  # not trained yet
    identity = {k: v for k, v in settings.items() if k not in ("model", "workers")}
    identity |= {"model": {"preset": "tiny"}, "world_size": 2, "dataset_fingerprint": "a" * 64}
    identity |= {"schedule_steps": 60, "warmup_steps": 6}
    write(run_dir / "train" / "identity.json", identity)
    write(dataset_dir / "manifest.json", {"settings": built})
    write(dataset_dir / "integrity-receipt.json", {"dataset_fingerprint": "a" * 64})
    assert staleness.run_changes("r", run_dir, settings, **args) == []
    now = {**settings, "lr": 0.003, "epochs": 2, "workers": 4, "warmup_steps": 10}
    rebuilt = {**built, "split": {**built["split"], "validation": 0.2}}
    write(dataset_dir / "integrity-receipt.json", {"dataset_fingerprint": "b" * 64})
    changes = staleness.run_changes("r", run_dir, now, **{**args, "dataset_settings": rebuilt})
    assert changes == [
        "runs.r.workers: trained with 2, config now 4",
        "runs.r.epochs: trained with 1, config now 2",
        "runs.r.warmup_steps: trained with 6, config now 10",
        "datasets.d.split.validation: the dataset was built (and the run trained) with 0.1, "
        "config now 0.2",
        "dataset d was rebuilt since the run trained: fingerprint aaaaaaaaaaaa… then, "
        "bbbbbbbbbbbb… now",
    ]
    line = staleness.warning("r", changes)
    assert line.startswith("run r no longer matches the config: runs.r.workers: trained with 2")
    assert line.endswith(
        "or remove the run (rm -r results/r logs/r) and run it again; rebuild the dataset first "
        "(snakemake --cores 2 results/datasets/d/token-cache/cache.json --forcerun convert)"
    )


DEFAULTS = Settings().as_dict()


@pytest.mark.parametrize(
    "key", [k for k, v in DEFAULTS["filters"].items() if v is not None] + ["all filters"]
)
def test_a_filter_an_old_manifest_lacks_reads_as_its_default(tmp_path: Path, key: str) -> None:
    """A filter added since a dataset was built (its key absent from the manifest) is not a
    change while the config leaves it at its default; set to anything else, it is."""
    run_dir, dataset_dir = tmp_path / "r", tmp_path / "d"
    write(run_dir / "train" / "identity.json", {"seed": 1})
    old = {k: v for k, v in DEFAULTS["filters"].items() if k != key and key != "all filters"}
    write(dataset_dir / "manifest.json", {"settings": {**DEFAULTS, "filters": old}})
    args = {"dataset": "d", "dataset_dir": dataset_dir}
    assert staleness.run_changes("r", run_dir, {}, **args, dataset_settings=DEFAULTS) == []
    changed = "min_plies" if key == "all filters" else key
    default = DEFAULTS["filters"][changed]
    other = {bool: not default, int: 10, list: ["Abandoned"]}[type(default)]
    now = {**DEFAULTS, "filters": {**DEFAULTS["filters"], changed: other}}
    assert staleness.run_changes("r", run_dir, {}, **args, dataset_settings=now) == [
        f"datasets.d.filters.{changed}: the dataset was built (and the run trained) with "
        f"{default!r}, config now {other!r}"
    ]


def test_a_dataset_of_an_older_converter_is_a_change(tmp_path: Path) -> None:
    """A converter version changes what the files mean (v3: the rated column), so a run on a
    dataset converted by another version is told to rebuild it; a current one is no change,
    and neither is a manifest too old to record its converter, nor the train_games key an
    old manifest lacks (read as its default, null)."""
    run_dir, dataset_dir = tmp_path / "r", tmp_path / "d"
    write(run_dir / "train" / "identity.json", {"seed": 1})
    old = {k: v for k, v in DEFAULTS.items() if k != "train_games"}
    args = {"dataset": "d", "dataset_dir": dataset_dir, "dataset_settings": DEFAULTS}
    write(dataset_dir / "manifest.json", {"settings": old})
    assert staleness.run_changes("r", run_dir, {}, **args) == []
    write(dataset_dir / "manifest.json", {"settings": old, "converter_version": CONVERTER_VERSION})
    assert staleness.run_changes("r", run_dir, {}, **args) == []
    write(
        dataset_dir / "manifest.json", {"settings": old, "converter_version": "chesslm-convert-v2"}
    )
    changes = staleness.run_changes("r", run_dir, {}, **args)
    assert changes == [
        "datasets.d.converter_version: the dataset was converted by chesslm-convert-v2, "
        f"the converter is now {CONVERTER_VERSION}"
    ]
    assert staleness.warning("r", changes).endswith(
        "rebuild the dataset first (snakemake --cores 2 results/datasets/d/token-cache/cache.json "
        "--forcerun convert)"
    )
