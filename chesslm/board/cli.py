"""``chesslm-board CHECKPOINT [--pgn FILE] [--port N] [--host H]``: load the model, bind the
server (``chesslm.board.server``), print one line with its URL and serve until Ctrl-C.

A port already in use is one line and exit status 2 (``--port 0`` takes any free one); a
checkpoint or ``--pgn`` file that cannot be read is one line and exit status 1. The server
binds 127.0.0.1: another ``--host`` exposes the model and the PGN to whoever can reach it, so
it prints a WARNING line saying so.
"""

from __future__ import annotations

import argparse
import errno
import ipaddress
import sys
from pathlib import Path

DEFAULT_PORT = 8765
PROG = "chesslm-board"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoint", help="a chesslm .pt (e.g. results/demo/train/best.pt) or an"
                                      " export folder")  # fmt: skip
    p.add_argument("--pgn", type=Path, help="a PGN file (.pgn or .pgn.zst) whose games to offer")
    p.add_argument("--port", type=int, default=DEFAULT_PORT,
                   help=f"the port (default {DEFAULT_PORT}; 0: any free one)")  # fmt: skip
    p.add_argument("--host", default="127.0.0.1", help="the address to bind (default 127.0.0.1)")
    return p


def loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def file_games(path: Path) -> list:
    """The first ``MAX_FILE_GAMES`` games of the ``--pgn`` file, as texts with a label.

    :raises InputError: the file cannot be read as PGN."""
    import itertools

    from chesslm.board.server import MAX_FILE_GAMES, FileGame
    from chesslm.engine.pgnfile import game_texts, open_text

    with open_text(path) as stream:
        texts = list(itertools.islice(game_texts(stream, path), MAX_FILE_GAMES))
    return [FileGame(n, label(text), text) for n, text in enumerate(texts, 1)]


def label(text: str) -> str:
    """``White - Black (Result)`` from a game's tag lines."""
    tags = {}
    for line in text.splitlines():
        if line.startswith("[") and ' "' in line and line.rstrip().endswith('"]'):
            name, _, value = line.strip()[1:-2].partition(' "')
            tags[name] = value
    return f"{tags.get('White', '?')} - {tags.get('Black', '?')} ({tags.get('Result', '*')})"


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.pgn is not None and not args.pgn.is_file():
        print(f"{PROG}: {args.pgn}: no such file", file=sys.stderr)
        return 1
    from chesslm.board import server

    try:
        httpd = server.server(None, args.host, args.port)  # type: ignore[arg-type]
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            print(f"{PROG}: {args.host}:{args.port} is in use (another chesslm-board?): give"
                  " another --port, or --port 0 for any free one", file=sys.stderr)  # fmt: skip
            return 2
        print(f"{PROG}: cannot listen on {args.host}:{args.port}: {error}", file=sys.stderr)
        return 2
    with httpd:
        app = load(args)
        if app is None:
            return 1
        httpd.RequestHandlerClass.app = app  # type: ignore[attr-defined]
        host, port = httpd.server_address[:2]
        if not loopback(args.host):
            print(f"{PROG}: WARNING: listening on {args.host}, not 127.0.0.1: anyone who can"
                  " reach this address can use the model and read the --pgn file's games",
                  file=sys.stderr, flush=True)  # fmt: skip
        shown = f"[{host}]" if ":" in str(host) else host
        print(f"{PROG}: serving {args.checkpoint} at http://{shown}:{port}/ (Ctrl-C ends it)",
              flush=True)  # fmt: skip
        try:
            httpd.serve_forever()
        except KeyboardInterrupt:
            pass
    return 0


def load(args: argparse.Namespace):  # -> server.App | None
    """The model and the ``--pgn`` file's games, or None after one line saying what is wrong."""
    from chesslm.board.server import App
    from chesslm.engine.analyse import flat_memory
    from chesslm.engine.pgnfile import InputError
    from chesslm.export.load import model_at
    from chesslm.model.checkpoint import CheckpointError

    flat_memory()
    try:
        net = model_at(args.checkpoint, "cpu")
        games = file_games(args.pgn) if args.pgn is not None else []
    except (CheckpointError, InputError) as error:
        print(f"{PROG}: {error}", file=sys.stderr)
        return None
    return App(net, str(args.checkpoint), args.pgn, games)
