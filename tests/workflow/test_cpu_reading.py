"""A CPU user reads CPU words: the export's card says how to get PyTorch's CPU build (pip's
default torch brings CUDA and its nvidia-* wheels), and a CPU run's summary.md speaks of
workers where a GPU run's speaks of GPUs."""

from __future__ import annotations

import json
from pathlib import Path

from chesslm.export import card
from chesslm.report import summary
from tests.workflow.test_summary import make_run


def test_the_cards_requirements_give_pytorchs_cpu_index() -> None:
    facts = card.Facts(run="r", checkpoint={}, identity={}, manifest={}, receipt={}, results={})
    text = card.use(facts)
    assert "`pip install torch transformers safetensors chess`" in text
    assert "`pip install torch --index-url https://download.pytorch.org/whl/cpu`" in text


def on_the_cpu(run_dir: Path) -> Path:
    """The synthetic run's records as a CPU run writes them (``device: cpu``)."""
    for path in [*run_dir.glob("segments/*.json"), run_dir / "probe-results.json"]:
        if path.is_file():
            record = json.loads(path.read_text())
            path.write_text(json.dumps(record | {"device": "cpu"}))
    results = run_dir / "results.json"  # the trainer's clock, under the records' one key
    results.write_text(json.dumps(json.loads(results.read_text()) | {"gpu_work_wall_seconds": 9}))
    return run_dir


def test_a_cpu_runs_summary_says_workers_not_gpus(tmp_path: Path) -> None:
    text = summary.summarise(on_the_cpu(make_run(tmp_path / "cpu", gpus=0)))["summary"]
    text = text.read_text()
    assert "per GPU" not in text and "gpu_work_wall_seconds" not in text
    assert "- probe, microbatch 8 per worker:" in text
    assert "work wall time of the workers (CPU)" in text


def test_a_gpu_runs_summary_says_gpus(tmp_path: Path) -> None:
    text = summary.summarise(make_run(tmp_path / "gpu"))["summary"].read_text()
    assert "- probe, microbatch 8 per GPU:" in text and "per worker" not in text
