"""A run's settings: the one typed list of run keys besides the config schema.

``RunSettings`` holds every key of ``runs.{run}`` in workflow/schemas/config.schema.yaml, with
the same types and defaults (tests/unit/test_settings.py fails if the two disagree). It is
built from the validated config (``from_config``), rendered as the segment's command-line flags
(``to_args``, one ``--key-with-dashes=value`` per key) and parsed back (``add_arguments`` and
``from_namespace``, which check the values against the same schema); ``identity`` gives the
hyper-parameters a checkpoint must match to be resumed.

>>> s = RunSettings(dataset="sample", lr=3e-3, compile=False)
>>> s.to_args()[:3]
['--dataset=sample', '--model=tiny', '--device=cpu']
>>> parse_args(s.to_args()) == s
True
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import re
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "config.schema.yaml"
# a field with this metadata enters the checkpoint identity: changing it refuses a resume
IDENTITY = {"identity": True}


def identity_when(name: str) -> dict[str, Any]:
    """Metadata of a key added after runs existed: it enters the identity only while the
    key ``name`` is set (true), so a run without it keeps the identity it had."""
    return {"identity": True, "when": name}


# keys of runs.{run} that are not the run's training settings: rule play's (its own object)
NOT_RUN_KEYS = ("play",)
# a field with this metadata is not the segment's business: it has no segment flag
NOT_A_FLAG = {"flag": False}
DEVICES = ("cpu", "cuda")  # cpu: gloo, cuda: NCCL (the schema's runs.NAME.device)


@dataclass(frozen=True, kw_only=True)
class RunSettings:
    """One run's settings (config/README.md explains each key)."""

    dataset: str
    model: str = "tiny"
    device: str = "cpu"
    workers: int = 2
    threads_per_worker: int = 1
    micro: int = field(default=8, metadata=IDENTITY)
    accum: int = field(default=2, metadata=IDENTITY)
    lr: float = field(default=3.0e-4, metadata=IDENTITY)
    epochs: int = field(default=20, metadata=IDENTITY)
    max_seconds: int = 420
    seed: int = field(default=2026, metadata=IDENTITY)
    validation_every_steps: int | None = field(default=None, metadata=IDENTITY)
    legality_eval_games: int | None = field(default=None, metadata=IDENTITY)
    schedule_steps: int | None = field(default=None, metadata=IDENTITY)
    warmup_steps: int | None = field(default=None, metadata=IDENTITY)
    max_updates: int | None = field(default=None, metadata=IDENTITY)
    segment_updates: int | None = None
    max_segments: int = 50
    compile: bool | None = None
    cuda_graphs: bool | None = None
    packing: bool = False
    # the players' ratings as input tokens before each game (chesslm/data/conditioning.py)
    conditioning: str = field(default="none", metadata=IDENTITY)
    # a head predicting the game's result from the side to move (chesslm/train/outcome.py)
    outcome: bool = field(default=False, metadata=IDENTITY)
    # its loss's weight beside the move loss (mean outcome NLL x weight; config/README.md)
    outcome_weight: float = field(default=0.1, metadata=IDENTITY)
    # the time control and both clocks as inputs at every position (chesslm/model/human_time.py)
    time_inputs: bool = field(default=False, metadata=identity_when("time_inputs"))
    # a head predicting the mover's think time (chesslm/train/human_time.py), and its loss weight
    think_time: bool = field(default=False, metadata=identity_when("think_time"))
    think_time_weight: float = field(default=0.2, metadata=identity_when("think_time"))

    @classmethod
    def from_config(cls, run: dict[str, Any], *, name: str = "run") -> RunSettings:
        """A run's settings from ``config["runs"][name]`` (schema defaults already applied).

        :raises ValueError: naming ``runs.{name}.<key>`` if a value breaks the schema or a
            cross-key rule.
        """
        error = schema_error(run_schema(), run, where=("runs", name))
        if error:
            raise ValueError(error)
        return cls.from_checked(run, name=name)

    @classmethod
    def from_checked(cls, run: dict[str, Any], *, name: str = "run") -> RunSettings:
        """A run's settings from a ``runs.{name}`` entry the schema has already checked (the
        workflow's one check, ``chesslm.config``): the cross-key rules only."""
        check_rules(run, name=name)
        # runs.{name}.play is rule play's, not training's: the config types it apart
        # (chesslm.config, PlaySettings), so the run's settings do not carry it
        return cls(**{key: value for key, value in run.items() if key not in NOT_RUN_KEYS})

    def to_args(self) -> list[str]:
        """The segment's flags for these settings; None (the schema's null) is left out."""
        out = []
        for f in flag_fields():
            value = getattr(self, f.name)
            if value is None:
                continue
            if isinstance(value, bool):
                value = "on" if value else "off"
            out.append(f"--{flag(f.name)}={value}")
        return out

    def identity(self) -> dict[str, Any]:
        """The hyper-parameters a checkpoint must match (``IDENTITY`` fields, and those of
        ``identity_when`` while their key is set), by name."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if self._pins(f)}

    def _pins(self, f: dataclasses.Field) -> bool:
        """Whether field ``f`` is in the identity (see ``identity``)."""
        when = f.metadata.get("when")
        return bool(f.metadata.get("identity")) and (when is None or bool(getattr(self, when)))


def flag_fields() -> list[dataclasses.Field]:
    """The fields that travel to the segment as flags."""
    return [f for f in dataclasses.fields(RunSettings) if f.metadata.get("flag", True)]


def flag(name: str) -> str:
    return name.replace("_", "-")


def _on_off(text: str) -> bool | None:
    return {"on": True, "off": False, "auto": None}[text]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per run key, typed and defaulted as ``RunSettings``; bools read on/off (and
    auto = null where the key may be null)."""
    hints = typing.get_type_hints(RunSettings)
    group = parser.add_argument_group("run settings (config runs.{run}, config/README.md)")
    for f in flag_fields():
        kind = hints[f.name]
        args = typing.get_args(kind)
        nullable = isinstance(kind, types.UnionType) and type(None) in args
        base = next(a for a in args if a is not type(None)) if nullable else kind
        spec: dict[str, Any] = {"dest": f.name}
        if f.default is dataclasses.MISSING:
            spec["required"] = True
        else:
            spec["default"] = f.default
        if base is bool:
            spec["type"] = _on_off
            spec["metavar"] = "{on,off,auto}" if nullable else "{on,off}"
        else:
            spec["type"] = base
        group.add_argument(f"--{flag(f.name)}", **spec)


def from_namespace(namespace: argparse.Namespace, *, name: str = "run") -> RunSettings:
    """The settings parsed by ``add_arguments``, checked against the schema."""
    values = {f.name: getattr(namespace, f.name) for f in flag_fields()}
    return RunSettings.from_config(values, name=name)


def parse_args(argv: Sequence[str]) -> RunSettings:
    """``RunSettings`` from ``to_args``-style flags alone (errors exit as argparse does)."""
    parser = argparse.ArgumentParser(prog="chesslm.train.settings")
    add_arguments(parser)
    namespace = parser.parse_args(argv)
    try:
        return from_namespace(namespace)
    except ValueError as error:
        parser.error(str(error))
        raise  # unreachable: parser.error exits


@functools.cache
def run_schema() -> dict[str, Any]:
    """The JSON schema of one entry of ``runs``."""
    import yaml

    schema = yaml.safe_load(SCHEMA.read_text())
    return schema["properties"]["runs"]["additionalProperties"]


def schema_error(schema: dict[str, Any], value: Any, *, where: Sequence[str] = ()) -> str | None:
    """The first error of ``value`` against a JSON schema as one line naming its dotted key
    (``where`` is the path down to ``value``), or None."""
    import jsonschema

    errors = jsonschema.Draft202012Validator(schema).iter_errors(value)
    first = min(errors, key=lambda e: [str(p) for p in e.absolute_path], default=None)
    if first is None:
        return None
    key = ".".join([*where, *(str(p) for p in first.absolute_path)]) or "(top level)"
    return f"{key}: {first.message}{_yaml_number_hint(first)}"


# a number in exponent form as PyYAML (YAML 1.1) reads it only with a dot and a signed exponent
_EXPONENT = re.compile(r"([+-]?\d+)(\.\d*)?[eE]([+-]?)(\d+)")


def _yaml_number_hint(error: Any) -> str:
    """Why a number reads as a string: YAML 1.1 (PyYAML, snakemake's) takes ``1e-300`` and
    ``1.0e300`` for strings; ``1.0e-300`` and ``1.0e+300`` are numbers."""
    value = error.instance
    found = _EXPONENT.fullmatch(value) if isinstance(value, str) else None
    if error.validator != "type" or found is None:
        return ""
    whole, fraction, sign, exponent = found.groups()
    wanting = [a for a, given in (("a dot in the number", fraction), ("a signed exponent", sign))
               if not given]  # fmt: skip
    written = f"{whole}{fraction or '.0'}e{sign or '+'}{exponent}"
    return f" (YAML reads {value} as a string, wanting {' and '.join(wanting)}: write {written})"


def check(run: dict[str, Any], *, name: str = "run") -> None:
    """:raises ValueError: naming ``runs.{name}.<key>`` and what is wrong, for the first bad
    key of the schema, then for the cross-key rules the schema cannot express."""
    error = schema_error(run_schema(), run, where=("runs", name))
    if error:
        raise ValueError(error)
    check_rules(run, name=name)


def check_rules(run: dict[str, Any], *, name: str = "run") -> None:
    """:raises ValueError: naming ``runs.{name}.<key>`` for a cross-key rule the schema cannot
    express."""
    warmup, horizon = run.get("warmup_steps"), run.get("schedule_steps")
    if warmup is not None and horizon is not None and warmup >= horizon:
        raise ValueError(
            f"runs.{name}.warmup_steps ({warmup}) must be shorter than "
            f"runs.{name}.schedule_steps ({horizon})"
        )


def legality_request_error(
    requested: int | None, *, available: int, validation_games: int, key: str, cache: Path | str
) -> str | None:
    """One line if ``requested`` legality games (``runs.NAME.legality_eval_games``, named by
    ``key``) are more than the token cache ``cache`` has legality tables for (``available``
    of its ``validation_games``), else None. None requested: all of them."""
    if requested is None or requested <= available:
        return None
    fix = f"lower it to at most {available}"
    if available < validation_games:
        fix += " or raise the dataset's legality_games"
    return (
        f"{key} is {requested}, but the token cache {cache} has legality tables for"
        f" {available} of {validation_games} validation games: {fix}"
    )
