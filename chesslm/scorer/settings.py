"""A run's play settings (``runs.NAME.play`` of the config): what the scorer is asked to score
and how (``Match``'s scoring keys are rule score's and the analyser's too), typed: the same
keys, types and defaults as the schema (tests/workflow/test_config.py fails if the two
disagree). Standard library only: the workflow builds them at parse time. Rule play's script
types them (``from_dict``) and every layer below takes them typed; the work state's identity
hashes ``as_dict``.

>>> PlaySettings.from_dict({"match": {"games": 64}}).match.games
64
>>> PlaySettings().as_dict()["elo"]["ladder"]
'full'
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

SPLITS = ("validation",)  # the split play evaluates: never the sealed test split


@dataclass(frozen=True, kw_only=True)
class Ratings:
    self: int = 1500
    opponent: int = 1500

    def pair(self) -> tuple[int, int]:
        """(its own, its opponent's): the ratings a conditioned model plays at."""
        return self.self, self.opponent


@dataclass(frozen=True, kw_only=True)
class Counterfactual:
    ratings: list[int] = field(default_factory=lambda: [1100, 1900])
    seconds: int = 1800
    gaps: list[int] = field(default_factory=lambda: [-800, -400, -200, 0, 200, 400, 800])
    gap_centre: int = 1500


@dataclass(frozen=True, kw_only=True)
class Match:
    # a month's split in minutes, +-0.15 points on overall top-1 (config/README.md)
    games: int | None = 10000
    seconds: int = 1800
    chunk_games: int = 512
    batch_tokens: int = 65536
    attention: str = "split"
    compile: bool = False
    bootstrap: int = 1000
    protocols: list[str] = field(default_factory=lambda: ["maia2", "all"])


@dataclass(frozen=True, kw_only=True)
class Legality:
    games: int = 256
    max_plies: int = 200
    seconds: int = 600


@dataclass(frozen=True, kw_only=True)
class Elo:
    ladder: str = "full"
    games_per_anchor: int = 8
    seed: int | None = None
    max_plies: int | None = None
    seconds: int = 1800


@dataclass(frozen=True, kw_only=True)
class PlaySettings:
    """``runs.NAME.play`` (config/README.md explains each key)."""

    enabled: bool = True
    device: str | None = None
    datasets: list[str] = field(default_factory=list)
    split: str = "validation"
    seed: int = 2026
    threads: int = 1
    ratings: Ratings = field(default_factory=Ratings)
    counterfactual: Counterfactual = field(default_factory=Counterfactual)
    match: Match = field(default_factory=Match)
    legality: Legality = field(default_factory=Legality)
    elo: Elo = field(default_factory=Elo)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> PlaySettings:
        """From the schema-checked ``play`` object (absent keys take their defaults)."""
        return _build(cls, raw)

    def as_dict(self) -> dict[str, Any]:
        """The play object with every default filled in, as ``chesslm.play.evaluate`` reads it."""
        return dataclasses.asdict(self)

    def part(self, name: str) -> Match | Legality | Elo | Counterfactual:
        """The settings of part ``name`` of ``chesslm.record.play_files.PARTS``."""
        return getattr(self, name)


def _build(cls: type, raw: dict[str, Any]) -> Any:
    hints = {f.name: f for f in dataclasses.fields(cls)}
    values = {}
    for key, value in raw.items():
        nested = hints[key].default_factory
        if isinstance(nested, type) and dataclasses.is_dataclass(nested):
            value = _build(nested, value)
        elif isinstance(value, list):
            value = list(value)
        values[key] = value
    return cls(**values)
