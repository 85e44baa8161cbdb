"""move-match.json read (``chesslm.play.move_match`` writes it): each dataset's table of
move-matching metrics with their intervals (``MatchRow``, a field per metric of
``chesslm.match.metrics``), and an outcome or think-time checkpoint's measures of its head
(``OutcomeMeasure``, ``ThinkMeasure``). ``Scores`` and ``Evaluated`` are the counterfactual
record's too."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chesslm.match import metrics
from chesslm.record.reader import read


def _metric_fields(*suffixes: str) -> list[tuple[str, Any, Any]]:
    """A field per metric of the table (``chesslm.match.metrics``) and suffix: ``None`` in a
    record written before the metric existed, which so stays readable."""
    return [(m.name + s, float | None, field(default=None, kw_only=True))
            for m in metrics.METRICS for s in suffixes]  # fmt: skip


Scores = dataclasses.make_dataclass(
    "Scores",
    [("protocol", str), ("grouping", str), ("positions", int), *_metric_fields("")],
    frozen=True,
)
Scores.__doc__ = """What a row of move-matching (or counterfactual) positions says: each metric."""
Scores.__module__ = __name__
_Intervals = dataclasses.make_dataclass(
    "_Intervals", _metric_fields("_low", "_high"), bases=(Scores,), frozen=True
)
_Intervals.__module__ = __name__


@dataclass(frozen=True)
class MatchRow(_Intervals):
    """One (protocol, grouping, group) row of a dataset's table (``matching.tables``): each
    metric and its 95 % interval."""

    group: str
    games: int
    few_games: bool = False

    def interval(self, stat: str) -> tuple[float | None, float | None, float | None]:
        """Metric ``stat`` and its 95 % interval (``None`` where it has none)."""
        return getattr(self, stat), getattr(self, f"{stat}_low"), getattr(self, f"{stat}_high")


@dataclass(frozen=True, kw_only=True)
class Evaluated:
    """A dataset's positions a part scored, and whether its time budget let it finish."""

    positions: int
    complete: bool
    selection: str = ""  # the evaluator's words for the games it chose


@dataclass(frozen=True, kw_only=True)
class OutcomeScores:
    """One predictor's NLL, Brier score and accuracy in a group, each with its 95 % interval
    (``None`` where it has none)."""

    nll: float | None
    nll_low: float | None = None
    nll_high: float | None = None
    brier: float | None
    brier_low: float | None = None
    brier_high: float | None = None
    accuracy: float | None
    accuracy_low: float | None = None
    accuracy_high: float | None = None


@dataclass(frozen=True)
class OutcomeRow:
    """One (protocol, grouping, group) row of the outcome measure (``chesslm.match.outcome``):
    the model's and the baselines' (``model``, ``frequency``, ``elo``) scores."""

    protocol: str
    grouping: str
    group: str
    positions: int
    games: int
    scores: dict[str, OutcomeScores]
    few_games: bool = False


@dataclass(frozen=True)
class CalibrationBin:
    """One bin of predicted win probability (``outcome.calibration``): its positions, the
    mean prediction and the observed win frequency with its 95 % interval over games."""

    protocol: str
    predictor: str
    bin: str
    positions: int
    games: int
    predicted: float
    observed: float
    observed_low: float | None = None
    observed_high: float | None = None


@dataclass(frozen=True)
class OutcomeGame:
    """One real game's curve (``outcome.game_curves``): White's win/draw/loss at each ply."""

    game: int
    result: str
    ply: list[int]
    white_win: list[float]
    white_draw: list[float]
    white_loss: list[float]


@dataclass(frozen=True)
class OutcomeMeasure:
    """A dataset's outcome entry of move-match.json (an outcome checkpoint only)."""

    positions: int
    unknown_result_positions: int
    baseline_source: str
    draw_rate: float
    table: list[OutcomeRow]
    calibration: list[CalibrationBin] = field(default_factory=list)
    games: list[OutcomeGame] = field(default_factory=list)  # a record from before: none

    @property
    def overall(self) -> OutcomeRow | None:
        """The first protocol's overall row."""
        return next((r for r in self.table if r.grouping == "overall"), None)


@dataclass(frozen=True)
class ThinkScores:
    """One predictor's think-time scores in one group (``chesslm.match.think_time``), each
    beside its 95 % interval (None: too few games, or no NLL for a point prediction)."""

    nll: float | None
    mae_log: float | None
    pearson: float | None
    spearman: float | None
    nll_low: float | None = None
    nll_high: float | None = None
    mae_log_low: float | None = None
    mae_log_high: float | None = None
    pearson_low: float | None = None
    pearson_high: float | None = None
    spearman_low: float | None = None
    spearman_high: float | None = None


@dataclass(frozen=True)
class ThinkRow:
    """One (protocol, grouping, group) row of the think-time measure: the head's and the
    baselines' (``model``, ``median_time``, ``clock_rule``, ``time_table``: none in a record
    from before it) scores."""

    protocol: str
    grouping: str
    group: str
    positions: int
    games: int
    scores: dict[str, ThinkScores]
    few_games: bool = False


@dataclass(frozen=True)
class ThinkMeasure:
    """A dataset's think-time entry of move-match.json (a think-time checkpoint only)."""

    positions: int
    games: int
    positions_scored: int
    baseline_source: str
    train_targets: int
    clock_rule_share: float
    table: list[ThinkRow]
    class_floor: int | None = None  # moves a class needs for its within-class r (none before)

    @property
    def overall(self) -> ThinkRow | None:
        """The first protocol's overall row."""
        return next((r for r in self.table if r.grouping == "overall"), None)


@dataclass(frozen=True, kw_only=True)
class MatchDataset(Evaluated):
    validation_games: int
    games_evaluated: int
    metadata: str
    table: list[MatchRow]
    games_selected: int | None = None
    protocol_positions: dict[str, int] | None = None
    maia_positions: int | None = None  # a record from before protocols were selectable
    outcome: OutcomeMeasure | None = None  # an outcome checkpoint's (chesslm.match.outcome)
    think_time: ThinkMeasure | None = None  # a think-time checkpoint's (match.think_time)

    @property
    def per_protocol(self) -> dict[str, int | None]:
        return self.protocol_positions or {"maia": self.maia_positions}

    @property
    def overall(self) -> MatchRow | None:
        """The first protocol's overall row (``None`` for a dataset with no position)."""
        return next((r for r in self.table if r.grouping == "overall"), None)


@dataclass(frozen=True)
class MatchModel:
    """The checkpoint evaluated, as ``chesslm.model.weights.load_with_record`` records it (its
    path by name)."""

    checkpoint: str
    step: int
    preset: str


@dataclass(frozen=True)
class MoveMatch:
    model: MatchModel
    definition: str
    protocols: dict[str, str]
    interval: str
    datasets: dict[str, MatchDataset]
    min_interval_games: int | None = None
    outcome_definition: str | None = None  # an outcome checkpoint's
    think_time_definition: str | None = None  # a think-time checkpoint's


def read_move_match(path: Path | str) -> MoveMatch | None:
    return read(MoveMatch, path)
