"""Faults of the machine under real processes: a full disk, a file-size limit, and the
throughput records of a segment's last update."""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from chesslm.data import convert
from chesslm.train.segment import ERROR_PREFIX
from tests.conftest import ROOT, run_segment
from tests.helpers import SAMPLE

pytestmark = pytest.mark.slow
HYPER = ["--model=tiny", "--micro=2", "--accum=2", "--seed=7", "--threads=1"]


def train_args(cache: Path, run_dir: Path, *extra: str) -> list[str]:
    return [
        "train",
        f"--cache={cache}",
        f"--run-dir={run_dir}",
        "--dataset=tiny",
        "--segment=0",
        f"--status-out={run_dir}/segments/0.json",
        *HYPER,
        *extra,
    ]


def test_the_last_update_of_a_segment_is_timed_like_the_others(
    tiny_cache: Path, tmp_path: Path
) -> None:
    """The segment stops after update 10 and reads it back at once; on the CPU its time is
    its own computation, not the ~0 s between two read-backs (which gave 1e8 targets/s)."""
    run_dir = tmp_path / "run"
    result = run_segment(
        train_args(tiny_cache, run_dir, "--epochs=2", "--max-updates=10")
        + ["--validation-every-steps=10"],
        workers=1,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = (run_dir / "train/events.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in lines]
    last = next(e for e in events if e["stage"] == "train" and e["step"] == 10)
    check = next(e for e in events if e["stage"] == "validation" and e["step"] == 10)
    window = check["useful_targets_per_second"]  # updates 7-10 together
    assert window / 3 < last["useful_targets_per_second"] < window * 3, (last, check)


def limited(nbytes: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))

    return apply


def test_a_checkpoint_over_the_file_size_limit_is_named_in_one_line(
    tiny_cache: Path, tmp_path: Path
) -> None:
    """RLIMIT_FSIZE (no root needed): torch reports it as 'unexpected pos'; the trainer must
    name last.pt and the limit, and leave no temporary."""
    run_dir = tmp_path / "run"
    command = [sys.executable, "-m", "chesslm.train.segment"]
    command += train_args(tiny_cache, run_dir, "--epochs=1", "--validation-every-steps=1")
    result = subprocess.run(
        [*command, "--workers=1"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        preexec_fn=limited(300_000),  # the tiny model's checkpoint is ~700 kB
        timeout=300,
    )
    assert result.returncode == 1, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith(ERROR_PREFIX)]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert lines[0].startswith(f"{ERROR_PREFIX} {run_dir}/train/last.pt: file too large"), lines
    assert "ulimit -f" in lines[0]
    assert not list((run_dir / "train").glob("*.tmp"))


@pytest.fixture
def small_disk(tmp_path: Path):
    """A tmpfs with 64 kB free: a real ENOSPC (needs mount rights, e.g. root in CI)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        free = os.statvfs(mount).f_bavail * os.statvfs(mount).f_frsize
        (mount / "filler").write_bytes(b"\0" * (free - 64 * 1024))
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_during_the_token_cache_names_the_file(
    tmp_path: Path, small_disk: Path
) -> None:
    """NumPy reports ENOSPC as 'N requested and M written'; the step must say which file and
    that the disk is full, in one line (as the token_cache rule's adapter runs it)."""
    code = """
import sys
from pathlib import Path
import numpy as np
from chesslm import logs
from chesslm.data import cache, gamearrays

games = [np.arange(2, 60, dtype=np.uint8) % 64 for _ in range(4000)]
shards = Path(sys.argv[1])
for split in ("train", "validation"):
    part = games if split == "train" else []
    gamearrays.save(shards / split, gamearrays.pack(part, [f"g{i}" for i in range(len(part))]))
with logs.step("token_cache", None):
    cache.build(Path(sys.argv[2]) / "token-cache", {"train": [shards / "train"],
                "validation": [shards / "validation"]}, meta={})
"""
    (tmp_path / "shards").mkdir()
    result = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "shards"), str(small_disk)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert result.returncode == 1, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr[-3000:]
    where = rf"{re.escape(str(small_disk))}/\.token-cache\.\d+\.[0-9a-f]+\.tmp/train\.tokens\.npy"
    assert re.search(rf"token_cache failed: {where}: disk full", lines[0]), lines


@pytest.mark.parametrize("workers", [1, 2])
def test_a_full_disk_during_convert_names_the_file_and_leaves_nothing(
    small_disk: Path, workers: int
) -> None:
    """Whether the main process (shards) or a worker (its spooled chunk) meets the full disk,
    the error names the file in one line, and nothing that looks complete is left."""
    out = small_disk / "ds"
    with pytest.raises(OSError) as error:
        convert.convert([SAMPLE, SAMPLE], out, convert.Settings(), workers=workers)
    text = str(error.value)
    assert re.match(rf"{out}/\.convert\.\d+\.\w+\.tmp/", text) and "\n" not in text, text
    assert "No space left on device" in text, text
    assert not out.exists() or not any(out.iterdir())
