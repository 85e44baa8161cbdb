"""Every command chesslm prints runs as printed (chesslm.commands): a seal's "rebuild with:",
summary.md's export and staleness's rebuild name the ``--configfile`` files of the snakemake
that defined the run, after the targets; a target of a run the config lacks is one line naming
the runs it has. Real snakemake on the project's workflow with a second config file."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from snakemake.cli import get_argument_parser

from chesslm import commands, seal
from tests.conftest import StagedRun
from tests.helpers import ROOT, snakemake

TARGET = "results/mine/export/model.safetensors"
MINE = """\
runs:
  mine: {dataset: sample, model: tiny, device: cpu, workers: 1, epochs: 1}
"""


def test_a_printed_command_names_the_config_files_after_its_targets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(commands.ENV, json.dumps(["mine.yaml", "/elsewhere/more.yaml"]))
    line = seal.rebuild("results/mine/play/move-match.json", "play")
    assert line == (
        "snakemake --cores 2 results/mine/play/move-match.json"
        " --configfile mine.yaml /elsewhere/more.yaml --forcerun play"
    )
    args = get_argument_parser().parse_args(shlex.split(line)[1:])
    assert args.targets == ["results/mine/play/move-match.json"]
    assert [str(p) for p in args.configfile] == ["mine.yaml", "/elsewhere/more.yaml"]
    assert set(args.forcerun) == {"play"}


def test_outside_a_job_a_command_names_no_config_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(commands.ENV, raising=False)
    assert commands.snakemake("results/demo/results.json") == (
        "snakemake --cores 2 results/demo/results.json"
    )


def test_config_files_are_shown_relative_below_the_working_directory(tmp_path: Path) -> None:
    assert commands.shown([tmp_path / "a" / "mine.yaml", "/etc/x.yaml"], cwd=tmp_path) == [
        "a/mine.yaml",
        "/etc/x.yaml",
    ]


def workdir(tmp_path: Path) -> Path:
    """The repository as a user's clone (links), with a second config file defining ``mine``."""
    for name in ("Snakefile", "workflow", "profiles", "resources", "config"):
        (tmp_path / name).symlink_to(ROOT / name)
    (tmp_path / "mine.yaml").write_text(MINE)
    return tmp_path


@pytest.mark.slow
@pytest.mark.parametrize(
    ("target", "what"),
    [
        (TARGET, "run 'mine'"),
        ("results/mine/report/summary.md", "run 'mine'"),
        ("results/datasets/theirs/manifest.json", "dataset 'theirs'"),
    ],
)
def test_a_target_of_a_run_the_config_lacks_is_one_line_naming_the_known_runs(
    tmp_path: Path, target: str, what: str
) -> None:
    done = snakemake(workdir(tmp_path), target, "-n", check=False)
    console = done.stdout + done.stderr
    said = [line for line in console.splitlines() if "is not in the config" in line]
    assert done.returncode == 1 and "Traceback" not in console, console[-3000:]
    assert "Exception" not in console, console[-3000:]
    assert len(said) == 1 and said[0].startswith(f"target {target}: {what} is not in the config")
    assert re.search(r"\(known \w+: .*\b(demo|sample)\b", said[0]), said[0]
    assert said[0].endswith("one defined in another config file needs its --configfile")


@pytest.mark.slow
@pytest.mark.parametrize("option", ["--forcerun", "--configfile"])
def test_a_target_after_an_option_of_several_values_is_one_line(tmp_path: Path, option) -> None:
    """``--forcerun probe TARGET`` and ``--configfile mine.yaml TARGET``: the target is read as
    the option's value (a rule's name, a config file that loads: {}), so snakemake would plan
    something else without a word; it is refused in one line naming it and the fix."""
    work = workdir(tmp_path)
    target = "results/demo/results.json"
    (work / target).parent.mkdir(parents=True)
    (work / target).write_text("{}")  # a config file snakemake loads before the workflow
    value = {"--forcerun": "probe", "--configfile": "mine.yaml"}[option]
    done = snakemake(work, "--cores", "2", option, value, target, "-n", check=False)
    console = done.stdout + done.stderr
    assert done.returncode == 1 and "Traceback" not in console, console[-3000:]
    line = [x for x in console.splitlines() if x.startswith("snakemake: ")][-1]
    assert line.startswith(f"snakemake: {target} read as {option}'s value"), line
    assert "put the targets first" in line
    plan = snakemake(work, target, "--cores", "2", option, value, "-n")  # targets first: plans
    assert "probe" in plan.stdout, plan.stdout[-3000:]


@pytest.mark.slow
def test_the_same_target_with_its_config_file_plans(tmp_path: Path) -> None:
    plan = snakemake(workdir(tmp_path), TARGET, "--configfile", "mine.yaml", "-n")
    assert re.search(r"^(local)?rule export:", plan.stdout, re.M), plan.stdout[-3000:]


@pytest.mark.slow
def test_summary_md_commands_run_as_printed(staged_run: StagedRun, tmp_path: Path) -> None:
    """The staged run is defined in tests/train-workflow.yaml, a second config file: every
    snakemake command its summary.md prints names it and plans as printed."""
    summary = (staged_run.unexported_summary).read_text()
    printed = re.findall(r"`(snakemake [^`]+)`", summary)
    assert printed, summary
    for command in printed:
        assert "--configfile train-workflow.yaml" in command, command
        words = shlex.split(command)[1:]
        plan = snakemake(staged_run.workdir, *words, "-n", "--forcerun", "export")
        assert re.search(r"^(local)?rule export:", plan.stdout, re.M), plan.stdout[-3000:]
