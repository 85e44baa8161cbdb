"""Every job dies with its snakemake (chesslm.watch): snakemake killed alone (SIGKILL to its
pid, not its group) while ladder, play, score or export runs, in a copy of the staged run
(tests/conftest.py). Within 3 s no process of the job is left (the script, Stockfish), nothing
in the folder is written after the kill, and README's recovery at once (``--unlock``, then the
same command with ``--rerun-incomplete``) gives what an unbroken run gives: the records that
are deterministic compared (for play and the ladder: the games between replayable anchors).
The trainer rules' kill is tests/workflow/test_recovery.py's."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from chesslm import watch
from tests import forked
from tests.conftest import StagedRun
from tests.helpers import ROOT, alive, descendants, snakemake
from tests.workflow.test_recovery import command_line, working_in

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process tree: Linux /proc"),
]
ARGS = ("--configfile", "train-workflow.yaml", "--cores", "2")
STOP_S = 3.0
# a job's watcher wakes as snakemake's parent does, when it has exited (its memory freed
# first); a write within this of that moment is one the job made before it could know
REACT_S = 0.05
TRIALS: list[dict] = []  # each trial's outcome, for a driver that repeats them
# keys of a record that differ run to run: timings (any key with "seconds" in it)
# timings, and the seal over them (chesslm.seal)
TIMING = re.compile(r"seconds|^host$|^record_sha256$")


@dataclass(frozen=True)
class Stage:
    target: str  # a glob in the run's folder
    started: str  # "stockfish": one runs below the job; else a path: the job's log is there


STAGES = {
    "ladder": Stage("results/ladders/mini-*/ladder.json", "stockfish"),
    "play": Stage("results/mini/play/elo.json", "stockfish"),  # written after the Elo games
    "score": Stage("results/mini/scores/mini/positions.npz", "logs/mini/score/mini.log"),
    "export": Stage("results/mini/export/model.safetensors", "logs/mini/export.log"),
}


class Snakemake:
    """A snakemake command running in a fork (tests/forked.py): a real process."""

    def __init__(self, work: Path, *args: str) -> None:
        command = ["--snakefile", str(ROOT / "Snakefile"), "--directory", str(work), *args]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.pid, self._wait = forked.start("snakemake", command, cwd=work, env=env)
        self.returncode: int | None = None

    def wait(self) -> int:
        if self.returncode is None:
            self.returncode = self._wait()
        return self.returncode


def job_started(main: Snakemake, work: Path, started: str, timeout: float = 120) -> dict:
    """Once the job runs: snakemake's process tree, pid -> command line."""
    give_up = time.monotonic() + timeout
    while True:
        tree = {pid: command_line(pid) for pid in descendants(main.pid)}
        if started == "stockfish":  # the job's, not the one snakemake asks for its build
            if any("stockfish" in line and _job(p) for p, line in tree.items()):
                return tree
        elif (work / started).exists():
            return tree
        assert alive(main.pid), f"snakemake ended before the job's {started} appeared"
        assert time.monotonic() < give_up, f"no {started} after {timeout} s"
        time.sleep(0.02)


def _job(pid: int) -> bool:
    """``pid``'s parent is a job's script (snakemake's copy of it)."""
    return any(".snakemake/scripts/" in command_line(p) for p in watch.ancestors(pid)[:1])


def written_after(work: Path, when_ns: int) -> dict[str, float]:
    """Paths (files and folders: a rename changes its folder) changed after ``when_ns``, with
    how many ms after it."""
    late = {}
    for path in [work, *work.rglob("*")]:
        try:
            if (changed := path.lstat().st_mtime_ns) > when_ns:
                late[str(path.relative_to(work))] = (changed - when_ns) / 1e6
        except OSError:
            continue
    return late


def kill_mid_job(work: Path, stage: Stage, command: list[str]) -> dict:
    """snakemake started on ``command``, SIGKILLed alone once the job runs; what was left."""
    main = Snakemake(work, *command)
    try:
        tree = job_started(main, work, stage.started)
        exited = os.pidfd_open(main.pid)
        os.kill(main.pid, signal.SIGKILL)
        select.select([exited], [], [])  # snakemake has exited: its jobs' watchers wake now too
        dead_ns, dead = time.time_ns(), time.monotonic()
        os.close(exited)
        while (left := [p for p in {*tree, *working_in(work)} if alive(p)]) and (
            time.monotonic() - dead < STOP_S
        ):
            time.sleep(0.02)
        if left:
            time.sleep(1.0)  # a survivor's writes show by now
        return {
            "left": [command_line(pid) for pid in left],
            "gone_s": time.monotonic() - dead,
            "job": [line for line in tree.values() if ".snakemake/scripts/" in line],
            "stockfish": [line for line in tree.values() if "stockfish" in line],
            "written": written_after(work, dead_ns),
        }
    finally:
        for pid in [main.pid, *descendants(main.pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        main.wait()


@pytest.mark.parametrize("name", list(STAGES))
def test_snakemake_killed_alone_mid_job_leaves_nothing_running_and_recovers_at_once(
    staged_run: StagedRun, tmp_path: Path, name: str
) -> None:
    stage = STAGES[name]
    work = staged_run.copy(tmp_path / "work")
    if stage.started != "stockfish":
        (work / stage.started).unlink(missing_ok=True)
    (target,) = [str(p.relative_to(work)) for p in work.glob(stage.target)] or [stage.target]
    command = [target, *ARGS, "--forcerun", name]
    before = _mtime(work / target)
    left = kill_mid_job(work, stage, command)
    TRIALS.append({"stage": name, **left})
    assert left["job"], f"no {name} job ran when snakemake was killed"
    assert not left["left"], f"{STOP_S} s after the kill, the {name} job still ran: {left}"
    late = {path: ms for path, ms in left["written"].items() if ms > REACT_S * 1000}
    assert not late, f"written after snakemake was killed (ms after its end): {late}"
    assert _mtime(work / target) in (None, before), "the job had ended: the trial tested nothing"
    if stage.started == "stockfish":
        assert left["stockfish"], "no Stockfish ran when snakemake was killed"
    snakemake(work, target, *ARGS, "--unlock")
    snakemake(work, *command, "--rerun-incomplete")
    SAME[name](work, staged_run.workdir, tmp_path)


def _mtime(path: Path) -> int | None:
    return path.stat().st_mtime_ns if path.exists() else None


def _records(path: Path) -> object:
    def strip(value: object) -> object:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if not TIMING.search(k)}
        return [strip(v) for v in value] if isinstance(value, list) else value

    return strip(json.loads(path.read_text()))


def _same_ladder(work: Path, unbroken: Path, _: Path) -> None:
    (path,) = [p.relative_to(unbroken) for p in unbroken.glob(STAGES["ladder"].target)]
    mine, theirs = json.loads((work / path).read_text()), json.loads((unbroken / path).read_text())
    replayable = set(theirs["reproducible"]["replayable_anchors"])
    for key in ("key", "settings", "engine", "reproducible"):
        assert mine[key] == theirs[key], key

    def games(ladder: dict) -> list[dict]:
        kept = [g for g in ladder["games"] if {g["white"], g["black"]} <= replayable]
        return sorted(kept, key=lambda g: (g["white"], g["black"], g["moves"]))

    assert games(mine) and games(mine) == games(theirs)


def _same_play(work: Path, unbroken: Path, _: Path) -> None:
    play = Path("results/mini/play")
    for record in ("move-match.json", "legality.json", "move-match.csv", "legality.csv"):
        mine, theirs = work / play / record, unbroken / play / record
        if record.endswith(".json"):
            assert _records(mine) == _records(theirs), record
        else:
            assert mine.read_bytes() == theirs.read_bytes(), record
    replayable = set(_records(unbroken / play / "elo.json")["replayable_anchors"])

    def games(folder: Path) -> list[dict]:
        rows = csv.DictReader(io.StringIO((folder / play / "elo-games.csv").read_text()))
        return [row for row in rows if row["anchor"] in replayable]

    assert games(work) and games(work) == games(unbroken)


# The rule's job and this process score the same positions with the same batches but not the
# same torch threads (the job's threads: against the xdist worker's): a float32 matmul's sums
# then run in another order, which moves a log-probability in its last bits (seen: 4.8e-7 at
# 28 of 547 positions on one host, none on another). Integers and ranks stay exact.
SCORE_TOLERANCE = 1e-5


def _close(mine: object, theirs: object) -> bool:
    """JSON values equal, floats within SCORE_TOLERANCE."""
    if isinstance(mine, float) or isinstance(theirs, float):
        return abs(float(mine) - float(theirs)) <= SCORE_TOLERANCE  # type: ignore[arg-type]
    if isinstance(mine, dict) and isinstance(theirs, dict):
        return mine.keys() == theirs.keys() and all(_close(mine[k], theirs[k]) for k in mine)
    if isinstance(mine, list) and isinstance(theirs, list):
        return len(mine) == len(theirs) and all(map(_close, mine, theirs))
    return mine == theirs


def _same_array(mine: np.ndarray, theirs: np.ndarray) -> bool:
    if np.issubdtype(mine.dtype, np.floating):
        return mine.shape == theirs.shape and np.allclose(
            mine, theirs, rtol=0, atol=SCORE_TOLERANCE
        )
    return np.array_equal(mine, theirs)


def _same_score(work: Path, _: Path, tmp_path: Path) -> None:
    """The unbroken score: chesslm.compare.scores in this process, as rule score calls it
    (floats within SCORE_TOLERANCE, why above)."""
    from chesslm.compare import scores

    out = tmp_path / "unbroken-scores"
    run = Path("results/mini")
    with contextlib.chdir(work):  # the record names the paths as the rule gives them
        cache = Path("results/datasets/mini/token-cache")
        scores.score(run, "mini", "mini", cache, out, batch_tokens=8192, games=8)
        mine, theirs = np.load(run / "scores/mini/positions.npz"), np.load(out / "positions.npz")
        assert sorted(mine.files) == sorted(theirs.files)
        assert all(_same_array(mine[k], theirs[k]) for k in mine.files)
        records = [_records(p) for p in (run / "scores/mini/scores.json", out / "scores.json")]
        for record in records:  # the table's own sha256: equal only with equal floats
            assert isinstance(record, dict) and record.pop("positions_sha256")
        assert _close(*records)


def _same_export(work: Path, unbroken: Path, _: Path) -> None:
    """Every file byte for byte (equal weights give equal bytes: chesslm.export.gpt2)."""
    for path in (unbroken / "results/mini/export").iterdir():
        mine, theirs = (work / path.relative_to(unbroken)).read_bytes(), path.read_bytes()
        assert mine == theirs, path.name


SAME = {"ladder": _same_ladder, "play": _same_play, "score": _same_score, "export": _same_export}


def test_a_job_whose_snakemake_is_gone_before_it_starts_stops_with_one_line() -> None:
    """CHESSLM_WATCH_PID names a process that is not the job's ancestor: its snakemake ended
    before the job could watch it (and the pid may be another process's by now)."""
    other = subprocess.Popen(["sleep", "30"])
    try:
        code = "from chesslm import watch; watch.guard(); print('ran on')"
        env = {**os.environ, "PYTHONPATH": str(ROOT), watch.ENV: str(other.pid)}
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    finally:
        other.kill()
        other.wait()
    assert (done.returncode, done.stdout) == (1, "")
    assert re.fullmatch(
        rf"chesslm.watch: snakemake \(pid {other.pid}\) that started this job is gone:"
        r" job \d+ stops\n",
        done.stderr,
    ), done.stderr


def test_every_script_guards_its_job_first_and_every_shell_job_runs_guarded() -> None:
    """Before its slow imports (a job killed with snakemake during them must stop too)."""
    import ast

    for script in sorted((ROOT / "workflow/scripts").glob("*.py")):
        body = ast.parse(script.read_text()).body
        first = [ast.unparse(node) for node in body[1:3]]  # after the docstring
        assert first == ["from chesslm import watch", "watch.guard()"], script.name
    for rules in sorted((ROOT / "workflow/rules").glob("*.smk")):
        text = rules.read_text()
        shells = text.count("    shell:")
        assert shells == text.count('"{params.logged} '), f"{rules.name}: a shell: not LOGGED"
    common = (ROOT / "workflow/rules/common.smk").read_text()
    assert "-m chesslm.watch -- bash" in common
