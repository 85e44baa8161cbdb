"""A job that is sent SIGTERM (snakemake's stop, a scheduler's, a user's ``kill``) unwinds:
each atomic write in progress removes its temporary (``files.unwind_on_sigterm``, installed by
``watch.guard`` in every workflow script and by each command's ``main``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

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
