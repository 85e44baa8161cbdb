"""Helpers for data and workflow tests: the embedded sample read with python-chess (the rules
oracle), and real snakemake runs in a scratch directory."""

from __future__ import annotations

import functools
import io
import os
import subprocess
from pathlib import Path

import chess.pgn
import torch
import zstandard

from chesslm.model import checkpoint, gpt
from chesslm.train import batching, cuda_graphs, optim
from chesslm.train import checkpoint as train_checkpoint
from chesslm.train.state import TrainState
from tests import forked

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "resources" / "lichess-sample.pgn.zst"


def sample_text() -> str:
    with open(SAMPLE, "rb") as fh:
        return zstandard.ZstdDecompressor().stream_reader(fh).read().decode("utf-8")


@functools.cache  # ~40 s of python-chess: its tests share one xdist group ("sample")
def all_sample_games() -> tuple[chess.pgn.Game, ...]:
    """Every game of the embedded sample, parsed by python-chess."""
    handle = io.StringIO(sample_text())
    games = []
    while (game := chess.pgn.read_game(handle)) is not None:
        games.append(game)
    return tuple(games)


def first_games_pgn(n: int) -> str:
    """The PGN text of the sample's first n games (n <= 900: all of those have an Event tag)."""
    pieces = sample_text().split("\n\n[Event ")
    return "\n\n[Event ".join(pieces[:n]) + "\n"


def snakemake(
    workdir: Path, *args: str, check: bool = True, snakefile: Path = ROOT / "Snakefile"
) -> subprocess.CompletedProcess[str]:
    """Run real snakemake on the project's workflow with ``workdir`` as working directory."""
    cmd = ["--snakefile", str(snakefile), "--directory", str(workdir), *args]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = forked.run("snakemake", cmd, cwd=workdir, env=env, timeout=900)
    if check and result.returncode != 0:
        raise AssertionError(
            f"snakemake {' '.join(args)} failed ({result.returncode}):\n"
            f"{result.stdout[-4000:]}\n{result.stderr[-6000:]}"
        )
    return result


def small_payload(*, stepped: bool = False) -> dict:
    """A checkpoint payload of the tiny model (tied embedding and head); ``stepped``: after
    one AdamW update on random gradients, so the optimizer has state to save too."""
    torch.manual_seed(0)
    net = gpt.build("tiny")
    opt = optim.optimizer(net, 1e-3, device=torch.device("cpu"))
    sched = optim.scheduler(opt, warmup_steps=1, schedule_steps=10)
    if stepped:
        for p in net.parameters():
            p.grad = torch.randn_like(p)
        opt.step()
        sched.step()
    return train_checkpoint.payload(
        model=net,
        optimizer=opt,
        scheduler=sched,
        state=TrainState(next_group=3, step=3),
        rng_by_rank=[train_checkpoint.rng_state(torch.device("cpu"))],
        identity={"lr": 1e-3, "max_updates": None, "epochs": 2},
        lineage={"segment": 0, "parent_sha256": None},
    )


def children(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` (Linux /proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` in the process tree."""
    found, todo = [], [pid]
    while todo:
        for child in children(todo.pop()):
            found.append(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited; only its parent's reaping is left


def model_checkpoint(
    path: Path,
    *,
    preset: str = "tiny",
    seed: int = 0,
    spread: float = 0.0,
    conditioning: str | None = None,
    outcome: bool = False,
) -> Path:
    """A checkpoint of a freshly initialised model, written by the project's saver and loadable
    like a trained run's best.pt; ``spread`` > 0 adds Gaussian noise of that scale to every
    parameter (so LayerNorm gains and biases are not their trivial 1 and 0); ``conditioning``:
    the identity's input layout (``elo``: rating-conditioned), absent when None; ``outcome``:
    with the outcome head."""
    torch.manual_seed(seed)
    net = gpt.build(preset, outcome=outcome)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(spread * torch.randn_like(p))
    payload = small_payload()
    payload["model"] = net.state_dict()
    payload["identity"] = {"model": {"preset": preset, **net.config.to_dict()}}
    if conditioning is not None:
        payload["identity"]["conditioning"] = conditioning
    checkpoint.save(path, payload)
    return path


def graphs_beside_default(games: list, model: dict, **heads) -> list[tuple]:
    """For padded games and then packed rows: the tiny model (built from seed 0 with ``model``'s
    heads) after one optimizer step's backward on the default path and on
    ``cuda_graphs.MicrobatchGraphs`` (uncaptured on the CPU: the same static buffers), as
    ``(default_net, default_values, graphs_net, graphs_stats)``; ``heads`` are the targets
    (``outcomes``, ``times``) both paths take."""
    pairs = []
    for row_tokens, group in ((None, [[0, 1], [2]]), (512, [[[0, 1], [2]], [[3, 4]]])):
        torch.manual_seed(0)
        default = gpt.build("tiny", **model)
        values = batching.backward_group(
            default, games, group, world=1, device="cpu", row_tokens=row_tokens, micro=2,
            rank=0, **heads,
        )  # fmt: skip
        torch.manual_seed(0)
        graphed = gpt.build("tiny", **model)
        g = cuda_graphs.MicrobatchGraphs(
            graphed, device=torch.device("cpu"), pad_multiple=64, max_len=1024,
            row_tokens=row_tokens,
        )  # fmt: skip
        stats = g.backward_group(games, group, micro=2, rank=0, **heads).tolist()
        pairs.append((default, values, graphed, stats))
    return pairs


def assert_same_gradients(a: torch.nn.Module, b: torch.nn.Module) -> None:
    for (name, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-7, msg=name)
