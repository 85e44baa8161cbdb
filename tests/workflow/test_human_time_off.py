"""With ``time_inputs`` and ``think_time`` off, training is what it was before they existed, bit
for bit: two-rank gloo runs (padded, packed, and padded with the outcome head, whose loss path
they share) give the weights, the optimizer state, the validation checks and the run identity
(but its training-code hashes, which change with any edit) recorded from the commit before
them (fa88031).

To record again (only if the numerics are meant to change): ``git archive <commit> | tar -x
-C /tmp/before``, copy this file to /tmp/before/tests/ and run
``cd /tmp/before && PYTHONPATH=/tmp/before python -m tests.workflow.test_human_time_off``.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from tests.conftest import RESUME_HYPER, make_cache, train_ok

# name -> (cache fixture, flags)
RUNS = {
    "padded": ("tiny_cache", ["--packing=off"]),
    "packed": ("tiny_cache", ["--packing=on", "--micro=1", "--accum=1", "--epochs=4"]),
    "outcome": ("outcome_cache", ["--packing=off", "--outcome=on", "--outcome-weight=0.5"]),
}

# digests() of each run at fa88031 (the module docstring says how they were recorded)
RECORDED = {
    "padded": {
        "model": "6a190759439570c728bde476cb7b62e4e24776ab21f25fd21b69e99fea69d602",
        "optimizer": "7aa4d20c46018be7abe24247e51b25d12e30bf3baf8add6645306fdd1f27af99",
        "validation": "1aebf028c9a02fe685a91ade6972f1a468a224c5700735525c4bfda324a94886",
        "identity": "e3ab9a4c636f3f8610a08b78bda3b84cfccec9ce2f057dd56765aee3a3c7627b",
    },
    "packed": {
        "model": "00f6541f2fbad770a6efb94977f6218cdd3f8b3de178503823c36f3536e73a15",
        "optimizer": "580aac3af3b5b507c77e9dd5ec5cbc0c81ad06502d2bf79215643c506b05055d",
        "validation": "4ec8c0b963083789d1ab64491df682af04e64b5d977c755a3e8dfd6a03825d2f",
        "identity": "8ac81d32e01b15467e4bad7a30ee5e46687c71b2350d3b97a197c712a864b160",
    },
    "outcome": {
        "model": "46ae00e5bd54f666b32b9f9771982eb228b04da16162f12dd079831713cdfd0e",
        "optimizer": "8476a06f4d8052efe10b9a74eb17a82bda9456b3091970f1db260b7a69509cd4",
        "validation": "ccfca50d6a7adee50415940ab6201fd724d858ada915f874f1238a2b15745432",
        "identity": "8b00899d7b649b777961ccedb926f02f41cc5f336f1d4d649ddcf81b35d02cb2",
    },
}


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
    name: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    fixture, flags = RUNS[name]
    train_ok(request.getfixturevalue(fixture), tmp_path, 0, *RESUME_HYPER, *flags)
    assert digests(tmp_path) == RECORDED[name]


if __name__ == "__main__":  # record: run from a checkout of the commit before (see above)
    out = {}
    for name, (fixture, flags) in RUNS.items():
        scratch = Path(tempfile.mkdtemp())
        train_ok(cache_of(fixture, scratch / "cache"), scratch / "run", 0, *RESUME_HYPER, *flags)
        out[name] = digests(scratch / "run")
    json.dump(out, sys.stdout, indent=4)
