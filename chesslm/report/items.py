"""The report items of a run, in one table: rule ``summarise`` turns each into a named
``report()`` output and ``chesslm.report.summary`` writes each file. Standard library only, so
the Snakefile imports it without pandas or matplotlib."""

from __future__ import annotations

from typing import NamedTuple


class Item(NamedTuple):
    name: str
    """The rule's named output, and the key of ``summary.summarise``'s result."""
    file: str
    """File name under ``results/{run}/report/``."""
    category: str
    caption: str
    """Caption file under ``workflow/report/``."""
    label: str


# name | file | category | caption (workflow/report/) | label
_TABLE = """
summary | summary.md | Training | summary.rst | summary
summary_html | summary.html | Training | summary.rst | summary (rendered)
data | data.csv | Data | data.rst | dataset and integrity receipt
probe | probe.csv | Probe | probe.rst | probe results
nll_plot | nll.svg | Training | nll.rst | NLL curves
validation_plot | validation-metrics.svg | Training | validation-metrics.rst | accuracy and legality
throughput_plot | throughput.svg | Training | throughput.rst | throughput and padding
segments_plot | segments.svg | Training | segments-timeline.rst | segment timeline
validation | validation.csv | Training | validation.rst | validation history
train_steps | train-steps.csv | Training | train-steps.rst | training steps
segments | segments.csv | Training | segments.rst | segments
gpu_plot | gpu.svg | Hardware | gpu.rst | GPU utilisation, memory and power
telemetry | gpu-telemetry.csv | Hardware | gpu-telemetry.rst | GPU telemetry per GPU
"""
ITEMS: tuple[Item, ...] = tuple(
    Item(*(cell.strip() for cell in line.split("|"))) for line in _TABLE.strip().splitlines()
)

OUTPUT_FILES: dict[str, str] = {item.name: item.file for item in ITEMS}
"""Name (as in the Snakemake rule's named outputs) -> file name under ``report/``."""

SAMPLE_GAMES = "validation-games.pgn"
"""Beside the items (not one: a rule output of its own): the run's first validation games, the
file summary.md's analyse command runs on (``chesslm.report.sample_games``)."""
