"""The CUDA-graph path keeps the default path's mathematics: padding rows, flat gradients,
one all-reduce, clipping; captured graphs equal eager updates on a GPU."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from chesslm.train import batching, cuda_graphs, model

from .test_batching import (
    assert_single_pass_gradient,
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
    net = model.build("tiny")
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
    net = model.build("tiny")
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
    net = model.build("tiny")
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
        model.build("tiny")  # consume the RNG differently too
    net = model.build("tiny")
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
        net = model.build("small", device="cuda")
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
