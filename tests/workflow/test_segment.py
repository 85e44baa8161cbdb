"""The segment CLI under real torchrun with two gloo processes on a tiny cache."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from chesslm.files import sha256_file
from chesslm.model import checkpoint
from chesslm.train.segment import ERROR_PREFIX, REFUSED_PREFIX
from chesslm.train.state import WALL_PARTS, TrainState
from tests import forked
from tests.conftest import ROOT, run_segment, segment_args

pytestmark = pytest.mark.slow
PACKAGE = ROOT / "chesslm"  # its frames in a traceback start with this (the venv's do not)
# the fault hooks, then this checkout (PYTHONPATH replaces the caller's)
FAULTS = os.pathsep.join([str(ROOT / "tests" / "fault_injection"), str(ROOT)])
# max_updates 6 in steps of 2: segments 0, 1, 2; a check after every update
HYPER = [
    "--model=tiny",
    "--micro=2",
    "--accum=2",
    "--epochs=2",
    "--max-updates=6",
    "--validation-every-steps=1",
    "--seed=7",
    "--threads-per-worker=1",
    "--dataset=tiny",
]


def segment(cache: Path, run_dir: Path, n: int, *extra: str, env=None, updates: int | None = 2):
    args = [*segment_args(cache, run_dir, n), *HYPER, *extra]
    if updates is not None:
        args.append(f"--segment-updates={updates}")
    return run_segment(args, env=env)


def status(run_dir: Path, n: int) -> dict:
    return json.loads((run_dir / "segments" / f"{n}.json").read_text())


def ok(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


@pytest.fixture(scope="module")
def first_segment(tiny_cache: Path, tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("seg") / "run"
    result = segment(tiny_cache, run_dir, 0)
    ok(result)
    (run_dir.parent / "console.txt").write_text(result.stdout + result.stderr)
    return run_dir


def copy_run(source: Path, tmp_path: Path) -> Path:
    run_dir = tmp_path / "run"
    shutil.copytree(source, run_dir, ignore=shutil.ignore_patterns(".lock"))
    return run_dir


def test_first_segment_records(first_segment: Path) -> None:
    s = status(first_segment, 0)
    assert s["status"] == "segment_updates" and s["terminal"] is False
    assert (s["step_start"], s["step_end"], s["updates"]) == (0, 2, 2)
    assert s["last_pt_sha256"] == sha256_file(first_segment / "train" / "last.pt")
    assert s["world_size"] == 2 and s["device"] == "cpu"
    assert 0 < s["first_update_seconds"] < s["seconds"]  # set-up and initial validation
    stages = [
        e["stage"]
        for e in map(json.loads, (first_segment / "train/events.jsonl").read_text().splitlines())
    ]
    assert stages[:3] == ["segment_start", "data_validated", "initial_validation"]
    assert stages.count("validation") == 2 and stages[-1] == "segment_end"
    # the last check improved, so the final save is that check's save and best.pt its copy
    saved = TrainState.from_state_dict(checkpoint.load(first_segment / "train" / "last.pt"))
    assert saved.best_step == s["step_end"]
    best, last = first_segment / "train/best.pt", first_segment / "train/last.pt"
    assert not os.path.samefile(best, last) and best.read_bytes() == last.read_bytes()
    kept = first_segment / "train/segment-end.pt"  # the copy a damaged last.pt is restored from
    assert not os.path.samefile(kept, last) and kept.read_bytes() == last.read_bytes()
    assert json.loads((first_segment / "train/identity.json").read_text())["world_size"] == 2


def test_a_segment_log_has_no_ddp_warning(first_segment: Path) -> None:
    """Every parameter gets a gradient: DDP is not asked to search for unused ones, and so
    does not warn about the search in every segment's log (segment 0's console)."""
    output = (first_segment.parent / "console.txt").read_text()
    assert "segment 0" in output, output[-3000:]
    assert "find_unused_parameters" not in output and "Warning" not in output, output[-3000:]


def test_wall_split_adds_up_to_the_segment_seconds(first_segment: Path) -> None:
    s = status(first_segment, 0)
    split = s["wall_split"]
    assert tuple(split) == WALL_PARTS
    assert sum(split.values()) == pytest.approx(s["seconds"], abs=1e-6)
    # this segment set up, trained 2 updates, validated 3 times and saved twice
    assert all(split[part] > 0 for part in WALL_PARTS[:-1]), split
    assert split["other"] >= 0, split
    assert split["startup"] < s["first_update_seconds"]  # the initial check comes between
    saved = TrainState.from_state_dict(checkpoint.load(first_segment / "train" / "last.pt"))
    assert s["useful_targets"] == saved.totals["valid_targets"] > 0  # segment 0 starts at 0


def targets(run_dir: Path) -> int:
    """The useful targets trained so far, from last.pt."""
    return checkpoint.load(run_dir / "train/last.pt")["metrics"]["totals"]["valid_targets"]


def test_resume_is_bitwise_identical_to_uninterrupted_even_after_a_sigkill(
    tiny_cache: Path, first_segment: Path, tmp_path: Path
) -> None:
    whole = tmp_path / "whole"
    ok(segment(tiny_cache, whole, 0, updates=None))
    assert status(whole, 0)["status"] == "max_updates" and status(whole, 0)["step_end"] == 6

    run_dir = copy_run(first_segment, tmp_path)
    killed = segment(tiny_cache, run_dir, 1, env={"PYTHONPATH": FAULTS, "CHESSLM_FAULT": "kill:1"})
    assert killed.returncode != 0 and not (run_dir / "segments/1.json").exists()
    # the killed attempt saved step 3 in the background and died in step 4: last.pt is step
    # 3's if that save had landed, else step 2's; the rerun continues from either
    killed_step = checkpoint.load(run_dir / "train/last.pt")["cursor"]["step"]
    assert killed_step in (2, 3)
    killed_targets = targets(run_dir)
    ok(segment(tiny_cache, run_dir, 1))
    assert (status(run_dir, 1)["step_start"], status(run_dir, 1)["step_end"]) == (killed_step, 4)
    resumed = status(run_dir, 1)  # counts its own updates, not the killed attempt's
    update = targets(run_dir) - killed_targets
    assert resumed["useful_targets"] == update > 0
    assert sum(resumed["wall_split"].values()) == pytest.approx(resumed["seconds"], abs=1e-6)
    assert resumed["last_pt_sha256"] == sha256_file(run_dir / "train/last.pt")

    # a kill amid a background write (step 5's, while step 6 trains) leaves its temporary
    # and the verified last.pt before it, the one segment 1's status names
    env = {"PYTHONPATH": FAULTS, "CHESSLM_FAULT": "killsave:1"}
    killed = segment(tiny_cache, run_dir, 2, env=env)
    assert killed.returncode != 0 and not (run_dir / "segments/2.json").exists()
    [partial] = (run_dir / "train").glob(".last.pt.*.tmp")  # the killed writer's own
    assert partial.stat().st_size > 0
    checkpoint.verify(run_dir / "train/last.pt")
    assert sha256_file(run_dir / "train/last.pt") == resumed["last_pt_sha256"]
    ok(segment(tiny_cache, run_dir, 2))
    final = status(run_dir, 2)
    assert final["status"] == "max_updates" and final["terminal"] is True

    a, b = checkpoint.load(whole / "train/last.pt"), checkpoint.load(run_dir / "train/last.pt")
    assert a["cursor"] == b["cursor"]
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name
    for key, state in a["optimizer"]["state"].items():
        for field, value in state.items():
            assert torch.equal(value, b["optimizer"]["state"][key][field]), (key, field)
    results = json.loads((run_dir / "train/results.json").read_text())
    assert results["status"] == "max_updates" and results["test_evaluated"] is False
    assert results["last_checkpoint_sha256"] == sha256_file(run_dir / "train/last.pt")
    assert [h["step"] for h in results["history"]] == [1, 2, 3, 4, 5, 6]

    # resuming a terminal run is a no-op with a receipt (no torchrun needed for a world of 1;
    # forked from a process that imported torch: tests/forked.py)
    before = sha256_file(run_dir / "train/last.pt")
    noop = forked.run(
        "python",
        [
            "-m",
            "chesslm.train.segment",
            "train",
            f"--cache={tiny_cache}",
            f"--run-dir={run_dir}",
            "--segment=3",
            f"--status-out={run_dir}/segments/3.json",
            f"--previous-status={run_dir}/segments/2.json",
            "--workers=1",
            *HYPER,
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    ok(noop)
    receipt = status(run_dir, 3)
    assert receipt["first_update_seconds"] is None  # a no-op ran no update
    assert receipt["wall_split"]["other"] == receipt["seconds"] and receipt["useful_targets"] == 0
    assert receipt["resume_action"] == "no_op_terminal" and receipt["terminal"] is True
    assert receipt["updates"] == 0 and sha256_file(run_dir / "train/last.pt") == before


def test_identity_mismatch_on_resume_names_the_key(
    tiny_cache: Path, first_segment: Path, tmp_path: Path
) -> None:
    run_dir = copy_run(first_segment, tmp_path)
    # what a kill or a full disk during a write leaves behind (a dead writer's; the old name)
    leftovers = [run_dir / "train/.last.pt.999999999.0badf00d.tmp"]
    leftovers.append(run_dir / "train/failure-rank1.json.tmp")
    live = run_dir / f"train/.best.pt.{os.getpid()}.0badf00d.tmp"  # a live writer's: kept
    for path in [*leftovers, live]:
        path.write_bytes(b"partial")
    result = segment(tiny_cache, run_dir, 1, "--lr=0.001")
    assert result.returncode != 0
    assert one_error_line(result).startswith("incompatible checkpoint identity, changed: lr")
    assert not (run_dir / "segments/1.json").exists()
    assert not any(path.exists() for path in leftovers)  # removed on start, under the lock
    assert live.read_bytes() == b"partial"


def one_error_line(result: subprocess.CompletedProcess) -> str:
    """The refusal, printed once (rank 0), in one line, without a traceback."""
    lines = [line for line in result.stderr.splitlines() if line.startswith(ERROR_PREFIX)]
    assert len(lines) == 1, result.stderr[-3000:]
    # no frame of this package's code (torchrun's own traceback may follow)
    assert f"{PACKAGE}{os.sep}" not in result.stderr, result.stderr[-3000:]
    return lines[0].removeprefix(ERROR_PREFIX).strip()


def refused_in_process(cache: Path, run_dir: Path, n: int, capsys, *extra: str) -> str:
    """Segment ``n`` refused in this process, one rank (the refusal is rank 0's, before any
    update; test_identity_mismatch_on_resume_names_the_key is the torchrun case): its line."""
    from chesslm.train import segment as segment_module

    args = [*segment_args(cache, run_dir, n), *HYPER, "--segment-updates=2", "--workers=1"]
    assert segment_module.main([*args, *extra]) == 1
    err = capsys.readouterr().err.strip()  # one line, no traceback
    assert err.startswith(ERROR_PREFIX) and "\n" not in err, err
    return err.removeprefix(ERROR_PREFIX).strip()


def test_more_legality_games_than_the_cache_holds_stop_the_segment_naming_the_key(
    tiny_cache: Path, tmp_path: Path, capsys
) -> None:
    """The tiny cache has tables for all its 6 validation games: 7 is an error, not 6."""
    line = refused_in_process(tiny_cache, tmp_path / "run", 0, capsys, "--legality-eval-games=7")
    assert line.startswith("runs.run.legality_eval_games is 7, but the token cache"), line
    assert "for 6 of 6 validation games: lower it to at most 6" in line, line
    assert not (tmp_path / "run/segments/0.json").exists()


def test_non_finite_gradient_fails_and_leaves_last_pt_untouched(
    tiny_cache: Path, first_segment: Path, tmp_path: Path
) -> None:
    run_dir = copy_run(first_segment, tmp_path)
    before = sha256_file(run_dir / "train/last.pt")
    result = segment(tiny_cache, run_dir, 1, env={"PYTHONPATH": FAULTS, "CHESSLM_FAULT": "nan:0"})
    assert result.returncode != 0
    assert "non-finite" in result.stderr
    assert sha256_file(run_dir / "train/last.pt") == before
    assert not (run_dir / "segments/1.json").exists()
    assert (run_dir / "train/failure-rank0.json").exists()
    ok(segment(tiny_cache, run_dir, 1))  # the run goes on: the failure's record is history
    assert not list((run_dir / "train").glob("failure-rank*.json"))


def test_tampered_last_pt_is_refused(
    tiny_cache: Path, first_segment: Path, tmp_path: Path, capsys
) -> None:
    run_dir = copy_run(first_segment, tmp_path)
    shutil.copyfile(run_dir / "train/best.pt", run_dir / "train/last.pt")  # valid file, wrong one
    s = status(run_dir, 0)
    s["last_pt_sha256"] = "0" * 64
    (run_dir / "segments/0.json").write_text(json.dumps(s))
    line = refused_in_process(tiny_cache, run_dir, 1, capsys)
    assert "does not match the previous status" in line, line
    assert not (run_dir / "segments/1.json").exists()


def test_a_flipped_bit_in_a_mid_segment_last_pt_is_refused_as_corruption(
    tiny_cache: Path, first_segment: Path, tmp_path: Path, capsys
) -> None:
    """A last.pt of an earlier, killed attempt of this segment is resumed on its lineage: its
    own digest must still catch one flipped mantissa bit."""
    run_dir = copy_run(first_segment, tmp_path)
    last = run_dir / "train/last.pt"
    saved = checkpoint.load(last)
    saved["lineage"] = {"segment": 1, "parent_sha256": status(run_dir, 0)["last_pt_sha256"]}
    checkpoint.save(last, saved)  # as a killed attempt of segment 1 would have left it
    data = bytearray(last.read_bytes())
    data[-30_000] ^= 0x01  # inside the tensor data: low mantissa bit of a weight
    last.write_bytes(data)
    assert refused_in_process(tiny_cache, run_dir, 1, capsys).startswith(
        f"{last}: corrupt checkpoint"
    )
    assert not (run_dir / "segments/1.json").exists()


def test_a_damaged_last_pt_names_its_segment_end_copy_or_that_none_is_intact(
    tiny_cache: Path, first_segment: Path, tmp_path: Path, capsys
) -> None:
    """Issue 63 item 3: a resumed segment refuses a damaged last.pt naming the cp -p that
    restores it from segment-end.pt (test_recovery.py runs it and trains on); with the copy
    damaged too, the command that trains the run again."""
    run_dir = copy_run(first_segment, tmp_path)
    last, kept = run_dir / "train/last.pt", run_dir / "train/segment-end.pt"
    flip_a_byte(last)
    line = refused_in_process(tiny_cache, run_dir, 1, capsys)
    assert line.startswith(f"{last}: corrupt checkpoint: "), line
    assert "restore an intact copy" not in line, line  # the general advice, replaced
    assert line.endswith(f"is intact: cp -p {kept} {last}, then the same command again"), line
    flip_a_byte(kept)
    line = refused_in_process(tiny_cache, run_dir, 1, capsys)
    assert f"no intact copy ({kept} is missing, damaged" in line, line
    assert f"rm -r {run_dir} && snakemake --cores 2 {run_dir}/results.json" in line, line
    assert not (run_dir / "segments/1.json").exists()


def flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def test_probe_writes_passed_results(tiny_cache: Path, tmp_path: Path) -> None:
    out = tmp_path / "probe-results.json"
    ok(
        run_segment(
            [
                "probe",
                f"--cache={tiny_cache}",
                f"--run-dir={tmp_path}",
                f"--probe-out={out}",
                "--model=tiny",
            ]
        )
    )
    probe = json.loads(out.read_text())
    assert probe["status"] == "passed"
    assert [r["microbatch_per_gpu"] for r in probe["results"]] == [2, 8]
    assert all(len(r["step_seconds"]) == 2 and len(r["memory"]) == 2 for r in probe["results"])
    assert probe["validation_warm_up_seconds"] > 0  # segment 0's inference graph, warmed


def test_more_gpus_than_exist_fails_in_one_line(tiny_cache: Path, tmp_path: Path) -> None:
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "chesslm.train.segment",
            "train",
            f"--cache={tiny_cache}",
            f"--run-dir={tmp_path}",
            f"--status-out={tmp_path}/0.json",
            "--device=cuda",
            "--dataset=tiny",
            f"--workers={visible + 1}",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ},
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "GPUs" in lines[0], result.stderr
    assert not (tmp_path / "train").exists()


def test_training_waits_for_a_passed_probe(tiny_cache: Path, tmp_path: Path, capsys) -> None:
    from chesslm.train import segment as segment_module

    probe = tmp_path / "probe-results.json"
    probe.write_text(json.dumps({"status": "failed"}))
    args = [
        "train",
        f"--cache={tiny_cache}",
        f"--run-dir={tmp_path / 'run'}",
        f"--status-out={tmp_path / 'run/segments/0.json'}",
        f"--probe-results={probe}",
        "--workers=1",
        *HYPER,
    ]
    assert segment_module.main(args) == 1
    err = capsys.readouterr().err.strip()  # one line, no traceback
    assert err == f"{ERROR_PREFIX} {probe}: the probe has not passed; training waits for it"
    assert not (tmp_path / "run/segments/0.json").exists()


def logged_segment(cache: Path, run_dir: Path, n: int, log: Path, env=None):
    """Segment ``n`` as the workflow runs it: under workflow/scripts/logged.sh, whose stderr is
    what snakemake's console shows."""
    command = [
        "bash", str(ROOT / "workflow/scripts/logged.sh"), str(log), "env", "OMP_NUM_THREADS=1",
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
        "-m", "chesslm.train.segment", "--dataset=tiny", *segment_args(cache, run_dir, n),
        *HYPER, "--segment-updates=2", "--workers=2",
    ]  # fmt: skip
    return subprocess.run(
        command, capture_output=True, text=True, cwd=ROOT, env={**os.environ, **(env or {})}
    )


def test_the_console_shows_progress_and_names_a_killed_rank_in_one_line(
    tiny_cache: Path, first_segment: Path, tmp_path: Path
) -> None:
    run_dir = copy_run(first_segment, tmp_path)
    log = tmp_path / "logs/1.log"
    env = {"PYTHONPATH": FAULTS, "CHESSLM_FAULT": "kill:1"}
    killed = logged_segment(tiny_cache, run_dir, 1, log, env=env)
    assert killed.returncode != 0
    causes = [line for line in killed.stderr.splitlines() if f"(log: {log})" in line]
    assert len(causes) == 1, killed.stderr
    assert re.match(r"rank 0 \(pid \d+\) was killed by signal 9 \(KILL\)", causes[0]), causes
    progress = [line for line in killed.stderr.splitlines() if line.startswith("progress: ")]
    assert progress and progress[0].startswith("progress: run run, segment 1 of at most")

    done = logged_segment(tiny_cache, run_dir, 1, log)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("progress: ")]
    assert "resumed at step" in lines[0] and lines[-1].endswith("ended at step 4: segment_updates")


def test_a_segment_another_trainer_trained_meanwhile_is_refused_writing_nothing(
    tiny_cache: Path, first_segment: Path, tmp_path: Path, capsys
) -> None:
    """Two snakemakes with --nolock start segment 0 alike; the second gets the run's lock once
    the first has written segments/0.json: it refuses in one line and exits 0 (snakemake then
    keeps that record instead of removing a failed job's outputs)."""
    from chesslm.train import segment as segment_module

    run_dir = copy_run(first_segment, tmp_path)
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    args = [*segment_args(tiny_cache, run_dir, 0), *HYPER, "--segment-updates=2", "--workers=1"]
    assert segment_module.main(args) == 0
    err = capsys.readouterr().err.strip()
    assert err.startswith(REFUSED_PREFIX) and "\n" not in err, err
    assert f"{run_dir}/segments/0.json: segment already trained by another trainer" in err, err
    after = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file() and p.name != ".lock"}
    assert after == {p: b for p, b in before.items() if p.name != ".lock"}

    # its status file removed since (a second snakemake's job removes its outputs first):
    # restored from the trainer's own copy, nothing trained
    (run_dir / "segments/0.json").unlink()
    assert segment_module.main(args) == 0
    err = capsys.readouterr().err.strip()
    assert err.startswith(REFUSED_PREFIX) and "its record restored" in err, err
    assert (run_dir / "segments/0.json").read_bytes() == before[run_dir / "segments/0.json"]

    # both gone (removed by hand): last.pt says the run is past it
    (run_dir / "segments/0.json").unlink()
    (run_dir / "segments/.0.json.kept").unlink()
    last = run_dir / "train/last.pt"
    saved = checkpoint.load(last)
    saved["lineage"] = {"segment": 1, "parent_sha256": status_sha(before, run_dir)}
    checkpoint.save(last, saved)  # as segment 1 of the other trainer left it
    line = refused_in_process(tiny_cache, run_dir, 0, capsys)
    assert line.startswith(f"{last}: the run was trained past segment 0"), line
    assert not (run_dir / "segments/0.json").exists()


def status_sha(files: dict[Path, bytes], run_dir: Path) -> str:
    return json.loads(files[run_dir / "segments/0.json"])["last_pt_sha256"]
