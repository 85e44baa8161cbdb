"""The JSON records the plan reads (issue 63 item 1): a damaged segment status and a damaged
token-cache ``cache.json`` end in one line naming the file and a way out that works, by real
snakemake on copies of the staged run; no good ``results.json`` is lost on the way."""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path

import pytest

from chesslm.data.cache import TokenCache
from chesslm.train import status
from tests.conftest import STAGED_ARGS, StagedRun
from tests.helpers import snakemake

RESULTS = "results/mini/results.json"
CACHE = Path("results/datasets/mini/token-cache")


def last_line(text: str) -> str:
    return [line for line in text.splitlines() if line.strip()][-1]


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])


def empty(path: Path) -> None:
    path.write_bytes(b"")


def edit_terminal(path: Path) -> None:
    """Valid JSON still, one value changed (the last segment no longer terminal)."""
    path.write_text(path.read_text().replace('"terminal": true', '"terminal": false'))


@pytest.mark.slow
@pytest.mark.parametrize(
    "damage", [truncate, empty, edit_terminal], ids=["truncated", "emptied", "edited"]
)
def test_a_damaged_segment_status_is_one_line_and_its_way_out_restores_it(
    staged_run: StagedRun, tmp_path: Path, damage
) -> None:
    """The plan refuses the status in one line before any job runs (the results job would
    remove the good results.json first); the command it gives brings the run back, the
    status restored from the trainer's copy, nothing trained."""
    wf = staged_run.copy(tmp_path / "wf")
    path = wf / "results/mini/segments/1.json"
    good, results = path.read_bytes(), (wf / RESULTS).read_bytes()
    last_pt = (wf / "results/mini/train/last.pt").read_bytes()
    damage(path)
    done = snakemake(wf, RESULTS, "--cores", "2", *STAGED_ARGS, check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    line = last_line(done.stderr)
    assert line.startswith("results/mini/segments/1.json: "), done.stderr
    assert "Traceback" not in done.stderr and "Exception" not in done.stderr, done.stderr
    assert (wf / RESULTS).read_bytes() == results  # nothing removed
    steps = line.split(" is intact: ", 1)[1].split(", then the same command again")[0]
    remove, command = (shlex.split(part) for part in steps.split(" && "))
    assert remove == ["rm", "results/mini/segments/1.json"], line
    assert command[:4] == ["snakemake", "--cores", "2", "results/mini/segments/1.json"], line
    assert command[4:] == list(STAGED_ARGS), line  # the invocation's config files
    (wf / remove[1]).unlink()
    for args in (command[1:], [RESULTS, "--cores", "2", *STAGED_ARGS]):
        again = snakemake(wf, *args, check=False)
        assert again.returncode == 0, again.stdout + again.stderr
    assert path.read_bytes() == good
    assert (wf / "results/mini/train/last.pt").read_bytes() == last_pt  # nothing trained
    assert (wf / RESULTS).read_bytes() == results


def test_a_damaged_status_without_its_copy_names_both_files_to_remove(tmp_path: Path) -> None:
    """A run from before the trainer's copies, or with the copy damaged too: the way out
    removes what is there, and the segment goes on from last.pt."""
    path = tmp_path / "segments" / "2.json"
    path.parent.mkdir()
    path.write_text('{"terminal": tr')
    with pytest.raises(ValueError, match=r"2\.json: not readable JSON .*; rm \S+2\.json && snake"):
        status.planned(path)
    status.kept_copy(path).write_text("")
    with pytest.raises(ValueError, match=r"; rm \S+/2\.json \S+/\.2\.json\.kept && snakemake"):
        status.planned(path)
    status.kept_copy(path).write_text('{"terminal": true}')
    path.write_text('{"terminal": true}')
    assert status.planned(path) == {"terminal": True}


@pytest.mark.slow
def test_a_truncated_cache_json_plans_its_rebuild_and_the_rebuild_works(
    staged_run: StagedRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's plan reads the cache's cache.json (its legality games): truncated, the plan
    still plans, the cache's readers name the rebuild command, and that command rebuilds it."""
    wf = staged_run.copy(tmp_path / "wf")
    meta = wf / CACHE / "cache.json"
    good = meta.read_bytes()
    truncate(meta)
    plan = snakemake(wf, RESULTS, "--cores", "2", *STAGED_ARGS, "-n", check=False)
    assert plan.returncode == 0, plan.stdout + plan.stderr
    monkeypatch.chdir(wf)  # a reader's paths as a job's are: relative to the workflow
    with pytest.raises(ValueError, match="not a readable token cache") as refusal:
        TokenCache(CACHE)
    command = str(refusal.value).split("rebuild it with: ", 1)[1]
    words = shlex.split(command)
    assert words[:3] == ["snakemake", "--cores", "2"] and "--forcerun" in words, command
    rebuilt = snakemake(wf, *words[1:], *STAGED_ARGS, check=False)
    assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr
    assert meta.read_bytes() == good  # the same cache, built again
    TokenCache(CACHE, verify=True)


@pytest.mark.slow
def test_a_damaged_best_pt_is_refused_at_plan_time_and_play_keeps_its_records(
    staged_run: StagedRun, tmp_path: Path
) -> None:
    """best.pt is an input of play (and score, analyse, export), verified when the plan reads
    it: ``--forcerun play`` on a damaged one is one line before Snakemake removes play's good
    records (it did, issue 63 item 4); the way out restores best.pt; a replaced best.pt makes
    its readers run again."""
    wf = staged_run.copy(tmp_path / "wf")
    best = wf / "results/mini/train/best.pt"
    records = {p: p.read_bytes() for p in (wf / "results/mini/play").glob("*.json")}
    assert records
    good, stat = best.read_bytes(), best.stat()
    data = bytearray(good)
    data[len(data) // 2] ^= 0x01
    best.write_bytes(bytes(data))
    summary = "results/mini/report/summary.md"
    done = snakemake(wf, summary, "--cores", "2", *STAGED_ARGS, "--forcerun", "play", check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    line = last_line(done.stderr)
    assert line.startswith("results/mini/train/best.pt: corrupt checkpoint: "), done.stderr
    assert "Traceback" not in done.stderr and "Exception" not in done.stderr, done.stderr
    assert {p: p.read_bytes() for p in records} == records  # nothing removed
    if " is intact " in line:  # the best step was the last: last.pt holds the same bytes
        copy = shlex.split(line.rsplit(": ", 1)[1])
        assert copy[:2] == ["cp", "-p"], line
        shutil.copy2(wf / copy[2], wf / copy[3])  # as cp -p: its time kept
        assert best.read_bytes() == good
    else:
        assert "no intact copy is kept" in line and "rm -r results/mini && snakemake" in line
        best.write_bytes(good)
        os.utime(best, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    plan = snakemake(wf, summary, "--cores", "2", *STAGED_ARGS, "-n")
    assert "rule play:" not in plan.stdout, plan.stdout  # the old mtime: nothing to redo
    os.utime(best)  # replaced: newer than play's records
    plan = snakemake(wf, summary, "--cores", "2", *STAGED_ARGS, "-n")
    assert "rule play:" in plan.stdout, plan.stdout
