"""Training with the rating prefix (``conditioning: elo``): batches, validation, the model's
size, the context check, and a two-rank gloo run's best.pt playing with ratings (its bitwise
resume, with every other head on: tests/workflow/test_human_time.py)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from chesslm.data import conditioning, tokens
from chesslm.data.cache import TokenCache
from chesslm.model import checkpoint, gpt
from chesslm.model.presets import BASELINE_PARAMETERS
from chesslm.train import batching, validation
from chesslm.train.loss import IGNORE
from chesslm.train.prefix import Prefixes, context_error, longest_game
from chesslm.train.settings import RunSettings
from tests.conftest import RESUME_HYPER, train_ok
from tests.playkit import SETTINGS

GAMES = [np.array([69, 1, 2, 64, 70]), np.array([69, 70])]
PREFIX = Prefixes("elo", np.array([1523, -1]), np.array([900, 3400]))


def test_a_padded_batch_feeds_the_prefix_and_targets_moves_only() -> None:
    x, y = batching.collate(GAMES, "cpu", prefixes=PREFIX([0, 1]))
    assert x.tolist() == [[81, 103, 69, 1, 2, 64], [72, 127, 69, 71, 71, 71]]
    # inputs W and B would predict B and BOS: ignored; BOS predicts the first source square
    assert y.tolist() == [[IGNORE, IGNORE, 1, 2, 64, 70], [IGNORE, IGNORE, 70] + [IGNORE] * 3]
    plain_x, plain_y = batching.collate(GAMES, "cpu")
    assert torch.equal(y[:, 2:], plain_y) and torch.equal(x[:, 2:], plain_x)


def test_a_packed_row_keeps_each_prefix_in_its_games_document() -> None:
    x, y, pos, doc = batching.collate_packed(
        GAMES, [[0, 1]], "cpu", row_tokens=10, prefixes=[PREFIX([0, 1])]
    )
    assert x.tolist() == [[81, 103, 69, 1, 2, 64, 72, 127, 69, 71]]
    assert y.tolist() == [[IGNORE, IGNORE, 1, 2, 64, 70, IGNORE, IGNORE, 70, IGNORE]]
    assert pos.tolist() == [[0, 1, 2, 3, 4, 5, 0, 1, 2, 0]]
    assert doc.tolist() == [[0, 0, 0, 0, 0, 0, 1, 1, 1, 2]]


def test_packed_rows_count_the_prefix_in_their_budget() -> None:
    lengths = np.random.default_rng(1).integers(2, 40, 500)
    for extra in (0, 2):
        rows = batching.pack_rows(lengths, epoch=0, seed=3, row_tokens=64, prefix=extra)
        assert sorted(int(i) for r in rows for i in r) == list(range(500))
        assert max(sum(int(lengths[i]) - 1 + extra for i in r) for r in rows) <= 64
    with pytest.raises(ValueError, match="rows hold 64 inputs"):
        batching.pack_rows([64], epoch=0, seed=3, row_tokens=64, prefix=2)


def test_the_training_loss_counts_move_targets_only(rated_cache: Path) -> None:
    cache = TokenCache(rated_cache)
    prefixes = Prefixes.of_cache(cache, "train", "elo")
    games = cache.train
    torch.manual_seed(0)
    net = gpt.build("tiny")
    group = [[0, 1], [2, 3]]
    values = batching.backward_group(
        net, games, group, micro=2, rank=0, world=1, device="cpu", prefixes=prefixes
    )
    assert values["valid_targets"] == sum(len(games[i]) - 1 for i in range(4))
    # the same loss as a game-by-game reference: logits from BOS on against the moves
    reference = 0.0
    for i in range(4):
        full = torch.tensor(np.concatenate([prefixes([i])[0], games[i]]), dtype=torch.long)
        logits = net(full[None, :-1])[0, 2:]
        reference += F.cross_entropy(logits, full[3:], reduction="sum").item()
    assert values["loss_sum"] == pytest.approx(reference, rel=1e-5)


def test_no_target_of_a_conditioned_batch_is_a_reserved_id(rated_cache: Path) -> None:
    cache = TokenCache(rated_cache)
    prefixes = Prefixes.of_cache(cache, "train", "elo")
    index = list(range(len(cache.train)))
    x, y = batching.collate([cache.train[i] for i in index], "cpu", prefixes=prefixes(index))
    targets = y[y.ne(IGNORE)]
    assert targets.numel() == sum(len(cache.train[i]) - 1 for i in index)
    assert int(targets.max()) < tokens.FIRST_RESERVED
    assert x[:, :2].min() >= tokens.FIRST_RESERVED  # the inputs do carry the ratings
    meta = cache.metadata("train")
    pairs = zip(meta["white_elo"], meta["black_elo"], strict=True)
    assert x[:, :2].tolist() == [conditioning.prefix(w, b) for w, b in pairs]


def test_the_baseline_keeps_its_parameter_count_with_conditioning_on() -> None:
    settings = RunSettings(dataset="d", model="baseline", conditioning="elo")
    with torch.device("meta"):  # no memory, and the tied head stays tied (``.to`` unties it)
        net = gpt.build(settings.model, device="meta")
    assert net.num_parameters() == BASELINE_PARAMETERS == 85_940_736
    # every prefix id is an embedding row the model already has
    assert conditioning.BLACK_FIRST + conditioning.BINS - 1 < net.config.vocab_size


def test_conditioned_validation_counts_the_moves_of_the_unconditioned_one(
    rated_cache: Path,
) -> None:
    cache = TokenCache(rated_cache)
    torch.manual_seed(0)
    net = gpt.build("tiny")
    cpu = torch.device("cpu")
    plain = validation.evaluate(net, validation.ValidationSet(cache, cpu, legality_games=None))
    data = validation.ValidationSet(cache, cpu, legality_games=None, conditioning="elo")
    rated = validation.evaluate(net, data)
    for key in ("valid_targets", "phase_counts", "legality_targets", "legality_games"):
        assert rated[key] == plain[key], key
    assert rated["nll"] != plain["nll"]  # the prefix reached the model
    assert 0.0 < rated["raw_reserved_probability"] < 1.0
    total = 0.0
    for i in range(len(data)):  # reference: one game at a time, logits from BOS on
        full = torch.tensor(np.concatenate([data.prefixes([i])[0], data.games[i]]))
        with torch.no_grad():
            logits = net(full[None, :-1].long())[0, 2:]
        total += F.cross_entropy(logits, full[3:].long(), reduction="sum").item()
    assert rated["nll"] == pytest.approx(total / rated["valid_targets"], rel=1e-5)


def test_the_context_check_counts_the_prefix_exactly() -> None:
    assert longest_game(1024) == 1022 and longest_game(1025) == 1025
    assert context_error("elo", context=1024, model_context=1024, key="runs.r.conditioning") is None
    assert context_error("none", context=1025, model_context=1024, key="k") is None
    error = context_error("elo", context=1025, model_context=1024, key="runs.r.conditioning")
    assert error.startswith("runs.r.conditioning is elo:") and "1026 inputs" in error
    assert "\n" not in error


# ------------------------------------------------------------------ two gloo ranks, played

HYPER = [
    *RESUME_HYPER,
    "--dataset=rated",
    "--conditioning=elo",
]


@pytest.mark.slow
def test_a_conditioned_runs_best_pt_plays_with_ratings(rated_cache: Path, tmp_path: Path) -> None:
    """A two-rank conditioned run's own best.pt (its bitwise resume, with every other head
    on: tests/workflow/test_human_time.py)."""
    run_dir = tmp_path / "run"
    train_ok(rated_cache, run_dir, 0, *HYPER, "--packing=off")
    identity = checkpoint.load(run_dir / "train/last.pt")["identity"]
    assert conditioning.of_identity(identity) == "elo"
    assert identity["tokenizer"]["layout"] == conditioning.LAYOUT_VERSION["elo"]
    history = json.loads((run_dir / "train/results.json").read_text())["history"]
    assert history[-1]["validation"]["valid_targets"] > 0
    plays_with_ratings(run_dir, rated_cache)


def plays_with_ratings(run_dir: Path, cache: Path) -> None:
    """The run's own best.pt: its play evaluation reads each game's ratings and scores
    the same positions at counterfactual ones; the UCI engine builds its prefix from the
    rating options."""
    import chess
    import chess.engine
    import pandas as pd

    from chesslm.play import evaluate
    from chesslm.scorer.settings import PlaySettings

    typed = PlaySettings.from_dict

    settings = json.loads(json.dumps(SETTINGS))  # tests/playkit.py's, no ladder games
    settings["elo"]["games_per_anchor"] = 0
    settings["ratings"] = {"self": 1900, "opponent": 1100}
    out = evaluate.run(run_dir, typed(settings), {"rated": cache}, device="cpu")
    match = json.loads(out["move_match"].read_text())
    assert match["datasets"]["rated"]["complete"]
    table = pd.read_csv(out["counterfactual_table"])
    overall = table[(table["grouping"] == "overall") & (table["protocol"] == "all")]
    by = overall.set_index("setting")
    assert list(by.index) == ["true", "1100", "1900"] and by.loc["true", "tv"] == 0
    assert by.loc["1100", "tv"] > 0 and by.loc["1900", "tv"] > 0
    assert json.loads(out["legality"].read_text())["ratings"]["ratings"] == settings["ratings"]
    board = chess.Board()
    board.push_uci("e2e4")  # Black to move: the engine's own rating is Black's
    command = [
        sys.executable,
        "-m",
        "chesslm.engine.uci",
        "--checkpoint",
        str(run_dir / "train/best.pt"),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with chess.engine.SimpleEngine.popen_uci(command, env=env, timeout=120) as engine:
        engine.configure({"SelfElo": 2100, "OppoElo": 1000})
        result = engine.play(board, chess.engine.Limit(nodes=1), info=chess.engine.INFO_ALL)
    assert result.move in board.legal_moves
    assert f"prefix {conditioning.prefix(1000, 2100)}" in result.info.get("string", "")
