"""Checkpoint saves off the training's critical path: snapshot here, write in the background.

The training thread only copies the payload's tensors to the host (``Snapshot``; on CUDA into
pinned buffers kept from one save to the next, with non-blocking copies and one event sync; on
the CPU a plain clone) and hands the copy to ONE writer thread, which runs ``checkpoint.save``
(the same format and the same atomic writer as a synchronous save) and then links ``best.pt``
to that ``last.pt`` on improvement (a hard link: no second gigabyte to write). So a kill at
any moment still leaves a verified ``last.pt``: the one before, or the new one.

At most one save is in flight: ``submit`` first waits for the previous one (so one snapshot of
memory, and the pinned buffers are free again). ``wait`` blocks until the save in flight is on
disk and returns its file's sha256, or re-raises the writer's error (a full disk naming the
file, ...). Whoever records or reads ``last.pt`` must ``wait`` first.

The snapshot copies storages, not tensors, and rebuilds every tensor as the same view of its
copied storage: tied weights (the model's embedding and head) stay one storage, so the file
is byte for byte what a synchronous save of the same state writes on the CPU (on CUDA the
storages' location tags say ``cpu``; ``checkpoint.load`` maps everything to the CPU anyway).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from chesslm import files
from chesslm.train import checkpoint

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


class Saver:
    """One background writer of checkpoints; at most one save in flight."""

    def __init__(self) -> None:
        self.writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint-writer")
        self.snapshot = Snapshot()
        self.in_flight: Future[str] | None = None
        self.last_sha: str | None = None  # of the last save that reached the disk

    def submit(self, path: Path, payload: dict[str, Any], *, best: Path | None = None) -> None:
        """Save ``payload`` to ``path`` (and link ``best`` to it) in the background, once the
        previous save is done.

        :raises OSError: (or any error) of the previous save, as ``wait`` does.
        """
        self.wait()
        self.in_flight = self.writer.submit(write, path, self.snapshot.take(payload), best)

    def busy(self) -> bool:
        """Whether a save is still being written."""
        return self.in_flight is not None and not self.in_flight.done()

    def wait(self) -> str | None:
        """Block until the save in flight is on disk; the sha256 of the last file saved.

        :raises OSError: (or any error) of that save, e.g. ``files.DiskFullError`` naming it.
        """
        if self.in_flight is not None:
            future, self.in_flight = self.in_flight, None
            self.last_sha = future.result()
        return self.last_sha

    def close(self, *, failing: bool = False) -> None:
        """Wait for the save in flight and stop the writer. ``failing``: the segment is already
        failing; a save's error is logged, so it does not hide the error that stopped it."""
        try:
            self.wait()
        except Exception as error:
            if not failing:
                raise
            logger.error("the checkpoint save in flight failed too: %s", error)
        finally:
            self.writer.shutdown()


def write(path: Path, payload: dict[str, Any], best: Path | None) -> str:
    """The writer thread's job: ``path``, then ``best`` from it; returns ``path``'s sha256."""
    sha = checkpoint.save(path, payload)
    if best is not None:
        files.link_atomic(path, best)
    return sha
