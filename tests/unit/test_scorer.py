"""The batched scorer (chesslm.scorer) against the one-pass-per-move oracle on real games:
attention kernels, rating prefixes, branched rows, pipelined batches."""

from __future__ import annotations

import dataclasses
import math

import chess
import chess.engine
import chess.pgn
import numpy as np
import pytest
import torch

from chesslm.data import conditioning, tokens
from chesslm.scorer import branched, scoring
from chesslm.scorer.oracle import oracle_scores
from chesslm.scorer.settings import PlaySettings
from tests.playkit import (
    promotion_aside,
    sample_pgn_games,
    scorer_input,
)

typed = PlaySettings.from_dict  # rule play's script types the play settings so


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
    aside_ply, aside_moves = promotion_aside(pgn)
    checked = {
        0: (list(pgn[0].mainline_moves())[:14], None),
        1: (list(pgn[1].mainline_moves())[:9], None),
        2: (promo_moves[: promo_ply + 1], {5, promo_ply}),
        3: (aside_moves[: aside_ply + 1], {aside_ply}),
    }
    batch = branched.build_batch([scorer_input(m) for m, _ in checked.values()], "cpu")
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
                for i, c in zip(idx, scorer_input(moves).legal(ply), strict=True)
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
    inputs = [dataclasses.replace(scorer_input(m), prefix=np.array(lead, dtype=np.int64))
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
    plain = branched.prepare([scorer_input(moves)])
    lead = dataclasses.replace(
        scorer_input(moves), prefix=np.array(conditioning.prefix(1500, 1500))
    )
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
    batch = branched.build_batch([scorer_input(moves)], "cpu")
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
    inputs = [scorer_input(list(g.mainline_moves())[:n]) for g, n in zip(sample_pgn_games(5),
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
    inputs = [scorer_input(list(g.mainline_moves())[:n]) for g, n in zip(sample_pgn_games(5),
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
