"""Conversion of PGN files into a dataset: token shards per split plus ``manifest.json``.

Layout: ``{train,validation,test}/NNNNN.{tokens,offsets,ids}.npy``, the metadata columns
``NNNNN.meta.COLUMN.npy`` beside them (chesslm.data.metadata), and ``manifest.json``.

Pipeline of one conversion: a reader process decompresses each input and cuts it into
chunks of whole games, written into buffers shared with the workers (``pgn.read_chunks_into``);
worker processes parse a chunk with the native PGN reader (``rust_pgn_reader_python_binding``,
checked against python-chess in the tests), read each game's metadata, drop what cannot be
used or what the filters reject (counted by reason), tokenise the rest and compute ids,
duplicate keys and splits, all as NumPy arrays, and spool the chunk's games split by split to
one file. The main process keeps input order and appends each chunk's games to its split's open
shard files (no split buffers more than the chunk in hand). Duplicate ids are found last, from
64-bit keys in bucket files on disk (``Duplicates``), and only shards holding a later copy are
rewritten. The manifest is written last; shards are assembled in a temporary directory first,
so a dataset directory with a manifest is complete. With one worker, one process does it all.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import multiprocessing
import os
import queue
import re
import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import rust_pgn_reader_python_binding as native

from chesslm.data import filters, gamearrays, metadata, pgn, split, tokens
from chesslm.data.filters import Filters
from chesslm.data.integrity import fingerprint
from chesslm.files import sha256_file, write_json_atomic

LOGGER = logging.getLogger(__name__)

CONVERTER_VERSION = "chesslm-convert-v2"
CHUNK_BYTES = 4 << 20  # text per chunk a worker parses: thousands of games
WORKER_NICENESS = 5
FORMAT = "chesslm-dataset-v1"
SKIP_REASONS = (
    "variant",
    "custom_start",
    "illegal_move",
    "no_moves",
    "too_short",
    "too_long",
    "unparsable",
    *filters.REASONS,
    "duplicate_id",
)
_LICHESS_ID = re.compile(r"lichess\.org/([A-Za-z0-9]{8})\b")
_STANDARD = {"standard", "chess", "chess960 standard"}
# The native reader's promotion codes (-1 none, 2 N, 3 B, 4 R, 5 Q) to tokens.
_PROMO_LUT = np.full(8, tokens.PROMO_NONE, dtype=np.uint8)
_PROMO_LUT[[3, 4, 5, 6]] = [tokens.promotion_token(p) for p in tokens.PROMO_PIECES]


class ConvertError(ValueError):
    """The inputs cannot be converted (the message names the file or setting)."""


@dataclass(frozen=True)
class Settings:
    """What a conversion depends on besides its inputs (all of it enters the fingerprint)."""

    context: int = 1024
    split_key: str = "chesslm-split-v1"
    validation: float = 0.05
    test: float = 0.05
    filters: Filters = Filters()
    shard_games: int = 100_000

    @classmethod
    def from_config(cls, settings: dict[str, Any], where: str = "dataset") -> Settings:
        """Settings of one ``datasets.NAME`` config entry (schema defaults applied).

        :raises filters.FilterError: naming ``where.filters.KEY`` for a filter out of range.
        """
        return cls(
            context=settings["context"],
            split_key=settings["split"]["key"],
            validation=settings["split"]["validation"],
            test=settings["split"]["test"],
            filters=Filters.from_config(settings.get("filters", {}), f"{where}.filters"),
            shard_games=settings["shard_games"],
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "context": self.context,
            "split": {"key": self.split_key, "validation": self.validation, "test": self.test},
            "filters": self.filters.as_dict(),
            "shard_games": self.shard_games,
        }


def check_config(datasets: dict[str, Any]) -> None:
    """Cross-key checks of every dataset's settings (the workflow runs this before any job).

    :raises filters.FilterError: ``config: datasets.NAME.filters.KEY: what is wrong``.
    """
    for name, settings in datasets.items():
        Filters.from_config(settings.get("filters", {}), f"config: datasets.{name}.filters")


@dataclass
class ChunkResult:
    """What a worker returns for one chunk: kept games in input order, and skips.

    Game ``i`` is ``tokens[offsets[i]:offsets[i + 1]]``, with id ``ids[i]``, duplicate key
    ``keys[i]`` and split ``SPLITS[splits[i]]`` (a pure function of the id, so workers compute
    it); ``columns`` holds its metadata (``clock`` per ply, the others per game).
    """

    ids: np.ndarray = field(default_factory=lambda: np.zeros(0, gamearrays.ID_DTYPE))
    keys: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    splits: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int8))
    tokens: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint8))
    offsets: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))
    columns: dict[str, np.ndarray] = field(default_factory=metadata.empty_columns)
    skipped: Counter[str] = field(default_factory=Counter)
    # the main process numbers kept games in input order (duplicate detection keeps the first)
    order: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


def game_id(headers: dict[str, str], moves: Callable[[], np.ndarray]) -> str:
    """The Lichess id from ``Site`` (or ``GameId``), else one derived from the content.

    ``moves`` gives the game's move array; it is called only when there is no Lichess id.
    """
    match = _LICHESS_ID.search(headers.get("Site", ""))
    if match:
        return match.group(1)
    gid = headers.get("GameId", "")
    if re.fullmatch(r"[A-Za-z0-9]{8}", gid):
        return gid
    content = repr(sorted(headers.items())).encode() + moves().tobytes()
    return "c" + hashlib.blake2b(content, digest_size=8).hexdigest()


_BASE62 = np.full(256, -1, dtype=np.int64)
_BASE62[np.frombuffer(b"0123456789", np.uint8)] = np.arange(10)
_BASE62[np.frombuffer(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ", np.uint8)] = np.arange(10, 36)
_BASE62[np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", np.uint8)] = np.arange(36, 62)


def id_keys(ids: np.ndarray) -> np.ndarray:
    """64-bit duplicate keys of ids: a Lichess id (8 base-62 letters) exactly, others hashed.

    Exact keys below 62**8 < 2**48 cannot collide; a content id's key is a 63-bit hash with
    the top bit set, so it never equals a Lichess id's key.
    """
    raw = np.asarray(ids, dtype=gamearrays.ID_DTYPE)
    chars = raw.view(np.uint8).reshape(len(raw), raw.dtype.itemsize)
    digits = _BASE62[chars[:, :8]]
    lichess = (chars[:, 8] == 0) & (digits >= 0).all(axis=1)
    keys = np.zeros(len(raw), dtype=np.uint64)
    weights = 62 ** np.arange(7, -1, -1, dtype=np.int64)
    keys[lichess] = (digits[lichess] * weights).sum(axis=1).astype(np.uint64)
    for i in np.flatnonzero(~lichess):
        digest = hashlib.blake2b(bytes(raw[i]), digest_size=8).digest()
        keys[i] = int.from_bytes(digest, "big") | (1 << 63)
    return keys


def classify(headers: dict[str, str], error: str | None, plies: int, settings: Settings) -> str:
    """The skip reason of a parsed game by the rules of chess, or '' to keep it."""
    variant = headers.get("Variant", "Standard").strip().lower()
    if variant == "from position":
        return "custom_start"
    if variant not in _STANDARD:
        return "variant"
    if "FEN" in headers or headers.get("SetUp", "0").strip() == "1":
        return "custom_start"
    if error is not None:
        return "illegal_move" if "illegal" in error.lower() else "unparsable"
    if plies == 0:
        return "no_moves"
    if plies < settings.filters.min_plies:
        return "too_short"
    if 2 + 3 * plies > settings.context:
        return "too_long"  # dropped whole: a cut game would teach a false ending
    return ""


def parse_chunk(text: str, settings: Settings) -> ChunkResult:
    """Parse, filter, tokenise and assign splits for the games of one chunk (in a worker)."""
    texts = pgn.split_games(text)
    if not texts:
        return ChunkResult()
    parsed = native.parse_games_from_strings(texts, num_threads=1)
    parts = [_parse_view(view, settings) for view in parsed.chunks]
    if len(parts) == 1:
        return parts[0]
    return _concat_results(parts)


def _parse_view(view: Any, settings: Settings) -> ChunkResult:
    result = ChunkResult()
    move_offsets = view.move_offsets.astype(np.int64)
    plies = np.diff(move_offsets)
    rules_ok = np.zeros(len(plies), dtype=bool)
    rows = []
    all_headers = view.headers  # built anew on each access: read it once
    for i, (headers, error) in enumerate(zip(all_headers, view.parse_errors, strict=True)):
        rows.append(metadata.header_row(headers))
        if not headers and (error is not None or plies[i] == 0):
            result.skipped["unparsable"] += 1  # text that is no game at all
            continue
        reason = classify(headers, error, int(plies[i]), settings)
        if reason:
            result.skipped[reason] += 1
        else:
            rules_ok[i] = True
    columns = metadata.header_columns(rows)
    failed = settings.filters.reasons(columns)
    for k, reason in enumerate(filters.REASONS):
        result.skipped[reason] += int(np.count_nonzero(rules_ok & (failed == k + 1)))
    keep = rules_ok & (failed == 0)
    kept = np.flatnonzero(keep)
    ids = [
        game_id(all_headers[i], functools.partial(moves_of, view, move_offsets, i)) for i in kept
    ]
    result.ids = np.array([i.encode("ascii") for i in ids], dtype=gamearrays.ID_DTYPE)
    result.keys = id_keys(result.ids)
    index = {name: k for k, name in enumerate(split.SPLITS)}
    result.splits = np.array(
        [
            index[
                split.assign(
                    gid, key=settings.split_key, validation=settings.validation, test=settings.test
                )
            ]
            for gid in ids
        ],
        dtype=np.int8,
    )
    result.tokens, moves = _tokenise(view, move_offsets, keep)
    result.offsets = np.concatenate([[0], np.cumsum(2 + 3 * plies[keep])]).astype(np.int64)
    result.columns = {name: column[keep] for name, column in columns.items()}
    result.columns["clock"] = metadata.clock_column(np.asarray(view.clocks)[moves])
    return result


def _concat_results(parts: list[ChunkResult]) -> ChunkResult:
    offsets = [parts[0].offsets]
    for part in parts[1:]:
        offsets.append(part.offsets[1:] + offsets[-1][-1])
    skipped: Counter[str] = Counter()
    for part in parts:
        skipped.update(part.skipped)
    return ChunkResult(
        ids=np.concatenate([p.ids for p in parts]),
        keys=np.concatenate([p.keys for p in parts]),
        splits=np.concatenate([p.splits for p in parts]),
        tokens=np.concatenate([p.tokens for p in parts]),
        offsets=np.concatenate(offsets),
        columns={
            name: np.concatenate([p.columns[name] for p in parts]) for name in metadata.COLUMNS
        },
        skipped=skipped,
        order=np.concatenate([p.order for p in parts]),
    )


def moves_of(view: Any, move_offsets: np.ndarray, i: int) -> np.ndarray:
    """Source, destination and promotion arrays of game i, stacked (for content ids)."""
    a, b = move_offsets[i], move_offsets[i + 1]
    return np.stack([view.from_squares[a:b], view.to_squares[a:b], view.promotions[a:b]])


def _tokenise(
    view: Any, move_offsets: np.ndarray, keep: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """BOS, source, destination, promotion per move, EOS for each kept game, back to back.

    Also returns the index in the view's move arrays of each kept ply (for per-ply columns).
    """
    plies = np.diff(move_offsets)[keep]
    starts = move_offsets[:-1][keep]
    lengths = 2 + 3 * plies
    out = np.empty(int(lengths.sum()), dtype=np.uint8)
    if not len(plies):
        return out, np.zeros(0, np.int64)
    game_start = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    out[game_start] = tokens.BOS
    out[game_start + lengths - 1] = tokens.EOS
    # Move j of kept game g sits at game_start[g] + 1 + 3 * j; it is move starts[g] + j.
    game_of_move = np.repeat(np.arange(len(plies)), plies)
    j = np.arange(int(plies.sum())) - np.repeat(np.cumsum(plies) - plies, plies)
    src = starts[game_of_move] + j
    dst = game_start[game_of_move] + 1 + 3 * j
    out[dst] = view.from_squares[src]
    out[dst + 1] = view.to_squares[src]
    out[dst + 2] = _PROMO_LUT[view.promotions[src].astype(np.int64) + 1]
    return out, src


class _ShardWriter:
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

    def add(self, part: ChunkResult) -> None:
        self.count += len(part.ids)
        self.tokens += int(part.offsets[-1])
        while len(part.ids):
            if not self.open:
                self._start()
            room = self.shard_games - self.in_shard
            if len(part.ids) > room:  # cut where the shard ends
                piece = _take(part, np.arange(room))
                part = _take(part, np.arange(room, len(part.ids)))
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
        paths = {
            "tokens": (gamearrays.part_path(prefix, "tokens"), np.uint8),
            "offsets": (gamearrays.part_path(prefix, "offsets"), np.int64),
            "ids": (gamearrays.part_path(prefix, "ids"), gamearrays.ID_DTYPE),
            "order": (_order_path(prefix), np.int64),
        }
        for name, column in metadata.COLUMNS.items():
            paths[name] = (metadata.column_path(prefix, name), column.dtype)
        self.open = {k: gamearrays.NpyAppender(path, dtype) for k, (path, dtype) in paths.items()}
        self.open["offsets"].append(np.zeros(1, np.int64))
        self.prefixes.append(prefix.name)
        self.in_shard = self.shard_tokens = 0

    def _append(self, piece: ChunkResult) -> None:
        files = self.open
        files["tokens"].append(piece.tokens)
        files["offsets"].append(piece.offsets[1:] + self.shard_tokens)
        files["ids"].append(piece.ids)
        files["order"].append(piece.order)
        for name in metadata.COLUMNS:
            files[name].append(piece.columns[name])
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
        removed = [0, 0]
        for name in self.prefixes:
            prefix = self.directory / name
            mask = np.isin(np.load(_order_path(prefix)), numbers)
            if not mask.any():
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
            kept = _take(games, np.flatnonzero(~mask))
            removed[0] += int(mask.sum())
            removed[1] += int(games.offsets[-1] - kept.offsets[-1])
            self._write([kept], prefix)
        self.count -= removed[0]
        self.tokens -= removed[1]
        return removed[0], removed[1]

    def forget_order(self) -> None:
        for name in self.prefixes:
            _order_path(self.directory / name).unlink()

    def _write(self, parts: list[ChunkResult], prefix: Path) -> None:
        """Rewrite one shard from its parts (each file atomically)."""
        n_games = sum(len(p.ids) for p in parts)

        def offsets() -> Iterator[np.ndarray]:
            base = 0
            yield np.zeros(1, np.int64)
            for part in parts:
                yield part.offsets[1:] + base
                base += int(part.offsets[-1])

        stream = gamearrays.save_npy_stream
        stream(
            gamearrays.part_path(prefix, "tokens"),
            np.uint8,
            (sum(int(p.offsets[-1]) for p in parts),),
            lambda: (p.tokens for p in parts),
        )
        stream(gamearrays.part_path(prefix, "offsets"), np.int64, (n_games + 1,), offsets)
        stream(
            gamearrays.part_path(prefix, "ids"),
            gamearrays.ID_DTYPE,
            (n_games,),
            lambda: (p.ids for p in parts),
        )
        for name, column in metadata.COLUMNS.items():
            stream(
                metadata.column_path(prefix, name),
                column.dtype,
                (sum(len(p.columns[name]) for p in parts),),
                lambda name=name: (p.columns[name] for p in parts),
            )


def _order_path(prefix: Path) -> Path:
    """Input-order numbers of a shard's games, kept only while converting."""
    return prefix.with_name(prefix.name + ".order.npy")


def _take(result: ChunkResult, games: np.ndarray) -> ChunkResult:
    """The games at the (sorted) indices ``games`` of a result, vectorised."""
    chosen = np.zeros(len(result.ids), dtype=bool)
    chosen[games] = True
    lengths = np.diff(result.offsets)
    plies = (lengths - 2) // 3
    per_game = {n: c[chosen] for n, c in result.columns.items() if n != "clock"}
    per_game["clock"] = result.columns["clock"][np.repeat(chosen, plies)]
    return ChunkResult(
        ids=result.ids[chosen],
        keys=result.keys[chosen],
        splits=result.splits[chosen],
        tokens=result.tokens[np.repeat(chosen, lengths)],
        offsets=np.concatenate([[0], np.cumsum(lengths[chosen])]).astype(np.int64),
        columns=per_game,
        order=result.order[chosen] if len(result.order) else result.order,
    )


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


def _chunks(
    inputs: Sequence[Path], digests: dict[Path, str], read: Callable[..., Iterator[Any]]
) -> Iterator[Any]:
    """Chunks of every input in order (``read(path, digest)`` cuts one input); records each
    input's sha256 once it is read."""
    for path in inputs:
        if path.is_file() and path.stat().st_size == 0:
            raise ConvertError(f"{path}: empty file")
        any_text = False
        with _DigestThread() as digest:
            for chunk in read(path, digest):
                any_text = True
                yield chunk
        if not any_text:
            raise ConvertError(f"{path}: no PGN text in it")
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


def _parse_raw(chunk: bytes | memoryview, settings: Settings) -> list[ChunkResult]:
    return _by_split(parse_chunk(pgn.decode_chunk(chunk), settings))


def _by_split(result: ChunkResult) -> list[ChunkResult]:
    """A chunk's games as one result per split (``split.SPLITS`` order); the first carries
    the chunk's skip counts."""
    parts = [_take(result, np.flatnonzero(result.splits == k)) for k in range(len(split.SPLITS))]
    parts[0].skipped = result.skipped
    return parts


def _reader(
    inputs: Sequence[Path], buffers: pgn.Buffers, free: Any, tasks: Any, results: Any, workers: int
) -> None:
    """Reader process: decompress and cut the inputs into chunks, written into the shared
    ``buffers`` (``free`` holds the indices of those no worker is reading).

    Sends ``(seq, index, length)`` tasks (or ``(seq, bytes)`` for a chunk too big for a
    buffer), then one ``None`` per worker; reports ``("read", chunks, digests, cpu seconds)``
    or ``("error", kind, message)`` to the main process.
    """
    digests: dict[Path, str] = {}
    seq = 0

    def read(path: Path, digest: Any) -> Iterator[Any]:
        return pgn.read_chunks_into(
            path, buffers, free.get, free.put, chunk_bytes=CHUNK_BYTES, digest=digest
        )

    try:
        for chunk in _chunks(inputs, digests, read):
            tasks.put((seq, chunk))
            seq += 1
        results.put(("read", seq, digests, time.process_time()))
    except (ConvertError, pgn.PgnFileError, OSError) as error:
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
    while (task := tasks.get()) is not None:
        seq, chunk = task
        try:
            if isinstance(chunk, bytes):
                text = pgn.decode_chunk(chunk)
            else:
                index, length = chunk
                text = pgn.decode_chunk(buffers.view(index, length))
                free.put(index)  # the text is this process's own copy now
            parts = _by_split(parse_chunk(text, settings))
            path = spool / f"{seq:09d}.chunk"
            results.put(("chunk", seq, path, _spool(path, parts), parts[0].skipped))
        except gamearrays.WriteError as error:
            results.put(("error", "WriteError", str(error)))
            return
        except Exception as error:  # reported with its chunk; the main process stops
            results.put(("error", type(error).__name__, f"chunk {seq}: {error!r}"))
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
    path: Path, layout: list[list[tuple[str, str, int]]], skipped: Counter[str]
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
    parts[0].skipped = skipped
    return parts


_ERRORS: dict[str, type[Exception]] = {
    "ConvertError": ConvertError,
    "WriteError": gamearrays.WriteError,
    "PgnFileError": pgn.PgnFileError,
}


def _results(
    inputs: Sequence[Path],
    settings: Settings,
    workers: int,
    digests: dict[Path, str],
    stats: dict[str, float],
    spool: Path,
) -> Iterator[list[ChunkResult]]:
    """Chunk results in input order, each as one result per split.

    With several workers: one reader process decompresses and cuts chunks into shared
    buffers, ``workers`` processes decode, parse and split them, and this (main) process only
    puts results in order and appends them to shards, so neither reading nor merging
    serialises the parsing. Chunks in flight are bounded (``workers + 2`` buffers), and so is
    the reordering buffer.
    """
    if workers <= 1:

        def read(path: Path, digest: Any) -> Iterator[bytes]:
            return pgn.read_raw_chunks(path, chunk_bytes=CHUNK_BYTES, digest=digest)

        for chunk in _chunks(inputs, digests, read):
            yield _parse_raw(chunk, settings)
        return
    context = multiprocessing.get_context("fork")
    buffers = pgn.Buffers(workers + 2, 2 * CHUNK_BYTES)
    free = context.Queue()
    for index in range(buffers.count):
        free.put(index)
    tasks = context.Queue(maxsize=2 * workers)
    results = context.Queue()
    processes = [
        context.Process(target=_reader, args=(inputs, buffers, free, tasks, results, workers))
    ]
    processes += [
        context.Process(target=_worker, args=(settings, buffers, free, tasks, results, spool))
        for _ in range(workers)
    ]
    for process in processes:
        process.daemon = True
        process.start()
    try:
        waiting: dict[int, list[ChunkResult]] = {}
        expected: int | None = None
        next_seq = 0
        while expected is None or next_seq < expected:
            waited = time.perf_counter()
            message = _next_message(results, processes)
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
                yield _unspool(*waiting.pop(next_seq))
                next_seq += 1
    finally:
        for process in processes:
            if process.is_alive():
                process.terminate()
        for process in processes:
            process.join()
        for pipe in (free, tasks, results):
            pipe.cancel_join_thread()
        buffers.mm.close()


def _next_message(results: Any, processes: list[Any]) -> tuple:
    """The next message from the reader or a worker; a process that died is an error."""
    while True:
        try:
            return results.get(timeout=1.0)
        except queue.Empty:
            dead = [p for p in processes if p.exitcode not in (None, 0)]
            if dead:
                raise ConvertError(
                    f"a conversion process died (exit code {dead[0].exitcode}; out of memory?)"
                ) from None


def convert(
    inputs: Sequence[Path | str],
    out_dir: Path | str,
    settings: Settings,
    *,
    workers: int = 1,
    stats: dict[str, float] | None = None,
) -> dict[str, Any]:
    """Convert PGN files into a dataset at ``out_dir``; returns the manifest.

    ``stats``, if given, is filled with where the time went (seconds per phase, the main
    process's waits, the reader's CPU): what a scaling benchmark needs to find the serial part.

    :raises ConvertError, pgn.PgnFileError: one line naming the file or setting at fault;
        nothing is left behind that looks complete.
    """
    inputs = [Path(p) for p in inputs]
    out_dir = Path(out_dir)
    if not inputs:
        raise ConvertError("no input files given (dataset 'pgn' is empty)")
    if not 2 + 3 <= settings.context:
        raise ConvertError(f"context {settings.context} cannot hold a single move")
    shards_tmp = out_dir / ".convert.tmp"
    shutil.rmtree(shards_tmp, ignore_errors=True)
    shards_tmp.mkdir(parents=True)
    started = time.perf_counter()
    try:
        manifest = _convert_into(
            inputs, out_dir, shards_tmp, settings, workers, {} if stats is None else stats
        )
    except BaseException:
        shutil.rmtree(shards_tmp, ignore_errors=True)
        raise
    LOGGER.info(
        "converted %d games (%s) in %.1f s; skipped %s; phases %s",
        sum(manifest["games"].values()),
        manifest["games"],
        time.perf_counter() - started,
        {k: v for k, v in manifest["skipped"].items() if v},
        {k: round(v, 2) for k, v in (stats or {}).items()},
    )
    return manifest


def _convert_into(
    inputs: list[Path],
    out_dir: Path,
    shards_tmp: Path,
    settings: Settings,
    workers: int,
    stats: dict[str, float],
) -> dict[str, Any]:
    writers = {s: _ShardWriter(shards_tmp / s, settings.shard_games) for s in split.SPLITS}
    skipped: Counter[str] = Counter({reason: 0 for reason in SKIP_REASONS})
    duplicates = Duplicates(shards_tmp / ".duplicates", threads=workers)
    digests: dict[Path, str] = {}
    done = 0
    stats.update(main_wait_seconds=0.0, reader_cpu_seconds=0.0)
    clock = time.perf_counter()
    spool = shards_tmp / ".chunks"
    spool.mkdir()
    for parts in _results(inputs, settings, workers, digests, stats, spool):
        # the split's parts of one chunk, numbered as the games stood in the chunk
        numbers = duplicates.add(np.concatenate([p.keys for p in parts]))
        first = 0
        for name, part in zip(split.SPLITS, parts, strict=True):
            skipped.update(part.skipped)
            part.order, first = numbers[first : first + len(part.ids)], first + len(part.ids)
            if len(part.ids):
                writers[name].add(part)
            done += len(part.ids) + sum(part.skipped.values())
        LOGGER.info("read %d games so far", done)
    for writer in writers.values():
        writer.flush()  # an empty split still gets one (empty) shard, recorded as such
    stats["parse_seconds"], clock = time.perf_counter() - clock, time.perf_counter()
    # Duplicates last, from disk: only shards that hold a later copy of a game are rewritten
    later = duplicates.later_copies()
    skipped["duplicate_id"] = len(later)
    shutil.rmtree(duplicates.directory)
    spool.rmdir()
    for writer in writers.values():
        if len(later):
            writer.drop(later)
        writer.forget_order()
    stats["duplicates_seconds"], clock = time.perf_counter() - clock, time.perf_counter()
    kept = sum(w.count for w in writers.values())
    if kept == 0:
        names = ", ".join(str(p) for p in inputs)
        found = {k: v for k, v in skipped.items() if v}
        raise ConvertError(f"{names}: no usable games found (skipped: {found or 'none seen'})")
    for name in split.SPLITS:  # each split directory appears complete or not at all
        if (out_dir / name).exists():
            shutil.rmtree(out_dir / name)
        os.replace(shards_tmp / name, out_dir / name)
    shards_tmp.rmdir()
    paths = [p for name in split.SPLITS for p in sorted((out_dir / name).iterdir())]
    with ThreadPoolExecutor(max(1, workers)) as pool:  # hashlib hashes without the GIL
        digests_of = list(pool.map(sha256_file, paths))
    files = {f"{p.parent.name}/{p.name}": d for p, d in zip(paths, digests_of, strict=True)}
    stats["hash_seconds"] = time.perf_counter() - clock
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "converter_version": CONVERTER_VERSION,
        "tokenizer_version": tokens.VERSION,
        "settings": settings.as_dict(),
        "inputs": [
            {"name": p.name, "bytes": p.stat().st_size, "sha256": digests[p]} for p in inputs
        ],
        "shards": {s: [f"{s}/{p}" for p in w.prefixes] for s, w in writers.items()},
        "files": files,
        "games": {s: int(w.count) for s, w in writers.items()},
        "tokens": {s: int(w.tokens) for s, w in writers.items()},
        "skipped": {k: int(v) for k, v in sorted(skipped.items())},
        "test_evaluated": False,
    }
    manifest["fingerprint"] = fingerprint(manifest)
    write_json_atomic(out_dir / "manifest.json", manifest)
    return manifest
