"""The outcome head (``runs.NAME.outcome``): where its targets sit and what they say, its loss,
the model without it (today's, bit for bit), the probe, and the engine's score. Its two-rank
gloo runs that resume bitwise, padded and packed, and its refused resume run with every head at
once: tests/workflow/test_human_time.py."""

from __future__ import annotations

import json
from pathlib import Path

import chess
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from chesslm.data import metadata, tokens
from chesslm.data.cache import TokenCache
from chesslm.model import checkpoint, gpt, weights
from chesslm.model.outcome import positions, side_counts, targets
from chesslm.model.presets import BASELINE_PARAMETERS, OUTCOME_CLASSES
from chesslm.train import batching, outcome, validation
from chesslm.train.loss import IGNORE
from chesslm.train.outcome import Outcomes
from chesslm.train.prefix import Prefixes
from tests.conftest import (
    run_segment,
)
from tests.helpers import assert_same_gradients, graphs_beside_default

# the tiny preset's state_dict keys before the outcome head existed (commit 82394f1)
TODAYS_KEYS = [
    "transformer.wte.weight",
    "transformer.wpe.weight",
    *(
        f"transformer.h.{i}.{name}"
        for i in range(2)
        for name in (
            "ln_1.weight",
            "ln_1.bias",
            "attn.c_attn.weight",
            "attn.c_attn.bias",
            "attn.c_proj.weight",
            "attn.c_proj.bias",
            "ln_2.weight",
            "ln_2.bias",
            "mlp.c_fc.weight",
            "mlp.c_fc.bias",
            "mlp.c_proj.weight",
            "mlp.c_proj.bias",
        )
    ),
    "transformer.ln_f.weight",
    "transformer.ln_f.bias",
    "lm_head.weight",
]


def mover_class(board: chess.Board, result: str) -> int:
    """python-chess's side to move against the PGN result: the target's meaning."""
    if result == "1/2-1/2":
        return OUTCOME_CLASSES.index("draw")
    white_won = result == "1-0"
    return OUTCOME_CLASSES.index("win" if white_won == (board.turn == chess.WHITE) else "loss")


def decode(game: np.ndarray) -> list[chess.Move]:
    plies = (len(game) - 2) // 3
    return [tokens.decode_move([int(t) for t in game[1 + 3 * k : 4 + 3 * k]]) for k in range(plies)]


@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
@pytest.mark.parametrize("layout", ["none", "elo"])
def test_targets_sit_where_the_next_move_is_predicted_and_say_the_movers_result(
    outcome_cache: Path, packed: bool, layout: str
) -> None:
    cache = TokenCache(outcome_cache)
    games, n = cache.train, 10
    outcomes = Outcomes.of_cache(cache, "train")
    prefixes = Prefixes("elo", np.full(n, 1500), np.full(n, 1500)) if layout == "elo" else None
    P = 0 if prefixes is None else 2
    if packed:
        rows = [list(range(0, 5)), list(range(5, n))]
        pre = None if prefixes is None else [prefixes(r) for r in rows]
        x, y, pos, doc = batching.collate_packed(games, rows, "cpu", row_tokens=1024, prefixes=pre)
        o = outcomes.targets(games, rows, tuple(y.shape), prefix=P, packed=True)
        # each game's document starts where its positions restart (the row's tail is padding)
        starts = [(r, int(s)) for r in range(2) for s in torch.nonzero(pos[r] == 0).flatten()]
        places = [(r, s + P) for r, s in starts if doc[r, s] < len(rows[r])]
        order = [i for row in rows for i in row]
    else:
        order = list(range(n))
        x, y = batching.collate(
            [games[i] for i in order], "cpu", prefixes=prefixes and prefixes(order)
        )
        o = outcomes.targets(games, order, tuple(y.shape), prefix=P)
        places = [(r, P) for r in range(n)]
    seen = 0
    assert len(places) == n
    for (r, bos), i in zip(places, order, strict=True):
        game = games[i]
        assert x[r, bos] == tokens.BOS
        result = int(outcomes([i])[0])
        board = chess.Board()
        moves = decode(game)
        for k in range(len(moves) + 1):
            t = bos + 3 * k
            # the next move's source (or EOS) is predicted here: the position after k plies
            assert y[r, t] == (tokens.EOS if k == len(moves) else game[1 + 3 * k])
            want = IGNORE if result < 0 else mover_class(board, metadata.RESULTS[result])
            assert o[r, t] == want, (i, k)
            seen += want != IGNORE
            if k < len(moves):
                assert o[r, t + 1] == IGNORE and o[r, t + 2] == IGNORE
                board.push(moves[k])
    assert (
        int(o.ne(IGNORE).sum()) == seen == outcomes.count(games, rows if packed else order, packed)
    )
    assert seen > 0 and int(outcomes(order).min()) == -1  # an unknown result is among them


def test_the_loss_is_the_game_by_game_cross_entropy(outcome_cache: Path) -> None:
    cache = TokenCache(outcome_cache)
    games, outcomes = cache.train, Outcomes.of_cache(cache, "train", weight=0.5)
    torch.manual_seed(0)
    net = gpt.build("tiny", outcome=True)
    group = [[0, 1], [2, 3, 4]]
    values = batching.backward_group(
        net, games, group, micro=3, rank=0, world=1, device="cpu", outcomes=outcomes
    )
    moves = results = 0.0
    counted = 0
    for i in range(5):
        full = torch.tensor(games[i], dtype=torch.long)
        logits, heads = net(full[None, :-1], outcome=True)
        moves += F.cross_entropy(logits[0], full[1:], reduction="sum").item()
        o = outcome.padded_targets(outcomes([i]), [len(full)], (1, len(full) - 1), prefix=0)[0]
        results += F.cross_entropy(heads[0], o, ignore_index=IGNORE, reduction="sum").item()
        counted += int(o.ne(IGNORE).sum())
    assert values["loss_sum"] == pytest.approx(moves, rel=1e-5)
    assert values["outcome_loss_sum"] == pytest.approx(results, rel=1e-5)
    assert values["outcome_targets"] == counted > 0
    assert net.outcome_head.weight.grad.abs().sum() > 0


def test_the_graphs_path_keeps_the_outcome_gradient(outcome_cache: Path) -> None:
    """``cuda_graphs.MicrobatchGraphs`` (uncaptured on the CPU: the same static buffers)
    against the default path, packed rows and padded games."""
    cache = TokenCache(outcome_cache)
    games, outcomes = cache.train, Outcomes.of_cache(cache, "train", weight=0.3)
    for a, values, b, sb in graphs_beside_default(games, {"outcome": True}, outcomes=outcomes):
        sa = [values["loss_sum"], values["outcome_loss_sum"], values["outcome_targets"]]
        assert sb[3] == pytest.approx(sa[1], rel=1e-5) and sb[4] == sa[2] > 0
        assert_same_gradients(a, b)


def test_without_the_head_the_model_and_its_update_are_todays() -> None:
    torch.manual_seed(0)
    plain = gpt.build("tiny")
    torch.manual_seed(0)
    headed = gpt.build("tiny", outcome=True)
    assert list(plain.state_dict()) == TODAYS_KEYS and not hasattr(plain, "outcome_head")
    # the head is initialised last: the trunk's weights are drawn as without it
    for name, tensor in plain.state_dict().items():
        assert torch.equal(tensor, headed.state_dict()[name]), name
    assert set(headed.state_dict()) - set(plain.state_dict()) == {
        "outcome_head.weight",
        "outcome_head.bias",
    }
    with pytest.raises(ValueError, match="GPTConfig.outcome"):
        plain(torch.tensor([[tokens.BOS]]), outcome=True)
    # the update without outcomes: exactly the summed cross-entropy of before, bit for bit
    from .test_batching import games_fixture

    games, group = games_fixture(), [[0, 1], [2, 3], [4]]
    values = batching.backward_group(plain, games, group, micro=2, rank=0, world=1, device="cpu")
    assert set(values) == {"loss_sum", "valid_targets", "padded_tokens"}
    torch.manual_seed(0)
    twin = gpt.build("tiny")
    total = sum(len(g) - 1 for g in games)
    for part in ([0, 1], [2, 3], [4]):
        x, y = batching.collate([games[i] for i in part], "cpu")
        loss = F.cross_entropy(
            twin(x).view(-1, 128), y.view(-1), ignore_index=IGNORE, reduction="sum"
        )
        (loss * (1 / float(total))).backward()
    for (name, p), q in zip(plain.named_parameters(), twin.parameters(), strict=True):
        assert torch.equal(p.grad, q.grad), name


def test_the_baseline_with_the_head_has_its_parameters_and_a_checkpoint_reloads_it() -> None:
    with torch.device("meta"):
        net = gpt.build("baseline", device="meta", outcome=True)
    assert net.num_parameters() == BASELINE_PARAMETERS + 3 * 768 + 3 == 85_943_043
    torch.manual_seed(0)
    net = gpt.build("tiny", outcome=True)
    payload = {
        "model": net.state_dict(),
        "identity": {"model": {"preset": "tiny", **net.config.to_dict()}},
    }
    loaded = weights.model_of(payload, "x.pt", "cpu")
    assert loaded.config.outcome and torch.equal(
        loaded.outcome_head.weight, net.outcome_head.weight
    )
    del payload["identity"]["model"]["outcome"]  # a checkpoint from before the head
    with pytest.raises(checkpoint.CheckpointError, match="unexpected: outcome_head"):
        weights.model_of(payload, "x.pt", "cpu")


def test_validation_reports_the_outcome_nll_and_the_frequency_baseline(
    outcome_cache: Path,
) -> None:
    cache = TokenCache(outcome_cache)
    cpu = torch.device("cpu")
    torch.manual_seed(0)
    net = gpt.build("tiny", outcome=True)
    plain = validation.evaluate(net, validation.ValidationSet(cache, cpu, legality_games=None))
    data = validation.ValidationSet(cache, cpu, legality_games=None, outcome=True)
    both = validation.evaluate(net, data)
    assert "outcome" not in plain
    assert {k: v for k, v in both.items() if k not in ("outcome", "seconds")} == {
        k: v for k, v in plain.items() if k != "seconds"
    }
    o = both["outcome"]
    results = Outcomes.of_cache(cache, "validation")(range(len(cache.validation)))
    assert o["unknown_games"] == int((results < 0).sum()) == 1 and o["games"] == 5
    total = counted = 0.0
    for i in range(len(cache.validation)):
        full = torch.tensor(cache.validation[i], dtype=torch.long)
        with torch.no_grad():
            heads = net(full[None, :-1], outcome=True)[1][0]
        t = outcome.padded_targets(results[i : i + 1], [len(full)], (1, len(full) - 1), prefix=0)
        total += F.cross_entropy(heads, t[0], ignore_index=IGNORE, reduction="sum").item()
        counted += int(t.ne(IGNORE).sum())
    assert o["targets"] == counted and o["nll"] == pytest.approx(total / counted, rel=1e-5)
    # the baseline: the train split's class shares by side to move, scored on these targets
    train = Outcomes.of_cache(cache, "train")(range(len(cache.train)))
    lengths = np.diff(np.asarray(cache.train.offsets))
    counts = side_counts(lengths, train) + 1.0
    p = counts / counts.sum(1, keepdims=True)
    nll = 0.0
    for i, r in enumerate(results):
        for k in range(positions(len(cache.validation[i])) if r >= 0 else 0):
            nll -= np.log(p[k % 2, targets(r, k)])
    assert o["baseline_nll"] == pytest.approx(nll / counted, rel=1e-9)


def test_the_probe_runs_the_head(outcome_cache: Path, tmp_path: Path) -> None:
    out = tmp_path / "probe-results.json"
    args = ["probe", f"--cache={outcome_cache}", f"--run-dir={tmp_path}", f"--probe-out={out}"]
    result = run_segment([*args, "--model=tiny", "--outcome=on"])
    assert result.returncode == 0, result.stderr[-3000:]
    probe = json.loads(out.read_text())
    assert probe["status"] == "passed" and probe["outcome"] is True
    assert probe["parameters"] == gpt.build("tiny", outcome=True).num_parameters()


# ------------------------------------------------------------------ the UCI engine's score


def uci_engine(ckpt: Path) -> chess.engine.SimpleEngine:
    import os
    import sys

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "chesslm.engine.uci", "--checkpoint", str(ckpt)]
    return chess.engine.SimpleEngine.popen_uci(command, env=env, timeout=120)


def head_wdl(net: gpt.GPT, board: chess.Board, extra: chess.Move | None = None) -> list[float]:
    """The head's win/draw/loss from the side to move after ``board`` (and ``extra``)."""
    moves = [*board.move_stack, *([extra] if extra else [])]
    game = [tokens.BOS] + [t for m in moves for t in tokens.move_tokens(m)]
    with torch.no_grad():
        return net(torch.tensor([game]), outcome=True)[1][0, -1].softmax(-1).tolist()


def test_the_engines_score_at_multipv_1_comes_from_its_scoring_passes(tmp_path: Path) -> None:
    """With MultiPV 1, a go runs the game's KV-cache step and one pass over the legal moves'
    branches (``chesslm.engine.kvcache``): the head's W/D/L is read off the step's last hidden
    state, no pass of its own (the score equal to a plain forward's); the same position again
    with MultiPV 3 steps its last token, its branches and one pass over its lines' children."""
    from chesslm.engine import session, wdl
    from tests.helpers import model_checkpoint

    net = weights.load_model(model_checkpoint(tmp_path / "o.pt", spread=0.3, outcome=True), "cpu")
    passes = []
    hook = net.transformer.wte.register_forward_hook(lambda *_: passes.append(1))
    sent: list[str] = []
    engine = session.Engine(net, sent.append)
    engine.handle("position startpos moves e2e4 c7c5")
    engine.handle("setoption name UCI_ShowWDL value true")
    engine.handle("go nodes 1")
    one = len(passes)
    engine.handle("setoption name MultiPV value 3")
    engine.handle("go nodes 1")
    hook.remove()
    assert (one, len(passes) - one) == (2, 3)
    w, d, l_ = head_wdl(net, engine.board)
    (line,) = [t for t in sent if t.startswith("info depth") and " multipv 1 " in t][:1]
    assert wdl.score_words([w, d, l_], show_wdl=True) in line, line


def test_the_engine_scores_from_the_head_and_a_plain_checkpoint_does_not(tmp_path: Path) -> None:
    from chesslm.engine import wdl
    from tests.helpers import model_checkpoint

    ckpt = model_checkpoint(tmp_path / "outcome.pt", spread=0.3, outcome=True)
    net = weights.load_model(ckpt, "cpu")
    board = chess.Board()
    for text in ("e2e4", "c7c5", "g1f3"):
        board.push_uci(text)  # Black to move: the score is Black's
    w, d, l_ = head_wdl(net, board)
    with uci_engine(ckpt) as engine:
        plain = engine.analyse(board, chess.engine.Limit(nodes=1))
        engine.configure({"UCI_ShowWDL": True})
        info = engine.analyse(board, chess.engine.Limit(nodes=1))
        lines = engine.analyse(board, chess.engine.Limit(nodes=1), multipv=3)
    assert "wdl" not in plain and plain["score"] == info["score"]
    assert info["score"].relative.score() == wdl.centipawns(w + d / 2)
    assert info["score"].turn == chess.BLACK
    assert list(info["wdl"].relative) == wdl.permille([w, d, l_])
    assert sum(info["wdl"].relative) == 1000
    for line in lines:  # each line: the position after its move, flipped to the engine's side
        cw, cd, cl = head_wdl(net, board, line["pv"][0])
        assert list(line["wdl"].relative) == wdl.permille([cl, cd, cw])
        assert line["score"].relative.score() == wdl.centipawns(cl + cd / 2)
    plain_ckpt = model_checkpoint(tmp_path / "plain.pt", spread=0.3)
    with uci_engine(plain_ckpt) as engine:
        engine.configure({"UCI_ShowWDL": True})
        info = engine.analyse(board, chess.engine.Limit(nodes=1), info=chess.engine.INFO_ALL)
    assert "score" not in info and "wdl" not in info and "pv" in info
