"""The token cache: train and validation games as memory-mappable arrays, plus legality tables.

Layout of a cache directory::

    cache.json                         what it holds, where it came from, sha256 of every file
    train.{tokens,offsets,ids}.npy     (see gamearrays)
    validation.{tokens,offsets,ids}.npy
    validation.legal_mask.npy          uint8 [tokens, 16]: row j of a game is the bit-packed
                                       (little bit order) mask of tokens legal after its
                                       first j + 1 tokens, so evaluation needs no chess engine
    validation.legal_moves.npy         int32 sorted move codes legal at each ply, back to back
    validation.legal_move_offsets.npy  int64 [plies + 1]; plies counted over all games in order

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

from chesslm import files
from chesslm.data import gamearrays, integrity, tokens
from chesslm.files import sha256_file

SPLITS = ("train", "validation")
FORMAT = "chesslm-token-cache-v1"
N_MOVE_CODES = 64 * 64 * 5


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


def _tables_for(games: list[np.ndarray]) -> list[tuple[np.ndarray, list[np.ndarray]]]:
    return [legal_tables(g) for g in games]


def build(
    out_dir: Path,
    shards: dict[str, Iterable[Path]],
    *,
    meta: dict[str, Any],
    workers: int = 1,
) -> dict[str, Any]:
    """Concatenate the shards of train and validation into a cache at ``out_dir``.

    The cache is assembled in a temporary sibling directory and renamed into place, so a
    cache directory that exists is complete.
    """
    if set(shards) != set(SPLITS):
        raise ValueError(f"a token cache holds exactly {SPLITS}, got {sorted(shards)!r}")
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    counts = {}
    for split in SPLITS:
        arrays = gamearrays.concat([gamearrays.Games(p) for p in shards[split]])
        if len(arrays["ids"]) == 0:
            raise ValueError(f"the {split} split is empty: a token cache needs {split} games")
        gamearrays.save(tmp / split, arrays)
        counts[split] = {"games": len(arrays["ids"]), "tokens": len(arrays["tokens"])}
        if split == "validation":
            offsets, flat = arrays["offsets"], arrays["tokens"]
            games = [flat[a:b] for a, b in zip(offsets[:-1], offsets[1:], strict=True)]
            _save_legality(tmp, games, workers)
    files = sorted(p.name for p in tmp.iterdir())
    info = {
        "format": FORMAT,
        "tokenizer_version": tokens.VERSION,
        "vocab_size": tokens.VOCAB_SIZE,
        **meta,
        "splits": counts,
        "test_evaluated": False,
        "sha256": {name: sha256_file(tmp / name) for name in files},
    }
    (tmp / "cache.json").write_text(json.dumps(info, indent=2) + "\n")
    if out_dir.exists():
        shutil.rmtree(out_dir)
    os.replace(tmp, out_dir)
    return info


def build_from_dataset(
    dataset_dir: Path, receipt_path: Path, out_dir: Path, *, workers: int = 1
) -> dict[str, Any]:
    """Build the cache of a verified dataset: train and validation shards only.

    Every shard read is first checked against the integrity receipt.
    """
    integrity.check_receipt(receipt_path, dataset_dir, [])  # the manifest, before reading it
    manifest = files.read_json(dataset_dir / "manifest.json")
    names = [name for s in SPLITS for name in gamearrays.split_files(manifest, s)]
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
    return build(out_dir, shards, meta=meta, workers=workers)


def _save_legality(directory: Path, games: list[np.ndarray], workers: int) -> None:
    chunk = max(1, len(games) // (4 * max(1, workers)))
    pieces = [games[i : i + chunk] for i in range(0, len(games), chunk)]
    if workers > 1:
        with ProcessPoolExecutor(workers) as pool:
            results = [t for part in pool.map(_tables_for, pieces) for t in part]
    else:
        results = [t for part in map(_tables_for, pieces) for t in part]
    mask = np.concatenate([np.packbits(rows, axis=1, bitorder="little") for rows, _ in results])
    codes = [c for _, per_ply in results for c in per_ply]
    offsets = np.zeros(len(codes) + 1, dtype=np.int64)
    np.cumsum([len(c) for c in codes], out=offsets[1:])
    flat = np.concatenate(codes) if codes else np.zeros(0, np.int32)
    gamearrays.save_npy(directory / "validation.legal_mask.npy", mask)
    gamearrays.save_npy(directory / "validation.legal_moves.npy", flat.astype(np.int32))
    gamearrays.save_npy(directory / "validation.legal_move_offsets.npy", offsets)


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
        except (OSError, json.JSONDecodeError) as error:
            raise ValueError(f"{meta_path}: not a readable token cache ({error})") from None
        if self.meta.get("format") != FORMAT:
            raise ValueError(f"{meta_path}: format {self.meta.get('format')!r}, want {FORMAT!r}")
        if verify:
            self.verify()
        self.train = gamearrays.Games(self.directory / "train")
        self.validation = gamearrays.Games(self.directory / "validation")

    def verify(self) -> None:
        """Re-hash every array against cache.json; raises ValueError naming a mismatch."""
        # the rule's output exists, so snakemake alone would say "Nothing to be done"
        rebuild = (
            f"the token cache is damaged; rebuild it with: snakemake"
            f" {self.directory / 'cache.json'} --forcerun token_cache --cores 4"
            " (plus the --configfile/--profile you train with)"
        )
        for name, digest in self.meta["sha256"].items():
            try:
                actual = sha256_file(self.directory / name)
            except OSError as error:
                raise ValueError(f"{self.directory / name}: {error.strerror}; {rebuild}") from None
            if actual != digest:
                raise ValueError(
                    f"{self.directory / name}: sha256 {actual} does not match cache.json"
                    f" ({digest}); {rebuild}"
                )

    @property
    def fingerprint(self) -> str:
        return self.meta["dataset_fingerprint"]

    def legal_mask(self) -> np.ndarray:
        """Bit-packed legal masks of all validation tokens, uint8 [tokens, 16]."""
        return gamearrays.load_npy(self.directory / "validation.legal_mask.npy")

    def legal_moves(self) -> tuple[np.ndarray, np.ndarray]:
        """(codes, offsets) of the legal moves at each validation ply."""
        return (
            gamearrays.load_npy(self.directory / "validation.legal_moves.npy"),
            gamearrays.load_npy(self.directory / "validation.legal_move_offsets.npy", mmap=False),
        )


def unpack_mask(bits: np.ndarray) -> np.ndarray:
    """bool [n, VOCAB_SIZE] from the packed uint8 [n, 16] rows."""
    return np.unpackbits(
        np.asarray(bits), axis=-1, bitorder="little", count=tokens.VOCAB_SIZE
    ).astype(bool)
