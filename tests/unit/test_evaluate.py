"""The device-side metrics agree with the seed's per-token python-chess reference."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from chesslm.data.cache import TokenCache
from chesslm.data.tokens import BOS, EOS, State, decode_move
from chesslm.model import gpt
from chesslm.train import batching, validation
from chesslm.train.deadline import Deadline


@torch.no_grad()
def reference(
    net: torch.nn.Module,
    data: list,
    micro: int,
    legality_games: int | None,
    chosen: set[int] | None = None,
) -> dict:
    """The seed's evaluate(): State/python-chess per token, probabilities on the CPU;
    legality on ``chosen`` games (default: ``legality_games`` evenly spaced ones)."""
    net.eval()
    total, phase_n, phase_correct = Counter(), Counter(), Counter()
    sample = min(len(data), legality_games) if legality_games is not None else len(data)
    if chosen is None:
        chosen = {i * len(data) // sample for i in range(sample)}
    for offset in range(0, len(data), micro):
        samples = data[offset : offset + micro]
        x, y = batching.collate(samples, "cpu")
        logits = net(x)
        total["nll_sum"] += F.cross_entropy(
            logits.float().reshape(-1, 128), y.reshape(-1), ignore_index=-100, reduction="sum"
        ).item()
        probs = logits.float().softmax(-1)
        pred = probs.argmax(-1)
        valid = y.ne(-100)
        total["targets"] += int(valid.sum())
        total["reserved"] += float((probs[:, :, 72:].sum(-1) * valid).sum())
        positions = torch.arange(y.shape[1]).unsqueeze(0)
        for phase, index in (("source", 0), ("destination", 1), ("promotion", 2), ("eos", None)):
            sel = valid & (
                y.eq(EOS) if index is None else (positions.remainder(3).eq(index) & y.ne(EOS))
            )
            phase_n[phase] += int(sel.sum())
            phase_correct[phase] += int((sel & pred.eq(y)).sum())
        for row, game in enumerate(samples):
            if offset + row not in chosen:
                continue
            total["legality_games"] += 1
            state = State()
            state.feed(BOS)
            for pos, target in enumerate(game[1:].tolist()):
                total["legality_targets"] += 1
                legal = torch.tensor(state.mask(legal=True), dtype=torch.bool)
                total["illegal"] += probs[row, pos, ~legal].sum().item()
                if pos % 3 == 0 and target != EOS:
                    total["moves"] += 1
                    try:
                        move = decode_move(pred[row, pos : pos + 3].tolist())
                        total["legal_triples"] += int(move in state.board.legal_moves)
                    except ValueError:
                        pass
                state.feed(target)
    return {
        "nll": total["nll_sum"] / total["targets"],
        "valid_targets": total["targets"],
        "phase_accuracy": {p: phase_correct[p] / n if n else None for p, n in phase_n.items()},
        "phase_counts": dict(phase_n),
        "teacher_forced_triple_legality": total["legal_triples"] / max(1, total["moves"]),
        "raw_reserved_probability": total["reserved"] / total["targets"],
        "raw_illegal_token_probability": total["illegal"] / max(1, total["legality_targets"]),
        "legality_games": total["legality_games"],
        "legality_targets": total["legality_targets"],
    }


def trained_a_little(cache: TokenCache) -> torch.nn.Module:
    """A tiny model nudged towards the data, so argmax triples are sometimes legal."""
    torch.manual_seed(1)
    net = gpt.build("tiny")
    opt = torch.optim.AdamW(net.parameters(), lr=3e-3)
    games = [cache.train[i] for i in range(len(cache.train))]
    for _ in range(25):
        opt.zero_grad()
        batching.backward_group(
            net, games, [list(range(len(games)))], micro=len(games), rank=0, world=1, device="cpu"
        )
        opt.step()
    return net


@pytest.mark.parametrize("legality_games", [None, 4])
def test_device_metrics_match_the_python_chess_reference(tiny_cache: Path, legality_games) -> None:
    cache = TokenCache(tiny_cache, verify=True)
    net = trained_a_little(cache)
    data = validation.ValidationSet(cache, torch.device("cpu"), legality_games=legality_games)
    got = validation.evaluate(net, data, micro=4)
    want = reference(
        net, [cache.validation[i] for i in range(len(cache.validation))], 4, legality_games
    )
    for key in ("valid_targets", "phase_counts", "legality_games", "legality_targets"):
        assert got[key] == want[key], key
    for key in (
        "nll",
        "teacher_forced_triple_legality",
        "raw_reserved_probability",
        "raw_illegal_token_probability",
    ):
        assert got[key] == pytest.approx(want[key], rel=1e-5, abs=1e-9), key
    for phase, value in want["phase_accuracy"].items():
        assert got["phase_accuracy"][phase] == pytest.approx(value), phase
    assert 0 < got["teacher_forced_triple_legality"] < 1  # the test exercises both outcomes
    assert set(got) >= {"games", "seconds", "protocol", "legality_subset"}


@pytest.mark.parametrize(
    "legality_games,chosen",
    [(None, {0, 1, 3, 4}), (2, {0, 3})],  # the cache's subset of 6: 6 * i // 4 for i < 4
)
def test_legality_is_scored_within_the_caches_subset_and_nll_on_every_game(
    tmp_path: Path, legality_games: int | None, chosen: set[int]
) -> None:
    from tests.conftest import make_cache

    cache = TokenCache(make_cache(tmp_path, n_train=24, n_val=6, legality_games=4))
    assert cache.legality_games().tolist() == [0, 1, 3, 4]
    assert cache.meta["legality_games"] == {"bound": 4, "games": 4}
    net = trained_a_little(cache)
    data = validation.ValidationSet(cache, torch.device("cpu"), legality_games=legality_games)
    got = validation.evaluate(net, data, micro=4)
    games = [cache.validation[i] for i in range(len(cache.validation))]
    want = reference(net, games, 4, None, chosen)
    assert got["games"] == 6 and got["valid_targets"] == want["valid_targets"]
    for key in ("legality_games", "legality_targets"):
        assert got[key] == want[key], key
    for key in ("nll", "teacher_forced_triple_legality", "raw_illegal_token_probability"):
        assert got[key] == pytest.approx(want[key], rel=1e-5, abs=1e-9), key


def test_asking_for_more_legality_games_than_the_cache_holds_is_one_clear_error(
    tmp_path: Path,
) -> None:
    from tests.conftest import make_cache

    cache = TokenCache(make_cache(tmp_path, n_train=4, n_val=6, legality_games=4))
    with pytest.raises(ValueError, match=r"legality_eval_games is 5, .* for 4 of 6 validation"):
        validation.ValidationSet(cache, torch.device("cpu"), legality_games=5)


def test_more_legality_games_than_a_whole_split_with_tables_is_an_error_too(
    tmp_path: Path,
) -> None:
    """Every validation game has tables (bound above the split): more than the split is still
    more than the cache holds, not silently all of it."""
    from tests.conftest import make_cache

    cache = TokenCache(make_cache(tmp_path, n_train=4, n_val=6))
    assert len(cache.legality_games()) == 6
    with pytest.raises(ValueError, match=r"legality_eval_games is 7, .* for 6 of 6 validation"):
        validation.ValidationSet(cache, torch.device("cpu"), legality_games=7)


def test_deadline_cut_validation_returns_none(tiny_cache: Path) -> None:
    cache = TokenCache(tiny_cache)
    data = validation.ValidationSet(cache, torch.device("cpu"), legality_games=None)
    assert validation.evaluate(gpt.build("tiny"), data, deadline=Deadline(0.0)) is None
