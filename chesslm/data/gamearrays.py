"""Games on disk as flat NumPy arrays: ``PREFIX.tokens.npy``, ``.offsets.npy``, ``.ids.npy``.

The one storage format of the project, used by dataset shards and by the token cache:
``tokens`` is every game's tokens back to back (uint8), ``offsets`` has one more entry than
there are games (game ``i`` is ``tokens[offsets[i]:offsets[i + 1]]``), ``ids`` holds each
game's id as ASCII bytes. ``.npy`` is plain bytes with a header: deterministic, readable
without pickle, and memory-mappable.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

from chesslm.files import DiskFullError, write_atomic

ID_DTYPE = "S24"
DTYPES: dict[str, Any] = {"tokens": np.uint8, "offsets": np.int64, "ids": ID_DTYPE}
PARTS = tuple(DTYPES)


def part_path(prefix: Path, part: str) -> Path:
    return prefix.with_name(f"{prefix.name}.{part}.npy")


class WriteError(OSError):
    """A file could not be written (disk full, no permission); the message names it."""


def _write(path: Path, write: Callable[[IO[bytes]], None]) -> None:
    try:
        write_atomic(path, write)
    except WriteError:
        raise
    except DiskFullError as error:
        raise WriteError(str(error)) from None  # already one line naming the file
    except OSError as error:
        raise WriteError(f"{path}: cannot write ({error.strerror or error})") from None


def save_npy(path: Path, array: np.ndarray) -> None:
    """Write an array atomically.

    :raises WriteError: naming the file, e.g. when the disk is full.
    """
    _write(path, lambda fh: np.save(fh, array, allow_pickle=False))


def save_npy_stream(
    path: Path, dtype: Any, shape: tuple[int, ...], parts: Callable[[], Iterable[np.ndarray]]
) -> None:
    """Write an array of known ``shape`` atomically from ``parts()``, one part in memory at once.

    :raises WriteError: naming the file (disk full) or if the parts do not fill ``shape``.
    """
    dtype = np.dtype(dtype)
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize

    def write(fh: IO[bytes]) -> None:
        header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False}
        np.lib.format.write_array_header_1_0(fh, {**header, "shape": shape})
        written = 0
        for part in parts():
            data = np.ascontiguousarray(part, dtype=dtype)
            fh.write(memoryview(data).cast("B"))
            written += data.nbytes
        if written != expected:
            raise WriteError(f"{path}: {written} bytes of data, want {expected} for {shape}")

    _write(path, write)


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


class NpyAppender:
    """A 1-d ``.npy`` file written by appending, its length fixed in the header at ``close``.

    The header has a fixed size (``HEADER`` bytes, space-padded as the format allows), so it
    is rewritten in place once the length is known: a writer holds one part at a time, never
    the whole array. Used inside a temporary directory that becomes visible only when
    complete (the converter's), so the file itself needs no atomic rename.
    """

    HEADER = 128

    def __init__(self, path: Path, dtype: Any) -> None:
        self.path, self.dtype, self.count = path, np.dtype(dtype), 0
        try:
            self.fh: IO[bytes] = open(path, "wb")  # noqa: SIM115 (closed in close())
            self.fh.write(b" " * self.HEADER)
        except OSError as error:
            raise WriteError(f"{path}: cannot write ({error.strerror or error})") from None

    def append(self, array: np.ndarray) -> None:
        data = np.ascontiguousarray(array, dtype=self.dtype)
        try:
            self.fh.write(memoryview(data).cast("B"))
        except OSError as error:
            raise WriteError(f"{self.path}: cannot write ({error.strerror or error})") from None
        self.count += len(data)

    def close(self) -> None:
        descr = np.lib.format.dtype_to_descr(self.dtype)
        text = f"{{'descr': {descr!r}, 'fortran_order': False, 'shape': ({self.count},), }}"
        body = text.encode("latin1").ljust(self.HEADER - 10 - 1) + b"\n"
        header = b"\x93NUMPY\x01\x00" + len(body).to_bytes(2, "little") + body
        try:
            self.fh.seek(0)
            self.fh.write(header)
            self.fh.close()
        except OSError as error:
            raise WriteError(f"{self.path}: cannot write ({error.strerror or error})") from None


def save_concat(
    prefix: Path, parts: Sequence[Mapping[str, np.ndarray]], dtypes: Mapping[str, Any] = DTYPES
) -> None:
    """The games of several parts written under ``prefix`` in order, each file streamed: one
    part's array in memory at once (shards into a cache; a shard rewritten without duplicates).

    One file ``PREFIX.NAME.npy`` per name of ``dtypes``: the parts' ``NAME`` arrays back to back
    (metadata columns are more names: ``metadata.STORE``); ``offsets`` rebased, each part's
    games starting where the previous part's ``tokens`` end.
    """
    for name, dtype in dtypes.items():
        if name == "offsets":
            count = 1 + sum(len(p["offsets"]) - 1 for p in parts)
        else:
            count = sum(len(p[name]) for p in parts)
        pieces = functools.partial(_pieces, parts, name)
        save_npy_stream(part_path(prefix, name), dtype, (count,), pieces)


def _pieces(parts: Sequence[Mapping[str, np.ndarray]], name: str) -> Iterator[np.ndarray]:
    """One file's content as one piece per part."""
    if name != "offsets":
        yield from (part[name] for part in parts)
        return
    base = 0
    yield np.zeros(1, np.int64)
    for part in parts:
        yield np.asarray(part["offsets"][1:], dtype=np.int64) + base
        base += len(part["tokens"])


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

    def __init__(self, prefix: Path | str, *, mmap: bool = True, index_mmap: bool = True) -> None:
        self.prefix = Path(prefix)
        self.tokens = load_npy(part_path(self.prefix, "tokens"), mmap=mmap)
        # offsets and ids mapped read-only too (index_mmap): a reader's memory does not grow
        # with the number of games; index_mmap=False gives writable in-memory copies
        index_mmap = mmap and index_mmap
        self.offsets = load_npy(part_path(self.prefix, "offsets"), mmap=index_mmap)
        self.ids = load_npy(part_path(self.prefix, "ids"), mmap=index_mmap)
        if len(self.offsets) != len(self.ids) + 1 or (
            len(self.offsets) and self.offsets[-1] != len(self.tokens)
        ):
            raise ValueError(f"{self.prefix}: tokens, offsets and ids do not agree")

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> np.ndarray:
        return self.tokens[self.offsets[index] : self.offsets[index + 1]]

    def stored(self) -> dict[str, np.ndarray]:
        """The arrays by part name (what ``save_concat`` takes)."""
        return {"tokens": self.tokens, "offsets": self.offsets, "ids": self.ids}

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
