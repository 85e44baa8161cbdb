"""The export (chesslm/export, rule export): loaded by transformers' GPT2LMHeadModel, its logits
are this project's model's on real games of the embedded sample; the tokenizer's JSON alone
encodes them as chesslm does; the rule writes the folder and its model card on a real run."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import chess
import chess.engine
import chess.pgn
import pytest
import torch

from chesslm import files
from chesslm.data import tokens
from chesslm.export import gpt2, vocabulary
from chesslm.model import gpt
from tests.conftest import sample_games
from tests.helpers import ROOT, first_games_pgn, model_checkpoint, sample_text

transformers = pytest.importorskip(
    "transformers", reason="loading an export needs the [hf] extra: pip install -e '.[hf]'"
)
TOLERANCE = 1e-4  # max abs logit difference in FP32 (issue 23)


def real_games(n: int = 12) -> list[list[int]]:
    """Token rows (BOS ... EOS) of ``n`` of the sample's first 200 games: the longest half and
    the first half (shorter: padded in a batch)."""
    games = [g.tolist() for g in sample_games(200, max_plies=340)]
    return sorted(games, key=len)[-(n - n // 2) :] + games[: n // 2]


def padded(games: list[list[int]]) -> torch.Tensor:
    width = max(map(len, games))
    return torch.tensor([g + [tokens.PAD] * (width - len(g)) for g in games])


def write_weights(net: gpt.GPT, folder: Path) -> None:
    """config.json and model.safetensors alone, as rule export writes them."""
    folder.mkdir(parents=True, exist_ok=True)
    files.write_json_atomic(folder / "config.json", gpt2.hf_config(net.config))
    tensors = gpt2.hf_state_dict(net.state_dict(), net.config)
    weights = gpt2.weights_bytes(tensors, {"format": "pt"})
    files.write_atomic(folder / "model.safetensors", lambda fh: fh.write(weights))


def hf_model(folder: Path, **overrides: object) -> torch.nn.Module:
    model, info = transformers.GPT2LMHeadModel.from_pretrained(
        folder, output_loading_info=True, **overrides
    )
    assert not any(info.values()), info  # no missing, unexpected or mismatched weights
    return model.eval()


def max_difference(net: gpt.GPT, hf: torch.nn.Module, x: torch.Tensor) -> float:
    with torch.no_grad():
        return float((net(x) - hf(x).logits).abs().max())


@pytest.fixture(scope="module")
def noisy_net(tmp_path_factory: pytest.TempPathFactory) -> gpt.GPT:
    """The tiny preset with every weight (LayerNorm gains and biases too) perturbed, loaded
    from a checkpoint written by the project's saver."""
    from chesslm.model.weights import load_model

    path = model_checkpoint(tmp_path_factory.mktemp("export") / "best.pt", spread=0.3)
    return load_model(str(path), "cpu")


def test_transformers_logits_equal_the_models_on_real_games(noisy_net: gpt.GPT, tmp_path: Path):
    write_weights(noisy_net, tmp_path / "export")
    hf = hf_model(tmp_path / "export")
    assert hf.dtype == torch.float32 and hf.config.vocab_size == tokens.VOCAB_SIZE
    games = real_games()
    assert max(map(len, games)) > 400  # positions far into the context
    assert max_difference(noisy_net, hf, padded(games)) <= TOLERANCE
    for game in games[:3]:  # and unbatched, where no padding follows
        assert max_difference(noisy_net, hf, torch.tensor([game])) <= TOLERANCE
    # the tanh GELU of GPT-2's default config is measurably another model: why "gelu"
    tanh = hf_model(tmp_path / "export", activation_function="gelu_new")
    assert max_difference(noisy_net, tanh, padded(games)) > TOLERANCE


def test_a_model_without_biases_exports_as_zero_biases(tmp_path: Path) -> None:
    torch.manual_seed(1)
    net = gpt.GPT(gpt.GPTConfig(n_layer=2, n_head=2, n_embd=32, bias=False)).eval()
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.3 * torch.randn_like(p))
    write_weights(net, tmp_path / "export")
    assert max_difference(net, hf_model(tmp_path / "export"), padded(real_games(4))) <= TOLERANCE


def test_the_baseline_config_is_gpt2_small_with_the_baselines_parameters() -> None:
    config = transformers.GPT2Config(**gpt2.hf_config(gpt.config_for("baseline")))
    with torch.device("meta"):  # shapes only: no 344 MB of weights
        hf = transformers.GPT2LMHeadModel(config)
    assert hf.num_parameters() == gpt.BASELINE_PARAMETERS  # the tied head counted once


def test_weights_the_mapping_does_not_know_are_refused(noisy_net: gpt.GPT) -> None:
    state = {**noisy_net.state_dict(), "transformer.h.0.attn.rotary": torch.zeros(2)}
    with pytest.raises(ValueError, match="transformer.h.0.attn.rotary"):
        gpt2.hf_state_dict(state, noisy_net.config)


def encode_with_the_json(record: dict, moves: list[str]) -> list[int]:
    """A game's ids from chess-tokenizer.json alone (what a user without chesslm writes)."""
    ids = [record["special"]["BOS"]]
    for move in moves:
        promotion = record["promotion"][move[4:] or "none"]
        ids += [record["squares"][move[:2]], record["squares"][move[2:4]], promotion]
    return ids + [record["special"]["EOS"]]


def test_the_tokenizer_json_alone_encodes_real_games_as_chesslm(tmp_path: Path) -> None:
    path = tmp_path / "chess-tokenizer.json"
    files.write_json_atomic(path, vocabulary.record())
    record = json.loads(path.read_text())
    assert record["version"] == tokens.VERSION
    promotions = 0
    for game in sample_games(300, max_plies=400):
        moves = [tokens.decode_move(game[i : i + 3]) for i in range(1, len(game) - 1, 3)]
        promotions += sum(m.promotion is not None for m in moves)
        assert encode_with_the_json(record, [m.uci() for m in moves]) == game.tolist()
    assert promotions > 0  # the promotion ids were exercised


# --- the rule, on a real trained run -------------------------------------------------------

TARGET = "results/mini/export/model.safetensors"


@pytest.fixture
def exported(trained_workflow: Path) -> Path:
    """The trained run, exported by real snakemake (TARGET: tests/conftest.py's STAGES)."""
    return trained_workflow


@pytest.mark.slow
def test_rule_export_writes_a_folder_transformers_loads_with_equal_logits(exported: Path) -> None:
    from chesslm.model.weights import load_model

    folder = exported / "results/mini/export"
    assert {p.name for p in folder.iterdir()} == {
        "model.safetensors", "config.json", "chess-tokenizer.json", "README.md", "SHA256SUMS"
    }  # fmt: skip
    assert (exported / "logs/mini/export.log").exists()
    net = load_model(str(exported / "results/mini/train/best.pt"), "cpu")
    assert max_difference(net, hf_model(folder), padded(real_games())) <= TOLERANCE


@pytest.mark.slow
def test_the_model_card_names_the_data_the_training_and_the_play(exported: Path) -> None:
    card = (exported / "results/mini/export/README.md").read_text()
    run = exported / "results"
    manifest = json.loads((run / "datasets/mini/manifest.json").read_text())
    identity = json.loads((run / "mini/train/identity.json").read_text())
    elo = json.loads((run / "mini/play/elo.json").read_text())
    assert manifest["fingerprint"] in card and "CC0" in card
    for key in manifest["settings"]["filters"]:
        assert f"| `{key}` |" in card
    assert tokens.VERSION in card and identity["tokenizer"]["sha256"] in card
    assert f"| `lr` | `{json.dumps(identity['lr'])}` |" in card
    assert f"| `seed` | `{identity['seed']}` |" in card
    assert elo["protocol"] in card and "Move-matching on validation games" in card
    assert "chesslm-uci --checkpoint PATH/TO/THIS/FOLDER" in card
    assert "results/mini/train/best.pt" in card
    front = card.split("---\n")[1]
    for line in ("pipeline_tag: text-generation", "license: cc0-1.0", "datasets: [Lichess/"):
        assert line in front, front
    assert "pip install torch transformers safetensors chess" in card


def sample_positions() -> dict[str, list[str]]:
    """UCI moves from the start to real sample positions where a promotion is legal and where
    castling is (the decoder's two special cases), and an opening position."""
    found: dict[str, list[str]] = {"opening": ["e2e4", "c7c5", "g1f3"]}
    stream = io.StringIO(sample_text())
    while len(found) < 3 and (game := chess.pgn.read_game(stream)) is not None:
        board, moves = game.board(), []
        for move in game.mainline_moves():
            legal = list(board.legal_moves)
            if "promotion" not in found and any(m.promotion for m in legal):
                found["promotion"] = list(moves)
            if "castling" not in found and len(moves) > 8 and any(map(board.is_castling, legal)):
                found["castling"] = list(moves)
            board.push(move)
            moves.append(move.uci())
    return found


def card_block(folder: Path) -> str:
    card = (folder / "README.md").read_text()
    return re.search(r"```python\n(.*?)```", card, re.S).group(1)


def project_probabilities(net: gpt.GPT, moves: list[str], prefix: list[int]) -> dict:
    import math

    from chesslm.engine import session
    from chesslm.scorer import scoring

    board = chess.Board()
    for text in moves:
        board.push_uci(text)
    codes, logp = session.legal_scores(net, board, "cpu", prefix)
    return {
        scoring.decode_code(c).uci(): math.exp(v) for c, v in zip(codes, logp.tolist(), strict=True)
    }


@pytest.mark.slow
def test_the_cards_block_runs_unchanged_without_chesslm_and_gives_its_probabilities(
    exported: Path,
) -> None:
    """The card's first Python block, run inside the export folder as it is and from another
    folder with MODEL_DIR changed, in processes where ``import chesslm`` fails: every legal
    move's probability equals the project's (<= 1e-5) on real positions, promotion and
    castling among them."""
    from chesslm.model.weights import load_model

    folder = exported / "results/mini/export"
    block, positions = card_block(folder), sample_positions()
    assert set(positions) == {"opening", "promotion", "castling"}
    probe = (
        "import sys, json\nsys.modules['chesslm'] = None  # import chesslm fails\n"
        + "{block}\nprint(json.dumps({{k: move_probabilities(v)"
        " for k, v in json.loads(sys.argv[1]).items()}}))\n"
    )
    elsewhere = block.replace('MODEL_DIR = "."', f"MODEL_DIR = {str(folder)!r}")
    assert elsewhere != block
    net = load_model(str(exported / "results/mini/train/best.pt"), "cpu")
    for code, cwd in ((block, folder), (elsewhere, exported)):
        done = subprocess.run([sys.executable, "-c", probe.format(block=code),
                               json.dumps(positions)], cwd=cwd, capture_output=True,
                              text=True, timeout=300)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        got = json.loads(done.stdout.strip().splitlines()[-1])
        for name, moves in positions.items():
            want = project_probabilities(net, moves, [])
            assert set(got[name]) == set(want), name
            assert sum(got[name].values()) == pytest.approx(1.0, abs=1e-5)
            assert max(abs(got[name][m] - want[m]) for m in want) <= 1e-5, name


@pytest.mark.slow
def test_an_export_folder_alone_plays_the_checkpoints_moves(exported: Path, tmp_path: Path) -> None:
    """chesslm-uci on a copy of the export folder (no checkpoint anywhere near it) gives the
    same bestmove as on best.pt at every position of a real game; a folder that is not an
    export is one line naming what is missing."""
    folder = shutil.copytree(exported / "results/mini/export", tmp_path / "downloaded")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    engine = [sys.executable, "-m", "chesslm.engine.uci", "--checkpoint"]
    game = chess.pgn.read_game(io.StringIO(first_games_pgn(1)))
    moves = list(game.mainline_moves())[:40]
    best = {}
    for source in (folder, exported / "results/mini/train/best.pt"):
        with chess.engine.SimpleEngine.popen_uci([*engine, str(source)], env=env,
                                                 timeout=120) as uci:  # fmt: skip
            board, best[source] = chess.Board(), []
            for move in moves:
                best[source].append(uci.play(board, chess.engine.Limit(nodes=1)).move)
                board.push(move)
    assert best[folder] == best[exported / "results/mini/train/best.pt"]
    (folder / "config.json").unlink()
    done = subprocess.run([*engine, str(folder)], input="uci\nisready\n", env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert "not an export folder (no config.json)" in done.stderr


@pytest.mark.slow
def test_the_docs_snippet_runs_on_the_export(exported: Path, tmp_path: Path, monkeypatch):
    text = (ROOT / "docs" / "engine.md").read_text().split("## Export", 1)[1]
    snippet = re.search(r"```python\n(.*?)```", text.split("\n## ", 1)[0], re.S).group(1)
    (tmp_path / "results/demo").mkdir(parents=True)
    (tmp_path / "results/demo/export").symlink_to(exported / "results/mini/export")
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(snippet, scope)  # noqa: S102 - the docs' own code, as a reader would run it
    assert scope["ids"].tolist()[0] == [
        tokens.BOS,
        *tokens.encode_moves([chess.Move.from_uci("e2e4")])[1:4],
    ]
    assert scope["logits"].shape == (1, 4, tokens.VOCAB_SIZE)


def test_a_conditioned_export_reads_the_cards_prefix_with_the_checkpoints_logits(
    tmp_path: Path, monkeypatch
) -> None:
    """An ``elo`` checkpoint exported: the vocabulary names its rating tokens and bins, the
    card's own code builds prefix + game from that file alone (as conditioning.prefix does),
    and GPT2LMHeadModel's logits on prefix + game are the checkpoint's; the prefix matters."""
    from chesslm.data import conditioning
    from chesslm.export import folder
    from chesslm.model.weights import load_model

    ckpt = model_checkpoint(tmp_path / "best.pt", spread=0.3, conditioning="elo")
    records = {}
    for name in ("results", "manifest", "receipt"):
        records[name] = tmp_path / f"{name}.json"
        files.write_json_atomic(records[name], {})
    sources = folder.Sources(run="cond", checkpoint=ckpt, **records)
    paths = folder.export(sources, tmp_path / "export")
    vocab = json.loads(paths["tokenizer"].read_text())
    assert vocab["conditioning"] == "elo" and len(vocab["ratings"]["bins"]) == conditioning.BINS
    assert vocab["ratings"]["bins"][0]["label"] == "unknown"
    card = paths["card"].read_text()
    assert "rating-conditioned" in card and conditioning.LAYOUT_VERSION["elo"] in card
    block = card_block(tmp_path / "export").replace('MODEL_DIR = "."', "MODEL_DIR = 'export'")
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(block, scope)  # noqa: S102 - the card's own code, as a reader would run it
    for elo in (-1, 0, 799, 800, 1523, 3299, 3300, 4000):
        ids = [scope["rating_id"]("white", elo), scope["rating_id"]("black", 1600)]
        assert ids == conditioning.prefix(elo, 1600), elo
    assert scope["rating_id"]("white", None) == conditioning.prefix(-1, 1600)[0]
    net = load_model(str(ckpt), "cpu")
    moves = sample_positions()["castling"]
    for w, b in ((1100, 1900), (2400, None)):
        got = scope["move_probabilities"](moves, w, b)
        want = project_probabilities(net, moves, conditioning.prefix(w, -1 if b is None else b))
        assert max(abs(got[m] - want[m]) for m in want) <= 1e-5, (w, b)
    assert got != scope["move_probabilities"](moves, 1100, 1900)  # the ratings matter
    hf = hf_model(tmp_path / "export")
    games = [g[:300] for g in real_games(4)]
    pairs = ((1100, 1900), (2400, -1), (1500, 1500), (900, 3000))
    rows = [conditioning.prefix(w, b) + g for g, (w, b) in zip(games, pairs, strict=True)]
    x = torch.tensor([r[: min(map(len, rows))] for r in rows])
    assert max_difference(net, hf, x) <= TOLERANCE
    other = x.clone()
    other[:, :2] = torch.tensor(conditioning.prefix(3300, 800))
    with torch.no_grad():
        assert float((hf(x).logits - hf(other).logits).abs().max()) > 1e-3


# --- the outcome head ----------------------------------------------------------------------


def head_wdl(net: gpt.GPT, moves: list[str]) -> list[float]:
    """The project's win/draw/loss from the side to move after ``moves``: the model's outcome
    logits at the position's last token, softmaxed."""
    game = [tokens.BOS] + [t for m in moves for t in tokens.move_tokens(chess.Move.from_uci(m))]
    with torch.no_grad():
        return net(torch.tensor([game]), outcome=True)[1][0, -1].softmax(-1).tolist()


def export_of(ckpt: Path, out: Path) -> dict[str, Path]:
    from chesslm.export import folder

    records = {}
    for name in ("results", "manifest", "receipt"):
        records[name] = out.parent / f"{name}.json"
        files.write_json_atomic(records[name], {})
    return folder.export(folder.Sources(run="wdl", checkpoint=ckpt, **records), out)


@pytest.fixture(scope="module")
def outcome_export(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("outcome")
    ckpt = model_checkpoint(tmp / "best.pt", spread=0.3, outcome=True)
    return {"ckpt": ckpt, "paths": export_of(ckpt, tmp / "export"), "tmp": tmp}


def test_the_outcome_head_is_exported_sealed_and_named(outcome_export: dict) -> None:
    from chesslm import seal

    paths, tmp = outcome_export["paths"], outcome_export["tmp"]
    folder = paths["weights"].parent
    assert paths["outcome"] == folder / "outcome_head.safetensors"
    assert set(seal.read_sums(folder, "")) == {
        "model.safetensors", "config.json", "chess-tokenizer.json", "README.md",
        "outcome_head.safetensors",
    }  # fmt: skip
    config = json.loads(paths["config"].read_text())
    assert config[gpt2.OUTCOME_KEY] == {"file": "outcome_head.safetensors",
                                        "classes": ["win", "draw", "loss"]}  # fmt: skip
    assert "outcome head" in paths["card"].read_text()
    hf_model(folder)  # transformers loads the folder: no weight missing or unexpected
    again = export_of(outcome_export["ckpt"], tmp / "again")
    assert again["outcome"].read_bytes() == paths["outcome"].read_bytes()  # equal bytes
    # a checkpoint without the head, exported over it: no head file, none named, none listed
    plain = export_of(model_checkpoint(tmp / "plain.pt", spread=0.3), tmp / "again")
    assert not (tmp / "again/outcome_head.safetensors").exists() and "outcome" not in plain
    assert gpt2.OUTCOME_KEY not in json.loads(plain["config"].read_text())
    assert "outcome_head" not in plain["card"].read_text()


def test_the_cards_outcome_gives_the_projects_wdl_without_chesslm(outcome_export: dict) -> None:
    """The card's block, run in the export folder where ``import chesslm`` fails: ``outcome``
    equals the model's own outcome softmax (<= 1e-5) at real positions (the start, either side
    to move, a promotion), and its move probabilities still equal the project's."""
    from chesslm.model.weights import load_model

    folder = outcome_export["paths"]["weights"].parent
    positions = {"start": [], **sample_positions()}
    probe = (
        "import sys, json\nsys.modules['chesslm'] = None  # import chesslm fails\n"
        + card_block(folder)
        + "\nps = json.loads(sys.argv[1])\nprint(json.dumps([{k: outcome(v) for k, v in"
        " ps.items()}, move_probabilities(ps['castling'])]))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe, json.dumps(positions)], cwd=folder,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    got, probabilities = json.loads(done.stdout.strip().splitlines()[-1])
    net = load_model(str(outcome_export["ckpt"]), "cpu")
    for name, moves in positions.items():
        want = head_wdl(net, moves)
        assert list(got[name]) == ["win", "draw", "loss"], name
        assert max(abs(g - w) for g, w in zip(got[name].values(), want, strict=True)) <= 1e-5
    assert len({tuple(g.values()) for g in got.values()}) == len(positions)  # positions differ
    want = project_probabilities(net, positions["castling"], [])
    assert max(abs(probabilities[m] - want[m]) for m in want) <= 1e-5


def test_an_exported_head_scores_in_the_engine_as_the_checkpoint(outcome_export: dict) -> None:
    """chesslm-uci on the export folder prints the score and wdl it prints on best.pt; the
    folder read back is the checkpoint's model, head included."""
    from chesslm.export.load import model_at

    folder = outcome_export["paths"]["weights"].parent
    net, back = model_at(outcome_export["ckpt"], "cpu"), model_at(folder, "cpu")
    assert back.config.outcome
    moves = sample_positions()["promotion"]
    pairs = zip(head_wdl(net, moves), head_wdl(back, moves), strict=True)
    assert max(abs(a - b) for a, b in pairs) <= 1e-5
    board = chess.Board()
    for text in moves:
        board.push_uci(text)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    seen = []
    for source in (folder, outcome_export["ckpt"]):
        command = [sys.executable, "-m", "chesslm.engine.uci", "--checkpoint", str(source)]
        with chess.engine.SimpleEngine.popen_uci(command, env=env, timeout=120) as engine:
            engine.configure({"UCI_ShowWDL": True})
            info = engine.analyse(board, chess.engine.Limit(nodes=1))
        seen.append((info["score"], info["wdl"]))
    assert seen[0] == seen[1] and sum(seen[0][1].relative) == 1000


def test_a_changed_or_missing_head_file_is_refused_in_one_line(outcome_export: dict, tmp_path):
    from chesslm.export.load import model_at
    from chesslm.model.checkpoint import CheckpointError

    folder = shutil.copytree(outcome_export["paths"]["weights"].parent, tmp_path / "copy")
    head = folder / "outcome_head.safetensors"
    head.write_bytes(head.read_bytes()[:-4] + bytes(4))  # its last weight changed
    with pytest.raises(CheckpointError, match="outcome_head.safetensors") as error:
        model_at(folder, "cpu")
    assert "\n" not in str(error.value)
    head.unlink()
    with pytest.raises(CheckpointError, match="outcome_head.safetensors: unreadable"):
        model_at(folder, "cpu")  # SHA256SUMS lists it
    sums = folder / "SHA256SUMS"
    sums.write_text("".join(line for line in sums.read_text().splitlines(True)
                            if "outcome_head" not in line))  # fmt: skip
    with pytest.raises(CheckpointError, match="outcome_head.safetensors: no such file, which"):
        model_at(folder, "cpu")  # config.json names it
