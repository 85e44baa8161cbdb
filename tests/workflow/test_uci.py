"""The UCI engine (chesslm/engine/uci.py) driven as GUIs drive it: python-chess's UCI client
against a real process, whole games against Stockfish, and raw malformed input on a pipe."""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import chess
import chess.engine
import pytest

from chesslm.engine import options, uci
from tests import forked
from tests.helpers import LICHESS_BOT_OPTIONS, ROOT, SOMEBOT, EngineTalk, model_checkpoint

STOCKFISH = shutil.which("stockfish") or "/usr/games/stockfish"
ENGINE = [sys.executable, "-m", "chesslm.engine.uci"]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return model_checkpoint(tmp_path_factory.mktemp("uci") / "best.pt", spread=0.3)


def popen(ckpt: Path) -> chess.engine.SimpleEngine:
    return chess.engine.SimpleEngine.popen_uci(
        [*ENGINE, "--checkpoint", str(ckpt)], env=ENV, timeout=120
    )


def raw(ckpt: Path, text: str, *, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The engine given ``text`` and the input's end, which ends it once all is answered (a
    ``quit`` read while the model loads would end it first, unanswered). Forked from a process
    that imported torch (tests/forked.py): a fresh interpreter's imports were about a second
    of CPU each time; ``popen`` starts it as a match runner does, a fresh interpreter."""
    args = [*ENGINE[1:], "--checkpoint", str(ckpt)]
    return forked.run("python", args, cwd=Path.cwd(), env=ENV, timeout=timeout, stdin=text)


def play_game(engine: chess.engine.SimpleEngine, limits: list[chess.engine.Limit]) -> chess.Board:
    """A whole game, the model as white, Stockfish (a few nodes a move) as black; every move
    the model gives is checked legal before it is pushed."""
    board = chess.Board()
    with chess.engine.SimpleEngine.popen_uci(STOCKFISH) as stockfish:
        while not board.is_game_over(claim_draw=True):
            if board.turn == chess.WHITE:
                move = engine.play(board, limits[len(board.move_stack) // 2 % len(limits)]).move
                assert move in board.legal_moves, (move, board.fen())
            else:
                move = stockfish.play(board, chess.engine.Limit(nodes=20)).move
            board.push(move)
    return board


@pytest.mark.slow
def test_whole_games_against_stockfish_under_every_kind_of_go(ckpt: Path) -> None:
    limits = [
        chess.engine.Limit(time=0.05),  # go movetime
        chess.engine.Limit(nodes=1),
        chess.engine.Limit(white_clock=30, black_clock=30, white_inc=1, black_inc=1),
    ]
    with popen(ckpt) as engine:
        assert engine.id["name"].startswith("chesslm")
        assert {"Temperature", "Seed"} <= set(engine.options)
        argmax = play_game(engine, limits)
        assert argmax.outcome(claim_draw=True) is not None
        engine.configure({"Temperature": "1.0", "Seed": 7})
        sampled = play_game(engine, limits)
        assert sampled.outcome(claim_draw=True) is not None


@pytest.mark.slow
def test_argmax_is_the_oracles_best_move_and_a_seed_repeats_a_sample(ckpt: Path) -> None:
    from chesslm.model import weights
    from chesslm.scorer.oracle import oracle_scores

    net = weights.load_model(str(ckpt), "cpu")
    board = chess.Board()
    for text in ("e2e4", "c7c5", "g1f3", "d7d6"):
        board.push_uci(text)
    # the plain loop (one causal pass per legal move) scores ply 4; any legal move follows it
    scores = oracle_scores(net, [*board.move_stack, next(iter(board.legal_moves))], {4})
    with popen(ckpt) as engine:
        assert engine.play(board, chess.engine.Limit(nodes=1)).move == max(
            scores[4], key=scores[4].get
        )
        samples = []
        for seed in (3, 4, 3):  # a changed Seed reseeds: seed 3 again repeats its moves
            engine.configure({"Temperature": "5", "Seed": seed})
            samples.append([engine.play(board, chess.engine.Limit(nodes=1)).move for _ in range(8)])
        assert samples[0] == samples[2]
        assert len(set(samples[0])) > 1  # temperature 5 over ~30 moves: not one move 8 times


@pytest.mark.slow
def test_go_infinite_waits_for_stop(ckpt: Path) -> None:
    board = chess.Board()
    board.push_uci("d2d4")
    with popen(ckpt) as engine:
        with engine.analysis(board) as analysis:  # go infinite
            for info in analysis:
                if "pv" in info:
                    break
            analysis.stop()
            best = analysis.wait()
        assert best.move in board.legal_moves


@pytest.mark.slow
def test_a_fen_it_cannot_encode_gets_a_reason_and_a_legal_move(ckpt: Path) -> None:
    board = chess.Board("8/8/8/4k3/8/8/3QK3/8 w - - 0 1")
    with popen(ckpt) as engine:
        result = engine.play(board, chess.engine.Limit(nodes=1), info=chess.engine.INFO_ALL)
        assert result.move in board.legal_moves
        assert "standard start" in result.info["string"]


@pytest.mark.slow
def test_the_start_position_as_a_fen_is_read_by_the_model(ckpt: Path) -> None:
    start = "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1"
    done = raw(ckpt, f"position fen {start} moves e2e4\ngo nodes 1\n")
    assert done.returncode == 0, done.stderr
    assert "info string argmax of 20 legal moves" in done.stdout, done.stdout


@pytest.mark.slow
def test_malformed_input_is_answered_and_never_stops_it(ckpt: Path) -> None:
    text = "\n".join(
        [
            "uci",
            "xyzzy plugh",
            "setoption name Temperature value hot",
            "setoption name Nonsense value 3",
            "position startpos moves e2e4 e7e5 e1e8 d2d4",
            "isready",
            "go nodes many depth 1 searchmoves d2d4 g1f3 wtime 1000",
            "position fen not a fen at all",
            "go",
            "position sideways",
            "position fen 7k/5Q2/6K1/8/8/8/8/8 b - - 0 1",  # stalemate: no legal move
            "go movetime 10",
            "",
            "   ",
            "isready",
        ]
    )
    done = raw(ckpt, text + "\n")
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    assert "uciok" in out and out.count("readyok") == 2
    infos = "\n".join(line for line in out if line.startswith("info string"))
    expected_infos = ("'xyzzy'", "Temperature", "'Nonsense'", "'e1e8'", "'many'", "searchmoves")
    for expected in (*expected_infos, "invalid FEN"):
        assert expected in infos, (expected, infos)
    best = [line.split()[1] for line in out if line.startswith("bestmove")]
    assert len(best) == 3
    after = chess.Board()
    for text_move in ("e2e4", "e7e5"):  # e1e8 is illegal: the position stops before it
        after.push_uci(text_move)
    assert chess.Move.from_uci(best[0]) in after.legal_moves
    assert chess.Move.from_uci(best[1]) in chess.Board().legal_moves
    assert best[2] == "(none)"


@pytest.mark.slow
def test_go_ponder_answers_at_ponderhit_and_a_null_move_is_illegal(ckpt: Path) -> None:
    talk = "position startpos moves e2e4 0000 e7e5\ngo ponder\nisready\nponderhit\n"
    done = raw(ckpt, talk)
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    assert "illegal move '0000'" in done.stdout
    best = [i for i, line in enumerate(out) if line.startswith("bestmove")]
    assert len(best) == 1 and best[0] > out.index("readyok"), out
    after_e4 = chess.Board()
    after_e4.push_uci("e2e4")
    assert chess.Move.from_uci(out[best[0]].split()[1]) in after_e4.legal_moves


@pytest.mark.slow
def test_end_of_input_during_go_infinite_ends_it(ckpt: Path) -> None:
    done = raw(ckpt, "uci\nposition startpos\ngo infinite\n", timeout=60)
    assert done.returncode == 0, done.stderr
    assert not any(line.startswith("bestmove") for line in done.stdout.splitlines())


@pytest.mark.parametrize("content", [None, b"not a checkpoint at all\n"])
def test_a_file_that_is_not_a_checkpoint_is_one_line_and_exit_1(
    tmp_path: Path, content: bytes | None
) -> None:
    path = tmp_path / "best.pt"
    if content is not None:
        path.write_bytes(content)
    done = raw(path, "uci\nisready\n")
    assert done.returncode == 1
    assert done.stdout.splitlines() == options.handshake()  # uci answered, no readyok
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0], done.stderr


def test_the_console_script_is_the_module() -> None:
    import tomllib
    from importlib.metadata import PackageNotFoundError, entry_points, version

    from chesslm.engine import uci

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert declared["chesslm-uci"] == f"{uci.__name__}:{uci.main.__name__}"
    try:
        version("chesslm")
    except PackageNotFoundError:
        pytest.skip("chesslm is not installed (pip install -e .): no console scripts")
    scripts = {e.name: e.value for e in entry_points(group="console_scripts")}
    if "chesslm-uci" not in scripts:
        pytest.skip("the installed chesslm predates [project.scripts]: pip install -e . again")
    assert scripts["chesslm-uci"] == "chesslm.engine.uci:main"


@pytest.mark.slow
def test_the_reports_play_command_runs_and_names_the_export(
    ckpt: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chesslm.report.markdown import handover_section

    run = Path("results/demo")
    monkeypatch.chdir(tmp_path)  # the run's paths are relative, as the rules give them
    (tmp_path / run / "train").mkdir(parents=True)
    shutil.copy(ckpt, tmp_path / run / "train" / "best.pt")
    lines = "\n".join(handover_section(run))
    assert "written by `snakemake --cores 2 results/demo/export/model.safetensors`" in lines
    command = re.search(r"`(chesslm-uci [^`]*)`", lines).group(1).split()
    done = subprocess.run(
        [*ENGINE, *command[1:]], input="uci\ngo nodes 1\n", capture_output=True,
        text=True, env=ENV, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0 and "bestmove " in done.stdout, done.stderr
    (tmp_path / run / "export").mkdir()
    (tmp_path / run / "export" / "model.safetensors").write_bytes(b"")
    monkey = Path.cwd()
    try:
        os.chdir(tmp_path)
        assert "- Export: `results/demo/export/` (Hugging Face" in "\n".join(handover_section(run))
    finally:
        os.chdir(monkey)


def test_castling_as_king_takes_rook_is_read_as_the_kings_move(ckpt: Path) -> None:
    """Some GUIs send e1h1 (Chess960 notation): the model's tokens are e1g1's, as in training."""
    from chesslm.engine import session
    from chesslm.model import weights

    said: list[str] = []
    engine = session.Engine(weights.load_model(str(ckpt), "cpu"), said.append)
    engine.handle("position startpos moves e2e4 e7e5 g1f3 b8c6 f1c4 g8f6 e1h1")
    assert engine.board.move_stack[-1] == chess.Move.from_uci("e1g1") and not said
    engine.handle("go nodes 1")
    assert chess.Move.from_uci(said[-1].split()[1]) in engine.board.legal_moves


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "warm"])
def test_a_temperature_that_is_not_a_finite_non_negative_number_is_refused(
    ckpt: Path, value: str
) -> None:
    from chesslm.engine import session
    from chesslm.model import weights

    said: list[str] = []
    engine = session.Engine(weights.load_model(str(ckpt), "cpu"), said.append)
    engine.handle(f"setoption name Temperature value {value}")
    assert engine.temperature == 0 and said[0].startswith("info string option Temperature")


@pytest.fixture(scope="module")
def elo_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A rating-conditioned checkpoint (identity ``conditioning: elo``) of a noisy tiny model."""
    return model_checkpoint(tmp_path_factory.mktemp("uci-elo") / "best.pt", spread=0.3,
                            conditioning="elo")  # fmt: skip


def _reported(engine: chess.engine.SimpleEngine, board: chess.Board) -> tuple[str, str]:
    """The engine's Temperature-0 move on ``board`` and its info string about it."""
    result = engine.play(board, chess.engine.Limit(nodes=1), info=chess.engine.INFO_ALL)
    return result.move.uci(), result.info.get("string", "")


def test_the_rating_options_change_a_conditioned_models_distribution(elo_ckpt: Path) -> None:
    """Over a real UCI process: the ratings' prefix from the side the engine moves for (White:
    SelfElo first), Elo setting both and a later SelfElo overriding its side, and the reported
    probability of the argmax move moving with the ratings."""
    from chesslm.data import conditioning

    board = chess.Board()
    for uci_move in ("e2e4", "e7e5", "g1f3"):  # Black to move: Black is the engine's side
        board.push_uci(uci_move)
    with popen(elo_ckpt) as engine:
        assert {"Elo", "SelfElo", "OppoElo"} <= set(engine.options)
        assert engine.options["SelfElo"].default == 1500
        seen = {}
        for elo in (800, 2500):
            engine.configure({"Elo": elo})
            seen[elo] = _reported(engine, board)[1]
            assert f"ratings White {elo} Black {elo}" in seen[elo]
        engine.configure({"Elo": 1200})
        engine.configure({"SelfElo": 2000})  # later: overrides the engine's own side only
        move, said = _reported(engine, board)
        assert "ratings White 1200 Black 2000" in said
        assert f"prefix {conditioning.prefix(1200, 2000)}" in said
        assert chess.Move.from_uci(move) in board.legal_moves
    p = {elo: float(re.search(r"p=([0-9.]+)", text).group(1)) for elo, text in seen.items()}
    moves = {elo: text.split(",")[0] for elo, text in seen.items()}
    assert p[800] != p[2500] or moves[800] != moves[2500], seen


def test_a_checkpoint_without_conditioning_accepts_and_ignores_the_rating_options(
    ckpt: Path,
) -> None:
    from chesslm.engine import session
    from chesslm.model import weights

    said: list[str] = []
    engine = session.Engine(weights.load_model(str(ckpt), "cpu"), said.append)
    engine.handle("position startpos moves e2e4")
    engine.handle("go nodes 1")
    before = said[-1]
    engine.handle("setoption name Elo value 2400")
    assert "not rating-conditioned" in said[-1] and "ignored" in said[-1]
    engine.handle("go nodes 1")
    assert said[-1] == before and "no ratings read (not conditioned)" in said[-2]


@pytest.mark.slow
def test_lichess_bots_default_options_ponder_and_clocks_play_whole_games(ckpt: Path) -> None:
    """As lichess-bot drives an engine through python-chess: its default uci_options, the
    opponent's information, ponder on, clocks; whole games against Stockfish, every move legal."""
    with popen(ckpt) as engine:
        engine.configure(LICHESS_BOT_OPTIONS)
        engine.send_opponent_information(opponent=SOMEBOT)
        for _ in range(2):
            board = chess.Board()
            with chess.engine.SimpleEngine.popen_uci(STOCKFISH) as stockfish:
                while not board.is_game_over(claim_draw=True):
                    if board.turn == chess.WHITE:
                        limit = chess.engine.Limit(
                            white_clock=60, black_clock=60, white_inc=1, black_inc=1
                        )
                        move = engine.play(board, limit, ponder=True, game="lichess").move
                        assert move in board.legal_moves, (move, board.fen())
                    else:
                        move = stockfish.play(board, chess.engine.Limit(nodes=20)).move
                    board.push(move)
            assert board.outcome(claim_draw=True) is not None


def test_every_option_lichess_bot_sends_is_declared_and_said_ignored(ckpt: Path) -> None:
    from chesslm.engine import session
    from chesslm.model import weights

    said: list[str] = []
    engine = session.Engine(weights.load_model(str(ckpt), "cpu"), said.append)
    engine.handle("uci")
    declared = {line.split(" type ")[0].removeprefix("option name ") for line in said}
    assert set(LICHESS_BOT_OPTIONS) | {"Ponder", "MultiPV", "UCI_Elo", "UCI_Opponent",
                                       "UCI_LimitStrength"} <= declared  # fmt: skip
    for name, value in (("Hash", 1), ("Move Overhead", 1), ("SyzygyPath", 1),
                        ("UCI_ShowWDL", "true"), ("Ponder", "true")):  # fmt: skip
        said.clear()
        engine.handle(f"setoption name {name} value {value}")
        assert len(said) == 1 and "accepted and ignored" in said[0] and name in said[0], said


def test_uci_opponent_sets_a_conditioned_models_opponent_rating(elo_ckpt: Path) -> None:
    board = chess.Board()
    board.push_uci("e2e4")  # Black to move: the engine's side is Black, its opponent White
    with popen(elo_ckpt) as engine:
        engine.configure({**LICHESS_BOT_OPTIONS, "UCI_Elo": 1100})
        engine.send_opponent_information(opponent=SOMEBOT)
        said = _reported(engine, board)[1]
        assert "ratings White 3000 Black 1100" in said, said
        rated_none = chess.engine.Opponent(name="x", title=None, rating=None, is_engine=False)
        engine.send_opponent_information(opponent=rated_none)  # no rating: OppoElo stays
        assert "ratings White 3000 Black 1100" in _reported(engine, board)[1]


def test_multipv_gives_the_most_probable_legal_moves_best_first(ckpt: Path) -> None:
    from chesslm.engine import session
    from chesslm.model import weights

    board = chess.Board()
    for text in ("d2d4", "g8f6"):
        board.push_uci(text)
    codes, logp = session.legal_scores(weights.load_model(str(ckpt), "cpu"), board, "cpu")
    with popen(ckpt) as engine:
        infos = engine.analyse(board, chess.engine.Limit(nodes=1), multipv=3)
    assert [info["multipv"] for info in infos] == [1, 2, 3]
    moves = [info["pv"][0] for info in infos]
    assert len(set(moves)) == 3 and all(move in board.legal_moves for move in moves)
    probs = [float(info["string"].removeprefix("p=")) for info in infos]
    assert probs == sorted(probs, reverse=True) and "score" not in infos[0]
    from chesslm.scorer import scoring

    best = sorted(zip(logp.tolist(), codes, strict=True), reverse=True)[:3]
    assert moves == [scoring.decode_code(code) for _, code in best]
    assert probs == pytest.approx([math.exp(lp) for lp, _ in best], abs=1e-4)


def _payload_of(ckpt: Path, change: str) -> dict:
    """``ckpt``'s payload, broken as ``change`` says."""
    import torch

    from chesslm.model import checkpoint

    payload = checkpoint.load(ckpt)
    if change == "model is a string":
        payload["model"] = "weights"
    elif change == "NaN weights":
        payload["model"] = {
            k: torch.full_like(v, float("nan")) for k, v in payload["model"].items()
        }
    elif change == "another preset":
        payload["identity"]["model"]["preset"] = "small"
    return payload


@pytest.mark.parametrize("change", ["model is a string", "NaN weights", "another preset"])
def test_a_checkpoint_it_cannot_trust_is_refused_in_one_line(
    ckpt: Path, tmp_path: Path, change: str
) -> None:
    from chesslm.model import checkpoint

    path = tmp_path / "best.pt"
    checkpoint.save(path, _payload_of(ckpt, change))
    done = raw(path, "uci\nisready\n")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and "readyok" not in done.stdout, done.stderr
    assert len(lines) == 1 and str(path) in lines[0], done.stderr
    reason = {"model is a string": "not a table", "NaN weights": "NaN", "another preset": "missing"}
    assert reason[change] in lines[0] and "Error(s)" not in lines[0], lines[0]


def test_a_device_file_is_refused_at_once() -> None:
    done = raw(Path("/dev/zero"), "uci\nisready\n", timeout=60)
    assert done.returncode == 1 and "/dev/zero: not a checkpoint file" in done.stderr


# issue 64: uci answered before torch, the model loaded meanwhile, quit at once whatever it does
TORCH_IMPORTED = re.compile(r"^import time:.*\|\s*torch(\.|$)")  # -X importtime's line


def held(hold: Path) -> dict[str, str]:
    """The engine's environment with its load held until ``hold`` exists."""
    return {**ENV, uci.HOLD: str(hold)}


def test_the_engine_module_imports_neither_torch_nor_numpy() -> None:
    """What parses the command line and answers uci, imported alone in a fresh interpreter."""
    code = (
        "import sys, chesslm.engine.uci\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'numpy', 'safetensors'}),"
        " 'chesslm.engine.session' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV)
    assert done.stdout == "[] False\n", done.stdout + done.stderr


def test_uci_is_answered_before_torch_is_imported_and_readyok_after_the_load(
    ckpt: Path, tmp_path: Path
) -> None:
    """The load held until a file exists: ``uciok`` comes with no torch module imported yet
    (``-X importtime``'s lines, in order among the engine's own); ``isready``, ``position``
    and ``go`` sent meanwhile are answered after torch's import and the load, in order."""
    hold = tmp_path / "load"
    with EngineTalk(ckpt, held(hold), ("-X", "importtime")) as engine:
        engine.send("uci\nisready\nposition startpos moves e2e4\ngo nodes 1\n")
        before = engine.until("uciok")
        assert not any(map(TORCH_IMPORTED.match, before)), [*filter(TORCH_IMPORTED.match, before)]
        assert [line for line in before if not line.startswith("import time:")] == (
            options.handshake()
        )
        hold.touch()
        loading = engine.until("readyok")
        assert any(map(TORCH_IMPORTED.match, loading))
        best = chess.Move.from_uci(engine.until("bestmove")[-1].split()[1])
        board = chess.Board()
        board.push_uci("e2e4")
        assert best in board.legal_moves
        engine.send("quit\n")
        assert engine.end()[0] == 0


@pytest.mark.parametrize("loading", ["held", "importing torch"])
def test_quit_during_the_load_ends_it(ckpt: Path, tmp_path: Path, loading: str) -> None:
    """``quit`` while the model loads (held: it never would; else at once, in torch's import
    or the load): status 0, the uci answer and no other, the commands before it said
    unanswered."""
    env = held(tmp_path / "never") if loading == "held" else ENV
    with EngineTalk(ckpt, env) as engine:
        engine.send("uci\n")
        assert engine.until("uciok") == options.handshake()
        engine.send("isready\nposition startpos\nquit\n")
        status, rest = engine.end()
    assert status == 0, rest
    if loading == "held":  # else the load may end first: readyok, then quit
        assert rest == ["info string quit while the model loads: 2 command(s) read before it"
                        " left unanswered"]  # fmt: skip
    assert not [line for line in rest if not line.startswith(("info string", "readyok"))], rest


def test_quit_during_go_infinite_ends_it(ckpt: Path) -> None:
    with EngineTalk(ckpt, ENV) as engine:
        engine.send("uci\nisready\nposition startpos moves d2d4\ngo infinite\n")
        said = engine.until("info")  # a note first (this checkpoint has no outcome head)
        while "pv" not in said[-1].split():
            said = engine.until("info")
        engine.send("quit\n")
        status, rest = engine.end()
    assert status == 0 and not any(line.startswith("bestmove") for line in rest), rest


def test_python_chess_plays_an_engine_whose_model_loads_after_its_handshake(
    ckpt: Path, tmp_path: Path
) -> None:
    """python-chess's popen_uci, as a match runner starts an engine: its handshake (id,
    options) done while the load is held, options set, then a move once the model is in."""
    hold = tmp_path / "load"
    command = [*ENGINE, "--checkpoint", str(ckpt)]
    with chess.engine.SimpleEngine.popen_uci(command, env=held(hold), timeout=120) as engine:
        assert engine.id["name"] == options.handshake()[0].removeprefix("id name ")
        assert set(LICHESS_BOT_OPTIONS) <= set(engine.options)
        engine.configure({"Temperature": "0", "Threads": 1})
        hold.touch()
        board = chess.Board()
        assert engine.play(board, chess.engine.Limit(nodes=1)).move in board.legal_moves


def test_a_checkpoint_without_a_head_says_so_once(ckpt: Path) -> None:
    """No outcome head, no think-time head, no conditioning: each option it cannot serve is
    said ignored once per process, however often it is set or a move would use it."""
    from chesslm.engine import session
    from chesslm.model import weights

    said: list[str] = []
    engine = session.Engine(weights.load_model(str(ckpt), "cpu"), said.append)
    for _ in range(3):
        for name, value in (("UCI_ShowWDL", "true"), ("HumanTime", "true"), ("Elo", "1800")):
            engine.handle(f"setoption name {name} value {value}")
        engine.handle("position startpos")
        engine.handle("go wtime 60000 btime 60000")
    notes = [line for line in said if line.startswith("info string") and "p=" not in line]
    lacks = [line for line in notes if "no outcome head" in line or "think-time head" in line
             or "not rating-conditioned" in line]  # fmt: skip
    assert len(lacks) == len(set(lacks)) == 3, notes
    assert sum(line.startswith("bestmove") for line in said) == 3


def test_a_checkpoint_without_the_outcome_head_says_at_its_first_move_it_has_no_score(
    tmp_path: Path, ckpt: Path
) -> None:
    """Issue 64 item 6: a client that reads scores (fastchess warns at every move without one)
    is told why once, at the first move the model chose, though no option asked; a checkpoint
    with the head scores every move and never says it."""
    from chesslm.engine import session
    from chesslm.model import weights

    def notes(path: Path) -> tuple[list[str], list[str]]:
        said: list[str] = []
        engine = session.Engine(weights.load_model(str(path), "cpu"), said.append)
        for moves in ("", " moves e2e4", " moves e2e4 e7e5"):
            engine.handle(f"position startpos{moves}")
            engine.handle("go wtime 60000 btime 60000" if moves else "go nodes 1")
        return said, [line for line in said if "no outcome head" in line]

    said, lacks = notes(ckpt)
    assert lacks == [f"info string {session.NO_OUTCOME_HEAD}"], said
    assert said.index(lacks[0]) < said.index(next(s for s in said if " pv " in s))
    assert not any(" score " in line for line in said if line.startswith("info depth"))
    said, lacks = notes(model_checkpoint(tmp_path / "o.pt", outcome=True))
    assert lacks == [] and sum(" score cp " in line for line in said) == 3, said


def test_the_declared_rating_default_is_the_scorers() -> None:
    """``options`` declares the ratings' default without importing the scorer (numpy)."""
    from chesslm.scorer import ratings

    assert options.DEFAULT_ELO == ratings.DEFAULT


def test_a_game_through_uci_reads_the_cache_and_gives_the_full_passs_probabilities(
    ckpt: Path,
) -> None:
    """Issue 58 item 1 through python-chess, as a GUI or lichess-bot drives the engine: sample
    game 29 ply by ply, then a takeback, a position FEN the model cannot read, the game again
    and a new game (``ucinewgame``: python-chess sends it for a new ``game``). At each ply
    ``play`` says how many tokens the go read from the game's KV cache, and ``analyse`` at
    ``MultiPV`` 256 gives every legal move's probability, held to a full pass in this process
    (the protocol prints four decimals: within their rounding; tests/unit/test_kvcache.py
    holds the session's numbers to 1e-5)."""
    import io

    import chess.pgn

    from chesslm.engine import session
    from chesslm.model import weights
    from chesslm.scorer import scoring
    from tests.helpers import first_games_pgn

    handle = io.StringIO(first_games_pgn(30))
    read = [chess.pgn.read_game(handle) for _ in range(30)]
    first, second = (list(read[k].mainline_moves()) for k in (29, 22))
    net = weights.load_model(str(ckpt), "cpu")
    limit = chess.engine.Limit(nodes=1)

    def board_of(moves: list[chess.Move]) -> chess.Board:
        board = chess.Board()
        for move in moves:
            board.push(move)
        return board

    def check(engine: chess.engine.SimpleEngine, moves: list[chess.Move], game: str) -> str:
        """The play's word on the cache; every legal move's probability held to a full pass."""
        board = board_of(moves)
        said = engine.play(board, limit, game=game, info=chess.engine.INFO_ALL).info["string"]
        infos = engine.analyse(board, limit, multipv=256, game=game)
        got = {info["pv"][0]: float(info["string"].removeprefix("p=")) for info in infos}
        codes, logp = session.legal_scores(net, board, "cpu")
        pairs = zip(codes, logp.tolist(), strict=True)
        want = {scoring.decode_code(c): math.exp(lp) for c, lp in pairs}
        assert got.keys() == want.keys()
        assert max(abs(got[m] - want[m]) for m in want) <= 5e-5 + 1e-6  # the 4th decimal
        return said

    def reused(said: str) -> tuple[int, int]:
        found = re.search(r"kv cache (\d+) of (\d+) tokens", said)
        assert found, said
        return int(found[1]), int(found[2])

    with popen(ckpt) as engine:
        words = [reused(check(engine, first[:k], "a")) for k in range(0, 58, 3)]
        assert words[0] == (0, 1)  # a new game: nothing to reuse
        # the last go was the analyse of the position before: nine tokens new
        assert all(n - r == 9 for r, n in words[1:]), words
        assert reused(check(engine, first[:30], "a")) == (90, 91)  # a takeback: one token
        fen = board_of(first[:40]).fen()
        result = engine.play(chess.Board(fen), limit, game="a", info=chess.engine.INFO_ALL)
        assert "standard start" in result.info["string"]  # no model: the cache stays
        assert reused(check(engine, first[:34], "a")) == (91, 103)
        assert reused(check(engine, second[:10], "b")) == (0, 31)  # ucinewgame: none reused


def test_each_option_is_one_row_its_declaration_parse_and_setter(ckpt: Path) -> None:
    """``options.TABLE``: every row declared by ``uci`` as the row says, every value out of
    its bounds refused in one info string with the option unchanged, every setter a method."""
    from chesslm.engine import options, session
    from chesslm.model import weights

    said: list[str] = []
    engine = session.Engine(weights.load_model(str(ckpt), "cpu"), said.append)
    engine.handle("uci")
    assert [line for line in said if line.startswith("option ")] == list(options.OPTIONS)
    for option in options.TABLE:
        assert bool(option.setter) != bool(option.ignored), option.name
        assert not option.setter or callable(getattr(engine, option.setter)), option.name
        if option.kind in ("spin", "check", "combo"):
            said.clear()
            before = vars(engine).copy()
            engine.handle(f"setoption name {option.name} value 99999999999")
            if option.ignored:
                assert "accepted and ignored" in said[0], said
            else:
                assert said == [f"info string option {option.name} refused value"
                                f" '99999999999' ({said[0].split(' (', 1)[1]}"], said  # fmt: skip
                assert vars(engine) == before, option.name
