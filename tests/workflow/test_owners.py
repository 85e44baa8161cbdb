"""One owner per output folder (chesslm/owner.py), through real snakemake on the staged tiny
run: two snakemakes start one job at once (both with --nolock, or a plain one and one with
--nolock) for rules play, score and export. The second's job waits for the first's, then
refuses in one line naming the holder's pid and writes nothing; both snakemakes exit 0 and the
outputs are complete and equal to an unbroken run's. (The second job used to fail on the
first's removed state folder, and its snakemake then removed the outputs the first had
written.)

The first job is stopped (SIGSTOP) from the moment it holds its folder's lock until the
second job says it waits: on a loaded machine the first could otherwise end before the second
snakemake has planned."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import STAGED_ARGS, StagedRun, copy_tree
from tests.helpers import ROOT, descendants, snakemake

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process tree: Linux /proc"),
]
RUN = Path("results/mini")
WAITING = "waiting for it to end"  # the second job's notice, once it found the lock held
# rule -> (its target, its folder's lock, the outputs an unbroken run writes alike, byte for
# byte: play's Elo games meet Stockfish at UCI_Elo, which is unseeded; records carry seconds)
RULES = {
    "play": (
        RUN / "play/move-match.json",
        RUN / ".play.lock",
        ["move-match.csv", "legality.csv", "counterfactual.csv", "counterfactual.json"],
    ),
    "score": (RUN / "scores/mini/scores.json", RUN / "scores/.mini.lock", ["positions.npz"]),
    "export": (
        RUN / "export/model.safetensors",
        RUN / ".export.lock",
        ["model.safetensors", "config.json", "chess-tokenizer.json", "README.md", "SHA256SUMS"],
    ),
}
MODES = {"both-nolock": ("--nolock", "--nolock"), "plain-then-nolock": ("", "--nolock")}
# the races run: play (the rule of the original failure, the most state) in both modes, score
# and export in one each, so that every rule's lock and every mode is raced; the owner's code is
# one (chesslm/owner.py) and the mode only changes Snakemake's own lock, not the job's, so the
# two other pairs repeated these paths (about 18 s of the suite on 2 cores)
RACES = [("play", "both-nolock"), ("play", "plain-then-nolock"), ("score", "plain-then-nolock"),
         ("export", "both-nolock")]  # fmt: skip


def start(work: Path, rule: str, flag: str, console: Path) -> subprocess.Popen:
    exe = Path(sys.executable).parent / "snakemake"
    target = str(RULES[rule][0])
    command = [str(exe), "--snakefile", str(ROOT / "Snakefile"), "--directory", str(work)]
    command += [target, "--forcerun", rule, *STAGED_ARGS, "--cores", "2", *filter(None, [flag])]
    with open(console, "w") as out:
        return subprocess.Popen(
            command,
            cwd=work,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def holder_of(lock: Path, first: subprocess.Popen, console: Path) -> int:
    """The first job's pid, once it holds ``lock`` (it writes its pid only then)."""
    give_up = time.monotonic() + 300
    while not (lock.exists() and (words := lock.read_text().split())):
        assert first.poll() is None, console.read_text()[-4000:]
        assert time.monotonic() < give_up, f"no job took {lock}"
        time.sleep(0.05)
    pid = int(words[0])
    assert pid in descendants(first.pid), (pid, console.read_text()[-4000:])
    return pid


@pytest.fixture(scope="module")
def scored(staged_run: StagedRun, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The staged run with an unbroken score (not part of the staged run), kept aside."""
    unbroken = staged_run.copy(tmp_path_factory.mktemp("scored") / "work")
    snakemake(unbroken, str(RULES["score"][0]), *STAGED_ARGS, "--cores", "2")
    return unbroken


@pytest.mark.parametrize(("rule", "mode"), RACES, ids=[f"{r}-{m}" for r, m in RACES])
def test_two_snakemakes_run_one_job_once(
    tmp_path: Path, staged_run: StagedRun, request: pytest.FixtureRequest, rule: str, mode: str
) -> None:
    target, lock, same = RULES[rule]
    # score races on a copy of the scored run: its outputs are there, as a rerun finds them
    unbroken = request.getfixturevalue("scored") if rule == "score" else staged_run.workdir
    work = copy_tree(unbroken, tmp_path / "work")
    (work / lock).unlink(missing_ok=True)  # the staged run's: the first job writes a new one
    consoles = [tmp_path / "first.txt", tmp_path / "second.txt"]
    first = start(work, rule, MODES[mode][0], consoles[0])
    holder = holder_of(work / lock, first, consoles[0])
    os.kill(holder, signal.SIGSTOP)
    try:
        second = start(work, rule, MODES[mode][1], consoles[1])
        give_up = time.monotonic() + 300
        while WAITING not in consoles[1].read_text():
            assert second.poll() is None, consoles[1].read_text()[-4000:]
            assert time.monotonic() < give_up, "the second job never waited"
            time.sleep(0.05)
    finally:
        os.kill(holder, signal.SIGCONT)
    assert first.wait(timeout=600) == 0, consoles[0].read_text()[-4000:]
    assert second.wait(timeout=600) == 0, consoles[1].read_text()[-4000:]
    text = consoles[1].read_text()
    refused = [line for line in text.splitlines() if "refused:" in line]
    assert len(refused) == 1 and f"pid {holder} " in refused[0], text[-4000:]
    assert "nothing written" in refused[0] and "Removing output files" not in text
    assert "refused:" not in consoles[0].read_text()
    folder = work / target.parent
    for name in same:
        mine, theirs = folder / name, unbroken / target.parent / name
        assert mine.read_bytes() == theirs.read_bytes(), name
    # every output of the rule is there (snakemake checked it for both, -n confirms)
    plan = snakemake(work, str(target), *STAGED_ARGS, "-n")
    assert "Nothing to be done" in plan.stdout + plan.stderr, plan.stdout[-3000:]
    assert not list((work / "results").rglob("*.tmp"))


OWNED = ("play", "outcome_figures", "score", "ladder", "analyse", "compare", "export", "summarise")


def test_every_rule_that_keeps_state_under_a_folder_holds_its_lock() -> None:
    """Each of these rules' scripts enters ``owner.owning`` with its log, before its work (the
    races above exercise play, score and export; the others take the same line)."""
    for rule in OWNED:
        text = (ROOT / "workflow/scripts" / f"{rule}.py").read_text()
        assert "owner.owning(" in text and f'"{rule}", log)' in text, rule
