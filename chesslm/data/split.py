"""Which split a game belongs to: a keyed hash of its id, nothing else.

A game's split depends only on its id and the split key, never on input order, file
boundaries or the number of workers, so adding a month of games never moves an old game
from test into train.

>>> assign("NRafdioG", key="chesslm-split-v1", validation=0.05, test=0.05)
'train'
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

import numpy as np

SPLITS = ("train", "validation", "test")


def rank(game_id: str, key: str) -> int:
    """A 64-bit number uniform over ids and fixed for (id, key): the keyed hash itself."""
    digest = hashlib.blake2b(game_id.encode(), key=key.encode()[:64], digest_size=8).digest()
    return int.from_bytes(digest, "big")


def unit_interval(game_id: str, key: str) -> float:
    """A number in [0, 1) that is uniform over ids and fixed for (id, key)."""
    return rank(game_id, key) / 2**64


def assign(game_id: str, *, key: str, validation: float, test: float) -> str:
    """'train', 'validation' or 'test' for a game id."""
    if not (0 <= validation and 0 <= test and validation + test < 1):
        raise ValueError(f"split fractions must be >= 0 and sum below 1: {validation=}, {test=}")
    u = unit_interval(game_id, key)
    if u < test:
        return "test"
    if u < test + validation:
        return "validation"
    return "train"


def ranks(game_ids: Iterable[str], key: str) -> np.ndarray:
    """``rank`` of each id, as uint64: one keyed hasher, copied for each id (keying a hasher
    anew for each id cost as much as hashing the id)."""
    copy = hashlib.blake2b(key=key.encode()[:64], digest_size=8).copy
    digests = bytearray()
    for game_id in game_ids:
        hasher = copy()
        hasher.update(game_id.encode())
        digests += hasher.digest()
    return np.frombuffer(bytes(digests), dtype=">u8").astype(np.uint64)


def assign_all(game_ids: Sequence[str], *, key: str, validation: float, test: float) -> np.ndarray:
    """``assign`` of each id as an index into ``SPLITS``, for many ids at once."""
    if not (0 <= validation and 0 <= test and validation + test < 1):
        raise ValueError(f"split fractions must be >= 0 and sum below 1: {validation=}, {test=}")
    # rank / 2**64 as Python divides ints: the rank rounded to a float, times an exact 2**-64
    u = ranks(game_ids, key).astype(np.float64) * 2.0**-64
    out = np.zeros(len(u), dtype=np.int8)
    out[u < test + validation] = SPLITS.index("validation")
    out[u < test] = SPLITS.index("test")
    return out
