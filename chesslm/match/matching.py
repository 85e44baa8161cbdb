"""Move-matching on validation games: top-1/top-3 agreement with the played move and NLL per
move, overall and per Elo bin, band and speed class, under each protocol asked for
(``protocols``: which positions count), with 95 % bootstrap intervals over games: none for a
group of fewer than ``MIN_INTERVAL_GAMES`` games (``few_games``): resampling so few games says
little (one game gives a zero-width interval), and a narrow interval there would look surer
than it is.

The model's move is the argmax over the legal moves of the legal-renormalised factorisation
(``scoring``). Positions are evaluated in chunks of games; each chunk's per-position results
are written as soon as it completes (``state/``), so a run stopped by its time budget resumes
where it stopped, and the tables are computed from every chunk written so far. The games of
``WINDOW_CHUNKS`` consecutive chunks are ordered by length first (``chunked``), so that a
chunk's batches pad their rows less; a time budget stops a run at a window's end only, so a
stopped run has scored whole windows of evenly spaced games, not the short games of each.

A rating-conditioned model (``ratings.conditioned``) scores each game behind its rating prefix:
the game's own ``white_elo``/``black_elo`` from the validation metadata ("unknown" tokens where
missing), or, with ``ratings=(white, black)``, those for every game (the counterfactual part).
A model with time inputs (``times.timed``) scores each game with its own clocks and time
control (the validation metadata; "unknown" where missing); a think-time head's distribution
at each position goes into the chunks beside the scores (``THINK_FIELD``), for
``chesslm.match.think_time``.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from chesslm import files
from chesslm.data import metadata
from chesslm.data.cache import TokenCache
from chesslm.match import metrics, outcome
from chesslm.match.protocols import Protocol
from chesslm.progress import Progress
from chesslm.scorer import branched, prepare, scoring, times
from chesslm.scorer import ratings as rating_prefix

logger = logging.getLogger(__name__)

BANDS = ((None, 1400, "<1400"), (1400, 2000, "1400-2000"), (2000, 2400, "2000-2400"),
         (2400, None, "2400+"))  # fmt: skip
UNKNOWN = "unknown"
GROUPINGS = ("overall", "elo_bin", "band", "speed")
STATS = metrics.NAMES  # each row's statistics, in the metric table's order
CHUNK_FIELDS = ("game", "ply", "rank", "nll", "n_legal")
OUTCOME_FIELDS = ("p_win", "p_draw", "p_loss")  # an outcome head's, per position (in its chunks)
THINK_FIELD = "p_think"  # a think-time head's (positions, BINS) distribution (in its chunks)
MIN_INTERVAL_GAMES = 10
WRITE, TABLES = "play: a chunk written", "play: a chunk's prepared tables"  # profile labels
WINDOW_CHUNKS = 16
"""Chunks whose games are ordered by length together (``chunked``). A batch pads every row
to its longest main line plus its most branch tokens: on ``real``'s validation split (8,405
games, 512 a chunk, batches of 65,536 tokens) contiguous chunks made 1.21 row tokens per real
one, windows of 8 chunks 1.10, of 16 1.07, of 32 1.06 (``benchmarks/play_padding.py``,
BENCHMARKS.md); a larger window only makes a budget stop coarser. Kept work records it
(``state_key``)."""


def evenly_spaced(n: int, k: int | None) -> np.ndarray:
    """``k`` evenly spaced indices of ``n`` (all when k is None or k >= n)."""
    if k is None or k >= n:
        return np.arange(n, dtype=np.int64)
    return (np.arange(k, dtype=np.int64) * n) // k


def chunked(
    selected: np.ndarray, lengths: np.ndarray, chunk_games: int, window: int = WINDOW_CHUNKS
) -> list[np.ndarray]:
    """``selected`` (game indices) in chunks of ``chunk_games``: each window of ``window``
    chunks' consecutive games ordered by ``lengths`` (main-line tokens, known before any
    legal move is computed), shortest first, ties in their order, then cut.

    >>> [c.tolist() for c in chunked(np.arange(5), np.array([5, 1, 4, 2, 3]), 2, window=2)]
    [[1, 3], [2, 0], [4]]
    """
    out = []
    step = chunk_games * window
    for w in range(0, len(selected), step):
        games = selected[w : w + step]
        games = games[np.argsort(lengths[games], kind="stable")]
        out += [games[i : i + chunk_games] for i in range(0, len(games), chunk_games)]
    return out


def state_key() -> dict[str, int]:
    """What a chunk's games depend on besides the settings: kept work with another key is
    not resumed (``chesslm.play.workstate``, rule score's state)."""
    return {"window_chunks": WINDOW_CHUNKS}


def load_metadata(cache_dir: Path, offsets: np.ndarray) -> tuple[dict[str, np.ndarray], str]:
    """The validation split's metadata columns (per game; ``clock`` per ply with
    ``ply_offsets``), or sentinel columns when the cache has none (every position then goes
    to the 'unknown' bins); second value says which."""
    prefix = cache_dir / "validation"
    try:
        meta = metadata.Metadata(prefix, offsets)
        cols = {name: np.asarray(meta[name]) for name in metadata.COLUMNS}
        cols["ply_offsets"] = meta.ply_offsets
        return cols, "present"
    except (OSError, ValueError) as error:
        logger.warning("%s: no metadata columns (%s); bins are 'unknown'", prefix, error)
    n = len(offsets) - 1
    ply_offsets = metadata.ply_offsets(offsets)
    cols = {
        name: np.full(ply_offsets[-1] if col.per_ply else n, col.missing, dtype=np.dtype(col.dtype))
        for name, col in metadata.COLUMNS.items()
    }
    cols["ply_offsets"] = ply_offsets
    return cols, "missing"


class Evaluator:
    """Move-matching of one dataset's validation split, chunk by chunk, resumable."""

    def __init__(
        self,
        net: torch.nn.Module,
        cache_dir: Path,
        state_dir: Path,
        *,
        games: int | None,
        chunk_games: int,
        batch_tokens: int,
        device: torch.device,
        attention: str = "split",
        ratings: tuple[int, int] | None = None,
        threads: int = 1,
        window: int = WINDOW_CHUNKS,
    ) -> None:
        """``ratings``: (White's, Black's) for every game instead of its own (a conditioned
        model only; a model without conditioning reads no ratings). ``threads``: the job's
        cores, split between torch and preparing games as ``chesslm.scorer.prepare`` says.
        ``window``: chunks ordered by length together (``chunked``; benchmarks set others)."""
        self.net, self.device, self.attention = net, device, attention
        self.threads = threads
        self.cache = TokenCache(cache_dir, verify=True)
        self.games = self.cache.validation
        self.codes, self.code_offsets = self.cache.legal_moves()
        lengths = np.asarray(self.games.lengths, dtype=np.int64)
        plies = (lengths - 2) // 3
        self.plies = plies
        # first ply of each game in the cache's legal-move tables; -1: not stored (beyond the
        # cache's legality_games), its legal moves are computed when it is evaluated
        self.ply_start = np.full(len(self.games), -1, dtype=np.int64)
        self.ply_start[self.cache.legality_games()] = self.cache.legality_starts()[1][:-1]
        self.bound = games
        selected = evenly_spaced(len(self.games), games)
        self.selected = selected[plies[selected] > 0]
        self.window = window
        self.chunks = chunked(self.selected, lengths, chunk_games, window)
        unstored = int((self.ply_start[self.selected] < 0).sum())
        self.workers = prepare.workers(threads, unstored, device.type)
        self.batch_tokens = batch_tokens
        self.prefixes = self._prefixes(cache_dir, ratings)
        self.meta = load_metadata(cache_dir, self.games.offsets)[0] if times.timed(net) else None
        self.state_dir = state_dir
        state_dir.mkdir(parents=True, exist_ok=True)

    def _prefixes(self, cache_dir: Path, ratings: tuple[int, int] | None) -> np.ndarray:
        """(games, prefix length) input tokens before each game's BOS."""
        n = len(self.games)
        if not rating_prefix.conditioned(self.net):
            return np.zeros((n, 0), dtype=np.int64)
        if ratings is not None:
            return np.tile(rating_prefix.prefix(self.net, *ratings), (n, 1))
        meta, _ = load_metadata(cache_dir, self.games.offsets)
        return rating_prefix.prefixes(self.net, meta["white_elo"], meta["black_elo"])

    def chunk_path(self, i: int) -> Path:
        return self.state_dir / f"chunk-{i:05d}.npz"

    def ends_window(self, i: int) -> bool:
        """Whether chunk ``i`` ends a window (``chunked``): where a time budget may stop a
        run (a run stopped so has scored whole windows)."""
        return (i + 1) % self.window == 0 or i == len(self.chunks) - 1

    @property
    def positions_total(self) -> int:
        """Positions of every selected game (one per ply)."""
        return int(self.plies[self.selected].sum())

    @property
    def positions_done(self) -> int:
        """Positions of the chunks already on disk (an earlier job's, when resumed)."""
        return sum(int(self.plies[c].sum()) for i, c in enumerate(self.chunks)
                   if self.chunk_path(i).exists())  # fmt: skip

    def run(self, deadline: float, progress: Progress | None = None) -> bool:
        """Evaluate the chunks not yet on disk until ``deadline`` (time.monotonic()); True when
        every chunk is done. ``progress`` gets the positions done after each batch. Games
        without stored tables are prepared by ``prepare``'s workers, as it says. The chunks
        flow through one scoring pipeline (``scoring.score_chunks``): the next chunk's inputs
        are built while the device scores this one's last batches; each chunk is written as
        soon as its last batch is back, and the deadline is checked after each window's last."""
        done = self.positions_done
        todo = [i for i in range(len(self.chunks)) if not self.chunk_path(i).exists()]
        if todo and time.monotonic() >= deadline:
            return False
        threads = torch.get_num_threads()
        if self.workers and self.device.type != "cpu":
            torch.set_num_threads(1)  # the other cores prepare games (``prepare``)
        parts = self._parts(todo)
        inputs = self._inputs(prepare.started(self.workers), parts)
        try:
            with contextlib.closing(inputs):  # after the stream: its chunks ahead cancelled
                stream = scoring.score_chunks(
                    self.net, inputs, batch_tokens=self.batch_tokens, device=self.device,
                    attention=self.attention,
                )  # fmt: skip
                with contextlib.closing(stream):
                    out = self._collected()
                    for scored in stream:
                        i, games, last_piece = parts[scored.chunk]
                        self._collect(out, games, scored)
                        done += len(scored.host["rank"])
                        if progress is not None:
                            progress.update(done)
                        if scored.last and last_piece:
                            self._write(i, out)
                            out = self._collected()
                            if (time.monotonic() >= deadline and i != todo[-1]
                                    and self.ends_window(i)):  # fmt: skip
                                return False
        finally:
            torch.set_num_threads(threads)  # the job's, for the parts after this one
        return True

    def _write(self, i: int, out: dict[str, list[np.ndarray]]) -> None:
        """Chunk ``i``'s positions, collected (``WRITE``: its label in a profile)."""
        result = {k: np.concatenate(v) for k, v in out.items()}
        with torch.profiler.record_function(WRITE):
            files.write_atomic(self.chunk_path(i), lambda fh: np.savez(fh, **result))

    def _parts(self, todo: list[int]) -> list[tuple[int, np.ndarray, bool]]:
        """(chunk, games, whether its last piece) in scoring order: ``prepare.pieces``, the
        first chunk split where workers prepare ahead of the device."""
        split = self.workers > 0 and prepare.ahead(self.device.type) > 0
        return [(todo[c], games, last) for c, games, last in
                prepare.pieces([self.chunks[i] for i in todo], split)]  # fmt: skip

    def _inputs(
        self, prep: prepare.Preparer, parts: list[tuple[int, np.ndarray, bool]]
    ) -> Iterator[list[branched.GameInput]]:
        """Each piece's inputs (``parts``: chunk, games, last piece), in order, the tables of
        up to ``prepare.ahead`` chunks (and the extra pieces the first was split into)
        beyond it being prepared meanwhile (run in the scoring pipeline's thread)."""
        ahead: dict[int, prepare.Pending] = {}
        extra = len(parts) - sum(last for _, _, last in parts)  # pieces that end no chunk
        n_ahead = prepare.ahead(self.device.type) + extra
        try:
            for k, (_, games, _) in enumerate(parts):
                for j in range(k, min(k + 1 + n_ahead, len(parts))):
                    ahead[j] = ahead.get(j) or self._submit(prep, parts[j][1])
                with torch.profiler.record_function(TABLES):
                    tables = ahead.pop(k).tables()
                yield [self.game(int(g), tables.get(int(g))) for g in games]
        finally:  # the workers outlive this run (``prepare.started``): drop its tasks left
            for pending in ahead.values():
                pending.cancel()

    def _submit(self, prep: prepare.Preparer, chunk: np.ndarray) -> prepare.Pending:
        """Start preparing the games of ``chunk`` whose tables the cache does not store."""
        ids = [int(g) for g in chunk if self.ply_start[g] < 0]
        return prep.submit(ids, [np.asarray(self.games[g]) for g in ids])

    def game(self, g: int, tables: prepare.Tables | None = None) -> branched.GameInput:
        """Validation game ``g``'s input: its stored tables, else ``tables`` (prepared), else
        computed here."""
        p0, n = self.ply_start[g], self.plies[g]
        if p0 >= 0:
            codes, offsets = self.codes, self.code_offsets[p0 : p0 + n + 1]
        else:
            codes, offsets = tables if tables is not None else prepare.game_tables(self.games[g])
        return branched.game_input(
            self.games[g], codes, offsets, prefix=self.prefixes[g], time=self.time_rows(g)
        )

    def time_rows(self, g: int) -> np.ndarray | None:
        """Validation game ``g``'s time rows for a timed model (its clocks and time control),
        None for a model without time inputs."""
        if self.meta is None:
            return None
        m = self.meta
        clock = m["clock"][m["ply_offsets"][g] : m["ply_offsets"][g + 1]]
        return times.of_game(clock, m["base_seconds"][g], m["increment_seconds"][g])

    def selection(self) -> str:
        """Which validation games are evaluated, and why fewer than all where so."""
        n, chosen = len(self.games), len(self.selected)
        reasons = []
        if self.bound is not None and self.bound < n:
            reasons.append(f"match.games = {self.bound}: evenly spaced")
        empty = int((self.plies[evenly_spaced(n, self.bound)] <= 0).sum())
        if empty:
            reasons.append(f"{empty} without a move left out")
        computed = int((self.ply_start[self.selected] < 0).sum())
        note = (f"; legal moves of {computed} computed with python-chess (beyond the cache's"
                f" {int((self.ply_start >= 0).sum())} stored)") if computed else ""  # fmt: skip
        why = f" ({'; '.join(reasons)})" if reasons else ""
        return f"{chosen} of {n} validation games{why}{note}"

    def evaluate_games(
        self,
        games: np.ndarray,
        batch_done: Callable[[int], None] | None = None,
        prepared: dict[int, prepare.Tables] | None = None,
    ) -> dict[str, np.ndarray]:
        """Per-position results of ``games`` (validation indices); ``batch_done`` gets each
        batch's number of positions; ``prepared``: tables of games the cache lacks."""
        ids = np.asarray(games, dtype=np.int64)
        prepared = prepared or {}
        inputs = [self.game(int(g), prepared.get(int(g))) for g in ids]
        out = self._collected()
        stream = scoring.score_chunks(self.net, [inputs], batch_tokens=self.batch_tokens,
                                      device=self.device, attention=self.attention)  # fmt: skip
        for scored in stream:
            self._collect(out, ids, scored)
            if batch_done is not None:
                batch_done(len(scored.host["rank"]))
        return {k: np.concatenate(v) for k, v in out.items()}

    def _collected(self) -> dict[str, list[np.ndarray]]:
        return {k: [] for k in self.fields}

    def _collect(
        self, out: dict[str, list[np.ndarray]], ids: np.ndarray, scored: scoring.Scored
    ) -> None:
        """Add one scored batch's positions (``ids``: its chunk's validation indices)."""
        batch, host = scored.batch, scored.host
        out["game"].append(np.asarray(ids)[np.asarray(scored.group)][batch.ply_game])
        out["ply"].append(batch.ply_number.astype(np.int16))
        out["rank"].append(host["rank"].astype(np.int32))
        out["nll"].append((-host["played_logp"]).astype(np.float32))
        out["n_legal"].append(host["n_legal"].astype(np.int16))
        for j, name in enumerate(OUTCOME_FIELDS if "wdl" in host else ()):
            out[name].append(host["wdl"][:, j].astype(np.float32))
        if "think" in host:
            out[THINK_FIELD].append(host["think"].astype(np.float32))

    @property
    def fields(self) -> tuple[str, ...]:
        """A chunk's per-position fields: CHUNK_FIELDS, OUTCOME_FIELDS with an outcome head
        (the position's win/draw/loss probabilities from the side to move) and THINK_FIELD
        with a think-time head (its distribution over the bins)."""
        think = (THINK_FIELD,) if self.net.config.think_time else ()
        return CHUNK_FIELDS + (OUTCOME_FIELDS if self.net.config.outcome else ()) + think

    def positions(self) -> dict[str, np.ndarray]:
        """Every position evaluated so far (all chunks on disk)."""
        parts = [np.load(p, allow_pickle=False) for p in sorted(self.state_dir.glob("chunk-*.npz"))]
        return {k: np.concatenate([p[k] for p in parts]) if parts else np.zeros(0) for k in
                self.fields}  # fmt: skip


# ----------------------------------------------------------------------------- the tables


def elo_band(elo: np.ndarray) -> np.ndarray:
    labels = np.full(len(elo), UNKNOWN, dtype=object)
    for low, high, name in BANDS:
        ok = elo >= 0
        if low is not None:
            ok &= elo >= low
        if high is not None:
            ok &= elo < high
        labels[ok] = name
    return labels


def elo_bin(elo: np.ndarray) -> np.ndarray:
    """100-Elo bins of the mover, labelled by their lower edge ("1500" = 1500-1599)."""
    labels = np.full(len(elo), UNKNOWN, dtype=object)
    ok = elo >= 0
    labels[ok] = [str(v) for v in (elo[ok] // 100) * 100]
    return labels


def position_features(pos: dict[str, np.ndarray], meta: dict[str, np.ndarray]) -> dict[str, Any]:
    """The mover's Elo, the speed class and the mover's clock before the move."""
    g, ply = pos["game"].astype(np.int64), pos["ply"].astype(np.int64)
    white = ply % 2 == 0
    elo = np.where(white, meta["white_elo"][g], meta["black_elo"][g]).astype(np.int64)
    speed_index = meta["speed"][g].astype(np.int64)
    speed = np.array(
        [metadata.SPEEDS[i] if 0 <= i < len(metadata.SPEEDS) else UNKNOWN for i in speed_index],
        dtype=object,
    )
    # clock after the mover's previous move; before their first move, the base time
    earlier = meta["ply_offsets"][g] + np.maximum(ply - 2, 0)
    clock = np.where(
        ply >= 2,
        meta["clock"][np.minimum(earlier, len(meta["clock"]) - 1)] if len(meta["clock"]) else -1,
        meta["base_seconds"][g],
    ).astype(np.float64)
    return {"elo": elo, "speed": speed, "clock": clock}


def tables(
    pos: dict[str, np.ndarray],
    meta: dict[str, np.ndarray],
    protocols: list[Protocol],
    *,
    replicates: int,
    seed: int,
) -> list[dict[str, Any]]:
    """Rows (protocol, grouping, group, positions, games, few_games, each metric of
    ``metrics.METRICS`` with 95 % bootstrap intervals over games; None for a group of fewer
    than MIN_INTERVAL_GAMES)."""
    features = position_features(pos, meta)
    columns = _columns(pos, meta, features, protocols)
    if not columns:
        return []
    sums = _game_sums(pos, columns)
    boot = outcome.resample_sums(sums, replicates, seed)
    total = sums.sum(axis=0)
    return [
        _row(name, grouping, group, total[c], sums[:, c, 0], boot[:, c])
        for c, (name, grouping, group, _) in enumerate(columns)
    ]


def _columns(
    pos: dict[str, np.ndarray],
    meta: dict[str, np.ndarray],
    features: dict[str, Any],
    protocols: list[Protocol],
) -> list[tuple[str, str, str, np.ndarray]]:
    """Every (protocol, grouping, group) with a position, and the mask of its positions."""
    rank = pos["rank"]
    labels = {
        "overall": np.full(len(rank), "all", dtype=object),
        "elo_bin": elo_bin(features["elo"]),
        "band": elo_band(features["elo"]),
        "speed": features["speed"],
    }
    columns: list[tuple[str, str, str, np.ndarray]] = []
    for protocol in protocols:
        name, keep = protocol.name, protocol.keep(pos["game"], pos["ply"], meta)
        for grouping in GROUPINGS:
            for group in _ordered(set(labels[grouping][keep]), grouping):
                columns.append((name, grouping, group, keep & (labels[grouping] == group)))
    return columns


def _game_sums(
    pos: dict[str, np.ndarray], columns: list[tuple[str, str, str, np.ndarray]]
) -> np.ndarray:
    """Per game x column sums of n and of each metric (games x columns x (1 + metrics)): the
    bootstrap resamples games."""
    values = metrics.values(pos["rank"], pos["nll"])
    game_ids, game_of = np.unique(pos["game"], return_inverse=True)
    G = len(game_ids)
    sums = np.zeros((G, len(columns), 1 + len(STATS)))
    for c, (*_, m) in enumerate(columns):
        gm = game_of[m]
        sums[:, c, 0] = np.bincount(gm, minlength=G)
        for j, stat in enumerate(STATS, start=1):
            sums[:, c, j] = np.bincount(gm, weights=values[stat][m], minlength=G)
    return sums


def _row(
    name: str, grouping: str, group: str, total: np.ndarray, per_game: np.ndarray,
    boot: np.ndarray,
) -> dict[str, Any]:  # fmt: skip
    """One column's row: its sums ``total``, positions ``per_game``, resampled sums ``boot``."""
    n = total[0]
    games = int((per_game > 0).sum())
    row: dict[str, Any] = {
        "protocol": name,
        "grouping": grouping,
        "group": group,
        "positions": int(n),
        "games": games,
        "few_games": games < MIN_INTERVAL_GAMES,
    }
    for j, stat in enumerate(STATS):
        row[stat] = float(total[j + 1] / n) if n else None
        low, high = (None, None) if row["few_games"] else _percentiles(boot, j)
        row[f"{stat}_low"], row[f"{stat}_high"] = low, high
    return row


def _percentiles(boot: np.ndarray, j: int) -> tuple[float | None, float | None]:
    """The 2.5 and 97.5 percentiles of statistic ``j`` over the replicates (sums of n and of
    each metric per replicate); None where no replicate drew a position."""
    with np.errstate(invalid="ignore", divide="ignore"):
        ratios = boot[:, j + 1] / boot[:, 0]
    finite = ratios[np.isfinite(ratios)]
    if not len(finite):
        return None, None
    low, high = np.percentile(finite, [2.5, 97.5])
    return float(low), float(high)


def _ordered(groups: set[str], grouping: str) -> list[str]:
    known = sorted(g for g in groups if g != UNKNOWN)
    if grouping == "elo_bin":
        known = sorted(known, key=int)
    elif grouping == "band":
        known = [b for *_, b in BANDS if b in groups]
    elif grouping == "speed":
        known = [s for s in metadata.SPEEDS if s in groups]
    return known + ([UNKNOWN] if UNKNOWN in groups else [])


def counts(
    pos: dict[str, np.ndarray],
    meta: dict[str, np.ndarray],
    features: dict[str, Any],
    protocols: list[Protocol],
) -> dict:
    return {
        "positions": int(len(pos["rank"])),
        "protocol_positions": {
            p.name: int(p.keep(pos["game"], pos["ply"], meta).sum()) for p in protocols
        },
        "unknown_clock_positions": int((features["clock"] < 0).sum()),
        "unknown_elo_positions": int((features["elo"] < 0).sum()),
        "mean_legal_moves": float(np.mean(pos["n_legal"])) if len(pos["rank"]) else None,
    }
