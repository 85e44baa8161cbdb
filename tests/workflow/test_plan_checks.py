"""Values that used to pass the plan and fail later without naming their key, each refused at
plan time in one line naming it: a seed beyond 2**32 - 1, lr: 1e300, NaN or infinity
anywhere, a ``pgn`` path that is a folder, ``play.device: cuda`` where jobs run without CUDA
(real snakemake); a ladder engine that floods its output (``/usr/bin/yes``) is refused in one
line in bounded memory; ``conditioning: elo`` on a train split without ratings is refused
when the segment starts, and one with some says how many lack one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from chesslm import config as chesslm_config
from tests.conftest import ROOT, run_segment, segment_args
from tests.helpers import snakemake
from tests.workflow.test_config import merged
from tests.workflow.test_workflow_data import make_workdir

REFUSED = [
    ("runs: {demo: {dataset: sample, seed: 1180591620717411303424}}", "runs.demo.seed: "),
    ("runs: {demo: {dataset: sample, lr: 1.0e+300}}", "runs.demo.lr: 1e+300 is greater"),
    ("runs: {demo: {dataset: sample, lr: .nan}}", "runs.demo.lr: nan is not a finite number"),
    ("runs: {demo: {dataset: sample, play: {temperature: .inf}}}", "runs.demo.play.temperature"),
    ("ladders: {small: {seed: -1}}", "ladders.small.seed: -1 is less than the minimum of 0"),
    (
        "datasets: {sample: {inputs: [resources]}}",
        "datasets.sample.inputs[0]: resources is a folder",
    ),
    ("datasets: {old: {pgn: [resources]}}", "datasets.old.pgn[0]: resources is a folder"),
]


@pytest.mark.parametrize(("extra", "named"), REFUSED)
def test_a_value_that_would_fail_later_is_refused_naming_its_key(
    extra: str, named: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)  # the pgn folder, resources/, as the workflow sees it
    with pytest.raises(chesslm_config.ConfigError) as refused:
        chesslm_config.load(merged(extra))
    line = str(refused.value)
    assert line.startswith(f"config: {named}") and "\n" not in line, line


def plan(tmp_path: Path, extra: str, *flags: str) -> tuple[int, list[str], str]:
    """A dry run (``flags``: ``-n`` by default) of the demo's play with ``extra`` as a second
    config file: its exit status, the console's lines that start with "config: ", and the whole
    console."""
    workdir = make_workdir(tmp_path)
    (workdir / "extra.yaml").write_text(extra)
    result = snakemake(workdir, "results/demo/play/move-match.json", "--configfile",
                       "extra.yaml", *(flags or ("-n",)), check=False)  # fmt: skip
    output = result.stdout + result.stderr
    return result.returncode, [x for x in output.splitlines() if x.startswith("config: ")], output


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_play_on_cuda_where_jobs_run_without_cuda_is_refused_at_plan_time(tmp_path: Path) -> None:
    """Refused while snakemake builds the jobs it is about to run here, before any runs; a dry
    run plans it (a GPU run is planned on a laptop before it goes to the cluster)."""
    extra = "runs: {demo: {play: {device: cuda}}}\n"
    code, lines, output = plan(tmp_path / "run", extra, "--cores", "1")
    assert code == 1 and len(lines) == 1, output[-3000:]
    assert lines[0].startswith("config: runs.demo.play.device is cuda, but torch sees no CUDA")
    assert "Traceback" not in output and "Exception" not in output, output[-3000:]
    assert not list((tmp_path / "run").rglob("results/datasets/*/manifest.json"))  # none ran
    code, lines, output = plan(tmp_path / "dry", extra)
    assert code == 0 and not lines, output[-3000:]


@pytest.mark.slow
def test_a_ladder_engine_that_floods_its_output_is_refused_in_one_line(tmp_path: Path) -> None:
    """``yes`` writes gigabytes in the handshake's 5 s (the plan grew to 3-5 GB and ended in
    MemoryError): the handshake reads at most HANDSHAKE_BYTES."""
    code, lines, output = plan(tmp_path, "ladders: {small: {engine: /usr/bin/yes}}\n")
    assert code == 1 and len(lines) == 1, output[-3000:]
    assert lines[0] == (
        "config: ladders.small.engine: /usr/bin/yes is not a UCI engine: it did not answer"
        " `uci` with `uciok` in its first 1048576 bytes"
    )
    assert "Traceback" not in output and "MemoryError" not in output


def test_the_handshake_with_a_flooding_engine_stays_in_bounded_memory() -> None:
    """The handshake in a process of its own, which reports its peak memory: within 64 MB of
    the interpreter's with chesslm.ladder.players imported."""
    code = (
        "import resource\n"
        "from chesslm.ladder import players\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "try:\n"
        "    players.handshake('/usr/bin/yes')\n"
        "except ValueError as error:\n"
        "    print(error)\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, check=True)  # fmt: skip
    said, grown_kb = done.stdout.splitlines()
    assert said.endswith("in its first 1048576 bytes") and int(grown_kb) < 64 * 1024, done.stdout


@pytest.mark.slow
def test_conditioning_elo_on_games_without_ratings_is_refused(
    tiny_cache: Path, tmp_path: Path
) -> None:
    """tiny_cache's games have no ratings at all: the segment refuses in one line naming the
    key, before any update."""
    run_dir = tmp_path / "unrated"
    args = segment_args(tiny_cache, run_dir, 0) + ["--conditioning=elo"]
    result = run_segment([*args, "--model=tiny", "--max-updates=1"], workers=1)
    assert result.returncode == 1, result.stderr[-3000:]
    assert "runs.unrated.conditioning is elo, but none of the 24 training games" in result.stderr
    assert not (run_dir / "train/last.pt").exists()


@pytest.mark.slow
def test_conditioning_elo_says_how_many_games_lack_a_rating(
    rated_cache: Path, tmp_path: Path
) -> None:
    """rated_cache: every 5th game's ratings unknown, 5 of the 24 training games."""
    run_dir = tmp_path / "rated"
    args = segment_args(rated_cache, run_dir, 0) + ["--dataset=rated", "--conditioning=elo"]
    result = run_segment([*args, "--model=tiny", "--max-updates=1"], workers=1)
    assert result.returncode == 0, result.stderr[-3000:]
    said = "runs.rated.conditioning is elo: 5 of the 24 training games (20.8%) lack a player's"
    assert said in result.stderr, result.stderr[-3000:]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_a_job_on_cuda_without_cuda_fails_in_one_line(tmp_path: Path) -> None:
    """Where the plan cannot see the job's machine (a cluster node), the model's load refuses
    a CUDA device without CUDA in one line (logs.step prints it), not torch's traceback."""
    from chesslm.export.load import model_at
    from tests.helpers import model_checkpoint

    ckpt = model_checkpoint(tmp_path / "best.pt")
    with pytest.raises(ValueError) as refused:
        model_at(ckpt, "cuda")
    line = str(refused.value)
    assert line.startswith("device cuda: torch sees no CUDA device") and "\n" not in line
