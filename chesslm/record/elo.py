"""elo.json read (``chesslm.play.elo_games`` writes it): the model's games against the
ladder's anchors and its fit; the Elo's sentences are written here once, for the summary's play
section (``chesslm.report.play_section``) and the model card (``chesslm.export.card``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chesslm.record.play_files import FILES
from chesslm.record.reader import read


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


@dataclass(frozen=True)
class Fit:
    """The model's fit against the ladder (``elo.fit_player``)."""

    games: int
    score: float
    elo: float | None
    low: float | None
    high: float | None
    text: str
    method: str
    bound: str | None = None
    low_total: float | None = None
    high_total: float | None = None

    def estimate(self) -> str:
        """The model's Elo and its intervals, or the bound it is known by."""
        if self.elo is None or self.low is None or self.high is None:
            return f"not finite: {self.text}"
        total = ""
        if self.low_total is not None and self.high_total is not None:
            total = f"; {self.low_total:.0f} to {self.high_total:.0f} with the ladder's own"
            total += " uncertainty"
        return f"**{self.elo:.0f}** (95 % interval {self.low:.0f} to {self.high:.0f}{total})"


@dataclass(frozen=True)
class EloAnchor:
    anchor: str
    kind: str
    rating: float
    rating_low: float
    rating_high: float
    fixed: bool
    ladder_games: int
    games: int
    wins: int
    draws: int
    losses: int
    score: float

    def rating_text(self) -> str:
        if self.fixed:
            return f"{self.rating:.0f} (fixed: UCI_Elo)"
        return f"{self.rating:.0f} [{self.rating_low:.0f}, {self.rating_high:.0f}]"


@dataclass(frozen=True)
class EloLadder:
    file: str
    key: str
    games: int
    engine: dict[str, Any]
    method: str | None = None


NOT_PLAYED = "No game against the ladder's anchors (play.elo.games_per_anchor: 0, or not run yet)."


@dataclass(frozen=True)
class Elo:
    """elo.json. Without games (``games_per_anchor: 0``, or none within the budget) it holds
    ``anchors: []`` and ``fit: null`` only; with games, the keys ``required`` names too."""

    anchors: list[EloAnchor]
    fit: Fit | None
    ladder: EloLadder | None = None
    complete: bool = False
    note: str = ""
    protocol: str = ""
    reproducible: bool | None = None  # None: a record from before the key
    reproducibility: str = ""

    @property
    def required(self) -> tuple[str, ...]:
        """The keys a record with a fit has (``reader.read`` checks them)."""
        return () if self.fit is None else ("ladder", "complete", "note", "protocol")

    @property
    def played(self) -> bool:
        return bool(self.anchors) and self.fit is not None and self.ladder is not None

    def estimate_line(self) -> str:
        """The estimate (or its bound), its games and score, and whether the budget cut it
        short: the summary's first lines and ``sentence`` both say it so."""
        if not self.played:
            return NOT_PLAYED
        fit = self.fit
        assert fit is not None
        state = "" if self.complete else " (stopped by its time budget: partial)"
        return f"{fit.estimate()} over {fit.games} games (score {_pct(fit.score)}){state}"

    def sentence(self) -> str:
        """The estimate, its games and score, what the scale is and how it was played."""
        if not self.played:
            return NOT_PLAYED
        fit = self.fit
        assert fit is not None
        return f"Estimate {self.estimate_line()}: {self.note}. {self.protocol}. Fit: {fit.method}."

    def ladder_sentence(self) -> str:
        ladder = self.ladder
        if ladder is None:
            return ""
        return (
            f"Ladder `{ladder.file}` (key `{ladder.key[:12]}`): {ladder.games} games among"
            f" its anchors on {ladder.engine.get('id_name', '?')}; {ladder.method or '?'}."
        )

    def reproducibility_sentence(self) -> str:
        """Whether the Elo's games replay (a record from before the key: not recorded)."""
        if self.reproducible is None:
            return f"Reproducibility: not recorded (an {FILES['elo']} from before the key)."
        word = "Reproducible" if self.reproducible else "**Not reproducible** in part"
        return f"{word}: {self.reproducibility}."


def read_elo(path: Path | str) -> Elo | None:
    return read(Elo, path)
