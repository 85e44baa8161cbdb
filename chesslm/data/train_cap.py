"""The training-size cap (``datasets.NAME.train_games``): which N train games a dataset keeps.

The kept games are the N whose keyed hash of the id (``split.rank`` with ``split_key +
"/train-order"``) is smallest, ties broken by the id: a pure function of the ids, so the subset
does not depend on input order or the number of workers, and a smaller cap's games are all
inside a bigger cap's (nested). The split assignment is not touched, so validation and test
are the uncapped dataset's, byte for byte.

Memory stays bounded by one shard plus a histogram, whatever the number of train games: a
first pass over the train shards counts the hashes' top ``BITS`` bits (``2**BITS`` bins); the
bin holding the Nth smallest is found from the cumulative counts; a second pass collects only
that bin's hashes (about games / 2**BITS of them), whose sorted order gives the exact
threshold; a third pass rewrites each shard keeping the games at or below it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from chesslm.data import gamearrays, split

BITS = 16
SUFFIX = "/train-order"


def ranks(ids: np.ndarray, split_key: str) -> np.ndarray:
    """The 64-bit keyed hash of each id (``ids`` as stored: fixed-width ASCII bytes)."""
    return split.ranks((i.decode("ascii") for i in ids), split_key + SUFFIX)


def _shard_ranks(prefix: Path, split_key: str) -> tuple[np.ndarray, np.ndarray]:
    ids = gamearrays.load_npy(gamearrays.part_path(prefix, "ids"), mmap=True)
    return ranks(ids, split_key), np.asarray(ids)


def threshold(prefixes: list[Path], n: int, split_key: str) -> tuple[int, bytes] | None:
    """(rank, id) of the Nth smallest train game by (rank, id); None if there are at most N."""
    counts = np.zeros(2**BITS, dtype=np.int64)
    for prefix in prefixes:
        r, _ = _shard_ranks(prefix, split_key)
        counts += np.bincount((r >> np.uint64(64 - BITS)).astype(np.int64), minlength=2**BITS)
    if counts.sum() <= n:
        return None
    cumulative = np.cumsum(counts)
    b = int(np.searchsorted(cumulative, n))  # first bin whose cumulative count reaches n
    before = int(cumulative[b] - counts[b])
    in_bin_ranks, in_bin_ids = [], []
    for prefix in prefixes:
        r, ids = _shard_ranks(prefix, split_key)
        here = (r >> np.uint64(64 - BITS)) == b
        in_bin_ranks.append(r[here])
        in_bin_ids.append(ids[here])
    r, ids = np.concatenate(in_bin_ranks), np.concatenate(in_bin_ids)
    order = np.lexsort((ids, r))  # by rank, then id: a total order on distinct ids
    k = order[n - before - 1]
    return int(r[k]), bytes(ids[k])


def kept(prefix: Path, cut: tuple[int, bytes], split_key: str) -> np.ndarray:
    """Which games of one shard are at or below the threshold ``cut`` (rank, id)."""
    r, ids = _shard_ranks(prefix, split_key)
    rank, gid = np.uint64(cut[0]), np.array(cut[1], dtype=ids.dtype)
    return (r < rank) | ((r == rank) & (ids <= gid))
