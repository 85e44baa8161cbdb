from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from chesslm.data import tokens
from chesslm.model import gpt
from chesslm.train import batching, launch

LENGTHS = [5 + (7 * i) % 23 for i in range(37)]


def plan(lengths: Any, epoch: int, **kw: int) -> list[list[int]]:
    return [b.tolist() for b in batching.global_batches(lengths, epoch=epoch, seed=7, **kw)]


def test_plan_is_deterministic_disjoint_and_complete() -> None:
    a = plan(LENGTHS, 3, micro=2, world=2)
    assert a == plan(np.array(LENGTHS, np.uint16), 3, micro=2, world=2)
    assert a != plan(LENGTHS, 4, micro=2, world=2)
    flat = [i for b in a for i in b]
    assert sorted(flat) == list(range(len(LENGTHS)))
    assert all(len(b) == 4 for b in a[:-1]) and len(a[-1]) == 37 % 4
    groups = batching.groups(a, 3)
    assert [len(g) for g in groups] == [3] * 3 + [1]


def list_plan(lengths: list[int], *, epoch: int, seed: int, micro: int, world: int) -> list:
    """The plan as it was built with one Python int per game (before NumPy storage): the
    arrays must give exactly the same batches, so runs keep their numbers."""
    import random

    rng = random.Random(f"chesslm-batches:{seed}:{epoch}")
    order = list(range(len(lengths)))
    rng.shuffle(order)
    size = micro * world
    chunk = size * batching.CHUNK_BATCHES
    batches = []
    for start in range(0, len(order), chunk):
        bucket = sorted(order[start : start + chunk], key=lambda i: -lengths[i])
        batches.extend(bucket[i : i + size] for i in range(0, len(bucket), size))
    partial = batches.pop() if batches and len(batches[-1]) < size else None
    rng.shuffle(batches)
    return batches + ([partial] if partial else [])


@pytest.mark.parametrize("n,micro,world", [(1, 2, 1), (1000, 3, 2), (5000, 8, 4)])
def test_plan_is_compact_arrays_with_the_list_plans_batches(n: int, micro: int, world: int) -> None:
    lengths = np.random.default_rng(n).integers(2, 400, n).astype(np.uint16)
    got = batching.global_batches(lengths, epoch=2, seed=9, micro=micro, world=world)
    assert all(isinstance(b, np.ndarray) and b.dtype == np.int32 for b in got)
    want = list_plan(lengths.tolist(), epoch=2, seed=9, micro=micro, world=world)
    assert [b.tolist() for b in got] == want


def test_collate_right_pads_inputs_and_ignores_padded_targets() -> None:
    x, y = batching.collate([np.array([69, 1, 2, 64, 70]), np.array([69, 70])], "cpu")
    assert x.tolist() == [[69, 1, 2, 64], [69, 71, 71, 71]]
    assert y.tolist() == [[1, 2, 64, 70], [70, -100, -100, -100]]
    dx, dy = batching.collate([], "cpu")
    assert dx.tolist() == [[tokens.PAD]] and dy.tolist() == [[-100]]


def games_fixture() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [
        np.concatenate([[69], rng.integers(0, 64, 3 * k), [70]]).astype(np.uint8)
        for k in (1, 4, 2, 7, 3)
    ]


def reference_grad(games: list[np.ndarray]) -> dict[str, torch.Tensor]:
    """Mean token cross-entropy over all games in one pass."""
    torch.manual_seed(0)
    net = gpt.build("tiny")
    x, y = batching.collate(games, "cpu")
    F.cross_entropy(net(x).view(-1, 128), y.view(-1), ignore_index=-100).backward()
    return {n: p.grad.clone() for n, p in net.named_parameters()}


def test_accumulated_loss_is_normalised_by_all_valid_targets() -> None:
    games = games_fixture()
    torch.manual_seed(0)
    net = gpt.build("tiny")
    group = [[0, 1], [2, 3], [4]]
    values = batching.backward_group(net, games, group, micro=2, rank=0, world=1, device="cpu")
    assert values["valid_targets"] == sum(len(g) - 1 for g in games)
    ref = reference_grad(games)
    for name, p in net.named_parameters():
        torch.testing.assert_close(p.grad, ref[name], rtol=1e-4, atol=1e-6)


def _worker(rank: int, init: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    torch.manual_seed(0)
    net = gpt.build("tiny")
    ddp = DDP(net)
    games = games_fixture()
    # micro=2, world=2: batch [0,1,2,3] then the partial [4] where rank 1 has no games
    values = batching.backward_group(
        ddp, games, [[0, 1, 2, 3], [4]], micro=2, rank=rank, world=2, device="cpu"
    )
    if rank == 0:
        torch.save({"values": values, "grads": {n: p.grad for n, p in net.named_parameters()}}, out)
    dist.destroy_process_group()


def ended(rank: int, worker: Any, *args: Any) -> None:
    """``worker(rank, *args)``, then the process ends as a trainer's rank does
    (``launch.end_process``): without the interpreter's teardown, where gloo's C++ objects now
    and then abort an orderly end ("terminate called without an active exception": this
    test's rank 1 so, once, in a full run of the suite on 2026-12-05)."""
    worker(rank, *args)
    launch.end_process(0)


def run_two_ranks(worker: Any, tmp_path: Path) -> dict[str, Any]:
    """``worker(rank, init, out)`` on two gloo processes; what rank 0 saved to ``out``."""
    out = tmp_path / "grads.pt"
    init = f"file://{tmp_path / 'store'}"
    mp.spawn(ended, args=(worker, init, str(out)), nprocs=2, join=True)
    return torch.load(out, weights_only=True)


def assert_single_pass_gradient(grads: dict[str, torch.Tensor]) -> None:
    ref = reference_grad(games_fixture())
    for name, grad in grads.items():
        torch.testing.assert_close(grad, ref[name], rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_two_ranks_with_a_dummy_rank_match_the_single_pass_gradient(tmp_path: Path) -> None:
    result = run_two_ranks(_worker, tmp_path)
    assert result["values"]["valid_targets"] == sum(len(g) - 1 for g in games_fixture())
    assert_single_pass_gradient(result["grads"])
