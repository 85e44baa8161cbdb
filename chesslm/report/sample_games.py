"""A few validation games of a run's dataset as a PGN file beside its summary, so that the
analyse command summary.md prints runs as printed, on games of the run's own data.

The games come from the dataset's token cache, which holds the train and validation splits
only: nothing here can read the test split. Each game keeps its id (``GameId``), ratings,
result, time control and ``[%clk]`` clocks where the dataset has them, so a rating- or
time-conditioned model reads them as it did in training."""

from __future__ import annotations

from pathlib import Path

import chess
import chess.pgn
import numpy as np

from chesslm.data import metadata, tokens
from chesslm.data.cache import TokenCache
from chesslm.files import write_atomic
from chesslm.report import items

FILE = items.SAMPLE_GAMES  # its name in results/{run}/report/
GAMES = 16  # enough to see the model's figures vary, quick to analyse on a CPU


def game(cache: TokenCache, meta: metadata.Metadata | None, i: int) -> chess.pgn.Game:
    """Validation game ``i`` of the cache, its moves decoded from their token triples, its
    headers and clocks from ``meta`` (none where the cache has no metadata columns)."""
    row = np.asarray(cache.validation[i])
    game = chess.pgn.Game({"GameId": cache.validation.ids[i].decode("ascii")})
    # BOS, a triple per ply, EOS
    plies = [tokens.decode_move(row[1 + 3 * k : 4 + 3 * k]) for k in range((len(row) - 2) // 3)]
    clock = meta.clocks(i) if meta is not None else np.zeros(0)
    game.headers.update(headers(meta, i) if meta is not None else {})
    node = game
    for k, move in enumerate(plies):
        node = node.add_variation(move)
        if k < len(clock) and clock[k] >= 0:
            node.set_clock(float(clock[k]))
    return game


def headers(meta: metadata.Metadata, i: int) -> dict[str, str]:
    """Game ``i``'s PGN tags from the metadata columns: ratings and time control where known,
    the result (``*`` where unknown)."""
    white, black, result = (int(meta[c][i]) for c in ("white_elo", "black_elo", "result"))
    base, increment = (int(meta[c][i]) for c in ("base_seconds", "increment_seconds"))
    tags = {"Result": metadata.RESULTS[result] if result >= 0 else "*"}
    if white >= 0 and black >= 0:
        tags |= {"WhiteElo": str(white), "BlackElo": str(black)}
    if base >= 0 and increment >= 0:
        tags["TimeControl"] = f"{base}+{increment}"
    return tags


def write(cache_dir: Path, path: Path, games: int = GAMES) -> int:
    """The cache's first ``games`` validation games as PGN at ``path`` (atomically); how many.

    :raises ValueError: ``cache_dir`` is not a readable token cache (one line naming it)."""
    cache = TokenCache(cache_dir)
    try:
        meta = metadata.Metadata(cache_dir / "validation", np.asarray(cache.validation.offsets))
    except (OSError, ValueError):  # a cache from before the metadata columns
        meta = None
    count = min(games, len(cache.validation))
    text = "".join(f"{game(cache, meta, i)}\n\n" for i in range(count)).encode()
    write_atomic(path, lambda fh: fh.write(text))
    return count
