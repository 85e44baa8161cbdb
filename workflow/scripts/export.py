"""Snakemake script of rule export: chesslm.export.folder on the run's best.pt and records."""

from chesslm import watch

watch.guard()  # first: a snakemake killed during the imports below ends this job too

from pathlib import Path

from chesslm import logs, owner
from chesslm.export import folder

with (
    logs.step("export", snakemake.log[0]) as log,  # noqa: F821
    owner.owning(Path(snakemake.output[0]).parent, snakemake.output, "export", log),  # noqa: F821
):
    sources = folder.Sources(
        run=snakemake.wildcards.run,  # noqa: F821
        checkpoint=Path(snakemake.params.checkpoint),  # noqa: F821
        results=Path(snakemake.input.results),  # noqa: F821
        manifest=Path(snakemake.input.manifest),  # noqa: F821
        receipt=Path(snakemake.input.receipt),  # noqa: F821
        play={Path(p).stem: Path(p) for p in snakemake.input.play},  # noqa: F821
    )
    written = folder.export(sources, Path(snakemake.output.weights).parent)  # noqa: F821
    for key, path in written.items():
        if key in folder.OPTIONAL:  # a head only some runs have: in the folder, not an output
            continue
        if path.resolve() != Path(getattr(snakemake.output, key)).resolve():  # noqa: F821
            raise ValueError(f"rule export: {key} written to {path}, not the rule's output")
