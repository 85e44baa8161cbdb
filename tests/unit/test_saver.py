"""Checkpoint saves in the background (chesslm.train.saver): the same file as a synchronous
save, isolated from the training that goes on, one save queued behind the one in flight
without waiting for the disk, and its errors at the next wait."""

from __future__ import annotations

import re
import resource
import shutil
import threading
import weakref
from pathlib import Path

import pytest
import torch

from chesslm.files import DiskFullError, sha256_file
from chesslm.model import checkpoint
from chesslm.train.saver import Saver, Snapshot
from tests import helpers


def small_payload() -> dict:
    return helpers.small_payload(stepped=True)


def at_step(step: int) -> dict:
    payload = small_payload()
    payload["cursor"]["step"] = step
    return payload


def step_in(path: Path) -> int:
    checkpoint.verify(path)
    return checkpoint.load(path)["cursor"]["step"]


class Gate:
    """A payload entry whose pickling (in the writer thread, inside torch.save, with the
    temporary file open) waits until the test opens it: a save held in flight by a real
    event, with no hook in the saver. Saved as the string "gate"."""

    def __init__(self) -> None:
        self.entered = threading.Event()  # the writer is inside the save
        self.opened = threading.Event()

    def __deepcopy__(self, memo: dict) -> Gate:
        return self  # the snapshot holds the gate itself

    def __reduce__(self) -> tuple:
        self.entered.set()
        assert self.opened.wait(10), "the test never opened the gate"
        return (str, ("gate",))

    def open(self) -> None:
        self.opened.set()


def held(saver: Saver, path: Path, step: int) -> Gate:
    """Submit a save of ``step`` to ``path`` and return once the writer is inside it."""
    payload, gate = at_step(step), Gate()
    payload["gate"] = gate
    saver.submit(path, payload)
    assert gate.entered.wait(10), "the writer never started the save"
    return gate


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


def test_a_submit_while_a_save_is_in_flight_returns_without_waiting_for_it(
    tmp_path: Path,
) -> None:
    last = tmp_path / "last.pt"
    saver = Saver()
    gate = held(saver, last, 1)
    queued = at_step(2)
    sync = checkpoint.save(tmp_path / "sync.pt", queued)
    # were it to wait for the save in flight, this would stop at the closed gate
    saver.submit(last, queued, best=tmp_path / "best.pt")
    assert not gate.opened.is_set() and saver.busy() and not last.exists()
    train_on(queued)  # the queued snapshot must not see it
    gate.open()
    assert saver.wait() == sync == sha256_file(tmp_path / "best.pt")
    assert not saver.busy()
    saver.close()
    assert last.read_bytes() == (tmp_path / "sync.pt").read_bytes()  # the queued state, as is


def test_three_submits_in_a_row_leave_the_last_ones_state(tmp_path: Path) -> None:
    saver = Saver()
    for step in range(3):
        saver.submit(tmp_path / "last.pt", at_step(step))  # the middle one may be dropped
    assert saver.wait() == sha256_file(tmp_path / "last.pt")
    saver.close()
    assert step_in(tmp_path / "last.pt") == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]


def test_a_newer_submit_replaces_the_queued_save_and_reuses_its_buffers(tmp_path: Path) -> None:
    """Two snapshots at most: the one in flight and the one queued, each in its own buffer
    set; a replaced one is dropped (not kept while the next is taken) and its set reused."""
    last = tmp_path / "last.pt"
    saver = Saver()
    gate = held(saver, last, 1)
    assert saver.writing is not None and saver.writing.buffers is saver.snapshots[0]
    saver.submit(last, at_step(2))
    assert saver.queued is not None and saver.queued.buffers is saver.snapshots[1]
    replaced = weakref.ref(saver.queued.payload["model"]["lm_head.weight"])
    saver.submit(last, at_step(3))
    assert replaced() is None  # its copy is gone
    assert saver.queued.buffers is saver.snapshots[1]
    assert saver.queued.payload["cursor"]["step"] == 3
    gate.open()
    saver.wait()
    assert step_in(last) == 3 and saver.writing is None and saver.queued is None
    saver.submit(last, at_step(4))  # nothing in flight: the first set again
    saver.close()
    assert step_in(last) == 4


def test_best_stays_the_best_validations_state_when_saves_queue_up(tmp_path: Path) -> None:
    """A queued save is replaced by a newer one, best or not, unless it links best.pt and the
    newer one does not (a segment's final save): that one waits for the writer to take it."""
    last, best = tmp_path / "last.pt", tmp_path / "best.pt"
    saver = Saver()
    gate = held(saver, last, 1)
    saver.submit(last, at_step(2))  # queued, no improvement
    saver.submit(last, at_step(3), best=best)  # an improvement replaces it
    saver.submit(last, at_step(4), best=best)  # a better one replaces that
    opener = threading.Timer(0.05, gate.open)
    opener.start()
    saver.submit(last, at_step(5))  # the final save: it must not drop step 4's best
    assert gate.opened.is_set()  # so it waited until the writer took step 4
    assert saver.wait() == sha256_file(last)
    saver.close()
    opener.join()
    assert step_in(best) == 4 and step_in(last) == 5
    assert best.stat().st_ino != last.stat().st_ino


def test_a_save_queued_behind_a_failed_one_is_dropped_and_the_error_raised(
    tmp_path: Path,
) -> None:
    """Nothing is written after a failure the trainer has not been told of yet."""
    run = tmp_path / "run"
    run.mkdir()
    saver = Saver()
    gate = held(saver, run / "last.pt", 1)
    saver.submit(tmp_path / "last.pt", at_step(2))
    shutil.rmtree(run)  # the run directory removed under the writer: its rename fails
    gate.open()
    error = error_of(saver.wait)
    assert isinstance(error, FileNotFoundError) and str(run / "last.pt") in str(error)
    assert not (tmp_path / "last.pt").exists()
    saver.submit(tmp_path / "last.pt", at_step(3))  # raised once: saving goes on
    assert saver.wait() == sha256_file(tmp_path / "last.pt")
    saver.close()
    assert step_in(tmp_path / "last.pt") == 3


def error_of(call) -> BaseException:
    with pytest.raises(Exception) as caught:
        call()
    return caught.value


def own(error: BaseException) -> str:
    """An error's text, its writer's own temporary name (pid, random part) left out."""
    return re.sub(r"\.\d+\.[0-9a-f]{8}\.tmp", ".tmp", str(error))


def test_a_write_error_surfaces_at_the_next_wait_as_a_synchronous_save_says_it(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "gone" / "last.pt"  # a directory removed under the trainer
    sync = error_of(lambda: checkpoint.save(missing, small_payload()))
    saver = Saver()
    saver.submit(missing, small_payload())  # returns: the error is the writer's
    background = error_of(saver.wait)
    assert type(background) is type(sync) and own(background) == own(sync)
    assert f"{missing.parent}/.{missing.name}." in str(background)  # its own temporary
    saver.submit(missing, small_payload())  # and at the next save, once that one failed
    saver.thread.join()
    assert own(error_of(lambda: saver.submit(tmp_path / "last.pt", {}))) == own(sync)
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
    # a save queued behind one in flight: in the second pinned set; both sets reused after
    saver, pointers = Saver(), []
    for _ in range(2):
        gate = Gate()
        saver.submit(tmp_path / "last.pt", {**on_gpu, "gate": gate})
        assert gate.entered.wait(10)
        saver.submit(tmp_path / "last.pt", on_gpu)
        gate.open()
        saver.wait()
        pointers.append([[b.data_ptr() for b in s.pinned] for s in saver.snapshots])
    saver.close()
    assert all(b.is_pinned() for s in saver.snapshots for b in s.pinned)
    assert pointers[0] == pointers[1] and all(pointers[0])
    loaded = checkpoint.load(tmp_path / "last.pt")
    for name, tensor in payload["model"].items():
        assert torch.equal(loaded["model"][name], tensor), name


def test_best_is_a_copy_of_that_last_and_keeps_it_when_last_moves_on(tmp_path: Path) -> None:
    """best.pt is its own file with last.pt's bytes (one damaged byte leaves the other copy
    intact: issue 63 item 3), and a later last.pt leaves it as it was; the saver reports no
    save in flight once the writer is done."""
    saver = Saver()
    first = small_payload()
    saver.submit(tmp_path / "last.pt", first, best=tmp_path / "best.pt")
    saver.wait()
    assert not saver.busy()
    assert (tmp_path / "best.pt").stat().st_ino != (tmp_path / "last.pt").stat().st_ino
    assert (tmp_path / "best.pt").read_bytes() == (tmp_path / "last.pt").read_bytes()
    later = small_payload()
    later["cursor"]["step"] = 9
    saver.submit(tmp_path / "last.pt", later)
    saver.close()
    checkpoint.verify(tmp_path / "best.pt")
    assert checkpoint.load(tmp_path / "best.pt")["cursor"]["step"] == first["cursor"]["step"]
    assert checkpoint.load(tmp_path / "last.pt")["cursor"]["step"] == 9
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt", "last.pt"]
