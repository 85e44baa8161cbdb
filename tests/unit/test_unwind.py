"""A job that is sent SIGTERM (snakemake's stop, a scheduler's, a user's ``kill``) unwinds:
each atomic write in progress removes its temporary (``files.unwind_on_signals``, installed by
``watch.guard`` in every workflow script and by each command's ``main``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT

JOB = """
import sys, time
from chesslm import files, watch
watch.guard()
with files.open_atomic(sys.argv[1]) as fh:
    fh.write(b"half")
    print("writing", flush=True)
    time.sleep(120)
"""


def test_a_guarded_job_sent_sigterm_removes_its_temporary(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CHESSLM_WATCH_PID": str(os.getpid())}
    out = tmp_path / "out.bin"
    job = subprocess.Popen([sys.executable, "-c", JOB, str(out)], env=env, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    try:
        assert job.stdout.readline() == "writing\n", job.stderr.read()
        assert len(list(tmp_path.glob(".out.bin.*.tmp"))) == 1
        job.send_signal(signal.SIGTERM)
        job.wait(timeout=60)
    finally:
        job.kill()
    assert job.returncode == 128 + signal.SIGTERM, job.stderr.read()
    assert list(tmp_path.iterdir()) == []


LOST = """
import os, signal, sys
from chesslm import files
files.unwind_on_signals()

class Finalized:
    def __del__(self):  # the signal's handler runs here, and CPython swallows what it raises
        os.kill(os.getpid(), getattr(signal, sys.argv[1]))
        sum(range(10_000))

Finalized()
print("carried on", flush=True)
files.stop_if_signalled()
print("not stopped", flush=True)
"""


@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT"])
def test_a_signal_lost_in_a_finalizer_stops_the_next_unit_of_work(name: str) -> None:
    """CPython swallows an exception raised in ``__del__`` (a signal's, too): a long loop's
    ``stop_if_signalled`` raises it again, so a Ctrl-C or a kill is never lost."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    job = subprocess.run([sys.executable, "-c", LOST, name], env=env, text=True,
                         capture_output=True, timeout=60)  # fmt: skip
    assert job.stdout == "carried on\n", job.stdout + job.stderr
    assert "Exception ignored" in job.stderr  # the first raise was lost
    # an uncaught KeyboardInterrupt ends Python by SIGINT itself, as Ctrl-C would
    expected = 128 + signal.SIGTERM if name == "SIGTERM" else -signal.SIGINT
    assert job.returncode == expected, job.stderr
