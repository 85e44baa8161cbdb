"""The play benchmarks run on the CPU as BENCHMARKS.md shows them (on a smaller split), and
what they count is what the rule does: the same positions and real tokens whatever the
chunking, the rule's waits labelled in a profile."""

from __future__ import annotations

import doctest
import importlib.util
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from chesslm.match import matching
from chesslm.scorer import scoring
from tests.helpers import ROOT

SAMPLE = ROOT / "resources" / "lichess-sample.pgn.zst"


def run(script: str, *args: str) -> str:
    """The benchmark's standard output."""
    done = subprocess.run([sys.executable, f"benchmarks/{script}", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow
def test_padding_counts_the_same_real_tokens_and_windows_pad_less(tmp_path: Path) -> None:
    out = tmp_path / "padding.json"
    run("play_padding.py", "--pgn", str(SAMPLE), "--validation", "0.05", "--chunk-games", "16",
        "--windows", "1,4", "--json", str(out))  # fmt: skip
    record = json.loads(out.read_text())
    one, four = record["window_1"], record["window_4"]
    assert record["games"] > 64 and one["real_tokens"] == four["real_tokens"] > 0
    assert four["row_tokens"] < one["row_tokens"]
    assert one["rows_per_real"] == round(one["row_tokens"] / one["real_tokens"], 4)
    assert 1 <= four["own_layout_per_real"] <= four["rows_per_real"]


@pytest.mark.slow
def test_rule_speed_runs_the_part_and_the_scorer_on_the_same_positions(tmp_path: Path) -> None:
    out = tmp_path / "rule.json"
    printed = run("play_rule_speed.py", "--preset", "tiny", "--device", "cpu", "--threads", "2",
        "--pgn", str(SAMPLE), "--validation", "0.02", "--chunk-games", "16", "--window", "2",
        "--repeats", "1", "--profile", "--json", str(out))  # fmt: skip
    record = json.loads(out.read_text())
    summary, (row,) = record["summary"], record["runs"]
    assert summary["window"] == 2 and summary["positions"] > 0
    assert row["part_positions_per_s"] > 0 and row["scorer_positions_per_s"] > 0
    assert row["part_phases"]["batches"] >= summary["games_selected"] // 16
    waits = re.search(r"round 0's part: the rule's labelled waits (.*)", printed)
    assert set(json.loads(waits.group(1))) == {scoring.WAITED, matching.TABLES, matching.WRITE}


def test_the_device_idle_spans_of_a_profile() -> None:
    """``play_rule_speed``'s union of spans and their gaps (its doctests), and ``device_idle``
    on a real profile, the CPU's operations standing for a device's kernels (a CUDA profile
    needs a GPU): a 50 ms sleep between two operations is the longest idle span."""
    spec = importlib.util.spec_from_file_location(
        "play_rule_speed", ROOT / "benchmarks" / "play_rule_speed.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = doctest.testmod(module)
    assert result.attempted >= 2 and result.failed == 0
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for name in ("before", "after"):
            with torch.profiler.record_function(name):
                torch.ones(1000).cumsum(0)
            time.sleep(0.05 if name == "before" else 0)
    idle = module.device_idle(prof.events(), kind=torch.autograd.DeviceType.CPU)
    assert idle["span_ms"] >= 50 and idle["idle_ms"] >= 49
    assert 49 <= idle["longest_idle"][0]["ms"] <= idle["idle_ms"]
    assert idle["device_busy_ms"] < idle["span_ms"] - 49
