"""Adapter for rule results: the terminal train/results.json plus every segment status."""

from chesslm import watch

watch.guard()  # first: a snakemake killed during the imports below ends this job too

from pathlib import Path

from chesslm import logs
from chesslm.train.status import write_run_results

with logs.step("results", snakemake.log[0]) as log:  # noqa: F821
    record = write_run_results(
        Path(snakemake.params.train_results),  # noqa: F821
        [Path(p) for p in snakemake.input.statuses],  # noqa: F821
        Path(snakemake.output[0]),  # noqa: F821
    )
    log.info("%d segments, status %s", record["segment_count"], record["status"])
