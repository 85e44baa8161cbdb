"""Rule summarise: chesslm.report.summary for one complete run, into the rule's named outputs."""

import sys

sys.stderr = open(snakemake.log[0], "w")  # noqa: F821  (first, so import errors land in the log)

import logging  # noqa: E402
from pathlib import Path  # noqa: E402

from chesslm.report.items import OUTPUT_FILES  # noqa: E402
from chesslm.report.summary import summarise  # noqa: E402

logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(levelname)s %(message)s")
out_dir = Path(snakemake.output.summary).parent  # noqa: F821
written = summarise(
    Path(snakemake.input.results).parent,  # noqa: F821
    out_dir,
    receipt=snakemake.input.receipt,  # noqa: F821
    changes=list(snakemake.params.changes),  # noqa: F821
    max_segments=snakemake.params.max_segments,  # noqa: F821
)
expected = {name: Path(getattr(snakemake.output, name)) for name in OUTPUT_FILES}  # noqa: F821
if expected != written:
    raise ValueError(f"rule outputs {expected!r} differ from the files written {written!r}")
