"""Adapter for rule token_cache: verified train/validation shards -> token cache."""

from chesslm import watch

watch.guard()  # first: a snakemake killed during the imports below ends this job too

from pathlib import Path

from chesslm import logs
from chesslm.data import cache

with logs.step("token_cache", snakemake.log[0]) as log:  # noqa: F821
    info = cache.build_from_dataset(
        Path(snakemake.input.manifest).parent,  # noqa: F821
        Path(snakemake.input.receipt),  # noqa: F821
        Path(snakemake.output.meta).parent,  # noqa: F821
        workers=snakemake.threads,  # noqa: F821
        legality_games=snakemake.params.legality_games,  # noqa: F821
    )
    log.info("token cache: %s", info["splits"])
