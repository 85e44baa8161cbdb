"""The training stages through real snakemake: probe, a chain of segments, results, reruns."""

from __future__ import annotations

import fcntl
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from chesslm.data.cache import TokenCache
from tests.conftest import StagedRun, copy_tree
from tests.helpers import ROOT, snakemake

pytestmark = pytest.mark.slow
TARGET = "results/mini/results.json"
ARGS = ("--configfile", "train-workflow.yaml")


@pytest.fixture
def trained(trained_workflow: Path) -> Path:
    return trained_workflow  # tests/conftest.py: the staged run, changed here in place


def test_chain_reaches_a_terminal_status(trained: Path) -> None:
    results = json.loads((trained / TARGET).read_text())
    assert results["status"] == "max_updates" and results["test_evaluated"] is False
    assert results["segment_count"] == 2
    assert [s["status"] for s in results["segments"]] == ["segment_updates", "max_updates"]
    assert [s["step_end"] for s in results["segments"]] == [3, 6]
    assert (
        json.loads((trained / "results/mini/probe-results.json").read_text())["status"] == "passed"
    )
    for log in ("probe.log", "train_segment/0.log", "train_segment/1.log", "results.log"):
        assert (trained / "logs/mini" / log).exists(), log


def test_rerun_is_nothing_to_be_done(trained: Path) -> None:
    again = snakemake(trained, TARGET, *ARGS, "--cores", "2")
    assert "Nothing to be done" in again.stdout + again.stderr


def test_forcerun_probe_never_restarts_the_segments(trained: Path) -> None:
    plan = snakemake(trained, TARGET, *ARGS, "--forcerun", "probe", "-n")
    assert "probe" in plan.stdout and "train_segment" not in plan.stdout, plan.stdout
    before = (trained / "results/mini/segments/0.json").read_text()
    snakemake(trained, TARGET, *ARGS, "--forcerun", "probe", "--cores", "2")
    assert (trained / "results/mini/segments/0.json").read_text() == before


def test_summarise_tables_match_the_events_and_the_report_builds(
    trained: Path, staged_run: StagedRun
) -> None:
    summary = "results/mini/report/summary.md"  # and its --report: tests/conftest.py's STAGES
    records = (trained / "results/mini/train/events.jsonl").read_text().splitlines()
    checks = [e for e in map(json.loads, records) if e["stage"] == "validation"]
    table = pd.read_csv(trained / "results/mini/report/validation.csv")
    table = table[table["kind"] == "check"]  # the initial validation is a row of its own
    assert len(table) == len(checks) > 0
    assert list(table["step"]) == [e["step"] for e in checks]
    assert list(table["validation.nll"]) == pytest.approx([e["validation"]["nll"] for e in checks])
    segments = pd.read_csv(trained / "results/mini/report/segments.csv")
    assert list(segments["status"]) == ["segment_updates", "max_updates"]
    text = (trained / summary).read_text()
    assert "test_evaluated: false" in text and "max_updates" in text
    # both segments recorded their wall-time split: a table with a total, and the efficiency
    assert segments["wall_split.training"].gt(0).all() and segments["useful_targets"].gt(0).all()
    assert "### Wall time" in text and "| total |" in text and "not recorded" not in text
    efficiency = r"wall time: [\d,]+ \(\d+ targets in [\d.]+ s of 2 segments\); efficiency "
    assert re.search(efficiency, text)
    # how to play the run's model: the exact engine command, and the export's command
    assert "`chesslm-uci --checkpoint results/mini/train/best.pt`" in text
    unexported = staged_run.unexported_summary.read_text()  # the staged export came later
    export = "results/mini/export/model.safetensors --configfile train-workflow.yaml"
    assert f"`snakemake --cores 2 {export}`" in unexported
    assert "validation" in staged_run.report.read_text()
    plan = snakemake(trained, summary, *ARGS, "--forcerun", "summarise", "-n")
    assert "summarise" in plan.stdout
    assert "train_segment" not in plan.stdout
    assert not re.search(r"^(checkpoint|rule) probe:", plan.stdout, re.M), plan.stdout


def test_editing_a_rule_text_never_restarts_the_chain(trained: Path, tmp_path: Path) -> None:
    copy = tmp_path / "workflow-copy"
    shutil.copytree(ROOT / "workflow", copy / "workflow")
    shutil.copy(ROOT / "Snakefile", copy / "Snakefile")
    (copy / "profiles").symlink_to("workflow/profiles")  # as in the repository
    rules = copy / "workflow/rules/train.smk"
    text = rules.read_text()
    assert " {log:q} " in text
    rules.write_text(text.replace(" {log:q} ", "  {log:q}  "))
    plan = snakemake(trained, TARGET, *ARGS, "-n", snakefile=copy / "Snakefile")
    assert "Nothing to be done" in plan.stdout + plan.stderr, plan.stdout


def test_refusals_reach_snakemakes_console_and_keep_earlier_logs(
    trained: Path, tmp_path: Path
) -> None:
    """A segment refused because a live trainer holds the run directory says so on snakemake's
    own console and leaves that trainer's log file alone; a damaged token cache is refused with
    the command that rebuilds it, and that command does."""
    work = copy_tree(trained, tmp_path / "work")
    log = work / "logs/mini/train_segment/1.log"
    earlier = log.read_text()
    (work / "results/mini/segments/1.json").unlink()
    (work / TARGET).unlink()
    fd = os.open(work / "results/mini/train/.lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as an orphaned trainer would hold it
    # the trainer waits runlock.LOCK_WAIT_S (30 s, idle) before it refuses: the damaged token
    # cache (below) is refused and rebuilt meanwhile, in a copy of its own
    damaged = copy_tree(trained, tmp_path / "damaged")
    exe = Path(sys.executable).parent / "snakemake"
    command = [str(exe), "--snakefile", str(ROOT / "Snakefile"), "--directory", str(work)]
    try:
        with open(tmp_path / "refused.txt", "w") as out:
            waiting = subprocess.Popen(
                [*command, TARGET, *ARGS, "--cores", "2"],
                cwd=work,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            rebuilt = damaged_cache_is_refused_then_rebuilt(damaged)
        finally:
            returncode = waiting.wait(timeout=600)
    finally:
        os.close(fd)
    assert returncode != 0
    console = (tmp_path / "refused.txt").read_text()
    assert re.search(
        r"^chesslm\.train\.segment: error: results/mini/train: another trainer \(pid \d+ on .*\)"
        r" still holds",
        console,
        re.MULTILINE,
    ), console[-4000:]
    assert "still holds" in log.read_text()
    # snakemake deleted the job's log before the attempt: the earlier attempt's file remains
    kept = [p.read_text() for p in (log.parent / "1.attempts").iterdir()]
    assert len(kept) == 2 and earlier in kept
    TokenCache(rebuilt, verify=True)


def damaged_cache_is_refused_then_rebuilt(work: Path) -> Path:
    """A flipped byte in the token cache: the probe is refused with the command that rebuilds
    the cache, which does (the caller verifies the cache it returns)."""
    cache = work / "results/datasets/mini/token-cache"
    data = bytearray((cache / "train.tokens.npy").read_bytes())
    data[-1] ^= 0x01
    (cache / "train.tokens.npy").write_bytes(data)
    refused = snakemake(work, TARGET, *ARGS, "--forcerun", "probe", "--cores", "2", check=False)
    assert refused.returncode != 0
    hint = re.search(r"rebuild it with: snakemake --cores 2 (\S+) --configfile train-workflow.yaml"
                     r" --forcerun token_cache", refused.stderr)  # fmt: skip
    assert hint and hint.group(1) == "results/datasets/mini/token-cache/cache.json", refused.stderr[
        -4000:
    ]
    snakemake(work, hint.group(1), *ARGS, "--forcerun", "token_cache", "--cores", "2")
    return cache


def test_play_evaluates_best_pt_once_and_its_report_items_build(
    trained: Path, staged_run: StagedRun
) -> None:
    """Rule play (chesslm/play) on the terminal run: real games against the ladder's anchors
    (rule ladder, built once), a finite Elo with a finite interval, tables, figures."""
    from chesslm.report.play_section import markdown_section

    target = "results/mini/play/move-match.json"
    first = staged_run.console("play")  # the stage that asked for the summary played
    for job in ("ladder", "play"):
        assert re.search(rf"^{job}\s+1$", first, re.M), first[-3000:]
    play = trained / "results/mini/play"
    match = json.loads((play / "move-match.json").read_text())["datasets"]["mini"]
    assert match["complete"] and match["games_evaluated"] == 8 and match["positions"] > 0
    elo = json.loads((play / "elo.json").read_text())
    assert [a["games"] for a in elo["anchors"]] == [2, 2, 2, 2]
    fit = elo["fit"]
    assert fit["bound"] is None and all(
        isinstance(fit[k], float) and math.isfinite(fit[k]) for k in ("elo", "low", "high")
    ), fit
    (ladder_file,) = (trained / "results/ladders").glob("mini-*/ladder.json")
    assert elo["ladder"]["file"] == str(ladder_file.relative_to(trained))
    assert json.loads(ladder_file.read_text())["key"] == elo["ladder"]["key"]
    assert (trained / "logs/ladders" / f"{ladder_file.parent.name}.log").exists()
    assert set(json.loads((play / "legality.json").read_text())["modes"]) == {
        "greedy",
        "temperature_1",
    }
    assert "### Elo against Stockfish" in markdown_section(play)
    again = snakemake(trained, target, *ARGS, "--cores", "1")
    assert "Nothing to be done" in again.stdout + again.stderr
    # the summary's report holds play's items (tests/workflow/test_report_browser.py draws them)
    assert "score against the ladder" in staged_run.report.read_text()


def test_a_second_runs_play_reuses_the_ladder_and_a_changed_setting_makes_a_new_one(
    trained: Path,
) -> None:
    """Run ``twin`` (mini's results, copied) plays the same ladder file: no second ladder job;
    a changed ladder setting is a new ladder path."""
    snakemake(trained, "results/mini/play/elo.json", *ARGS, "--cores", "2")
    (ladder_file,) = (trained / "results/ladders").glob("mini-*/ladder.json")
    built = ladder_file.stat().st_mtime_ns
    twin = _copy_run(trained, "twin")
    both = (*ARGS, "twin.yaml")
    # only play and ladder may run: twin's training is the copy above
    done = snakemake(trained, "results/twin/play/elo.json", *both, "--cores", "2",
                     "--allowed-rules", "play", "ladder")  # fmt: skip
    log = done.stdout + done.stderr
    assert re.search(r"^play\s+1$", log, re.M) and "rule ladder" not in log, log[-3000:]
    assert ladder_file.stat().st_mtime_ns == built
    elo = json.loads((twin / "play/elo.json").read_text())
    assert elo["ladder"]["file"] == str(ladder_file.relative_to(trained))
    (trained / "changed.yaml").write_text("ladders: {mini: {games_per_pair: 3}}\n")
    plan = snakemake(trained, "results/mini/play/elo.json", *ARGS, "changed.yaml", "-n").stdout
    new = re.findall(r"results/ladders/mini-[0-9a-f]{12}/ladder.json", plan)
    assert new and ladder_file.parent.name not in plan, plan[-3000:]


def _copy_run(trained: Path, name: str) -> Path:
    """Run ``name``: mini's results and best.pt copied, mini's settings (in ``NAME.yaml``)."""
    run = trained / "results" / name
    if run.exists():
        shutil.rmtree(run)
    (run / "train").mkdir(parents=True)
    shutil.copy2(trained / "results/mini/results.json", run / "results.json")
    shutil.copy2(trained / "results/mini/train/best.pt", run / "train/best.pt")
    mini = yaml.safe_load((trained / "train-workflow.yaml").read_text())["runs"]["mini"]
    (trained / f"{name}.yaml").write_text(yaml.safe_dump({"runs": {name: mini}}))
    return run


def test_forcerun_play_remeasures_every_part(trained: Path) -> None:
    """A finished play job keeps no work in progress, so ``--forcerun play`` after changing
    nothing plays every part afresh and finds the same numbers (a job stopped by its budget
    is resumed instead: tests/workflow/test_play_rule.py, in-process, as match.seconds >= 1
    here)."""
    run = _copy_run(trained, "again")
    target, log = "results/again/play/move-match.json", trained / "logs/again/play.log"
    args = (*ARGS, "again.yaml", "--cores", "2", "--allowed-rules", "play", "ladder")
    snakemake(trained, target, *args)
    record = json.loads((run / "play/move-match.json").read_text())["datasets"]["mini"]
    assert record["complete"] and not (run / "play/state").exists()
    snakemake(trained, target, *args, "--forcerun", "play")
    text = log.read_text()
    assert "resuming" not in text and "move-matching mini: 0/" in text, text[-3000:]
    assert "games against the ladder's anchors: 0/8 games (0%)" in text, text[-3000:]
    assert "games against the ladder's anchors: 8/8 games (100%); complete" in text
    again = json.loads((run / "play/move-match.json").read_text())["datasets"]["mini"]
    assert again["table"] == record["table"]  # the same numbers, measured again
