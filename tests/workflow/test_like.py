"""``runs.NAME.like``: a run starts from another run's settings, in the same or another config
file (chesslm.config.resolve_likes), its own keys over them, mappings merged key by key; a
``like`` naming no run, or a cycle, is one line naming the key."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import yaml
from snakemake.utils import update_config

from chesslm import config as chesslm_config
from tests.helpers import ROOT, snakemake
from tests.workflow.test_commands import workdir

BASE = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())


def loaded(extra: str) -> chesslm_config.Config:
    """config/config.yaml and ``extra`` merged as snakemake merges a second --configfile."""
    config = copy.deepcopy(BASE)
    update_config(config, yaml.safe_load(extra))
    return chesslm_config.load(config)


def test_like_demo_is_the_demo_on_other_games_with_its_own_keys_over_it() -> None:
    settings = loaded("""
        runs:
          mine: {like: demo, dataset: real, lr: 1.0e-3, play: {match: {games: 128}}}
    """)
    runs, plays = settings.runs, settings.plays
    mine = {**dataclasses.asdict(runs["mine"]), "play": plays["mine"].as_dict()}
    demo = {**dataclasses.asdict(runs["demo"]), "play": plays["demo"].as_dict()}
    assert mine["dataset"] == "real" and mine["lr"] == 1.0e-3
    assert mine["play"]["match"]["games"] == 128
    # everything else is the demo's, down into play.match (merged, not replaced)
    for key in ("dataset", "lr"):
        mine.pop(key), demo.pop(key)
    mine["play"]["match"].pop("games"), demo["play"]["match"].pop("games")
    assert mine == demo
    assert plays["mine"].match.chunk_games == 32  # the demo's, not the schema's default


def test_a_chain_of_likes_resolves_through_each() -> None:
    runs = loaded("""
        runs:
          a: {like: demo, dataset: real, epochs: 1}
          b: {like: a, seed: 7}
    """).runs
    assert (runs["b"].dataset, runs["b"].epochs, runs["b"].seed) == ("real", 1, 7)
    assert runs["b"].workers == runs["demo"].workers and runs["b"].model == "tiny"


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (
            "runs: {mine: {like: demoo, dataset: sample}}",
            "config: runs.mine.like is 'demoo', which is not a run (known: demo,",
        ),
        (
            "runs: {a: {like: b, dataset: sample}, b: {like: a}}",
            "config: runs.b.like makes a cycle (a -> b -> a)",
        ),
        ("runs: {mine: {like: demo, epochs: 99}}", "epochs"),  # the schema checks the result
        ("runs: {demo: {like: demo}}", "config: runs.demo.like names the run itself;"),
        (  # YAML 1.1 reads 1e-300 as a string
            "runs: {mine: {like: demo-time, think_time_weight: 1e-300}}",
            "runs.mine.think_time_weight: '1e-300' is not of type 'number' (YAML reads 1e-300 as"
            " a string, wanting a dot in the number: write 1.0e-300)",
        ),
    ],
)
def test_a_bad_like_is_one_line_naming_the_key(extra: str, said: str) -> None:
    with pytest.raises(chesslm_config.ConfigError) as refused:
        loaded(extra)
    assert said in str(refused.value) and "\n" not in str(refused.value)
    if "demoo" in extra:  # the known runs are the others, never the run itself
        assert "mine" not in str(refused.value).split("known:")[1]


@pytest.mark.slow
def test_like_reaches_across_config_files_in_real_snakemake(tmp_path) -> None:
    """``like: demo`` in a second config file: snakemake merges the files, the run plans."""
    work = workdir(tmp_path)
    (work / "mine.yaml").write_text("runs:\n  mine: {like: demo, dataset: sample, seed: 3}\n")
    plan = snakemake(work, "results/mine/results.json", "--configfile", "mine.yaml", "-n")
    assert "rule probe:" in plan.stdout or "checkpoint probe:" in plan.stdout, plan.stdout
    (work / "bad.yaml").write_text("runs:\n  mine: {like: nothing, dataset: sample}\n")
    done = snakemake(work, "results/mine/results.json", "--configfile", "bad.yaml", "-n",
                     check=False)  # fmt: skip
    console = done.stdout + done.stderr
    assert done.returncode == 1 and "Traceback" not in console, console[-2000:]
    assert "config: runs.mine.like is 'nothing', which is not a run" in console


def test_a_key_its_switch_leaves_unused_is_one_warning_on_the_console(tmp_path) -> None:
    """``think_time_weight`` with ``think_time: false`` is ignored: said so, once per run, by
    every invocation (a plan included); a config without such keys says nothing."""
    said = (
        "config: runs.mine.think_time_weight is set but runs.mine.think_time is false: it is"
        " ignored (set think_time: true to use it)"
    )
    assert loaded("runs: {mine: {like: demo, think_time_weight: 0.5}}").warnings == (said,)
    assert loaded("runs: {mine: {like: demo}}").warnings == ()
    work = workdir(tmp_path)
    (work / "mine.yaml").write_text("runs:\n  mine: {like: demo, think_time_weight: 0.5}\n")
    plan = snakemake(work, "results/mine/results.json", "--configfile", "mine.yaml", "-n")
    assert (plan.stdout + plan.stderr).count(f"WARNING: {said}") == 1, plan.stderr[-2000:]
