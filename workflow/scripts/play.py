"""Snakemake script of rule play: chesslm.play.evaluate on the run's best.pt, with the rule's
threads; progress on the console and in the rule's log."""

from chesslm import watch

watch.guard()  # first: a snakemake killed during the imports below ends this job too

import json
from pathlib import Path

from chesslm import logs, owner
from chesslm.play import evaluate
from chesslm.scorer.settings import PlaySettings

with (
    logs.step("play", snakemake.log[0]) as log,  # noqa: F821
    owner.owning(Path(snakemake.output[0]).parent, snakemake.output, "play", log),  # noqa: F821
):
    ladder = snakemake.input.ladder  # noqa: F821
    ladder = [ladder] if isinstance(ladder, str) else list(ladder)  # one file, or none (no games)
    outputs = evaluate.run(
        Path(snakemake.input.results).parent,  # the run's folder  # noqa: F821
        PlaySettings.from_dict(json.loads(snakemake.params.settings)),  # noqa: F821
        {name: Path(path).parent for name, path in snakemake.params.caches.items()},  # noqa: F821
        device=snakemake.params.device,  # noqa: F821
        threads=snakemake.threads,  # noqa: F821
        ladder=Path(ladder[0]) if ladder else None,
    )
    for name, path in outputs.items():
        expected = Path(getattr(snakemake.output, name))  # noqa: F821
        if path.resolve() != expected.resolve():
            raise ValueError(f"rule play: {name} written to {path}, expected {expected}")
