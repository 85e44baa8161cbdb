"""How long a checkpoint save blocks training: synchronous vs in the background.

Builds a model preset with AdamW state (one update on random gradients) on a device, then
times, per save, ``checkpoint.save`` (what a segment did before chesslm.train.saver) and the
background save's blocking part (``Saver.submit``: the host snapshot) and the final wait for
the writer; then checks that the background file loads to the same payload as the
synchronous one.

    python benchmarks/checkpoint_save.py --model baseline --device cuda --saves 3 \\
        --dir /tmp/ckpt --json out/checkpoint-save.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from chesslm.model import checkpoint, gpt  # noqa: E402
from chesslm.train import checkpoint as train_checkpoint  # noqa: E402
from chesslm.train import optim  # noqa: E402
from chesslm.train.saver import Saver  # noqa: E402
from chesslm.train.state import TrainState  # noqa: E402


def build(preset: str, device: torch.device) -> dict:
    torch.manual_seed(0)
    net = gpt.build(preset).to(device)
    opt = optim.optimizer(net, 3e-4, device=device)
    sched = optim.scheduler(opt, warmup_steps=1, schedule_steps=10)
    for p in net.parameters():
        p.grad = torch.randn_like(p)
    opt.step()
    sched.step()
    return train_checkpoint.payload(
        model=net,
        optimizer=opt,
        scheduler=sched,
        state=TrainState(step=1),
        rng_by_rank=[train_checkpoint.rng_state(device)],
        identity={"model": preset},
        lineage={"segment": 0, "parent_sha256": None},
    )


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="baseline")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--saves", type=int, default=3)
    p.add_argument("--dir", type=Path, default=Path("/tmp/checkpoint-save"))
    p.add_argument("--json", type=Path)
    a = p.parse_args()
    device = torch.device(a.device)
    a.dir.mkdir(parents=True, exist_ok=True)
    payload = build(a.model, device)
    record: dict = {"model": a.model, "device": str(device), "sync_s": [], "submit_s": []}
    for _ in range(a.saves):
        sync(device)
        t = time.perf_counter()
        checkpoint.save(a.dir / "sync.pt", payload)
        record["sync_s"].append(time.perf_counter() - t)
    saver = Saver()
    for _ in range(a.saves):  # a save per "check", the writer done before the next one
        sync(device)
        t = time.perf_counter()
        saver.submit(a.dir / "last.pt", payload)
        record["submit_s"].append(time.perf_counter() - t)
        time.sleep(max(record["sync_s"]) * 1.5)  # "training": the writer finishes meanwhile
    t = time.perf_counter()
    saver.close()
    record["final_wait_s"] = time.perf_counter() - t
    record["bytes"] = (a.dir / "last.pt").stat().st_size
    same, background = checkpoint.load(a.dir / "sync.pt"), checkpoint.load(a.dir / "last.pt")
    record["same_payload"] = all(
        torch.equal(v, background["model"][k]) for k, v in same["model"].items()
    ) and all(
        torch.equal(v, background["optimizer"]["state"][i][f])
        for i, s in same["optimizer"]["state"].items()
        for f, v in s.items()
    )
    text = json.dumps(record, indent=2)
    print(text)
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(text + "\n")
    assert record["same_payload"], "the background save's payload differs"


if __name__ == "__main__":
    main()
