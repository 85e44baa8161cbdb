"""chesslm-analyse (chesslm/engine/analyse.py): a PGN scored move by move, checked against the
plain causal loop (``chesslm.scorer.oracle``) and read back by python-chess; rule analyse, the
same of the staged run's validation split through real snakemake."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import shlex
import sys
from pathlib import Path

import chess
import chess.pgn
import numpy as np
import pytest

from chesslm.data import gamearrays, tokens
from chesslm.data.cache import TokenCache
from tests import forked
from tests.conftest import StagedRun
from tests.helpers import ROOT, first_games_pgn, model_checkpoint, snakemake

ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
FEN_GAME = '[Event "x"]\n[SetUp "1"]\n[FEN "8/8/8/4k3/8/8/3QK3/8 w - - 0 1"]\n\n1. Qd3 *\n'
VARIANT_GAME = '[Event "y"]\n[Variant "Atomic"]\n\n1. e4 e5 *\n'


@pytest.fixture(scope="module")
def analysed(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("analyse")
    ckpt = model_checkpoint(tmp / "best.pt", spread=0.3)
    games = tmp / "games.pgn"
    # the sample's first 50 games, with a FEN start and a variant among them
    pgn = first_games_pgn(50).split("\n\n[Event ")
    games.write_text("\n\n[Event ".join(pgn[:2]) + "\n\n" + FEN_GAME + "\n" + VARIANT_GAME
                     + "\n[Event " + "\n\n[Event ".join(pgn[2:]))  # fmt: skip
    out = tmp / "moves.csv"
    command = [sys.executable, "-m", "chesslm.engine.analyse", str(games), "--checkpoint",
               str(ckpt), "--csv", str(out), "--pgn", str(tmp / "annotated.pgn")]  # fmt: skip
    done = forked.run("python", command[1:], cwd=ROOT, env=ENV, timeout=600)
    assert done.returncode == 0, done.stderr
    return {"dir": tmp, "ckpt": ckpt, "games": games, "stderr": done.stderr,
            "rows": list(csv.DictReader(open(out))),
            "per_game": list(csv.DictReader(open(tmp / "moves.games.csv")))}  # fmt: skip


def test_every_move_of_every_standard_game_is_scored_and_the_rest_named(analysed: dict) -> None:
    lines = analysed["stderr"].strip().splitlines()
    assert "game 3: starts from a FEN" in lines[0] and "game 4: is a Atomic game" in lines[1]
    assert "50 games" in lines[-1] and "2 skipped" in lines[-1], lines
    games = {int(row["game"]) for row in analysed["rows"]}
    assert games == set(range(1, 53)) - {3, 4}
    assert len(analysed["per_game"]) == 50
    for row in analysed["rows"]:
        assert 1 <= int(row["rank"]) <= int(row["legal_moves"])
        top = [float(row[f"p{k}"]) for k in (1, 2, 3) if row[f"p{k}"]]  # fewer: fewer moves
        assert top == sorted(top, reverse=True) and len(top) == min(3, int(row["legal_moves"]))
        assert float(row["p"]) <= top[0]
        if int(row["rank"]) == 1:
            assert row["p"] == row["p1"]


def assert_the_plain_loops(net: object, moves: list[chess.Move], rows: list[dict]) -> None:
    """Each row, a ply of ``moves`` from the start, holds the played move with the
    log-probability, probability and rank of the plain causal loop (``chesslm.scorer.oracle``)."""
    from chesslm.scorer.oracle import oracle_scores

    oracle = oracle_scores(net, moves)
    for ply, (move, row) in enumerate(zip(moves, rows, strict=True)):
        assert row["move"] == move.uci()
        assert float(row["logp"]) == pytest.approx(oracle[ply][move], abs=1e-5)
        assert float(row["p"]) == pytest.approx(math.exp(oracle[ply][move]), rel=1e-4)
        better = sum(lp > oracle[ply][move] for lp in oracle[ply].values())
        assert int(row["rank"]) == better + 1


def test_played_move_probabilities_are_the_plain_loops(analysed: dict) -> None:
    from chesslm.model import weights

    net = weights.load_model(str(analysed["ckpt"]), "cpu")
    stream = io.StringIO(analysed["games"].read_text())
    game = chess.pgn.read_game(stream)  # game 1
    moves = list(game.mainline_moves())[:12]
    assert_the_plain_loops(net, moves, [row for row in analysed["rows"] if row["game"] == "1"][:12])
    white = [float(r["logp"]) for r in analysed["rows"] if r["game"] == "1"][::2]
    first = analysed["per_game"][0]
    assert float(first["white_mean_logp"]) == pytest.approx(sum(white) / len(white), abs=1e-4)


def test_the_annotated_pgn_reads_back_with_a_comment_on_every_move(analysed: dict) -> None:
    with open(analysed["dir"] / "annotated.pgn") as fh:
        games = list(iter(lambda: chess.pgn.read_game(fh), None))
    assert len(games) == 50
    nodes = list(games[0].mainline())
    rows = [row for row in analysed["rows"] if row["game"] == "1"]
    assert len(nodes) == len(rows)
    assert nodes[0].comment.startswith(f"p={float(rows[0]['p']):.2f} rank={rows[0]['rank']} top:")


def test_without_the_head_the_columns_and_comments_are_todays(analysed: dict) -> None:
    from chesslm.engine import analyse

    assert list(analysed["rows"][0]) == list(analyse.MOVE_FIELDS)
    assert "win=" not in (analysed["dir"] / "annotated.pgn").read_text()


def test_the_heads_chances_before_each_move_are_a_plain_forwards(tmp_path: Path) -> None:
    """An ``elo`` checkpoint with the outcome head: each move's row holds the mover's win, draw
    and loss before it, the model's own outcome softmax on the game's prefix, BOS and moves at
    that position; the annotated PGN says them; batched by tokens or not, the same."""
    import torch

    from chesslm.data import conditioning, metadata
    from chesslm.engine import analyse
    from chesslm.model import weights

    ckpt = model_checkpoint(tmp_path / "best.pt", spread=0.3, conditioning="elo", outcome=True)
    (tmp_path / "games.pgn").write_text(first_games_pgn(6))
    command = [sys.executable, "-m", "chesslm.engine.analyse", str(tmp_path / "games.pgn"),
               "--checkpoint", str(ckpt), "--csv", str(tmp_path / "m.csv"), "--pgn",
               str(tmp_path / "a.pgn")]  # fmt: skip
    done = forked.run("python", command[1:], cwd=ROOT, env=ENV, timeout=600)
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(open(tmp_path / "m.csv")))
    assert list(rows[0]) == [*analyse.MOVE_FIELDS, *analyse.OUTCOME_FIELDS]
    net = weights.load_model(str(ckpt), "cpu")
    with open(tmp_path / "games.pgn") as fh:
        games = list(iter(lambda: chess.pgn.read_game(fh), None))
    with open(tmp_path / "a.pgn") as fh:
        annotated = list(iter(lambda: chess.pgn.read_game(fh), None))
    assert len(games) == len(annotated) == 6
    for number, (game, notes) in enumerate(zip(games, annotated, strict=True), 1):
        moves = list(game.mainline_moves())
        tags = game.headers
        prefix = conditioning.prefix(metadata.elo(tags.get("WhiteElo")),
                                     metadata.elo(tags.get("BlackElo")))  # fmt: skip
        x = torch.tensor([prefix + tokens.encode_moves(moves)[:-1]])
        with torch.no_grad():
            want = net(x, outcome=True)[1][0, 2::3].softmax(-1)[: len(moves)].tolist()
        mine = [r for r in rows if r["game"] == str(number)]
        assert len(mine) == len(moves) == len(want)
        for row, chances, node in zip(mine, want, notes.mainline(), strict=True):
            got = [float(row[name]) for name in analyse.OUTCOME_FIELDS]
            assert got == pytest.approx(chances, abs=1e-5), (number, row["ply"])
            assert node.comment.endswith(" win={:.2f} draw={:.2f} loss={:.2f}".format(*got)), (
                node.comment
            )
    assert len({r["win_probability"] for r in rows}) > len(rows) // 2  # positions differ


def test_a_missing_file_and_a_bad_ratings_value_are_one_line(tmp_path: Path) -> None:
    base = ["-m", "chesslm.engine.analyse", "--checkpoint", "x.pt", "--csv", "o.csv"]
    done = forked.run("python", [*base, str(tmp_path / "none.pgn")], cwd=tmp_path, env=ENV)
    assert done.returncode == 1 and "none.pgn: no such file" in done.stderr
    done = forked.run("python", [*base, "g.pgn", "--ratings", "high"], cwd=tmp_path, env=ENV)
    assert done.returncode == 2 and "--ratings must be" in done.stderr
    assert not (tmp_path / "o.csv").exists()


ANALYSIS = "results/mini/analysis/mini.csv"
STAGED = ("--configfile", "train-workflow.yaml", "--cores", "2")


def play_scores(net: object, cache: TokenCache, state: Path) -> dict[tuple[str, int], tuple]:
    """(game id, 1-based ply) -> (NLL, 0-based rank, legal moves) of every validation position,
    by the play evaluation's move-matching (``matching.Evaluator``)."""
    import torch

    from chesslm.match import matching

    evaluator = matching.Evaluator(net, cache.directory, state, games=None, chunk_games=64,
                                   batch_tokens=8192, device=torch.device("cpu"))  # fmt: skip
    pos = evaluator.evaluate_games(evaluator.selected)
    ids = [i.decode() for i in cache.validation.ids]
    columns = zip(pos["game"], pos["ply"], pos["nll"], pos["rank"], pos["n_legal"], strict=True)
    return {(ids[g], int(ply) + 1): (nll, rank, n) for g, ply, nll, rank, n in columns}


@pytest.mark.slow
def test_rule_analyse_scores_every_validation_move_as_play_does(
    staged_run: StagedRun, tmp_path: Path
) -> None:
    from chesslm.model import weights

    wf = staged_run.copy(tmp_path / "wf")
    # best.pt and the token cache are there: no other rule may run
    done = snakemake(wf, ANALYSIS, *STAGED, "--allowed-rules", "analyse")
    assert "(Rule: analyse)" in done.stderr and "1 of 1 steps (100%) done" in done.stderr
    rows = list(csv.DictReader(open(wf / ANALYSIS)))
    per_game = list(csv.DictReader(open(wf / "results/mini/analysis/mini.games.csv")))
    data = wf / "results/datasets/mini"
    cache = TokenCache(data / "token-cache")
    ids = [i.decode() for i in cache.validation.ids]
    plies = (np.asarray(cache.validation.lengths) - 2) // 3
    assert len(rows) == plies.sum() and [g["game"] for g in per_game] == ids
    assert {row["game"] for row in rows} == set(ids)
    manifest = json.loads((data / "manifest.json").read_text())
    for split in ("train", "test"):
        others = {i.decode() for p in manifest["shards"][split]
                  for i in gamearrays.Games(data / p).ids}  # fmt: skip
        assert others and not others & set(ids), split
    # the play evaluation's scorer on the same positions: every one
    net = weights.load_model(str(wf / "results/mini/train/best.pt"), "cpu")
    played = play_scores(net, cache, tmp_path / "state")
    assert len(played) == len(rows)
    for row in rows:
        nll, rank, n_legal = played[row["game"], int(row["ply"])]
        assert float(row["logp"]) == pytest.approx(-nll, abs=1e-4)
        assert (int(row["rank"]), int(row["legal_moves"])) == (rank + 1, n_legal)
    first = np.asarray(cache.validation[0])
    moves = [tokens.decode_move(first[1 + 3 * k : 4 + 3 * k]) for k in range(min(plies[0], 10))]
    assert_the_plain_loops(net, moves, [row for row in rows if row["game"] == ids[0]][:10])
    assert "moves analysed; 0 skipped" in (wf / "logs/mini/analyse/mini.log").read_text()
    again = snakemake(wf, ANALYSIS, *STAGED)
    assert "Nothing to be done" in again.stdout + again.stderr


@pytest.mark.slow
def test_the_summarys_analyse_command_runs_as_printed(
    staged_run: StagedRun, tmp_path: Path
) -> None:
    """summary.md's analyse command, word for word, in the run's folder: it reads the run's
    own validation games (rule summarise wrote them from the token cache, which holds no test
    split: every id is a validation id) and scores every move of each."""
    wf = staged_run.copy(tmp_path / "wf")
    text = (wf / "results/mini/report/summary.md").read_text()
    (line,) = [x for x in text.splitlines() if x.startswith("- Analyse games move by move: ")]
    words = shlex.split(re.search(r"`(chesslm-analyse [^`]*)`", line).group(1))
    done = forked.run("python", ["-m", "chesslm.engine.analyse", *words[1:]], cwd=wf, env=ENV)
    assert done.returncode == 0, f"{line}\n{done.stderr}"
    (games,) = [w for w in words if w.endswith(".pgn")]
    assert games == "results/mini/report/validation-games.pgn", line
    data = wf / "results/datasets/mini"
    cache = TokenCache(data / "token-cache")
    ids = [i.decode() for i in cache.validation.ids][:16]
    per_game = list(csv.DictReader(open(wf / "analysis.games.csv")))
    assert len(per_game) == len(ids) and "validation games" in line
    rows = list(csv.DictReader(open(wf / words[words.index("--csv") + 1])))
    plies = (np.asarray(cache.validation.lengths[: len(ids)]) - 2) // 3
    assert len(rows) == plies.sum() and {r["game"] for r in rows} == {str(n + 1) for n in range(16)}
    read = chess.pgn.read_game(open(wf / games))
    assert read.headers["GameId"] == ids[0] and read.headers["Result"] in ("1-0", "0-1", "1/2-1/2")
    first = np.asarray(cache.validation[0])
    moves = [tokens.decode_move(first[1 + 3 * k : 4 + 3 * k]) for k in range(plies[0])]
    assert list(read.mainline_moves()) == moves
    manifest = json.loads((data / "manifest.json").read_text())
    shards = [gamearrays.Games(data / p) for p in manifest["shards"]["test"]]
    test_ids = {i.decode() for shard in shards for i in shard.ids}
    assert test_ids and not test_ids & set(ids)
