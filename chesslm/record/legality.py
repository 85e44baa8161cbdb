"""legality.json read (``chesslm.play.legality`` writes it): free-running games' illegal
proposals, per sampling mode."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from chesslm.record.reader import read


@dataclass(frozen=True)
class LegalityMode:
    games: int
    proposals: int
    illegal_share: float | None
    games_with_illegal: float | None
    first_illegal_ply_median: float | None
    mean_game_plies: float | None
    complete: bool


@dataclass(frozen=True)
class Legality:
    protocol: str
    modes: dict[str, LegalityMode]


def read_legality(path: Path | str) -> Legality | None:
    return read(Legality, path)
