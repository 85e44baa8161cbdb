"""chesslm-board's tests' parts: a real server on a free port in a thread, over a tiny
checkpoint, and its JSON API called with the standard library's HTTP client."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from chesslm.board import cli, server
from chesslm.export.load import model_at


@contextmanager
def running(checkpoint: Path, pgn: Path | None = None) -> Iterator[str]:
    """The base URL of a board serving ``checkpoint`` (and ``pgn``'s games) on 127.0.0.1."""
    games = cli.file_games(pgn) if pgn is not None else []
    app = server.App(model_at(checkpoint, "cpu"), str(checkpoint), pgn, games)
    httpd = server.server(app, "127.0.0.1", 0)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def call(url: str, path: str, body: Any = None, *, raw: bytes | None = None) -> tuple[int, dict]:
    """(status, JSON answer) of GET ``path`` (no body) or POST of ``body`` as JSON."""
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        if body is None and raw is None:
            connection.request("GET", path)
        else:
            data = raw if raw is not None else json.dumps(body).encode()
            connection.request("POST", path, data, {"Content-Type": "application/json"})
        answer = connection.getresponse()
        return answer.status, json.loads(answer.read())
    finally:
        connection.close()
