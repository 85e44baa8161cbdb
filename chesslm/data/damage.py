"""Games a conversion skipped as damaged (``parsing.DAMAGE``: illegal or unparsable), counted
and numbered per input file, for convert's one WARNING line a file: Lichess's own exports
hold none, so a file that yields them was damaged on the way (or is not Lichess's).

A game's number is its place in its file, counted from 1 in the order the reader cuts it: a
PGN file's games (text that is no game at all counts as one), a Parquet file's rows (what its
format's row, chesslm.data.sources, calls ``places``).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from chesslm.data import sources
from chesslm.data.parsing import DAMAGE, ChunkResult

SHOWN = 5  # the first few numbers a warning names; the count says how many more


class DamageLog:
    """The damaged games of every input, fed each chunk's result in input order."""

    def __init__(self) -> None:
        self.read: Counter[Path] = Counter()  # games read so far, by input
        self.counts: dict[Path, Counter[str]] = {}  # by input, DAMAGE reason -> games
        self.numbers: dict[Path, list[int]] = {}  # by input: the first SHOWN, in file order

    def add(self, source: Path, parts: list[ChunkResult]) -> None:
        """One chunk's result read from ``source``, split (``ChunkResult.by_split``: the first
        part carries the chunk's skips)."""
        before = self.read[source]
        self.read[source] += sum(len(p.ids) for p in parts) + sum(parts[0].skipped.values())
        damaged = parts[0].damaged
        if not damaged:
            return
        counts = self.counts.setdefault(source, Counter())
        numbers = self.numbers.setdefault(source, [])
        for reason, places in damaged.items():
            counts[reason] += len(places)
        places = sorted(i for found in damaged.values() for i in found)
        numbers.extend(before + i + 1 for i in places[: SHOWN - len(numbers)])

    def warnings(self) -> list[str]:
        """One line per input that yielded damaged games: the file, the counts, the first few
        game numbers and what to do."""
        return [self.warning(path) for path in self.counts]

    def warning(self, path: Path) -> str:
        counts, numbers = self.counts[path], self.numbers[path]
        total = sum(counts.values())
        more = f" and {total - len(numbers)} more" if total > len(numbers) else ""
        kind = sources.of(path).places
        said = ", ".join(f"{counts[k]} {_games(counts[k])} as {k}" for k in DAMAGE if counts[k])
        return (
            f"{path}: skipped {said} ({kind} {', '.join(map(str, numbers))}{more} of the file);"
            " Lichess's own exports have none, so the file may be damaged (fetch it again,"
            " then --forcerun convert)"
        )


def _games(n: int) -> str:
    return "game" if n == 1 else "games"
