"""chesslm.report.summary: tables checked against the records they came from, figures, bad input,
and one real ``snakemake`` + ``snakemake --report`` run of workflow/rules/report.smk."""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.figure import Figure

from chesslm import seal
from chesslm.figures import PAD_INCHES, notice_figure, save_svg
from chesslm.files import digest_json
from chesslm.record.elo import NOT_PLAYED
from chesslm.record.reader import RecordError
from chesslm.report import items, summary
from chesslm.train.state import TERMINAL

REPO = Path(__file__).resolve().parents[2]
T0 = 1_795_000_000.0  # a fixed time_unix origin
FINGERPRINT = "f" * 64


# --- a synthetic run with the seed's record shapes ---------------------------------------


def validation_metrics(step: int) -> dict:
    """The seed's evaluate() result, improving with the step."""
    nll = 4.6 * math.exp(-step / 150) + 1.4
    accuracy = 1 - nll / 6.5
    return {
        "nll": nll,
        "valid_targets": 48_213,
        "games": 512,
        "phase_accuracy": {
            "source": accuracy * 0.8,
            "destination": accuracy,
            "promotion": 0.97 + step / 1e5,
            "eos": 0.5 + step / 1e3,
        },
        "phase_counts": {"source": 15_900, "destination": 15_900, "promotion": 15_900, "eos": 513},
        "teacher_forced_triple_legality": min(0.99, 0.2 + step / 400),
        "raw_reserved_probability": 0.3 * math.exp(-step / 40),
        "raw_illegal_token_probability": 0.6 * math.exp(-step / 100),
        "legality_games": 64,
        "legality_targets": 6_011,
        "legality_subset": "N evenly spaced game indices across immutable validation shard order",
        "protocol": "raw128 teacher-forced next-token logits; not free-running",
        "seconds": 11.5 + step / 100,
    }


def write_jsonl(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def make_run(
    root: Path,
    run: str = "pilot",
    *,
    segments: tuple[tuple[int, int, str], ...] = (
        (0, 120, "time_budget"),
        (120, 240, "time_budget"),
        (240, 300, "early_stop_5_checks"),
    ),
    complete: bool = True,
    gpus: int = 2,
    wall_split: bool = True,
) -> Path:
    """results/{run}/ as training leaves it: events, telemetry, statuses, probe, results."""
    run_dir = root / "results" / run
    (run_dir / "segments").mkdir(parents=True)
    receipt_body = {"format": "chesslm-integrity-receipt-v1", "dataset_fingerprint": FINGERPRINT}
    receipt = {**receipt_body, "receipt_sha256": digest_json(receipt_body)}
    receipt_path = root / "results" / "datasets" / "sample" / "integrity-receipt.json"
    receipt_path.parent.mkdir(parents=True)
    receipt_path.write_text(json.dumps(receipt))
    identity = {
        "model": {"n_layer": 12},
        "parameters": 85_940_736,
        "world_size": 2,
        "dataset_fingerprint": FINGERPRINT,
        "seed": 2026,
        "microbatch": 8,
    }
    (run_dir / "train").mkdir()
    (run_dir / "train" / "identity.json").write_text(json.dumps(identity))
    events: list[dict] = []
    telemetry: list[dict] = []
    t = T0
    best, bad, best_step = float("inf"), 0, None
    for n, (first, last, status) in enumerate(segments):
        start = t
        events.append({"time_unix": t, "stage": "segment_start", "segment": n, "step": first})
        if n == 0:
            events.append(
                {
                    "time_unix": t + 1,
                    "stage": "data_validated",
                    "train_games": 9_000,
                    "validation_games": 512,
                    "train_targets": 1_234_567,
                    "test_evaluated": False,
                }
            )
            events.append(
                {"time_unix": t + 2, "stage": "initial_validation", **validation_metrics(0)}
            )
        for step in range(first + 10, last + 1, 10):
            t += 3.0
            events.append(
                {
                    "time_unix": t,
                    "stage": "train",
                    "epoch": 1 + step // 200,
                    "step": step,
                    "nll": 4.6 * math.exp(-step / 140) + 1.35,
                    "lr": 3e-4 * min(1, step / 30),
                    "gradient_norm_before_clip": 2.0 / (1 + step / 50),
                    "useful_targets_per_second": 70_000 + step,
                    "padded_tokens_per_second": 80_000 + step,
                    "padding_fraction": 0.125 - step / 1e5,
                    "gpu_work_wall_seconds": t - start,
                }
            )
            if step % 40 == 0 or step == last:
                metrics = validation_metrics(step)
                if metrics["nll"] < best - 1e-4:
                    best, bad, best_step = metrics["nll"], 0, step
                else:
                    bad += 1
                events.append(
                    {
                        "time_unix": t + 0.5,
                        "stage": "validation",
                        "epoch": 1 + step // 200,
                        "complete_epoch": step % 200 == 0,
                        "step": step,
                        "validation": metrics,
                        "train_nll": metrics["nll"] - 0.05,
                        "useful_targets_per_second": 71_000.0 + step,
                        "padded_tokens_per_second": 81_000.0 + step,
                        "padding_fraction": 0.12,
                        "best_nll": best,
                        "bad_checks": bad,
                    }
                )
        for second in range(int(start), int(t), 2):
            # nvidia-smi writes "[N/A]" for a value it cannot read.
            power = ["[N/A]" if g == 1 and second == int(start) else 400.5 + g for g in range(gpus)]
            lines = [
                f"{g}, {90 - g}, {60_000 + 10 * g + second % 7}, {power[g]}" for g in range(gpus)
            ]
            telemetry.append({"time_unix": float(second), "gpus": "\n".join(lines)})
        terminal = status in TERMINAL
        end = t + 2
        # status files from before the wall-time split lack these two keys
        split = {"startup": 4.0 + n, "validation": 2.0, "checkpointing": 1.0, "other": 0.5}
        split = {**split, "training": end - start - sum(split.values())}
        wall = {"wall_split": split, "useful_targets": 1500 * (last - first)}
        events.append({"time_unix": end, "stage": "segment_end", "segment": n, "status": status})
        (run_dir / "segments" / f"{n}.json").write_text(
            json.dumps(
                {
                    "run": run,
                    "segment": n,
                    "status": status,
                    "terminal": terminal,
                    "stop_reason": status,
                    "start_unix": start,
                    "end_unix": end,
                    "seconds": end - start,
                    "first_update_seconds": 4.0 + n,
                    "step_start": first,
                    "step_end": last,
                    "updates": last - first,
                    "cursor": {"epoch": last // 200, "next_group": last % 200, "step": last},
                    "best_step": best_step,
                    "best_validation_nll": best,
                    "bad_checks": bad,
                    "last_pt_sha256": hashlib.sha256(b"last.pt %d" % n).hexdigest(),
                    "world_size": 2,
                    "device": "cuda",
                }
                | (wall if wall_split else {})
            )
        )
        t = end + 30
    if gpus:
        write_jsonl(run_dir / "train" / "gpu-telemetry.jsonl", telemetry)
    probe = {
        "status": "passed",
        "parameters": 85_940_736,
        "gpu_work_wall_seconds": 21.0,
        "results": [
            {
                "microbatch_per_gpu": m,
                "sequence_length": 611,
                "timed_steps": 2,
                "step_seconds": [0.2 * m, 0.21 * m],
                "useful_targets_per_second": 12_000.0 * m,
                "padded_tokens_per_second": 12_500.0 * m,
                "memory": [
                    {"rank": r, "peak_allocated": m * 2**30 + r, "peak_reserved": m * 2**31 + r}
                    for r in range(2)
                ],
            }
            for m in (2, 8)
        ],
    }
    (run_dir / "probe-results.json").write_text(json.dumps(probe))
    if complete:
        status = segments[-1][2]
        events.append(
            {
                "time_unix": t,
                "stage": "finished",
                "status": status,
                "best_step": best_step,
                "best_nll": best,
            }
        )
        (run_dir / "results.json").write_text(
            json.dumps(
                {
                    "status": status,
                    "best_step": best_step,
                    "best_validation_nll": best,
                    "memory": [
                        {"rank": r, "peak_allocated": 30 * 2**30, "peak_reserved": 34 * 2**30}
                        for r in range(2)
                    ],
                    "totals": {"valid_targets": 1e7, "train_seconds": 140.0},
                    "test_evaluated": False,
                    "segments": [
                        json.loads((run_dir / "segments" / f"{n}.json").read_text())
                        for n in range(len(segments))
                    ],
                }
            )
        )
    write_jsonl(run_dir / "train" / "events.jsonl", events)
    return run_dir


def events_of(run_dir: Path, stage: str) -> list[dict]:
    lines = (run_dir / "train" / "events.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e.get("stage") == stage]


def summary_text(run_dir: Path, **options) -> str:
    """summary.md as ``summarise`` writes it, the figures left undrawn (they change no text)."""
    return summary.summarise(run_dir, figures=False, **options)["summary"].read_text()


def read_csv(paths: dict[str, Path], name: str) -> pd.DataFrame:
    return pd.read_csv(paths[name])


# --- tables against their records ------------------------------------------------------


@pytest.fixture(scope="module")
def complete_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path]]:
    """One complete three-segment run on two GPUs, summarised once (tests only read it)."""
    run_dir = make_run(tmp_path_factory.mktemp("complete"))
    return run_dir, summary.summarise(run_dir)


def test_writes_every_output_non_empty(complete_run):
    run_dir, paths = complete_run
    assert set(paths) == set(summary.OUTPUT_FILES)
    for name, path in paths.items():
        assert path.parent == run_dir / "report"
        assert path.stat().st_size > 0, name
    for name in ("nll_plot", "validation_plot", "throughput_plot", "gpu_plot", "segments_plot"):
        text = paths[name].read_text()
        assert text.startswith("<?xml") and "<svg" in text and "</svg>" in text


def test_validation_table_matches_events(complete_run):
    run_dir, paths = complete_run
    table = read_csv(paths, "validation")
    checks = events_of(run_dir, "validation")
    assert list(table["kind"]) == ["initial"] + ["check"] * len(checks)
    assert len(checks) == 8  # steps 40, 80, 120 | 160, 200, 240 | 280, 300
    initial = table.iloc[0]
    assert initial["step"] == 0
    assert initial["validation.nll"] == pytest.approx(validation_metrics(0)["nll"])
    rows = table[table["kind"] == "check"].reset_index(drop=True)
    for i, event in enumerate(checks):
        row = rows.iloc[i]
        assert row["step"] == event["step"]
        assert row["validation.nll"] == pytest.approx(event["validation"]["nll"], rel=1e-12)
        for phase, value in event["validation"]["phase_accuracy"].items():
            assert row[f"validation.phase_accuracy.{phase}"] == pytest.approx(value, rel=1e-12)
        for key in (
            "teacher_forced_triple_legality",
            "raw_reserved_probability",
            "raw_illegal_token_probability",
            "legality_targets",
            "seconds",
        ):
            assert row[f"validation.{key}"] == pytest.approx(event["validation"][key], rel=1e-12)
        for key in ("train_nll", "useful_targets_per_second", "best_nll", "bad_checks"):
            assert row[key] == pytest.approx(event[key], rel=1e-12)
    assert list(rows["segment"]) == [0, 0, 0, 1, 1, 1, 2, 2]
    assert "validation.protocol" not in table  # protocol text, not a metric


def test_train_table_matches_events(complete_run):
    run_dir, paths = complete_run
    table = read_csv(paths, "train_steps")
    events = events_of(run_dir, "train")
    assert len(table) == len(events) == 30
    assert list(table["step"]) == [e["step"] for e in events]
    for column in summary.TRAIN_FIELDS:
        assert table[column].tolist() == pytest.approx([e[column] for e in events], rel=1e-12)
    assert table.groupby("segment").size().tolist() == [12, 12, 6]


def test_segments_table_matches_status_files(complete_run):
    run_dir, paths = complete_run
    table = read_csv(paths, "segments")
    statuses = [json.loads((run_dir / "segments" / f"{n}.json").read_text()) for n in range(3)]
    assert len(table) == 3
    for column in (
        "segment",
        "status",
        "stop_reason",
        "start_unix",
        "end_unix",
        "seconds",
        "first_update_seconds",
        "step_start",
        "step_end",
        "updates",
        "last_pt_sha256",
    ):
        assert table[column].tolist() == [s[column] for s in statuses], column
    assert table["terminal"].tolist() == [False, False, True]


def test_telemetry_table_per_gpu(complete_run):
    run_dir, paths = complete_run
    table = read_csv(paths, "telemetry")
    records = [
        json.loads(line)
        for line in (run_dir / "train" / "gpu-telemetry.jsonl").read_text().splitlines()
    ]
    assert table["gpu"].tolist() == [0, 1]
    assert table["samples"].tolist() == [len(records)] * 2
    for gpu in (0, 1):
        memory = pd.Series([float(r["gpus"].splitlines()[gpu].split(",")[2]) for r in records])
        row = table.iloc[gpu]
        assert row["utilization_percent_mean"] == 90 - gpu
        assert row["power_W_max"] == row["power_W_mean"] == pytest.approx(400.5 + gpu)  # not N/A
        assert row["memory_used_MiB_mean"] == pytest.approx(memory.mean())
        assert row["memory_used_MiB_p95"] == pytest.approx(memory.quantile(0.95))
        assert row["memory_used_MiB_max"] == memory.max()


def test_probe_and_data_tables(complete_run):
    run_dir, paths = complete_run
    probe = read_csv(paths, "probe")
    assert probe["microbatch_per_gpu"].tolist() == [2, 8]
    assert probe["useful_targets_per_second"].tolist() == [24_000.0, 96_000.0]
    assert probe["step_seconds_mean"].tolist() == pytest.approx([0.41, 1.64])
    assert probe["peak_reserved_bytes_max"].tolist() == [2 * 2**31 + 1, 8 * 2**31 + 1]
    data = read_csv(paths, "data").iloc[0]
    assert data["dataset_fingerprint"] == data["receipt_dataset_fingerprint"] == FINGERPRINT
    assert bool(data["receipt_seal_valid"]) and bool(data["fingerprints_match"])
    assert data["train_games"] == 9_000 and not bool(data["test_evaluated"])


def test_summary_markdown_of_complete_run(complete_run):
    run_dir, paths = complete_run
    text = paths["summary"].read_text()
    results = json.loads((run_dir / "results.json").read_text())
    assert "**Complete.** Final status `early_stop_5_checks`" in text
    assert "test_evaluated: false" in text
    assert (
        f"best step {results['best_step']}, best validation NLL "
        f"{results['best_validation_nll']:.4f}" in text
    )
    assert FINGERPRINT in text and "seal valid: True" in text
    assert "GPU 1: memory max" in text and "rank 0: peak allocated 30.00 GiB" in text
    assert "85940736" in text  # identity
    assert "Nothing was skipped." in text


def test_outputs_are_deterministic(complete_run):
    run_dir, paths = complete_run
    before = {name: path.read_bytes() for name, path in paths.items()}
    summary.summarise(run_dir)
    assert {name: path.read_bytes() for name, path in paths.items()} == before


def test_wall_time_split_and_efficiency(complete_run):
    run_dir, paths = complete_run
    statuses = [json.loads((run_dir / "segments" / f"{n}.json").read_text()) for n in range(3)]
    table = read_csv(paths, "segments")
    for part in ("startup", "training", "validation", "checkpointing", "other"):
        column = f"wall_split.{part}"
        assert table[column].tolist() == [s["wall_split"][part] for s in statuses], part
    assert table["useful_targets"].tolist() == [s["useful_targets"] for s in statuses]
    text = paths["summary"].read_text()
    section = text.split("### Wall time")[1].split("##")[0]
    first = statuses[0]["wall_split"]
    seconds = statuses[0]["seconds"]
    assert (
        f"| 0 | {seconds:.1f} | 4.0 ({4 / seconds:.0%}) | "
        f"{first['training']:.1f} ({first['training'] / seconds:.0%}) |" in section
    )
    total = sum(s["seconds"] for s in statuses)
    assert f"| total | {total:.1f} | {4 + 5 + 6:.1f} ({15 / total:.0%}) |" in section
    targets = sum(s["useful_targets"] for s in statuses)
    median = read_csv(paths, "train_steps")["useful_targets_per_second"].median()
    assert (
        f"- useful targets/s over the segments' wall time: {targets / total:,.0f} ({targets}"
        f" targets in {total:.1f} s of 3 segments); efficiency {targets / total / median:.2f}"
        " of the training records' median" in text
    )


def test_status_files_without_the_wall_split_still_summarise(tmp_path):
    old = make_run(tmp_path / "old", wall_split=False)
    text = summary.summarise(old)["summary"].read_text()
    assert "Where the segments' wall time went: not recorded (older status files)." in text
    assert "- useful targets/s over the segments' wall time: not recorded" in text
    assert "Nothing was skipped." in text  # an older status file is not a defect
    mixed = make_run(tmp_path / "mixed")
    path = mixed / "segments" / "1.json"
    status = json.loads(path.read_text())
    del status["wall_split"], status["useful_targets"]
    path.write_text(json.dumps(status))
    paths = summary.summarise(mixed)
    text = paths["summary"].read_text()
    assert f"| 1 | {status['seconds']:.1f} |" + " not recorded |" * 5 in text
    assert "| total of the 2 recorded |" in text
    assert "of 2 segments); efficiency" in text
    assert read_csv(paths, "segments")["wall_split.training"].isna().tolist() == [
        False,
        True,
        False,
    ]


# --- partial, CPU and bad input --------------------------------------------------------


def test_partial_run_with_a_running_segment(tmp_path):
    run_dir = make_run(
        tmp_path, segments=((0, 120, "time_budget"), (120, 240, "time_budget")), complete=False
    )
    # Segment 2 started (event written) but has no status file yet.
    with open(run_dir / "train" / "events.jsonl", "a") as fh:
        fh.write(json.dumps({"time_unix": T0 + 999, "stage": "segment_start", "segment": 2}) + "\n")
    paths = summary.summarise(run_dir)
    text = paths["summary"].read_text()
    assert "**Partial run: no terminal status yet.**" in text
    assert "segment 2: no status file" in text
    segments = read_csv(paths, "segments")
    assert segments["status"].tolist() == ["time_budget", "time_budget", "running or killed"]
    assert len(read_csv(paths, "validation")) == 1 + 6


def test_cpu_run_without_telemetry(tmp_path):
    run_dir = make_run(tmp_path, gpus=0)
    paths = summary.summarise(run_dir)
    text = paths["summary"].read_text()
    assert "No GPU telemetry was recorded" in text
    assert len(read_csv(paths, "telemetry")) == 0
    svg = paths["gpu_plot"].read_text()
    assert "No GPU telemetry" in svg and "utilisation (%)" not in svg  # a notice, no empty axes


def test_variants_of_the_trainer_records(tmp_path):
    """results.json under train/ with a segment count, CPU memory, a failed nvidia-smi call."""
    run_dir = make_run(tmp_path)
    results = json.loads((run_dir / "results.json").read_text())
    results["segments"] = 3
    results["memory"] = [
        {"rank": r, "peak_allocated": None, "peak_reserved": None, "peak_rss_bytes": 3 * 2**30}
        for r in range(2)
    ]
    (run_dir / "train" / "results.json").write_text(json.dumps(results))
    (run_dir / "results.json").unlink()
    with open(run_dir / "train" / "gpu-telemetry.jsonl", "a") as fh:
        fh.write(
            json.dumps({"time_unix": T0 + 500, "query": "index", "gpus": "error: boom"}) + "\n"
        )
    paths = summary.summarise(run_dir)
    text = paths["summary"].read_text()
    assert "**Complete.** Final status `early_stop_5_checks` (from results.json)" in text
    assert "- rank 0: peak host RSS 3.00 GiB (results.json)" in text  # a CPU run: no allocator
    assert "n/a GiB" not in text
    probe = json.loads((run_dir / "probe-results.json").read_text())
    for result in probe["results"]:
        result["memory"] = [{"rank": 0, "peak_allocated": None, "peak_reserved": None}]
    (run_dir / "probe-results.json").write_text(json.dumps(probe))
    text = summary.summarise(run_dir)["summary"].read_text()
    assert "GiB on the busiest rank" not in text and "n/a GiB" not in text
    assert "gpu-telemetry.jsonl: 1 GPU lines not parsable, skipped" in text
    assert len(read_csv(paths, "segments")) == 3


def test_empty_telemetry_file(tmp_path):
    run_dir = make_run(tmp_path)
    (run_dir / "train" / "gpu-telemetry.jsonl").write_text("")
    paths = summary.summarise(run_dir)
    assert "No GPU telemetry was recorded" in paths["summary"].read_text()


def test_truncated_last_lines(tmp_path):
    run_dir = make_run(tmp_path)
    for name in ("events.jsonl", "gpu-telemetry.jsonl"):
        path = run_dir / "train" / name
        path.write_text(path.read_text() + '{"time_unix": 1795000999.0, "stage": "tra')
    paths = summary.summarise(run_dir)
    text = paths["summary"].read_text()
    lines = len((run_dir / "train" / "events.jsonl").read_text().splitlines())
    assert f"events.jsonl line {lines}: not valid JSON, skipped the last line, truncated" in text
    assert "gpu-telemetry.jsonl line" in text
    assert len(read_csv(paths, "train_steps")) == 30


def test_torn_line_followed_by_a_later_append(tmp_path):
    """A killed segment's torn record, then the next segment's appends on the same line."""
    run_dir = make_run(tmp_path)
    path = run_dir / "train" / "events.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    index = next(i for i, line in enumerate(lines) if '"segment_start", "segment": 1' in line)
    lines[index] = '{"time_unix": 1795000100.0, "stage": "train", "ep' + lines[index]
    path.write_text("".join(lines))
    paths = summary.summarise(run_dir)
    assert f"events.jsonl line {index + 1}: a truncated record" in paths["summary"].read_text()
    assert read_csv(paths, "segments")["segment"].tolist() == [0, 1, 2]
    assert len(read_csv(paths, "train_steps")) == 30


def test_unknown_stages_and_missing_optional_fields(tmp_path):
    run_dir = make_run(tmp_path)
    path = run_dir / "train" / "events.jsonl"
    events = [json.loads(line) for line in path.read_text().splitlines()]
    for event in events:
        if event["stage"] == "train" and event["step"] == 50:
            del event["lr"], event["gradient_norm_before_clip"]
        if event["stage"] == "validation" and event["step"] == 80:
            del event["validation"]["phase_accuracy"], event["train_nll"]
    events.insert(5, {"time_unix": T0 + 5, "stage": "checkpoint_saved", "step": 20})
    events.insert(6, {"time_unix": T0 + 6, "note": "no stage at all"})
    write_jsonl(path, events)
    (run_dir / "probe-results.json").unlink()
    (run_dir / "train" / "identity.json").unlink()
    paths = summary.summarise(run_dir)
    text = paths["summary"].read_text()
    assert "1 stage 'checkpoint_saved' not known to the summary, ignored" in text
    assert "1 records without a stage" in text
    assert "train: field 'lr' missing in 1 of 30, left blank" in text
    assert "validation: field 'validation.phase_accuracy.source' missing in 1 of 8" in text
    assert "validation: field 'train_nll' missing in 1 of 8" in text
    assert "probe-results.json: not found" in text and "identity.json was not found." in text
    train = read_csv(paths, "train_steps")
    assert len(train) == 30 and train["lr"].isna().sum() == 1
    assert len(read_csv(paths, "probe")) == 0


def test_empty_run_directory(tmp_path):
    run_dir = tmp_path / "results" / "fresh"
    run_dir.mkdir(parents=True)
    paths = summary.summarise(run_dir)
    text = paths["summary"].read_text()
    assert "**Partial run: no segment has run yet.**" in text
    assert all(p.stat().st_size > 0 for p in paths.values())


def test_command_line_prints_and_writes_only_with_out(tmp_path):
    run_dir = make_run(tmp_path, complete=False)
    (run_dir / "report").mkdir()
    (run_dir / "report" / "summary.md").write_text("the rule's output\n")
    command = [sys.executable, "-m", "chesslm.report.summary", str(run_dir)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    printed = done.stdout
    assert printed.startswith("# Run `pilot`") and "## Outcome" in printed
    assert (run_dir / "report" / "summary.md").read_text() == "the rule's output\n"
    assert sorted(p.name for p in (run_dir / "report").iterdir()) == ["summary.md"]
    out = tmp_path / "elsewhere"
    done = subprocess.run([*command, "--out", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(summary.OUTPUT_FILES.values())
    assert (out / "summary.md").read_text() == printed  # the figures left undrawn change nothing


def test_receipt_hashes_and_training_code_are_explained(tmp_path):
    run_dir = make_run(tmp_path)
    identity_path = run_dir / "train" / "identity.json"
    identity = json.loads(identity_path.read_text())
    receipt = tmp_path / "results" / "datasets" / "sample" / "integrity-receipt.json"
    identity["integrity_receipt_sha256"] = hashlib.sha256(receipt.read_bytes()).hexdigest()
    identity["training_code"] = {
        "chesslm/model/gpt.py": "a" * 64,
        "chesslm/train/trainer.py": "b" * 64,
    }
    identity_path.write_text(json.dumps(identity))
    text = summary_text(run_dir)
    assert "(sha256 of the receipt's own fields, written by verify), seal valid: True" in text
    assert (
        "(sha256 of the receipt file's bytes when the run trained): the receipt file is the "
        "same now: True" in text
    )
    assert "| training_code | 2 files, listed below |" in text
    assert f"| `chesslm/model/gpt.py` | `{'a' * 64}` |" in text
    assert '{"chesslm/model/gpt.py"' not in text  # no JSON cell
    assert "| model | n_layer=12 |" in text


def test_changed_config_or_dataset_opens_the_summary(tmp_path):
    run_dir = make_run(tmp_path)
    changes = ["runs.pilot.epochs: trained with 1, config now 2"]
    text = summary_text(run_dir, changes=changes)
    first = text.splitlines()[0]
    assert first.startswith("**Warning: run pilot no longer matches the config: runs.pilot.epochs")
    assert "use a new run name, or remove the run" in first
    assert "**Complete, but out of date (see the first line).**" in text
    # a receipt whose fingerprint is not the one the run trained on
    receipt = tmp_path / "other-receipt.json"
    body = {"format": "chesslm-integrity-receipt-v1", "dataset_fingerprint": "e" * 64}
    receipt.write_text(json.dumps({**body, "receipt_sha256": digest_json(body)}))
    text = summary_text(run_dir, receipt=receipt)
    assert text.splitlines()[0].startswith("**Warning: run pilot no longer matches the config: ")
    assert "its dataset fingerprint (ffffffffffff…) differs from the integrity receipt's" in text
    plain = summary_text(run_dir)
    assert plain.startswith("# Run `pilot`\n\n**Complete.**")


def test_summary_html_renders_the_markdown(complete_run):
    _, paths = complete_run
    page = paths["summary_html"].read_text()
    assert page.startswith('<div class="chesslm-summary">')
    assert "<h1>Run <code>pilot</code></h1>" in page
    assert "<strong>Complete.</strong>" in page and "<table" in page and "<li>" in page
    assert "|" not in page.replace("\\|", "")  # every pipe table became a table


def data_uris(page: str) -> list[bytes]:
    """The bytes of each base64 data URI of summary.html's images (its newlines dropped, as
    a browser's URL parser drops them)."""
    found = re.findall(r'src="data:image/svg\+xml;base64,([^"]+)"', page)
    return [base64.b64decode(uri.replace("\n", "")) for uri in found]


def test_the_answers_open_with_the_best_nll_and_the_headline_figures(tmp_path):
    """At a glance: the best validation NLL of results.json first, then the NLL curve and
    (once played) move-matching by rating, before the identity and its hashes; summary.html
    carries the figures' own bytes, so the report's first page shows them."""
    run_dir = make_run(tmp_path)
    figure = Figure(figsize=(4, 2))
    figure.add_subplot().plot([1, 2], [3, 4])
    (run_dir / "play").mkdir()
    save_svg(figure, run_dir / "play" / "move-match.svg")
    paths = summary.summarise(run_dir)
    text = paths["summary"].read_text()
    glance = section(text, "At a glance")
    best = json.loads((run_dir / "results.json").read_text())["best_validation_nll"]
    assert glance[1].startswith(f"- Best validation NLL: **{best:.4f}** nats/target at step ")
    row = "![NLL curve](nll.svg) ![move-matching by rating](../play/move-match.svg)"
    assert row in glance and text.index(row) < text.index("## Identity")
    page = paths["summary_html"].read_text()
    assert '<p class="chesslm-figures">' in page
    assert page.index('chesslm-figures"') < page.index("<h2>Identity</h2>")
    wanted = [paths["nll_plot"].read_bytes(), (run_dir / "play" / "move-match.svg").read_bytes()]
    assert data_uris(page) == wanted
    assert max(map(len, page.splitlines())) < 10_000  # docutils' limit in the report


def test_a_figure_is_saved_cut_to_what_it_draws(tmp_path):
    """save_svg's canvas is the figure's drawn extent (its tight box) plus PAD_INCHES, not
    the size it was made at: a notice's one line of text once left over half of it blank."""
    fig = notice_figure("pilot: a title", "Nothing to show.")
    save_svg(fig, tmp_path / "notice.svg")
    head = (tmp_path / "notice.svg").read_text()[:1000]
    width, height = (float(re.search(rf'{k}="([\d.]+)pt"', head)[1]) for k in ("width", "height"))
    box = fig.get_tightbbox()  # inches, as savefig's bbox_inches='tight' takes it
    made = fig.get_size_inches() * 72
    assert width == pytest.approx((box.width + 2 * PAD_INCHES) * 72, abs=1)
    assert height == pytest.approx((box.height + 2 * PAD_INCHES) * 72, abs=1)
    assert width * height < 0.7 * made[0] * made[1]


def test_play_section_only_when_the_run_has_played(tmp_path):
    from chesslm.report.play_section import markdown_section

    run_dir = make_run(tmp_path)
    (run_dir / "play").mkdir()
    text = summary_text(run_dir)
    assert markdown_section(run_dir / "play").strip().splitlines()[0] in text


def section(text: str, heading: str) -> list[str]:
    """The lines of summary.md's section ``heading``, up to the next section."""
    lines = text.splitlines()
    start = lines.index(f"## {heading}") + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("## ")), len(lines))
    return lines[start:end]


def test_files_lists_the_play_files(tmp_path):
    run_dir = make_run(tmp_path)
    report_files = [f"- `{name}`" for name in sorted(summary.OUTPUT_FILES.values())]
    unplayed = section(summary_text(run_dir), "Files")
    assert sorted(line for line in unplayed if line.startswith("- ")) == sorted(
        f for f in report_files if f != "- `summary.md`"
    )
    play = run_dir / "play"
    (play / "state").mkdir(parents=True)
    played = ["elo-games.csv", "elo.csv", "elo.json", "legality.svg", "move-match.csv"]
    for name in [*played, "state/legality.json", "notes.txt"]:
        (play / name).write_text("{}")
    seal.write(play / "elo.json", elo_record(None))  # a record is read: sealed, as play writes it
    files = section(summary_text(run_dir), "Files")
    listed = [line for line in files if line.startswith("- `play/")]
    assert listed == [f"- `play/{n}`" for n in played]  # not state/, only records and figures
    assert set(unplayed) <= set(files)  # the report's files are still listed


def test_test_evaluated_is_explained(tmp_path):
    run_dir = make_run(tmp_path)
    text = summary_text(run_dir)
    line = next(line for line in text.splitlines() if line.startswith("test_evaluated"))
    assert line.startswith("test_evaluated: false (the test split is written and hashed")
    assert "nothing that reads tokens reads it" in line
    results = json.loads((run_dir / "results.json").read_text())
    (run_dir / "results.json").write_text(json.dumps({**results, "test_evaluated": True}))
    text = summary_text(run_dir)
    assert "test_evaluated: true (a record says the test split was evaluated" in text


def test_segments_are_counted_against_max_segments(tmp_path):
    done = summary_text(make_run(tmp_path / "done"), max_segments=7)
    assert "3 segments of at most 7 (`runs.pilot.max_segments`), " in done
    unfinished = make_run(tmp_path / "unfinished", complete=False)  # no results.json
    text = summary_text(unfinished, max_segments=7)
    assert "(from segment 2 of at most 7, numbered from 0; no results.json yet)" in text
    two = ((0, 120, "time_budget"), (120, 240, "time_budget"))
    partial = make_run(tmp_path / "partial", segments=two, complete=False)
    text = summary_text(partial, max_segments=7)
    assert "Latest status `time_budget` (from segment 1 of at most 7, numbered from 0)" in text
    assert "of at most" not in summary_text(partial)  # no bound
    command = [sys.executable, "-m", "chesslm.report.summary", str(partial), "--max-segments=9"]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    assert "(from segment 1 of at most 9, numbered from 0)" in done.stdout


def test_does_not_import_torch():
    code = "import sys, chesslm.report.summary; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_report_items_come_from_one_table():
    text = (REPO / "workflow" / "rules" / "report.smk").read_text()
    assert "for item in REPORT_ITEMS" in text and "=report(" not in text
    assert summary.OUTPUT_FILES == {item.name: item.file for item in items.ITEMS}
    assert len({item.file for item in items.ITEMS}) == len(items.ITEMS)
    for item in items.ITEMS:
        assert (REPO / "workflow" / "report" / item.caption).is_file(), item.caption


# --- figures -----------------------------------------------------------------------------


def test_segment_timeline_colours_and_legend(tmp_path):
    from chesslm.report import plots

    assert plots.status_colour("segment_updates") == plots.status_colour("time_budget")
    assert plots.status_colour("max_updates") != plots.status_colour("segment_updates")
    assert plots.status_colour("running or killed") == "tab:red"
    run_dir = make_run(tmp_path, segments=((0, 120, "segment_updates"), (120, 240, "max_updates")))
    svg = summary.summarise(run_dir)["segments_plot"].read_text()
    for label in plots.STATUS_KINDS:
        assert label in svg  # the legend


def test_throughput_ignores_a_record_timed_over_no_time(tmp_path):
    from chesslm.report import plots

    run_dir = make_run(tmp_path)
    path = run_dir / "train" / "events.jsonl"
    events = [json.loads(line) for line in path.read_text().splitlines()]
    last = max(i for i, e in enumerate(events) if e["stage"] == "train" and e["step"] <= 120)
    spike = dict(events[last], step=121, useful_targets_per_second=5e9)
    spike["gpu_work_wall_seconds"] += 1e-4  # logged just after the previous record
    events.insert(last + 1, spike)
    write_jsonl(path, events)
    paths = summary.summarise(run_dir)
    train = read_csv(paths, "train_steps")
    assert train["useful_targets_per_second"].max() == 5e9  # the table keeps every record
    kept, dropped = plots.timed_records(train)
    assert dropped == 1 and kept["useful_targets_per_second"].max() < 1e6
    figure = plots.throughput_figure(kept, read_csv(paths, "validation"), [], "pilot")
    assert figure.axes[0].get_ylim()[1] < 1e6
    assert "1 record(s) over a near-zero interval left out" in paths["throughput_plot"].read_text()


# --- the answers summary.md opens with ---------------------------------------------------


def match_row(protocol: str, top1: float, *, games: int = 40, few: bool = False) -> dict:
    """An overall row of move-match.json's table (``matching.tables``' shape)."""
    bounds = {} if few else {"top1_low": top1 - 0.0213, "top1_high": top1 + 0.0187}
    return {"protocol": protocol, "grouping": "overall", "group": "all", "positions": 1200,
            "games": games, "top1": top1, "top3": top1 + 0.2, "nll": 2.5,
            "few_games": few} | bounds  # fmt: skip


def match_record(rows: list[dict], *, complete: bool = True) -> dict:
    """move-match.json of one dataset, ``lichess``; ``maia2`` is the headline protocol."""
    dataset = {"complete": complete, "games_evaluated": 40 if complete else 12,
               "validation_games": 512, "games_selected": 40, "selection": "40 evenly spaced",
               "positions": 2000, "protocol_positions": {"maia2": 1200, "all": 2000},
               "metadata": "present", "table": rows}  # fmt: skip
    return {"model": {"checkpoint": "best.pt", "step": 300, "preset": "tiny"},
            "definition": "argmax over legal moves", "interval": "95 % bootstrap over games",
            "protocols": {"maia2": "Maia-2's rule", "all": "every position"},
            "min_interval_games": 10, "datasets": {"lichess": dataset}}  # fmt: skip


def elo_record(fit: dict | None, *, complete: bool = True) -> dict:
    """elo.json: ``fit: null`` and no anchors as ``games_per_anchor: 0`` writes it."""
    if fit is None:
        return {"anchors": [], "fit": None}
    anchor = {"anchor": "random", "kind": "random", "rating": 400.0, "rating_low": 300.0,
              "rating_high": 500.0, "fixed": False, "ladder_games": 6, "games": 8, "wins": 3,
              "draws": 2, "losses": 3, "score": 0.5}  # fmt: skip
    ladder = {"file": "results/ladders/l/ladder.json", "key": "k" * 16, "games": 12,
              "engine": {"id_name": "Stockfish"}}  # fmt: skip
    fit = {"games": 8, "score": 0.5, "text": "", "method": "maximum likelihood"} | fit
    return {"anchors": [anchor], "fit": fit, "ladder": ladder, "complete": complete,
            "note": "engine Elo", "protocol": "2 games per anchor", "reproducible": True,
            "reproducibility": "seeded"}  # fmt: skip


def legality_record(*, complete: bool = True) -> dict:
    mode = {
        "games": 2,
        "proposals": 120,
        "illegal_share": 0.0417,
        "games_with_illegal": 0.5,
        "first_illegal_ply_median": 31.0,
        "mean_game_plies": 60.0,
        "complete": complete,
    }
    return {"protocol": "self-play, no mask", "modes": {"greedy": {**mode, "games": 1},
                                                        "temperature_1": mode}}  # fmt: skip


def glance(run_dir: Path, **play: dict | str) -> tuple[list[str], str]:
    """summary.md's "At a glance" lines and the whole text, with the records ``play`` (name
    in ``outputs.FILES``: JSON, or text written as it is) in the run's ``play/``."""
    from chesslm.record.play_files import FILES

    for name, record in play.items():
        (run_dir / "play").mkdir(exist_ok=True)
        text = record if isinstance(record, str) else json.dumps(seal.seal(record))
        (run_dir / "play" / FILES[name]).write_text(text)
    text = summary_text(run_dir)
    return section(text, "At a glance"), text


def answer(lines: list[str], start: str) -> str:
    (line,) = [line for line in lines if line.startswith(f"- {start}")]
    return line


FINITE = {"elo": 1234.4, "low": 1101.2, "high": 1349.6, "low_total": 1050.0, "high_total": 1400.0}


def test_the_summary_opens_with_the_answers(tmp_path):
    """Top-1 under the headline protocol with its interval, the Elo with its interval, the
    legality, and the commands, before the training's outcome and the identity; the figures
    are the detailed tables' cells, from the same records."""
    run_dir = make_run(tmp_path)
    (run_dir / "train" / "best.pt").write_bytes(b"")
    rows = [match_row("maia2", 0.3137), match_row("all", 0.4412)]
    lines, text = glance(run_dir, move_match=match_record(rows), elo=elo_record(FINITE),
                         legality=legality_record())  # fmt: skip
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings[:3] == ["## At a glance", "## Outcome", "## Identity"]
    assert text.index("## At a glance") < 100  # after the title and the status line
    assert text.index("## At a glance") < text.index("test_evaluated") < text.index("## Outcome")
    top1 = answer(lines, "Top-1")
    assert "`lichess` **31.4% [29.2%, 33.2%]**, 1200 positions under `maia2`" in top1
    assert "40 of 512 validation games scored" in top1 and "44.1%" not in top1
    table = section(text, "Play evaluation")
    assert any(line.startswith("| maia2 | overall | all |") and "31.4% [29.2%, 33.2%]" in line
               for line in table)  # fmt: skip
    elo = answer(lines, "Engine Elo")
    assert "**1234** (95 % interval 1101 to 1350; 1050 to 1400 with the ladder's own" in elo
    assert "over 8 games (score 50.0%)" in elo and "partial" not in elo
    legal = answer(lines, "Free-running legality")
    assert "`greedy` **4.2%** of 120 proposals illegal (1 game)" in legal
    assert "`temperature_1` **4.2%** of 120 proposals illegal (2 games)" in legal
    best = run_dir / "train" / "best.pt"
    assert f"`chesslm-uci --checkpoint {best}`" in answer(lines, "Play it")
    assert f"`snakemake --cores 2 {run_dir / 'export' / 'model.safetensors'}`" in answer(
        lines, "Export"
    )
    # no token cache beside this run's receipt: no games of its own, an argument the command
    # refuses in one line ("YOUR-GAMES.pgn: no such file", test_analyse)
    command = f"chesslm-analyse --checkpoint {best} YOUR-GAMES.pgn --csv analysis.csv"
    assert f"`{command}` (YOUR-GAMES.pgn: a .pgn or .pgn.zst)" in answer(lines, "Analyse")
    assert "### Play it or share it" not in text  # said once, at the top


def test_the_answers_say_what_is_not_evaluated_yet(tmp_path):
    lines, text = glance(make_run(tmp_path / "unplayed"))
    for start in ("Top-1", "Engine Elo", "Free-running legality"):
        assert "not evaluated yet (no `play/" in answer(lines, start), start
    assert answer(lines, "Play it, share it").endswith(f"not yet (no `{tmp_path}/unplayed/"
                                                       "results/pilot/train/best.pt`)")  # fmt: skip
    assert "## Play evaluation" not in text
    rows = [match_row("maia2", 0.3)]
    lines, _ = glance(make_run(tmp_path / "matched"), move_match=match_record(rows))
    assert "**30.0% [27.9%, 31.9%]**" in answer(lines, "Top-1")
    assert answer(lines, "Engine Elo").endswith("not evaluated yet (no `play/elo.json`)")


def test_the_answers_say_no_fit_and_a_bound(tmp_path):
    """``games_per_anchor: 0`` (fit null) and a model that lost every game (a bound)."""
    lines, _ = glance(make_run(tmp_path / "none"), elo=elo_record(None))
    assert answer(lines, "Engine Elo").endswith(f": {NOT_PLAYED}")
    below = {"elo": None, "low": None, "high": 812.0, "bound": "below", "score": 0.0,
             "text": "below 812 (95 %; no game won or drawn)"}  # fmt: skip
    lines, _ = glance(make_run(tmp_path / "bound"), elo=elo_record(below))
    elo = answer(lines, "Engine Elo")
    assert ": not finite: below 812 (95 %; no game won or drawn) over 8 games (score 0.0%)" in elo
    assert "**" not in elo  # no figure to stand out


def test_the_answers_say_partial_few_games_and_unreadable(tmp_path):
    few = [match_row("maia2", 0.25, games=8, few=True), match_row("all", 0.3, games=8, few=True)]
    lines, _ = glance(make_run(tmp_path / "partial"), move_match=match_record(few, complete=False),
                      elo=elo_record(FINITE, complete=False),
                      legality=legality_record(complete=False))  # fmt: skip
    top1 = answer(lines, "Top-1")
    assert "`lichess` **25.0% (no interval)** (8 games: fewer than 10), 1200 positions" in top1
    assert "12 of 512 validation games scored when its time budget stopped it (partial)" in top1
    assert "(stopped by its time budget: partial)" in answer(lines, "Engine Elo")
    assert "(2 games, stopped by its time budget: partial)" in answer(lines, "Free-running")
    no_clocks = [match_row("all", 0.3)]  # a dataset without clocks: no maia2 position
    clockless = make_run(tmp_path / "clockless")
    lines, _ = glance(clockless, move_match=match_record(no_clocks))
    top1 = answer(lines, "Top-1")
    assert "`lichess` no position under `maia2`, 40 of 512" in top1
    assert "(under `all`: **30.0% [27.9%, 31.9%]**, 1200 positions)" in top1
    # a record that is there but unreadable is refused, never reported as absent
    with pytest.raises(RecordError, match=r"legality.json: not JSON .*--forcerun play$"):
        glance(clockless, legality='{"modes": ')
