"""The export carries human time (issue 48 item 5): ``human_time.safetensors`` (the time
embedding and the think-time head), named in ``config.json`` and listed in ``SHA256SUMS``; the
folder plays as the checkpoint; and the card's code, run where ``import chesslm`` fails, takes
the clocks and the time control and gives the move probabilities, the outcome and the
think-time distribution equal to the project's (<= 1e-5)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import chess
import numpy as np
import pytest
import torch

from chesslm.data import tokens
from chesslm.engine import session
from chesslm.export import gpt2
from chesslm.model import checkpoint, gpt, human_time
from chesslm.scorer import scoring, times
from tests.helpers import small_payload
from tests.workflow.test_export import card_block, export_of, sample_positions

pytest.importorskip("transformers", reason="the card's code needs transformers")


def timed_checkpoint(path: Path) -> Path:
    """The tiny preset with the outcome head, the time inputs and the think-time head, every
    weight perturbed (the time rows and the head far from their start)."""
    torch.manual_seed(0)
    net = gpt.build("tiny", outcome=True, time_inputs=True, think_time=True)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.3 * torch.randn_like(p))
        net.time_embedding.weight[human_time.NONE].zero_()  # as training keeps it
    payload = small_payload()
    payload["model"] = net.state_dict()
    payload["identity"] = {"model": {"preset": "tiny", **net.config.to_dict()}}
    checkpoint.save(path, payload)
    return path


@pytest.fixture(scope="module")
def timed_export(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("timed")
    ckpt = timed_checkpoint(tmp / "best.pt")
    return {"ckpt": ckpt, "paths": export_of(ckpt, tmp / "export"), "tmp": tmp}


def test_human_time_is_exported_sealed_and_named(timed_export: dict) -> None:
    from chesslm import seal
    from chesslm.export.load import model_at

    paths = timed_export["paths"]
    folder = paths["weights"].parent
    assert paths["human_time"] == folder / "human_time.safetensors"
    assert "human_time.safetensors" in seal.read_sums(folder, "")
    config = json.loads(paths["config"].read_text())[gpt2.HUMAN_TIME_KEY]
    assert config["file"] == "human_time.safetensors" and config["think_time"]
    assert config["bin_edges_seconds"] == list(human_time.EDGES)
    assert "human time" in paths["card"].read_text()
    net, back = model_at(timed_export["ckpt"], "cpu"), model_at(folder, "cpu")
    assert back.config.time_inputs and back.config.think_time
    for name, tensor in net.state_dict().items():
        torch.testing.assert_close(back.state_dict()[name], tensor, msg=name)
    again = export_of(timed_export["ckpt"], timed_export["tmp"] / "again")
    assert again["human_time"].read_bytes() == paths["human_time"].read_bytes()


def project_heads(net: gpt.GPT, moves: list[str], rows: np.ndarray) -> list[list[float]]:
    """The project's outcome and think-time distributions after ``moves`` with these rows."""
    game = [tokens.BOS] + [t for m in moves for t in tokens.move_tokens(chess.Move.from_uci(m))]
    x = torch.tensor([game])
    time = torch.zeros((1, len(game), 4), dtype=torch.long)
    time[0, ::3] = torch.from_numpy(rows)
    with torch.no_grad():
        _, outcome, think = net(x, time=time, outcome=True, think_time=True)
    return [z[0, -1].softmax(-1).tolist() for z in (outcome, think)]


def project_moves(net: gpt.GPT, moves: list[str], rows: np.ndarray) -> dict[str, float]:
    board = chess.Board()
    for text in moves:
        board.push_uci(text)
    codes, logp, *_ = session.position_scores(net, board, "cpu", [], rows)
    return {scoring.decode_code(c).uci(): math.exp(v) for c, v in zip(codes, logp.tolist(),
                                                                       strict=True)}  # fmt: skip


def test_the_cards_code_gives_the_projects_think_time_and_moves_with_clocks(
    timed_export: dict,
) -> None:
    from chesslm.model.weights import load_model

    folder = timed_export["paths"]["weights"].parent
    positions = sample_positions()
    rng = np.random.default_rng(48)
    cases = {}
    for name, moves in positions.items():  # readings after each move, some unknown
        clocks = [float(v) for v in 180 - np.cumsum(rng.integers(0, 9, len(moves)))]
        clocks[len(clocks) // 2 :: 7] = [None] * len(clocks[len(clocks) // 2 :: 7])
        cases[name] = {"moves": moves, "clocks": clocks, "base": 180, "increment": 2}
    cases["unknown"] = {"moves": ["e2e4"], "clocks": None, "base": None, "increment": None}
    probe = (
        "import sys, json\nsys.modules['chesslm'] = None  # import chesslm fails\n"
        + card_block(folder)
        + "\ncs = json.loads(sys.argv[1])\nprint(json.dumps({k: [think_time(c['moves'],"
        " c['clocks'], c['base'], c['increment']), move_probabilities(c['moves'], None, None,"
        " c['clocks'], c['base'], c['increment']), outcome(c['moves'], None, None, c['clocks'],"
        " c['base'], c['increment'])] for k, c in cs.items()}))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe, json.dumps(cases)], cwd=folder,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    net = load_model(str(timed_export["ckpt"]), "cpu")
    for name, case in cases.items():
        clocks = case["clocks"] or [None] * len(case["moves"])
        readings = np.array([-1.0 if c is None else c for c in clocks])
        base = -1 if case["base"] is None else case["base"]
        inc = -1 if case["increment"] is None else case["increment"]
        rows = times.of_game(readings, base, inc)
        think, moves, wdl = got[name]
        want_wdl, want = project_heads(net, case["moves"], rows)
        assert max(abs(a - b) for a, b in zip(wdl.values(), want_wdl, strict=True)) <= 1e-5
        assert [float(k) for k in think] == [float(e) for e in human_time.EDGES]
        assert max(abs(a - b) for a, b in zip(think.values(), want, strict=True)) <= 1e-5, name
        expect = project_moves(net, case["moves"], rows)
        assert max(abs(moves[m] - expect[m]) for m in expect) <= 1e-5, name


@pytest.mark.slow
def test_rule_export_on_a_run_with_the_time_heads_writes_and_seals_every_file(
    staged_run, tmp_path: Path
) -> None:
    """Rule export end to end (real snakemake) on the staged run whose best.pt is given the
    time inputs and the think-time head (issue 64 item 1: the script once took the time file
    for a rule output and failed, leaving it alone in the folder)."""
    from chesslm import seal
    from tests.conftest import STAGED_ARGS
    from tests.helpers import snakemake

    work = staged_run.copy(tmp_path / "work")
    best = work / "results/mini/train/best.pt"
    payload = checkpoint.load(best)
    model = payload["identity"]["model"]
    torch.manual_seed(0)
    net = gpt.build(model["preset"], time_inputs=True, think_time=True)
    missing, _ = net.load_state_dict(payload["model"], strict=False)
    assert missing and all(name.startswith(("time_", "think_")) for name in missing), missing
    with torch.no_grad():
        net.time_embedding.weight[human_time.NONE].zero_()  # as training keeps it
    payload["model"] = net.state_dict()
    payload["identity"]["model"] = {**model, "time_inputs": True, "think_time": True}
    checkpoint.save(best, payload)
    snakemake(work, "results/mini/export/model.safetensors", "--cores", "2",
              *STAGED_ARGS, "--forcerun", "export")  # fmt: skip
    folder = work / "results/mini/export"
    names = {p.name for p in folder.iterdir()}
    assert names == {"model.safetensors", "config.json", "chess-tokenizer.json", "README.md",
                     gpt2.HUMAN_TIME_FILE, seal.SUMS}  # fmt: skip
    listed = {line.split()[-1] for line in (folder / seal.SUMS).read_text().splitlines()}
    assert listed == names - {seal.SUMS}
    assert json.loads((folder / "config.json").read_text())
