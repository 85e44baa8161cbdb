"""Checkpoint saves in the background (chesslm.train.saver): the same file as a synchronous
save, isolated from the training that goes on, and its errors at the next wait."""

from __future__ import annotations

import resource
from pathlib import Path

import pytest
import torch

from chesslm.files import DiskFullError, sha256_file
from chesslm.train import checkpoint
from chesslm.train.saver import Saver, Snapshot
from tests import helpers


def small_payload() -> dict:
    return helpers.small_payload(stepped=True)


def train_on(payload: dict) -> None:
    """What the next updates do to the objects a payload holds: change them in place."""
    for tensor in payload["model"].values():
        tensor.add_(1)
    for state in payload["optimizer"]["state"].values():
        for value in state.values():
            value.add_(1)
    payload["metrics"]["history"].append({"step": 4})


def test_a_background_save_is_byte_for_byte_the_synchronous_one(tmp_path: Path) -> None:
    payload = small_payload()
    assert payload["optimizer"]["state"], "the payload should hold AdamW moments"
    tied = payload["model"]["lm_head.weight"], payload["model"]["transformer.wte.weight"]
    assert tied[0].untyped_storage()._cdata == tied[1].untyped_storage()._cdata
    sync = checkpoint.save(tmp_path / "sync.pt", payload)
    saver = Saver()
    saver.submit(tmp_path / "last.pt", payload, best=tmp_path / "best.pt")
    train_on(payload)  # while the writer may still be writing: the snapshot must not see it
    assert saver.wait() == sha256_file(tmp_path / "last.pt")
    saver.close()
    assert (tmp_path / "last.pt").read_bytes() == (tmp_path / "sync.pt").read_bytes()
    assert sha256_file(tmp_path / "best.pt") == sync
    checkpoint.verify(tmp_path / "last.pt")
    loaded = checkpoint.load(tmp_path / "last.pt")
    assert loaded["metrics"]["history"] == [] and loaded["cursor"]["step"] == 3
    head, embedding = loaded["model"]["lm_head.weight"], loaded["model"]["transformer.wte.weight"]
    assert head.untyped_storage()._cdata == embedding.untyped_storage()._cdata  # still tied
    assert not list(tmp_path.glob("*.tmp"))


def test_a_snapshot_keeps_views_and_shared_storages() -> None:
    base = torch.arange(12.0)
    payload = {"whole": base, "view": base[3:9].view(2, 3).t(), "step": torch.tensor(5.0)}
    copy = Snapshot().take(payload)
    base.zero_()
    assert torch.equal(copy["view"], torch.arange(12.0)[3:9].view(2, 3).t())
    assert copy["view"].untyped_storage()._cdata == copy["whole"].untyped_storage()._cdata
    assert copy["view"].stride() == payload["view"].stride() and copy["step"].item() == 5.0


def test_at_most_one_save_is_in_flight(tmp_path: Path) -> None:
    saver = Saver()
    for step in range(3):
        payload = small_payload()
        payload["cursor"]["step"] = step
        saver.submit(tmp_path / "last.pt", payload)
        if step:  # a save starts once the one before it is on disk
            assert checkpoint.load(tmp_path / "last.pt")["cursor"]["step"] >= step - 1
    saver.close()
    assert checkpoint.load(tmp_path / "last.pt")["cursor"]["step"] == 2


def error_of(call) -> BaseException:
    with pytest.raises(Exception) as caught:
        call()
    return caught.value


def test_a_write_error_surfaces_at_the_next_wait_as_a_synchronous_save_says_it(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "gone" / "last.pt"  # a directory removed under the trainer
    sync = error_of(lambda: checkpoint.save(missing, small_payload()))
    saver = Saver()
    saver.submit(missing, small_payload())  # returns: the error is the writer's
    background = error_of(saver.wait)
    assert type(background) is type(sync) and str(background) == str(sync)
    assert str(missing) + ".tmp" in str(background)
    saver.submit(missing, small_payload())  # and at the next save, which waits first
    assert str(error_of(lambda: saver.submit(tmp_path / "last.pt", {}))) == str(sync)
    assert saver.wait() is None  # the error was raised once; nothing reached the disk
    saver.close()


def test_a_file_size_limit_in_the_writer_is_one_line_naming_the_file(tmp_path: Path) -> None:
    last = tmp_path / "last.pt"
    checkpoint.save(last, small_payload())  # the checkpoint before: it must stay
    before = sha256_file(last)
    saver = Saver()
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, limit[1]))  # python ignores SIGXFSZ
    try:
        sync = error_of(lambda: checkpoint.save(last, small_payload()))
        saver.submit(last, small_payload())
        background = error_of(saver.wait)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limit)
    saver.close()
    assert isinstance(background, DiskFullError) and str(background) == str(sync)
    assert str(background).startswith(f"{last}: file too large: the write stopped at 200000")
    assert "\n" not in str(background)
    assert sha256_file(last) == before and not list(tmp_path.glob("*.tmp"))


def test_closing_a_failing_segment_logs_the_save_error_instead_of_raising(
    tmp_path: Path, caplog
) -> None:
    saver = Saver()
    saver.submit(tmp_path / "gone" / "last.pt", small_payload())
    saver.close(failing=True)
    assert "the checkpoint save in flight failed too" in caplog.text


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_cuda_snapshot_equals_the_state_and_reuses_its_pinned_buffers(tmp_path: Path) -> None:
    payload = small_payload()
    device = torch.device("cuda")
    on_gpu = {
        **payload,
        "model": {k: v.to(device) for k, v in payload["model"].items()},
    }
    snapshot = Snapshot()
    first = snapshot.take(on_gpu)
    buffers = [b.data_ptr() for b in snapshot.pinned]
    assert buffers and all(b.is_pinned() for b in snapshot.pinned)
    for name, tensor in payload["model"].items():
        assert first["model"][name].device.type == "cpu"
        assert torch.equal(first["model"][name], tensor), name
    snapshot.take(on_gpu)
    assert [b.data_ptr() for b in snapshot.pinned] == buffers  # reused, not reallocated
    saver = Saver()
    saver.submit(tmp_path / "last.pt", on_gpu)
    saver.close()
    loaded = checkpoint.load(tmp_path / "last.pt")
    for name, tensor in payload["model"].items():
        assert torch.equal(loaded["model"][name], tensor), name


def test_best_is_a_link_to_that_last_and_keeps_it_when_last_moves_on(tmp_path: Path) -> None:
    """best.pt costs no second write, and a later last.pt (a new file by rename) leaves it
    as it was; the saver reports no save in flight once the writer is done."""
    saver = Saver()
    first = small_payload()
    saver.submit(tmp_path / "last.pt", first, best=tmp_path / "best.pt")
    saver.wait()
    assert not saver.busy()
    assert (tmp_path / "best.pt").stat().st_ino == (tmp_path / "last.pt").stat().st_ino
    later = small_payload()
    later["cursor"]["step"] = 9
    saver.submit(tmp_path / "last.pt", later)
    saver.close()
    checkpoint.verify(tmp_path / "best.pt")
    assert checkpoint.load(tmp_path / "best.pt")["cursor"]["step"] == first["cursor"]["step"]
    assert checkpoint.load(tmp_path / "last.pt")["cursor"]["step"] == 9
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt", "last.pt"]
