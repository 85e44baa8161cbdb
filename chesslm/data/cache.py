"""The token cache: train and validation games as memory-mappable arrays, plus legality tables.

Layout of a cache directory::

    cache.json                         what it holds, where it came from, sha256 of every file
    train.{tokens,offsets,ids}.npy     (see gamearrays)
    validation.{tokens,offsets,ids}.npy
    validation.legality_games.npy      int64 sorted indices of the validation games that have
                                       legality tables (``legality_subset``: at most the
                                       dataset's ``legality_games`` of them, evenly spaced)
    validation.legal_mask.npy          uint8 [tokens of those games, 16]: row j of a game is
                                       the bit-packed (little bit order) mask of tokens legal
                                       after its first j + 1 tokens, so evaluation needs no
                                       chess engine
    validation.legal_moves.npy         int32 sorted move codes legal at each ply, back to back
    validation.legal_move_offsets.npy  int64 [plies + 1]; plies of those games, in order
    {train,validation}.meta.COLUMN.npy per-game metadata (chesslm.data.metadata.COLUMNS)

A move code is ``(source * 64 + destination) * 5 + (promotion_token - PROMO_NONE)``.
The test split never enters a cache: ``build`` takes train and validation only.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import chess
import numpy as np

from chesslm import files, seal
from chesslm.data import gamearrays, integrity, metadata, tokens
from chesslm.files import sha256_file

SPLITS = ("train", "validation")
FORMAT = "chesslm-token-cache-v2"  # v2: legality tables for a bounded subset of games
LEGALITY_GAMES = 4096  # default bound of the legality subset (datasets.NAME.legality_games)
N_MOVE_CODES = 64 * 64 * 5


def check_validation_only(cache_dir: Path) -> None:
    """Refuse anything but a token cache (which holds train and validation only): what scores
    positions (rule play, score, analyse) reads validation splits only, never the test split."""
    if "test" in cache_dir.parts or not (cache_dir / "cache.json").exists():
        raise ValueError(f"{cache_dir}: not a token cache (play reads validation splits only)")


def move_code(source: int, destination: int, promotion_token: int) -> int:
    return (source * 64 + destination) * 5 + (promotion_token - tokens.PROMO_NONE)


def legal_tables(game: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """The legal-token mask rows and the legal move codes per ply of one tokenised game.

    Uses python-chess (the rules oracle) once per ply; ``State.mask`` gives the same rows.
    """
    rows = np.zeros((len(game), tokens.VOCAB_SIZE), dtype=bool)
    codes: list[np.ndarray] = []
    board = chess.Board()
    plies = (len(game) - 2) // 3
    for ply in range(plies + 1):
        start = 1 + 3 * ply  # index of this move's source token (or of EOS)
        legal = list(board.legal_moves)
        row = rows[start - 1]  # after the previous token, a source or EOS may come
        for move in legal:
            row[move.from_square] = True
        row[tokens.EOS] = ply > 0
        if ply == plies:
            break
        source, destination, promotion = (int(t) for t in game[start : start + 3])
        for move in legal:
            if move.from_square == source:
                rows[start, move.to_square] = True
                if move.to_square == destination:
                    rows[start + 1, tokens.promotion_token(move.promotion)] = True
        codes.append(
            np.sort(
                np.array(
                    [move_code(*tokens.move_tokens(m)) for m in legal],
                    dtype=np.int32,
                )
            )
        )
        board.push(tokens.decode_move((source, destination, promotion)))
    return rows, codes


def legality_subset(n_games: int, bound: int | None) -> np.ndarray:
    """The validation games that get legality tables: ``bound`` evenly spaced indices of
    ``n_games`` (all when ``bound`` is None or at least ``n_games``). The one rule; training's
    legality evaluation picks within it the same way, and the play evaluation computes the legal
    moves of games outside it with ``legal_tables``.

    >>> legality_subset(10, 3).tolist(), legality_subset(3, 4096).tolist()
    ([0, 3, 6], [0, 1, 2])
    """
    if bound is not None and bound < 1:
        raise ValueError(f"legality_games must be positive, got {bound!r}")
    if bound is None or bound >= n_games:
        return np.arange(n_games, dtype=np.int64)
    return (np.arange(bound, dtype=np.int64) * n_games) // bound


def table_starts(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first mask row, first ply) of each game in legality tables of games of ``lengths``
    tokens laid back to back; each has one more entry than there are games."""
    lengths = np.asarray(lengths, dtype=np.int64)
    rows = np.zeros(len(lengths) + 1, dtype=np.int64)
    plies = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=rows[1:])
    np.cumsum((lengths - 2) // 3, out=plies[1:])
    return rows, plies


def _tables_for(job: tuple[Path, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Packed mask rows, legal codes and codes per ply of the given games of a store."""
    prefix, indices = job
    games = gamearrays.Games(prefix)
    rows, codes = [], []
    for i in indices:
        mask, per_ply = legal_tables(np.asarray(games[i]))
        rows.append(np.packbits(mask, axis=1, bitorder="little"))
        codes.extend(per_ply)
    counts = np.fromiter((len(c) for c in codes), dtype=np.int64, count=len(codes))
    flat = np.concatenate(codes) if codes else np.zeros(0, np.int32)
    packed = np.concatenate(rows) if rows else np.zeros((0, 16), np.uint8)
    return packed, flat.astype(np.int32), counts


def build(
    out_dir: Path,
    shards: dict[str, Iterable[Path]],
    *,
    meta: dict[str, Any],
    workers: int = 1,
    legality_games: int | None = LEGALITY_GAMES,
) -> dict[str, Any]:
    """Concatenate the shards of train and validation into a cache at ``out_dir``, with the
    legality tables of at most ``legality_games`` validation games (None: all).

    Arrays and metadata columns are streamed shard by shard into their files (never a whole
    split in memory). The cache is assembled in a temporary sibling directory and renamed
    into place, so a cache directory that exists is complete.

    :raises gamearrays.WriteError: naming the file that could not be written (disk full).
    """
    if set(shards) != set(SPLITS):
        raise ValueError(f"a token cache holds exactly {SPLITS}, got {sorted(shards)!r}")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    files.remove_stale_temporaries(out_dir.parent, out_dir.name)  # killed builds' leftovers
    tmp = files.tmp_path(out_dir)  # this builder's own: two builds at once never collide
    tmp.mkdir()
    try:
        info = _build_into(tmp, shards, meta, workers, legality_games)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return info


def _build_into(
    tmp: Path,
    shards: dict[str, Iterable[Path]],
    meta: dict[str, Any],
    workers: int,
    legality_games: int | None,
) -> dict[str, Any]:
    counts = {}
    for split in SPLITS:
        prefixes = [Path(p) for p in shards[split]]
        parts = [gamearrays.Games(p) for p in prefixes]
        n_games = sum(len(p) for p in parts)
        if n_games == 0:
            raise ValueError(f"the {split} split is empty: a token cache needs {split} games")
        stores = [
            games.stored() | metadata.stored(prefix, games.offsets)
            for prefix, games in zip(prefixes, parts, strict=True)
        ]
        gamearrays.save_concat(tmp / split, stores, metadata.STORE)
        del stores
        counts[split] = {"games": n_games, "tokens": sum(len(p.tokens) for p in parts)}
        del parts
    subset = legality_subset(counts["validation"]["games"], legality_games)
    gamearrays.save_npy(tmp / "validation.legality_games.npy", subset)
    _save_legality(tmp, tmp / "validation", subset, workers)
    names = sorted(p.name for p in tmp.iterdir())
    info = {
        "format": FORMAT,
        "tokenizer_version": tokens.VERSION,
        "vocab_size": tokens.VOCAB_SIZE,
        **meta,
        "splits": counts,
        "legality_games": {"bound": legality_games, "games": len(subset)},
        "test_evaluated": False,
        "sha256": {name: sha256_file(tmp / name) for name in names},
    }
    files.write_json_atomic(tmp / "cache.json", info)
    return info


def build_from_dataset(
    dataset_dir: Path,
    receipt_path: Path,
    out_dir: Path,
    *,
    workers: int = 1,
    legality_games: int | None = LEGALITY_GAMES,
) -> dict[str, Any]:
    """Build the cache of a verified dataset: train and validation shards only.

    Every shard read is first checked against the integrity receipt.
    """
    integrity.check_receipt(receipt_path, dataset_dir, [])  # the manifest, before reading it
    manifest = files.read_json(dataset_dir / "manifest.json")
    names = [
        name
        for s in SPLITS
        for prefix in manifest["shards"][s]
        for name in gamearrays.split_files({"shards": {s: [prefix]}}, s)
        + metadata.file_names(prefix)
    ]
    receipt = integrity.check_receipt(receipt_path, dataset_dir, names)
    for split in SPLITS:
        if manifest["games"][split] == 0:
            raise ValueError(
                f"{dataset_dir / 'manifest.json'}: the {split} split is empty; training needs"
                f" {split} games (more input, or a larger split.{split} fraction)"
            )
    meta = {
        "dataset_fingerprint": receipt["dataset_fingerprint"],
        "integrity_receipt_sha256": files.sha256_file(receipt_path),
        "context": manifest["settings"]["context"],
    }
    shards = {s: [dataset_dir / prefix for prefix in manifest["shards"][s]] for s in SPLITS}
    return build(out_dir, shards, meta=meta, workers=workers, legality_games=legality_games)


def _save_legality(directory: Path, prefix: Path, subset: np.ndarray, workers: int) -> None:
    """The legality tables of games ``subset`` under ``prefix``, computed in parallel, streamed.

    The mask's size is known in advance and written as results arrive; the codes and their
    per-ply counts go to raw side files first and are copied into ``.npy`` files at the end.
    """
    games = gamearrays.Games(prefix)
    n = len(subset)
    step = max(1, min(2_000, n // (4 * max(1, workers)) or 1))
    jobs = [(prefix, subset[i : i + step]) for i in range(0, n, step)]
    n_rows = int(games.lengths[subset].sum())
    codes_raw = directory / "validation.legal_moves.raw"
    counts_raw = directory / "validation.legal_counts.raw"
    total = {"codes": 0, "plies": 0}

    def mask_parts() -> Iterable[np.ndarray]:
        pool = ProcessPoolExecutor(workers) if workers > 1 else None
        try:
            results = pool.map(_tables_for, jobs) if pool else map(_tables_for, jobs)
            with open(codes_raw, "wb") as codes_fh, open(counts_raw, "wb") as counts_fh:
                for packed, codes, counts in results:
                    _write_raw(codes_fh, codes_raw, codes)
                    _write_raw(counts_fh, counts_raw, counts)
                    total["codes"] += len(codes)
                    total["plies"] += len(counts)
                    yield packed
        finally:
            if pool:
                pool.shutdown(cancel_futures=True)

    mask_path = directory / "validation.legal_mask.npy"
    gamearrays.save_npy_stream(mask_path, np.uint8, (n_rows, 16), mask_parts)

    def offsets() -> Iterable[np.ndarray]:
        base = np.zeros(1, np.int64)
        yield base
        for counts in _read_raw(counts_raw, np.int64):
            ends = base[-1] + np.cumsum(counts)
            yield ends
            base = ends[-1:] if len(ends) else base

    gamearrays.save_npy_stream(
        directory / "validation.legal_moves.npy",
        np.int32,
        (total["codes"],),
        lambda: _read_raw(codes_raw, np.int32),
    )
    gamearrays.save_npy_stream(
        directory / "validation.legal_move_offsets.npy", np.int64, (total["plies"] + 1,), offsets
    )
    codes_raw.unlink()
    counts_raw.unlink()


def _write_raw(fh: Any, path: Path, array: np.ndarray) -> None:
    try:
        fh.write(memoryview(np.ascontiguousarray(array)).cast("B"))
    except OSError as error:
        raise gamearrays.WriteError(f"{path}: cannot write ({error.strerror or error})") from None


def _read_raw(path: Path, dtype: Any, block: int = 1 << 22) -> Iterable[np.ndarray]:
    itemsize = np.dtype(dtype).itemsize
    with open(path, "rb") as fh:
        while data := fh.read(block * itemsize):
            yield np.frombuffer(data, dtype=dtype)


# the files this process hashed and found as cache.json lists them, as they were then: a job
# opens its cache more than once (matching, think time, outcome) and hashes each file once;
# any write since changes the file's ctime, and a replaced file its inode
_HASHED: set[tuple[str, str, int, int, int, int]] = set()


def _as_hashed(path: Path, digest: str) -> tuple[str, str, int, int, int, int]:
    st = path.stat()
    return (str(path.resolve()), digest, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _rebuild(directory: Path) -> str:
    # the rule's output exists, so snakemake alone would say "Nothing to be done"
    return seal.rebuild(directory / "cache.json", "token_cache")


class TokenCache:
    """A token cache opened for reading (memory-mapped).

    >>> # cache = TokenCache("results/datasets/sample/token-cache")
    >>> # cache.train[0]  -> tokens of the first training game
    """

    def __init__(self, directory: Path | str, *, verify: bool = False) -> None:
        self.directory = Path(directory)
        meta_path = self.directory / "cache.json"
        try:
            self.meta = json.loads(meta_path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            damaged = meta_path.exists()  # missing: not built (yet), no rebuild to force
            rebuild = f"; rebuild it with: {_rebuild(self.directory)}" if damaged else ""
            raise ValueError(
                f"{meta_path}: not a readable token cache ({error}){rebuild}"
            ) from None
        if not isinstance(self.meta, dict):
            raise ValueError(
                f"{meta_path}: not a JSON object; rebuild it with: {_rebuild(self.directory)}"
            )
        if self.meta.get("format") != FORMAT:
            raise ValueError(f"{meta_path}: format {self.meta.get('format')!r}, want {FORMAT!r}")
        if verify:
            self.verify()
        self.train = gamearrays.Games(self.directory / "train")
        # validation's index in memory: evaluation hands it to torch, which wants it writable
        self.validation = gamearrays.Games(self.directory / "validation", index_mmap=False)

    def verify(self) -> None:
        """Re-hash every array against cache.json, each file once per process (``_HASHED``);
        raises ValueError naming a mismatch."""
        rebuild = f"the token cache is damaged; rebuild it with: {_rebuild(self.directory)}"
        for name, digest in self.meta["sha256"].items():
            path = self.directory / name
            try:
                seen = _as_hashed(path, digest)
                if seen in _HASHED:
                    continue
                actual = sha256_file(path)
            except OSError as error:
                raise ValueError(f"{path}: {error.strerror}; {rebuild}") from None
            if actual != digest:
                raise ValueError(
                    f"{path}: sha256 {actual} does not match cache.json ({digest}); {rebuild}"
                )
            _HASHED.add(seen)

    def metadata(self, split: str) -> metadata.Metadata:
        """The per-game metadata columns of ``train`` or ``validation`` (memory-mapped)."""
        return metadata.Metadata(self.directory / split, getattr(self, split).offsets)

    @property
    def fingerprint(self) -> str:
        return self.meta["dataset_fingerprint"]

    def legality_games(self) -> np.ndarray:
        """Sorted indices of the validation games with legality tables (``legality_subset``)."""
        return gamearrays.load_npy(self.directory / "validation.legality_games.npy", mmap=False)

    def legality_starts(self) -> tuple[np.ndarray, np.ndarray]:
        """(first mask row, first ply) in the legality tables of each ``legality_games`` game,
        each int64 with one more entry than there are such games."""
        return table_starts(np.asarray(self.validation.lengths)[self.legality_games()])

    def legal_mask(self) -> np.ndarray:
        """Bit-packed legal masks of the tokens of the ``legality_games`` games, back to back,
        uint8 [tokens, 16]."""
        return gamearrays.load_npy(self.directory / "validation.legal_mask.npy")

    def legal_moves(self) -> tuple[np.ndarray, np.ndarray]:
        """(codes, offsets) of the legal moves at each ply of the ``legality_games`` games."""
        return (
            gamearrays.load_npy(self.directory / "validation.legal_moves.npy"),
            gamearrays.load_npy(self.directory / "validation.legal_move_offsets.npy", mmap=False),
        )
