"""Snakemake script of rule compare: chesslm.compare.build on the runs' score tables."""

from chesslm import watch

watch.guard()  # first: a snakemake killed during the imports below ends this job too

import json
from pathlib import Path

from chesslm import logs, owner
from chesslm.compare import build
from chesslm.compare.settings import Comparison

with (
    logs.step("compare", snakemake.log[0]) as log,  # noqa: F821
    owner.owning(Path(snakemake.output[0]).parent, snakemake.output, "compare", log),  # noqa: F821
):
    c = Comparison.from_dict(json.loads(snakemake.params.settings))  # noqa: F821
    runs = json.loads(snakemake.params.runs)  # noqa: F821
    # the runs' score folders, in the comparison's order (the rule's input)
    inputs = snakemake.input.scores  # noqa: F821
    scores = {run: Path(p).parent for run, p in zip(c.runs, inputs, strict=True)}
    build.compare(c, scores, runs, Path(snakemake.output.record).parent)  # noqa: F821
