"""One microbatch's forward, loss and backward replayed as a CUDA graph, one graph per shape.

Why: at the seed's microbatch (8 games of about 200 tokens) the GPU work of a microbatch takes
a few milliseconds, but it is hundreds of kernel launches plus the compiled graph's Python
wrappers, so the host sets the pace. A CUDA graph launches them all at once.

How (the default path's batches and mathematics, unchanged):

* every microbatch is padded to ``(micro, T)``, T the 64-multiple length bucket (missing games
  are rows of padding with no targets), and copied into that bucket's static input buffers;
  packed rows (the throughput path) have one shape, ``(micro, row_tokens)``, and their
  positions, document ids and document mask live in static buffers too: the FlexAttention
  block mask is built outside the graph for each microbatch and copied into the static one
  (its tensors have fixed shapes);
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
capture, so the tests cover the buffers, padding and reduction; ``tests/test_cuda_graphs.py``
checks the captured graphs against the uncaptured path on a GPU.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from chesslm.train import batching, distributed

WARMUP_RUNS = 2  # eager runs before a capture (the first compiles)
CHOICES = ("auto", "on", "off")


def resolve(
    setting: str | bool | None, device: str, *, packing: bool = False, compiled: bool = True
) -> bool:
    """Whether to use CUDA graphs: ``auto``/None means on CUDA, except packed rows run
    eagerly (eager FlexAttention copies host tensors, which a capture forbids).

    >>> resolve("auto", "cuda"), resolve(None, "cpu")
    (True, False)
    >>> resolve("auto", "cuda", packing=True, compiled=False)
    False
    """
    if setting in (None, "auto"):
        return device == "cuda" and (compiled or not packing)
    if isinstance(setting, bool):
        setting = "on" if setting else "off"
    if setting not in CHOICES:
        raise ValueError(f"cuda_graphs must be one of {CHOICES}, got {setting!r}")
    if setting == "on" and device != "cuda":
        raise ValueError("cuda_graphs: true needs device cuda")
    if setting == "on" and packing and not compiled:
        raise ValueError("cuda_graphs: true with packing needs compile (eager FlexAttention)")
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


class Static:
    """One shape's static buffers: inputs, targets, packed rows' positions, document ids
    and mask, the summed loss the graph writes, and the graph (None on the CPU)."""

    def __init__(self, rows: int, T: int, device: torch.device, packed: bool) -> None:
        self.x = torch.zeros((rows, T), dtype=torch.long, device=device)
        self.y = torch.full((rows, T), batching.IGNORE, dtype=torch.long, device=device)
        self.forward: dict[str, Any] = {}
        self.doc: torch.Tensor | None = None
        if packed:
            self.doc = torch.zeros((rows, T), dtype=torch.long, device=device)
            # the mask reads this buffer; its tensors are refreshed in place (refresh_mask)
            pos = torch.zeros((rows, T), dtype=torch.long, device=device)
            self.forward = {"pos": pos, "mask": batching.document_mask(self.doc)}
        self.loss = torch.zeros((), device=device)
        self.graph: torch.cuda.CUDAGraph | None = None

    def load(self, x: torch.Tensor, y: torch.Tensor, pos: Any = None, doc: Any = None) -> None:
        self.x.copy_(x)
        self.y.copy_(y)
        if self.doc is not None:
            self.forward["pos"].copy_(pos)
            self.doc.copy_(doc)
            self.refresh_mask()

    def refresh_mask(self) -> None:
        """The document mask of the rows now in ``doc``, written into the static mask."""
        mask, fresh = self.forward["mask"], batching.document_mask(self.doc)
        if isinstance(mask, torch.Tensor):
            mask.copy_(fresh)
            return
        for old, new in zip(mask.as_tuple(), fresh.as_tuple(), strict=True):
            if isinstance(old, torch.Tensor):
                old.copy_(new)
            elif isinstance(new, torch.Tensor):
                raise RuntimeError("block mask layout changed between microbatches")


class MicrobatchGraphs:
    """Forward + summed loss + scaled backward of ``(rows, T)`` microbatches, one graph per
    shape (``rows`` is the microbatch size: the probe uses two). With ``row_tokens`` the
    microbatches are packed rows (lists of games) of that many tokens."""

    def __init__(
        self,
        net: torch.nn.Module,
        *,
        device: torch.device,
        pad_multiple: int,
        max_len: int,
        row_tokens: int | None = None,
    ) -> None:
        self.net = net
        self.device = device
        self.pad_multiple = pad_multiple
        self.max_len = max_len
        self.row_tokens = row_tokens
        self.capture = device.type == "cuda"
        self.grads = FlatGradients(net)
        self.scale = torch.zeros((), dtype=torch.float32, device=device)
        self.pool = torch.cuda.graph_pool_handle() if self.capture else None
        self.shapes: dict[tuple[int, int], Static] = {}
        if distributed.active():  # the replicas start equal (DDP would broadcast too)
            for p in self.grads.params:
                dist.broadcast(p.data, src=0)

    @property
    def graphs(self) -> int:
        return sum(1 for s in self.shapes.values() if s.graph is not None)

    def _run(self, s: Static) -> torch.Tensor:
        loss = batching.loss_sum(
            self.net, s.x, s.y, self.device, autocast_cache=not self.capture, **s.forward
        )
        (loss * self.scale).backward()
        return loss.detach()

    def _add(self, shape: tuple[int, int]) -> Static:
        s = Static(*shape, self.device, packed=self.row_tokens is not None)
        self.shapes[shape] = s
        if not self.capture:
            return s
        saved = self.grads.buffer.clone()  # warm-up and capture must not change the gradients
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(WARMUP_RUNS):
                self._run(s)
        torch.cuda.current_stream(self.device).wait_stream(side)
        s.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(s.graph, pool=self.pool):
            s.loss = self._run(s)
        self.grads.buffer.copy_(saved)
        return s

    def microbatch(self, batch: batching.Microbatch) -> torch.Tensor:
        """Run one collated microbatch (accumulating gradients) through its shape's graph;
        returns its summed loss."""
        shape = (batch.x.size(0), batch.x.size(1))
        s = self.shapes.get(shape) or self._add(shape)
        s.load(batch.x, batch.y, batch.pos, batch.doc)
        if s.graph is None:
            return self._run(s)
        s.graph.replay()
        return s.loss

    def backward_group(
        self, games: Any, group: list[list[Any]], *, micro: int, rank: int
    ) -> torch.Tensor:
        """``batching.backward_group`` for this path, through the same core
        (``batching.GroupPass``: microbatches, loss scale, statistics), with every microbatch
        padded to ``micro`` rows; the gradients are summed over ranks (one all-reduce at the
        end), not averaged. Returns (loss_sum, valid_targets, padded_tokens) over all ranks."""
        core = batching.GroupPass(
            games,
            group,
            micro=micro,
            rank=rank,
            device=self.device,
            pad_multiple=self.pad_multiple,
            max_len=self.max_len,
            row_tokens=self.row_tokens,
            rows=micro,
        )
        self.grads.zero()
        self.scale.fill_(core.scale)
        for batch in core:
            core.add(self.microbatch(batch), batch)
        if distributed.active():
            dist.all_reduce(self.grads.buffer)
        return core.result(as_tensor=True)
