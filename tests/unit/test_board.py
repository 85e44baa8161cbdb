"""chesslm-board's server without a browser (chesslm/board/): its figures are chesslm-analyse's
CSV strings, bad input is one line and the server goes on, many requests at once are bounded,
the engine's replies are legal, a busy port is exit status 2."""

from __future__ import annotations

import concurrent.futures
import csv
import socket
from pathlib import Path

import chess
import pytest

from chesslm.board import cli, server
from chesslm.engine import analyse
from chesslm.engine.session import Engine
from chesslm.export.load import model_at
from tests.boardkit import call, running
from tests.helpers import first_games_pgn, model_checkpoint

ILLEGAL_GAME = '[Event "x"]\n\n1. e4 e5 2. Ke3 *\n'
AFTER_E4 = "rnbqkbnr/pppp1ppp/8/4p3/4P3/8/PPPP1PPP/RNBQKBNR w KQkq - 0 2"  # 1. e4 e5


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("board")
    (tmp / "games.pgn").write_text(first_games_pgn(3))
    return {
        "plain": model_checkpoint(tmp / "best.pt", spread=0.3),
        "outcome": model_checkpoint(tmp / "outcome.pt", spread=0.3, outcome=True),
        "elo": model_checkpoint(tmp / "elo.pt", spread=0.3, conditioning="elo"),
        "pgn": tmp / "games.pgn",
        "dir": tmp,
    }


@pytest.fixture(scope="module")
def board(files: dict[str, Path]):
    with running(files["plain"], files["pgn"]) as url:
        yield url


def csv_rows(
    files: dict[str, Path], checkpoint: Path, name: str, *options: str
) -> list[dict[str, str]]:
    """chesslm-analyse's own CSV of the --pgn file (its command line, in this process)."""
    out = files["dir"] / f"{name}.csv"
    assert analyse.main([str(files["pgn"]), "--checkpoint", str(checkpoint), "--csv",
                         str(out), *options]) == 0  # fmt: skip
    return list(csv.DictReader(open(out)))


def assert_the_csvs(plies: list[dict], rows: list[dict[str, str]]) -> None:
    assert len(plies) == len(rows)
    for ply, row in zip(plies, rows, strict=True):
        for name in ("move", "san", "p", "logp", "rank", "legal_moves"):
            assert str(ply[name]) == row[name], (name, ply, row)
        for k, top in enumerate(ply["top"], 1):
            assert (top["san"], top["p"]) == (row[f"top{k}"], row[f"p{k}"])
            board = chess.Board(ply["fen"])
            assert board.san(chess.Move.from_uci(top["uci"])) == top["san"]
        for name in analyse.OUTCOME_FIELDS:
            assert ply.get(name) == row.get(name)


@pytest.mark.parametrize("which", ["file_game", "pasted"])
def test_the_figures_are_chesslm_analyses_csv_to_the_printed_digit(
    board: str, files: dict[str, Path], which: str
) -> None:
    rows = [r for r in csv_rows(files, files["plain"], "plain") if r["game"] == "2"]
    body = {"file_game": 2} if which == "file_game" else {"pgn": files["pgn"].read_text(),
                                                          "game": 2}  # fmt: skip
    status, answer = call(board, "/api/analyse", body)
    assert status == 200, answer
    assert_the_csvs(answer["plies"], rows)
    assert answer["headers"]["White"] == "chavez7777"


def test_an_outcome_checkpoints_win_draw_loss_is_the_csvs(files: dict[str, Path]) -> None:
    rows = [r for r in csv_rows(files, files["outcome"], "outcome") if r["game"] == "1"]
    assert "win_probability" in rows[0]
    with running(files["outcome"]) as url:
        status, answer = call(url, "/api/analyse", {"pgn": files["pgn"].read_text()})
    assert status == 200 and answer["outcome"], answer
    assert_the_csvs(answer["plies"], rows)


def test_the_disagreements_are_the_three_least_likely_moves(
    board: str, files: dict[str, Path]
) -> None:
    rows = [r for r in csv_rows(files, files["plain"], "plain") if r["game"] == "3"]
    status, answer = call(board, "/api/analyse", {"file_game": 3})
    assert status == 200, answer
    marked = answer["disagreements"]
    assert len(marked) == 3 and marked == sorted(marked)
    highest_marked = max(float(rows[ply - 1]["logp"]) for ply in marked)
    others = [float(r["logp"]) for r in rows if int(r["ply"]) not in marked]
    assert all(logp >= highest_marked for logp in others)


def test_the_rating_curve_is_chesslm_analyse_at_those_ratings(
    board: str, files: dict[str, Path]
) -> None:
    with running(files["elo"]) as url:
        status, answer = call(url, "/api/analyse", {"pgn": files["pgn"].read_text()})
    assert status == 200, answer
    assert answer["ratings"] == list(range(800, 2401, 200))
    for elo in (1200, 2000):
        rows = [r for r in csv_rows(files, files["elo"], f"elo{elo}", "--ratings", f"{elo},{elo}")
                if r["game"] == "1"]  # fmt: skip
        column = answer["ratings"].index(elo)
        assert [p["by_rating"][column] for p in answer["plies"]] == [r["p"] for r in rows]
    assert any(len(set(p["by_rating"])) > 1 for p in answer["plies"])  # the ratings matter
    status, plain = call(board, "/api/analyse", {"file_game": 1})
    assert plain["ratings"] is None and "by_rating" not in plain["plies"][0]


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"pgn": "x" * (server.MAX_PGN_BYTES + 1)}, "at most 1,000,000"),
        ({"pgn": "hello, this is not a game"}, "not PGN"),
        ({"pgn": ILLEGAL_GAME}, "does not parse"),
        ({"pgn": ""}, "no PGN text"),
        ({"pgn": first_games_pgn(1), "game": 5}, "no game 5"),
        ({"file_game": 9}, "offers games 1..3"),
        ({"file_game": "../../etc/passwd"}, "a whole number is needed"),
    ],
)
def test_bad_pgn_is_one_line_and_the_server_goes_on(board: str, body: dict, words: str) -> None:
    status, answer = call(board, "/api/analyse", body)
    assert status == 400 and words in answer["error"] and "\n" not in answer["error"], answer
    assert call(board, "/api/info")[0] == 200


def test_a_body_over_the_limit_is_refused_unread(board: str) -> None:
    host, port = board.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(b"POST /api/analyse HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n")
        answer = b"".join(iter(lambda: s.recv(4096), b"")).decode()  # closed after it
    assert answer.startswith("HTTP/1.0 413") and "the board reads at most" in answer, answer
    assert call(board, "/api/info")[0] == 200


@pytest.mark.parametrize(
    ("path", "body", "words"),
    [
        ("/api/board", {"fen": "not a fen"}, "not a position"),
        ("/api/board", {"fen": chess.STARTING_FEN, "arrows": [["e2e5", 0.5]]}, "illegal move"),
        ("/api/board", {"fen": chess.STARTING_FEN, "arrows": [["e2e4", 1]] * 9}, "at most 5"),
        ("/api/play", {"moves": ["e2e4", "e7e4"]}, "move 2: illegal move e7e4"),
        ("/api/play", {"moves": "e2e4"}, "a list of at most"),
        ("/api/analyse", None, "not JSON"),
        ("/api/play", {"fen": "no fen at all"}, "not a position: FEN 'no fen at all'"),
        ("/api/play", {"fen": "8/8/8/8/8/8/8/8 w - - 0 1"}, "not a legal position"),
        ("/api/play", {"fen": AFTER_E4, "moves": ["e2e4"]}, "move 1: illegal move e2e4"),
        ("/api/play", {"moves": [], "self_elo": 99999}, "SelfElo: a whole number 0..4000"),
        ("/api/play", {"moves": [], "oppo_elo": "1500"}, "OppoElo: a whole number"),
    ],
)
def test_bad_requests_are_one_line(board: str, path: str, body: dict | None, words: str) -> None:
    status, answer = call(board, path, body, raw=b"{not json" if body is None else None)
    assert status == 400 and words in answer["error"] and "\n" not in answer["error"], answer


def test_the_board_is_python_chess_svg_with_the_arrows(board: str) -> None:
    arrows = [["e2e4", 0.6], ["g1f3", 0.3], ["e2e3", 0.05]]
    status, answer = call(board, "/api/board", {"fen": chess.STARTING_FEN, "arrows": arrows,
                                                "played": "d2d4"})  # fmt: skip
    assert status == 200
    svg = answer["svg"]
    assert svg.startswith("<svg") and svg.count("<line ") == 4  # 3 of the model's, 1 played
    assert 'stroke="#15781bff"' in svg  # the most probable: opaque


def test_the_engine_answers_a_legal_move(board: str) -> None:
    moves = ["e2e4"]
    for _ in range(3):
        status, answer = call(board, "/api/play", {"moves": moves})
        assert status == 200, answer
        position = chess.Board()
        for m in moves:
            position.push_uci(m)
        assert chess.Move.from_uci(answer["reply"]) in position.legal_moves
        position.push_uci(answer["reply"])
        assert answer["fen"] == position.fen()
        moves = [*moves, answer["reply"], answer["legal"][0]]
    assert answer["pgn"].count(".") >= 3


def test_play_at_chosen_ratings_is_the_engines_move_at_those_options(
    files: dict[str, Path],
) -> None:
    net = model_at(files["elo"], "cpu")
    answers = {}
    with running(files["elo"]) as url:
        for self_elo, oppo_elo in ((900, 2100), (2300, 1000)):
            status, answer = call(url, "/api/play", {"moves": ["e2e4"], "self_elo": self_elo,
                                                     "oppo_elo": oppo_elo})  # fmt: skip
            assert status == 200, answer
            said: list[str] = []
            engine = Engine(net, said.append)  # what chesslm-uci answers at those options
            for line in (f"setoption name SelfElo value {self_elo}",
                         f"setoption name OppoElo value {oppo_elo}",
                         "position startpos moves e2e4", "go"):  # fmt: skip
                engine.handle(line)
            assert f"bestmove {answer['reply']}" in said
            assert f"pv {answer['reply']} string p={answer['p']}" in said[-3]
            assert f"White {oppo_elo} Black {self_elo}" in answer["how"]
            answers[self_elo] = answer["p"]
    assert answers[900] != answers[2300]  # the ratings reach the model


def test_play_from_a_fen_answers_a_legal_move_and_says_how(board: str) -> None:
    status, answer = call(board, "/api/play", {"fen": AFTER_E4, "moves": ["g1f3"]})
    assert status == 200, answer
    position = chess.Board(AFTER_E4)
    position.push_uci("g1f3")
    assert chess.Move.from_uci(answer["reply"]) in position.legal_moves
    position.push_uci(answer["reply"])
    assert answer["fen"] == position.fen() and set(answer["legal"]) == {
        m.uci() for m in position.legal_moves}  # fmt: skip
    assert "standard start position" in answer["how"] and answer["p"] is None
    assert f'[FEN "{AFTER_E4}"]' in answer["pgn"] and "2. Nf3" in answer["pgn"]
    status, first = call(board, "/api/play", {"fen": AFTER_E4, "moves": [], "reply": False})
    assert status == 200 and first["reply"] is None and first["fen"] == AFTER_E4


def test_many_requests_at_once_are_answered_or_told_busy(board: str, files: dict) -> None:
    body = {"pgn": files["pgn"].read_text(), "game": 3}
    with concurrent.futures.ThreadPoolExecutor(24) as pool:
        answers = list(pool.map(lambda _: call(board, "/api/analyse", body), range(24)))
    statuses = {status for status, _ in answers}
    assert statuses <= {200, 503} and 200 in statuses, statuses
    assert all("busy" in a["error"] for s, a in answers if s == 503)
    firsts = {a["plies"][0]["p"] for s, a in answers if s == 200}
    assert len(firsts) == 1  # the same figures whatever ran beside them


def test_a_busy_port_is_one_line_and_exit_status_2(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert cli.main([str(files["plain"]), "--port", str(port)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"127.0.0.1:{port} is in use" in err[0] and "--port 0" in err[0]


def test_only_loopback_is_quiet() -> None:
    assert cli.loopback("127.0.0.1") and cli.loopback("::1") and cli.loopback("localhost")
    assert not cli.loopback("0.0.0.0") and not cli.loopback("192.168.1.2")
