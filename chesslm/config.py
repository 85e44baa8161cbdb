"""The one front door for settings: ``load`` takes the merged config (every ``--configfile``),
checks it once against workflow/schemas/config.schema.yaml and the cross-key rules a schema
cannot express, fills in the schema's defaults, and returns typed settings (``Config``): the
datasets, the runs (``RunSettings``) and their play settings (``PlaySettings``, apart: a run's
training settings do not carry play's), the ladders and the comparisons. Each refusal is a
``ConfigError`` of one line naming the key (the workflow prints it and stops before any job).

It imports no torch, pandas, matplotlib nor PGN reader: the workflow loads it at every parse,
``-n`` included (tests/workflow/test_config.py checks). The tables the rules name outputs by are
re-exported here, so a rule file needs this module alone.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chesslm import files, layout
from chesslm.compare.outputs import FIGURES as COMPARE_FIGURES
from chesslm.compare.settings import Comparison
from chesslm.data import settings as data_settings
from chesslm.data.metadata import COLUMNS as META_COLUMNS
from chesslm.ladder import round_robin as play_ladder
from chesslm.ladder.players import EngineInfo, find_engine, handshake
from chesslm.model.presets import config_for
from chesslm.record.play_files import FILES as PLAY_FILES
from chesslm.record.play_files import OUTCOME as PLAY_OUTCOME
from chesslm.record.play_files import OUTPUTS as PLAY_OUTPUTS
from chesslm.record.play_files import PARTS as PLAY_PARTS
from chesslm.record.play_files import RECORDS as PLAY_RECORDS
from chesslm.report.items import ITEMS as REPORT_ITEMS
from chesslm.scorer.settings import PlaySettings
from chesslm.train import prefix
from chesslm.train.settings import SCHEMA, RunSettings, legality_request_error, schema_error

__all__ = [  # the tables the rules read, besides this module's own
    "COMPARE_FIGURES", "META_COLUMNS", "PLAY_FILES", "PLAY_OUTCOME", "PLAY_OUTPUTS", "PLAY_PARTS",
    "PLAY_RECORDS", "REPORT_ITEMS", "SCHEMA", "Config", "ConfigError", "load",
]  # fmt: skip


class ConfigError(ValueError):
    """The config is refused: the message is one line naming the key."""


@dataclass(frozen=True)
class Dataset:
    """``datasets.NAME``: its inputs, its conversion settings and the token cache's bound."""

    name: str
    inputs: tuple[str, ...]  # the files, each read by its format's row (chesslm.data.sources)
    legality_games: int
    settings: data_settings.Settings

    @property
    def dir(self) -> layout.DatasetDir:
        return layout.DatasetDir.of(self.name)


@dataclass(frozen=True)
class Ladder:
    """``ladders.NAME``: the ladder's settings, its engine's name and rule ladder's threads."""

    name: str
    engine: str
    threads: int
    settings: play_ladder.LadderSettings


@dataclass(frozen=True)
class Config:
    """The checked config, every default filled in."""

    datasets: dict[str, Dataset]
    runs: dict[str, RunSettings]
    plays: dict[str, PlaySettings]  # by run: runs.NAME.play
    ladders: dict[str, Ladder]
    comparisons: dict[str, Comparison]
    warnings: tuple[str, ...] = ()  # one line each, printed when the workflow is parsed

    def play_datasets(self, run: str) -> list[str]:
        """The datasets whose validation split run ``run``'s play reads (default: its own)."""
        return list(self.plays[run].datasets) or [self.runs[run].dataset]

    def play_device(self, run: str) -> str:
        return self.plays[run].device or self.runs[run].device

    def target_error(self, target: str) -> str | None:
        """Why ``target`` (a file under results/) names a run, dataset or comparison that this
        config lacks, in one line; None when it names one (or is no such file): a rule would
        not match it, or an input function would look it up and fail with a traceback."""
        parts = Path(os.path.normpath(os.path.relpath(target))).parts
        if len(parts) < 2 or parts[0] != layout.RESULTS or parts[1] == "ladders":
            return None
        folders = {
            "datasets": ("dataset", self.datasets),
            "compare": ("comparison", self.comparisons),
        }
        if parts[1] in folders:
            if len(parts) < 3:
                return None
            (what, known), name = folders[parts[1]], parts[2]
        else:
            what, known, name = "run", self.runs, parts[1]
        if name in known:
            return None
        return (
            f"target {target}: {what} {name!r} is not in the config (known {what}s:"
            f" {_known(known) or 'none'}); one defined in another config file needs its"
            " --configfile"
        )

    def ladder_file(self, name: str) -> str:
        """The ladder's file: its path holds the key of its settings and engine build, so a new
        build or a changed setting asks for a new ladder. Looks the engine up and checks it
        (a bounded UCI handshake, once per engine and process; the anchors' ``UCI_Elo``
        against the range it reports): call it from an input function, so that only plans
        that need the ladder pay for it. :raises ConfigError: naming the key."""
        ladder = self.ladders[name]
        return play_ladder.ladder_path(name, ladder.settings, _checked_engine(ladder)[1])

    def ladder_engine(self, name: str) -> str:
        """The engine executable of ladder ``name``, checked as ``ladder_file`` does."""
        return _checked_engine(self.ladders[name])[0]


@functools.cache
def _handshake(path: str) -> EngineInfo | str:
    """The engine's handshake, or why it failed: once per engine path and process."""
    try:
        return handshake(path)
    except ValueError as error:
        return str(error)


@functools.cache
def _engine(name: str, key: str) -> tuple[str, dict[str, str], EngineInfo]:
    """The engine's path, build (sha256, UCI id name) and handshake: once per process."""
    try:
        path = find_engine(name, key)
    except FileNotFoundError as error:
        raise ConfigError(f"config: {error}") from None
    info = _handshake(path)
    if isinstance(info, str):
        raise ConfigError(f"config: {key}: {info}")
    return path, play_ladder.engine_identity(path, info.name), info


def _checked_engine(ladder: Ladder) -> tuple[str, dict[str, str]]:
    """``_engine`` of the ladder, its ``stockfish_elo`` anchors' ``UCI_Elo`` checked against
    the range the engine reports (the ladder job would fail on it, not the plan)."""
    path, identity, info = _engine(ladder.engine, f"ladders.{ladder.name}.engine")
    for i, anchor in enumerate(ladder.settings.anchors):
        if anchor.kind != "stockfish_elo":
            continue
        key = f"ladders.{ladder.name}.anchors[{i}].elo"
        if info.elo_range is None:
            raise ConfigError(f"config: {key}: {path} ({info.name}) has no UCI_Elo option")
        low, high = info.elo_range
        if not low <= anchor.elo <= high:
            raise ConfigError(
                f"config: {key} is {anchor.elo} (anchor {anchor.name!r}), outside the UCI_Elo"
                f" range {low}-{high} that {path} ({info.name}) reports"
            )
    return path, identity


def load(config: dict[str, Any], schema_path: Path | str = SCHEMA) -> Config:
    """Check ``config`` (the merged config) once and fill in the schema's defaults, in place,
    as snakemake's ``validate`` would; the typed settings.

    :raises ConfigError: one line naming the first bad key.
    """
    import yaml

    schema = yaml.safe_load(Path(schema_path).read_text())
    own: dict[str, Any] = {}
    if isinstance(config.get("runs"), dict):
        own = {run: dict(e) for run, e in config["runs"].items() if isinstance(e, dict)}
        config["runs"] = resolve_likes(config["runs"])
    error = _not_finite(config) or schema_error(schema, config)
    if error:
        raise ConfigError(f"config: {error}")
    fill_defaults(schema, config)
    try:
        data_settings.check_config(config["datasets"])
    except ValueError as error:
        raise ConfigError(str(error)) from None
    datasets = {name: _dataset(name, raw) for name, raw in config["datasets"].items()}
    runs = _runs(config.get("runs", {}), datasets)
    plays = {run: PlaySettings.from_dict(raw.get("play", {}))
             for run, raw in config.get("runs", {}).items()}  # fmt: skip
    for run, settings in runs.items():
        _check_context(run, settings, datasets[settings.dataset])
    for run, play in plays.items():
        _check_play(run, play, datasets, list(config["ladders"]))
    for run, settings in runs.items():
        _check_legality_request(run, settings, datasets[settings.dataset])
    ladders = {name: _ladder(name, raw) for name, raw in config["ladders"].items()}
    comparisons = {
        name: _comparison(name, raw, plays, datasets)
        for name, raw in config.get("comparisons", {}).items()
    }
    warnings = tuple(
        line for run, settings in runs.items() for line in _unused(run, own[run], settings)
    )
    return Config(datasets=datasets, runs=runs, plays=plays, ladders=ladders,
                  comparisons=comparisons, warnings=warnings)  # fmt: skip


def _unused(run: str, own: dict[str, Any], settings: RunSettings) -> list[str]:
    """The keys a run sets itself that its settings make no use of: a key that counts only
    while another is true (``identity_when``) while that one is false."""
    lines = []
    for f in dataclasses.fields(RunSettings):
        switch = f.metadata.get("when")
        if switch not in (None, f.name) and f.name in own and not getattr(settings, switch):
            lines.append(f"config: runs.{run}.{f.name} is set but runs.{run}.{switch} is false:"
                         f" it is ignored (set {switch}: true to use it)")  # fmt: skip
    return lines


def _not_finite(value: Any, key: str = "") -> str | None:
    """The first number of the config that is not finite (YAML's ``.nan``, ``.inf``), as one
    line naming its key: the schema's bounds let NaN through (every comparison with it is
    false), and it fails later naming nothing."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{key}: {value} is not a finite number"
    items: list[tuple[str, Any]] = []
    if isinstance(value, dict):
        items = [(f"{key}.{name}" if key else str(name), item) for name, item in value.items()]
    elif isinstance(value, list):
        items = [(f"{key}[{i}]", item) for i, item in enumerate(value)]
    for sub, item in items:
        if error := _not_finite(item, sub):
            return error
    return None


INPUTS, OLD_INPUTS = "inputs", "pgn"  # datasets.NAME's files; pgn: their name until 2026-12


def _inputs(name: str, raw: dict[str, Any]) -> tuple[str, ...]:
    """The dataset's files, under ``inputs`` or its old name ``pgn`` (one of them, not both:
    which would win is a guess).

    :raises ConfigError: naming the dataset, for both keys or neither, or an entry that is a
        folder (Snakemake takes it as an existing input and convert then fails with "no such
        file")."""
    given = [key for key in (INPUTS, OLD_INPUTS) if key in raw]
    if len(given) != 1:
        raise ConfigError(
            f"config: datasets.{name}: both {INPUTS} and {OLD_INPUTS} are given ({OLD_INPUTS} is"
            f" the old name of {INPUTS}: keep {INPUTS} alone, also in a --configfile over it)"
            if given
            else f"config: datasets.{name}: no {INPUTS} (the list of its .pgn, .pgn.zst or"
            " .parquet files)"
        )
    paths = raw[given[0]]
    for i, path in enumerate(paths):
        if Path(path).is_dir():
            raise ConfigError(
                f"config: datasets.{name}.{given[0]}[{i}]: {path} is a folder; list its .pgn,"
                " .pgn.zst or .parquet files"
            )
    return tuple(paths)


LIKE = "like"  # runs.NAME.like: the run whose settings this one starts from


def resolve_likes(runs: dict[str, Any]) -> dict[str, Any]:
    """Every run with its ``like`` resolved: the named run's settings (resolved first, from
    whichever config file defined it: snakemake merges them), with this run's own keys over
    them, mappings (``play``) merged key by key, and ``like`` itself gone.

    :raises ConfigError: naming a ``like`` that is no run, or a cycle."""
    resolved: dict[str, Any] = {}

    def resolve(name: str, chain: tuple[str, ...]) -> Any:
        if name in resolved:
            return resolved[name]
        own = runs[name]
        if not isinstance(own, dict) or LIKE not in own:
            resolved[name] = own
            return own
        base = own[LIKE]
        if base == name:  # a second config file's run of the same name replaces the first
            raise ConfigError(
                f"config: runs.{name}.like names the run itself; a run of the same name in a"
                f" second config file replaces the first's keys it gives (leave like: out to"
                f" change {name!r}), or give yours another name to start from it"
                f" (runs: {{my-{name}: {{like: {name}}}}})"
            )
        if not isinstance(base, str) or base not in runs:
            others = [run for run in runs if run != name]
            raise ConfigError(
                f"config: runs.{name}.like is {base!r}, which is not a run (known:"
                f" {_known(others)}); one defined in another config file needs its --configfile"
            )
        if base in chain:
            cycle = " -> ".join([*chain, name, base][chain.index(base) :])
            raise ConfigError(f"config: runs.{name}.like makes a cycle ({cycle})")
        settings = resolve(base, (*chain, name))
        if not isinstance(settings, dict):
            resolved[name] = own  # the schema refuses the base in its own words
            return own
        mine = {k: v for k, v in own.items() if k != LIKE}
        resolved[name] = _merged(settings, mine)
        return resolved[name]

    return {name: copy.deepcopy(resolve(name, ())) for name in runs}


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` on ``base``: mappings merged key by key, anything else replaced."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def fill_defaults(schema: dict[str, Any], value: Any) -> None:
    """Every ``default`` of ``schema`` that ``value`` (already checked) lacks, filled in place,
    down through objects, their named entries and arrays' items."""
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for key, sub in properties.items():
            if "default" in sub and key not in value:
                value[key] = copy.deepcopy(sub["default"])
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            sub = properties.get(key, extra if isinstance(extra, dict) else None)
            if sub is not None:
                fill_defaults(sub, item)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            fill_defaults(schema["items"], item)


def _dataset(name: str, raw: dict[str, Any]) -> Dataset:
    return Dataset(
        name=name,
        inputs=_inputs(name, raw),
        legality_games=raw["legality_games"],
        settings=data_settings.Settings.from_config(raw, f"datasets.{name}"),
    )


def _known(names: Any) -> str:
    return ", ".join(sorted(names))


def _runs(raw: dict[str, Any], datasets: dict[str, Dataset]) -> dict[str, RunSettings]:
    runs = {}
    for run, entry in raw.items():
        if entry["dataset"] not in datasets:
            raise ConfigError(
                f"config: runs.{run}.dataset is {entry['dataset']!r}, "
                f"which is not a dataset (known: {_known(datasets)})"
            )
        try:
            runs[run] = RunSettings.from_checked(entry, name=run)
        except ValueError as error:
            raise ConfigError(f"config: {error}") from None
    return runs


def _ladder(name: str, raw: dict[str, Any]) -> Ladder:
    try:
        settings = play_ladder.settings_from_config(raw, name)
    except ValueError as error:
        raise ConfigError(f"config: {error}") from None
    return Ladder(name=name, engine=raw["engine"], threads=raw["threads"], settings=settings)


def _check_context(run: str, settings: RunSettings, dataset: Dataset) -> None:
    """A dataset's context (its longest game) within the model context of every run that
    trains on it: the cache would hold games the model cannot read."""
    context = dataset.settings.context
    model_context = config_for(settings.model).block_size
    if context > model_context:
        raise ConfigError(
            f"config: datasets.{dataset.name}.context is {context}, more than the"
            f" model context of runs.{run} (model {settings.model}: {model_context} tokens)"
        )
    # the rating prefix makes every game longer: its longest game's inputs, exactly
    error = prefix.context_error(
        settings.conditioning,
        context=context,
        model_context=model_context,
        key=f"runs.{run}.conditioning",
    )
    if error:
        raise ConfigError(f"config: {error} (datasets.{dataset.name}.context)")


def _check_play(
    run: str, play: PlaySettings, datasets: dict[str, Dataset], ladders: list[str]
) -> None:
    """The datasets a run's play reads and the ladder its model plays exist."""
    for name in play.datasets:
        if name not in datasets:
            raise ConfigError(
                f"config: runs.{run}.play.datasets names {name!r}, which is not a dataset"
                f" (known: {_known(datasets)})"
            )
    ladder = play.elo.ladder
    if ladder not in ladders:
        raise ConfigError(
            f"config: runs.{run}.play.elo.ladder is {ladder!r}, which is not a ladder"
            f" (known: {_known(ladders) or 'none'})"
        )


def _check_legality_request(run: str, settings: RunSettings, dataset: Dataset) -> None:
    """A run's legality_eval_games within its dataset's legality_games, and within what its
    token cache holds when the cache exists for the same legality_games."""
    asked, bound = settings.legality_eval_games, dataset.legality_games
    if asked is None:
        return
    if asked > bound:
        raise ConfigError(
            f"config: runs.{run}.legality_eval_games is {asked}, more than"
            f" datasets.{dataset.name}.legality_games ({bound}), the validation games"
            " the token cache gives legality tables"
        )
    path = Path(dataset.dir.cache_meta)
    try:
        info = files.read_json(path)
        held = info.get("legality_games", {})
        available, validation = held["games"], info["splits"]["validation"]["games"]
    except (files.UnreadableFileError, KeyError, TypeError, AttributeError):
        # missing (the segment checks it when it starts) or damaged: every reader of the
        # cache refuses it with its rebuild command, which must plan, as must other targets
        return
    if held.get("bound") != bound:
        return  # built for another legality_games: it may be rebuilt before the run
    error = legality_request_error(
        asked,
        available=available,
        validation_games=validation,
        key=f"runs.{run}.legality_eval_games",
        cache=path.parent,
    )
    if error:
        raise ConfigError(f"config: {error}")


def _comparison(
    name: str, raw: dict[str, Any], plays: dict[str, PlaySettings], datasets: dict[str, Dataset]
) -> Comparison:
    try:
        comparison = Comparison.from_config(
            name, raw, runs=sorted(plays), datasets=sorted(datasets)
        )
    except ValueError as error:
        raise ConfigError(f"config: {error}") from None
    # rule score scores that many games of each run: a comparison is on the same positions
    bounds = {run: plays[run].match.games for run in comparison.runs}
    if len(set(bounds.values())) > 1:
        listed = ", ".join(f"{run}: {games}" for run, games in bounds.items())
        raise ConfigError(
            f"config: comparisons.{name}.runs score different numbers of validation games"
            f" (runs.NAME.play.match.games: {listed}); a comparison is on the same positions"
        )
    return comparison
