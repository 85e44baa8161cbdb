"""counterfactual.json read (``chesslm.play.counterfactual_ratings`` writes it): a
conditioned model's scores at counterfactual ratings and, with the outcome head, its gap sweep."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from chesslm.record.move_match import Evaluated, Scores
from chesslm.record.reader import read


@dataclass(frozen=True)
class CounterfactualRow(Scores):
    """One row of ``counterfactual.table``: the scores at one ``setting`` of the ratings."""

    dataset: str
    setting: str
    rating_bin: str
    argmax_changed: float | None
    tv: float | None
    kl: float | None
    # an outcome head's (counterfactual.OUTCOME_DEFINITION); absent without one
    p_win: float | None = None
    p_draw: float | None = None
    p_loss: float | None = None
    expected_score: float | None = None
    elo_expectation: float | None = None


@dataclass(frozen=True)
class GapRow:
    """One (dataset, protocol, gap) row of the gap sweep (``gaps.table``): White's mean
    predicted win, draw, loss and score, against the Elo expectation."""

    dataset: str
    protocol: str
    gap: int
    white_elo: int
    black_elo: int
    positions: int
    games: int
    white_win: float | None
    draw: float | None
    black_win: float | None
    white_score: float | None
    elo_expectation: float
    white_score_low: float | None = None
    white_score_high: float | None = None


@dataclass(frozen=True)
class GapSweep:
    """counterfactual.json's ``gap_sweep`` (a conditioned model with the outcome head)."""

    centre: int
    definition: str
    rows: list[GapRow]


@dataclass(frozen=True)
class Counterfactual:
    """counterfactual.json: a model without conditioning has ``conditioned: false`` and a
    ``note``; a conditioned one the keys of ``CONDITIONED`` too."""

    conditioned: bool
    note: str = "not conditioned"
    definition: str = ""
    datasets: dict[str, Evaluated] = field(default_factory=dict)
    summary_rows: list[CounterfactualRow] = field(default_factory=list)
    outcome_definition: str = ""  # with the outcome head, of its columns in the rows
    gap_sweep: GapSweep | None = None

    @property
    def required(self) -> tuple[str, ...]:
        """The keys a conditioned model's record has (``reader.read`` checks them)."""
        return ("definition", "datasets", "summary_rows") if self.conditioned else ()


def read_counterfactual(path: Path | str) -> Counterfactual | None:
    return read(Counterfactual, path)
