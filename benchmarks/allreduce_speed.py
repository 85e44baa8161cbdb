"""The gradient all-reduce alone: seconds and bus bandwidth of NCCL all-reduces of the sizes the
training paths use (the default path's one flat FP32 buffer of the baseline's 85.9M
parameters, 344 MB; the bucketed path's 25 MB buckets), to set against an update's compute
time when two GPUs scale less than 2x.

    torchrun --standalone --nproc-per-node=2 benchmarks/allreduce_speed.py --json out/ar.json

Run with NCCL_DEBUG=INFO to see the transport NCCL chose (P2P over NVLink, SHM, ...).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

BASELINE_PARAMETERS = 85_940_736  # chesslm.model.presets.BASELINE_PARAMETERS (no chesslm import)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", required=True)
    p.add_argument("--mib", default="25,344", help="sizes in MB (10^6 bytes), comma separated")
    p.add_argument("--reps", type=int, default=20)
    a = p.parse_args()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:  # gloo on the CPU: the script's own check, not a figure
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    world = dist.get_world_size()
    sizes = [int(float(s) * 1e6) for s in a.mib.split(",")]
    sizes.append(BASELINE_PARAMETERS * 4)
    results = []
    for nbytes in sizes:
        buffer = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
        for _ in range(3):  # warm-up: connections, channels
            dist.all_reduce(buffer)
        sync(device)
        start = time.perf_counter()
        for _ in range(a.reps):
            dist.all_reduce(buffer)
        sync(device)
        seconds = (time.perf_counter() - start) / a.reps
        algbw = nbytes / seconds / 1e9
        results.append(
            {
                "bytes": nbytes,
                "milliseconds": seconds * 1e3,
                "algorithm_gb_per_s": algbw,
                "bus_gb_per_s": algbw * 2 * (world - 1) / world,  # nccl-tests' busbw
            }
        )
        if dist.get_rank() == 0:
            print(json.dumps(results[-1]), flush=True)
    if dist.get_rank() == 0:
        env = {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}
        record = {"world": world, "torch": torch.__version__, "nccl_env": env, "results": results}
        Path(a.json).write_text(json.dumps(record, indent=2))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
