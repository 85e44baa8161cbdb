"""Adapter for rule verify: re-hash every dataset file, write the integrity receipt."""

from chesslm import watch

watch.guard()  # first: a snakemake killed during the imports below ends this job too

from pathlib import Path

from chesslm import files, logs
from chesslm.data import integrity

with logs.step("verify", snakemake.log[0]) as log:  # noqa: F821
    receipt = integrity.verify_dataset(Path(snakemake.input.manifest).parent)  # noqa: F821
    files.write_json_atomic(Path(snakemake.output.receipt), receipt)  # noqa: F821
    log.info(
        "verified %d files; fingerprint %s", len(receipt["files"]), receipt["dataset_fingerprint"]
    )
