"""Document-masked attention over packed rows: FlexAttention block sizes (default and
max-autotuned kernel configurations) vs varlen flash (with and without layout copies).

The packed path's attention is a causal mask inside each game of a 1024-token row. This times
one layer's attention (forward + backward, bf16, the baseline's 12 heads of 64) over real
packed rows of a token cache, for each kernel that can express that mask, and checks that
they agree on every token. Dense causal flash attention over whole rows (which lets games
see each other, so it is not a candidate) is the lower bound.

    python benchmarks/attention_speed.py --cache results/datasets/sample/token-cache \\
        --json out/attention.json
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from chesslm.data.cache import TokenCache  # noqa: E402
from chesslm.train import batching  # noqa: E402


def timed(fn, reps: int) -> float:  # noqa: ANN001
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / reps


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cache", required=True)
    p.add_argument("--json", required=True)
    p.add_argument("--rows", type=int, default=16)
    p.add_argument("--row-tokens", type=int, default=1024)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--reps", type=int, default=50)
    a = p.parse_args()
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    dev = torch.device("cuda")
    games = TokenCache(a.cache).train
    rows = batching.pack_rows(
        [len(games[i]) for i in range(len(games))], epoch=0, seed=1, row_tokens=a.row_tokens
    )[: a.rows]
    _, _, _, doc = batching.collate_packed(games, rows, dev, row_tokens=a.row_tokens)
    B, T, H, D = a.rows, a.row_tokens, a.heads, a.head_dim
    torch.manual_seed(0)
    q, k, v = (
        torch.randn(B, H, T, D, device=dev, dtype=torch.bfloat16, requires_grad=True)
        for _ in range(3)
    )
    grad = torch.randn(B, H, T, D, device=dev, dtype=torch.bfloat16)
    flex = torch.compile(flex_attention, dynamic=False)

    def mask_mod(b, h, qi, ki):  # noqa: ANN001
        return (doc[b, qi] == doc[b, ki]) & (ki <= qi)

    results = {}
    outputs = {}

    def record(name: str, forward, leaves=(q, k, v)) -> None:  # noqa: ANN001
        def fwd_bwd() -> None:
            for leaf in leaves:
                leaf.grad = None
            forward().backward(grad)

        with torch.no_grad():
            outputs[name] = forward().float()
        results[name] = {
            "forward_ms": timed(lambda: forward().detach(), a.reps) * 1e3,
            "forward_backward_ms": timed(fwd_bwd, a.reps) * 1e3,
        }
        print(name, json.dumps(results[name]), flush=True)

    variants = {
        "flex_block128": (128, None),
        "flex_block64": (
            64,
            {
                "BLOCK_M": 64,
                "BLOCK_N": 64,
                "BLOCK_M1": 32,
                "BLOCK_N1": 64,
                "BLOCK_M2": 64,
                "BLOCK_N2": 32,
            },
        ),
    }
    # max-autotune: Inductor benchmarks its own list of FlexAttention kernel configurations
    # (block sizes, warps, stages; forward and backward) and keeps the fastest
    tuned = torch.compile(flex_attention, dynamic=False, mode="max-autotune-no-cudagraphs")
    variants["flex_block128_autotuned"] = (128, None)
    variants["flex_block64_autotuned"] = (64, None)
    for key, (bs, options) in variants.items():
        kernel = tuned if key.endswith("_autotuned") else flex
        try:
            bm = create_block_mask(
                mask_mod, B, None, T, T, device=dev, BLOCK_SIZE=bs, _compile=True
            )
            record(
                key,
                lambda bm=bm, o=options, f=kernel: f(q, k, v, block_mask=bm, kernel_options=o),
            )
            results[key]["sparsity_percent"] = float(bm.sparsity())
        except Exception as e:  # noqa: BLE001  (one variant failing must not hide the others)
            results[key] = {"error": f"{type(e).__name__}: {e}"[:300]}
            print(key, results[key], flush=True)
    # varlen flash: every game (and each row's tail of padding) one sequence of B*T tokens
    try:
        from torch.nn.attention.varlen import varlen_attn

        bounds = torch.ones(B, T, dtype=torch.bool, device=dev)
        bounds[:, 1:] = doc[:, 1:] != doc[:, :-1]
        starts = bounds.view(-1).nonzero().view(-1)
        cu = torch.cat([starts, torch.tensor([B * T], device=dev)]).to(torch.int32)
        max_len = int((cu[1:] - cu[:-1]).max())
        params = inspect.signature(varlen_attn).parameters
        causal = {"window_size": (-1, 0)} if "window_size" in params else {"is_causal": True}

        def varlen() -> torch.Tensor:
            qq, kk, vv = (t.transpose(1, 2).reshape(B * T, H, D) for t in (q, k, v))
            out = varlen_attn(qq, kk, vv, cu, cu, max_len, max_len, **causal)
            return out.view(B, T, H, D).transpose(1, 2)

        record("varlen_flash", varlen)
        results["varlen_flash"]["sequences"] = len(cu) - 1
        # the same kernel on the layout the model's c_attn produces, (B*T, 3, H, D): q, k and
        # v are strided views of it and the output views back to (B, T, C), so no copies
        qkv = torch.stack(
            [t.detach().transpose(1, 2).reshape(B * T, H, D) for t in (q, k, v)], dim=1
        ).requires_grad_()

        def varlen_rows() -> torch.Tensor:
            out = varlen_attn(qkv[:, 0], qkv[:, 1], qkv[:, 2], cu, cu, max_len, max_len, **causal)
            return out.view(B, T, H, D).transpose(1, 2)  # a view, to compare and take grad

        try:
            record("varlen_flash_no_layout_copies", varlen_rows, leaves=(qkv,))
        except Exception as e:  # noqa: BLE001  (strided inputs refused: say so)
            results["varlen_flash_no_layout_copies"] = {"error": f"{type(e).__name__}: {e}"[:300]}
            print("varlen_flash_no_layout_copies", results["varlen_flash_no_layout_copies"])
    except Exception as e:  # noqa: BLE001  (not in this torch: say so, keep the others)
        results["varlen_flash"] = {"error": f"{type(e).__name__}: {e}"[:300]}
        print("varlen_flash", results["varlen_flash"], flush=True)
    dense = "dense_causal_sdpa (not document-masked)"
    record(dense, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    ref = outputs["flex_block128"]
    for name, out in outputs.items():
        if "dense" not in name:
            results[name]["max_abs_diff_vs_flex128"] = float((out - ref).abs().max())
    record_out = {"torch": torch.__version__, "B": B, "T": T, "H": H, "D": D, "results": results}
    Path(a.json).write_text(json.dumps(record_out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
