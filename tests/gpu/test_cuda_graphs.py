"""The CUDA-graph path keeps the default path's mathematics: padding rows, flat gradients,
the all-reduce (one, or in buckets during the last backward), clipping; captured graphs equal
eager updates on a GPU."""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

from chesslm.model import gpt
from chesslm.train import batching, cuda_graphs, optim
from tests.workflow.test_batching import (
    assert_single_pass_gradient,
    ended,
    games_fixture,
    reference_grad,
    run_two_ranks,
)

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def graphed(
    net: torch.nn.Module, device: str = "cpu", row_tokens: int | None = None
) -> cuda_graphs.MicrobatchGraphs:
    return cuda_graphs.MicrobatchGraphs(
        net, device=torch.device(device), pad_multiple=64, max_len=1024, row_tokens=row_tokens
    )


def test_flat_gradients_accumulate_and_match_the_single_pass_gradient() -> None:
    games = games_fixture()
    torch.manual_seed(0)
    net = gpt.build("tiny")
    g = graphed(net)
    group = [[0, 1], [2, 3], [4]]  # the last microbatch has one game: a padding row is added
    for _ in range(2):  # the second update starts from zeroed gradients
        stats = g.backward_group(games, group, micro=2, rank=0)
    loss_sum, valid, padded = stats.tolist()
    assert valid == sum(len(x) - 1 for x in games)
    assert padded == 5 * 64  # the padding row counts no tokens
    ref = reference_grad(games)
    for name, p in net.named_parameters():
        assert p.grad.data_ptr() >= g.grads.buffer.data_ptr()  # a view of the flat buffer
        torch.testing.assert_close(p.grad, ref[name], rtol=1e-4, atol=1e-6)
    assert g.graphs == 0 and set(g.shapes) == {(2, 64)}  # no capture on the CPU


def test_flat_clip_equals_clip_grad_norm() -> None:
    torch.manual_seed(0)
    net = gpt.build("tiny")
    g = graphed(net)
    g.grads.buffer.normal_()
    twin = copy.deepcopy(net)
    for p, q in zip(net.parameters(), twin.parameters(), strict=True):
        q.grad = p.grad.clone()  # its own (non-flat) copies of the same gradients
    want = torch.nn.utils.clip_grad_norm_(twin.parameters(), 1.0)
    torch.testing.assert_close(g.grads.clip(1.0), want)
    for p, q in zip(net.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad)


def test_packed_rows_through_static_buffers_match_the_single_pass_gradient() -> None:
    """Packed rows: positions, document ids and the mask are refreshed in the static buffers
    of the one shape for every microbatch (a stale mask would let games see each other)."""
    games = games_fixture()
    torch.manual_seed(0)
    net = gpt.build("tiny")
    g = graphed(net, row_tokens=32)
    group = [[[0, 1], [2]], [[3, 4]]]  # two microbatches of 2 rows; the second has one row
    for _ in range(2):
        stats = g.backward_group(games, group, micro=2, rank=0)
    loss_sum, valid, padded = stats.tolist()
    assert valid == sum(len(x) - 1 for x in games)
    assert padded == 3 * 32 and set(g.shapes) == {(2, 32)}
    ref = reference_grad(games)
    for name, p in net.named_parameters():
        torch.testing.assert_close(p.grad, ref[name], rtol=1e-4, atol=1e-6)


def test_resolve_refuses_graphs_without_cuda() -> None:
    assert cuda_graphs.resolve("auto", "cuda") is True
    assert cuda_graphs.resolve(False, "cuda") is False
    with pytest.raises(ValueError, match="needs device cuda"):
        cuda_graphs.resolve("on", "cpu")
    with pytest.raises(ValueError, match="must be one of"):
        cuda_graphs.resolve("sometimes", "cuda")
    assert cuda_graphs.resolve("auto", "cuda", packing=True, compiled=False) is False
    with pytest.raises(ValueError, match="packing needs compile"):
        cuda_graphs.resolve("on", "cuda", packing=True, compiled=False)


def _worker(rank: int, init: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    torch.manual_seed(rank)  # different replicas: the path must broadcast rank 0's weights
    if rank == 1:
        gpt.build("tiny")  # consume the RNG differently too
    net = gpt.build("tiny")
    g = graphed(net)
    # micro=2, world=2: batch [0,1,2,3] then the partial [4] where rank 1 has no games
    stats = g.backward_group(games_fixture(), [[0, 1, 2, 3], [4]], micro=2, rank=rank)
    grads = {n: p.grad.clone() for n, p in net.named_parameters()}
    if rank == 0:
        torch.save({"stats": stats, "grads": grads}, out)
    dist.destroy_process_group()


@pytest.mark.slow
def test_two_ranks_with_a_dummy_rank_match_the_single_pass_gradient(tmp_path: Path) -> None:
    result = run_two_ranks(_worker, tmp_path)
    assert result["stats"][1].item() == sum(len(g) - 1 for g in games_fixture())
    assert_single_pass_gradient(result["grads"])


def test_buckets_tile_the_flat_buffer_from_its_end() -> None:
    """Buckets are contiguous slices cut from the end of the buffer (the last blocks finish
    their backward first), each at least the bucket size except the last, which holds the
    embeddings and the tied head."""
    torch.manual_seed(0)
    net = gpt.build("tiny")
    g = graphed(net)
    cap = 64 * 1024
    b = cuda_graphs.Buckets(g.grads, cap)
    assert len(b) > 3
    assert b.spans[0][1] == g.grads.buffer.numel() and b.spans[-1][0] == 0
    for (lo, _), (_, hi) in zip(b.spans, b.spans[1:], strict=False):
        assert hi == lo  # each bucket ends where the one before it starts
    assert all((hi - lo) * 4 >= cap for lo, hi in b.spans[:-1])
    names = [n for n, p in net.named_parameters() if p.requires_grad]
    assert b.bucket_of[names.index("transformer.wte.weight")] == len(b) - 1
    assert b.bucket_of[names.index("transformer.ln_f.bias")] == 0
    assert sum(b.sizes) == len(names)


@pytest.mark.parametrize("row_tokens", [None, 32], ids=["games", "packed"])
def test_shape_of_a_part_is_the_shape_it_collates_to(row_tokens: int | None) -> None:
    """Every rank captures the reducing graphs of all ranks' last shapes, computed on the
    host from the game lengths: they must be the shapes ``collate`` makes (an empty part is
    a rank with no game: rows of padding)."""
    games = games_fixture()  # 5, 14, 8, 23 and 11 tokens: lengths padded to 8 differ
    net = gpt.build("tiny")
    g = cuda_graphs.MicrobatchGraphs(
        net, device=torch.device("cpu"), pad_multiple=8, max_len=1024, row_tokens=row_tokens
    )
    if row_tokens is None:
        group = [[0, 1, 2, 3], [3, 4], [4]]
    else:
        group = [[[0, 1], [2], [3, 4]], [[4]]]
    seen = set()
    for batch in group:
        for rank in (0, 1):
            core = batching.GroupPass(
                games,
                [batch],
                micro=2,
                rank=rank,
                device="cpu",
                pad_multiple=8,
                max_len=1024,
                row_tokens=row_tokens,
                rows=2,
            )
            part = batch[rank * 2 : (rank + 1) * 2]
            (collated,) = list(core)
            assert g.shape_of(core, part) == tuple(collated.x.shape), (batch, rank)
            seen.add(tuple(collated.x.shape))
    assert len(seen) == (1 if row_tokens else 3)  # (2, 8), (2, 16), (2, 24)


def _update_with(rank: int, overlap: bool) -> dict[str, Any]:
    """One update (three microbatches; in the last one rank 1 has no game, a padding row),
    then a step of AdamW; small buckets (the tiny model's 0.7 MB in about 13)."""
    torch.manual_seed(rank)  # different replicas: rank 0's weights are broadcast
    net = gpt.build("tiny")
    # Hooks registered before the buckets' run before theirs: for each parameter, how many
    # buckets had been launched when its gradient of the last microbatch was final.
    launched_at: dict[int, int] = {}
    holder: list[cuda_graphs.Buckets] = []

    def accumulated(i: int, _: torch.Tensor) -> None:
        if holder and holder[0].armed:
            launched_at[i] = holder[0].launched

    for i, p in enumerate(net.parameters()):
        p.register_post_accumulate_grad_hook(functools.partial(accumulated, i))
    g = cuda_graphs.MicrobatchGraphs(
        net,
        device=torch.device("cpu"),
        pad_multiple=64,
        max_len=1024,
        overlap=overlap,
        bucket_mb=0.05,
    )
    holder.extend([g.buckets] if g.buckets is not None else [])
    opt = optim.optimizer(net, 1e-3, device=torch.device("cpu"))
    stats = g.backward_group(games_fixture(), [[0, 1, 2, 3], [1, 2], [4]], micro=2, rank=rank)
    grads = {n: p.grad.clone() for n, p in net.named_parameters()}
    norm = g.grads.clip(1.0)
    opt.step()
    return {
        "stats": stats,
        "grads": grads,
        "norm": norm,
        "weights": {n: p.detach().clone() for n, p in net.named_parameters()},
        "buckets": len(g.buckets) if g.buckets is not None else 0,
        "bucket_of": g.buckets.bucket_of if g.buckets is not None else [],
        "launched_at": [launched_at.get(i) for i in range(len(grads))],
    }


def _reduce_worker(rank: int, init: str, out: str) -> None:
    """``_update_with`` each reduction on two gloo ranks; both ranks' results saved."""
    # one thread a rank, as a CPU trainer's rank runs: with torch's default threads the AdamW
    # step on the CPU differed in 3 of 40 runs on a loaded 2-core machine (3.1e-7 in the tied
    # embedding) from identical weights and gradients, clipped or not; 0 of 44 with one
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    result = {overlap: _update_with(rank, overlap) for overlap in (False, True)}
    torch.save(result, f"{out}.{rank}")
    if rank == 0:
        torch.save(result, out)
    dist.destroy_process_group()


@pytest.mark.slow
def test_bucketed_reduction_during_the_backward_equals_one_all_reduce(tmp_path: Path) -> None:
    """Two gloo ranks. The bucketed reduction gives the same bits as one all-reduce of the
    flat buffer (gradients, norm, weights after an AdamW step, on both ranks): with two
    ranks every element is the sum of the same two numbers, however the buffer is cut. It
    overlaps the backward: buckets were launched before the position embedding (near the
    start of the buffer, late in the backward) had its gradient, each bucket only once all
    its own gradients were final, and only in the last microbatch (the earlier ones
    communicate nothing: the hooks record only while the buckets are armed)."""
    run_two_ranks(_reduce_worker, tmp_path)
    ranks = [torch.load(tmp_path / f"grads.pt.{r}", weights_only=True) for r in (0, 1)]
    for result in ranks:
        single, buckets = result[False], result[True]
        assert single["buckets"] == 0 and buckets["buckets"] > 3
        # every bucket waited for all its gradients: none was launched before one of its own
        # parameters was final (a parameter of bucket b sees at most b buckets launched)
        for launched, bucket in zip(buckets["launched_at"], buckets["bucket_of"], strict=True):
            assert launched is not None and launched <= bucket
        # and the reduction overlapped the backward: the position embedding (index 1, in the
        # last bucket) got its gradient after the buckets of the later layers had been sent
        assert buckets["launched_at"][1] > 0
        assert torch.equal(single["stats"], buckets["stats"])
        assert torch.equal(single["norm"], buckets["norm"])
        for name in single["grads"]:
            assert torch.equal(single["grads"][name], buckets["grads"][name]), name
            assert torch.equal(single["weights"][name], buckets["weights"][name]), name
    for name, w in ranks[0][True]["weights"].items():  # the replicas stay equal
        assert torch.equal(w, ranks[1][True]["weights"][name]), name
    assert ranks[0][True]["stats"][1].item() == sum(len(x) - 1 for x in games_fixture()) + sum(
        len(games_fixture()[i]) - 1 for i in (1, 2)
    )


@CUDA
@pytest.mark.parametrize(
    ("compiled", "packed"),
    [(False, False), (True, False), (True, True)],  # packed rows are captured compiled only
    ids=["eager-games", "compiled-games", "compiled-packed"],
)
def test_captured_graphs_equal_the_default_path_on_a_gpu(compiled: bool, packed: bool) -> None:
    """Two updates against the uncaptured path. Game batches: the second update has a new
    length bucket first seen mid-group (a capture while gradients accumulate). Packed rows:
    one shape, the document mask refreshed in place, a partial microbatch (a padding row)."""
    import numpy as np

    rng = np.random.default_rng(1)

    def game(plies: int) -> np.ndarray:
        return np.concatenate([[69], rng.integers(0, 64, 3 * plies), [70]]).astype(np.uint8)

    games = [game(k) for k in (5, 9, 20, 12, 30, 70, 8, 11)]
    if packed:  # rows of games; 256-token rows, 2 rows per microbatch
        groups = [[[[0, 1], [2, 3]], [[4], [6, 7]]], [[[5]], [[1, 2, 3], [0]]]]
        row_tokens, n_graphs = 256, 1
    else:
        groups = [[[0, 1], [2, 3]], [[4, 6], [5, 7]]]  # buckets 64; then 128, then 256
        row_tokens, n_graphs = None, 3
    grads = {}
    for graphs in (False, True):
        torch.manual_seed(0)
        net = gpt.build("small", device="cuda")
        if compiled:
            net.compile(dynamic=not packed)
        g = graphed(net, "cuda", row_tokens) if graphs else None
        losses = []
        for group in groups:
            if g is not None:
                stats = g.backward_group(games, group, micro=2, rank=0)
            else:
                net.zero_grad(set_to_none=True)
                stats = batching.backward_group(
                    net,
                    games,
                    group,
                    micro=2,
                    rank=0,
                    world=1,
                    device="cuda",
                    pad_multiple=64,
                    max_len=1024,
                    row_tokens=row_tokens,
                    as_tensor=True,
                )
            losses.append(stats.tolist())
        grads[graphs] = ({n: p.grad.float().clone() for n, p in net.named_parameters()}, losses)
        if g is not None:
            assert g.graphs == n_graphs
    (eager, eager_losses), (replayed, replayed_losses) = grads[False], grads[True]
    for (la, va, pa), (lb, vb, pb) in zip(eager_losses, replayed_losses, strict=True):
        assert (va, pa) == (vb, pb)
        assert abs(la - lb) <= 1e-3 * abs(la)
    for name in eager:
        torch.testing.assert_close(replayed[name], eager[name], rtol=2e-2, atol=2e-4)


def _nccl_worker(rank: int, init: str, out: str, compiled: bool) -> None:
    """Three updates on two GPUs with each reduction, captured graphs both; the second
    update's last microbatch has a new shape on rank 0 only (both ranks capture it), the
    third's rank 1 has no game in its last microbatch."""
    import numpy as np

    from chesslm.train import compilation

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=init, rank=rank, world_size=2)
    device = torch.device("cuda", rank)
    rng = np.random.default_rng(1)
    games = [
        np.concatenate([[69], rng.integers(0, 64, 3 * k), [70]]).astype(np.uint8)
        for k in (5, 9, 20, 12, 30, 70, 8, 11)
    ]
    groups = [[[0, 1, 2, 3], [6, 7, 0, 1]], [[2, 3, 4, 6], [5, 1, 0, 7]], [[4, 5, 6, 7], [0]]]
    result = {}
    for overlap in (False, True):
        torch.manual_seed(0)
        net = gpt.build("small", device=device)
        if compiled:  # as the trainer compiles for several GPUs
            compilation.compile_model(net, static_shapes=False, scope="blocks")
        g = cuda_graphs.MicrobatchGraphs(
            net, device=device, pad_multiple=64, max_len=1024, overlap=overlap, bucket_mb=0.5
        )
        updates = []
        for group in groups:
            stats = g.backward_group(games, group, micro=2, rank=rank)
            grads = {n: p.grad.float().cpu() for n, p in net.named_parameters()}
            updates.append((stats.cpu(), grads))
        result[overlap] = {"updates": updates, "graphs": g.graphs}
    if rank == 0:
        torch.save(result, out)
    dist.destroy_process_group()


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled-blocks"])
def test_bucketed_reduction_in_captured_graphs_on_two_gpus(tmp_path: Path, compiled: bool) -> None:
    """The NCCL all-reduces captured inside the last microbatch's graph give the gradients
    of one all-reduce after it (NCCL, two ranks: the same sums; tolerance only for GPU
    kernels that are not bitwise deterministic, such as the embedding backward)."""
    import torch.multiprocessing as mp

    out = tmp_path / "grads.pt"
    init = f"file://{tmp_path / 'store'}"
    mp.spawn(ended, args=(_nccl_worker, init, str(out), compiled), nprocs=2, join=True)
    result = torch.load(out, weights_only=True)
    single, buckets = result[False], result[True]
    assert buckets["graphs"] > single["graphs"]  # the reducing graphs of the last shapes
    for (stats_a, grads_a), (stats_b, grads_b) in zip(
        single["updates"], buckets["updates"], strict=True
    ):
        torch.testing.assert_close(stats_a, stats_b, rtol=1e-6, atol=0)
        for name, grad in grads_a.items():
            torch.testing.assert_close(grads_b[name], grad, rtol=1e-5, atol=1e-7)
