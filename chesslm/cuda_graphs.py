"""One microbatch's forward, loss and backward replayed as a CUDA graph, one graph per shape.

Why: at the seed's microbatch (8 games of about 200 tokens) the GPU work of a microbatch takes
a few milliseconds, but it is hundreds of kernel launches plus the compiled graph's Python
wrappers, so the host sets the pace. A CUDA graph launches them all at once.

How (the default path's batches and mathematics, unchanged):

* every microbatch is padded to ``(micro, T)``, T the 64-multiple length bucket (missing games
  are rows of padding with no targets), and copied into that bucket's static input buffers;
* the parameters' gradients are views of one flat FP32 buffer that is never freed, so autograd
  accumulates microbatches into it in place, inside the graph too; zeroing, clipping (one norm
  over the flat buffer) and the all-reduce across ranks are one kernel each;
* a bucket's graph is captured the first time the bucket appears: warm-up runs on a side
  stream (they compile the model), the gradients accumulated so far are saved and restored
  around them, and all graphs share one memory pool (only their loss output stays alive);
* several ranks: no DDP (its hooks cannot be captured); the flat gradient buffer is
  all-reduced once per update, after the last microbatch.

Not ``torch.compile(mode="reduce-overhead")``: its CUDA-graph trees give wrong gradients when
microbatches accumulate (pytorch/pytorch#169545). On the CPU the same code runs without
capture, so the tests cover the buffers, padding and reduction; ``tests/test_speed.py`` checks
the captured graphs against the default path on a GPU.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from chesslm import batching, distributed

WARMUP_RUNS = 2  # eager runs before a capture (the first compiles)
CHOICES = ("auto", "on", "off")


def resolve(setting: str | bool | None, device: str, *, packing: bool) -> bool:
    """Whether to use CUDA graphs: ``auto``/None means on CUDA for padded game batches.
    Packed rows build a document mask per microbatch, outside any graph: never graphed.

    >>> resolve("auto", "cuda", packing=False), resolve(None, "cpu", packing=False)
    (True, False)
    """
    if setting in (None, "auto"):
        return device == "cuda" and not packing
    if isinstance(setting, bool):
        setting = "on" if setting else "off"
    if setting not in CHOICES:
        raise ValueError(f"cuda_graphs must be one of {CHOICES}, got {setting!r}")
    if setting == "on" and (device != "cuda" or packing):
        raise ValueError("cuda_graphs: true needs device cuda and packing off")
    return setting == "on"


class FlatGradients:
    """Every parameter's ``.grad`` as a view of one contiguous FP32 buffer."""

    def __init__(self, net: torch.nn.Module) -> None:
        self.params = [p for p in net.parameters() if p.requires_grad]
        total = sum(p.numel() for p in self.params)
        self.buffer = torch.zeros(total, dtype=torch.float32, device=self.params[0].device)
        at = 0
        for p in self.params:
            p.grad = self.buffer[at : at + p.numel()].view_as(p)
            at += p.numel()

    def zero(self) -> None:
        self.buffer.zero_()

    def clip(self, max_norm: float) -> torch.Tensor:
        """``clip_grad_norm_`` over the flat buffer, without a host sync: the total norm."""
        norm = torch.linalg.vector_norm(self.buffer)
        self.buffer.mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0))
        return norm


class MicrobatchGraphs:
    """Forward + summed loss + scaled backward of ``(rows, T)`` microbatches, one graph per
    shape (``rows`` is the microbatch size: the probe uses two)."""

    def __init__(
        self, net: torch.nn.Module, *, device: torch.device, pad_multiple: int, max_len: int
    ) -> None:
        self.net = net
        self.device = device
        self.pad_multiple = pad_multiple
        self.max_len = max_len
        self.capture = device.type == "cuda"
        self.grads = FlatGradients(net)
        self.scale = torch.zeros((), dtype=torch.float32, device=device)
        self.pool = torch.cuda.graph_pool_handle() if self.capture else None
        # (rows, T) -> (static x, static y, static loss, graph or None)
        self.shapes: dict[tuple[int, int], tuple[Any, ...]] = {}
        if distributed.active():  # the replicas start equal (DDP would broadcast too)
            for p in self.grads.params:
                dist.broadcast(p.data, src=0)

    @property
    def graphs(self) -> int:
        return sum(1 for *_, g in self.shapes.values() if g is not None)

    def _run(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = batching.loss_sum(self.net, x, y, self.device, autocast_cache=not self.capture)
        (loss * self.scale).backward()
        return loss.detach()

    def _add(self, shape: tuple[int, int]) -> None:
        x = torch.zeros(shape, dtype=torch.long, device=self.device)
        y = torch.full(shape, batching.IGNORE, dtype=torch.long, device=self.device)
        if not self.capture:
            self.shapes[shape] = (x, y, torch.zeros((), device=self.device), None)
            return
        saved = self.grads.buffer.clone()  # warm-up and capture must not change the gradients
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(WARMUP_RUNS):
                self._run(x, y)
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            loss = self._run(x, y)
        self.grads.buffer.copy_(saved)
        self.shapes[shape] = (x, y, loss, graph)

    def microbatch(self, games: list[Any], rows: int) -> tuple[torch.Tensor, int]:
        """Run one microbatch of ``rows`` rows (accumulating gradients): its summed loss and
        its padded tokens (the games' rows only, as the default path counts them)."""
        x, y = batching.collate(
            games, self.device, pad_multiple=self.pad_multiple, max_len=self.max_len, rows=rows
        )
        shape = (x.size(0), x.size(1))
        if shape not in self.shapes:
            self._add(shape)
        sx, sy, loss, graph = self.shapes[shape]
        sx.copy_(x)
        sy.copy_(y)
        if graph is None:
            loss = self._run(sx, sy)
        else:
            graph.replay()
        return loss, len(games) * shape[1]

    def backward_group(
        self, games: Any, group: list[list[int]], *, micro: int, rank: int
    ) -> torch.Tensor:
        """``batching.backward_group`` for this path: the same loss normalisation (every
        valid target of the update weighs the same on every rank), gradients all-reduced
        once at the end. Returns (loss_sum, valid_targets, padded_tokens) over all ranks."""
        total = sum(len(games[i]) - 1 for batch in group for i in batch)
        self.grads.zero()
        self.scale.fill_(1.0 / total)  # the gradients are summed over ranks, not averaged
        stats = torch.zeros(3, dtype=torch.float64, device=self.device)
        for batch in group:
            part = [games[i] for i in batch[rank * micro : (rank + 1) * micro]]
            loss, padded = self.microbatch(part, micro)
            stats[0] += loss.double()
            stats[1] += float(sum(len(g) - 1 for g in part))
            stats[2] += float(padded)
        if distributed.active():
            dist.all_reduce(self.grads.buffer)
        return distributed.all_reduce_sum(stats)
