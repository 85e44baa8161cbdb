"""Shared fixtures: tiny token caches made from the embedded Lichess sample, the staged run
(one real snakemake run of tests/train-workflow.yaml per session, every stage), one Chromium;
and the xdist groups (pyproject.toml runs the tests on two workers, --dist loadgroup)."""

from __future__ import annotations

import fcntl
import io
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import chess.pgn
import numpy as np
import pytest
import zstandard

from chesslm.data import cache, gamearrays, metadata, tokens

if TYPE_CHECKING:
    from tests.browser import Browser

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "resources" / "lichess-sample.pgn.zst"


# tests that use these fixtures share one pytest-xdist worker (--dist loadgroup): the staged
# run's folder is changed in place by its tests in turn; the Slurm tests share one cluster run
GROUPS = {"trained_workflow": "staged", "cluster_run": "slurm"}


# the longest groups, longest first (a whole grouped run's timeline, 2026-12-02; pyproject's
# --no-loadscope-reorder keeps this order instead of xdist's, by number of tests): handed out
# first, so that no worker starts one of them while the other has nothing left to do; the
# recovery tests after two that need no staged run (they would wait for its build)
LONGEST_FIRST = (
    "staged",
    "tests/workflow/test_segment.py",
    "tests/workflow/test_docs.py",
    "tests/workflow/test_recovery.py",
    "tests/workflow/test_orphans.py",
    "tests/workflow/test_owners.py",
    "tests/workflow/test_killed_writers.py",
    "tests/workflow/test_speed.py",
    "sample",
    "tests/workflow/test_many_workers.py",
    "tests/workflow/test_conditioning_train.py",
    "tests/workflow/test_summary.py",
    "tests/workflow/test_uci.py",
)


def _group(item: pytest.Item) -> str:
    mark = item.get_closest_marker("xdist_group")
    if mark:
        return mark.args[0] if mark.args else mark.kwargs.get("name", "default")
    names = getattr(item, "fixturenames", ())
    return next((g for f, g in GROUPS.items() if f in names), item.nodeid.split("::")[0])


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test file is an xdist group of its own (its module fixtures built once), but for
    the groups of GROUPS and marks a test sets itself; the longest groups go first (a stable
    sort: the order within a group is kept)."""
    for item in items:
        if not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(_group(item)))
    rank = {group: i for i, group in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(_group(item), len(rank)))


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's: its controller, once a worker collected
def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    """Refuse to run ungrouped: the staged run's tests would wait on each other's locks."""
    grouping = node.config.getvalue("dist") == "loadgroup"
    # xdist suffixes each id with "@group", the name it schedules by
    if grouping and ids and not any("@" in i for i in ids):
        pytest.exit(
            "pytest-xdist did not group the tests (--dist loadgroup); pytest "
            f"{pytest.__version__} with this pytest-xdist is the known cause "
            "(pytest-xdist#1386): pip install 'pytest<9.2'",
            returncode=pytest.ExitCode.USAGE_ERROR,
        )


_SAMPLE_MOVES: list[tuple[chess.Move, ...]] = []  # the longest prefix parsed so far
_SAMPLE_RESULTS: list[str] = []  # their PGN Result tags
_SAMPLE_CLOCKS: list[tuple[list[float], str]] = []  # their [%clk] seconds and TimeControl tags


def sample_games(n: int, *, max_plies: int) -> list[np.ndarray]:
    """The first ``n`` sample games with at least one move, cut to ``max_plies`` plies (the
    sample is parsed once for the longest ``n`` asked for so far)."""
    if len(_SAMPLE_MOVES) < n:
        _SAMPLE_MOVES[:] = []
        _SAMPLE_RESULTS[:] = []
        _SAMPLE_CLOCKS[:] = []
        with open(SAMPLE, "rb") as fh:
            text = io.TextIOWrapper(
                zstandard.ZstdDecompressor().stream_reader(fh), encoding="utf-8"
            )
            while len(_SAMPLE_MOVES) < n and (game := chess.pgn.read_game(text)) is not None:
                if moves := tuple(game.mainline_moves()):
                    _SAMPLE_MOVES.append(moves)
                    _SAMPLE_RESULTS.append(game.headers.get("Result", "*"))
                    clocks = [-1.0 if (c := n.clock()) is None else c for n in game.mainline()]
                    _SAMPLE_CLOCKS.append((clocks, game.headers.get("TimeControl", "-")))
    return [
        np.array(tokens.encode_moves(moves[:max_plies]), dtype=np.uint8)
        for moves in _SAMPLE_MOVES[:n]
    ]


def make_cache(
    directory: Path,
    *,
    n_train: int,
    n_val: int,
    max_plies: int = 24,
    fingerprint: str = "test-fingerprint",
    legality_games: int | None = cache.LEGALITY_GAMES,
    ratings: bool = False,
    results: bool = False,
    clocks: bool = False,
) -> Path:
    """``ratings``: give the games seeded White and Black Elos (every 5th one unknown, -1)
    instead of none at all (every column at its sentinel); ``results``: their sample games'
    real results (index into ``metadata.RESULTS``), every 7th made unknown (``*``, -1);
    ``clocks``: their real ``[%clk]`` readings and time controls, every 5th game's readings
    dropped (the sample's first games all have clocks; half the sample has none)."""
    games = sample_games(n_train + n_val, max_plies=max_plies)
    tags = _SAMPLE_RESULTS[: n_train + n_val]
    outcomes = [metadata.RESULTS.index(r) if r in metadata.RESULTS else -1 for r in tags]
    shards = directory / "shards"
    shards.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(26)
    for split, part, known in (
        ("train", games[:n_train], outcomes[:n_train]),
        ("validation", games[n_train:], outcomes[n_train:]),
    ):
        gamearrays.save(
            shards / split, gamearrays.pack(part, [f"{split}{i}" for i in range(len(part))])
        )
        for column in ("white_elo", "black_elo") if ratings else ():
            elo = rng.integers(600, 3500, len(part)).astype(np.int16)
            elo[::5] = -1
            gamearrays.save_npy(metadata.column_path(shards / split, column), elo)
        if clocks:
            first = 0 if split == "train" else n_train
            _save_clocks(shards / split, part, _SAMPLE_CLOCKS[first : first + len(part)])
        if results:
            result = np.array(known, dtype=np.int8)
            result[3::7] = -1
            gamearrays.save_npy(metadata.column_path(shards / split, "result"), result)
    out = directory / "token-cache"
    cache.build(
        out,
        {"train": [shards / "train"], "validation": [shards / "validation"]},
        meta={"dataset_fingerprint": fingerprint},
        legality_games=legality_games,
    )
    return out


def _save_clocks(
    prefix: Path, games: list[np.ndarray], tags: list[tuple[list[float], str]]
) -> None:
    """The clock, base, increment and speed columns of ``games`` (cut to their plies) from
    their sample games' readings and TimeControl tags."""
    per_ply, base, increment, speed = [], [], [], []
    for k, (game, (clocks, control)) in enumerate(zip(games, tags, strict=True)):
        plies = (len(game) - 2) // 3
        per_ply += clocks[:plies] if k % 5 else [-1.0] * plies
        b, i, s = metadata.speed_index(control)
        base.append(b)
        increment.append(i)
        speed.append(s)
    columns = {"clock": metadata.clock_column(np.array(per_ply, dtype=np.float64))}
    columns |= {"base_seconds": np.array(base), "increment_seconds": np.array(increment),
                "speed": np.array(speed)}  # fmt: skip
    for name, values in columns.items():
        dtype = metadata.COLUMNS[name].dtype
        gamearrays.save_npy(metadata.column_path(prefix, name), values.astype(dtype))


@dataclass(frozen=True)
class StagedRun:
    """tests/train-workflow.yaml staged once per test session by real snakemake (dataset and
    run ``mini``: the first 300 sample games, two gloo workers, two segments of 3 updates):
    data -> probe -> segment 0 -> segment 1 -> results -> ladder + play -> summary -> the HTML
    report -> export. Tests that change a tree take a copy (``copy``)."""

    root: Path

    def copy(self, destination: Path) -> Path:
        """The whole run copied for a test that changes it, while no test uses it in place
        (``trained_workflow``'s lock, shared): a snakemake running in it meanwhile removes
        files the copy is listing (its ``.snakemake/incomplete`` markers)."""
        with open(self.root / "in-place.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_SH)
            return copy_tree(self.workdir, destination)

    @property
    def workdir(self) -> Path:
        """The whole run, every stage done."""
        return self.root / "wf"

    @property
    def after_segment_0(self) -> Path:
        """A copy taken when data, probe and segment 0 (of 2) were done."""
        return self.root / "after-segment-0"

    @property
    def last_pt(self) -> Path:
        """The finished run's train/last.pt as the chain left it (the unbroken run)."""
        return self.root / "unbroken-last.pt"

    @property
    def unexported_summary(self) -> Path:
        """summary.md as rule summarise wrote it before the export existed."""
        return self.root / "summary-unexported.md"

    @property
    def report(self) -> Path:
        """``snakemake results/mini/report/summary.md --report``: the run's HTML report."""
        return self.workdir / "browser-report.html"

    def console(self, stage: str) -> str:
        """What snakemake printed in ``stage`` (one of STAGES)."""
        return (self.root / "console" / f"{stage}.txt").read_text()


STAGED_ARGS = ("--configfile", "train-workflow.yaml")
# stage -> its snakemake arguments, in order; "segment-0" is kept as after_segment_0
STAGES = {
    "probe": ("results/mini/probe-results.json", "--cores", "2"),  # segment 0 does not ask it
    "segment-0": ("results/mini/segments/0.json", "--cores", "2"),
    "results": ("results/mini/results.json", "--cores", "2"),
    "play": ("results/mini/report/summary.md", "--cores", "2"),  # ladder, play, summarise
    "report": ("results/mini/report/summary.md", "--report", "browser-report.html"),
    "export": ("results/mini/export/model.safetensors", "--cores", "2"),
}


def copy_tree(source: Path, destination: Path) -> Path:
    """A workflow directory copied for a test that changes it (snakemake's locks left out)."""
    shutil.copytree(source, destination, symlinks=True, ignore=shutil.ignore_patterns("locks"))
    return destination


def shared_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's temporary folder, the same for every pytest-xdist worker."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def _stage(staged: StagedRun) -> None:
    from tests.helpers import first_games_pgn, snakemake

    workdir = staged.workdir
    (workdir / "config").mkdir(parents=True)
    shutil.copy(ROOT / "config" / "config.yaml", workdir / "config" / "config.yaml")
    (workdir / "resources").symlink_to(ROOT / "resources")
    (workdir / "mini.pgn").write_text(first_games_pgn(300))
    shutil.copy(ROOT / "tests" / "train-workflow.yaml", workdir / "train-workflow.yaml")
    plan = snakemake(workdir, "results/mini/results.json", *STAGED_ARGS, "-n")
    # the segments are planned once the probe (a checkpoint) has run: workflow/rules/train.smk
    for rule in ("token_cache", "probe", "results"):
        assert rule in plan.stdout, plan.stdout
    (staged.root / "console").mkdir()
    for stage, args in STAGES.items():
        done = snakemake(workdir, *args, *STAGED_ARGS)
        (staged.root / "console" / f"{stage}.txt").write_text(done.stdout + done.stderr)
        if stage == "segment-0":
            assert not (workdir / "results/mini/segments/1.json").exists()
            copy_tree(workdir, staged.after_segment_0)
        if stage == "results":
            shutil.copy(workdir / "results/mini/train/last.pt", staged.last_pt)
        if stage == "play":
            shutil.copy(workdir / "results/mini/report/summary.md", staged.unexported_summary)


@pytest.fixture(scope="session")
def staged_run(tmp_path_factory: pytest.TempPathFactory) -> StagedRun:
    """The staged run, built by the first worker that asks for it (a file lock), once."""
    staged = StagedRun(shared_root(tmp_path_factory) / "staged-run")
    staged.root.mkdir(exist_ok=True)
    failed, done = staged.root / "failed.txt", staged.root / "done"
    with open(staged.root / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if failed.exists():
            pytest.fail(f"the staged run failed in another worker: {failed.read_text()[-4000:]}")
        if not done.exists():
            try:
                _stage(staged)
            except BaseException as error:
                failed.write_text(str(error))
                raise
            done.write_text("")
    return staged


@pytest.fixture
def trained_workflow(staged_run: StagedRun) -> Iterator[Path]:
    """The staged run's folder, used in place by one test at a time: a file lock held for the
    test serialises them across pytest-xdist workers too (their group, "staged", keeps them on
    one worker as a rule; the lock makes it a guarantee). Tests elsewhere copy or only read."""
    with open(staged_run.root / "in-place.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield staged_run.workdir


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    """One headless Chromium for the session (an xdist worker's); each test opens its page."""
    from tests.browser import Browser, chromium

    executable = chromium()
    assert executable, "the report tests need a real browser: apt-get install -y chromium"
    with Browser(executable) as launched:
        yield launched


@pytest.fixture(scope="session")
def tiny_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """24 training and 6 validation games of at most 24 plies."""
    return make_cache(tmp_path_factory.mktemp("cache"), n_train=24, n_val=6)


@pytest.fixture(scope="session")
def rated_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``tiny_cache``'s games with seeded ratings (conditioned runs' tests)."""
    return make_cache(tmp_path_factory.mktemp("rated"), n_train=24, n_val=6, ratings=True)


@pytest.fixture(scope="session")
def clocked_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``tiny_cache``'s games with their real clocks and time controls, ratings and results
    (time-input and think-time runs)."""
    return make_cache(
        tmp_path_factory.mktemp("clocked"), n_train=24, n_val=6, clocks=True, results=True,
        ratings=True,
    )  # fmt: skip


@pytest.fixture(scope="session")
def outcome_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``tiny_cache``'s games with their real results (every 7th unknown: outcome runs)."""
    return make_cache(tmp_path_factory.mktemp("outcome"), n_train=24, n_val=6, results=True)


def segment_args(cache: Path, run_dir: Path, n: int) -> list[str]:
    """The paths of segment ``n`` of the run in ``run_dir`` (resuming segment n-1's status)."""
    args = [
        "train",
        f"--cache={cache}",
        f"--run-dir={run_dir}",
        f"--segment={n}",
        f"--status-out={run_dir}/segments/{n}.json",
    ]
    if n > 0:
        args.append(f"--previous-status={run_dir}/segments/{n - 1}.json")
    return args


def run_segment(
    args: list[str], *, workers: int = 2, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``torchrun --standalone --nproc-per-node=workers -m chesslm.train.segment args`` (gloo):
    torchrun's own main in a process forked from one that imported it and the segment
    (tests/forked.py), which forks each rank where torchrun would start an interpreter (a
    fault to inject, ``CHESSLM_FAULT`` with tests/fault_injection/ on PYTHONPATH, is loaded by
    that process, as by every interpreter the command starts)."""
    from tests import forked

    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    torchrun = [
        "--standalone",
        f"--nproc-per-node={workers}",
        "-m",
        "chesslm.train.segment",
        "--dataset=tiny",  # a run key; the cache is named by --cache
        *args,
        f"--workers={workers}",
    ]
    return forked.run("torchrun", torchrun, cwd=ROOT, env=full_env, timeout=timeout)


# a tiny two-rank run of 4 updates, validated every 2: the bitwise-resume tests' settings
RESUME_HYPER = [
    "--model=tiny",
    "--micro=2",
    "--accum=2",
    "--epochs=2",
    "--max-updates=4",
    "--validation-every-steps=2",
    "--seed=11",
    "--threads-per-worker=1",
]

# the resume tests' two batch layouts: padded games, and packed rows (the tests' 24 games fill
# two 1024-token rows: one row a rank, an update an epoch)
BOTH_LAYOUTS = pytest.mark.parametrize(
    "flags",
    [["--packing=off"], ["--packing=on", "--micro=1", "--accum=1", "--epochs=4"]],
    ids=["padded", "packed"],
)


def train_ok(cache: Path, run_dir: Path, n: int, *args: str) -> None:
    """Segment ``n`` of the run in ``run_dir`` with ``args``, which must succeed."""
    result = run_segment([*segment_args(cache, run_dir, n), *args])
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


_FIRST_HALVES: dict[tuple[str, ...], Path] = {}  # (cache, *args) -> segment 0's run, kept


def first_half(cache: Path, run_dir: Path, *args: str) -> None:
    """Segment 0 (of 2 updates) of the run of ``args`` in ``run_dir``. Trained once per worker
    and copied after: a resume test and the refusal test beside it start from the same segment
    (one torchrun fewer each; tests/workflow/test_segment.py copies its first segment alike)."""
    key = (str(cache), *args)
    if key in _FIRST_HALVES:
        shutil.copytree(_FIRST_HALVES[key], run_dir, ignore=shutil.ignore_patterns(".lock"))
        return
    train_ok(cache, run_dir, 0, *args, "--segment-updates=2")
    kept = run_dir.parent / f"{run_dir.name}-segment-0"
    shutil.copytree(run_dir, kept, ignore=shutil.ignore_patterns(".lock"))
    _FIRST_HALVES[key] = kept


def resumed_beside_whole(cache: Path, tmp_path: Path, *args: str) -> tuple[Path, Path, Any, Any]:
    """The run of ``args`` trained in one segment (``tmp_path/whole``) and in two of 2
    updates (``tmp_path/resumed``): both folders and last.pt payloads, checked bit for bit
    equal (cursor at step 4, weights, optimizer state)."""
    import torch

    from chesslm.model import checkpoint

    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    train_ok(cache, whole, 0, *args)
    first_half(cache, resumed, *args)
    assert checkpoint.load(resumed / "train/last.pt")["cursor"]["step"] == 2
    train_ok(cache, resumed, 1, *args, "--segment-updates=2")
    a, b = checkpoint.load(whole / "train/last.pt"), checkpoint.load(resumed / "train/last.pt")
    assert a["cursor"] == b["cursor"] and a["cursor"]["step"] == 4
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name
    for key, state in a["optimizer"]["state"].items():
        for field, value in state.items():
            assert torch.equal(value, b["optimizer"]["state"][key][field]), (key, field)
    return whole, resumed, a, b


# ---------------------------------------------- the play tests' models, cache and ladder
# (tests/unit/test_scorer.py, test_matching.py, test_games.py, test_play_rule.py; their helpers are
# tests/playkit.py's; imported here when a test asks, so that tests without them load no torch)


@pytest.fixture(scope="module")
def net() -> Any:
    """A tiny model, freshly initialised with seed 0."""
    import torch

    from chesslm.model import gpt

    torch.manual_seed(0)
    return gpt.build("tiny").eval()


@pytest.fixture(scope="module")
def play_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A token cache of 6 train and 20 validation sample games (24 plies), with metadata."""
    from tests.playkit import MAX_PLIES, sample_pgn_games, write_metadata

    directory = tmp_path_factory.mktemp("play-cache")
    cache_dir = make_cache(directory, n_train=6, n_val=20, max_plies=MAX_PLIES)
    write_metadata(cache_dir, sample_pgn_games(26)[6:], MAX_PLIES)
    return cache_dir


@pytest.fixture(scope="module")
def noisy() -> Any:
    """A tiny model whose rating tokens' embeddings differ visibly (random init, spread)."""
    import torch

    from chesslm.model import gpt

    torch.manual_seed(1)
    net = gpt.build("tiny").eval()
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return net


@pytest.fixture(scope="module")
def tiny_ladder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real ladder file: four anchors, 2 games a pair (with the prior: finite ratings)."""
    from chesslm.ladder import players, round_robin
    from tests.playkit import TINY_LADDER

    path = tmp_path_factory.mktemp("ladder") / "ladder.json"
    engine = players.find_engine("stockfish")
    round_robin.write_ladder(path, round_robin.build_ladder(TINY_LADDER, engine))
    return path
