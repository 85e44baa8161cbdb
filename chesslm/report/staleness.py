"""Has a run's config or dataset changed since it trained?

Snakemake does not rerun a finished run when its settings change (the profile's rerun
triggers are ``mtime`` and ``input``, and no segment takes the dataset as an input, only the
probe does: workflow/rules/train.smk), so ``-n`` says "Nothing to be done" and the old
results stand. ``run_changes`` compares what
the run recorded (``results/{run}/train/identity.json``) with the current config, the dataset's
manifest and its integrity receipt, and names every difference in one line each; the workflow
prints them when it is parsed and ``summary.md`` opens with them. A dataset setting that an
older manifest does not record (a filter added since) reads as its default: the dataset was
built without it, which is what the default means.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from chesslm import commands, layout
from chesslm.data.settings import CONVERTER_VERSION, Settings
from chesslm.files import lookup

# runs.NAME keys the identity records under another name (dotted: one level down)
RENAMED = {"model": "model.preset", "workers": "world_size"}

RETRAIN = (
    "its results are those of the old settings; to train with the new ones use a new run "
    "name, or remove the run (rm -r results/{run} logs/{run}) and run it again"
)


def _read(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool):
        return float(a) == float(b)
    return a == b


def _differences(
    old: Any, new: Any, default: Any = None, prefix: str = ""
) -> list[tuple[str, Any, Any]]:
    """(dotted key, old, new) for every leaf that differs; a key ``old`` lacks reads as its
    value in ``default``."""
    if isinstance(old, dict) and isinstance(new, dict):
        defaults = default if isinstance(default, dict) else {}
        out = []
        for key in sorted(set(old) | set(new)):
            then = old[key] if key in old else defaults.get(key)
            out += _differences(then, new.get(key), defaults.get(key), f"{prefix}{key}.")
        return out
    return [] if _same(old, new) else [(prefix.rstrip("."), old, new)]


def run_changes(
    run: str,
    run_dir: Path | str,
    settings: dict[str, Any],
    *,
    dataset: str,
    dataset_dir: Path | str,
    dataset_settings: dict[str, Any] | None = None,
) -> list[str]:
    """One line per difference between run ``run``'s record and the config/dataset now.

    ``settings``: the run's keys and values (``dataclasses.asdict(RunSettings)``);
    ``dataset_settings``: the dataset's settings as the manifest records them
    (``chesslm.data.settings.Settings.as_dict()``).
    Empty when the run has not recorded its identity yet (it has not trained).
    """
    identity = _read(Path(layout.RunDir(run_dir).identity))
    if identity is None:
        return []
    changes = []
    for key, now in settings.items():
        recorded = RENAMED.get(key, key)
        if now is None or not ("." in recorded or recorded in identity):
            continue  # null: resolved at run time (e.g. the LR horizon), recorded resolved
        then = lookup(identity, recorded)
        if not _same(then, now):
            changes.append(f"runs.{run}.{key}: trained with {then!r}, config now {now!r}")
    files = layout.DatasetDir(dataset_dir)
    manifest = _read(Path(files.manifest))
    converted_by = (manifest or {}).get("converter_version")
    if converted_by is not None and converted_by != CONVERTER_VERSION:
        # a converter version changes what the files mean (e.g. v3's rated column)
        changes.append(
            f"datasets.{dataset}.converter_version: the dataset was converted by "
            f"{converted_by}, the converter is now {CONVERTER_VERSION}"
        )
    if manifest is not None and dataset_settings is not None:
        built = manifest.get("settings")
        for key, then, now in _differences(built, dataset_settings, Settings().as_dict()):
            changes.append(
                f"datasets.{dataset}.{key}: the dataset was built (and the run trained) with "
                f"{then!r}, config now {now!r}"
            )
    receipt = _read(Path(files.receipt))
    trained_on = identity.get("dataset_fingerprint")
    if receipt is not None and trained_on and receipt.get("dataset_fingerprint") != trained_on:
        changes.append(
            f"dataset {dataset} was rebuilt since the run trained: fingerprint "
            f"{str(trained_on)[:12]}… then, {str(receipt.get('dataset_fingerprint'))[:12]}… now"
        )
    return changes


def warning(run: str, changes: list[str]) -> str:
    """One line naming the run, what changed and how to retrain."""
    line = f"run {run} no longer matches the config: {'; '.join(changes)}; "
    line += RETRAIN.format(run=run)
    for dataset in dict.fromkeys(_unbuilt_datasets(changes)):
        command = commands.snakemake(layout.DatasetDir.of(dataset).cache_meta, forcerun="convert")
        line += f"; rebuild the dataset first ({command})"
    return line


def _unbuilt_datasets(changes: list[str]) -> list[str]:
    """Datasets whose config changed but whose files were not rebuilt."""
    return [c.split(".")[1] for c in changes if c.startswith("datasets.")]
