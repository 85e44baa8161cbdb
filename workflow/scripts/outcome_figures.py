"""Adapter for rule outcome_figures: chesslm.play.outcome_figures on the run's move-matching
record, into the rule's named outputs."""

from chesslm import watch

watch.guard()  # first: a snakemake killed during the imports below ends this job too

from pathlib import Path

from chesslm import logs, owner
from chesslm.play import outcome_figures
from chesslm.record.play_files import OUTCOME

OUT = snakemake.output  # noqa: F821
# the play folder's lock: rule play's outputs and state live there too
with (
    logs.step("outcome_figures", snakemake.log[0]) as log,  # noqa: F821
    owner.owning(Path(OUT[0]).parent, OUT, "outcome_figures", log),
):
    outcome_figures.write(
        Path(snakemake.input.record),  # noqa: F821
        {out.name: Path(getattr(snakemake.output, out.name)) for out in OUTCOME},  # noqa: F821
    )
