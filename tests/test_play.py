"""Play evaluation: the batched move scoring against the one-pass-per-move oracle on real games,
free-running legality judged by python-chess, real games against a small Elo ladder's anchors
(the fit itself: tests/test_ladder.py), and the evaluation's files, resume and summary
section."""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import math
import re
import shutil
import threading
import time
from pathlib import Path

import chess
import chess.engine
import chess.pgn
import numpy as np
import pandas as pd
import pytest
import torch
import zstandard

from chesslm import files, seal
from chesslm.data import conditioning, metadata, tokens
from chesslm.data.cache import check_validation_only
from chesslm.export import card
from chesslm.ladder import elo, games
from chesslm.ladder import players as anchors
from chesslm.ladder import round_robin as ladder
from chesslm.ladder.players import AnchorSpec
from chesslm.match import matching, protocols
from chesslm.model import checkpoint, gpt, weights
from chesslm.play import elo_games, evaluate, outputs, plots, records, workstate
from chesslm.play.settings import PlaySettings
from chesslm.progress import Progress
from chesslm.report.play_section import markdown_section
from chesslm.scorer import branched, prepare, scoring, split
from chesslm.scorer.oracle import oracle_scores
from chesslm.scorer.threads import use_threads
from tests.conftest import SAMPLE, make_cache

typed = PlaySettings.from_dict  # rule play's script types the play settings so

MAX_PLIES = 24


@pytest.fixture(scope="module")
def net() -> gpt.GPT:
    torch.manual_seed(0)
    return gpt.build("tiny").eval()


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
    for name, column in metadata.COLUMNS.items():
        array = np.array(cols[name], dtype=column.dtype)
        np.save(metadata.column_path(cache_dir / "validation", name), array)


@pytest.fixture(scope="module")
def play_cache(tmp_path_factory):
    """A token cache of 6 train and 20 validation sample games (24 plies), with metadata."""
    directory = tmp_path_factory.mktemp("play-cache")
    cache_dir = make_cache(directory, n_train=6, n_val=20, max_plies=MAX_PLIES)
    write_metadata(cache_dir, sample_pgn_games(26)[6:], MAX_PLIES)
    return cache_dir


# ----------------------------------------------------------------------- scoring vs oracle


def _input(moves: list[chess.Move]) -> branched.GameInput:
    board, legal = chess.Board(), []
    for move in moves:
        legal.append(scoring.legal_codes(board))
        board.push(move)
    return branched.GameInput.from_plies(tokens.encode_moves(moves)[:-1], legal)


def _promotion_aside(games: list[chess.pgn.Game]) -> tuple[int, list[chess.Move]]:
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


@pytest.mark.parametrize("attention", ["split", "dense"])
def test_batched_scores_equal_the_one_pass_per_move_oracle(net, attention):
    """Real sample games, in one batch of different lengths, including promotions (a promoting
    pawn's four moves are scored through branch destinations, an unplayed one too), under the
    two-part attention (the default) and the dense mask."""
    pgn = sample_pgn_games(400)
    # the sample game with the earliest promotion keeps the oracle's passes short
    promo_ply, promo_moves = min(
        (
            (next(i for i, m in enumerate(moves) if m.promotion), moves)
            for moves in (list(g.mainline_moves()) for g in pgn)
            if any(m.promotion for m in moves)
        ),
        key=lambda pair: pair[0],
    )
    aside_ply, aside_moves = _promotion_aside(pgn)
    checked = {
        0: (list(pgn[0].mainline_moves())[:14], None),
        1: (list(pgn[1].mainline_moves())[:9], None),
        2: (promo_moves[: promo_ply + 1], {5, promo_ply}),
        3: (aside_moves[: aside_ply + 1], {aside_ply}),
    }
    batch = branched.build_batch([_input(m) for m, _ in checked.values()], "cpu")
    assert batch.width == 1 + 3 * max(len(m) for m, _ in checked.values())
    # a promoting pair's source on the main line and one among the branches (split's two cases)
    assert ((batch.extra >= 0) & (batch.extra < batch.width)).any()
    assert (batch.extra >= batch.width).any()
    result = scoring.score(net, batch, attention=attention)
    seen_promotion_branch = False
    for b, (moves, plies) in checked.items():
        oracle = oracle_scores(net, moves, plies)
        rows = np.nonzero(batch.ply_game == b)[0]
        assert len(rows) == len(moves)
        for ply, per_move in oracle.items():
            p = rows[ply]
            idx = np.nonzero(batch.move_ply == p)[0]
            mine = {
                scoring.decode_code(c): float(result.move_logp[i])
                for i, c in zip(idx, _input(moves).legal(ply), strict=True)
            }
            assert mine.keys() == per_move.keys()
            for move, lp in per_move.items():
                assert mine[move] == pytest.approx(lp, abs=1e-5), (b, ply, move)
            assert math.fsum(math.exp(v) for v in mine.values()) == pytest.approx(1, abs=1e-5)
            played = moves[ply]
            assert float(result.played_logp[p]) == pytest.approx(per_move[played], abs=1e-5)
            better = sum(v > per_move[played] + 1e-6 for v in per_move.values())
            assert int(result.rank[p]) == better
            seen_promotion_branch |= sum(m.promotion is not None for m in per_move) > 1
    assert seen_promotion_branch


def test_compiled_two_part_attention_scores_as_eager(net):
    """``match.compile`` compiles the two-part layer (one function for every block): batches
    of other shapes share a graph, one for batches with a promoting pair whose source is a
    branch token (however many) and one for those without (a batch of one game has its own),
    and score as the eager layer does."""
    pgn = sample_pgn_games(40)
    aside_ply, aside_moves = _promotion_aside(pgn)
    inputs = [_input(aside_moves[: aside_ply + 1])]
    inputs += [_input(list(g.mainline_moves())[:n]) for g, n in zip(pgn[:5], (9, 30, 17, 4, 25),
               strict=True)]  # fmt: skip
    torch.manual_seed(0)
    compiled = gpt.build("tiny").eval()
    compiled.load_state_dict(net.state_dict())
    scoring.compile_layers(compiled)
    counters = torch._dynamo.utils.counters
    frames, breaks = counters["frames"]["ok"], sum(counters["graph_break"].values())
    for group, graphs in (([0, 1], 1), ([2, 3, 4], 2), ([1, 4], 2), ([5], 3)):
        batch = branched.build_batch([inputs[i] for i in group], "cpu")
        eager, mine = scoring.score(net, batch, attention="split"), scoring.score(
            compiled, batch, attention="split")  # fmt: skip
        assert torch.allclose(eager.move_logp, mine.move_logp, atol=1e-5), group
        assert torch.equal(eager.rank, mine.rank)
        assert counters["frames"]["ok"] - frames == graphs, group
    assert sum(counters["graph_break"].values()) == breaks  # compiled whole
    assert net not in split._COMPILED  # the eager model stays eager


@pytest.fixture(scope="module")
def noisy() -> gpt.GPT:
    """A tiny model whose rating tokens' embeddings differ visibly (random init, spread)."""
    torch.manual_seed(1)
    net = gpt.build("tiny").eval()
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return net


def _scores_by_move(batch, result, b: int, game: branched.GameInput) -> dict[int, dict]:
    rows = np.nonzero(batch.ply_game == b)[0]
    out = {}
    for ply, p in enumerate(rows):
        idx = np.nonzero(batch.move_ply == p)[0]
        out[ply] = {scoring.decode_code(c): float(result.move_logp[i])
                    for i, c in zip(idx, game.legal(ply), strict=True)}  # fmt: skip
    return out


def test_a_rating_prefix_is_seen_by_every_branch_as_in_a_plain_pass(noisy):
    """Games behind different rating prefixes (and one without), in one batch: every legal
    move's score equals the oracle's plain causal pass over prefix + BOS + moves, and the
    prefix changes the scores (so a scorer that dropped it would fail)."""
    pgn = sample_pgn_games(3)
    lines = [list(pgn[0].mainline_moves())[:10], list(pgn[1].mainline_moves())[:7],
             list(pgn[0].mainline_moves())[:10]]  # fmt: skip
    leads = [conditioning.prefix(1100, 1900), [], conditioning.prefix(2400, -1)]
    inputs = [dataclasses.replace(_input(m), prefix=np.array(lead, dtype=np.int64))
              for m, lead in zip(lines, leads, strict=True)]  # fmt: skip
    batch = branched.build_batch(inputs, "cpu")
    result = scoring.score(noisy, batch)
    assert batch.idx[0, :3].tolist() == [*leads[0], tokens.BOS]
    mine = [_scores_by_move(batch, result, b, g) for b, g in enumerate(inputs)]
    for b, (moves, lead) in enumerate(zip(lines, leads, strict=True)):
        oracle = oracle_scores(noisy, moves, {0, 3, len(moves) - 1}, lead=lead)
        for ply, per_move in oracle.items():
            assert mine[b][ply].keys() == per_move.keys()
            for move, lp in per_move.items():
                assert mine[b][ply][move] == pytest.approx(lp, abs=1e-5), (b, ply, move)
    # the same game behind two prefixes: its scores differ
    gap = max(abs(mine[0][p][m] - mine[2][p][m]) for p in mine[0] for m in mine[0][p])
    assert gap > 1e-3


def test_an_empty_prefix_builds_the_rows_of_a_game_without_one():
    moves = [chess.Move.from_uci(u) for u in ("e2e4", "e7e5", "g1f3", "b8c6")]
    plain = branched.prepare([_input(moves)])
    lead = dataclasses.replace(_input(moves), prefix=np.array(conditioning.prefix(1500, 1500)))
    shifted = branched.prepare([lead])
    n = plain.shape[1]
    assert shifted.shape[1] == n + 2
    view = {k: plain.packed[a : a + m] for k, (a, m) in plain.layout.items()}
    other = {k: shifted.packed[a : a + m] for k, (a, m) in shifted.layout.items()}
    assert torch.equal(other["idx"][2:], view["idx"])  # the same rows, two tokens later
    assert torch.equal(other["pos"][2:], view["pos"] + 2)
    assert torch.equal(other["prefix"][2:], view["prefix"] + 2)
    assert np.array_equal(shifted.before_rows, plain.before_rows + 2)


def test_branch_tokens_sit_at_their_prefix_position_and_see_only_it():
    moves = [chess.Move.from_uci(u) for u in ("e2e4", "e7e5", "g1f3")]
    batch = branched.build_batch([_input(moves)], "cpu")
    mask = scoring.dense_mask(batch.prefix, batch.extra)[0, 0]
    main = 1 + 3 * len(moves)
    for row in range(main, batch.idx.size(1)):
        pos = int(batch.pos[0, row])
        assert pos % 3 == 1  # no promotions: only source branches
        seen = torch.nonzero(mask[row]).flatten().tolist()
        assert seen == list(range(pos)) + [row]
    assert torch.equal(mask[:main, :main], torch.ones(main, main, dtype=torch.bool).tril())


def test_pipelined_batches_and_padded_rows_score_like_one_batch(net):
    """score_many (a prepare thread, several batches, rows padded to 64 tokens) yields, batch
    by batch, the same per-ply results as one unpadded batch of every game."""
    inputs = [_input(list(g.mainline_moves())[:n]) for g, n in zip(sample_pgn_games(5),
              (30, 7, 22, 15, 40), strict=True)]  # fmt: skip
    lengths = branched.branched_lengths(inputs)
    assert lengths.tolist() == [branched.branched_length(g) for g in inputs]
    whole = branched.build_batch(inputs, "cpu")
    assert whole.idx.size(1) <= lengths.max()
    ref = scoring.score(net, whole)
    batches = list(scoring.score_many(net, inputs, batch_tokens=int(lengths.max()) * 2,
                                      device="cpu", pad_to=64))  # fmt: skip
    assert len(batches) > 1 and sorted(sum((g for g, _, _ in batches), [])) == list(range(5))
    for group, batch, host in batches:
        assert batch.idx.size(1) % 64 == 0
        for p, (b, ply) in enumerate(zip(batch.ply_game, batch.ply_number, strict=True)):
            q = np.nonzero((whole.ply_game == group[b]) & (whole.ply_number == ply))[0][0]
            assert host["rank"][p] == int(ref.rank[q])
            assert host["n_legal"][p] == int(ref.n_legal[q])
            assert host["played_logp"][p] == pytest.approx(float(ref.played_logp[q]), abs=1e-5)


def test_chunks_scored_in_one_pipeline_equal_each_chunk_alone(net):
    """score_chunks (several chunks, one pipeline, an empty chunk among them) yields each
    chunk's batches in order, its last batch marked, with score_many's results per chunk."""
    inputs = [_input(list(g.mainline_moves())[:n]) for g, n in zip(sample_pgn_games(5),
              (30, 7, 22, 15, 40), strict=True)]  # fmt: skip
    chunks = [inputs[:2], [], inputs[2:]]
    tokens = int(branched.branched_lengths(inputs).max()) * 2
    got = list(scoring.score_chunks(net, iter(chunks), batch_tokens=tokens, device="cpu"))
    assert [s.chunk for s in got] == sorted(s.chunk for s in got) and {s.chunk for s in got} == {
        0,
        2,
    }
    for c in (0, 2):
        mine = [s for s in got if s.chunk == c]
        assert [s.last for s in mine] == [False] * (len(mine) - 1) + [True]
        alone = list(scoring.score_many(net, chunks[c], batch_tokens=tokens, device="cpu"))
        assert [s.group for s in mine] == [g for g, _, _ in alone]
        for s, (_, _, host) in zip(mine, alone, strict=True):
            assert np.array_equal(s.host["rank"], host["rank"])
            assert np.array_equal(s.host["played_logp"], host["played_logp"])


# ---------------------------------------------------------------- legality and engine games


def test_self_play_legality_is_judged_by_python_chess(net):
    result = games.self_play(
        net, games=3, max_plies=12, temperature=1.0, seed=3, deadline=time.monotonic() + 120
    )
    assert result["games"] == 3 and result["complete"]
    assert result["proposals"] == sum(b["proposals"] for b in result["buckets"]) == 36
    assert result["illegal"] == sum(b["illegal"] for b in result["buckets"])
    assert result["illegal"] > 0  # an untrained model proposes illegal moves
    greedy = games.self_play(
        net, games=3, max_plies=5, temperature=0.0, seed=3, deadline=time.monotonic() + 120
    )
    assert greedy["games"] == 1 and greedy["games_asked"] == 3


def test_a_conditioned_player_moves_behind_its_ratings_from_the_side_it_moves(noisy):
    """ModelPlayer's ``elo`` is (its own, its opponent's): playing Black, the prefix is
    (opponent, own); its move is the oracle's argmax behind that prefix."""
    import copy

    net = copy.deepcopy(noisy)
    net.config = dataclasses.replace(net.config, conditioning="elo")  # the same weights
    board = chess.Board()
    board.push_uci("e2e4")
    assert games.mover_prefix(net, board, 2000, 1000) == conditioning.prefix(1000, 2000)
    assert games.mover_prefix(noisy, board, 2000, 1000) == []  # no conditioning: no prefix
    move = anchors.ModelPlayer(net, elo=(2000, 1000)).move(board)
    probe = [*board.move_stack, move]
    for lead in (conditioning.prefix(1000, 2000), conditioning.prefix(2000, 1000)):
        scores = oracle_scores(net, probe, {1}, lead=lead)[1]
        if lead == conditioning.prefix(1000, 2000):
            assert move == max(scores, key=scores.get)
            mine = scores
    assert any(abs(mine[m] - scores[m]) > 1e-4 for m in scores)  # the prefix matters


def test_judge_refuses_illegal_and_malformed_triples():
    board = chess.Board()
    assert games._judge(board, (12, 28, tokens.PROMO_NONE)) == chess.Move.from_uci("e2e4")
    assert games._judge(board, (12, 36, tokens.PROMO_NONE)) is None  # e2e5
    assert games._judge(board, (12, 12, tokens.PROMO_NONE)) is None
    assert games._judge(board, (12, 20, tokens.PROMO_NONE + 4)) is None  # e2e3=Q


def test_missing_engine_is_one_clear_line():
    with pytest.raises(FileNotFoundError, match="ladders.NAME.engine: 'no-such-engine'"):
        anchors.find_engine("no-such-engine")


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


@pytest.fixture(scope="module")
def tiny_ladder(tmp_path_factory) -> Path:
    """A real ladder file: four anchors, 2 games a pair (with the prior: finite ratings)."""
    path = tmp_path_factory.mktemp("ladder") / "ladder.json"
    ladder.write_ladder(path, ladder.build_ladder(TINY_LADDER, anchors.find_engine("stockfish")))
    return path


def _run_dir(tmp_path, net, conditioning: str | None = None):
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


def test_evaluation_writes_tables_figures_and_section_and_keeps_no_state(
    tmp_path, net, play_cache, caplog, tiny_ladder
):
    run_dir = _run_dir(tmp_path, net)
    with caplog.at_level(logging.INFO, logger="chesslm.play"):
        out = evaluate.run(run_dir, typed(SETTINGS), {"sample": play_cache}, device="cpu",
                           progress_every=0, ladder=tiny_ladder)  # fmt: skip
    assert all(p.exists() for p in out.values())
    match = json.loads(out["move_match"].read_text())
    d = match["datasets"]["sample"]
    assert d["complete"] and d["games_evaluated"] == 20 and d["metadata"] == "present"
    assert d["positions"] == sum(len(g) for g in _validation_plies(play_cache))
    table = pd.read_csv(out["move_match_table"])
    for protocol in ("maia2", "all"):
        part = table[table["protocol"] == protocol]
        overall = part[part["grouping"] == "overall"].iloc[0]
        for grouping in ("elo_bin", "band", "speed"):
            assert part[part["grouping"] == grouping]["positions"].sum() == overall["positions"]
        assert overall["top1_low"] <= overall["top1"] <= overall["top1_high"]
        assert overall["top1"] <= overall["top3"]
    maia = table[(table["protocol"] == "maia2") & (table["grouping"] == "overall")].iloc[0]
    assert maia["positions"] == d["protocol_positions"]["maia2"] < d["positions"]
    assert d["protocol_positions"]["all"] == d["positions"]
    assert set(table[table["grouping"] == "speed"]["group"]) <= set(metadata.SPEEDS)
    legality = json.loads(out["legality"].read_text())
    assert set(legality["modes"]) == {"greedy", "temperature_1"}
    result = json.loads(out["elo"].read_text())
    assert [a["games"] for a in result["anchors"]] == [2, 2, 2, 2]
    stored = ladder.read_ladder(tiny_ladder)
    assert result["ladder"]["file"] == str(tiny_ladder) and result["ladder"]["key"] == stored["key"]
    assert [a["rating"] for a in result["anchors"]] == [
        stored["ratings"][a.name]["elo"] for a in TINY_LADDER.anchors
    ]
    fit = result["fit"]  # draws at 16 plies: a score strictly between 0 and 1, so finite
    assert all(math.isfinite(fit[k]) for k in ("elo", "low", "high", "low_total", "high_total"))
    assert fit["low"] < fit["elo"] < fit["high"] and fit["bound"] is None
    assert "not a human" in result["note"]
    assert result["reproducible"] is False and "seed" in result["reproducibility"]
    assert result["random_anchors"] == ["stockfish-elo1350"]
    games_csv = pd.read_csv(out["elo_games"])
    assert len(games_csv) == 8 and set(games_csv["anchor"]) == {a.name for a in TINY_LADDER.anchors}
    section = markdown_section(run_dir / "play")
    for heading in ("## Play evaluation", "### Move-matching", "### Free-running legality",
                    "### Elo against Stockfish", "maia2", "1400-2000",
                    "**Not reproducible** in part: Stockfish", f"**{fit['elo']:.0f}**",
                    "| stockfish-elo1350 | stockfish_elo | 1350 (fixed: UCI_Elo) |",
                    stored["key"][:12]):  # fmt: skip
        assert heading in section, heading
    _card_and_report_agree(run_dir / "play", out, stored)
    # progress: every update logged (interval 0), the last with the whole count
    lines = [r.getMessage() for r in caplog.records if r.name == "chesslm.play"]
    total = d["positions"]
    assert f"move-matching sample: 0/{total} positions (0%)" in lines
    assert f"move-matching sample: {total}/{total} positions (100%)" in lines
    partial = [x for x in lines if re.fullmatch(rf"move-matching sample: \d+/{total} .*", x)]
    assert len(partial) > 3  # one per batch, not just start and end
    assert "free-running legality temperature_1: 2/2 games finished (100%); ply 8 of 8" in lines
    assert "free-running legality greedy: 1/1 games finished (100%); complete" in lines
    assert "games against the ladder's anchors: 8/8 games (100%); complete" in lines

    # a finished evaluation keeps no work in progress: a rerun measures afresh
    assert not (run_dir / "play/state").exists()


def _play_records(out: dict[str, Path]) -> records.Play:
    return records.read_play(out[name] for name in records.READERS)


def _card(play: records.Play) -> str:
    """The model card of a run that played (only its play records: the rest not recorded)."""
    return card.render(card.Facts("t", {}, {}, {}, {}, {}, play=play))


def _card_and_report_agree(play_dir: Path, out: dict[str, Path], stored: dict) -> None:
    """The card's Elo line is the report's (one reader), for a finite fit and for a bound;
    a record missing a key is one line naming the file and the key, in both."""
    play = _play_records(out)
    section, text = markdown_section(play_dir), _card(play)
    assert "not recorded at not recorded" not in text
    for line in (play.elo.sentence(), play.elo.ladder_sentence(),
                 play.elo.reproducibility_sentence()):  # fmt: skip
        assert line in section and line in text, line
    assert f"**{play.elo.fit.elo:.0f}** (95 % interval" in text
    record = json.loads(out["elo"].read_text())
    lost = [{"white": a, "black": elo_games.MODEL, "score": 1.0} for a in stored["ratings"]]
    record["fit"] = elo.fit_player(lost, ladder.ladder_ratings(stored), elo_games.MODEL)
    seal.write(out["elo"], record)
    play, section = _play_records(out), markdown_section(play_dir)
    assert play.elo.fit.bound == "below" and "Estimate not finite: below" in play.elo.sentence()
    assert play.elo.sentence() in section and play.elo.sentence() in _card(play)
    del record["fit"]["games"]
    seal.write(out["elo"], record)  # sealed as written, but not what the reader needs
    said = f"{out['elo']}: no key 'fit.games'"
    with pytest.raises(records.RecordError, match=re.escape(said)):
        _play_records(out)
    with pytest.raises(records.RecordError, match=re.escape(said)):
        markdown_section(play_dir)


def test_a_conditioned_model_is_scored_at_true_and_counterfactual_ratings(
    tmp_path, noisy, play_cache
):
    """The counterfactual part of an ``elo`` checkpoint: its true-rating setting is
    move-matching's numbers exactly (the same positions, each game's own prefix); a
    counterfactual setting's are an Evaluator's at those ratings; predictions move with the
    rating; the ratings the games were played at are recorded; the summary shows the table."""
    run_dir = _run_dir(tmp_path, noisy, conditioning="elo")
    settings = json.loads(json.dumps(SETTINGS))
    settings["elo"]["games_per_anchor"] = 0
    settings["match"]["games"] = 8
    settings["ratings"] = {"self": 1900, "opponent": 1100}
    out = evaluate.run(run_dir, typed(settings), {"sample": play_cache}, device="cpu")
    record = json.loads(out["counterfactual"].read_text())
    assert record["conditioned"] and record["model"]["conditioning"] == "elo"
    assert record["datasets"]["sample"]["complete"]
    table = pd.read_csv(out["counterfactual_table"])
    overall = table[(table["grouping"] == "overall") & (table["protocol"] == "all")]
    assert overall["setting"].tolist() == ["true", "1100", "1900"]
    by = overall.set_index("setting")
    match = pd.read_csv(out["move_match_table"])
    m = match[(match["grouping"] == "overall") & (match["protocol"] == "all")].iloc[0]
    assert by.loc["true", "positions"] == m["positions"]
    for stat in ("top1", "top3", "nll"):
        assert by.loc["true", stat] == pytest.approx(m[stat], abs=1e-6), stat
    assert by.loc["true", "argmax_changed"] == 0 and by.loc["true", "tv"] == 0
    assert by.loc["1100", "tv"] > 1e-4 and by.loc["1900", "kl"] > 0
    ev = matching.Evaluator(weights.load_model(run_dir / "train/best.pt", "cpu"), play_cache,
                            tmp_path / "direct", games=8, chunk_games=8, batch_tokens=4096,
                            device=torch.device("cpu"), ratings=(1100, 1100))  # fmt: skip
    direct = ev.evaluate_games(ev.selected)
    assert by.loc["1100", "nll"] == pytest.approx(float(np.mean(direct["nll"])), abs=1e-5)
    assert by.loc["1100", "top1"] == pytest.approx(float(np.mean(direct["rank"] < 1)))
    legality = json.loads(out["legality"].read_text())
    assert legality["ratings"]["ratings"] == {"self": 1900, "opponent": 1100}
    assert legality["ratings"]["prefix_bins"] == {"self": "1900-1999", "opponent": "1100-1199"}
    section = markdown_section(run_dir / "play")
    assert "### Counterfactual ratings" in section and "| sample | all | 1900 |" in section


def test_a_model_without_conditioning_says_so_in_the_counterfactual_part(tmp_path, net, play_cache):
    run_dir = _run_dir(tmp_path, net)
    settings = json.loads(json.dumps(SETTINGS))
    settings["elo"]["games_per_anchor"] = 0
    settings["match"]["games"] = 2
    out = evaluate.run(run_dir, typed(settings), {"sample": play_cache}, device="cpu")
    record = json.loads(out["counterfactual"].read_text())
    assert record["conditioned"] is False and "not conditioned" in record["note"]
    assert out["counterfactual_table"].exists() and out["counterfactual_plot"].exists()
    assert json.loads(out["legality"].read_text())["ratings"]["ratings"] is None
    assert "not conditioned" in markdown_section(run_dir / "play")
    # games_per_anchor: 0 writes fit: null; the card and the report say so alike
    play = _play_records(out)
    assert json.loads(out["elo"].read_text())["fit"] is None and not play.elo.played
    assert f"Elo: {records.NOT_PLAYED}" in _card(play)
    assert records.NOT_PLAYED in markdown_section(run_dir / "play")


def test_a_broken_record_is_one_line_naming_its_file_and_key(tmp_path, net, play_cache):
    """Real records (the evaluation's), broken: a missing key, a wrong type (sealed, so that
    the reader gets to the keys), not JSON; the report and the card's reader both refuse it."""
    run_dir = _run_dir(tmp_path, net)
    settings = json.loads(json.dumps(SETTINGS))
    settings["elo"]["games_per_anchor"] = 0
    settings["match"]["games"] = 2
    settings["legality"]["games"] = 1
    out = evaluate.run(run_dir, typed(settings), {"sample": play_cache}, device="cpu")
    match = json.loads(out["move_match"].read_text())
    no_top1, text_step = json.loads(json.dumps(match)), json.loads(json.dumps(match))
    del no_top1["datasets"]["sample"]["table"][0]["top1"]
    text_step["model"]["step"] = "7"
    cases = {"no key 'datasets.sample.table[0].top1'": no_top1,
             "key 'model.step' is \"7\", not an integer": text_step}  # fmt: skip
    for said, broken in cases.items():
        seal.write(out["move_match"], broken)
        with pytest.raises(records.RecordError, match=re.escape(f"{out['move_match']}: {said}")):
            _play_records(out)
        with pytest.raises(records.RecordError, match=re.escape(f"{out['move_match']}: {said}")):
            markdown_section(run_dir / "play")
    seal.write(out["move_match"], match)
    out["legality"].write_text('{"modes": ')
    with pytest.raises(records.RecordError, match=re.escape(f"{out['legality']}: not JSON")):
        markdown_section(run_dir / "play")


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


def test_windows_order_chunks_by_length_score_as_contiguous_chunks_and_stop_at_their_end(
    tmp_path, net
):
    """Chunks of 4 games from windows of 2 chunks: each window holds the same games as the
    contiguous chunks, shortest first, and scores the same positions with the same numbers; a
    time budget past after the first chunk stops the run at its window's end (two chunks
    written), where contiguous chunks stop after the first; the next run resumes the rest."""
    small = small_cache(tmp_path)
    plain, windowed = (cpu_evaluator(net, small, tmp_path / f"w{w}", chunk_games=4, window=w)
                       for w in (1, 2))  # fmt: skip
    lengths = np.asarray(windowed.games.lengths)
    assert [sorted(c) for c in plain.chunks] == [list(range(i, i + 4)) for i in range(0, 20, 4)]
    for w in range(0, 5, 2):
        games = np.concatenate(windowed.chunks[w : w + 2])
        assert sorted(games.tolist()) == list(range(4 * w, min(4 * w + 8, 20)))
        assert np.all(np.diff(lengths[games]) >= 0)  # shortest first
    assert [windowed.ends_window(i) for i in range(5)] == [False, True, False, True, True]

    class Slow:  # the progress callback: the budget passes while the first chunk is scored
        def update(self, done):
            time.sleep(0.3)

    for ev, kept in ((plain, 1), (windowed, 2)):
        assert not ev.run(time.monotonic() + 0.2, Slow())
        assert [ev.chunk_path(i).exists() for i in range(5)] == [True] * kept + [False] * (5 - kept)
        assert ev.run(time.monotonic() + 300)
    assert_same_positions(plain.positions(), windowed.positions())


def test_a_budget_stop_writes_partial_results_and_the_next_run_resumes_its_chunks(
    tmp_path, net, play_cache, caplog
):
    """Only a job stopped by its time budget leaves work for the next one (which may have a
    larger budget); the job that completes removes it, so a rerun re-measures every chunk."""
    run_dir = _run_dir(tmp_path, net)
    settings = json.loads(json.dumps(SETTINGS))
    settings["elo"]["games_per_anchor"] = 0
    settings["match"]["chunk_games"] = 2
    settings["match"]["seconds"] = 0  # stop before the first chunk
    out = evaluate.run(run_dir, typed(settings), {"sample": play_cache}, device="cpu")
    d = json.loads(out["move_match"].read_text())["datasets"]["sample"]
    assert not d["complete"] and d["games_evaluated"] == 0
    assert "stopped by its time budget" in markdown_section(run_dir / "play")
    state = run_dir / "play/state"
    assert json.loads((state / workstate.STOPPED).read_text()) == {"parts": ["match"]}
    # two chunks "finished by an earlier job": the next one keeps them, computes the rest
    m = settings["match"]
    evaluator = matching.Evaluator(net, play_cache, state / "match/sample", games=m["games"],
                                   chunk_games=m["chunk_games"], batch_tokens=m["batch_tokens"],
                                   device=torch.device("cpu"),
                                   attention=m["attention"])  # fmt: skip
    for i in range(2):
        result = evaluator.evaluate_games(evaluator.chunks[i])
        files.write_atomic(evaluator.chunk_path(i), lambda fh, r=result: np.savez(fh, **r))
    settings["match"]["seconds"] = 600  # a larger budget: the same work, resumed
    with caplog.at_level(logging.INFO, logger="chesslm.play"):
        out = evaluate.run(run_dir, typed(settings), {"sample": play_cache}, device="cpu")
    assert "resuming the work of a job stopped by its time budget" in caplog.text
    first = next(m for m in caplog.messages if m.startswith("move-matching sample: "))
    assert not first.startswith("move-matching sample: 0/"), first  # counted from the kept
    d = json.loads(out["move_match"].read_text())["datasets"]["sample"]
    assert d["complete"] and d["games_evaluated"] == d["games_selected"]
    assert not state.exists()  # complete: nothing left to resume
    full = pd.read_csv(out["move_match_table"])
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="chesslm.play"):
        again = evaluate.run(run_dir, typed(settings), {"sample": play_cache}, device="cpu")
    assert any(m.startswith("move-matching sample: 0/") for m in caplog.messages)
    assert pd.read_csv(again["move_match_table"]).equals(full)  # re-measured, same numbers


def test_missing_metadata_puts_positions_in_unknown_bins(tmp_path, net, play_cache):
    bare = tmp_path / "cache"
    shutil.copytree(play_cache, bare)
    for path in bare.glob("validation.meta.*.npy"):
        path.unlink()
    run_dir = _run_dir(tmp_path, net)
    settings = {**SETTINGS, "elo": {**SETTINGS["elo"], "games_per_anchor": 0}}
    out = evaluate.run(run_dir, typed(settings), {"sample": bare}, device="cpu")
    table = pd.read_csv(out["move_match_table"], keep_default_na=False)
    assert set(table[table["grouping"] != "overall"]["group"]) == {"unknown"}


def test_a_test_split_is_refused(tmp_path):
    with pytest.raises(ValueError, match="validation splits only"):
        check_validation_only(tmp_path / "datasets" / "x" / "test")


def _validation_plies(cache_dir):
    from chesslm.data.cache import TokenCache

    val = TokenCache(cache_dir).validation
    return [range((len(val[i]) - 2) // 3) for i in range(len(val))]


def _random_positions(n_games: int, per: int, *, seed: int) -> dict[str, np.ndarray]:
    """``per`` positions of each of ``n_games`` games, random ranks and NLLs, 20 legal moves."""
    rng = np.random.default_rng(seed)
    return {
        "game": np.repeat(np.arange(n_games), per),
        "ply": np.tile(np.arange(per), n_games).astype(np.int16),
        "rank": rng.integers(0, 5, n_games * per),
        "nll": rng.random(n_games * per).astype(np.float32),
        "n_legal": np.full(n_games * per, 20),
    }


def test_tables_bootstrap_interval_brackets_the_estimate():
    n_games, per = 40, 30
    pos = _random_positions(n_games, per, seed=0)
    meta = {
        "white_elo": np.full(n_games, 1500), "black_elo": np.full(n_games, 2450),
        "speed": np.full(n_games, 2), "base_seconds": np.full(n_games, 180),
        "clock": np.full(n_games * per, 100.0), "ply_offsets": np.arange(n_games + 1) * per,
    }  # fmt: skip
    rows = matching.tables(pos, meta, protocols.chosen(["maia2", "all"]), replicates=200, seed=0)
    by = {(r["protocol"], r["grouping"], r["group"]): r for r in rows}
    overall = by[("all", "overall", "all")]
    assert overall["top1"] == pytest.approx(np.mean(pos["rank"] == 0))
    assert overall["top1_low"] < overall["top1"] < overall["top1_high"]
    assert by[("all", "band", "1400-2000")]["positions"] == n_games * per // 2
    assert by[("all", "band", "2400+")]["positions"] == n_games * per // 2
    assert by[("maia2", "overall", "all")]["positions"] == n_games * (per - 10)
    assert by[("all", "speed", "blitz")]["games"] == n_games


@pytest.mark.parametrize(
    ("play", "named"),
    [
        ({"split": "test"}, "split"),
        ({"match": {"gamez": 3}}, "gamez"),
        ({"elo": {"games_per_anchor": -1}}, "games_per_anchor"),
        ({"legality": {"games": 0}}, "games"),
        ({"threads": 0}, "threads"),
    ],
)
def test_schema_refuses_a_test_split_and_bad_play_keys(play, named):
    import jsonschema
    import yaml

    from tests.helpers import ROOT

    schema = yaml.safe_load((ROOT / "workflow/schemas/config.schema.yaml").read_text())
    config = {"datasets": {"s": {"pgn": ["x.pgn"]}}, "runs": {"r": {"dataset": "s", "play": play}}}
    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(config))
    assert errors and named in (errors[0].message + str(list(errors[0].absolute_path)))
    good = {**config, "runs": {"r": {"dataset": "s", "play": {"elo": {"ladder": "full"}}}}}
    assert not list(jsonschema.Draft202012Validator(schema).iter_errors(good))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_split_dense_and_flex_scores_match_the_oracle():
    """On the GPU (BF16 autocast): the two-part, the dense and the FlexAttention (compiled)
    paths, and the two-part compiled (``match.compile``), agree with the oracle loop up to
    BF16 rounding."""
    torch.manual_seed(0)
    net = gpt.build("tiny", device="cuda").eval()
    moves = [list(g.mainline_moves())[:20] for g in sample_pgn_games(3)]
    batch = branched.build_batch([_input(m) for m in moves], "cuda")
    dense = scoring.score(net, batch, attention="dense")
    two_part = scoring.score(net, batch, attention="split")
    assert torch.allclose(dense.move_logp, two_part.move_logp, atol=3e-2)
    scoring.compile_layers(net)
    flex = scoring.score(net, batch, attention="flex")
    assert torch.allclose(dense.move_logp, flex.move_logp, atol=3e-2)
    compiled = scoring.score(net, batch, attention="split")
    assert torch.allclose(two_part.move_logp, compiled.move_logp, atol=3e-2)
    oracle = oracle_scores(net, moves[0], {0, 7, 19})
    rows = np.nonzero(batch.ply_game == 0)[0]
    for ply, per_move in oracle.items():
        for scores in (dense, two_part):
            played = float(scores.played_logp[rows[ply]])
            assert played == pytest.approx(per_move[moves[0][ply]], abs=3e-2)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("attention", scoring.ATTENTION)
def test_cuda_pipeline_matches_one_batch(attention):
    """On the GPU the pipeline (pinned buffers, non-blocking copies, one sync per batch, the
    next batch prepared in a thread) yields each batch's own results, not a neighbour's."""
    torch.manual_seed(0)
    net = gpt.build("tiny", device="cuda").eval()
    inputs = [_input(list(g.mainline_moves())[:n]) for g, n in zip(sample_pgn_games(6),
              (30, 7, 22, 15, 40, 11), strict=True)]  # fmt: skip
    lengths = branched.branched_lengths(inputs)
    batches = list(scoring.score_many(net, inputs, batch_tokens=int(lengths.max()) * 2,
                                      device="cuda", attention=attention, pad_to=16))  # fmt: skip
    assert len(batches) > 1
    for group, batch, host in batches:
        for b, g in enumerate(group):
            alone = scoring.score(net, branched.build_batch([inputs[g]], "cuda"))
            rows = batch.ply_game == b
            assert host["n_legal"][rows].tolist() == alone.n_legal.tolist()
            assert np.allclose(host["played_logp"][rows], alone.played_logp.cpu(), atol=3e-2)


def test_move_matching_evaluates_every_validation_game_beyond_the_legality_subset(tmp_path, net):
    """A cache with legality tables for 7 of 20 validation games: ``games: None`` scores all 20,
    the 13 others with legal moves computed as the cache computes them (the same codes as a
    cache that stores all 20, and python-chess agrees); a bound picks evenly among all 20 and
    says so."""
    small, full = small_cache(tmp_path), small_cache(tmp_path, None)

    def evaluator(cache_dir, games, state):
        return cpu_evaluator(net, cache_dir, tmp_path / state, games=games)

    ev, stored = evaluator(small, None, "s1"), evaluator(full, None, "s2")
    assert ev.selected.tolist() == list(range(20))
    assert int((ev.ply_start < 0).sum()) == 13
    for g in range(20):
        mine, theirs = ev.game(g), stored.game(g)
        assert mine.codes.tolist() == theirs.codes.tolist(), g
        assert mine.counts.tolist() == theirs.counts.tolist(), g
    board = chess.Board()
    game = ev.game(1)  # not stored in the small cache
    for ply, triple in enumerate(np.asarray(ev.games[1][1:-1]).reshape(-1, 3).tolist()):
        codes = game.codes[game.counts[:ply].sum() : game.counts[: ply + 1].sum()]
        assert codes.tolist() == scoring.legal_codes(board).tolist(), ply
        board.push(tokens.decode_move(triple))
    assert ev.run(time.monotonic() + 300)
    assert sorted(set(ev.positions()["game"].tolist())) == list(range(20))
    assert ev.selection() == (
        "20 of 20 validation games; legal moves of 13 computed with python-chess (beyond the"
        " cache's 7 stored)"
    )
    bounded = evaluator(small, 4, "s3")
    assert bounded.selected.tolist() == [0, 5, 10, 15]
    assert bounded.selection().startswith("4 of 20 validation games (match.games = 4: evenly")


def test_games_prepared_by_worker_processes_score_as_the_serial_path(tmp_path, net):
    """With 3 threads on a CPU, 3 forked workers prepare the 13 games the cache stores no tables
    for, chunk by chunk: the same tables as in-process (the cache's: the test above) and the
    same positions and numbers as the serial path (1 thread); torch's threads are the job's
    again after it."""
    small = small_cache(tmp_path)
    serial, parallel = (cpu_evaluator(net, small, tmp_path / f"t{n}", chunk_games=4, threads=n)
                        for n in (1, 3))  # fmt: skip
    assert (serial.workers, parallel.workers) == (0, 3)
    ids = [g for g in range(20) if parallel.ply_start[g] < 0]
    with prepare.Preparer(parallel.workers) as prep:
        pending = prep.submit(ids, [np.asarray(parallel.games[g]) for g in ids])
        assert len(pending.futures) == 3 and not pending.games  # one task a worker, not here
        tables = pending.tables()
    for g in ids:
        mine, theirs = parallel.game(g, tables[g]), serial.game(g)
        assert mine.codes.tolist() == theirs.codes.tolist(), g
        assert mine.counts.tolist() == theirs.counts.tolist(), g
    before = torch.get_num_threads()
    pool = prepare.started(parallel.workers).pool  # the process's, forked once
    pids = sorted(pool._processes)
    assert serial.run(time.monotonic() + 300) and parallel.run(time.monotonic() + 300)
    assert torch.get_num_threads() == before
    assert sorted(prepare.started(parallel.workers).pool._processes) == pids  # no new forks
    other: list = []  # another thread's pool is its own: the shared one dies with main only
    worker = threading.Thread(target=lambda: other.append(prepare.started(parallel.workers)))
    worker.start()
    worker.join()
    assert other[0] is not prepare.started(parallel.workers)
    one, other = serial.positions(), parallel.positions()
    assert len(one["game"]) == serial.positions_total
    for key in matching.CHUNK_FIELDS:
        assert np.array_equal(one[key], other[key]), key


def test_the_first_chunk_in_pieces_scores_as_one_chunk(tmp_path, net, monkeypatch):
    """As on a GPU (workers preparing ahead), the first chunk is scored in pieces of
    ``prepare.FIRST_PIECES`` games and written once, whole: the same positions and numbers as
    the serial path; a budget stop after it resumes the rest."""
    small = small_cache(tmp_path)
    monkeypatch.setattr(prepare, "FIRST_PIECES", (2, 3))
    monkeypatch.setattr(prepare, "ahead", lambda device: 2)  # a GPU's, on this CPU
    serial, split = (cpu_evaluator(net, small, tmp_path / f"t{n}", threads=n) for n in (1, 3))
    parts = split._parts(list(range(len(split.chunks))))
    assert [(c, len(g), last) for c, g, last in parts][:4] == [
        (0, 2, False), (0, 3, False), (0, 3, True), (1, 8, True)]  # fmt: skip
    assert serial.run(time.monotonic() + 300)
    assert not split.run(time.monotonic() - 1)  # past its deadline: nothing scored
    assert split.positions_done == 0
    chunk0 = len(np.load(serial.chunk_path(0))["game"])
    assert split.run(time.monotonic() + 300)
    assert len(np.load(split.chunk_path(0))["game"]) == chunk0  # one file, every piece
    assert_same_positions(serial.positions(), split.positions())


def test_preparation_workers_die_with_a_job_killed_outright(tmp_path):
    """A job killed by SIGKILL (the OOM killer) takes its idle preparation workers with it:
    without ``prepare``'s death signal they would wait for tasks forever, handed to init."""
    import os
    import subprocess
    import sys

    script = (
        "import os, numpy as np\n"
        "from chesslm.scorer import prepare\n"
        "prep = prepare.started(1)\n"
        "prep.submit([0], [np.array([69, 70], dtype=np.uint8)]).tables()\n"
        "print(*[p.pid for p in prep.pool._processes.values()], flush=True)\n"
        "os.kill(os.getpid(), 9)\n"
    )
    # the pid line only, then the job's end: a lingering worker holds the pipe open
    job = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    (worker,) = map(int, job.stdout.readline().split())
    assert job.wait(timeout=60) == -9
    job.stdout.close()
    deadline = time.monotonic() + 5
    while os.path.exists(f"/proc/{worker}") and time.monotonic() < deadline:
        time.sleep(0.05)
    gone = not os.path.exists(f"/proc/{worker}")
    if not gone:
        os.kill(worker, 9)
    assert gone, f"worker {worker} outlived its job"


# ------------------------------------------------------------- threads, progress, honesty


def test_evaluation_uses_exactly_the_threads_it_is_given(tmp_path, net, play_cache):
    """torch runs with the rule's threads, whatever the process had; each file records them
    (a change of threads keeps a budget-stopped job's work: workstate.identity's doctest)."""
    settings = json.loads(json.dumps(SETTINGS))
    settings["threads"] = 1  # the schema's key, as the rule passes it: not the one used
    settings["match"]["games"] = 4
    settings["legality"].update(games=1, max_plies=2)
    settings["elo"]["games_per_anchor"] = 0
    run_dir = _run_dir(tmp_path, net)
    before = torch.get_num_threads()
    try:
        for threads in (2, 1):
            torch.set_num_threads(3 - threads)  # the other value
            if threads == 2:
                evaluate.run(
                    run_dir,
                    PlaySettings.from_dict(settings),
                    {"sample": play_cache},
                    device="cpu",
                    threads=2,
                )
            else:  # the command line
                assert evaluate.main(["--run-dir", str(run_dir), "--settings",
                                      json.dumps(settings), "--cache", f"sample={play_cache}",
                                      "--threads", "1"]) == 0  # fmt: skip
            out = {k: run_dir / "play" / v for k, v in outputs.FILES.items()}
            assert torch.get_num_threads() == threads
            for key in ("move_match", "legality", "elo"):
                assert json.loads(out[key].read_text())["host"]["torch_threads"] == threads
    finally:
        torch.set_num_threads(before)
    with pytest.raises(ValueError, match="play threads: 0"):
        use_threads(0)


def test_the_play_rule_asks_snakemake_for_the_configured_threads(tmp_path):
    """A dry run: the play job gets runs.NAME.play.threads, capped by --cores (1 by default:
    Snakemake then prints no threads line)."""
    from tests.helpers import ROOT
    from tests.helpers import snakemake as run_snakemake

    (tmp_path / "config").mkdir()
    shutil.copy(ROOT / "config/config.yaml", tmp_path / "config/config.yaml")
    (tmp_path / "resources").symlink_to(ROOT / "resources")
    (tmp_path / "t.yaml").write_text(
        "runs:\n  demo:\n    dataset: sample\n    play: {threads: 2}\n"
    )

    def play_job(*args: str) -> str:
        plan = run_snakemake(tmp_path, "results/demo/play/move-match.json", "-n", *args).stdout
        return plan[plan.index("rule play:") :].split("\n\n")[0]

    assert "threads: 2" in play_job("--cores", "2", "--configfile", "t.yaml")
    assert "threads:" not in play_job("--cores", "1", "--configfile", "t.yaml")
    assert "threads:" not in play_job("--cores", "2")


def test_progress_lines_come_when_the_interval_has_passed(caplog):
    now = [100.0]
    with caplog.at_level(logging.INFO, logger="chesslm.play"):
        p = Progress("games against Stockfish", 8, "games", every=10, clock=lambda: now[0])
        for done, t in ((1, 104.0), (2, 109.9), (3, 110.0), (4, 115.0), (5, 120.5)):
            now[0] = t
            p.update(done, f"{8 - done} games in play")
        p.finish("complete")
    assert [r.getMessage() for r in caplog.records] == [
        "games against Stockfish: 0/8 games (0%)",
        "games against Stockfish: 3/8 games (38%); 5 games in play",
        "games against Stockfish: 5/8 games (62%); 3 games in play",
        "games against Stockfish: 5/8 games (62%); complete",
    ]


def test_self_play_reports_games_finished_as_it_goes(net, caplog):
    now = [0.0]

    def clock() -> float:  # every reading 6 s later: a line every second ply
        now[0] += 6
        return now[0]

    with caplog.at_level(logging.INFO, logger="chesslm.play"):
        progress = Progress("legality", 3, "games finished", every=10, clock=clock)
        games.self_play(net, games=3, max_plies=6, temperature=1.0, seed=3,
                        deadline=time.monotonic() + 120, progress=progress)  # fmt: skip
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == "legality: 0/3 games finished (0%)"
    assert [x.split("; ")[1] for x in lines[1:]] == ["ply 2 of 6", "ply 4 of 6", "ply 6 of 6"]
    assert lines[-1].startswith("legality: 3/3 games finished (100%)")


def _positions_with_a_lone_game(n_rated: int = 12, per: int = 20):
    """``n_rated`` games between 1500 players and one game between 2000 players."""
    n = n_rated + 1
    pos = _random_positions(n, per, seed=3)
    elo_of = np.array([1500] * n_rated + [2000])
    meta = {
        "white_elo": elo_of, "black_elo": elo_of, "speed": np.full(n, 2),
        "base_seconds": np.full(n, 180), "clock": np.full(n * per, 100.0),
        "ply_offsets": np.arange(n + 1) * per,
    }  # fmt: skip
    return matching.tables(pos, meta, protocols.chosen(["maia2", "all"]), replicates=200, seed=0)


def test_a_group_of_fewer_than_ten_games_has_no_interval():
    rows = _positions_with_a_lone_game()
    by = {(r["protocol"], r["grouping"], r["group"]): r for r in rows}
    lone, rated = by[("all", "elo_bin", "2000")], by[("all", "elo_bin", "1500")]
    assert lone["games"] == 1 and lone["positions"] == 20 and lone["few_games"]
    assert lone["top3"] is not None
    assert all(lone[f"{s}_{e}"] is None for s in matching.STATS for e in ("low", "high"))
    assert rated["games"] == 12 and not rated["few_games"]
    assert rated["top1_low"] < rated["top1_high"]
    nine = _positions_with_a_lone_game(n_rated=9)
    assert {r["group"]: r["few_games"] for r in nine if r["grouping"] == "elo_bin"} == {
        "1500": True, "2000": True}  # fmt: skip


def test_the_figure_draws_a_few_games_bin_hollow_without_an_interval():
    frame = pd.DataFrame([{"dataset": "sample", **r} for r in _positions_with_a_lone_game()])
    fig = plots.match_figure(frame)
    ax = fig.axes[0]
    hollow = [ln for ln in ax.lines if ln.get_markerfacecolor() == "none" and len(ln.get_xdata())]
    assert len(hollow) == 4  # top-1 and top-3, both protocols
    assert all(set(np.asarray(ln.get_xdata()) - 50) <= {1992, 2008} for ln in hollow)
    bars = [c for c in ax.collections if c.get_segments()]  # errorbar's vertical bars
    xs = {round(float(seg[0][0])) for c in bars for seg in c.get_segments()}
    assert xs == {1542, 1558}  # only the 1500 bin, both protocols (side by side)
    counts = {t.get_text(): t.get_color() for t in ax.texts}
    assert counts == {"12": "black", "1": "grey"}
    assert any("fewer than 10 games" in t.get_text() for t in ax.get_legend().get_texts())


def test_the_elo_figure_places_the_model_on_the_ladders_scale():
    """Each anchor at its ladder rating with its interval, the model's fitted curve through
    0.5 at its Elo; a model with only losses: a dashed line at its upper bound."""
    ratings = {"random": 200.0, "sf1": 1600.0}
    placed = [{"anchor": n, "rating": r, "rating_low": r - 80, "rating_high": r + 80,
                "score": s, "games": 4} for (n, r), s in zip(ratings.items(), (0.75, 0.25),
                                                             strict=True)]  # fmt: skip
    rows = [{"white": "model", "black": a["anchor"], "score": s}
            for a in placed for s in ((1.0, 1.0, 1.0, 0.0) if a["score"] > 0.5
                                       else (1.0, 0.0, 0.0, 0.0))]  # fmt: skip
    fit = elo.fit_player(rows, ratings)
    ax = plots.elo_figure(placed, fit).axes[0]
    assert "not reproducible" in ax.get_title() and "ladder" in ax.get_xlabel()
    points = next(ln for ln in ax.lines if ln.get_linestyle() == "None")
    assert list(points.get_xdata()) == [200.0, 1600.0]
    curve = next(ln for ln in ax.lines if ln.get_label().startswith("model:"))
    x, y = np.asarray(curve.get_xdata()), np.asarray(curve.get_ydata())
    assert np.interp(0.5, y[::-1], x[::-1]) == pytest.approx(fit["elo"], abs=15)
    lost = elo.fit_player([{**r, "score": 0.0} for r in rows], ratings)
    bound = plots.elo_figure(placed, lost).axes[0]
    assert any(
        ln.get_xdata()[0] == lost["high"] for ln in bound.lines if ln.get_linestyle() == "--"
    )


def test_the_section_says_which_intervals_are_missing_and_that_elo_is_not_reproducible(
    tmp_path,
):
    rows = [r for r in _positions_with_a_lone_game() if r["grouping"] != "elo_bin"]
    rows.append({**rows[-1], "grouping": "band", "group": "2000-2400", "games": 1,
                 "few_games": True, "top1_low": None, "top1_high": None})  # fmt: skip
    match = {
        "model": {"checkpoint": "best.pt", "step": 1, "preset": "tiny"},
        "definition": "argmax", "protocols": {"maia2": "m", "all": "every"},
        "interval": "bootstrap", "min_interval_games": matching.MIN_INTERVAL_GAMES,
        "datasets": {"sample": {"complete": True, "games_evaluated": 13, "validation_games": 13,
                                "games_selected": 13, "selection": "13 of 13 validation games",
                                "positions": 260, "protocol_positions": {"maia2": 130, "all": 260},
                                "metadata": "present",
                                "table": rows}},
    }  # fmt: skip
    seal.write(tmp_path / "move-match.json", match)
    section = markdown_section(tmp_path)
    band = next(line for line in section.splitlines() if "| 2000-2400 |" in line)
    assert "(no interval)" in band and "[" not in band
    assert "No interval: fewer than 10 games" in section
    overall = next(line for line in section.splitlines() if "| overall | all |" in line)
    assert "[" in overall  # 13 games: its interval is shown


def test_the_section_says_n_of_m_games_and_why_when_fewer_than_all(tmp_path):
    rows = [r for r in _positions_with_a_lone_game() if r["grouping"] == "overall"]
    ds = {"complete": True, "games_evaluated": 13, "validation_games": 13, "games_selected": 13,
          "selection": "13 of 13 validation games", "positions": 260, "metadata": "present",
          "protocol_positions": {"maia2": 130, "all": 260}, "table": rows}  # fmt: skip
    match = {
        "model": {"checkpoint": "best.pt", "step": 1, "preset": "tiny"},
        "definition": "argmax", "protocols": {"maia2": "Maia-2's rule", "all": "every"},
        "interval": "bootstrap", "min_interval_games": matching.MIN_INTERVAL_GAMES,
        "datasets": {"all": ds, "some": {**ds, "games_evaluated": 4, "games_selected": 4,
                     "selection": "4 of 13 validation games (match.games = 4: evenly spaced)"}},
    }  # fmt: skip
    seal.write(tmp_path / "move-match.json", match)
    lines = markdown_section(tmp_path).splitlines()
    every = next(line for line in lines if line.startswith("Dataset `all`"))
    assert "13 of 13 validation games (complete)," in every and "selected" not in every
    some = next(line for line in lines if line.startswith("Dataset `some`"))
    assert "4 of 13 validation games (complete; selected: 4 of 13" in some
    assert "match.games = 4" in some and "130 under maia2, 260 under all" in some
    assert "**maia2**: Maia-2's rule" in "\n".join(lines)


def test_stockfish_has_no_seed_option():
    """Why elo.json says "reproducible": false: the engine offers no way to seed its play (if
    one appears, play.elo should set it)."""
    engine = chess.engine.SimpleEngine.popen_uci(anchors.find_engine("stockfish"))
    try:
        assert "UCI_LimitStrength" in engine.options
        assert not [name for name in engine.options if "seed" in name.lower()]
    finally:
        engine.quit()
