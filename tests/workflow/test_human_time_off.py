"""With ``time_inputs`` and ``think_time`` off, training is what it was before they existed, bit
for bit: two-rank gloo runs (padded, packed, and padded with the outcome head, whose loss path
they share) give the weights, the optimizer state, the validation checks and the run identity
(but its training-code hashes, which change with any edit) recorded from the commit before
them (fa88031), trained in the same session on the same machine (the ``recorded`` fixture:
``git archive fa88031`` into a temporary folder, this file copied to its ``tests/`` and run as
``python -m tests.test_human_time_off``, which prints the digests).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from tests.conftest import RESUME_HYPER, make_cache, train_ok
from tests.helpers import ROOT

# name -> (cache fixture, flags)
RUNS = {
    "padded": ("tiny_cache", ["--packing=off"]),
    "packed": ("tiny_cache", ["--packing=on", "--micro=1", "--accum=1", "--epochs=4"]),
    "outcome": ("outcome_cache", ["--packing=off", "--outcome=on", "--outcome-weight=0.5"]),
}

# the commit before the time settings existed: its code trains the same runs in this session,
# on this machine, as the reference (float results depend on the CPU: a digest recorded on one
# machine is no test on another)
BEFORE = "fa88031"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str]]:
    """digests() of each run trained by the code of BEFORE (its checkout made with git archive,
    this file run there as the module docstring says), on this machine."""
    known = subprocess.run(
        ["git", "-C", str(ROOT), "cat-file", "-e", f"{BEFORE}^{{commit}}"], capture_output=True
    )
    if known.returncode != 0:
        pytest.skip(f"commit {BEFORE} is not in this checkout's history (a clone without it)")
    before = tmp_path_factory.mktemp("before")
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", BEFORE], capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(before)], input=archive.stdout, check=True)
    shutil.copy(__file__, before / "tests/test_human_time_off.py")  # its tests/ had no rooms
    env = {**os.environ, "PYTHONPATH": str(before)}
    done = subprocess.run(
        [sys.executable, "-m", "tests.test_human_time_off"],
        cwd=before, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(done.stdout)


def _tensors(value: object) -> list[torch.Tensor]:
    """Every tensor of a (nested) state dict, in key order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for k in sorted(value, key=str) for t in _tensors(value[k])]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def _digest(tensors: list[torch.Tensor]) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(str((t.dtype, tuple(t.shape))).encode())
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def digests(run_dir: Path) -> dict[str, str]:
    """sha256 of a finished run's last.pt weights and optimizer state, of its validation
    checks (without their timings) and of its identity (without the training-code hashes)."""
    from chesslm.model import checkpoint

    payload = checkpoint.load(run_dir / "train/last.pt")
    history = json.loads((run_dir / "train/results.json").read_text())["history"]
    checks = [{k: v for k, v in h["validation"].items() if k != "seconds"} for h in history]
    identity = {k: v for k, v in payload["identity"].items() if k != "training_code"}
    text = lambda value: hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()  # noqa: E731
    return {
        "model": _digest(_tensors(payload["model"])),
        "optimizer": _digest(_tensors(payload["optimizer"])),
        "validation": text(checks),
        "identity": text(identity),
    }


def cache_of(fixture: str, directory: Path) -> Path:
    """The conftest cache a run trains on, built as its session fixture builds it."""
    options = {"tiny_cache": {}, "outcome_cache": {"results": True}}[fixture]
    return make_cache(directory, n_train=24, n_val=6, **options)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(RUNS))
def test_training_without_the_time_settings_is_the_commit_before_bit_for_bit(
    name: str, tmp_path: Path, request: pytest.FixtureRequest, recorded: dict
) -> None:
    fixture, flags = RUNS[name]
    train_ok(request.getfixturevalue(fixture), tmp_path, 0, *RESUME_HYPER, *flags)
    assert digests(tmp_path) == recorded[name]


if __name__ == "__main__":  # in a checkout of the commit before: the ``recorded`` fixture
    out = {}
    for name, (fixture, flags) in RUNS.items():
        scratch = Path(tempfile.mkdtemp())
        train_ok(cache_of(fixture, scratch / "cache"), scratch / "run", 0, *RESUME_HYPER, *flags)
        out[name] = digests(scratch / "run")
    json.dump(out, sys.stdout, indent=4)
