"""A dataset's conversion settings (``datasets.NAME`` in the config): what a conversion depends
on besides its inputs, read by the converter's stages and by the workflow's config check."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from chesslm.data.filters import Filters

# v3: the rated column follows RatingDiff (arenas), bot marks the Lichess computer, census.
# Here, not in ``convert``, so the workflow's staleness check reads it without the PGN reader.
CONVERTER_VERSION = "chesslm-convert-v3"


class SettingsError(ValueError):
    """A dataset setting is out of range (the message names the key)."""


def check_train_games(value: Any, where: str) -> None:
    """:raises SettingsError: naming ``where.train_games`` unless null or a whole number >= 1."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise SettingsError(f"{where}.train_games: {value!r} is not a whole number >= 1 (or null)")


@dataclass(frozen=True)
class Settings:
    """What a conversion depends on besides its inputs (all of it enters the fingerprint)."""

    context: int = 1024
    split_key: str = "chesslm-split-v1"
    validation: float = 0.05
    test: float = 0.05
    filters: Filters = Filters()
    shard_games: int = 100_000
    # keep only this many train games, the smallest by a keyed hash (chesslm.data.train_cap)
    train_games: int | None = None

    def __post_init__(self) -> None:
        check_train_games(self.train_games, "dataset")

    @classmethod
    def from_config(cls, entry: dict[str, Any], where: str = "dataset") -> Settings:
        """Settings of one ``datasets.NAME`` config entry (schema defaults applied).

        :raises filters.FilterError: naming ``where.filters.KEY`` for a filter out of range.
        :raises SettingsError: naming ``where.train_games`` for a cap that is no count.
        """
        check_train_games(entry.get("train_games"), where)
        return cls(
            context=entry["context"],
            split_key=entry["split"]["key"],
            validation=entry["split"]["validation"],
            test=entry["split"]["test"],
            filters=Filters.from_config(entry.get("filters", {}), f"{where}.filters"),
            shard_games=entry["shard_games"],
            train_games=entry.get("train_games"),
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "context": self.context,
            "split": {"key": self.split_key, "validation": self.validation, "test": self.test},
            "filters": self.filters.as_dict(),
            "shard_games": self.shard_games,
            "train_games": self.train_games,
        }


def check_config(datasets: dict[str, Any]) -> None:
    """Cross-key checks of every dataset's settings (the workflow runs this before any job).

    :raises filters.FilterError: ``config: datasets.NAME.filters.KEY: what is wrong``.
    :raises SettingsError: ``config: datasets.NAME.train_games: what is wrong``.
    """
    for name, settings in datasets.items():
        check_train_games(settings.get("train_games"), f"config: datasets.{name}")
        Filters.from_config(settings.get("filters", {}), f"config: datasets.{name}.filters")
