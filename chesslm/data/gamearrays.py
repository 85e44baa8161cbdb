"""Games on disk as flat NumPy arrays: ``PREFIX.tokens.npy``, ``.offsets.npy``, ``.ids.npy``.

The one storage format of the project, used by dataset shards and by the token cache:
``tokens`` is every game's tokens back to back (uint8), ``offsets`` has one more entry than
there are games (game ``i`` is ``tokens[offsets[i]:offsets[i + 1]]``), ``ids`` holds each
game's id as ASCII bytes. ``.npy`` is plain bytes with a header: deterministic, readable
without pickle, and memory-mappable.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from chesslm.files import write_atomic

PARTS = ("tokens", "offsets", "ids")
ID_DTYPE = "S24"


def part_path(prefix: Path, part: str) -> Path:
    return prefix.with_name(f"{prefix.name}.{part}.npy")


def save_npy(path: Path, array: np.ndarray) -> None:
    """Write an array atomically."""
    write_atomic(path, lambda fh: np.save(fh, array, allow_pickle=False))


def load_npy(path: Path, *, mmap: bool = True) -> np.ndarray:
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (OSError, ValueError) as error:
        raise ValueError(f"{path}: not a readable .npy array ({error})") from None


def pack(games: Sequence[np.ndarray], ids: Sequence[str | bytes]) -> dict[str, np.ndarray]:
    """Flat arrays of a list of token arrays and their ids."""
    lengths = np.fromiter((len(g) for g in games), dtype=np.int64, count=len(games))
    offsets = np.zeros(len(games) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    tokens = np.concatenate(games).astype(np.uint8) if games else np.zeros(0, np.uint8)
    encoded = [i.encode("ascii") if isinstance(i, str) else i for i in ids]
    return {"tokens": tokens, "offsets": offsets, "ids": np.array(encoded, dtype=ID_DTYPE)}


def concat(parts: Sequence[Games]) -> dict[str, np.ndarray]:
    """The flat arrays of several stores' games, in order (shards into one cache split)."""
    lengths = [p.lengths for p in parts]
    offsets = np.zeros(1 + sum(len(n) for n in lengths), dtype=np.int64)
    if len(offsets) > 1:
        np.cumsum(np.concatenate(lengths), out=offsets[1:])
    return {
        "tokens": np.concatenate([np.asarray(p.tokens) for p in parts] or [np.zeros(0, np.uint8)]),
        "offsets": offsets,
        "ids": np.concatenate([p.ids for p in parts] or [np.zeros(0, ID_DTYPE)]).astype(ID_DTYPE),
    }


def save(prefix: Path, arrays: dict[str, np.ndarray]) -> list[Path]:
    """Write the parts of ``arrays`` under ``prefix``; returns the paths written."""
    paths = []
    for part in PARTS:
        path = part_path(prefix, part)
        save_npy(path, arrays[part])
        paths.append(path)
    return paths


class Games:
    """Read-only, memory-mapped games under one prefix.

    ``games[i]`` is game i's tokens (a view), ``len(games)`` the number of games.
    """

    def __init__(self, prefix: Path | str, *, mmap: bool = True) -> None:
        self.prefix = Path(prefix)
        self.tokens = load_npy(part_path(self.prefix, "tokens"), mmap=mmap)
        self.offsets = load_npy(part_path(self.prefix, "offsets"), mmap=False)
        self.ids = load_npy(part_path(self.prefix, "ids"), mmap=False)
        if len(self.offsets) != len(self.ids) + 1 or (
            len(self.offsets) and self.offsets[-1] != len(self.tokens)
        ):
            raise ValueError(f"{self.prefix}: tokens, offsets and ids do not agree")

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> np.ndarray:
        return self.tokens[self.offsets[index] : self.offsets[index + 1]]

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def id(self, index: int) -> str:
        return self.ids[index].decode("ascii")


def split_files(manifest: dict[str, Any], split_name: str) -> list[str]:
    """The dataset-relative file names of one split's shards."""
    return [
        part_path(Path(prefix), part).as_posix()
        for prefix in manifest["shards"][split_name]
        for part in PARTS
    ]
