"""Adapter for rule results: the terminal train/results.json plus every segment status."""

import sys

sys.stderr = open(snakemake.log[0], "w")  # noqa: F821  (injected by Snakemake)

from pathlib import Path  # noqa: E402

from chesslm.train.status import write_run_results  # noqa: E402

write_run_results(
    Path(snakemake.params.train_results),  # noqa: F821
    [Path(p) for p in snakemake.input.statuses],  # noqa: F821
    Path(snakemake.output[0]),  # noqa: F821
)
