"""chesslm.report.sample_games: a token cache's first validation games as PGN, read back by
python-chess: the cache's own ids, moves, result, ratings and clocks."""

from __future__ import annotations

import shutil
from pathlib import Path

import chess.pgn
import numpy as np

from chesslm.data import metadata, tokens
from chesslm.data.cache import TokenCache
from chesslm.report import sample_games


def read_back(path: Path) -> list[chess.pgn.Game]:
    games = []
    with open(path) as fh:
        while (game := chess.pgn.read_game(fh)) is not None:
            games.append(game)
    return games


def cache_moves(cache: TokenCache, i: int) -> list[chess.Move]:
    row = np.asarray(cache.validation[i])
    return [tokens.decode_move(row[1 + 3 * k : 4 + 3 * k]) for k in range((len(row) - 2) // 3)]


def test_the_first_validation_games_with_their_tags_and_clocks(
    clocked_cache: Path, tmp_path: Path
) -> None:
    assert sample_games.write(clocked_cache, tmp_path / "v.pgn", games=4) == 4
    cache = TokenCache(clocked_cache)
    meta = metadata.Metadata(clocked_cache / "validation", np.asarray(cache.validation.offsets))
    games = read_back(tmp_path / "v.pgn")
    assert len(games) == 4
    clocked = 0
    for i, game in enumerate(games):
        assert game.headers["GameId"] == cache.validation.ids[i].decode()
        assert list(game.mainline_moves()) == cache_moves(cache, i)
        result = int(meta["result"][i])
        assert game.headers["Result"] == (metadata.RESULTS[result] if result >= 0 else "*")
        base, increment = int(meta["base_seconds"][i]), int(meta["increment_seconds"][i])
        assert game.headers.get("TimeControl") == (f"{base}+{increment}" if base >= 0 else None)
        read = [node.clock() for node in game.mainline()]
        wanted = [float(c) if c >= 0 else None for c in meta.clocks(i)]
        assert read == wanted
        clocked += sum(c is not None for c in read)
    assert clocked  # the sample's first games have clocks: the check above compared some


def test_more_games_than_the_split_holds_and_a_cache_without_metadata(
    tiny_cache: Path, tmp_path: Path
) -> None:
    bare = shutil.copytree(tiny_cache, tmp_path / "bare")
    for column in bare.glob("validation.meta.*"):
        column.unlink()
    cache = TokenCache(bare)
    assert sample_games.write(bare, tmp_path / "v.pgn", games=100) == len(cache.validation)
    games = read_back(tmp_path / "v.pgn")
    assert [g.headers["GameId"] for g in games] == [i.decode() for i in cache.validation.ids]
    assert [list(g.mainline_moves()) for g in games] == [
        cache_moves(cache, i) for i in range(len(games))
    ]
    assert all(set(g.headers) - set(chess.pgn.Game().headers) == {"GameId"} for g in games)
