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
* a shape's graph is captured the first time the shape appears: warm-up runs on a side
  stream (they compile the model), the gradients accumulated so far are saved and restored
  around them, and all graphs share one memory pool (only their loss output stays alive);
* several ranks: no DDP (its hooks cannot be captured). With ``OVERLAP`` (opt-in) the last
  microbatch of an update reduces its gradients while its backward runs (``Buckets``): the
  flat buffer is cut into contiguous slices of about ``BUCKET_MB``, and each slice's
  all-reduce is launched (async) as soon as the post-accumulate-grad hooks of all its
  parameters have fired; all are waited for before the clip and the optimizer step. Earlier
  microbatches communicate nothing. On CUDA that microbatch shape has a second graph with the
  NCCL all-reduces captured in it (NCCL's stream joins the capture through the event it
  waits on, and ``wait()`` joins it back), so the graphs stay. Every rank captures the
  reducing graphs of the last microbatch shapes of all ranks (each rank sees the whole global
  batch on the host), together and in one order, so that no rank records collectives while
  another runs them; the warm-ups before a capture do not communicate. Overlap needs each
  block's gradients to be final before the next block's backward: the trainer then compiles
  block by block (``compilation.compile_model``). Without it (the default), one all-reduce
  of the whole buffer after the last microbatch (``train_speed.py``'s ``graphs`` path;
  ``graphs-overlap`` is the bucketed one). For 2 ranks both give the same bits: each element
  is the sum of the same two numbers.

Not ``torch.compile(mode="reduce-overhead")``: its CUDA-graph trees give wrong gradients when
microbatches accumulate (pytorch/pytorch#169545). On the CPU the same code runs without
capture, so the tests cover the buffers, padding and reduction; ``tests/gpu/test_cuda_graphs.py``
checks the captured graphs against the uncaptured path on a GPU.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import torch
import torch.distributed as dist

from chesslm.train import batching, distributed
from chesslm.train.loss import HEADS, loss_sum, loss_sums

WARMUP_RUNS = 2  # eager runs before a capture (the first compiles)
CHOICES = ("auto", "on", "off")
#: several ranks, CHESSLM_GRAD_OVERLAP=1: reduce the last microbatch's gradients in buckets
#: during its backward; by default one all-reduce of the flat buffer after it. Off by default:
#: on 2 H200s it gained 3 % (BENCHMARKS.md), and the user's pilot has not run with it yet.
#: It enters the run's identity: its block-by-block compile changes the numerics.
OVERLAP = os.environ.get("CHESSLM_GRAD_OVERLAP", "0") == "1"
#: target size of one bucket (DDP's default): small enough that the last one, launched when
#: the backward ends, is short; large enough that each all-reduce runs near full bandwidth
BUCKET_MB = 25


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


class Buckets:
    """The flat gradient buffer as contiguous slices all-reduced (summed) while the backward
    pass still runs.

    The buffer holds the parameters in ``net.parameters()`` order (embeddings, blocks 0..n-1,
    final norm), and the backward finishes them in about the reverse order, so the slices are
    cut from the end of the buffer: bucket 0 (final norm and last blocks) is ready first, the
    last bucket (first blocks, embeddings and the tied head, whose gradient is complete only
    after the embedding's backward) last. No re-layout is needed: consecutive blocks are
    contiguous either way. A bucket is launched when every parameter in it has accumulated
    its gradient (post-accumulate-grad hooks), and only after every bucket before it, so all
    ranks issue the same collectives in the same order whatever order the hooks fire in.
    The hooks do nothing unless ``arm()`` was called (the last microbatch of an update).
    """

    def __init__(self, grads: FlatGradients, bucket_bytes: int) -> None:
        starts, at = [], 0
        for p in grads.params:
            starts.append(at)
            at += p.numel()
        self.bucket_of: list[int] = [0] * len(grads.params)
        spans: list[tuple[int, int]] = []
        end = at
        for i in reversed(range(len(grads.params))):
            self.bucket_of[i] = len(spans)
            if (end - starts[i]) * grads.buffer.element_size() >= bucket_bytes or i == 0:
                spans.append((starts[i], end))
                end = starts[i]
        self.spans = spans
        self.views = [grads.buffer[lo:hi] for lo, hi in spans]
        self.sizes = [self.bucket_of.count(b) for b in range(len(spans))]
        self.armed = False
        self.pending: list[int] = []
        self.launched = 0
        self.works: list[Any] = []
        for i, p in enumerate(grads.params):
            p.register_post_accumulate_grad_hook(functools.partial(self._accumulated, i))

    def __len__(self) -> int:
        return len(self.views)

    def arm(self) -> None:
        self.pending = list(self.sizes)
        self.launched = 0
        self.works = []
        self.armed = True

    def _accumulated(self, index: int, _param: torch.Tensor) -> None:
        if not self.armed:
            return
        self.pending[self.bucket_of[index]] -= 1
        while self.launched < len(self.views) and self.pending[self.launched] == 0:
            self._launch()

    def _launch(self) -> None:
        view = self.views[self.launched]
        self.works.append(dist.all_reduce(view, op=dist.ReduceOp.SUM, async_op=True))
        self.launched += 1

    def finish(self) -> None:
        """After the backward: launch what is left (a parameter without a gradient never
        fires its hook), then wait for every bucket (on CUDA the current stream waits)."""
        self.armed = False
        while self.launched < len(self.views):
            self._launch()
        for work in self.works:
            work.wait()
        self.works = []

    def rehearse(self) -> None:
        """Every bucket's all-reduce once, eagerly and on every rank together (the buffer
        holds zeros), so that NCCL has connected for these sizes before any capture."""
        for view in self.views:
            dist.all_reduce(view, op=dist.ReduceOp.SUM)


class Static:
    """One shape's static buffers: inputs, targets, the side heads' targets (``heads``: their
    names), the time rows (``time``), packed rows' positions, document ids and mask; per
    graph (``False``: plain, ``True``: with the bucketed all-reduce) the summed loss it
    writes (and the heads' losses); the graphs (none on the CPU)."""

    def __init__(
        self,
        rows: int,
        T: int,
        device: torch.device,
        packed: bool,
        heads: tuple[str, ...] = (),
        time: bool = False,
    ) -> None:
        self.x = torch.zeros((rows, T), dtype=torch.long, device=device)
        self.y = torch.full((rows, T), batching.IGNORE, dtype=torch.long, device=device)
        self.heads = {h: torch.full_like(self.y, batching.IGNORE) for h in heads}
        self.forward: dict[str, Any] = {}
        if time:  # every row "no time input" until loaded
            self.forward["time"] = torch.zeros((rows, T, 4), dtype=torch.long, device=device)
        self.doc: torch.Tensor | None = None
        if packed:
            self.doc = torch.zeros((rows, T), dtype=torch.long, device=device)
            # the mask reads this buffer; its tensors are refreshed in place (refresh_mask)
            pos = torch.zeros((rows, T), dtype=torch.long, device=device)
            self.forward |= {"pos": pos, "mask": batching.document_mask(self.doc)}
        self.loss: dict[bool, torch.Tensor] = {}
        self.head_losses: dict[bool, list[torch.Tensor]] = {}
        self.graph: dict[bool, torch.cuda.CUDAGraph] = {}

    def load(self, batch: batching.Microbatch) -> None:
        self.x.copy_(batch.x)
        self.y.copy_(batch.y)
        for head, buffer in self.heads.items():
            buffer.copy_(getattr(batch, head))
        if "time" in self.forward:
            self.forward["time"].copy_(batch.time)
        pos, doc = batch.pos, batch.doc
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
    microbatches are packed rows (lists of games) of that many tokens. ``overlap`` (several
    ranks only): the last microbatch's gradients are all-reduced in buckets of about
    ``bucket_mb`` (default ``BUCKET_MB``) during its backward (``Buckets``), else once after
    it."""

    def __init__(
        self,
        net: torch.nn.Module,
        *,
        device: torch.device,
        pad_multiple: int,
        max_len: int,
        row_tokens: int | None = None,
        overlap: bool = False,
        bucket_mb: float | None = None,
    ) -> None:
        self.net = net
        self.device = device
        self.pad_multiple = pad_multiple
        self.max_len = max_len
        self.row_tokens = row_tokens
        self.capture = device.type == "cuda"
        self.grads = FlatGradients(net)
        self.scale = torch.zeros((), dtype=torch.float32, device=device)
        # the side heads the model has, and their loss scales (GroupPass.head_scales)
        self.heads = tuple(h for h in HEADS if getattr(net.config, h))
        self.head_scales = {
            h: torch.zeros((), dtype=torch.float32, device=device) for h in self.heads
        }
        self.time = net.config.time_inputs
        self.pool = torch.cuda.graph_pool_handle() if self.capture else None
        self.shapes: dict[tuple[int, int], Static] = {}
        self.buckets: Buckets | None = None
        if distributed.active():  # the replicas start equal (DDP would broadcast too)
            for p in self.grads.params:
                dist.broadcast(p.data, src=0)
            if overlap:
                self.buckets = Buckets(self.grads, int((bucket_mb or BUCKET_MB) * 2**20))
                self.buckets.rehearse()

    @property
    def graphs(self) -> int:
        return sum(len(s.graph) for s in self.shapes.values())

    def _run(self, s: Static, reduce: bool = False) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """(summed loss, the heads' summed losses) of the shape's buffers, backward done."""
        cache = not self.capture
        sums: list[torch.Tensor] = []
        if not s.heads:
            loss = loss_sum(self.net, s.x, s.y, self.device, autocast_cache=cache, **s.forward)
        else:
            loss, sums = loss_sums(
                self.net, s.x, s.y, s.heads, self.device, autocast_cache=cache, **s.forward
            )
        total = loss * self.scale  # as GroupPass.total_loss, with the scales in buffers
        for head, value in zip(s.heads, sums, strict=True):
            total = total + value * self.head_scales[head]
        if reduce:
            self.buckets.arm()
        total.backward()
        if reduce:
            self.buckets.finish()
        return loss.detach(), [value.detach() for value in sums]

    def _static(self, shape: tuple[int, int]) -> Static:
        s = self.shapes.get(shape)
        if s is None:
            packed = self.row_tokens is not None
            s = self.shapes[shape] = Static(
                *shape, self.device, packed, heads=self.heads, time=self.time
            )
        return s

    def _capture(self, s: Static, reduce: bool) -> None:
        """Warm up and capture one of a shape's graphs. The warm-ups run without
        communication; a capture records its all-reduces without running them."""
        saved = self.grads.buffer.clone()  # warm-up and capture must not change the gradients
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(WARMUP_RUNS):
                self._run(s)
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            s.loss[reduce], s.head_losses[reduce] = self._run(s, reduce)
        s.graph[reduce] = graph
        self.grads.buffer.copy_(saved)

    def shape_of(self, core: batching.GroupPass, part: list[Any]) -> tuple[int, int]:
        """The static shape a part (one rank's share of a global batch) is collated to."""
        if self.row_tokens is not None:
            return (core.micro, self.row_tokens)
        longest = max((len(core.games[i]) for i in part), default=2) - 1
        longest += core.prefix_length if part else 0
        return (core.micro, batching.padded_length(longest, self.pad_multiple, self.max_len))

    def _capture_reduce_graphs(self, core: batching.GroupPass, last: list[Any]) -> None:
        """Capture the reducing graphs of the last microbatch's shape of every rank (all
        ranks see the whole global batch on the host), in one order on all ranks: a rank
        never captures its collectives while another runs them."""
        micro, world = core.micro, dist.get_world_size()
        shapes = {self.shape_of(core, last[r * micro : (r + 1) * micro]) for r in range(world)}
        for shape in sorted(shapes):
            s = self._static(shape)
            if True not in s.graph:
                self._capture(s, reduce=True)

    def microbatch(
        self, batch: batching.Microbatch, reduce: bool = False
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Run one collated microbatch (accumulating gradients) through its shape's graph
        (``reduce``: the one that all-reduces the gradients in buckets as they complete);
        returns its summed loss and its heads' summed losses (none without them)."""
        s = self._static((batch.x.size(0), batch.x.size(1)))
        if self.capture and reduce not in s.graph:
            if reduce:  # captured beforehand on every rank together (_capture_reduce_graphs)
                raise RuntimeError(f"no reducing graph for shape {tuple(batch.x.shape)}")
            self._capture(s, reduce)
        s.load(batch)
        if not self.capture:
            return self._run(s, reduce)
        s.graph[reduce].replay()
        return s.loss[reduce], s.head_losses[reduce]

    def backward_group(
        self,
        games: Any,
        group: list[list[Any]],
        *,
        micro: int,
        rank: int,
        prefixes: Any = None,
        outcomes: Any = None,
        times: Any = None,
    ) -> torch.Tensor:
        """``batching.backward_group`` for this path, through the same core
        (``batching.GroupPass``: microbatches, loss scale, statistics), with every microbatch
        padded to ``micro`` rows; the gradients are summed over ranks (during the last
        microbatch's backward, or in one all-reduce at the end), not averaged; ``prefixes``:
        the games' rating prefixes, ``outcomes`` their results, ``times`` their clocks, as
        ``GroupPass``'s. Returns (loss_sum, valid_targets, padded_tokens[, per head: loss sum,
        targets]) over all ranks."""
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
            prefixes=prefixes,
            outcomes=outcomes,
            times=times,
        )
        if core.heads != self.heads:
            raise ValueError(f"the model's heads {self.heads} but targets for {core.heads}")
        self.grads.zero()
        self.scale.fill_(core.scale)
        for head, scale in core.head_scales.items():
            self.head_scales[head].fill_(scale)
        if self.buckets is not None and self.capture:
            self._capture_reduce_graphs(core, group[-1])
        for k, batch in enumerate(core):
            reduce = self.buckets is not None and k == len(core) - 1
            loss, sums = self.microbatch(batch, reduce)
            core.add(loss, batch, sums)
        if distributed.active() and self.buckets is None:
            dist.all_reduce(self.grads.buffer)
        return core.result(as_tensor=True)
