"""Legal moves of the validation games whose tables the token cache does not store (beyond
its ``legality_games``), computed on every core of the job.

How a move-matching job of ``threads`` cores (the rule's ``threads:``) shares them
(``workers``, ``ahead``): with one core, or when every selected game's tables are stored,
nothing changes (torch has every core; a missing table is computed in-process when its game is
scored). Otherwise worker processes prepare chunks of games:

* on a GPU, ``threads - 2`` workers (at least one), up to ``AHEAD`` chunks beyond the one
  being scored, while torch keeps one intra-op thread (the forward runs on the device): one
  core is left to the thread launching it and one to the thread building its batches (H200,
  16 cores: 14 workers scored 3-6 % more positions/s than 15 in the same rounds, 13 no more
  than 14; BENCHMARKS.md): preparation overlaps the scoring;
* on a CPU, where the forward needs every core too, ``threads`` workers prepare each chunk
  while torch waits, then torch scores it on ``threads`` threads while the workers wait: each
  phase has every core, and they never run at once.

Memory does not grow with the number of games (at most ``AHEAD`` + 1 chunks' tables). The
tables hold the codes of ``chesslm.data.cache.legal_tables``, as the cache stores them: the
same codes in the same order (a test compares them), whichever process computes them.
Importing this module imports no torch.

The workers are forked once per process (``started``) and shared by every evaluation in it:
forking copies the parent's page tables, so 15 forks of a play job that holds a model on a GPU
delayed its first batch by most of a second (H200, BENCHMARKS.md); a job forks them before
it loads its model (``chesslm.play.evaluate``).
"""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor

import chess
import numpy as np

from chesslm import watch
from chesslm.data import cache, tokens

AHEAD = 2  # chunks prepared beyond the one being scored
FIRST_PIECES = (16, 64)  # on a GPU, the first chunk is scored in pieces of these games first
TASK_GAMES = 32  # games per worker task: small, so that the workers share a chunk evenly

Tables = tuple[np.ndarray, np.ndarray]  # (legal codes back to back, offsets per ply)


def workers(threads: int, games_to_prepare: int, device: str) -> int:
    """Preparation processes of a job of ``threads`` cores (see the module's docstring).

    >>> workers(16, 9, "cuda"), workers(16, 9, "cpu"), workers(1, 9, "cpu"), workers(16, 0, "cpu")
    (14, 16, 0, 0)
    """
    if threads < 2 or games_to_prepare == 0:
        return 0
    return threads if device == "cpu" else max(1, threads - 2)


def ahead(device: str) -> int:
    """Chunks prepared beyond the one being scored: none on a CPU (the phases alternate)."""
    return 0 if device == "cpu" else AHEAD


def pieces(chunks: Sequence[np.ndarray], split_first: bool) -> list[tuple[int, np.ndarray, bool]]:
    """(index into ``chunks``, games, whether the chunk's last piece) in scoring order.
    ``split_first``: the first chunk goes in pieces of ``FIRST_PIECES`` games, then the rest,
    so that the device starts on a few games' batches while the workers prepare the others
    (whole, a chunk's first batch waits for all of its games: about 0.2 s of an idle H200).

    >>> [(c, len(g), last) for c, g, last in pieces([np.arange(100), np.arange(7)], True)]
    [(0, 16, False), (0, 64, False), (0, 20, True), (1, 7, True)]
    """
    out = []
    for c, games in enumerate(chunks):
        cuts = [int(n) for n in np.cumsum(FIRST_PIECES) if n < len(games)]
        parts = np.split(games, cuts) if split_first and c == 0 else [games]
        out += [(c, part, k == len(parts) - 1) for k, part in enumerate(parts)]
    return out


def board_codes(board: chess.Board) -> np.ndarray:
    """The sorted legal move codes (``cache.move_code``) of ``board``, int64."""
    codes = [cache.move_code(*tokens.move_tokens(m)) for m in board.legal_moves]
    return np.sort(np.array(codes, dtype=np.int64))


def legal_codes(game: np.ndarray) -> list[np.ndarray]:
    """The sorted legal move codes at each ply of one tokenised game: ``cache.legal_tables``'
    codes (int32, as it stores them) without its mask rows, which move-matching does not read."""
    board, per_ply = chess.Board(), []
    for ply in range((len(game) - 2) // 3):
        per_ply.append(board_codes(board).astype(np.int32))
        board.push(tokens.decode_move([int(t) for t in game[1 + 3 * ply : 4 + 3 * ply]]))
    return per_ply


def game_tables(game: np.ndarray) -> Tables:
    """(codes, offsets) of one tokenised game's plies, as the token cache stores them."""
    per_ply = legal_codes(np.asarray(game))
    offsets = np.zeros(len(per_ply) + 1, dtype=np.int64)
    np.cumsum([len(c) for c in per_ply], out=offsets[1:])
    codes = np.concatenate(per_ply) if per_ply else np.zeros(0, dtype=np.int32)
    return codes, offsets


def many_tables(games: Sequence[np.ndarray]) -> list[Tables]:
    """``game_tables`` of each game (one worker task)."""
    return [game_tables(g) for g in games]


class Pending:
    """The tables of one chunk's games, being computed (``tables`` waits for them)."""

    def __init__(self, ids: Sequence[int], futures: list[Future], games: list[np.ndarray]):
        self.ids, self.futures, self.games = list(ids), futures, games

    def cancel(self) -> None:
        """Drop the tasks not yet started (a budget stop: the chunk is not scored)."""
        for f in self.futures:
            f.cancel()

    def tables(self) -> dict[int, Tables]:
        """Game id -> tables (computed here, in-process, when there is no pool)."""
        if self.futures:
            done = [t for f in self.futures for t in f.result()]
        else:
            done = many_tables(self.games)
        return dict(zip(self.ids, done, strict=True))


class Preparer:
    """A pool of ``n_workers`` processes computing games' tables (none: in-process, lazily).

    Forked, as chesslm.data.workers' are: a spawned worker would re-run the job's main script
    (Snakemake's), and the workers touch neither torch nor the device."""

    def __init__(self, n_workers: int) -> None:
        self.n_workers = n_workers
        self.pool = (
            ProcessPoolExecutor(
                n_workers,
                mp_context=multiprocessing.get_context("fork"),
                # killed with the job (a job killed outright would leave its idle
                # workers waiting for tasks forever, handed to init)
                initializer=watch.die_with_parent,
            )  # fmt: skip
            if n_workers > 0
            else None
        )

    def start(self) -> Preparer:
        """Fork the workers now (a forking pool starts them all at its first task), from this
        thread: each worker dies with the thread that forked it (``watch.die_with_parent``)."""
        if self.pool is not None:
            self.pool.submit(int).result()
        return self

    def submit(self, ids: Sequence[int], games: list[np.ndarray]) -> Pending:
        """Start the tables of ``games`` (validation indices ``ids``)."""
        if self.pool is None:
            return Pending(ids, [], games)
        size = max(1, min(TASK_GAMES, -(-len(games) // self.n_workers)))  # few: every worker
        futures = [self.pool.submit(many_tables, games[i : i + size])
                   for i in range(0, len(games), size)]  # fmt: skip
        return Pending(ids, futures, [])

    def __enter__(self) -> Preparer:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.pool is not None:
            # chunks ahead of a budget stop are dropped; a running task is one small batch
            self.pool.shutdown(wait=True, cancel_futures=True)


_STARTED: dict[int, Preparer] = {}


def start_job(threads: int, device: str) -> Preparer:
    """Fork the workers a move-matching job of ``threads`` cores on ``device`` prepares games
    with (``workers``, as if some games lacked tables), before the job loads its model."""
    return started(workers(threads, 1, device))


def started(n_workers: int) -> Preparer:
    """This process's pool of ``n_workers`` workers, forked at the first call and kept until
    the process ends; 0: in-process. Called from another thread than the main one, a pool of
    that thread's own (not kept: its workers die with the thread, ``Preparer.start``)."""
    if threading.current_thread() is not threading.main_thread():
        return Preparer(n_workers).start()
    if n_workers not in _STARTED:
        _STARTED[n_workers] = Preparer(n_workers).start()
    return _STARTED[n_workers]
