"""Adapter for rule convert: PGN or Parquet files -> dataset shards + manifest."""

from chesslm import watch

watch.guard()  # first: a snakemake killed during the imports below ends this job too

from pathlib import Path

from chesslm import logs
from chesslm.data import convert

with logs.step("convert", snakemake.log[0]) as log:  # noqa: F821
    manifest = convert.convert(
        [Path(p) for p in snakemake.input.inputs],  # noqa: F821
        Path(snakemake.output.manifest).parent,  # noqa: F821
        snakemake.params.settings,  # noqa: F821
        workers=snakemake.threads,  # noqa: F821
    )
    log.info("fingerprint %s", manifest["fingerprint"])
