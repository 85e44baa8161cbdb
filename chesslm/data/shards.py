"""A conversion's output: numbered shards per split, and duplicate ids found on disk.

``ShardWriter`` appends each chunk's games of one split to its open shard's files (no split
buffers more than the chunk in hand). Duplicate ids are found last, from 64-bit keys in bucket
files on disk (``Duplicates``), and only shards holding a later copy are rewritten.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from chesslm.data import census, gamearrays, metadata
from chesslm.data.parsing import ChunkResult


class ShardWriter:
    """Writes the games of one split as numbered shards, appending each chunk's games to the
    open shard's files: no split holds more than the chunk in hand in memory."""

    def __init__(self, directory: Path, shard_games: int) -> None:
        self.directory, self.shard_games = directory, shard_games
        directory.mkdir(parents=True)
        self.prefixes: list[str] = []
        self.count = 0
        self.tokens = 0
        self.open: dict[str, gamearrays.NpyAppender] = {}
        self.in_shard = 0
        self.shard_tokens = 0
        self.census_removed: Counter[str] = Counter()  # of games rewritten out of shards

    def add(self, part: ChunkResult) -> None:
        self.count += len(part.ids)
        self.tokens += int(part.offsets[-1])
        while len(part.ids):
            if not self.open:
                self._start()
            room = self.shard_games - self.in_shard
            if len(part.ids) > room:  # cut where the shard ends
                piece = part.take(np.arange(room))
                part = part.take(np.arange(room, len(part.ids)))
            else:
                piece, part = part, ChunkResult()
            self._append(piece)
            if self.in_shard == self.shard_games:
                self._finish()

    def flush(self) -> None:
        if not self.open and not self.prefixes:
            self._start()  # an empty split still gets one (empty) shard
        if self.open:
            self._finish()

    def _start(self) -> None:
        prefix = self.directory / f"{len(self.prefixes):05d}"
        self.open = {
            name: gamearrays.NpyAppender(gamearrays.part_path(prefix, name), dtype)
            for name, dtype in metadata.STORE.items()
        }
        self.open["order"] = gamearrays.NpyAppender(_order_path(prefix), np.int64)
        self.open["offsets"].append(np.zeros(1, np.int64))
        self.prefixes.append(prefix.name)
        self.in_shard = self.shard_tokens = 0

    def _append(self, piece: ChunkResult) -> None:
        arrays = piece.stored() | {"order": piece.order}
        arrays["offsets"] = piece.offsets[1:] + self.shard_tokens
        for name, array in arrays.items():
            self.open[name].append(array)
        self.in_shard += len(piece.ids)
        self.shard_tokens += int(piece.offsets[-1])

    def _finish(self) -> None:
        for appender in self.open.values():
            appender.close()
        self.open = {}

    def drop(self, numbers: np.ndarray) -> tuple[int, int]:
        """Rewrite the shards holding any of the games ``numbers`` without them.

        Returns (games, tokens) removed. Only shards with a duplicate are read back.
        """
        return self.keep(lambda prefix: ~np.isin(np.load(_order_path(prefix)), numbers))

    def keep(self, mask_of: Callable[[Path], np.ndarray]) -> tuple[int, int]:
        """Rewrite each shard with only the games where ``mask_of(prefix)`` is true (one
        shard in memory at a time; a shard keeping every game is not rewritten).

        Returns (games, tokens) removed; their census counts are added to ``census_removed``.
        """
        removed = [0, 0]
        for name in self.prefixes:
            prefix = self.directory / name
            mask = np.asarray(mask_of(prefix), dtype=bool)
            if mask.all():
                continue
            stored = gamearrays.Games(prefix, mmap=False)
            games = ChunkResult(
                ids=stored.ids,
                keys=np.zeros(len(stored), np.uint64),
                splits=np.zeros(len(stored), np.int8),
                tokens=stored.tokens,
                offsets=stored.offsets,
                columns={c: np.load(metadata.column_path(prefix, c)) for c in metadata.COLUMNS},
            )
            kept = games.take(np.flatnonzero(mask))
            # the removed games' census: the shard's less the kept games' (no third copy)
            self.census_removed.update(_counts(games))
            self.census_removed.subtract(_counts(kept))
            removed[0] += int((~mask).sum())
            removed[1] += int(games.offsets[-1] - kept.offsets[-1])
            gamearrays.save_concat(prefix, [kept.stored()], metadata.STORE)
        self.count -= removed[0]
        self.tokens -= removed[1]
        return removed[0], removed[1]

    def forget_order(self) -> None:
        for name in self.prefixes:
            _order_path(self.directory / name).unlink()


def _counts(games: ChunkResult) -> Counter[str]:
    return census.counts(games.columns, metadata.ply_offsets(games.offsets))


def _order_path(prefix: Path) -> Path:
    """Input-order numbers of a shard's games, kept only while converting."""
    return prefix.with_name(prefix.name + ".order.npy")


class Duplicates:
    """Duplicate detection in bounded memory: (key, number) pairs hashed into bucket files.

    ``add`` numbers a batch of kept games in input order; the (64-bit key, number) pairs wait
    in memory until ``FLUSH`` of them have come, then each goes to one of ``BUCKETS`` files
    on disk (one open and one write per bucket per flush). ``later_copies`` sorts the buckets
    (in parallel threads: NumPy sorts without the GIL) and returns the numbers of every game
    whose key appeared with a smaller number: memory is ``FLUSH`` pairs plus the buckets being
    sorted, not a Python object (or even 8 bytes) per game.
    """

    BUCKETS = 256
    FLUSH = 1 << 16  # 1 MiB of pairs: what a flush holds stays small next to the rest
    PAIR = np.dtype([("key", "<u8"), ("number", "<i8")])

    def __init__(self, directory: Path, *, threads: int = 1) -> None:
        self.directory, self.threads = directory, max(1, threads)
        directory.mkdir(parents=True)
        self.pending: list[np.ndarray] = []
        self.pending_pairs = 0
        self.count = 0

    def add(self, keys: np.ndarray) -> np.ndarray:
        """Numbers of the games with ``keys`` (input order), recorded for the final check."""
        numbers = np.arange(self.count, self.count + len(keys), dtype=np.int64)
        self.count += len(keys)
        pairs = np.empty(len(keys), dtype=self.PAIR)
        pairs["key"], pairs["number"] = keys, numbers
        self.pending.append(pairs)
        self.pending_pairs += len(pairs)
        if self.pending_pairs >= self.FLUSH:
            self._flush()
        return numbers

    def _path(self, bucket: int) -> Path:
        return self.directory / f"{bucket:03d}.pairs"

    def _flush(self) -> None:
        if not self.pending:
            return
        pairs = np.concatenate(self.pending)
        self.pending, self.pending_pairs = [], 0
        # Fibonacci hashing: Lichess keys are dense integers, their top bits are not uniform
        bucket = (pairs["key"] * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(56)
        order = np.argsort(bucket, kind="stable")  # numbers stay increasing within a bucket
        bounds = np.searchsorted(bucket[order], np.arange(self.BUCKETS + 1))
        pairs = pairs[order]
        for b in np.flatnonzero(np.diff(bounds)):
            path = self._path(int(b))
            try:
                with open(path, "ab") as fh:
                    fh.write(memoryview(pairs[bounds[b] : bounds[b + 1]]).cast("B"))
            except OSError as error:
                raise gamearrays.WriteError(
                    f"{path}: cannot write ({error.strerror or error})"
                ) from None

    def later_copies(self) -> np.ndarray:
        """Sorted numbers of the games that repeat an earlier game's key."""
        self._flush()

        def repeats(bucket: int) -> np.ndarray:
            path = self._path(bucket)
            if not path.exists():
                return np.zeros(0, np.int64)
            pairs = np.fromfile(path, dtype=self.PAIR)
            # stable: equal keys keep the order they were added in, first copy first
            order = np.argsort(pairs["key"], kind="stable")
            keys, numbers = pairs["key"][order], pairs["number"][order]
            return numbers[1:][keys[1:] == keys[:-1]]

        with ThreadPoolExecutor(self.threads) as pool:
            drops = list(pool.map(repeats, range(self.BUCKETS)))
        return np.sort(np.concatenate([np.zeros(0, np.int64), *drops]))
