"""Snakemake script of rule score: chesslm.compare.scores on the run's best.pt with the rule's
threads."""

from chesslm import watch

watch.guard()  # first: a snakemake killed during the imports below ends this job too

from pathlib import Path

from chesslm import logs, owner
from chesslm.compare import scores

with (
    logs.step("score", snakemake.log[0]) as log,  # noqa: F821
    owner.owning(Path(snakemake.output[0]).parent, snakemake.output, "score", log),  # noqa: F821
):
    w = snakemake.wildcards  # noqa: F821
    scores.score(
        Path(snakemake.input.results).parent,  # the run's folder  # noqa: F821
        w.run,
        w.dataset,
        Path(snakemake.input.cache).parent,  # noqa: F821
        Path(snakemake.output.positions).parent,  # noqa: F821
        device=snakemake.params.device,  # noqa: F821
        threads=snakemake.threads,  # noqa: F821
        batch_tokens=snakemake.params.batch_tokens,  # noqa: F821
        chunk_games=snakemake.params.chunk_games,  # noqa: F821
        games=snakemake.params.games,  # noqa: F821
    )
