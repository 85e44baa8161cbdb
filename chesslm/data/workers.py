"""The processes of a conversion: one reader, parsing workers, results back in input order.

A reader process cuts each input into chunks, worker processes parse a chunk into one result
or more and spool each result's games, split by split, to one file; the main process reads
them back in input order (``chunk_results``). With one worker, one process does it all. How a
file is cut and a chunk parsed is its format's row (chesslm.data.sources: PGN text goes
through buffers shared with the workers, a Parquet file's row groups are read by a worker
itself); nothing here asks which format a file is.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import queue
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from chesslm.data import gamearrays, pgn, sources
from chesslm.data.parsing import ChunkResult
from chesslm.data.settings import Settings
from chesslm.data.sources import Pool

CHUNK_BYTES = 4 << 20  # text per chunk a worker parses: thousands of games
WORKER_NICENESS = 5


class ConvertError(ValueError):
    """The inputs cannot be converted (the message names the file or setting)."""


def _chunks(
    inputs: Sequence[Path], digests: dict[Path, str], pool: Pool
) -> Iterator[tuple[Path, Any]]:
    """Chunks of every input in order, each with its input, cut by the input's row (PGN text
    into ``pool``'s buffers); records each input's sha256 once it is read."""
    for path in inputs:
        if path.is_file() and path.stat().st_size == 0:
            raise ConvertError(f"{path}: empty file")
        row, any_text = sources.of(path), False
        with _DigestThread() as digest:
            for chunk in row.cut(path, pool, digest, CHUNK_BYTES):
                any_text = True
                yield path, chunk
        if not any_text:
            raise ConvertError(f"{path}: no {row.name} text in it")
        digests[path] = digest.hexdigest()


class _DigestThread:
    """sha256 of what ``update`` is given, computed in a thread (hashlib runs without the
    GIL), so hashing the input does not add to the reader's time."""

    def __init__(self) -> None:
        self.digest = hashlib.sha256()
        self.blocks: queue.Queue[bytes | None] = queue.Queue(maxsize=8)
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while (block := self.blocks.get()) is not None:
            self.digest.update(block)

    def __enter__(self) -> _DigestThread:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.blocks.put(None)
        self.thread.join()

    def update(self, block: bytes) -> None:
        self.blocks.put(block)

    def hexdigest(self) -> str:
        return self.digest.hexdigest()


def _reader(
    inputs: Sequence[Path], buffers: pgn.Buffers, free: Any, tasks: Any, results: Any, workers: int
) -> None:
    """Reader process: decompress and cut the inputs into chunks, written into the shared
    ``buffers`` (``free`` holds the indices of those no worker is reading).

    Sends ``(seq, input, chunk)`` tasks (a chunk's results are numbered from ``seq``, as many
    as its row's ``pieces``), then one ``None`` per worker; reports ``("read", chunks,
    digests, cpu seconds)`` or ``("error", kind, message)`` to the main process.
    """
    digests: dict[Path, str] = {}
    seq = 0
    try:
        for path, chunk in _chunks(inputs, digests, Pool(buffers, free.get, free.put)):
            tasks.put((seq, path, chunk))
            seq += sources.of(path).pieces(chunk)
        results.put(("read", seq, digests, time.process_time()))
    except (ConvertError, *sources.ERRORS, OSError) as error:
        results.put(("error", type(error).__name__, str(error)))
    finally:
        for _ in range(workers):
            tasks.put(None)


def _worker(
    settings: Settings, buffers: pgn.Buffers, free: Any, tasks: Any, results: Any, spool: Path
) -> None:
    """Worker process: parse chunks until the reader says there are no more; each chunk's
    results go to a file in ``spool`` (the main process reads it in one call, where a pipe
    would take a system call per 64 KiB and a pickle copy) and only its name to ``results``.

    Workers run at a lower priority: with a worker per core, the reader and the main process
    (one each, the serial parts) must not wait for a core, or every worker waits for them."""
    try:
        os.nice(WORKER_NICENESS)
    except OSError:
        pass
    pool = Pool(buffers, free.get, free.put)
    while (task := tasks.get()) is not None:
        seq, source, chunk = task
        row = sources.of(source)
        try:
            for n, result in enumerate(row.parse(chunk, pool, settings), start=seq):
                parts = result.by_split()
                path = spool / f"{n:09d}.chunk"
                layout = _spool(path, parts)
                counts = (parts[0].skipped, parts[0].census, parts[0].damaged)
                results.put(("chunk", n, source, path, layout, *counts))
        except (gamearrays.WriteError, *sources.ERRORS) as error:  # they name their file
            results.put(("error", type(error).__name__, str(error)))
            return
        except Exception as error:  # reported with its place; the main process stops
            place = row.where(chunk, seq)
            results.put(("error", type(error).__name__, f"{source}: {place}: {error!r}"))
            return


_FIELDS = ("ids", "keys", "splits", "tokens", "offsets")


def _spool(path: Path, parts: list[ChunkResult]) -> list[list[tuple[str, str, int]]]:
    """Write the arrays of ``parts`` back to back (8-byte aligned) to ``path``; returns their
    layout: per part, (name, dtype, count) in file order."""
    layout = []
    try:
        with open(path, "wb") as fh:
            for part in parts:
                arrays = {name: getattr(part, name) for name in _FIELDS} | part.columns
                layout.append([(name, a.dtype.str, len(a)) for name, a in arrays.items()])
                for a in arrays.values():
                    data = memoryview(np.ascontiguousarray(a)).cast("B")
                    fh.write(data)
                    fh.write(bytes(-len(data) % 8))
    except OSError as error:
        raise gamearrays.WriteError(f"{path}: cannot write ({error.strerror or error})") from None
    return layout


def _unspool(
    path: Path,
    layout: list[list[tuple[str, str, int]]],
    skipped: Counter[str],
    counts: Counter[str],
    damaged: dict[str, list[int]],
) -> list[ChunkResult]:
    """The parts a worker spooled to ``path`` (the file is removed)."""
    raw = np.fromfile(path, dtype=np.uint8)
    path.unlink()
    parts, at = [], 0
    for fields in layout:
        arrays = {}
        for name, dtype, count in fields:
            size = np.dtype(dtype).itemsize * count
            arrays[name] = raw[at : at + size].view(dtype)
            at += size + (-size % 8)
        part = ChunkResult(**{name: arrays.pop(name) for name in _FIELDS})
        part.columns = arrays
        parts.append(part)
    parts[0].skipped, parts[0].census, parts[0].damaged = skipped, counts, damaged
    return parts


_ERRORS: dict[str, type[Exception]] = {
    error.__name__: error for error in (ConvertError, gamearrays.WriteError, *sources.ERRORS)
}


def chunk_results(
    inputs: Sequence[Path],
    settings: Settings,
    workers: int,
    digests: dict[Path, str],
    stats: dict[str, float],
    spool: Path,
) -> Iterator[tuple[Path, list[ChunkResult]]]:
    """Chunk results in input order, each with its input and as one result per split; fills
    ``digests`` (each input's sha256) and ``stats`` (the main process's waits, the reader's CPU
    seconds).

    With several workers: one reader process decompresses and cuts chunks into shared
    buffers, ``workers`` processes decode, parse and split them, and this (main) process only
    puts results in order and appends them to shards, so neither reading nor merging
    serialises the parsing. Chunks in flight are bounded (``workers + 2`` buffers), and so is
    the reordering buffer.
    """
    if workers <= 1:
        pool = Pool.private(2 * CHUNK_BYTES)  # a chunk is parsed before the next is cut
        for path, chunk in _chunks(inputs, digests, pool):
            for result in sources.of(path).parse(chunk, pool, settings):
                yield path, result.by_split()
        return
    with _Processes(inputs, settings, workers, spool) as processes:
        yield from processes.in_order(digests, stats)


class _Processes:
    """The reader and ``workers`` worker processes of one conversion, with their queues and
    shared buffers; leaving the ``with`` block stops them and frees what they share."""

    def __init__(self, inputs: Sequence[Path], settings: Settings, workers: int, spool: Path):
        context = multiprocessing.get_context("fork")
        self.buffers = buffers = pgn.Buffers(workers + 2, 2 * CHUNK_BYTES)
        self.free = free = context.Queue()
        for index in range(buffers.count):
            free.put(index)
        self.tasks = tasks = context.Queue(maxsize=2 * workers)
        self.results = results = context.Queue()
        reader_args = (inputs, buffers, free, tasks, results, workers)
        worker_args = (settings, buffers, free, tasks, results, spool)
        self.processes = [context.Process(target=_reader, args=reader_args)]
        self.processes += [
            context.Process(target=_worker, args=worker_args) for _ in range(workers)
        ]

    def __enter__(self) -> _Processes:
        for process in self.processes:
            process.daemon = True
            process.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for process in self.processes:
            if process.is_alive():
                process.terminate()
        for process in self.processes:
            process.join()
        for pipe in (self.free, self.tasks, self.results):
            pipe.cancel_join_thread()
        self.buffers.mm.close()

    def in_order(
        self, digests: dict[Path, str], stats: dict[str, float]
    ) -> Iterator[tuple[Path, list[ChunkResult]]]:
        """The workers' chunk results in input order, until the reader's last chunk."""
        waiting: dict[int, tuple] = {}
        expected: int | None = None
        next_seq = 0
        while expected is None or next_seq < expected:
            waited = time.perf_counter()
            message = self._next_message()
            stats["main_wait_seconds"] += time.perf_counter() - waited
            if message[0] == "error":
                kind, text = message[1], message[2]
                raise _ERRORS.get(kind, ConvertError)(text)
            if message[0] == "read":
                expected = message[1]
                digests.update(message[2])
                stats["reader_cpu_seconds"] = message[3]
                continue
            waiting[message[1]] = message[2:]
            while next_seq in waiting:
                source, *spooled = waiting.pop(next_seq)
                yield source, _unspool(*spooled)
                next_seq += 1

    def _next_message(self) -> tuple:
        """The next message from the reader or a worker; a process that died is an error."""
        while True:
            try:
                return self.results.get(timeout=1.0)
            except queue.Empty:
                dead = [p for p in self.processes if p.exitcode not in (None, 0)]
                if dead:
                    raise ConvertError(
                        f"a conversion process died (exit code {dead[0].exitcode}; out of memory?)"
                    ) from None
