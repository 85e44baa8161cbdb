"""Helpers for data and workflow tests: the embedded sample read with python-chess (the rules
oracle), and real snakemake runs in a scratch directory."""

from __future__ import annotations

import functools
import io
import os
import selectors
import subprocess
import sys
from pathlib import Path

import chess.engine
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

# lichess-bot's shipped config.yml.default, engine.uci_options (shared/notes/chess-eval.md)
LICHESS_BOT_OPTIONS = {
    "Move Overhead": 100,
    "Threads": 4,
    "Hash": 512,
    "SyzygyPath": "./syzygy/",
    "UCI_ShowWDL": True,
}
SOMEBOT = chess.engine.Opponent(name="somebot", title="BOT", rating=3000, is_engine=True)
LICHESS_BOT_OVERHEAD_MS = 2000  # lichess-bot's config.yml.default move_overhead
LICHESS_BOT_FIRST_GO = chess.engine.Limit(time=10)  # engine_wrapper.first_move_time


def lichess_bot_second_go(
    start_ms: int,
    inc_ms: int,
    *,
    white: bool,
    overhead_ms: int = LICHESS_BOT_OVERHEAD_MS,
    spent_ms: int = 1500,
    setup_ms: int = 40,
) -> dict[str, int]:
    """The numbers of lichess-bot's go before the engine's second move (before its first it
    sends ``go movetime 10000``), as ``engine_wrapper.game_clock_time`` makes them from
    Lichess's game state: each side's first move was free (``start_ms``, the clocks' start),
    White's second, before Black's, took ``spent_ms`` and got the increment; the mover's clock
    less lichess-bot's ``move_overhead`` and ``setup_ms``, its own time since the move came."""
    clocks = {"wtime": start_ms, "btime": start_ms}
    if not white:
        clocks["wtime"] += inc_ms - spent_ms
    mover = "wtime" if white else "btime"
    clocks[mover] = max(1, clocks[mover] - setup_ms - overhead_ms)
    return {**clocks, "winc": inc_ms, "binc": inc_ms}


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


class EngineTalk:
    """``chesslm-uci`` (``python -m chesslm.engine.uci``) as a real process talked to line by
    line: ``send`` a command, read ``until`` a line comes. ``python_flags`` go before ``-m``
    (e.g. ``-X importtime``, whose lines then come, in order, among the engine's: its stderr is
    its stdout). A read waits at most ``HANG_S``: a guard against a hung engine, not a speed.
    As a context manager it kills the engine at the end if it still runs."""

    HANG_S = 30.0

    def __init__(self, ckpt: Path, env: dict[str, str], python_flags: tuple[str, ...] = ()):
        command = [sys.executable, *python_flags, "-m", "chesslm.engine.uci", "--checkpoint"]
        self.proc = subprocess.Popen([*command, str(ckpt)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     env=env)  # fmt: skip
        self.pending, self.ready = b"", []  # a line's start; lines read, not yet taken

    def __enter__(self) -> EngineTalk:
        return self

    def __exit__(self, *_: object) -> None:
        if self.proc.poll() is None:  # a failed test's engine
            self.proc.kill()
        self.proc.communicate()

    def send(self, text: str) -> None:
        self.proc.stdin.write(text.encode())  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]

    def until(self, first_word: str) -> list[str]:
        """The lines up to and with the next whose first word is ``first_word``."""
        taken = []
        while True:
            while self.ready:
                taken.append(self.ready.pop(0))
                if taken[-1].split()[:1] == [first_word]:
                    return taken
            if not self._read():
                raise AssertionError(f"no {first_word!r} line, after: {taken[-20:]}")

    def _read(self) -> bool:
        """More of the output; False at its end or when none came within ``HANG_S``."""
        fd = self.proc.stdout.fileno()  # type: ignore[union-attr]
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            if not selector.select(self.HANG_S):
                return False
        chunk = os.read(fd, 1 << 16)
        *whole, self.pending = (self.pending + chunk).split(b"\n")
        self.ready.extend(line.decode(errors="replace") for line in whole)
        return bool(chunk)

    def end(self) -> tuple[int, list[str]]:
        """The exit status, once the process ends (within ``HANG_S``), and the lines it wrote
        that were not taken."""
        rest, _ = self.proc.communicate(timeout=self.HANG_S)
        return self.proc.returncode, self.ready + (self.pending + rest).decode().splitlines()


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
