"""Snakemake script of rule ladder: chesslm.ladder.round_robin.build_ladder with the rule's threads;
progress on the console and in the rule's log."""

from chesslm import watch

watch.guard()  # first: a snakemake killed during the imports below ends this job too

import json
from pathlib import Path

from chesslm import logs, owner
from chesslm.ladder import round_robin as ladder
from chesslm.progress import Progress

with (
    logs.step("ladder", snakemake.log[0]) as log,  # noqa: F821
    owner.owning(Path(snakemake.output[0]).parent, snakemake.output, "ladder", log),  # noqa: F821
):
    name, target = snakemake.wildcards.ladder, snakemake.output[0]  # noqa: F821
    settings = ladder.LadderSettings.from_dict(json.loads(snakemake.params.settings))  # noqa: F821
    engine = snakemake.params.engine  # noqa: F821
    expected = ladder.ladder_path(name, settings, ladder.engine_identity(engine))
    if expected != target:
        raise ValueError(f"rule ladder: {target} is not ladders.{name} on this engine build"
                         f" (that is {expected})")  # fmt: skip
    progress = Progress(f"ladder {name}", len(settings.pairs()), "pairs")
    built = ladder.build_ladder(
        settings,
        engine,
        lambda done, _: progress.update(done),
        workers=snakemake.threads,  # noqa: F821
    )
    progress.finish(f"{len(built['games'])} games in {built['wall_seconds']:.0f} s")
    ladder.write_ladder(target, built)
