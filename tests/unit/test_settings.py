"""RunSettings is the schema's `runs` entry as a dataclass: same keys, types, defaults, checks."""

from __future__ import annotations

import dataclasses
import types
import typing

import pytest

from chesslm.train import settings
from chesslm.train.settings import RunSettings

JSON_TYPES = {"string": str, "integer": int, "number": float, "boolean": bool, "object": dict}


def python_type(spec: dict) -> object:
    kinds = spec["type"] if isinstance(spec["type"], list) else [spec["type"]]
    base = JSON_TYPES[next(k for k in kinds if k != "null")]
    return base | None if "null" in kinds else base


def test_schema_and_dataclass_agree_on_every_key_type_and_default() -> None:
    schema = settings.run_schema()
    fields = {f.name: f for f in dataclasses.fields(RunSettings)}
    hints = typing.get_type_hints(RunSettings)
    # like: a run starts from another run's settings (chesslm.config.resolve_likes), resolved
    # before the settings are built, so no field holds it; play: rule play's, typed apart
    # (PlaySettings), so a run's settings do not carry it
    assert set(schema["properties"]) - {"like", *settings.NOT_RUN_KEYS} == set(fields)
    for name, spec in schema["properties"].items():
        if name in ("play", "like"):
            continue  # PlaySettings, nested: tests/workflow/test_config.py; like: above
        f = fields[name]
        default = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
        if "default" in spec:
            assert default == spec["default"] and type(default) is type(spec["default"]), name
        else:
            assert default is dataclasses.MISSING and name in schema["required"], name
        assert hints[name] == python_type(spec), name
        assert not isinstance(hints[name], types.GenericAlias), name


def test_flags_round_trip_for_defaults_and_for_every_value_kind() -> None:
    for s in (
        RunSettings(dataset="sample"),
        RunSettings(
            dataset="d",
            model="baseline",
            device="cuda",
            lr=3.0e-3,
            max_updates=7,
            compile=False,
            cuda_graphs=True,
            packing=True,
            threads_per_worker=3,
        ),  # fmt: skip
    ):
        args = s.to_args()
        assert settings.parse_args(args) == s
        assert len(args) == sum(getattr(s, f.name) is not None for f in settings.flag_fields())


def test_a_bad_flag_value_is_refused_naming_the_key(capsys) -> None:
    for bad, named in (
        (["--epochs=25"], "runs.run.epochs"),
        (["--max-seconds=421"], "runs.run.max_seconds"),
        (["--model=huge"], "runs.run.model"),
        (["--schedule-steps=5", "--warmup-steps=5"], "runs.run.warmup_steps"),
    ):
        with pytest.raises(SystemExit):
            settings.parse_args(["--dataset=d", *bad])
        assert named in capsys.readouterr().err, bad


def test_from_config_names_the_run_and_identity_is_the_marked_fields() -> None:
    with pytest.raises(ValueError, match=r"runs\.demo\.micro"):
        RunSettings.from_config({"dataset": "d", "micro": 0}, name="demo")
    s = RunSettings.from_config({"dataset": "d", "seed": 1}, name="demo")
    assert set(s.identity()) == {
        "seed", "micro", "accum", "lr", "epochs", "schedule_steps", "warmup_steps",
        "max_updates", "validation_every_steps", "legality_eval_games", "conditioning",
        "outcome", "outcome_weight",
    }  # fmt: skip
    assert s.identity()["seed"] == 1


def test_dataset_settings_defaults_are_the_schemas() -> None:
    """chesslm.data.convert.Settings, as the manifest records it, against `datasets` entries."""
    import yaml

    from chesslm.data.convert import Settings

    schema = yaml.safe_load(settings.SCHEMA.read_text())["properties"]["datasets"]
    entry = schema["additionalProperties"]["properties"]

    def defaults(properties: dict) -> dict:
        return {
            key: defaults(spec["properties"]) if spec.get("type") == "object" else spec["default"]
            for key, spec in properties.items()
            # the inputs (and their old key); the token cache's own setting
            if key not in ("inputs", "pgn", "legality_games")
        }

    assert Settings().as_dict() == defaults(entry)
