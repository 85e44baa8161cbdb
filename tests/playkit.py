"""What the play tests share (tests/unit/test_scorer.py, test_matching.py, test_games.py,
test_play_rule.py): the settings, the tiny ladder's, the sample's games and metadata, small
caches and evaluators; their fixtures (net, noisy, play_cache, tiny_ladder) are in conftest."""

from __future__ import annotations

import io
import json
from pathlib import Path

import chess
import chess.engine
import chess.pgn
import numpy as np
import torch
import zstandard

from chesslm.data import metadata, tokens
from chesslm.files import sha256_file, write_json_atomic
from chesslm.ladder import round_robin as ladder
from chesslm.ladder.players import AnchorSpec
from chesslm.match import matching, protocols
from chesslm.model import checkpoint
from chesslm.scorer import branched, scoring
from chesslm.scorer.settings import PlaySettings
from tests.conftest import SAMPLE, make_cache

typed = PlaySettings.from_dict  # rule play's script types the play settings so

MAX_PLIES = 24


def sample_pgn_games(n: int) -> list[chess.pgn.Game]:
    """The first ``n`` sample games with a move (the order conftest.sample_games uses)."""
    out = []
    with open(SAMPLE, "rb") as fh:
        text = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(fh), encoding="utf-8")
        while len(out) < n and (game := chess.pgn.read_game(text)) is not None:
            if next(iter(game.mainline_moves()), None) is not None:
                out.append(game)
    return out


def write_metadata(cache_dir, pgn_games: list[chess.pgn.Game], max_plies: int) -> None:
    """The validation metadata columns, from python-chess's reading of the headers and clocks
    (what the data helper's convert will write)."""

    def elo_of(text: str | None) -> int:
        return int(text) if text and text.isdigit() else -1

    cols: dict[str, list] = {name: [] for name in metadata.COLUMNS}
    for game in pgn_games:
        h = game.headers
        tc = metadata.parse_time_control(h.get("TimeControl"))
        cols["white_elo"].append(elo_of(h.get("WhiteElo")))
        cols["black_elo"].append(elo_of(h.get("BlackElo")))
        cols["base_seconds"].append(tc[0] if tc else -1)
        cols["increment_seconds"].append(tc[1] if tc else -1)
        speed = metadata.speed_class(*tc) if tc else None
        cols["speed"].append(metadata.SPEEDS.index(speed) if speed else -1)
        cols["rated"].append(-1)
        cols["result"].append(-1)
        cols["termination"].append(-1)
        cols["utc_date"].append(0)
        cols["bot"].append(0)
        nodes = list(game.mainline())[:max_plies]
        cols["clock"].extend(-1.0 if n.clock() is None else n.clock() for n in nodes)
    digests = {}
    for name, column in metadata.COLUMNS.items():
        path = metadata.column_path(cache_dir / "validation", name)
        np.save(path, np.array(cols[name], dtype=column.dtype))
        digests[path.name] = sha256_file(path)
    info = json.loads((cache_dir / "cache.json").read_text())  # listed as the cache's own
    info["sha256"] |= digests
    write_json_atomic(cache_dir / "cache.json", info)


# ----------------------------------------------------------------------- scoring vs oracle


def scorer_input(moves: list[chess.Move]) -> branched.GameInput:
    board, legal = chess.Board(), []
    for move in moves:
        legal.append(scoring.legal_codes(board))
        board.push(move)
    return branched.GameInput.from_plies(tokens.encode_moves(moves)[:-1], legal)


# --------------------------------------------------------------------- the whole evaluation

SETTINGS = {
    "enabled": True,
    "device": None,
    "datasets": [],
    "split": "validation",
    "seed": 5,
    "match": {"games": None, "seconds": 600, "chunk_games": 8, "batch_tokens": 4096,
              "attention": "split", "compile": False,
              "bootstrap": 50, "protocols": ["maia2", "all"]},
    "legality": {"games": 2, "max_plies": 8, "seconds": 60},
    "elo": {"ladder": "tiny", "games_per_anchor": 2, "seed": None, "max_plies": 16,
            "seconds": 120},
    "ratings": {"self": 1500, "opponent": 1500},
    "counterfactual": {"ratings": [1100, 1900], "seconds": 600,
                       "gaps": [-800, -400, -200, 0, 200, 400, 800], "gap_centre": 1500},
}  # fmt: skip
TINY_LADDER = ladder.LadderSettings(
    anchors=(
        AnchorSpec("random", "random"),
        AnchorSpec("greedy", "greedy"),
        AnchorSpec("stockfish-n1-r50", "stockfish", nodes=1, random_share=0.5),
        AnchorSpec("stockfish-elo1350", "stockfish_elo", nodes=200, elo=1350),
    ),
    games_per_pair=2,
    max_plies=40,
)


def run_dir_for(tmp_path, net, conditioning: str | None = None):
    run_dir = tmp_path / "run"
    (run_dir / "train").mkdir(parents=True)
    identity = {"model": {"preset": "tiny"}}
    if conditioning is not None:
        identity["conditioning"] = conditioning
    payload = {
        "model": net.state_dict(),
        "cursor": {"step": 7, "epoch": 0, "next_group": 0},
        "identity": identity,
        "metrics": {"best_nll": 4.2},
    }
    checkpoint.save(run_dir / "train" / "best.pt", payload)
    return run_dir


def small_cache(tmp_path: Path, legality_games: int | None = 7) -> Path:
    """20 validation games, the legal-move tables of the first ``legality_games`` stored
    (None: all of them)."""
    return make_cache(tmp_path / f"small-{legality_games}", n_train=2, n_val=20,
                      max_plies=MAX_PLIES, legality_games=legality_games)  # fmt: skip


def cpu_evaluator(net, cache_dir: Path, state: Path, **kw) -> matching.Evaluator:
    """Move-matching of ``cache_dir`` on the CPU, batches of 4,096 tokens (``kw``: games,
    chunk_games, threads, window; every game in chunks of 8 by default)."""
    return matching.Evaluator(net, cache_dir, state, batch_tokens=4096,
                              device=torch.device("cpu"),
                              **{"games": None, "chunk_games": 8, **kw})  # fmt: skip


def assert_same_positions(one: dict, other: dict) -> None:
    """Two evaluations' positions, in (game, ply) order: the same positions and ranks, the
    same NLL up to rounding (batches of other games)."""
    one, other = ({k: v[np.lexsort((p["ply"], p["game"]))] for k, v in p.items()}
                  for p in (one, other))  # fmt: skip
    for key in ("game", "ply", "rank", "n_legal"):
        assert np.array_equal(one[key], other[key]), key
    assert np.allclose(one["nll"], other["nll"], atol=1e-5)


def validation_plies(cache_dir):
    from chesslm.data.cache import TokenCache

    val = TokenCache(cache_dir).validation
    return [range((len(val[i]) - 2) // 3) for i in range(len(val))]


def random_positions(n_games: int, per: int, *, seed: int) -> dict[str, np.ndarray]:
    """``per`` positions of each of ``n_games`` games, random ranks and NLLs, 20 legal moves."""
    rng = np.random.default_rng(seed)
    return {
        "game": np.repeat(np.arange(n_games), per),
        "ply": np.tile(np.arange(per), n_games).astype(np.int16),
        "rank": rng.integers(0, 5, n_games * per),
        "nll": rng.random(n_games * per).astype(np.float32),
        "n_legal": np.full(n_games * per, 20),
    }


def positions_with_a_lone_game(n_rated: int = 12, per: int = 20):
    """``n_rated`` games between 1500 players and one game between 2000 players."""
    n = n_rated + 1
    pos = random_positions(n, per, seed=3)
    elo_of = np.array([1500] * n_rated + [2000])
    meta = {
        "white_elo": elo_of, "black_elo": elo_of, "speed": np.full(n, 2),
        "base_seconds": np.full(n, 180), "clock": np.full(n * per, 100.0),
        "ply_offsets": np.arange(n + 1) * per,
    }  # fmt: skip
    return matching.tables(pos, meta, protocols.chosen(["maia2", "all"]), replicates=200, seed=0)


def promotion_aside(games: list[chess.pgn.Game]) -> tuple[int, list[chess.Move]]:
    """The first ply of ``games`` where a pawn may promote but another piece moves: its
    promoting pairs' source is a branch token."""
    for game in games:
        board, moves = game.board(), list(game.mainline_moves())
        for ply, move in enumerate(moves):
            sources = {m.from_square for m in board.legal_moves if m.promotion}
            if sources and move.from_square not in sources:
                return ply, moves
            board.push(move)
    raise AssertionError("no sample game promotes aside")
