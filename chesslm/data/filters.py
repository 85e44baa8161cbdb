"""Which games a dataset keeps beyond the rules of chess: the ``filters`` settings.

Every filter reads the game's metadata columns (chesslm.data.metadata), so what a filter
tests is exactly what the dataset records. Checks run in the order of ``REASONS``; a game is
counted under the first it fails (config/README.md lists the whole order).
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from chesslm.data.metadata import BOT_TITLES, SPEEDS, TERMINATIONS

REASONS = ("speed", "unrated", "elo", "bot", "termination", "date")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


class FilterError(ValueError):
    """A filter setting is out of range (the message names the key)."""


def _date(value: Any, key: str) -> int | None:
    if value is None:
        return None
    text = str(value)
    try:
        if not _DATE.fullmatch(text):
            raise ValueError("not YYYY-MM-DD")
        day = datetime.date.fromisoformat(text)
    except ValueError as error:
        raise FilterError(f"{key}: {value!r} is not a date YYYY-MM-DD ({error})") from None
    return day.year * 10_000 + day.month * 100 + day.day


@dataclass(frozen=True)
class Filters:
    """The dataset's game filters; the defaults keep every game that is legal chess."""

    min_plies: int = 1
    speeds: tuple[str, ...] | None = None
    rated: bool = False
    min_elo: int | None = None
    max_elo: int | None = None
    exclude_bots: bool = False
    exclude_terminations: tuple[str, ...] = ()
    date_from: str | None = None
    date_to: str | None = None

    def __post_init__(self) -> None:
        self.check()

    @classmethod
    def from_config(cls, settings: dict[str, Any], where: str = "filters") -> Filters:
        """Filters from a config mapping; :raises FilterError: naming ``where.key``."""
        unknown = sorted(set(settings) - set(KEYS))
        if unknown:
            raise FilterError(f"{where}.{unknown[0]}: not a filter (known: {', '.join(KEYS)})")
        values = dict(settings)
        for key in LISTS:
            if values.get(key) is not None:
                values[key] = tuple(values[key])
        try:
            return cls(**values)
        except FilterError as error:
            raise FilterError(f"{where}.{error}") from None

    def check(self) -> None:
        """:raises FilterError: starting with the key at fault."""
        if not isinstance(self.min_plies, int) or self.min_plies < 1:
            raise FilterError(f"min_plies: {self.min_plies!r} is not a whole number >= 1")
        for speed in self.speeds or ():
            if speed not in SPEEDS:
                raise FilterError(f"speeds: {speed!r} is not a speed ({', '.join(SPEEDS)})")
        for name in self.exclude_terminations:
            if name not in TERMINATIONS:
                raise FilterError(
                    f"exclude_terminations: {name!r} is not a Lichess Termination"
                    f" ({', '.join(TERMINATIONS)})"
                )
        for key in ("min_elo", "max_elo"):
            value = getattr(self, key)
            if value is not None and (not isinstance(value, int) or not 0 <= value <= 32767):
                raise FilterError(f"{key}: {value!r} is not an Elo between 0 and 32767")
        if self.min_elo is not None and self.max_elo is not None and self.min_elo > self.max_elo:
            raise FilterError(f"min_elo: {self.min_elo} is above max_elo ({self.max_elo})")
        start, end = _date(self.date_from, "date_from"), _date(self.date_to, "date_to")
        if start is not None and end is not None and start > end:
            raise FilterError(f"date_from: {self.date_from} is after date_to ({self.date_to})")

    def as_dict(self) -> dict[str, Any]:
        """The settings as config and manifest spell them (lists, not tuples)."""
        values = {key: getattr(self, key) for key in KEYS}
        return {k: list(v) if k in LISTS and v is not None else v for k, v in values.items()}

    def reasons(self, columns: dict[str, np.ndarray]) -> np.ndarray:
        """Per game: 0 to keep, else 1 + the index in ``REASONS`` of the first check failed."""
        n = len(columns["white_elo"])
        fails = {reason: np.zeros(n, dtype=bool) for reason in REASONS}
        if self.speeds is not None:
            allowed = [SPEEDS.index(s) for s in self.speeds]
            fails["speed"] = ~np.isin(columns["speed"], allowed)  # -1 (unreadable) fails
        if self.rated:
            fails["unrated"] = columns["rated"] < 1  # rated by Event (1) or RatingDiff (2)
        if self.min_elo is not None or self.max_elo is not None:
            low = 0 if self.min_elo is None else self.min_elo
            high = 32767 if self.max_elo is None else self.max_elo
            for side in ("white_elo", "black_elo"):
                elo = columns[side]
                fails["elo"] |= (elo < 0) | (elo < low) | (elo > high)
        if self.exclude_bots:
            # the BOT title only: games against the Lichess computer are counted in the census
            fails["bot"] = (columns["bot"] & BOT_TITLES) != 0
        if self.exclude_terminations:
            dropped = [TERMINATIONS.index(t) for t in self.exclude_terminations]
            fails["termination"] = np.isin(columns["termination"], dropped)
        start, end = _date(self.date_from, "date_from"), _date(self.date_to, "date_to")
        if start is not None or end is not None:
            date = columns["utc_date"]
            fails["date"] = (date == 0) | (date < (start or 0)) | (date > (end or 99_999_999))
        out = np.zeros(n, dtype=np.int8)
        for k in range(len(REASONS) - 1, -1, -1):  # the first failed check wins
            out[fails[REASONS[k]]] = k + 1
        return out


# the filter keys are the fields (one source of truth); LISTS are those config gives as lists
KEYS = tuple(f.name for f in fields(Filters))
LISTS = tuple(f.name for f in fields(Filters) if str(f.type).startswith("tuple"))
