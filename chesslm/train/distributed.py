"""Process-group setup from torchrun's environment, and collectives that also work alone.

torchrun sets RANK, WORLD_SIZE and LOCAL_RANK; without them the process is a world of one and
the helpers below skip the collectives. CUDA uses NCCL, CPU uses gloo.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist

logger = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class Context:
    rank: int
    world: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def world_from_env() -> tuple[int, int, int]:
    """(rank, world, local_rank) as torchrun exports them; (0, 1, 0) without torchrun."""
    return (
        int(os.environ.get("RANK", "0")),
        int(os.environ.get("WORLD_SIZE", "1")),
        int(os.environ.get("LOCAL_RANK", "0")),
    )


def check_devices(device: str, workers: int) -> None:
    """Refuse, before any setup, more CUDA workers than visible GPUs (one GPU per worker).

    :raises ValueError: with a one-line message.
    """
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    if device == "cuda":
        visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if workers > visible:
            raise ValueError(
                f"device cuda with {workers} workers needs {workers} GPUs,"
                f" but {visible} are visible"
            )


def init(device: str, *, threads: int, timeout_s: int = 300) -> Context:
    """Join the process group (if torchrun started us) and pin this rank's device and threads.

    Threads are set explicitly because Snakemake exports OMP_NUM_THREADS={threads} to the job
    and torchrun passes it to every rank unchanged.
    """
    rank, world, local_rank = world_from_env()
    check_devices(device, int(os.environ.get("LOCAL_WORLD_SIZE", world)))  # GPUs of this node
    torch.set_num_threads(threads)
    if device == "cuda":
        torch.cuda.set_device(local_rank)
        where = torch.device("cuda", local_rank)
    else:
        where = torch.device("cpu")
    if "WORLD_SIZE" in os.environ and not dist.is_initialized():
        dist.init_process_group(
            "nccl" if device == "cuda" else "gloo", timeout=timedelta(seconds=timeout_s)
        )
    logger.info("rank %d of %d on %s, %d threads", rank, world, where, threads)
    return Context(rank=rank, world=world, local_rank=local_rank, device=where)


def teardown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


@contextlib.contextmanager
def joined(device: str, *, threads: int) -> Iterator[Context]:
    """The process group for the block (``init``), then torn down. An orderly end waits at a
    barrier first, so every rank destroys the group together: a rank that destroyed it while
    another still worked after the last collective (rank 0 writing results, validating) made
    one of them abort at exit now and then with gloo ("terminate called without an active
    exception"). After an error it is torn down at once: the other ranks may never reach a
    barrier."""
    ctx = init(device, threads=threads)
    try:
        yield ctx
    except BaseException:
        teardown()
        raise
    try:
        barrier()
    finally:
        teardown()


def active() -> bool:
    return dist.is_initialized() and dist.get_world_size() > 1


def barrier() -> None:
    if active():
        dist.barrier()


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    if active():
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def broadcast_object(value: Any, src: int = 0) -> Any:
    """Rank ``src``'s value on every rank."""
    if not active():
        return value
    box = [value]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def all_gather_object(value: Any) -> list[Any]:
    if not active():
        return [value]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def from_main(ctx: Context, decide: Callable[[], T]) -> T:
    """``decide()`` run on rank 0 alone, its value on every rank. If it raises, every rank
    raises: rank 0 its own error, the others one of the same type and message, so that no
    rank goes on alone to wait on a collective nobody else reaches."""
    value, failure = None, None
    if ctx.is_main:
        try:
            value = decide()
        except Exception as error:
            failure = error
    shared = broadcast_object((value, None if failure is None else (type(failure), str(failure))))
    if failure is not None:
        raise failure
    value, error = shared
    if error is not None:
        raise _rebuilt(*error)
    return value


def _rebuilt(kind: type[BaseException], message: str) -> BaseException:
    try:
        return kind(message)
    except Exception:  # a type whose constructor wants more than a message
        return RuntimeError(f"rank 0: {kind.__name__}: {message}")
