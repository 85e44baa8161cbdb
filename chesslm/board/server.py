"""The board's web server: the standard library's ``http.server.ThreadingHTTPServer`` (no new
dependency, and a page for one person on their own machine needs no more), serving the page
(``page.html``, plain JavaScript, no build step) and a small JSON API:

- ``GET /`` the page; ``GET /api/info`` the checkpoint's heads and the limits;
  ``GET /api/file-games`` the games of the ``--pgn`` file (numbered, with their players);
- ``POST /api/analyse`` ``{"pgn": TEXT, "game": N}`` or ``{"file_game": N}``: one game scored
  (``chesslm.board.analysis``); ``POST /api/board`` ``{"fen", "arrows": [[UCI, p], ...],
  "played", "last", "flipped"}``: the SVG (``chesslm.board.drawing``); ``POST /api/play``
  ``{"moves": [UCI, ...], "reply": true}`` (optional ``"fen"``, ``"self_elo"``,
  ``"oppo_elo"``): the engine's reply (``chesslm.board.play``).

Safe and sturdy: no request names a path (the only files read are the checkpoint and the
``--pgn`` file of the command line, read once at the start); a body over ``MAX_BODY_BYTES`` or
PGN text over ``MAX_PGN_BYTES`` is refused unread; every bad input is a 400 with one line
(``{"error": ...}``) that the page shows, and the server goes on; one model pass at a time
(``App.lock``: a request scores one game, at most the model's context) and at most
``MAX_WAITING`` requests waiting for it, the rest answered 503 at once, so many requests at
once hold a bounded amount of memory.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from chesslm.board import analysis, drawing, play
from chesslm.board.analysis import BoardError

MAX_PGN_BYTES = 1_000_000  # the PGN text one request may send (UTF-8 bytes)
MAX_BODY_BYTES = 2 * MAX_PGN_BYTES + 4096  # a JSON body: the text with its escapes
MAX_WAITING = 8  # requests waiting for the model at once; more get 503 "busy"
MAX_FILE_GAMES = 1000  # the --pgn file's games offered (its first ones)


@dataclass
class FileGame:
    number: int
    label: str
    text: str


@dataclass
class App:
    """What the handlers share: the model, its lock and the ``--pgn`` file's games."""

    net: torch.nn.Module
    checkpoint: str
    pgn_path: Path | None = None
    file_games: list[FileGame] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    waiting: threading.BoundedSemaphore = field(
        default_factory=lambda: threading.BoundedSemaphore(MAX_WAITING)
    )

    def info(self) -> dict[str, Any]:
        config = self.net.config
        return {
            "checkpoint": self.checkpoint,
            "outcome": bool(config.outcome),
            "think_time": bool(config.think_time),
            "conditioning": str(getattr(config, "conditioning", "none")),
            "context": int(config.block_size),
            "pgn_file": str(self.pgn_path) if self.pgn_path else None,
            "file_games": len(self.file_games),
            "max_pgn_bytes": MAX_PGN_BYTES,
        }

    def analyse(self, body: dict[str, Any]) -> dict[str, Any]:
        if "file_game" in body:
            number = whole(body["file_game"], "file_game")
            if not 1 <= number <= len(self.file_games):
                raise BoardError(f"file_game {number}: the --pgn file offers games"
                                 f" 1..{len(self.file_games)}")  # fmt: skip
            text, source = self.file_games[number - 1].text, self.pgn_path or analysis.PASTED
            game = 1
        else:
            text, source = pgn_text(body), analysis.PASTED
            game = whole(body.get("game", 1), "game")
        with self.model():
            return analysis.analyse_text(self.net, text, game=game, source=source)

    def play(self, body: dict[str, Any]) -> dict[str, Any]:
        with self.model():
            return play.reply(self.net, body.get("moves", []),
                              answer_it=body.get("reply", True) is not False,
                              fen=body.get("fen"), self_elo=body.get("self_elo"),
                              oppo_elo=body.get("oppo_elo"))  # fmt: skip

    def model(self) -> ModelTurn:
        return ModelTurn(self)


class Busy(Exception):
    """More requests wait for the model than ``MAX_WAITING``."""


class ModelTurn:
    """A request's turn at the model: a waiting place (or ``Busy``), then the lock."""

    def __init__(self, app: App) -> None:
        self.app = app

    def __enter__(self) -> None:
        if not self.app.waiting.acquire(blocking=False):
            raise Busy(f"busy: {MAX_WAITING} requests already wait for the model; try again")
        self.app.lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self.app.lock.release()
        self.app.waiting.release()


def whole(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise BoardError(f"{name}: a whole number is needed, not {str(value)[:20]!r}")
    return value


def pgn_text(body: dict[str, Any]) -> str:
    text = body.get("pgn")
    if not isinstance(text, str) or not text.strip():
        raise BoardError("no PGN text: paste a game, or pick one of the --pgn file's")
    size = len(text.encode("utf-8", errors="replace"))
    if size > MAX_PGN_BYTES:
        raise BoardError(f"PGN text of {size:,} bytes: the board takes at most"
                         f" {MAX_PGN_BYTES:,} (split the file, or give it as --pgn)")  # fmt: skip
    return text


def board_request(body: dict[str, Any]) -> dict[str, Any]:
    arrows = body.get("arrows", [])
    if not isinstance(arrows, list) or len(arrows) > drawing.MAX_ARROWS:
        raise BoardError(f"arrows: a list of at most {drawing.MAX_ARROWS} [UCI, p] is needed")
    pairs = []
    for item in arrows:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[1], int | float)):
            raise BoardError("arrows: each is [UCI, probability]")
        pairs.append((str(item[0]), float(item[1])))
    fen, played, last = body.get("fen"), body.get("played"), body.get("last")
    if not isinstance(fen, str) or len(fen) > 100:
        raise BoardError("fen: a FEN string is needed")
    svg = drawing.board_svg(fen, pairs, played=played if isinstance(played, str) else None,
                            last=last if isinstance(last, str) else None,
                            flipped=bool(body.get("flipped")))  # fmt: skip
    return {"svg": svg}


class Handler(BaseHTTPRequestHandler):
    """One request: the page, or an API call answered in JSON."""

    app: App  # set on the class made for each server (``serve``)
    server_version = "chesslm-board"

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path in ("/", "/index.html"):
            page = resources.files("chesslm.board").joinpath("page.html").read_bytes()
            self.send(HTTPStatus.OK, page, "text/html; charset=utf-8")
        elif self.path == "/api/info":
            self.json(HTTPStatus.OK, self.app.info())
        elif self.path == "/api/file-games":
            games = [{"game": g.number, "label": g.label} for g in self.app.file_games]
            self.json(HTTPStatus.OK, {"games": games})
        else:
            self.json(HTTPStatus.NOT_FOUND, {"error": f"no such page: {self.path[:100]}"})

    def do_POST(self) -> None:  # noqa: N802
        routes = {"/api/analyse": self.app.analyse, "/api/board": board_request,
                  "/api/play": self.app.play}  # fmt: skip
        route = routes.get(self.path)
        if route is None:
            self.json(HTTPStatus.NOT_FOUND, {"error": f"no such call: {self.path[:100]}"})
            return
        try:
            body = self.body()
            self.json(HTTPStatus.OK, route(body))
        except TooLarge as error:
            self.close_connection = True  # its body is left unread
            self.json(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, {"error": str(error)})
        except BoardError as error:
            self.json(HTTPStatus.BAD_REQUEST, {"error": one_line(str(error))})
        except Busy as error:
            self.json(HTTPStatus.SERVICE_UNAVAILABLE, {"error": str(error)})
        except Exception as error:  # noqa: BLE001 - one bad request must not end the server
            self.json(HTTPStatus.INTERNAL_SERVER_ERROR,
                      {"error": one_line(f"failed: {type(error).__name__}: {error}")})  # fmt: skip

    def body(self) -> dict[str, Any]:
        """The request's JSON object, refused unread when its length is over the limit."""
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            raise BoardError("a Content-Length is needed") from None
        if length > MAX_BODY_BYTES:
            raise TooLarge(f"a request of {length:,} bytes: the board reads at most"
                           f" {MAX_BODY_BYTES:,} (PGN text up to {MAX_PGN_BYTES:,})")  # fmt: skip
        try:
            body = json.loads(self.rfile.read(max(0, length)) or b"{}")
        except (ValueError, UnicodeDecodeError) as error:
            raise BoardError(f"not JSON: {error}") from None
        if not isinstance(body, dict):
            raise BoardError("a JSON object is needed")
        return body

    def json(self, status: HTTPStatus, payload: dict[str, Any]) -> None:
        self.send(status, json.dumps(payload).encode(), "application/json")

    def send(self, status: HTTPStatus, data: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        """Quiet: a line per request would bury the URL line (errors go to the page)."""


class TooLarge(BoardError):
    """A body over ``MAX_BODY_BYTES``."""


def one_line(text: str) -> str:
    return " ".join(text.split())


class BoardServer(ThreadingHTTPServer):
    """The standard library's threading server with a listen backlog for a page's bursts:
    its default of 5 pending connections reset the rest on a loaded machine (24 requests at
    once in tests/unit/test_board.py), where each should get an answer, if only "busy"."""

    request_queue_size = 128
    daemon_threads = True


def server(app: App, host: str, port: int) -> ThreadingHTTPServer:
    """A bound server (not yet serving) for ``app``. :raises OSError: the port is taken."""
    handler = type("BoundHandler", (Handler,), {"app": app})
    return BoardServer((host, port), handler)
