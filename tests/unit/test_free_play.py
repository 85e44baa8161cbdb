"""Free-running legality's games, every mode in one batch with a KV-cached decoder
(``games.free_games``, ``chesslm.scorer.decode``): the decoder's logits are the model's, and the
games are move for move those of the plain path (``games.free_games_plain``, three passes
over every whole sequence per ply), greedy and sampled, with and without a rating prefix."""

from __future__ import annotations

import copy
import dataclasses
import random
import time

import chess
import pytest
import torch

from chesslm.data import conditioning, tokens
from chesslm.ladder import games
from chesslm.model import gpt
from chesslm.scorer import decode, ratings

MODES = {"greedy": 0.0, "temperature_1": 1.0}


@pytest.fixture(scope="module")
def net() -> gpt.GPT:
    torch.manual_seed(0)
    return gpt.build("tiny").eval()


def test_the_decoders_steps_give_the_logits_of_a_pass_over_the_whole_sequence(net) -> None:
    torch.manual_seed(1)
    seqs = torch.randint(0, 64, (3, 12))
    seqs[:, 0] = tokens.BOS
    with torch.no_grad():
        whole = net(seqs)
    decoder = decode.Decoder(net, 3, 16)
    parts = [decoder.step(seqs[:, :4], 0), decoder.step(seqs[:, 4:5], 4)]
    # a proposal at 5..6, then overwritten by the tokens played there
    decoder.step(torch.full((3, 2), 7), 5)
    parts.append(decoder.step(seqs[:, 5:9], 5))
    decoder.keep(torch.tensor([2, 0]))  # a game ended: rows 2 and 0 go on
    parts.append(decoder.step(seqs[[2, 0], 9:12], 9))
    assert torch.allclose(torch.cat(parts[:3], 1), whole[:, :9], atol=1e-5)
    assert torch.allclose(parts[3], whole[[2, 0], 9:12], atol=1e-5)
    with pytest.raises(ValueError, match="sequence of 1025 tokens exceeds the context 1024"):
        decoder.step(seqs[:, :1], 1024)


def _both(net: gpt.GPT, **kw) -> tuple[dict, dict]:
    kw = {"games": 12, "seed": 3, "deadline": time.monotonic() + 600, **kw}
    new, complete = games.free_games(net, MODES, **kw)
    plain = {m: games.free_games_plain(net, temperature=t, **kw) for m, t in MODES.items()}
    assert complete and all(done for _, done in plain.values())
    return new, {m: play for m, (play, _) in plain.items()}


def _games(play: dict) -> dict:
    return {m: [(g.board.move_stack, g.illegal_plies, g.proposals) for g in gs]
            for m, gs in play.items()}  # fmt: skip


def test_free_games_in_one_cached_batch_are_the_plain_paths_move_for_move(net) -> None:
    new, plain = _both(net, max_plies=110)
    assert _games(new) == _games(plain)
    ends = [len(g.board.move_stack) for gs in new.values() for g in gs]
    # games ended at different plies (the batch shrank), others ran to the cap
    assert len(new["greedy"]) == 1 and len(new["temperature_1"]) == 12
    assert min(ends) < 60 and max(ends) == 110
    assert len({tuple(g.board.move_stack) for g in new["temperature_1"]}) == 12
    assert all(g.illegal_plies for gs in new.values() for g in gs)  # replacements ran


def test_behind_a_rating_prefix_too(net) -> None:
    rated = copy.deepcopy(net)
    rated.config = dataclasses.replace(net.config, conditioning="elo")
    new, plain = _both(rated, max_plies=20, elo=(2000, 1000))
    assert _games(new) == _games(plain)
    assert conditioning.prefix(2000, 1000)  # there was a prefix to see
    unrated, _ = _both(net, max_plies=20)
    assert _games(unrated) != _games(new)  # and it changed the games


def test_no_ply_is_proposed_after_the_deadline(net) -> None:
    result = games.self_play_modes(net, MODES, games=4, max_plies=10, seed=0,
                                   deadline=time.monotonic())  # fmt: skip
    assert [(r["complete"], r["proposals"], r["games"]) for r in result.values()] == [
        (False, 0, 1),
        (False, 0, 4),
    ]


PROMOTING = "e2e4 d7d5 e4d5 c7c6 d5c6 g8f6 c6b7 b8d7".split()  # then b7 takes or pushes: 12


def _boards(n: int) -> list[chess.Board]:
    """The promoting position and ``n - 1`` random ones, all after as many plies."""
    rng = random.Random(5)
    out = [chess.Board()]
    for uci in PROMOTING:
        out[0].push_uci(uci)
    while len(out) < n:
        board = chess.Board()
        while len(board.move_stack) < len(PROMOTING) and not board.is_game_over():
            board.push(rng.choice(list(board.legal_moves)))
        if len(board.move_stack) == len(PROMOTING):
            out.append(board)
    return out


@pytest.mark.parametrize("rated", [False, True])
def test_a_replacement_from_the_cache_is_the_full_pass_replacement(net, rated, monkeypatch):
    if rated:
        net = copy.deepcopy(net)
        net.config = dataclasses.replace(net.config, conditioning="elo")
    lead = list(ratings.prefix(net, 2000, 1000))
    assert bool(lead) == rated
    boards = _boards(6)
    assert sum(m.promotion is not None for m in boards[0].legal_moves) == 12
    seen: list[torch.Tensor] = []
    real = games._pick
    monkeypatch.setattr(
        games, "_pick", lambda b, i, logp, *a: seen.append(logp) or real(b, i, logp, *a)
    )
    seqs = torch.tensor([lead + games.move_tokens_of(b) for b in boards])
    at = seqs.size(1)
    decoder = decode.Decoder(net, len(boards), at + 3)
    last = decoder.step(seqs, 0)[:, -1]
    decoder.step(torch.full((len(boards), 2), 9), at)  # a proposal's tokens, as in free_games
    rows = [3, 0, 5, 1]  # some of the batch's games, in another order
    sample = [False, True, True, False]
    for draw in range(3):
        gens = [torch.Generator().manual_seed(draw) for _ in rows]
        twins = [torch.Generator().manual_seed(draw) for _ in rows]
        mine = [boards[r] for r in rows]
        cached = games.cached_best_moves(decoder, last, at, torch.tensor(rows), mine,
                                         sample=sample, generators=gens)  # fmt: skip
        full = games.best_moves(net, mine, sample=sample, prefixes=[lead] * len(rows),
                                generators=twins)  # fmt: skip
        assert cached == full
        # every legal move's score (the promoting board's 12 promotions among them)
        assert torch.allclose(seen[-2], seen[-1], atol=1e-5)
        assert seen[-1].exp().sum().item() == pytest.approx(len(rows), rel=1e-5)


def test_free_games_replace_a_move_from_the_cache_or_by_a_pass(net) -> None:
    kw = {"games": 3, "max_plies": 12, "seed": 4, "deadline": time.monotonic() + 600}
    cached, _ = games.free_games(net, MODES, **kw)
    passed, _ = games.free_games(net, MODES, replace="pass", **kw)
    assert _games(cached) == _games(passed)
    with pytest.raises(ValueError, match="replace must be one of"):
        games.free_games(net, MODES, replace="both", **kw)
