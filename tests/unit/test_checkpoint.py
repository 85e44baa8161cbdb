from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
import torch

from chesslm.files import sha256_file
from chesslm.model import checkpoint, gpt
from chesslm.train import checkpoint as train_checkpoint
from chesslm.train import status as segment_status
from chesslm.train.settings import RunSettings
from tests import helpers
from tests.helpers import ROOT


def small_payload() -> dict:
    return helpers.small_payload(stepped=False)


def test_save_is_atomic_and_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "last.pt"
    digest = checkpoint.save(path, small_payload())
    assert not list(tmp_path.glob("*.tmp")) and len(digest) == 64
    loaded = checkpoint.load(path)
    assert loaded["cursor"]["step"] == 3
    net = gpt.build("tiny")
    net.load_state_dict(loaded["model"])


def test_every_single_byte_corruption_is_reported_as_corruption_before_unpickling(
    tmp_path: Path, monkeypatch
) -> None:
    """Flip one byte at a time (header, zip records, tensor data, the end): each is reported
    as corruption naming the file, and none reaches torch.load."""
    path = tmp_path / "last.pt"
    checkpoint.save(path, small_payload())
    good = path.read_bytes()
    loads = []
    real_load = torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **k: loads.append(a) or real_load(*a, **k))
    rng = random.Random(0)
    size = len(good)
    offsets = sorted(
        set(range(checkpoint.HEADER_SIZE + 64))
        | set(range(size - 64, size))
        | set(rng.sample(range(size), 500))
    )
    for offset in offsets:
        damaged = bytearray(good)
        damaged[offset] ^= 1 << rng.randrange(8)
        path.write_bytes(damaged)
        with pytest.raises(checkpoint.CheckpointError) as error:
            checkpoint.load(path)
        message = str(error.value)
        assert message.startswith(f"{path}: corrupt checkpoint"), (offset, message)
        assert "do not resume" in message, message
    assert loads == []
    truncated = good[: size // 2]  # a torn file reads as corruption too
    path.write_bytes(truncated)
    with pytest.raises(checkpoint.CheckpointError, match="corrupt checkpoint"):
        checkpoint.load(path)
    assert loads == []
    path.write_bytes(good)
    assert checkpoint.load(path)["cursor"]["step"] == 3 and len(loads) == 1


def test_a_bare_torch_file_is_refused_as_unverifiable(tmp_path: Path) -> None:
    path = tmp_path / "old.pt"
    torch.save(small_payload(), path)
    with pytest.raises(checkpoint.CheckpointError, match=f"{path}: a bare torch.save file"):
        checkpoint.load(path)


class Boom:
    def __reduce__(self):
        return (os.system, ("touch " + str(Path(os.environ["BOOM_MARK"])),))


def test_a_pickled_callable_is_refused_and_never_executed(tmp_path: Path, monkeypatch) -> None:
    mark = tmp_path / "executed"
    monkeypatch.setenv("BOOM_MARK", str(mark))
    evil = tmp_path / "evil.pt"
    payload = small_payload()
    payload["metrics"]["hook"] = Boom()
    checkpoint.save(evil, payload)  # a digest that matches: the pickle check must still refuse
    with pytest.raises(checkpoint.CheckpointError, match="refused.*nothing was executed") as caught:
        checkpoint.load(evil)
    assert not mark.exists()
    # one line naming what is refused, without torch's advice to load it unsafely
    message = str(caught.value)
    assert "\n" not in message and "GLOBAL posix.system" in message, message
    assert "False" not in message and "Re-running" not in message, message


def test_rng_state_restores_exactly() -> None:
    state = train_checkpoint.rng_state(torch.device("cpu"))
    a = torch.rand(3)
    train_checkpoint.restore_rng(state, torch.device("cpu"))
    assert torch.equal(torch.rand(3), a)


def test_identity_mismatch_names_what_changed() -> None:
    saved = {"lr": 3e-4, "world_size": 2, "model": {"preset": "tiny", "n_layer": 2}, "seed": 1}
    now = {"lr": 1e-3, "world_size": 2, "model": {"preset": "tiny", "n_layer": 4}, "seed": 1}
    assert train_checkpoint.identity_differences(saved, now) == ["lr", "model.n_layer"]
    with pytest.raises(ValueError, match=r"changed: lr, model\.n_layer"):
        train_checkpoint.check_identity(saved, now)
    train_checkpoint.check_identity(saved, dict(saved))


def test_a_code_edit_refuses_resume_naming_the_module_and_what_to_do() -> None:
    gpt_py, segment, trainer = "chesslm/model/gpt.py", "chesslm/train/segment.py", "trainer.py"
    saved = {"training_code": {gpt_py: "a" * 64, segment: "b" * 64, trainer: "c" * 64}}
    now = {"training_code": {gpt_py: "d" * 64, segment: "e" * 64, trainer: "c" * 64}}
    with pytest.raises(checkpoint.CheckpointError) as caught:
        train_checkpoint.check_identity(saved, now, run_dir="results/demo")
    message = str(caught.value)
    assert (
        "changed: training_code.chesslm/model/gpt.py, training_code.chesslm/train/segment.py"
        in message
    )
    assert "checkpoint (chesslm/model/gpt.py, chesslm/train/segment.py); a run" in message
    assert "trainer.py" not in message
    assert "restore that code" in message and "new run name" in message
    assert "remove results/demo" in message


def _identity(model_config: dict) -> dict:
    return train_checkpoint.identity(
        RunSettings(dataset="d", lr=1e-3, seed=3, schedule_steps=9, warmup_steps=2),
        model_config=model_config,
        parameters=10,
        dataset_fingerprint="f",
        receipt_sha256=None,
        world_size=2,
    )


def test_the_training_code_is_the_explicit_list_by_real_paths() -> None:
    """Every entry of TRAINING_CODE names files, each hashed under its path from the repository
    root: the model floor and the data modules that build the batches too."""
    hashed = _identity({"n_layer": 2})["training_code"]
    assert list(hashed) == [p.relative_to(ROOT).as_posix() for p in train_checkpoint.code_files()]
    for pattern in train_checkpoint.TRAINING_CODE:
        assert any(Path(name).match(pattern) for name in hashed), pattern
    assert {"chesslm/train/segment.py", "chesslm/train/checkpoint.py", "chesslm/model/gpt.py",
            "chesslm/model/checkpoint.py", "chesslm/model/presets.py", "chesslm/data/cache.py",
            "chesslm/data/conditioning.py"} <= set(hashed)  # fmt: skip
    assert hashed["chesslm/model/gpt.py"] == sha256_file(ROOT / "chesslm/model/gpt.py")


def test_an_entry_that_names_no_file_is_an_error(monkeypatch) -> None:
    monkeypatch.setattr(
        train_checkpoint, "TRAINING_CODE", ("chesslm/train/*.py", "chesslm/gone.py")
    )
    with pytest.raises(FileNotFoundError, match="TRAINING_CODE entry 'chesslm/gone.py' matches no"):
        train_checkpoint.code_hashes()


def test_a_run_started_before_the_model_floor_refuses_to_resume() -> None:
    """An identity written before chesslm/model/ (code hashed by file name under chesslm/train/,
    no conditioning in the model's config) differs from today's: the usual refusal, naming the
    training code and what to do."""
    now = _identity(gpt.build("tiny").config.to_dict())
    before = {**now, "model": {k: v for k, v in now["model"].items() if k != "conditioning"}}
    before["training_code"] = {
        Path(name).name: digest for name, digest in now["training_code"].items()
        if name.startswith("chesslm/train/")
    }  # fmt: skip
    before["training_code"]["model.py"] = "f" * 64
    with pytest.raises(checkpoint.CheckpointError) as caught:
        train_checkpoint.check_identity(before, now, run_dir="results/demo")
    message = str(caught.value)
    assert "model.conditioning: checkpoint None != now 'none'" in message
    assert "training_code.model.py" in message and "training_code.chesslm/model/gpt.py" in message
    assert "The training code changed since this run's last checkpoint (" in message
    assert "chesslm/model/gpt.py" in message and "restore that code" in message


def test_identity_takes_the_settings_identity_fields() -> None:
    settings = RunSettings(dataset="d", lr=1e-3, seed=3, schedule_steps=9, warmup_steps=2)
    record = train_checkpoint.identity(
        settings,
        model_config={"n_layer": 2},
        parameters=10,
        dataset_fingerprint="f",
        receipt_sha256=None,
        world_size=2,
    )
    assert {k: record[k] for k in settings.identity()} == settings.identity()
    assert record["model"]["preset"] == "tiny" and record["device"] == "cpu"
    assert "workers" not in record and "max_seconds" not in record  # not identity: may change
    assert set(record["training_code"]) >= {"chesslm/train/settings.py", "chesslm/model/gpt.py"}


def test_best_needs_an_improvement_above_the_threshold() -> None:
    assert train_checkpoint.improved(1.0, float("inf"))
    assert not train_checkpoint.improved(0.99995, 1.0)
    assert train_checkpoint.improved(0.9998, 1.0)


def flip_a_body_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[(checkpoint.HEADER_SIZE + len(data)) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def finished_run(root: Path, *, best_is_last: bool) -> Path:
    """A run's train/ folder as a finished run leaves it: best.pt, last.pt, results.json."""
    train = root / "results" / "r" / "train"
    train.mkdir(parents=True)
    checkpoint.save(
        train / "best.pt", {"model": {"w": torch.zeros(64)}, "cursor": 1, "identity": {}}
    )
    if best_is_last:
        (train / "last.pt").write_bytes((train / "best.pt").read_bytes())
    else:
        checkpoint.save(
            train / "last.pt", {"model": {"w": torch.ones(64)}, "cursor": 2, "identity": {}}
        )
    best_sha = sha256_file(train / "best.pt")
    (train / "results.json").write_text(f'{{"best_checkpoint_sha256": "{best_sha}"}}')
    return train / "best.pt"


@pytest.mark.parametrize("best_is_last", [True, False], ids=["best-is-last", "best-earlier"])
def test_the_plan_refuses_a_damaged_best_pt_naming_the_copy_to_restore(
    tmp_path: Path, best_is_last: bool
) -> None:
    """status.planned_checkpoint (the plan's check, common.smk): an intact best.pt passes; a
    damaged one is one line naming it and last.pt when that holds the same bytes, else the
    command that trains the run again."""
    best = finished_run(tmp_path, best_is_last=best_is_last)
    assert segment_status.planned_checkpoint(best) == best
    good = best.read_bytes()
    flip_a_body_byte(best)
    with pytest.raises(ValueError) as refused:
        segment_status.planned_checkpoint(best)
    line = str(refused.value)
    assert "\n" not in line and line.startswith(f"{best}: corrupt checkpoint: "), line
    assert "restore an intact copy" not in line, line  # the general advice, replaced
    if best_is_last:
        assert line.endswith(f"cp -p {best.with_name('last.pt')} {best}"), line
        os.system(line.rsplit(": ", 1)[1])  # the way out, as printed
        assert best.read_bytes() == good
        assert segment_status.planned_checkpoint(best) == best
    else:
        assert (
            "no intact copy is kept" in line and f"rm -r {best.parent.parent} && snakemake" in line
        )
    best.unlink()
    with pytest.raises(ValueError, match=r"best\.pt: missing, though \S+results\.json says"):
        segment_status.planned_checkpoint(best)


def test_a_damaged_best_pt_and_last_pt_name_the_segment_end_copy(tmp_path: Path) -> None:
    """The best step was the last and last.pt is damaged too: the segment-end copy (a third
    file with the same bytes, chesslm.train.segment_end) is the one named, and restores."""
    best = finished_run(tmp_path, best_is_last=True)
    kept = best.with_name("segment-end.pt")
    kept.write_bytes(best.read_bytes())
    good = best.read_bytes()
    flip_a_body_byte(best)
    flip_a_body_byte(best.with_name("last.pt"))
    with pytest.raises(ValueError) as refused:
        segment_status.planned_checkpoint(best)
    line = str(refused.value)
    assert line.endswith(f"cp -p {kept} {best}"), line
    os.system(line.rsplit(": ", 1)[1])
    assert best.read_bytes() == good
