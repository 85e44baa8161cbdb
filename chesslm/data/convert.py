"""Conversion of PGN (or Parquet) files into a dataset: token shards per split plus
``manifest.json``.

Layout: ``{train,validation,test}/NNNNN.{tokens,offsets,ids}.npy``, the metadata columns
``NNNNN.meta.COLUMN.npy`` beside them (chesslm.data.metadata), and ``manifest.json``.

Stages of one conversion, a module each: reader and worker processes cut the inputs into
chunks and parse them (chesslm.data.workers, chesslm.data.parsing); the main process keeps
input order and appends each chunk's games to its split's open shard files, then drops later
copies of a game found by id (chesslm.data.shards). The manifest is written last; shards are
assembled in a temporary directory first, so a dataset directory with a manifest is complete.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from chesslm import files
from chesslm.data import census, filters, split, tokens, train_cap
from chesslm.data.damage import DamageLog
from chesslm.data.integrity import fingerprint
from chesslm.data.settings import CONVERTER_VERSION, Settings
from chesslm.data.shards import Duplicates, ShardWriter
from chesslm.data.workers import ConvertError, chunk_results
from chesslm.files import sha256_file, write_json_atomic

LOGGER = logging.getLogger(__name__)

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
    "train_cap",
)


def convert(
    inputs: Sequence[Path | str],
    out_dir: Path | str,
    settings: Settings,
    *,
    workers: int = 1,
    stats: dict[str, float] | None = None,
) -> dict[str, Any]:
    """Convert the input files (PGN, ``.pgn.zst`` or Parquet, each read by its format's row:
    chesslm.data.sources) into a dataset at ``out_dir``; returns the manifest.

    ``stats``, if given, is filled with where the time went (seconds per phase, the main
    process's waits, the reader's CPU): what a scaling benchmark needs to find the serial part.

    :raises ConvertError, sources.ERRORS (a format's file error): one line naming the file or
        setting at fault; nothing is left behind that looks complete.
    """
    inputs = [Path(p) for p in inputs]
    out_dir = Path(out_dir)
    if not inputs:
        raise ConvertError("no input files given (dataset 'inputs' is empty)")
    if not 2 + 3 <= settings.context:
        raise ConvertError(f"context {settings.context} cannot hold a single move")
    out_dir.mkdir(parents=True, exist_ok=True)
    files.remove_stale_temporaries(out_dir, "convert")  # killed conversions' leftovers
    shards_tmp = files.tmp_path(out_dir / "convert")  # this converter's own
    shards_tmp.mkdir()
    started, damaged = time.perf_counter(), DamageLog()
    try:
        manifest = _convert_into(
            inputs, out_dir, shards_tmp, settings, workers, {} if stats is None else stats, damaged
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
    for line in damaged.warnings():
        LOGGER.warning("%s", line)
    return manifest


def _convert_into(
    inputs: list[Path],
    out_dir: Path,
    shards_tmp: Path,
    settings: Settings,
    workers: int,
    stats: dict[str, float],
    damaged: DamageLog,
) -> dict[str, Any]:
    writers = {s: ShardWriter(shards_tmp / s, settings.shard_games) for s in split.SPLITS}
    duplicates = Duplicates(shards_tmp / ".duplicates", threads=workers)
    stats.update(main_wait_seconds=0.0, reader_cpu_seconds=0.0)
    clock = time.perf_counter()
    skipped, counts, digests = _write_shards(
        inputs, shards_tmp, settings, workers, writers, duplicates, stats, damaged
    )
    stats["parse_seconds"], clock = time.perf_counter() - clock, time.perf_counter()
    skipped["duplicate_id"] = _drop_later_copies(duplicates, writers)
    stats["duplicates_seconds"], clock = time.perf_counter() - clock, time.perf_counter()
    skipped["train_cap"] = _cap_train(writers["train"], settings)
    stats["train_cap_seconds"], clock = time.perf_counter() - clock, time.perf_counter()
    for writer in writers.values():  # the census of the games kept in the end
        counts.subtract(writer.census_removed)
    if sum(w.count for w in writers.values()) == 0:
        names = ", ".join(str(p) for p in inputs)
        found = {k: v for k, v in skipped.items() if v}
        raise ConvertError(f"{names}: no usable games found (skipped: {found or 'none seen'})")
    for name in split.SPLITS:  # each split directory appears complete or not at all
        if (out_dir / name).exists():
            shutil.rmtree(out_dir / name)
        os.replace(shards_tmp / name, out_dir / name)
    shards_tmp.rmdir()
    files = _file_digests(out_dir, workers)
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
        "census": census.ordered(counts),
        "test_evaluated": False,
    }
    manifest["fingerprint"] = fingerprint(manifest)
    write_json_atomic(out_dir / "manifest.json", manifest)
    return manifest


def _write_shards(
    inputs: list[Path],
    shards_tmp: Path,
    settings: Settings,
    workers: int,
    writers: dict[str, ShardWriter],
    duplicates: Duplicates,
    stats: dict[str, float],
    damaged: DamageLog,
) -> tuple[Counter[str], Counter[str], dict[Path, str]]:
    """Every kept game into its split's shards, numbered in input order for ``duplicates``
    (and the damaged ones into ``damaged``); returns the skip counts, the census counts of the
    games written and each input's sha256."""
    skipped: Counter[str] = Counter({reason: 0 for reason in SKIP_REASONS})
    counts: Counter[str] = Counter()
    digests: dict[Path, str] = {}
    done = 0
    spool = shards_tmp / ".chunks"
    spool.mkdir()
    for source, parts in chunk_results(inputs, settings, workers, digests, stats, spool):
        damaged.add(source, parts)
        # the split's parts of one chunk, numbered as the games stood in the chunk
        numbers = duplicates.add(np.concatenate([p.keys for p in parts]))
        first = 0
        for name, part in zip(split.SPLITS, parts, strict=True):
            skipped.update(part.skipped)
            counts.update(part.census)
            part.order, first = numbers[first : first + len(part.ids)], first + len(part.ids)
            if len(part.ids):
                writers[name].add(part)
            done += len(part.ids) + sum(part.skipped.values())
        LOGGER.info("read %d games so far", done)
    for writer in writers.values():
        writer.flush()  # an empty split still gets one (empty) shard, recorded as such
    spool.rmdir()
    return skipped, counts, digests


def _drop_later_copies(duplicates: Duplicates, writers: dict[str, ShardWriter]) -> int:
    """Duplicates last, from disk: only shards that hold a later copy of a game are
    rewritten. Returns how many games were dropped."""
    later = duplicates.later_copies()
    shutil.rmtree(duplicates.directory)
    for writer in writers.values():
        if len(later):
            writer.drop(later)
        writer.forget_order()
    return len(later)


def _cap_train(writer: ShardWriter, settings: Settings) -> int:
    """Keep only ``settings.train_games`` train games (chesslm.data.train_cap); returns how
    many were left out."""
    n = settings.train_games
    if n is None:
        return 0
    prefixes = [writer.directory / p for p in writer.prefixes]
    cut = train_cap.threshold(prefixes, n, settings.split_key)
    if cut is None:
        LOGGER.warning(
            "train_games %d is not below the %d train games: keeping them all", n, writer.count
        )
        return 0
    removed, _ = writer.keep(lambda prefix: train_cap.kept(prefix, cut, settings.split_key))
    LOGGER.info(
        "train_games %d: kept %d of %d train games", n, writer.count, writer.count + removed
    )
    return removed


def _file_digests(out_dir: Path, workers: int) -> dict[str, str]:
    """sha256 of every shard file, by its name relative to ``out_dir``."""
    paths = [p for name in split.SPLITS for p in sorted((out_dir / name).iterdir())]
    with ThreadPoolExecutor(max(1, workers)) as pool:  # hashlib hashes without the GIL
        digests = list(pool.map(sha256_file, paths))
    return {f"{p.parent.name}/{p.name}": d for p, d in zip(paths, digests, strict=True)}
