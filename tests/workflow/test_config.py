"""Bad configuration stops the workflow before any job, with one line naming the key
(chesslm.config, in-process; one case through real snakemake for the console); the schema's
enums and defaults are the Python constants'; parsing the workflow imports no torch, pandas,
matplotlib nor PGN reader; the default target runs what fits this machine."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import time
import typing

import pytest
import torch
import yaml
from snakemake.utils import update_config

from chesslm import config as chesslm_config
from chesslm.compare.settings import SHAPES, Comparison
from chesslm.data import conditioning, metadata
from chesslm.ladder import players as anchors
from chesslm.ladder import round_robin as ladder
from chesslm.match import protocols
from chesslm.model.presets import PRESETS
from chesslm.scorer import scoring
from chesslm.scorer import settings as play_settings
from chesslm.train.settings import DEVICES
from tests.helpers import ROOT, snakemake
from tests.workflow.test_workflow_data import make_workdir

SCHEMA = yaml.safe_load(chesslm_config.SCHEMA.read_text())
BASE = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())


def merged(extra: str) -> dict:
    """config/config.yaml overlaid by ``extra``, as snakemake merges a second --configfile."""
    config = copy.deepcopy(BASE)
    update_config(config, yaml.safe_load(extra))
    return config


REFUSED = [
    ("runs: {demo: {dataset: sample, epochs: 25}}", "epochs"),
    ("runs: {demo: {dataset: sample, max_seconds: 421}}", "max_seconds"),
    ("runs: {demo: {dataset: sample, micro: 0}}", "micro"),
    ("runs: {demo: {dataset: sample, lernrate: 0.1}}", "lernrate"),
    ("runs: {demo: {dataset: sample, conditioning: maia}}", "runs.demo.conditioning"),
    ("runs: {demo: {dataset: nowhere}}", "runs.demo.dataset"),
    (
        "runs: {demo: {dataset: sample, schedule_steps: 10, warmup_steps: 10}}",
        "runs.demo.warmup_steps",
    ),
    ("datasets: {sample: {inputs: []}}", "datasets.sample.inputs: [] should be non-empty"),
    ("datasets: {old: {pgn: []}}", "datasets.old.pgn: [] should be non-empty"),
    # config.yaml's sample lists inputs: a second file's pgn over it gives both keys
    (
        "datasets: {sample: {pgn: [resources/lichess-sample.pgn.zst]}}",
        "datasets.sample: both inputs and pgn are given (pgn is the old name of inputs",
    ),
    ("datasets: {bare: {context: 512}}", "datasets.bare: no inputs (the list of its .pgn,"),
    (
        "datasets: {sample: {filters: {min_elo: 3000, max_elo: 1000}}}",
        "datasets.sample.filters.min_elo",
    ),
    ("runs: {demo: {dataset: sample, play: {datasets: [nope]}}}", "runs.demo.play.datasets"),
    (
        "runs: {demo: {dataset: sample, play: {elo: {ladder: nope}}}}",
        "runs.demo.play.elo.ladder is 'nope', which is not a ladder (known: full, small)",
    ),
    (
        "ladders: {small: {anchors: [{name: a, kind: random}, {name: b, kind: greedy}]}}",
        "ladders.small: ladder anchors: none is a stockfish_elo anchor",
    ),
    ("ladders: {small: {games_per_pair: 0}}", "ladders.small.games_per_pair"),
    (
        "runs: {demo: {dataset: sample, legality_eval_games: 5000}}",
        "runs.demo.legality_eval_games is 5000, more than datasets.sample.legality_games",
    ),
    (
        "comparisons: {c: {runs: [demo, x], dataset: sample}}",
        "config: comparisons.c.runs names 'x', which is not a run (known: demo, ",
    ),
    (
        "comparisons: {c: {runs: [demo], dataset: nope}}",
        "comparisons.c.dataset is 'nope', which is not a dataset (known: real, real-1k,",
    ),
    ("comparisons: {c: {runs: [demo], dataset: sample, shape: maia}}", "shape"),
    (
        "comparisons: {c: {runs: [demo], dataset: sample, baseline: pilot}}",
        "comparisons.c.baseline is 'pilot', not one of comparisons.c.runs",
    ),
    (
        "comparisons: {c: {runs: [demo, pilot], dataset: sample}}",
        "comparisons.c.runs score different numbers of validation games"
        " (runs.NAME.play.match.games: demo: 64, pilot: 10000)",
    ),
    (
        "datasets: {sample: {context: 2048}}",
        "datasets.sample.context is 2048, more than the model context of runs.demo"
        " (model tiny: 1024 tokens)",
    ),
]


@pytest.mark.parametrize(("extra", "named"), REFUSED)
def test_bad_config_is_refused_naming_the_key(tmp_path, monkeypatch, extra, named):
    monkeypatch.chdir(tmp_path)  # the legality check reads a token cache relative to here
    with pytest.raises(chesslm_config.ConfigError) as refused:
        chesslm_config.load(merged(extra))
    message = str(refused.value)
    assert message.startswith("config: ") and named in message and "\n" not in message


def test_the_old_key_pgn_is_read_as_inputs():
    """A dataset written with ``pgn:`` (the key's name until 2026-12) is the same dataset as
    with ``inputs:``: the same files, the same settings."""
    files = "[resources/lichess-sample.pgn.zst, resources/lichess-github.pgn.zst]"
    loaded = chesslm_config.load(
        merged(f"datasets: {{old: {{pgn: {files}}}, new: {{inputs: {files}}}}}")
    )
    old, new = loaded.datasets["old"], loaded.datasets["new"]
    assert old.inputs == new.inputs == tuple(yaml.safe_load(files))
    assert old.settings == new.settings and old.legality_games == new.legality_games


@pytest.mark.slow
def test_a_refusal_is_the_consoles_one_line_before_any_job(tmp_path):
    """Through real snakemake: one ``config: `` line naming the key, no traceback or frame,
    exit status 1, nothing written."""
    workdir = make_workdir(tmp_path)
    extra, named = REFUSED[0]
    (workdir / "bad.yaml").write_text(extra + "\n")
    result = snakemake(
        workdir, "results/demo/results.json", "--configfile", "bad.yaml", "-n", check=False
    )
    assert result.returncode == 1
    output = result.stdout + result.stderr
    lines = [line for line in output.splitlines() if line.startswith("config: ")]
    assert len(lines) == 1 and named in lines[0], output
    assert "Traceback" not in output and "in file" not in output and "File " not in output, output
    assert not (workdir / "results").exists()


def test_more_legality_games_than_the_built_cache_holds_is_refused_at_plan_time(
    tmp_path, monkeypatch
):
    """The sample's cache exists (its cache.json, as the token_cache rule writes it, for the
    same legality_games): the check names the run's key, the number asked and held."""
    monkeypatch.chdir(tmp_path)
    cache = tmp_path / "results/datasets/sample/token-cache"
    cache.mkdir(parents=True)
    held = {"bound": 4096, "games": 258}
    info = {"splits": {"validation": {"games": 258}}, "legality_games": held}
    (cache / "cache.json").write_text(json.dumps(info))
    asked = "runs: {demo: {legality_eval_games: 300}}"
    with pytest.raises(chesslm_config.ConfigError) as refused:
        chesslm_config.load(merged(asked))
    assert str(refused.value) == (
        "config: runs.demo.legality_eval_games is 300, but the token cache"
        " results/datasets/sample/token-cache has legality tables for 258 of 258 validation"
        " games: lower it to at most 258"
    )
    # a cache built for another legality_games is rebuilt first: the plan goes on
    (cache / "cache.json").write_text(json.dumps(info | {"legality_games": {"bound": 100}}))
    assert chesslm_config.load(merged(asked)).runs["demo"].legality_eval_games == 300


def test_the_config_is_typed_with_every_default_filled_in(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = merged("comparisons: {c: {runs: [demo], dataset: sample}}")
    settings = chesslm_config.load(config)
    demo = settings.plays["demo"]
    assert isinstance(demo, play_settings.PlaySettings)
    assert not hasattr(settings.runs["demo"], "play")  # a run's settings do not carry play's
    assert (demo.match.games, demo.match.protocols) == (64, ["maia2", "all"])
    assert config["runs"]["demo"]["play"] == demo.as_dict()  # filled in place, as validate
    assert settings.play_datasets("demo") == ["sample"] and settings.play_device("pilot") == "cuda"
    assert settings.comparisons["c"] == Comparison(name="c", runs=("demo",), dataset="sample",
                                                   baseline="demo")  # fmt: skip
    assert settings.ladders["full"].settings == ladder.LadderSettings()
    assert settings.datasets["real-1k"].settings.train_games == 1000


# --- the schema against the Python constants ------------------------------------------------

# every enum of the schema (its dotted path, entries' names as *) -> the constant it repeats
ENUMS = {
    "datasets.*.filters.speeds": metadata.SPEEDS,
    "datasets.*.filters.exclude_terminations": metadata.TERMINATIONS,
    "ladders.*.anchors.kind": anchors.KINDS,
    "comparisons.*.protocol": tuple(protocols.PROTOCOLS),
    "comparisons.*.shape": SHAPES,
    "runs.*.model": tuple(PRESETS),
    "runs.*.device": DEVICES,
    "runs.*.conditioning": conditioning.LAYOUTS,
    "runs.*.play.device": (*DEVICES, None),
    "runs.*.play.split": play_settings.SPLITS,
    "runs.*.play.match.attention": scoring.ATTENTION,
    "runs.*.play.match.protocols": tuple(protocols.PROTOCOLS),
}


def schema_enums(schema: dict, path: str = "") -> dict[str, list]:
    """Every ``enum`` under ``schema``, by dotted path (an array's items: the array's path)."""
    found = {path: schema["enum"]} if "enum" in schema else {}
    for key, sub in schema.get("properties", {}).items():
        found |= schema_enums(sub, f"{path}.{key}".lstrip("."))
    if isinstance(schema.get("additionalProperties"), dict):
        found |= schema_enums(schema["additionalProperties"], f"{path}.*")
    if isinstance(schema.get("items"), dict):
        found |= schema_enums(schema["items"], path)
    return found


def test_every_schema_enum_is_its_python_constant() -> None:
    found = schema_enums(SCHEMA)
    assert set(found) == set(ENUMS)
    for path, values in found.items():  # the same values, in any order
        assert sorted(values, key=str) == sorted(ENUMS[path], key=str), path


JSON_TYPES = {"string": str, "integer": int, "number": float, "boolean": bool}


def assert_dataclass_is_schema(cls: type, schema: dict, where: str) -> None:
    """Same keys, defaults and types: a nested object is a dataclass of its own."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    assert set(fields) == set(schema["properties"]), where
    for name, spec in schema["properties"].items():
        f, key = fields[name], f"{where}.{name}"
        default = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
        if spec.get("type") == "object":
            assert dataclasses.is_dataclass(hints[name]), key
            assert_dataclass_is_schema(hints[name], spec, key)
            continue
        assert default == spec["default"] and type(default) is type(spec["default"]), key
        kinds = spec["type"] if isinstance(spec["type"], list) else [spec["type"]]
        if "array" in kinds:
            item = JSON_TYPES[spec["items"]["type"]]
            assert hints[name] == list[item], key
            continue
        base = JSON_TYPES[next(k for k in kinds if k != "null")]
        assert hints[name] == (base | None if "null" in kinds else base), key


def entry(*path: str) -> dict:
    schema = SCHEMA
    for key in path:
        schema = schema["properties"][key]
    return schema["additionalProperties"]


def test_play_settings_are_the_schemas_play_object() -> None:
    play = entry("runs")["properties"]["play"]
    assert_dataclass_is_schema(play_settings.PlaySettings, play, "runs.*.play")
    assert play_settings.PlaySettings() == play_settings.PlaySettings.from_dict({})


def test_comparison_and_ladder_defaults_are_the_schemas() -> None:
    """Written once in Python (the dataclasses), once in the schema: the same."""
    for cls, schema, skip in (
        (Comparison, entry("comparisons"), {"runs", "dataset", "baseline"}),
        (ladder.LadderSettings, entry("ladders"), {"anchors"}),
        (anchors.AnchorSpec, entry("ladders")["properties"]["anchors"]["items"], {"name", "kind"}),
    ):
        fields = {f.name: f.default for f in dataclasses.fields(cls)}
        for name, spec in schema["properties"].items():
            if name in skip or name in ladder.NOT_SETTINGS:
                continue
            assert fields[name] == spec["default"], (cls.__name__, name)
    assert entry("comparisons")["properties"]["baseline"]["default"] is None  # the first run


SILENT = "#!/bin/sh\nsleep 60\n"  # a program that never answers (the old plan hung 13 s)
ENGINE_REFUSED = [
    (
        "ladders: {small: {engine: ENGINE}}",
        "config: ladders.small.engine: ENGINE is not a UCI engine: it did not answer `uci` with"
        " `uciok` within 5 s",
    ),
    (
        "ladders: {small: {anchors: [{name: r, kind: random},"
        " {name: sf, kind: stockfish_elo, nodes: 100, elo: 9999}]}}",
        "config: ladders.small.anchors[1].elo is 9999 (anchor 'sf'), outside the UCI_Elo range",
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize(("extra", "named"), ENGINE_REFUSED, ids=["not-uci", "uci-elo"])
def test_a_ladders_engine_is_checked_when_a_plan_needs_the_ladder(tmp_path, extra, named):
    """A plan of the demo's play (which needs ladder small) with an engine that never answers
    `uci`, or an anchor's UCI_Elo outside the range Stockfish reports: within seconds, one line
    naming the key, exit status 1."""
    workdir = make_workdir(tmp_path)
    engine = tmp_path / "silent.sh"
    engine.write_text(SILENT)
    engine.chmod(0o755)
    (workdir / "bad.yaml").write_text(extra.replace("ENGINE", str(engine)) + "\n")
    started = time.monotonic()
    result = snakemake(workdir, "results/demo/play/move-match.json", "--configfile", "bad.yaml",
                       "-n", check=False)  # fmt: skip
    assert result.returncode == 1 and time.monotonic() - started < 15
    output = result.stdout + result.stderr
    lines = [line for line in output.splitlines() if line.startswith("config: ")]
    assert len(lines) == 1 and lines[0].startswith(named.replace("ENGINE", str(engine))), output
    assert "Traceback" not in output and "Exception" not in output, output


# --- the parse: no heavy imports --------------------------------------------------------------

HEAVY = ("torch", "pandas", "matplotlib", "rust_pgn_reader_python_binding", "chesslm.data.pgn")
PARSE = textwrap.dedent(
    """
    import atexit, importlib.abc, json, sys
    from snakemake.cli import main

    # snakemake's own slurm plugin imports pandas when snakemake.cli loads: from here on, an
    # import of any of these (pandas again included) fails, naming who asked for it
    HEAVY = {heavy}
    for name in [m for m in sys.modules if m.split(".")[0] in HEAVY]:
        del sys.modules[name]

    class Refuse(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name in HEAVY or name.split(".")[0] in HEAVY:
                raise ImportError("the workflow's parse imports " + name)

    sys.meta_path.insert(0, Refuse())
    atexit.register(lambda: print("MODULES " + json.dumps(sorted(sys.modules))))
    sys.argv = ["snakemake", *sys.argv[1:]]
    main()
    """
)


@pytest.mark.slow
def test_parsing_the_workflow_imports_no_torch_pandas_matplotlib_or_pgn_reader(tmp_path):
    """A dry run of the demo's results (every rule file parsed, the DAG built) in a real
    snakemake process whose imports of the heavy modules fail."""
    workdir = make_workdir(tmp_path)
    script = tmp_path / "parse.py"
    script.write_text(PARSE.format(heavy=repr(set(HEAVY))))
    cmd = [sys.executable, str(script), "--snakefile", str(ROOT / "Snakefile")]
    cmd += ["--directory", str(workdir), "-n", "results/demo/results.json"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=workdir, env=env, timeout=600)
    output = result.stdout + result.stderr
    assert result.returncode == 0 and "This was a dry-run" in output, output[-4000:]
    modules = json.loads(output.split("MODULES ", 1)[1].splitlines()[0])
    assert "chesslm.config" in modules
    assert not [m for m in modules if m in HEAVY or m.split(".")[0] in HEAVY]


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
def test_the_default_target_leaves_out_cuda_runs_without_cuda_in_one_line(tmp_path):
    workdir = make_workdir(tmp_path)
    result = snakemake(workdir, "-n")  # config.yaml: demo on cpu, pilot on cuda
    output = result.stdout + result.stderr
    assert output.count("left out: pilot (device cuda, no CUDA here)") == 1, output[-3000:]
    assert "run=demo" in output and "run=pilot" not in output
    # a named target is built as asked, without the line
    named = snakemake(workdir, "results/pilot/probe-results.json", "-n")
    assert "left out" not in named.stdout + named.stderr and "run=pilot" in named.stdout
