"""One game of a PGN text as the analyse view shows it: every ply's played move with its
probability and rank, the model's top moves, and (where the checkpoint has the heads) the
mover's win/draw/loss and think time, taken from ``chesslm-analyse``'s own functions
(``chesslm.engine.analyse``: ``read_games``, ``score_games``, ``move_rows``) so that every
figure is the CSV's string to its printed digit, not a second scorer that could drift from it.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import chess
import torch

from chesslm.board import curve
from chesslm.engine import analyse
from chesslm.engine.pgnfile import InputError
from chesslm.scorer import ratings

PASTED = Path("pasted PGN")  # what an error line names for text sent by the page
MAX_GAME_NUMBER = 10_000  # a game further into a text than this is not looked for
DISAGREEMENTS = 3  # the plies the move list marks: where the model and the player differ most


class BoardError(ValueError):
    """Input the board cannot show: one line, said on the page (the server keeps serving)."""


def analyse_text(
    net: torch.nn.Module, text: str, *, game: int = 1, source: Path = PASTED
) -> dict[str, Any]:
    """Game number ``game`` (1-based) of a PGN text, scored: its tags and one record per ply.

    :raises BoardError: the text is not PGN, or that game is missing or cannot be read."""
    if not 1 <= game <= MAX_GAME_NUMBER:
        raise BoardError(f"game number {game}: 1..{MAX_GAME_NUMBER} is needed")
    chosen, skipped = read_one(net, text, game, source)
    # chesslm-analyse's own batch size on the CPU: the same passes, the same digits
    plies = analyse.score_games(net, [chosen], analyse.BATCH_TOKENS["cpu"])[0]
    rows = analyse.move_rows(chosen, plies)
    records = ply_records(chosen, plies, rows)
    curves = curve.by_rating(net, chosen)
    for record, values in zip(records, curves or [], strict=False):
        record["by_rating"] = values
    return {
        "game": game,
        "headers": dict(chosen.game.headers),
        "elo": list(chosen.elo),
        "plies": records,
        "disagreements": disagreements(plies),
        "final_fen": final_fen(records[-1]),
        "outcome": bool(net.config.outcome),
        "think_time": bool(net.config.think_time),
        "ratings": list(curve.RATINGS) if curves is not None else None,
    }


def read_one(
    net: torch.nn.Module, text: str, game: int, source: Path
) -> tuple[analyse.Game, list[str]]:
    """The ``game``-th game of the text as ``read_games`` reads it (ratings from its tags, as
    ``chesslm-analyse``'s default ``--ratings from-tags``), and the skip lines before it."""
    lead = len(ratings.prefix(net, -1, -1))
    skipped: list[str] = []
    games = analyse.read_games(io.StringIO(text), None, net.config.block_size, lead, skipped,
                               path=source, limit=game)  # fmt: skip
    try:
        found = [g for g in games if g.label == game]
    except InputError as error:
        raise BoardError(str(error)) from None
    if found:
        return found[0], skipped
    mine = [line for line in skipped if line.startswith(f"game {game}:")
            or line.startswith(f"game {game} (")]  # fmt: skip
    if mine:
        raise BoardError(f"{source}: {mine[0]}")
    raise BoardError(f"{source}: no game {game} in it (it holds fewer games)")


def disagreements(plies: list[analyse.Ply]) -> list[int]:
    """The (1-based) plies of the ``DISAGREEMENTS`` moves the model found least likely, in the
    game's order: the played move's lowest probabilities (the earlier ply first on a tie)."""
    lowest = sorted(range(len(plies)), key=lambda i: (plies[i].logp, i))[:DISAGREEMENTS]
    return sorted(i + 1 for i in lowest)


def ply_records(
    game: analyse.Game, plies: list[analyse.Ply], rows: list[dict[str, object]]
) -> list[dict[str, Any]]:
    """Per ply: the position before it (FEN), the CSV row's strings, the top moves as UCI too
    (the arrows), and the heads' figures where there are some."""
    board, out = game.game.board(), []
    for move, ply, row in zip(game.moves, plies, rows, strict=True):
        record: dict[str, Any] = {
            "ply": row["ply"], "side": row["side"], "fen": board.fen(), "move": row["move"],
            "san": row["san"], "p": row["p"], "logp": row["logp"], "rank": row["rank"],
            "legal_moves": row["legal_moves"],
            "top": [{"uci": m.uci(), "san": row[f"top{k}"], "p": row[f"p{k}"]}
                    for k, (m, _) in enumerate(ply.top, 1)],
        }  # fmt: skip
        for name in (*analyse.OUTCOME_FIELDS, *analyse.TIME_FIELDS):
            if name in row:
                record[name] = row[name]
        out.append(record)
        board.push(move)
    return out


def final_fen(record: dict[str, Any]) -> str:
    """The position after a ply record's move (the last position of a game)."""
    board = chess.Board(record["fen"])
    board.push_uci(record["move"])
    return board.fen()
