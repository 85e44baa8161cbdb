"""Adapter for rule summarise: the run's validation games (chesslm.report.sample_games), then
chesslm.report.summary for one complete run, into the rule's named outputs."""

from chesslm import watch

watch.guard()  # first: a snakemake killed during the imports below ends this job too

from pathlib import Path

from chesslm import logs, owner
from chesslm.report import sample_games
from chesslm.report.items import OUTPUT_FILES
from chesslm.report.summary import summarise

OUT = snakemake.output  # noqa: F821
with (
    logs.step("summarise", snakemake.log[0]) as log,  # noqa: F821
    owner.owning(Path(OUT[0]).parent, OUT, "summarise", log),
):
    games = Path(snakemake.output.games)  # noqa: F821
    count = sample_games.write(Path(snakemake.input.cache).parent, games)  # noqa: F821
    log.info("%d validation games in %s", count, games)
    written = summarise(
        Path(snakemake.input.results).parent,  # noqa: F821
        Path(snakemake.output.summary).parent,  # noqa: F821
        receipt=snakemake.input.receipt,  # noqa: F821
        changes=list(snakemake.params.changes),  # noqa: F821
        max_segments=snakemake.params.max_segments,  # noqa: F821
        games=games,
    )
    expected = {name: Path(getattr(snakemake.output, name)) for name in OUTPUT_FILES}  # noqa: F821
    if expected != written:
        raise ValueError(f"rule outputs {expected!r} differ from the files written {written!r}")
