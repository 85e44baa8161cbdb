"""chesslm-board's page in a real headless Chromium (tests/browser.py): a PGN loaded, a step
with the arrow key, the table and the arrows of that ply equal to the API's figures (which
tests/unit/test_board.py holds equal to chesslm-analyse's CSV), a malformed PGN said in one
line on the page, a move played against the model answered legally, a screenshot that shows a
board."""

from __future__ import annotations

import json
from pathlib import Path

import chess
import pytest
from PIL import Image

from tests.boardkit import call, running
from tests.browser import Browser
from tests.helpers import first_games_pgn, model_checkpoint

AFTER_E4 = "rnbqkbnr/pppp1ppp/8/4p3/4P3/8/PPPP1PPP/RNBQKBNR w KQkq - 0 2"  # 1. e4 e5
LIGHT, DARK = (0xFF, 0xCE, 0x9E), (0xD1, 0x8B, 0x47)  # chess.svg's default squares
# the page's first game shown; the top moves' table as text
READY = "document.body !== null && document.body.dataset.ready === '1'"
TABLE = (
    "[...document.querySelectorAll('#top tbody tr')].map(r => [...r.cells].map(c => c.textContent))"  # noqa: E501
)


@pytest.fixture(scope="module")
def board(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("board-browser")
    (tmp / "games.pgn").write_text(first_games_pgn(3))
    with running(model_checkpoint(tmp / "best.pt", spread=0.3), tmp / "games.pgn") as url:
        yield url, tmp


@pytest.fixture(scope="module")
def elo_board(tmp_path_factory: pytest.TempPathFactory):
    """A board over a rating-conditioned checkpoint (the curve, the ratings in Play)."""
    tmp = tmp_path_factory.mktemp("board-elo")
    (tmp / "games.pgn").write_text(first_games_pgn(1))
    ckpt = model_checkpoint(tmp / "elo.pt", spread=0.3, conditioning="elo")
    with running(ckpt, tmp / "games.pgn") as url:
        yield url


def key(browser: Browser, name: str, code: int) -> None:
    for kind in ("keyDown", "keyUp"):
        browser.send("Input.dispatchKeyEvent", {"type": kind, "key": name, "code": name,
                                                "windowsVirtualKeyCode": code},
                     sessionId=browser.session)  # fmt: skip


def click_square(browser: Browser, square: str) -> None:
    x, y = browser.evaluate(
        f"(() => {{ const r = document.querySelector('#play-board rect.square.{square}')"
        ".getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2] })()"
    )
    for kind in ("mousePressed", "mouseReleased"):
        browser.send("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left",
                                                  "clickCount": 1},
                     sessionId=browser.session)  # fmt: skip


def select_square(browser: Browser, square: str) -> None:
    """Click ``square`` until the page has drawn it selected. The page redraws the board after
    each click and sets the selection's highlight once the new board is in: a click before that
    lands on no square (the old board is gone) and is lost, so the move's click waits for it."""
    selected = (f"document.querySelector('#play-board rect.square.{square}')"
                "?.getAttribute('fill') === '#ffe08a'")  # fmt: skip
    for _ in range(3):  # the page may still be laying the view out at the first click
        click_square(browser, square)
        if browser.wait_for(selected, timeout=5):
            return
    raise AssertionError(f"{square} not drawn selected: {browser.evaluate('JSON.stringify(play)')}")


def board_colours(shot: Path) -> tuple[int, int]:
    """How many pixels of the screenshot are chess.svg's light and dark squares."""
    image = Image.open(shot).convert("RGB")
    counts = {colour: n for n, colour in image.getcolors(image.width * image.height)}
    return counts.get(LIGHT, 0), counts.get(DARK, 0)


def test_a_ply_shows_the_apis_figures_and_arrows(browser: Browser, board: tuple) -> None:
    url, tmp = board
    status, game = call(url, "/api/analyse", {"file_game": 1})
    assert status == 200
    browser.open(url + "/", viewport=(1200, 800))
    assert browser.wait_for(READY), browser.evaluate("document.getElementById('error').textContent")
    assert browser.wait_for("document.getElementById('where').textContent.startsWith('position 0')")
    key(browser, "ArrowRight", 39)
    assert browser.wait_for("document.getElementById('where').textContent.startsWith('position 1')")
    ply = game["plies"][1]
    expected = [[str(k), t["san"], t["p"]] for k, t in enumerate(ply["top"], 1)]
    assert browser.evaluate(TABLE) == expected  # filled with the step, before the board
    played = browser.evaluate("document.getElementById('played').textContent")
    assert f"Played {ply['san']}: p = {ply['p']}, rank {ply['rank']} of" in played
    # the board drawn for this ply: its top moves' arrows and the played one
    lines = browser.wait_for(
        f"(() => {{ const l = document.querySelectorAll('#board svg line.arrow');"
        f" return l.length === {len(ply['top']) + 1} ? l.length : 0 }})()"
    )
    assert lines == len(ply["top"]) + 1
    marked = browser.evaluate(
        "[...document.querySelectorAll('#moves span.odd')].map(s => Number(s.dataset.at) + 1)"
    )
    assert marked == game["disagreements"]  # the move list marks the API's plies
    shot = browser.screenshot(tmp / "board.png")
    light, dark = board_colours(shot)
    assert light > 20_000 and dark > 20_000, (light, dark, shot)  # 32 squares of 60 px each


def test_a_conditioned_checkpoint_draws_the_rating_curve(browser: Browser, elo_board: str) -> None:
    status, game = call(elo_board, "/api/analyse", {"file_game": 1})
    browser.open(elo_board + "/", viewport=(1200, 800))
    assert browser.wait_for(READY), browser.evaluate("document.getElementById('error').textContent")
    key(browser, "ArrowRight", 39)
    assert browser.wait_for("document.getElementById('where').textContent.startsWith('position 1')")
    dots = browser.evaluate(
        "[...document.querySelectorAll('#curve svg circle')]"
        ".map(c => [Number(c.dataset.elo), c.dataset.p, Number(c.getAttribute('cy'))])"
    )
    ply = game["plies"][1]
    expected = [[elo, p] for elo, p in zip(game["ratings"], ply["by_rating"], strict=True)]
    assert [[elo, p] for elo, p, _ in dots] == expected
    heights = [cy for *_, cy in dots]  # the more probable, the higher (smaller y)
    order = sorted(range(len(dots)), key=lambda i: float(ply["by_rating"][i]))
    assert [heights[i] for i in order] == sorted(heights, reverse=True)


def test_a_malformed_pgn_is_one_line_on_the_page(browser: Browser, board: tuple) -> None:
    url, _ = board
    browser.open(url + "/", viewport=(1200, 800))
    assert browser.wait_for(READY)
    bad = '[Event "x"]\n\n1. e4 e5 2. Ke3 *\n'
    browser.evaluate(f"document.getElementById('pgn').value = {json.dumps(bad)};"
                     " document.getElementById('analyse-pgn').click()")  # fmt: skip
    error = browser.wait_for("document.getElementById('error').textContent")
    assert "does not parse" in error and "\n" not in error, error


def test_a_move_played_gets_a_legal_reply(browser: Browser, board: tuple) -> None:
    url, _ = board
    browser.open(url + "/", viewport=(1200, 800))
    assert browser.wait_for(READY)
    browser.evaluate("document.getElementById('tab-play').click()")
    assert browser.wait_for("document.querySelector('#play-board rect.square.e2') !== null")
    select_square(browser, "e2")
    click_square(browser, "e4")
    status = browser.wait_for(
        "(t => t.startsWith('The model played') ? t : '')"
        "(document.getElementById('play-status').textContent)"
    )
    assert status, browser.evaluate("document.getElementById('error').textContent")
    moves = browser.evaluate("document.getElementById('play-moves').textContent").split()
    assert moves[0] == "e2e4" and len(moves) == 2
    position = chess.Board()
    position.push_uci("e2e4")
    assert chess.Move.from_uci(moves[1]) in position.legal_moves


def text_of(browser: Browser, element: str, starts: str, timeout: float = 30) -> str:
    """The text of #``element`` once it starts with ``starts`` ('' if it never does)."""
    return browser.wait_for(
        f"(t => t.startsWith({json.dumps(starts)}) ? t : '')"
        f"(document.getElementById({json.dumps(element)}).textContent)",
        timeout=timeout,
    )


def set_value(browser: Browser, element: str, value: str) -> None:
    browser.evaluate(f"document.getElementById({json.dumps(element)}).value = {json.dumps(value)}")


def test_play_from_a_fen_and_at_chosen_ratings(browser: Browser, elo_board: str) -> None:
    browser.open(elo_board + "/", viewport=(1200, 800))
    assert browser.wait_for(READY)
    browser.evaluate("document.getElementById('tab-play').click()")
    assert text_of(browser, "play-status", "Your move")
    assert not browser.evaluate("document.getElementById('ratings').hidden")
    set_value(browser, "fen", "not a fen")
    browser.evaluate("document.getElementById('new-game').click()")
    error = text_of(browser, "error", "not a position")
    assert error and "\n" not in error, browser.evaluate("document.body.innerText")
    # at chosen ratings, as Black: the model opens, as the engine does at those options
    for element, value in (("fen", ""), ("self-elo", "900"), ("oppo-elo", "2100"),
                           ("colour", "black")):  # fmt: skip
        set_value(browser, element, value)
    browser.evaluate("document.getElementById('new-game').click()")
    status = text_of(browser, "play-status", "The model played")
    _, answer = call(elo_board, "/api/play", {"moves": [], "self_elo": 900, "oppo_elo": 2100})
    assert status.startswith(f"The model played {answer['san']} (p = {answer['p']})"), status
    assert "White 900 Black 2100" in browser.evaluate("document.getElementById('play-how')"
                                                      ".textContent")  # fmt: skip
    # from a FEN, as White to move: the person first, then a legal reply in that position
    set_value(browser, "fen", AFTER_E4)
    set_value(browser, "colour", "white")
    browser.evaluate("document.getElementById('new-game').click()")
    assert browser.wait_for(f"play.start === {json.dumps(AFTER_E4)} && play.moves.length === 0")
    assert browser.evaluate("document.getElementById('error').textContent") == ""
    select_square(browser, "g1")
    click_square(browser, "f3")
    assert browser.wait_for("play.moves.length === 2"), browser.evaluate("JSON.stringify(play)")
    moves = browser.evaluate("play.moves")
    position = chess.Board(AFTER_E4)
    position.push_uci(moves[0])
    assert moves[0] == "g1f3" and chess.Move.from_uci(moves[1]) in position.legal_moves
    how = browser.evaluate("document.getElementById('play-how').textContent")
    assert "standard start position" in how, how
