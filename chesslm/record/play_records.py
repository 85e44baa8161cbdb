"""The records of rule play (``results/{run}/play/*.json``, named in ``chesslm.record.play_files``)
read into typed results: ``MoveMatch``, ``Legality``, ``Elo`` and ``Counterfactual``. The
summary's play section (``chesslm.report.play_section``) and the model card
(``chesslm.export.card``) both read through here, so the two cannot drift from the writer
(``chesslm.play.evaluate``); the Elo's sentences are written here once for both.

A missing file reads as ``None``; a file that is not JSON or not sealed as rule play wrote it
(``chesslm.seal``: edited, damaged or written before records were sealed) raises
``RecordError``, one line naming the file and the command that rebuilds it; one that misses a
key or holds a value of the wrong type, one line naming the file and the key. Keys the readers do
not need are ignored. Standard library only: the report reads JSON only.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from chesslm import seal
from chesslm.match import metrics
from chesslm.record.play_files import FILES


class RecordError(ValueError):
    """A play record that cannot be read: names its file and key."""


T = TypeVar("T")


def _convert(kind: Any, value: Any, key: str, path: Path) -> Any:
    """``value`` (at ``key`` of ``path``) as the type ``kind`` of a record's field."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (kind,) = (a for a in args if a is not type(None))
        return _convert(kind, value, key, path)
    if dataclasses.is_dataclass(kind):
        return _build(kind, value, path, key)
    if origin is list and isinstance(value, list):
        return [_convert(args[0], v, f"{key}[{i}]", path) for i, v in enumerate(value)]
    if origin is dict and isinstance(value, dict):
        return {k: _convert(args[1], v, f"{key}.{k}", path) for k, v in value.items()}
    if kind is Any:
        return value
    if kind is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if kind in (int, str, bool) and type(value) is kind:
        return value
    raise RecordError(f"{path}: key {key!r} is {json.dumps(value)[:40]}, not {_name(kind)}")


def _name(kind: Any) -> str:
    origin = typing.get_origin(kind)
    names = {list: "a list", dict: "an object", float: "a number", int: "an integer"}
    return names.get(origin or kind, getattr(kind, "__name__", str(kind)))


def _build(cls: type[T], data: Any, path: Path, at: str = "") -> T:
    """The dataclass ``cls`` from the JSON object ``data``: every field without a default is
    a required key."""
    if not isinstance(data, dict):
        raise RecordError(f"{path}: {f'key {at!r}' if at else 'the record'} is not an object")
    hints = typing.get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        key = f"{at}.{f.name}" if at else f.name
        if f.name in data:
            values[f.name] = _convert(hints[f.name], data[f.name], key, path)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise RecordError(f"{path}: no key {key!r}")
    return cls(**values)


def _load(path: Path) -> dict[str, Any] | None:
    """The sealed record in ``path`` (``chesslm.seal``), checked; ``None`` when there is no
    such file. An unreadable, unsealed or edited one is a ``RecordError`` naming the file and
    the command that rebuilds it."""
    if not path.exists() and not path.is_symlink():
        return None
    try:
        return seal.read(path, seal.rebuild(path, "play"))
    except seal.SealError as error:
        raise RecordError(str(error)) from None


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


# ------------------------------------------------------------------ move-match.json


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


# ------------------------------------------------------------------ legality.json


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


# ------------------------------------------------------------------ elo.json


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
        """The keys a record with a fit has (``_read`` checks them)."""
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


# ------------------------------------------------------------------ counterfactual.json


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
        """The keys a conditioned model's record has (``_read`` checks them)."""
        return ("definition", "datasets", "summary_rows") if self.conditioned else ()


# ------------------------------------------------------------------ the readers


def _read(cls: type[T], path: Path | str) -> T | None:
    """``path``'s record as ``cls``; ``None`` when there is no such file."""
    path = Path(path)
    data = _load(path)
    if data is None:
        return None
    record = _build(cls, data, path)
    missing = next((k for k in getattr(record, "required", ()) if k not in data), None)
    if missing is not None:
        raise RecordError(f"{path}: no key {missing!r}")
    return record


def read_move_match(path: Path | str) -> MoveMatch | None:
    return _read(MoveMatch, path)


def read_legality(path: Path | str) -> Legality | None:
    return _read(Legality, path)


def read_elo(path: Path | str) -> Elo | None:
    return _read(Elo, path)


def read_counterfactual(path: Path | str) -> Counterfactual | None:
    return _read(Counterfactual, path)


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
