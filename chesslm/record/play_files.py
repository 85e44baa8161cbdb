"""The outputs of the play evaluation, in one table: ``chesslm.play.evaluate`` writes each
file, rule ``play`` turns each into a named output (a ``report()`` item where it has a
caption), and the summary reads the records. Standard library only, so the Snakefile and
the report import it without torch, pandas or matplotlib.

Each row belongs to a *part* (``play.PART`` of the config, whose ``seconds`` bound it); a
part writes one record (``.json``), its tables (``.csv``) and one figure (``.svg``). A new
part is its rows here plus its function in ``evaluate.PARTS``.

``OUTCOME`` lists the files of rule ``outcome_figures`` (an outcome run's only, so not rule
``play``'s: a rule's outputs cannot differ by run): the outcome head's table and figures, made
from ``match``'s record.
"""

from __future__ import annotations

from typing import NamedTuple


class Output(NamedTuple):
    name: str
    """The rule's named output, and the key of ``evaluate.run``'s result."""
    file: str
    """File name under ``results/{run}/play/``."""
    part: str
    """The part that writes it: its key in the config's ``play`` object."""
    caption: str
    """Caption file under ``workflow/report/`` ("-": not a report item)."""
    label: str

    @property
    def in_report(self) -> bool:
        """A ``report()`` item of ``snakemake --report`` (it has a caption)."""
        return self.caption != "-"


# name | file | part | caption (workflow/report/) | label
_TABLE = """
move_match | move-match.json | match | - | -
move_match_table | move-match.csv | match | play-move-match-table.rst | move-matching table
move_match_plot | move-match.svg | match | play-move-match.rst | move-matching by Elo
legality | legality.json | legality | - | -
legality_table | legality.csv | legality | play-legality-table.rst | free-running legality table
legality_plot | legality.svg | legality | play-legality.rst | illegal share by ply
elo | elo.json | elo | - | -
elo_table | elo.csv | elo | play-elo-table.rst | score per anchor
elo_games | elo-games.csv | elo | - | -
elo_plot | elo.svg | elo | play-elo.rst | score against the ladder
counterfactual | counterfactual.json | counterfactual | - | -
counterfactual_table | counterfactual.csv | counterfactual | play-cf-table.rst | by rating
counterfactual_plot | counterfactual.svg | counterfactual | play-cf.rst | predictions by rating
"""
# rule outcome_figures' files, in the same columns
_OUTCOME_TABLE = """
outcome_table | outcome.csv | match | play-outcome-table.rst | outcome table
outcome_calibration | outcome-calibration.svg | match | play-outcome-cal.rst | calibration
outcome_games | outcome-games.svg | match | play-outcome-games.rst | White's chances by ply
"""


def _rows(table: str) -> tuple[Output, ...]:
    lines = table.strip().splitlines()
    return tuple(Output(*(cell.strip() for cell in line.split("|"))) for line in lines)


OUTPUTS: tuple[Output, ...] = _rows(_TABLE)
OUTCOME: tuple[Output, ...] = _rows(_OUTCOME_TABLE)

FILES: dict[str, str] = {out.name: out.file for out in OUTPUTS}
"""Name -> file name under ``play/``."""

PARTS: tuple[str, ...] = tuple(dict.fromkeys(out.part for out in OUTPUTS))
"""The parts, in the order they run."""

RECORDS: dict[str, str] = {out.part: out.name for out in OUTPUTS if out.file.endswith(".json")}
"""Part -> the name of its record, which the summary reads."""


def of_part(part: str) -> tuple[Output, ...]:
    """The outputs ``part`` writes, in table order."""
    return tuple(out for out in OUTPUTS if out.part == part)
