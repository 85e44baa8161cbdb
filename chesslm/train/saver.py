"""Checkpoint saves off the training's critical path: snapshot here, write in the background.

The training thread only copies the payload's tensors to the host (``Snapshot``; on CUDA into
pinned buffers kept from one save to the next, with non-blocking copies and one event sync; on
the CPU a plain clone) and hands the copy to ONE writer thread, which runs ``checkpoint.save``
(the same format and the same atomic writer as a synchronous save) and then copies that
``last.pt`` to ``best.pt`` on improvement (its own file, checked by its sha256: a link would
share one damaged byte between the two, with no copy left to restore). So a kill at
any moment still leaves a verified ``last.pt``: the one before, or the new one.

One save is in flight and at most one is queued behind it, so a check that comes while a
save is being written does not wait for the disk: ``submit`` snapshots into the buffer set
the save in flight does not use (two sets: memory for two snapshots at most, pinned on CUDA
once each and reused) and queues it; the writer writes it right after. A newer submit replaces
a queued save not yet started (the newest state wins; its buffers are reused), except that a
queued save linking ``best.pt`` is never replaced by one that does not link it (its state is
the best validation's; the new one's is not): that submit waits until the writer starts the
queued one. The segment submits while busy only on improvement (best) or for its final save,
so that wait is at most once a segment, right before it waits for all saves anyway.

``wait`` blocks until the saves in flight and queued are on disk and returns the last file's
sha256, or re-raises the first writer error (a full disk naming the file, ...); a submit
raises it too once the failed save is done, and a save queued behind a failed one is dropped.
Whoever records or reads ``last.pt`` must ``wait`` first.

The snapshot copies storages, not tensors, and rebuilds every tensor as the same view of its
copied storage: tied weights (the model's embedding and head) stay one storage, so the file
is byte for byte what a synchronous save of the same state writes on the CPU (on CUDA the
storages' location tags say ``cpu``; ``checkpoint.load`` maps everything to the CPU anyway).
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from chesslm import files
from chesslm.model import checkpoint

logger = logging.getLogger(__name__)


class Snapshot:
    """Host copies of a payload: containers rebuilt, tensors on copied storages."""

    def __init__(self) -> None:
        self.pinned: list[torch.UntypedStorage] = []  # by position in the payload, reused

    def take(self, payload: Any) -> Any:
        """A copy of ``payload`` that later training steps cannot change."""
        copies: dict[int, torch.UntypedStorage] = {}  # a source storage -> its host copy
        used = 0  # pinned buffers used so far
        cuda: torch.device | None = None  # a device whose copies are queued, to sync once

        def host(source: torch.UntypedStorage) -> torch.UntypedStorage:
            nonlocal used, cuda
            if source.device.type == "cpu":
                return source.clone()
            if used == len(self.pinned) or self.pinned[used].nbytes() != source.nbytes():
                pin = source.device.type == "cuda"
                buffer = torch.empty(source.nbytes(), dtype=torch.uint8, pin_memory=pin)
                self.pinned[used:] = [buffer.untyped_storage()]
            target = self.pinned[used]
            used += 1
            target.copy_(source, non_blocking=True)
            cuda = source.device if source.device.type == "cuda" else cuda
            return target

        def tensor(value: torch.Tensor) -> torch.Tensor:
            source = value.untyped_storage()
            key = source._cdata  # what torch.save tells storages apart by
            if key not in copies:
                copies[key] = host(source)
            out = torch.empty(0, dtype=value.dtype)
            out.set_(copies[key], value.storage_offset(), value.size(), value.stride())
            return out.requires_grad_(value.requires_grad)

        def tensors(value: Any) -> Iterator[torch.Tensor]:
            if isinstance(value, torch.Tensor):
                yield value
            elif isinstance(value, dict):
                for item in value.values():
                    yield from tensors(item)
            elif isinstance(value, list | tuple):
                for item in value:
                    yield from tensors(item)

        # deepcopy with the tensors' copies in its memo: containers are rebuilt with all that
        # torch.save's pickle sees (shared objects, a state_dict's _metadata) as it was
        memo = {id(value): tensor(value) for value in tensors(payload)}
        result = copy.deepcopy(payload, memo)
        if cuda is not None:  # one sync for all the copies, queued behind the updates
            done = torch.cuda.Event()
            done.record(torch.cuda.current_stream(cuda))
            done.synchronize()
        del self.pinned[used:]  # a smaller payload: free what it no longer uses
        return result


@dataclasses.dataclass
class Job:
    """One save: where to, the snapshot to write, the best.pt to link, the buffers it holds."""

    path: Path
    payload: Any
    best: Path | None
    buffers: Snapshot


class Saver:
    """One background writer of checkpoints: one save in flight, at most one queued behind it.

    Used from one thread (the training's); the writer is a thread of its own while there is
    something to write (not a daemon: a save in flight lands before the interpreter exits)."""

    def __init__(self) -> None:
        self.snapshots = (Snapshot(), Snapshot())  # two buffer sets: in flight and queued
        self.lock = threading.Condition()  # guards the four below; notified by the writer
        self.writing: Job | None = None  # the save in flight (None: the writer is done)
        self.queued: Job | None = None  # the next one (only while one is in flight)
        self.error: BaseException | None = None  # the first writer error not yet raised
        self.last_sha: str | None = None  # of the last save that reached the disk
        self.thread: threading.Thread | None = None

    def submit(self, path: Path, payload: dict[str, Any], *, best: Path | None = None) -> None:
        """Save ``payload`` to ``path`` (and link ``best`` to it) in the background: at once,
        or right after the save in flight, replacing a save still queued behind it (the newest
        state wins). Waits only to keep a queued save that links best.pt when this one does
        not (the module's docstring).

        :raises OSError: (or any error) of an earlier save that failed, as ``wait`` does.
        """
        with self.lock:
            while self.queued is not None and self.queued.best is not None and best is None:
                self.lock.wait()  # until the writer starts it (or drops it, failing)
            self.raise_error()
            if self.queued is not None:  # replaced: its copy goes, its buffers are reused
                buffers, self.queued = self.queued.buffers, None
                logger.info("a queued checkpoint save is replaced by a newer one: %s", path)
            elif self.writing is not None and self.writing.buffers is self.snapshots[0]:
                buffers = self.snapshots[1]
            else:
                buffers = self.snapshots[0]  # the second set is pinned only if saves overlap
        # outside the lock: the writer may finish and take the next job meanwhile; neither
        # job it can see holds these buffers
        job = Job(path, buffers.take(payload), best, buffers)
        with self.lock:
            self.raise_error()  # a save that failed meanwhile: nothing is written after it
            if self.writing is not None:
                self.queued = job
            else:
                self.writing = job
                self.thread = threading.Thread(
                    target=self.write_all, args=(job,), name="checkpoint-writer"
                )
                self.thread.start()

    def write_all(self, job: Job | None) -> None:
        """The writer thread: ``job``, then each one queued meanwhile; after a failure the
        queued one is dropped (as a synchronous caller would have stopped at the error)."""
        while job is not None:
            error: BaseException | None = None
            try:
                sha = write(job.path, job.payload, job.best)
            except BaseException as caught:  # raised in the training thread, at submit or wait
                error = caught
            with self.lock:
                if error is None:
                    self.last_sha = sha
                else:
                    self.error = self.error or error
                    self.queued = None
                job = self.writing = self.queued
                self.queued = None
                self.lock.notify_all()

    def raise_error(self) -> None:
        """Raise the first writer error not raised yet (called under the lock)."""
        if self.error is not None:
            error, self.error = self.error, None
            raise error

    def busy(self) -> bool:
        """Whether a save is still being written (or queued)."""
        with self.lock:
            return self.writing is not None

    def wait(self) -> str | None:
        """Block until the saves in flight and queued are on disk; the sha256 of the last file
        saved.

        :raises OSError: (or any error) of the first save that failed, e.g.
            ``files.DiskFullError`` naming its file.
        """
        with self.lock:
            while self.writing is not None:
                self.lock.wait()
            self.raise_error()
            return self.last_sha

    def close(self, *, failing: bool = False) -> None:
        """Wait for the saves in flight and queued and stop the writer. ``failing``: the
        segment is already failing; a save's error is logged, so it does not hide the error
        that stopped it."""
        try:
            self.wait()
        except Exception as error:
            if not failing:
                raise
            logger.error("the checkpoint save in flight failed too: %s", error)
        finally:
            if self.thread is not None:
                self.thread.join()


def write(path: Path, payload: dict[str, Any], best: Path | None) -> str:
    """The writer thread's job: ``path``, then ``best`` as a copy of it (its own file, never a
    link: one damaged byte must leave an intact copy to restore), verified by its sha256;
    returns ``path``'s sha256."""
    sha = checkpoint.save(path, payload)
    if best is not None:
        files.copy_verified(path, best, sha)
    return sha
