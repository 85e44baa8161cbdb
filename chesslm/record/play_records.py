"""A run's play records (``results/{run}/play/*.json``, named in ``chesslm.record.play_files``),
each read by its record's module (``move_match``, ``legality``, ``elo``, ``counterfactual``,
through ``reader``): ``READERS`` by name and ``read_play`` for a list of files. The summary's play
section (``chesslm.report.play_section``) and the model card (``chesslm.export.card``) both read
through here, so the two cannot drift from the writer (``chesslm.play.evaluate``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from chesslm.record.counterfactual import Counterfactual, read_counterfactual
from chesslm.record.elo import Elo, read_elo
from chesslm.record.legality import Legality, read_legality
from chesslm.record.move_match import MoveMatch, read_move_match
from chesslm.record.play_files import FILES
from chesslm.record.reader import RecordError

READERS = {
    "move_match": read_move_match,
    "legality": read_legality,
    "elo": read_elo,
    "counterfactual": read_counterfactual,
}
"""Each record's reader, by its name in ``outputs.FILES``."""


@dataclass(frozen=True)
class Play:
    """A run's play records (``None`` where a file is absent), as the model card reads them."""

    move_match: MoveMatch | None = None
    legality: Legality | None = None
    elo: Elo | None = None
    counterfactual: Counterfactual | None = None


def read_play(paths: Iterable[Path | str]) -> Play:
    """The records among ``paths``, each known by its file name (``outputs.FILES``)."""
    names = {FILES[name]: name for name in READERS}
    found = {}
    for path in map(Path, paths):
        if path.name not in names:
            raise RecordError(f"{path}: not a play record (those are {', '.join(names)})")
        found[names[path.name]] = READERS[names[path.name]](path)
    return Play(**found)
