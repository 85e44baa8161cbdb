"""Conversion of PGN files into a dataset: token shards per split plus ``manifest.json``.

Layout: ``{train,validation,test}/NNNNN.{tokens,offsets,ids}.npy`` and ``manifest.json``.

Pipeline of one conversion: ``pgn.read_chunks`` streams each input in chunks of whole
games; worker processes parse a chunk with the native PGN reader
(``rust_pgn_reader_python_binding``, checked against python-chess in the tests), drop what
cannot be used (counted by reason) and tokenise the rest; the main process keeps input
order, drops duplicate ids, assigns splits by keyed hash and writes shards. The manifest is
written last; shards are assembled in a temporary directory first, so a dataset directory
with a manifest is complete.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import re
import shutil
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import rust_pgn_reader_python_binding as native

from chesslm.data import gamearrays, pgn, split, tokens
from chesslm.data.integrity import fingerprint
from chesslm.files import sha256_file, write_json_atomic

LOGGER = logging.getLogger(__name__)

CONVERTER_VERSION = "chesslm-convert-v1"
FORMAT = "chesslm-dataset-v1"
SKIP_REASONS = (
    "variant",
    "custom_start",
    "illegal_move",
    "no_moves",
    "too_short",
    "too_long",
    "duplicate_id",
    "unparsable",
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
    min_plies: int = 1
    shard_games: int = 100_000

    def as_dict(self) -> dict[str, Any]:
        return {
            "context": self.context,
            "split": {"key": self.split_key, "validation": self.validation, "test": self.test},
            "filters": {"min_plies": self.min_plies},
            "shard_games": self.shard_games,
        }


@dataclass
class ChunkResult:
    """What a worker returns for one chunk: kept games in input order, and skips.

    Game ``i`` is ``tokens[offsets[i]:offsets[i + 1]]``, with id ``ids[i]`` and split
    ``splits[i]`` (the split is a pure function of the id, so workers compute it).
    """

    ids: list[str] = field(default_factory=list)
    splits: list[str] = field(default_factory=list)
    tokens: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint8))
    offsets: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))
    skipped: Counter[str] = field(default_factory=Counter)


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


def classify(headers: dict[str, str], error: str | None, plies: int, settings: Settings) -> str:
    """The skip reason of a parsed game, or '' to keep it."""
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
    if plies < settings.min_plies:
        return "too_short"
    if 2 + 3 * plies > settings.context:
        return "too_long"  # dropped whole: a cut game would teach a false ending
    return ""


def parse_chunk(text: str, settings: Settings) -> ChunkResult:
    """Parse, filter, tokenise and assign splits for the games of one chunk (in a worker)."""
    result = ChunkResult()
    texts = pgn.split_games(text)
    if not texts:
        return result
    parsed = native.parse_games_from_strings(texts, num_threads=1)
    pieces: list[np.ndarray] = []
    lengths: list[np.ndarray] = []
    for view in parsed.chunks:
        move_offsets = view.move_offsets.astype(np.int64)
        plies = np.diff(move_offsets)
        keep = np.zeros(len(plies), dtype=bool)
        for i, (headers, error) in enumerate(zip(view.headers, view.parse_errors, strict=True)):
            if not headers and (error is not None or plies[i] == 0):
                result.skipped["unparsable"] += 1  # text that is no game at all
                continue
            reason = classify(headers, error, int(plies[i]), settings)
            if reason:
                result.skipped[reason] += 1
                continue
            keep[i] = True
            gid = game_id(headers, functools.partial(moves_of, view, move_offsets, i))
            result.ids.append(gid)
            result.splits.append(
                split.assign(
                    gid, key=settings.split_key, validation=settings.validation, test=settings.test
                )
            )
        pieces.append(_tokenise(view, move_offsets, keep))
        lengths.append(2 + 3 * plies[keep])
    result.tokens = np.concatenate(pieces)
    result.offsets = np.concatenate([[0], np.cumsum(np.concatenate(lengths))]).astype(np.int64)
    return result


def moves_of(view: Any, move_offsets: np.ndarray, i: int) -> np.ndarray:
    """Source, destination and promotion arrays of game i, stacked (for content ids)."""
    a, b = move_offsets[i], move_offsets[i + 1]
    return np.stack([view.from_squares[a:b], view.to_squares[a:b], view.promotions[a:b]])


def _tokenise(view: Any, move_offsets: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """BOS, source, destination, promotion per move, EOS for each kept game, back to back."""
    plies = np.diff(move_offsets)[keep]
    starts = move_offsets[:-1][keep]
    lengths = 2 + 3 * plies
    out = np.empty(int(lengths.sum()), dtype=np.uint8)
    if not len(plies):
        return out
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
    return out


class _ShardWriter:
    """Buffers the games of one split and writes them as numbered shards."""

    def __init__(self, directory: Path, shard_games: int) -> None:
        self.directory, self.shard_games = directory, shard_games
        directory.mkdir(parents=True)
        self.games: list[np.ndarray] = []
        self.ids: list[str] = []
        self.prefixes: list[str] = []
        self.count = 0
        self.tokens = 0

    def add(self, game_id: str, game: np.ndarray) -> None:
        self.games.append(game)
        self.ids.append(game_id)
        self.count += 1
        self.tokens += len(game)
        if len(self.games) >= self.shard_games:
            self.flush()

    def flush(self) -> None:
        if not self.games and self.prefixes:
            return
        prefix = f"{len(self.prefixes):05d}"
        gamearrays.save(self.directory / prefix, gamearrays.pack(self.games, self.ids))
        self.prefixes.append(prefix)
        self.games, self.ids = [], []


def _chunks(inputs: Sequence[Path], digests: dict[Path, Any]) -> Iterator[str]:
    for path in inputs:
        digest = digests[path] = hashlib.sha256()
        if path.is_file() and path.stat().st_size == 0:
            raise ConvertError(f"{path}: empty file")
        any_text = False
        for chunk in pgn.read_chunks(path, digest=digest):
            any_text = True
            yield chunk
        if not any_text:
            raise ConvertError(f"{path}: no PGN text in it")


def _results(
    inputs: Sequence[Path], settings: Settings, workers: int, digests: dict[Path, Any]
) -> Iterator[ChunkResult]:
    """Chunk results in input order; at most 2 chunks per worker in memory at once."""
    if workers <= 1:
        for chunk in _chunks(inputs, digests):
            yield parse_chunk(chunk, settings)
        return
    with ProcessPoolExecutor(workers) as pool:
        pending: deque[Future[ChunkResult]] = deque()
        for chunk in _chunks(inputs, digests):
            pending.append(pool.submit(parse_chunk, chunk, settings))
            if len(pending) >= 2 * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def convert(
    inputs: Sequence[Path | str], out_dir: Path | str, settings: Settings, *, workers: int = 1
) -> dict[str, Any]:
    """Convert PGN files into a dataset at ``out_dir``; returns the manifest.

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
        manifest = _convert_into(inputs, out_dir, shards_tmp, settings, workers)
    except BaseException:
        shutil.rmtree(shards_tmp, ignore_errors=True)
        raise
    LOGGER.info(
        "converted %d games (%s) in %.1f s; skipped %s",
        sum(manifest["games"].values()),
        manifest["games"],
        time.perf_counter() - started,
        {k: v for k, v in manifest["skipped"].items() if v},
    )
    return manifest


def _convert_into(
    inputs: list[Path], out_dir: Path, shards_tmp: Path, settings: Settings, workers: int
) -> dict[str, Any]:
    writers = {s: _ShardWriter(shards_tmp / s, settings.shard_games) for s in split.SPLITS}
    skipped: Counter[str] = Counter({reason: 0 for reason in SKIP_REASONS})
    seen: set[str] = set()
    digests: dict[Path, Any] = {}
    done = 0
    for result in _results(inputs, settings, workers, digests):
        skipped.update(result.skipped)
        for i, (gid, name) in enumerate(zip(result.ids, result.splits, strict=True)):
            if gid in seen:
                skipped["duplicate_id"] += 1
                continue
            seen.add(gid)
            writers[name].add(gid, result.tokens[result.offsets[i] : result.offsets[i + 1]])
        done += len(result.ids) + sum(result.skipped.values())
        LOGGER.info("read %d games so far", done)
    kept = sum(w.count for w in writers.values())
    if kept == 0:
        names = ", ".join(str(p) for p in inputs)
        found = {k: v for k, v in skipped.items() if v}
        raise ConvertError(f"{names}: no usable games found (skipped: {found or 'none seen'})")
    for writer in writers.values():
        writer.flush()  # an empty split still gets one (empty) shard, recorded as such
    for name in split.SPLITS:  # each split directory appears complete or not at all
        if (out_dir / name).exists():
            shutil.rmtree(out_dir / name)
        os.replace(shards_tmp / name, out_dir / name)
    shards_tmp.rmdir()
    files = {
        f"{name}/{p.name}": sha256_file(p)
        for name in split.SPLITS
        for p in sorted((out_dir / name).iterdir())
    }
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "converter_version": CONVERTER_VERSION,
        "tokenizer_version": tokens.VERSION,
        "settings": settings.as_dict(),
        "inputs": [
            {"name": p.name, "bytes": p.stat().st_size, "sha256": digests[p].hexdigest()}
            for p in inputs
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
