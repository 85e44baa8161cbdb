"""The played move's probability at ratings 800 to 2400 (``RATINGS``) for a rating-conditioned
checkpoint: how a weaker and a stronger player would see each position. Each rating is the
game scored again by ``chesslm-analyse``'s own functions with the rating prefix of a game
between two players of that rating (what ``chesslm-analyse --ratings R,R`` feeds), so each
figure is that CSV's ``p`` string to its printed digit.
"""

from __future__ import annotations

import dataclasses

import torch

from chesslm.engine import analyse
from chesslm.scorer import ratings

# the conditioning's bins are 100 Elo wide; every second one keeps the work per game at 9 passes
RATINGS = tuple(range(800, 2401, 200))


def by_rating(net: torch.nn.Module, game: analyse.Game) -> list[list[str]] | None:
    """Per ply, the played move's probability at each of ``RATINGS`` (the CSV's strings);
    None for a checkpoint that reads no ratings (every rating would give the same figure)."""
    if not ratings.conditioned(net):
        return None
    variants = [dataclasses.replace(game, elo=(elo, elo)) for elo in RATINGS]
    scored = analyse.score_games(net, variants, analyse.BATCH_TOKENS["cpu"])
    return [[f"{plies[i].p:.6g}" for plies in scored] for i in range(len(game.moves))]
