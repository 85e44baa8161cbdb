"""Snakemake script of rule analyse: chesslm.engine.analyse on the run's best.pt and the dataset's
validation split, with the rule's threads; the games skipped and the counts in the rule's log."""

from chesslm import watch

watch.guard()  # first: a snakemake killed during the imports below ends this job too

import io
from pathlib import Path

from chesslm import logs, owner
from chesslm.engine import analyse
from chesslm.export.load import model_at
from chesslm.layout import RunDir
from chesslm.scorer.threads import use_threads

# one dataset's two CSVs: their own lock (analysis/ holds every dataset's)
PLACE = Path(snakemake.output.moves).with_suffix("")  # noqa: F821
with (
    logs.step("analyse", snakemake.log[0]) as log,  # noqa: F821
    owner.owning(PLACE, snakemake.output, "analyse", log),  # noqa: F821
):
    use_threads(snakemake.threads)  # noqa: F821
    analyse.flat_memory()  # memory flat in the number of games on the CPU
    run_dir = Path(snakemake.input.results).parent  # noqa: F821
    net = model_at(RunDir(run_dir).best, snakemake.params.device)  # noqa: F821
    said = io.StringIO()
    # writes output.games too: its name is layout.games_csv's of output.moves, as the rule's
    counts = analyse.analyse_validation(
        Path(snakemake.input.cache).parent,  # noqa: F821
        Path(snakemake.output.moves),  # noqa: F821
        net=net,
        batch_tokens=snakemake.params.batch_tokens,  # noqa: F821
        say=said,
    )
    for line in said.getvalue().splitlines():
        log.warning("%s", line)
    log.info("%(games)d games, %(moves)d moves analysed; %(skipped)d skipped", counts)
