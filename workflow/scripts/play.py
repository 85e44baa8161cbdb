"""Snakemake script of rule play: chesslm.play.evaluate on the run's best.pt."""

import json
import logging
import sys
from pathlib import Path

sys.stderr = open(snakemake.log[0], "w")  # noqa: F821  (first, so import errors land in the log)
logging.basicConfig(
    stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s"
)

from chesslm.play import evaluate  # noqa: E402

run = snakemake.wildcards.run  # noqa: F821
outputs = evaluate.run(
    Path(f"results/{run}"),
    json.loads(snakemake.params.settings),  # noqa: F821
    {name: Path(path).parent for name, path in snakemake.params.caches.items()},  # noqa: F821
    device=snakemake.params.device,  # noqa: F821
)
for name, path in outputs.items():
    expected = Path(getattr(snakemake.output, name))  # noqa: F821
    if path.resolve() != expected.resolve():
        raise ValueError(f"rule play: {name} written to {path}, expected {expected}")
