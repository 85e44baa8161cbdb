"""The fast paths keep the seed's mathematics: bucketed padding, packed rows, masks."""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from chesslm.model import gpt, presets
from chesslm.train import batching, compilation
from tests.conftest import ROOT, run_segment

from .test_batching import games_fixture, reference_grad


def seed_reference(games: list[np.ndarray]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The seed's protocol: eager, exact lengths, attention with a padding (key) mask."""
    torch.manual_seed(0)
    net = gpt.build("tiny")
    x, y = batching.collate(games, "cpu")
    T = y.size(1)
    keys = y.ne(batching.IGNORE) | (torch.arange(T) == 0)
    mask = (torch.ones(T, T, dtype=torch.bool).tril() & keys[:, None, :]).unsqueeze(1)
    loss = F.cross_entropy(net(x, mask=mask).view(-1, 128), y.view(-1), reduction="sum")
    (loss / y.ne(batching.IGNORE).sum()).backward()
    return loss.detach(), {n: p.grad.clone() for n, p in net.named_parameters()}


def test_default_path_matches_the_seed_padding_mask_reference() -> None:
    games = games_fixture()
    ref_loss, ref_grads = seed_reference(games)
    torch.manual_seed(0)
    net = gpt.build("tiny")
    values = batching.backward_group(
        net, games, [[0, 1, 2], [3, 4]], micro=3, rank=0, world=1, device="cpu", pad_multiple=64
    )
    assert values["padded_tokens"] == 3 * 64 + 2 * 64  # bucketed to multiples of 64
    torch.testing.assert_close(torch.tensor(values["loss_sum"]), ref_loss.double().float())
    for name, p in net.named_parameters():
        torch.testing.assert_close(p.grad, ref_grads[name], rtol=1e-4, atol=1e-6)


def test_tensor_stats_need_no_host_sync_and_equal_the_dict() -> None:
    games = games_fixture()
    out = {}
    for as_tensor in (False, True):
        torch.manual_seed(0)
        net = gpt.build("tiny")
        out[as_tensor] = batching.backward_group(
            net,
            games,
            [[0, 1], [2, 3, 4]],
            micro=3,
            rank=0,
            world=1,
            device="cpu",
            as_tensor=as_tensor,
        )
    assert isinstance(out[True], torch.Tensor)
    assert out[True].tolist() == [
        out[False]["loss_sum"],
        out[False]["valid_targets"],
        out[False]["padded_tokens"],
    ]


def test_pack_rows_is_deterministic_complete_and_within_capacity() -> None:
    rng = np.random.default_rng(0)
    lengths = (2 + 3 * rng.integers(1, 60, 500)).tolist()
    rows = [r.tolist() for r in batching.pack_rows(lengths, epoch=2, seed=5, row_tokens=256)]
    again = batching.pack_rows(np.array(lengths, np.uint16), epoch=2, seed=5, row_tokens=256)
    assert rows == [r.tolist() for r in again]
    other = batching.pack_rows(lengths, epoch=3, seed=5, row_tokens=256)
    assert rows != [r.tolist() for r in other]
    assert sorted(i for r in rows for i in r) == list(range(500))
    used = [sum(lengths[i] - 1 for i in r) for r in rows]
    assert max(used) <= 256
    assert 1 - sum(used) / (256 * len(rows)) < 0.02  # best-fit decreasing wastes little
    batches = batching.packed_batches(lengths, epoch=2, seed=5, micro=3, world=2, row_tokens=256)
    assert [r.tolist() for b in batches for r in b] == rows
    assert all(len(b) == 6 for b in batches[:-1])
    assert [r.tolist() for r in batches[1][2:4]] == rows[8:10]  # a rank's share of a batch
    with pytest.raises(ValueError, match="rows hold"):
        batching.pack_rows([300], epoch=0, seed=0, row_tokens=256)


def test_document_mask_lets_no_game_see_another() -> None:
    doc = torch.tensor([[0, 0, 1, 1, 1, 2]])
    mask = batching.dense_document_mask(doc)[0, 0].int().tolist()
    assert mask == [
        [1, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0],
        [0, 0, 1, 0, 0, 0],
        [0, 0, 1, 1, 0, 0],
        [0, 0, 1, 1, 1, 0],
        [0, 0, 0, 0, 0, 1],
    ]
    assert batching.document_mask(doc).shape == (1, 1, 6, 6)  # the CPU fallback is dense


def test_a_packed_row_gives_each_game_its_loss_alone() -> None:
    games = games_fixture()
    torch.manual_seed(0)
    net = gpt.build("tiny")
    x, y, pos, doc = batching.collate_packed(games, [[0, 1, 2], [3, 4]], "cpu", row_tokens=32)
    assert pos[0, :4].tolist() == [0, 1, 2, 3] and pos[0, 4:8].tolist() == [0] + list(range(1, 4))
    with torch.no_grad():
        logits = net(x, pos=pos, mask=batching.document_mask(doc))
        token_loss = F.cross_entropy(
            logits.view(-1, 128), y.view(-1), ignore_index=-100, reduction="none"
        ).view(y.shape)
        for r, row in enumerate([[0, 1, 2], [3, 4]]):
            for d, i in enumerate(row):
                alone_x, alone_y = batching.collate([games[i]], "cpu")
                alone = F.cross_entropy(net(alone_x)[0], alone_y[0], reduction="sum")
                packed = token_loss[r][doc[r].eq(d)].sum()
                torch.testing.assert_close(packed, alone, rtol=1e-5, atol=1e-5)


def test_packed_update_gradient_equals_the_single_pass_gradient() -> None:
    games = games_fixture()
    torch.manual_seed(0)
    net = gpt.build("tiny")
    values = batching.backward_group(
        net,
        games,
        [[[0, 3], [1]], [[2, 4]]],
        micro=2,
        rank=0,
        world=1,
        device="cpu",
        row_tokens=32,
    )
    assert values["valid_targets"] == sum(len(g) - 1 for g in games)
    assert values["padded_tokens"] == 3 * 32
    ref = reference_grad(games)
    for name, p in net.named_parameters():
        torch.testing.assert_close(p.grad, ref[name], rtol=1e-4, atol=1e-6)


def test_compile_setting_resolves_per_device_and_caches_go_to_the_run(tmp_path, monkeypatch):
    assert (
        compilation.resolve("auto", "cpu") is False and compilation.resolve("auto", "cuda") is True
    )
    with pytest.raises(ValueError):
        compilation.resolve("sometimes", "cuda")
    for key in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        monkeypatch.delenv(key, raising=False)
    env = compilation.cache_env(tmp_path / "compile-cache")
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str((tmp_path / "compile-cache/inductor").resolve())
    assert env["TRITON_CACHE_DIR"] == str((tmp_path / "compile-cache/triton").resolve())


@pytest.mark.slow
def test_flex_attention_document_mask_matches_the_dense_mask() -> None:
    """FlexAttention (CUDA path) and the dense CPU fallback agree (flex runs eagerly here)."""
    flex = pytest.importorskip("torch.nn.attention.flex_attention")
    doc = torch.tensor([[0] * 40 + [1] * 50 + [2] * 38, [0] * 128]).long()
    q, k, v = (torch.randn(2, 2, 128, 16) for _ in range(3))

    def mask_mod(b, h, qi, ki):  # noqa: ANN001
        return (doc[b, qi] == doc[b, ki]) & (ki <= qi)

    block = flex.create_block_mask(mask_mod, 2, None, 128, 128, device="cpu")
    got = flex.flex_attention(q, k, v, block_mask=block)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=batching.dense_document_mask(doc))
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_benchmark_smoke_on_cpu(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import train_speed

    out = tmp_path / "speed.json"
    code = train_speed.main(
        [
            "--device=cpu",
            "--model=tiny",
            "--steps=1",
            "--ref-steps=1",
            "--warmup=1",
            "--packed-rows=1",
            "--games=300",
            "--val-games=8",
            "--threads=1",
            "--profile=1",
            f"--out={tmp_path}",
            f"--json={out}",
        ]
    )
    assert code == 0
    record = json.loads(out.read_text())
    paths = {r["path"]: r for r in record["results"]}
    assert set(paths) == {"reference", "compiled", "packed"}  # graphs, graphs-overlap: GPU only
    assert paths["packed"]["padding_fraction"] < paths["compiled"]["padding_fraction"]
    assert paths["compiled"]["validation"]["ratio"] > 0
    assert paths["compiled"]["profile"]["updates"] == 1
    assert (tmp_path / "speed-compiled-1gpu-profile.txt").read_text().count("aten::") > 5


@pytest.mark.slow
def test_benchmark_times_a_path_with_the_outcome_head(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import train_speed

    out = tmp_path / "speed.json"
    args = ["--device=cpu", "--model=tiny", "--steps=1", "--warmup=1", "--games=64"]
    args += ["--val-games=8", "--threads=1", "--no-validation", f"--out={tmp_path}"]
    assert train_speed.main([*args, "--paths=compiled,compiled+outcome", f"--json={out}"]) == 0
    paths = {r["path"]: r for r in json.loads(out.read_text())["results"]}
    assert {p: r["outcome_head"] for p, r in paths.items()} == {
        "compiled": False,
        "compiled+outcome": True,
    }
    with pytest.raises(SystemExit):
        train_speed.main([*args, "--paths=reference+outcome", f"--json={out}"])


@pytest.mark.slow
def test_changing_packing_under_an_existing_run_is_refused(tiny_cache: Path, tmp_path) -> None:
    run_dir = tmp_path / "run"
    common = [
        "train",
        f"--cache={tiny_cache}",
        f"--run-dir={run_dir}",
        "--model=tiny",
        "--micro=2",
        "--accum=1",
        "--epochs=1",
        "--seed=7",
        "--segment-updates=1",
        "--threads=1",
        "--schedule-steps=10",
        "--warmup-steps=2",
    ]
    first = run_segment([*common, "--segment=0", f"--status-out={run_dir}/s/0.json"], workers=1)
    assert first.returncode == 0, first.stderr[-3000:]
    again = run_segment(
        [
            *common,
            "--segment=1",
            f"--status-out={run_dir}/s/1.json",
            f"--previous-status={run_dir}/s/0.json",
            "--packing=on",
        ],
        workers=1,
    )
    assert again.returncode != 0
    assert "changed: packing" in again.stderr, again.stderr[-3000:]
    shutil.rmtree(run_dir, ignore_errors=True)


def test_the_probes_warm_up_compiles_the_graph_validation_uses(tiny_cache, tmp_path, monkeypatch):
    """Segment 0 validates before its first update; the probe warms up after its updates. The
    probe's one validation forward must still leave exactly the inference graph that
    ``evaluate`` then loads from the compile cache (a graph compiled after another one of the
    same frame is keyed differently: hence ``compile_inference``, a frame of its own)."""
    from torch._dynamo.utils import counters

    from chesslm.data.cache import TokenCache
    from chesslm.train import validation

    for key, sub in (("TORCHINDUCTOR_CACHE_DIR", "inductor"), ("TRITON_CACHE_DIR", "triton")):
        monkeypatch.setenv(key, str(tmp_path / sub))
    compilation.cache_env(tmp_path)
    cache, cpu = TokenCache(tiny_cache), torch.device("cpu")

    def compiled() -> tuple[torch.nn.Module, validation.Forward]:
        # the tiny preset's one block: the frames and graphs the probe compiles, in that order,
        # with a third less for Inductor to compile cold (its fixed cost is the rest)
        net = gpt.GPT(dataclasses.replace(presets.config_for("tiny"), n_layer=1))
        compilation.compile_model(net, static_shapes=False)
        return net, compilation.compile_inference(net)

    try:
        torch._dynamo.reset()
        net, forward = compiled()  # the probe: updates first, then the warm-up
        x, _ = batching.collate([cache.train[i] for i in range(4)], cpu, pad_multiple=64)
        net(x).sum().backward()
        counters.clear()
        validation.warm_up(net, cache.validation, cpu, micro=8, pad_multiple=64, forward=forward)
        assert counters["inductor"]["fxgraph_cache_miss"] == 1  # compiled, and cached
        torch._dynamo.reset()  # segment 0, a new process: only the cache on disk is left
        counters.clear()
        data = validation.ValidationSet(cache, cpu, legality_games=None)
        net, forward = compiled()
        validation.evaluate(net, data, micro=8, pad_multiple=64, forward=forward)
        assert counters["inductor"]["fxgraph_cache_hit"] >= 1
        assert counters["inductor"]["fxgraph_cache_miss"] == 0
    finally:
        torch._dynamo.reset()
