"""Parsing one chunk of PGN text into the games a dataset keeps (in a conversion's worker).

The native PGN reader (``rust_pgn_reader_python_binding``, checked against python-chess in
the tests) parses the chunk; each game's metadata is read, what cannot be used or what the
filters reject is counted by reason, and the rest is tokenised with its id, duplicate key and
split, all as NumPy arrays (``ChunkResult``).
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import rust_pgn_reader_python_binding as native

from chesslm.data import census, filters, gamearrays, metadata, pgn, split, tokens
from chesslm.data.settings import Settings

# Games per call of the native parser: what it returns for a whole 4 MiB chunk (~3,000
# games) is ~30 MB, a board per position among it; a batch's stays in the caches, and a
# worker's or a one-process conversion's peak memory drops by ~40 MB (no slower on one core).
BATCH_GAMES = 1000
_LICHESS_ID = re.compile(r"lichess\.org/([A-Za-z0-9]{8})\b")
_STANDARD = {"standard", "chess", "chess960 standard"}
# The native reader's promotion codes (-1 none, 2 N, 3 B, 4 R, 5 Q) to tokens.
_PROMO_LUT = np.full(8, tokens.PROMO_NONE, dtype=np.uint8)
_PROMO_LUT[[3, 4, 5, 6]] = [tokens.promotion_token(p) for p in tokens.PROMO_PIECES]
# what a Lichess export never holds: a file that yields them is damaged or not Lichess's
DAMAGE = ("illegal_move", "unparsable")


@dataclass
class ChunkResult:
    """What a worker returns for one chunk: kept games in input order, and skips.

    Game ``i`` is ``tokens[offsets[i]:offsets[i + 1]]``, with id ``ids[i]``, duplicate key
    ``keys[i]`` and split ``SPLITS[splits[i]]`` (a pure function of the id, so workers compute
    it); ``columns`` holds its metadata (``clock`` per ply, the others per game), ``census``
    the kept games' census counts (chesslm.data.census).
    """

    ids: np.ndarray = field(default_factory=lambda: np.zeros(0, gamearrays.ID_DTYPE))
    keys: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    splits: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int8))
    tokens: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint8))
    offsets: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))
    columns: dict[str, np.ndarray] = field(default_factory=metadata.empty_columns)
    skipped: Counter[str] = field(default_factory=Counter)
    census: Counter[str] = field(default_factory=Counter)
    # the main process numbers kept games in input order (duplicate detection keeps the first)
    order: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    # DAMAGE reason -> the skipped games' places among the result's games (0: its first)
    damaged: dict[str, list[int]] = field(default_factory=dict)

    def games(self) -> int:
        """How many games the result read: those kept and those skipped."""
        return len(self.ids) + sum(self.skipped.values())

    def stored(self) -> dict[str, np.ndarray]:
        """The games' arrays as a store holds them (``metadata.STORE`` names)."""
        arrays = {"tokens": self.tokens, "offsets": self.offsets, "ids": self.ids}
        return arrays | metadata.stored_names(self.columns)

    def take(self, games: np.ndarray) -> ChunkResult:
        """The games at the (sorted) indices ``games``, vectorised."""
        chosen = np.zeros(len(self.ids), dtype=bool)
        chosen[games] = True
        lengths = np.diff(self.offsets)
        plies = (lengths - 2) // 3
        per_game = {n: c[chosen] for n, c in self.columns.items() if n != "clock"}
        per_game["clock"] = self.columns["clock"][np.repeat(chosen, plies)]
        return ChunkResult(
            ids=self.ids[chosen],
            keys=self.keys[chosen],
            splits=self.splits[chosen],
            tokens=self.tokens[np.repeat(chosen, lengths)],
            offsets=np.concatenate([[0], np.cumsum(lengths[chosen])]).astype(np.int64),
            columns=per_game,
            order=self.order[chosen] if len(self.order) else self.order,
        )

    def by_split(self) -> list[ChunkResult]:
        """The games as one result per split (``split.SPLITS`` order); the first carries the
        chunk's skip and census counts."""
        parts = [self.take(np.flatnonzero(self.splits == k)) for k in range(len(split.SPLITS))]
        parts[0].skipped, parts[0].census = self.skipped, self.census
        parts[0].damaged = self.damaged
        return parts

    @staticmethod
    def concat(parts: Sequence[ChunkResult]) -> ChunkResult:
        """The games of ``parts`` in order, one result; a part may hold no game (a batch
        whose games were all skipped), and no part at all is the empty result."""
        if len(parts) <= 1:
            return parts[0] if parts else ChunkResult()
        # each part's offsets shifted by the tokens before it: never read from another
        # part's offsets, which an empty part leaves without an entry past its first
        starts = np.cumsum([0] + [len(p.tokens) for p in parts[:-1]], dtype=np.int64)
        offsets = [np.zeros(1, np.int64)]
        offsets += [p.offsets[1:] + start for p, start in zip(parts, starts, strict=True)]
        skipped: Counter[str] = Counter()
        counts: Counter[str] = Counter()
        damaged: dict[str, list[int]] = {}
        first = 0  # the part's first game among all the parts' games
        for part in parts:
            skipped.update(part.skipped)
            counts.update(part.census)
            for reason, places in part.damaged.items():
                damaged.setdefault(reason, []).extend(first + i for i in places)
            first += part.games()
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
            census=counts,
            order=np.concatenate([p.order for p in parts]),
            damaged=damaged,
        )


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
    return parse_games(pgn.split_games(text), settings)


def parse_games(texts: Sequence[str], settings: Settings) -> ChunkResult:
    """The result of games given one string each, ``BATCH_GAMES`` games per native call."""
    return ChunkResult.concat(
        [
            parse_batch(texts[i : i + BATCH_GAMES], settings)
            for i in range(0, len(texts), BATCH_GAMES)
        ]
    )


def parse_batch(texts: Sequence[str], settings: Settings) -> ChunkResult:
    """The result of one call of the native parser on ``texts`` (one string per game); where
    every game is skipped, a result with no game and the skip counts."""
    if not texts:
        return ChunkResult()
    parsed = native.parse_games_from_strings(list(texts), num_threads=1)
    # the parsed arrays (a board per position among them) go when this returns
    # view.headers is built anew on each access: read once
    return ChunkResult.concat([parse_view(view, view.headers, settings) for view in parsed.chunks])


def parse_view(view: Any, all_headers: list[dict[str, str]], settings: Settings) -> ChunkResult:
    """The result of the games of one view of the native parser, given each game's tags
    (its PGN headers, or a Parquet row's columns: chesslm.data.parquet)."""
    result = ChunkResult()
    move_offsets = view.move_offsets.astype(np.int64)
    plies = np.diff(move_offsets)
    rules_ok, columns = _by_the_rules(all_headers, view.parse_errors, plies, settings, result)
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
    result.splits = _splits(ids, settings)
    result.tokens, moves = _tokenise(view, move_offsets, keep)
    result.offsets = np.concatenate([[0], np.cumsum(2 + 3 * plies[keep])]).astype(np.int64)
    result.columns = {name: column[keep] for name, column in columns.items()}
    result.columns["clock"] = metadata.clock_column(np.asarray(view.clocks)[moves])
    result.census = census.counts(result.columns, metadata.ply_offsets(result.offsets))
    return result


def _by_the_rules(
    all_headers: list[dict[str, str]],
    errors: list[str | None],
    plies: np.ndarray,
    settings: Settings,
    result: ChunkResult,
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Which games the rules of chess keep (the others counted in ``result.skipped``), and
    every game's per-game metadata columns."""
    rules_ok = np.zeros(len(plies), dtype=bool)
    rows = []
    for i, (headers, error) in enumerate(zip(all_headers, errors, strict=True)):
        rows.append(metadata.header_row(headers))
        if not headers and (error is not None or plies[i] == 0):
            reason = "unparsable"  # text that is no game at all
        else:
            reason = classify(headers, error, int(plies[i]), settings)
        if not reason:
            rules_ok[i] = True
            continue
        result.skipped[reason] += 1
        if reason in DAMAGE:  # numbered, for the warning that names them (convert)
            result.damaged.setdefault(reason, []).append(i)
    return rules_ok, metadata.header_columns(rows)


def _splits(ids: list[str], settings: Settings) -> np.ndarray:
    """Each game's split as an index into ``split.SPLITS``."""
    return split.assign_all(
        ids, key=settings.split_key, validation=settings.validation, test=settings.test
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
