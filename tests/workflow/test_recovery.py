"""Kills and README's recovery through real snakemake, two gloo ranks: snakemake killed alone
(SIGKILL, not its group) mid-segment, a kill at the probe's moment, and `--forcerun probe` on an
unfinished run. Each must end at the terminal status with the weights and optimizer state of
the unbroken run (tests/conftest.py's ``staged_run``), bit for bit."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from chesslm.model import checkpoint
from chesslm.train.segment import ERROR_PREFIX
from tests import forked
from tests.conftest import StagedRun, copy_tree
from tests.helpers import ROOT, alive, descendants, snakemake

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process tree: Linux /proc"),
]
TARGET = "results/mini/results.json"
ARGS = ("--configfile", "train-workflow.yaml")
RUN = Path("results/mini")
STOP_S = 3.0  # a trainer whose snakemake is gone stops within this (and writes nothing after)


@pytest.fixture(scope="module")
def after_segment_0(staged_run: StagedRun) -> Path:
    """The mini run stopped after segment 0 of 2: data, probe and segment 0 done."""
    return staged_run.after_segment_0


@pytest.fixture(scope="module")
def unbroken(staged_run: StagedRun) -> Path:
    """The unbroken run's train/last.pt (the chain of tests/conftest.py's staged run)."""
    return staged_run.last_pt


def copy_of(template: Path, tmp_path: Path) -> Path:
    return copy_tree(template, tmp_path / "work")


class Forked:
    """snakemake on ``TARGET`` forked from a process that imported it (tests/forked.py; its
    imports were 2.3 CPU s a start), in a session of its own; Popen's ``pid``, ``poll`` and
    ``wait``. One at a time: the fork server waits for it before the next command."""

    def __init__(self, work: Path, console: Path | None = None) -> None:
        command = ["--snakefile", str(ROOT / "Snakefile"), "--directory", str(work)]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.pid, self._wait = forked.start(
            "snakemake", [*command, TARGET, *ARGS, "--cores", "2"], cwd=work, env=env,
            console=console, new_session=True,
        )  # fmt: skip
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            with contextlib.suppress(TimeoutError):
                self.returncode = self._wait(0)
        return self.returncode

    def wait(self, timeout: float = 900) -> int:
        if self.returncode is None:
            self.returncode = self._wait(timeout)
        return self.returncode


def start_snakemake(work: Path, *args: str, console: Path | None = None) -> subprocess.Popen:
    """snakemake on ``TARGET`` as its own process (two at once: the fork server runs one at a
    time); its stdout and stderr go to ``console`` (None: nowhere)."""
    exe = Path(sys.executable).parent / "snakemake"
    command = [str(exe), "--snakefile", str(ROOT / "Snakefile"), "--directory", str(work)]
    with open(console or os.devnull, "w") as out:  # the child keeps its own copy
        return subprocess.Popen(
            [*command, TARGET, *ARGS, "--cores", "2", *args],
            cwd=work,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # apart from pytest's group; killed alone all the same
        )


def wait_for(path: Path, process: Forked | subprocess.Popen, timeout: float = 240) -> None:
    give_up = time.monotonic() + timeout
    while not path.exists():
        assert process.poll() is None, f"snakemake ended before {path} appeared"
        assert time.monotonic() < give_up, f"no {path} after {timeout} s"
        time.sleep(0.05)


def recover(work: Path) -> subprocess.CompletedProcess[str]:
    """README's recovery: unlock, then the same command with --rerun-incomplete."""
    snakemake(work, TARGET, *ARGS, "--unlock")
    return snakemake(work, TARGET, *ARGS, "--cores", "2", "--rerun-incomplete")


def assert_equals_the_unbroken_run(work: Path, unbroken: Path) -> None:
    mine, theirs = checkpoint.load(work / RUN / "train/last.pt"), checkpoint.load(unbroken)
    assert mine["cursor"]["step"] == theirs["cursor"]["step"] == 6
    for key in ("model", "optimizer"):
        a, b = flat(mine[key]), flat(theirs[key])
        assert a.keys() == b.keys()
        assert all(torch.equal(a[k], b[k]) for k in a if torch.is_tensor(a[k])), key


def gone_within(seconds: float, tree: list[int], work: Path) -> str | None:
    """None once every process of the killed run has exited, within ``seconds``; else what
    still runs."""
    give_up = time.monotonic() + seconds
    while left := sorted({*(pid for pid in tree if alive(pid)), *working_in(work)}):
        if time.monotonic() > give_up:
            return "; ".join(command_line(pid) for pid in left)
        time.sleep(0.05)
    return None


def command_line(pid: int) -> str:
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return f"{pid} (gone)"
    return f"{pid}: {b' '.join(words).decode(errors='replace')[:200]}"


def working_in(work: Path) -> list[int]:
    """Live processes whose working directory is ``work`` (the jobs' shells, torchrun and its
    workers all run there, also those started after the tree was listed)."""
    found = []
    for cwd in Path("/proc").glob("[0-9]*/cwd"):
        try:
            if Path(os.readlink(cwd)) == work and alive(int(cwd.parent.name)):
                found.append(int(cwd.parent.name))
        except OSError:
            continue
    return found


def flat(tree: object, prefix: str = "") -> dict[str, object]:
    if isinstance(tree, dict):
        return {k: v for key, sub in tree.items() for k, v in flat(sub, f"{prefix}{key}.").items()}
    if isinstance(tree, (list, tuple)):
        return {k: v for i, sub in enumerate(tree) for k, v in flat(sub, f"{prefix}{i}.").items()}
    return {prefix: tree}


def ranks_started(snakemake_pid: int, _work: Path) -> bool:
    """Both ranks of the segment's torchrun exist (they are importing torch): the processes
    torchrun gave a LOCAL_RANK."""
    ranks = 0
    for pid in descendants(snakemake_pid):
        try:
            ranks += b"\0LOCAL_RANK=" in b"\0" + Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
    return ranks >= 2


def update_saved(_snakemake_pid: int, work: Path) -> bool:
    """Segment 1 has saved an update: last.pt is newer than segment 0's status (the copy kept
    both files' times; last.pt is replaced whole, so a newer one is segment 1's)."""
    status = (work / RUN / "segments/0.json").stat().st_mtime_ns
    return (work / RUN / "train/last.pt").stat().st_mtime_ns > status


# the moments of segment 1's job at which snakemake is killed: as its job starts (the shell,
# before torchrun), while its ranks start, and mid-training (an update saved, more to come);
# events rather than delays, so that a loaded machine kills at the same moments
MOMENTS = {"job": lambda pid, work: True, "ranks": ranks_started, "training": update_saved}


@pytest.mark.parametrize("moment", list(MOMENTS))
def test_snakemake_killed_alone_mid_segment_then_unlock_and_rerun_at_once(
    after_segment_0: Path, unbroken: Path, tmp_path: Path, moment: str
) -> None:
    """SIGKILL to snakemake's pid only, at ``moment`` of segment 1's job: its shell, torchrun
    and workers must stop by themselves (they watch snakemake), and the rerun at once must
    reach the terminal status within 60 s of the kill."""
    work = copy_of(after_segment_0, tmp_path)
    main = Forked(work)
    try:
        wait_for(work / "logs/mini/train_segment/1.log", main)
        give_up = time.monotonic() + 240
        while not MOMENTS[moment](main.pid, work):
            assert main.poll() is None, f"snakemake ended before the moment {moment!r}"
            assert time.monotonic() < give_up, f"no moment {moment!r} after 240 s"
            time.sleep(0.02)
        tree = descendants(main.pid)
        os.kill(main.pid, signal.SIGKILL)
        killed = time.monotonic()
        main.wait()
        left = gone_within(STOP_S, tree, work)
        recover(work)
        took = time.monotonic() - killed
    finally:
        for pid in descendants(main.pid):
            os.kill(pid, signal.SIGKILL)
    assert left is None, f"{STOP_S} s after the kill, the killed run still ran: {left}"
    assert took < 60, f"{took:.0f} s from the kill to the terminal status"
    assert (work / TARGET).exists()
    assert not [pid for pid in tree if alive(pid)], "a process of the killed run remains"
    assert not working_in(work), "a process still runs in the run's folder"
    assert_equals_the_unbroken_run(work, unbroken)


def test_a_kill_at_the_probes_moment_then_readmes_recovery_trains_to_the_end(
    after_segment_0: Path, unbroken: Path, tmp_path: Path
) -> None:
    """The group killed as the probe writes its output; `--unlock` and the same command with
    `--rerun-incomplete` must train to the terminal status in one invocation, not stop at
    "done" after the probe."""
    work = copy_of(after_segment_0, tmp_path)
    shutil.rmtree(work / RUN)  # the data stays
    main = Forked(work)
    wait_for(work / RUN / "probe-results.json", main)
    os.killpg(main.pid, signal.SIGKILL)
    main.wait()
    recover(work)
    assert (work / TARGET).exists() and (work / RUN / "segments/1.json").exists()
    assert_equals_the_unbroken_run(work, unbroken)


def test_a_damaged_last_pt_is_one_line_and_its_cp_restores_the_unbroken_run(
    after_segment_0: Path, unbroken: Path, tmp_path: Path
) -> None:
    """Issue 63 item 3: one flipped byte in segment 0's last.pt; segment 1 refuses in one
    line naming the segment-end copy and the cp -p that restores it; run as printed, the same
    command trains to the unbroken run's weights, nothing trained twice."""
    work = copy_of(after_segment_0, tmp_path)
    last = work / RUN / "train/last.pt"
    data = bytearray(last.read_bytes())
    data[len(data) // 2] ^= 0x01
    last.write_bytes(bytes(data))
    done = snakemake(work, TARGET, *ARGS, "--cores", "2", check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    console = done.stdout + done.stderr
    [line] = [line for line in console.splitlines() if line.startswith(ERROR_PREFIX)]
    assert f"{RUN}/train/last.pt: corrupt checkpoint: " in line, line
    command = line.split(" is intact: ", 1)[1].split(", then the same command again")[0]
    copy = shlex.split(command)
    assert copy == ["cp", "-p", f"{RUN}/train/segment-end.pt", f"{RUN}/train/last.pt"], line
    subprocess.run(copy, cwd=work, check=True)
    snakemake(work, TARGET, *ARGS, "--cores", "2")
    assert json.loads((work / RUN / "segments/1.json").read_text())["step_start"] == 3
    assert_equals_the_unbroken_run(work, unbroken)


def test_forcerun_probe_on_an_unfinished_run_goes_on_training(
    after_segment_0: Path, unbroken: Path, tmp_path: Path
) -> None:
    work = copy_of(after_segment_0, tmp_path)
    plan = snakemake(work, TARGET, *ARGS, "--forcerun", "probe", "-n")
    assert "probe" in plan.stdout, plan.stdout
    before = (work / RUN / "segments/0.json").read_text()
    snakemake(work, TARGET, *ARGS, "--cores", "2", "--forcerun", "probe")
    assert (work / RUN / "segments/0.json").read_text() == before  # not restarted
    assert (work / TARGET).exists()
    assert_equals_the_unbroken_run(work, unbroken)


def held(lock: Path) -> bool:
    """Whether a process holds ``lock`` (a shared try, released at once: a trainer that asks
    meanwhile retries within 0.2 s)."""
    try:
        fd = os.open(lock, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def lock_holder(lock: Path) -> int:
    """The pid a trainer wrote into the run's lock once it took it."""
    give_up = time.monotonic() + 30
    while not (words := lock.read_text().split()):
        assert time.monotonic() < give_up, f"{lock} held but no pid written"
        time.sleep(0.05)
    return int(words[0])


def segment_trainer_started(snakemake_pid: int) -> bool:
    """Whether a process below this snakemake runs `chesslm.train.segment train`."""
    for pid in descendants(snakemake_pid):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"chesslm.train.segment" in argv and b"train" in argv:
            return True
    return False


def test_two_snakemakes_with_nolock_train_the_run_once(
    after_segment_0: Path, unbroken: Path, tmp_path: Path
) -> None:
    """Two `snakemake --nolock` on one run, the second started while the first's trainer holds
    the run: the second's trainer refuses in one line (the segment trained meanwhile, or still
    held after 30 s) and writes nothing; the records and results.json are the first's.

    The first trainer's rank 0 is stopped (SIGSTOP) from the moment it holds the lock until
    the second's trainer has started: on a loaded machine the 3-update segment could otherwise
    end before the second snakemake has planned, which would then have nothing to train."""
    work = copy_of(after_segment_0, tmp_path)
    consoles = [tmp_path / "first.txt", tmp_path / "second.txt"]
    lock = work / RUN / "train/.lock"
    first = start_snakemake(work, "--nolock", console=consoles[0])
    give_up = time.monotonic() + 240
    while not held(lock):
        assert first.poll() is None and time.monotonic() < give_up, consoles[0].read_text()
        time.sleep(0.05)
    holder = lock_holder(lock)
    os.kill(holder, signal.SIGSTOP)
    try:
        second = start_snakemake(work, "--nolock", console=consoles[1])
        give_up = time.monotonic() + 240
        while not segment_trainer_started(second.pid):
            assert second.poll() is None, consoles[1].read_text()[-4000:]
            assert time.monotonic() < give_up, "the second snakemake started no trainer"
            time.sleep(0.05)
    finally:
        os.kill(holder, signal.SIGCONT)
    assert first.wait(timeout=600) == 0, consoles[0].read_text()[-4000:]
    second.wait(timeout=600)
    text = consoles[1].read_text()
    lines = [line for line in text.splitlines() if line.startswith("chesslm.train.segment: ")]
    assert len(lines) == 1, text[-4000:]
    assert "segment already trained by another trainer" in lines[0] or "still holds" in lines[0]
    segments = [json.loads((work / RUN / f"segments/{n}.json").read_text()) for n in (0, 1)]
    assert [s["updates"] for s in segments] == [3, 3], segments
    results = json.loads((work / RUN / "results.json").read_text())
    assert results["segments"] == segments and results["segment_count"] == 2
    assert_equals_the_unbroken_run(work, unbroken)
