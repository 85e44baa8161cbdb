"""An outcome checkpoint's evaluation for the UCI engine: the outcome head's win/draw/loss
probabilities (``runs.NAME.outcome``, ``chesslm.train.outcome``) at a position, from the side
to move, and the centipawns a GUI shows for them; and ``before_moves``, the same before each
move of whole games (``chesslm-analyse``'s win probabilities).

The centipawns are Lichess's win-percentage curve read backwards: lila's
``modules/analyse/src/main/WinPercent.scala`` has win% = 50 + 50 * (2 / (1 + exp(-0.00368208 *
cp)) - 1), i.e. the expected score E = W + D/2 = 1 / (1 + exp(-0.00368208 * cp)), with cp held
within ±1000 (``Eval.Cp.ceiled``). So cp = ln(E / (1 - E)) / 0.00368208, held within ±1000 too
(E of 0.5 is 0, 0.75 is 298).

>>> centipawns(0.5), centipawns(0.75), centipawns(1.0), centipawns(0.0)
(0, 298, 1000, -1000)
>>> permille([0.3333, 0.3333, 0.3334]), permille([0.0004, 0.0004, 0.9992])
([333, 333, 334], [1, 0, 999])
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from chesslm.data import tokens
from chesslm.model import gpt

LICHESS_MULTIPLIER = 0.00368208  # lila WinPercent.winningChances
CP_CEILING = 1000  # lila Eval.Cp.CEILING


def centipawns(expected: float) -> int:
    """The centipawns whose Lichess win percentage is ``expected`` (0-1), within ±1000."""
    if expected <= 0.0 or expected >= 1.0:
        return CP_CEILING if expected >= 1.0 else -CP_CEILING
    cp = math.log(expected / (1.0 - expected)) / LICHESS_MULTIPLIER
    return max(-CP_CEILING, min(CP_CEILING, round(cp)))


def permille(wdl: Sequence[float]) -> list[int]:
    """Win, draw, loss in permille summing to 1000 (the largest remainders round up)."""
    raw = [1000.0 * p / sum(wdl) for p in wdl]
    out = [math.floor(r) for r in raw]
    for i in sorted(range(3), key=lambda i: out[i] - raw[i])[: 1000 - sum(out)]:
        out[i] += 1
    return out


@torch.no_grad()
def evaluations(net: gpt.GPT, games: list[list[int]], device: torch.device) -> list[list[float]]:
    """Win/draw/loss probabilities from the side to move at the end of each token sequence
    (prefix, BOS, the moves' triples: all of one length); needs the outcome head."""
    x = torch.tensor(games, dtype=torch.long, device=device)
    with gpt.autocast(device):
        _, outcome = net(x, outcome=True)
    return outcome[:, -1].float().softmax(-1).cpu().tolist()


@torch.no_grad()
def before_moves(
    net: gpt.GPT, games: list[list[int]], lead: int, device: torch.device, batch_tokens: int
) -> list[list[list[float]]]:
    """Per game (``lead`` prefix tokens, BOS, one triple per move, no EOS), per move: the win,
    draw and loss probabilities of the side to move before it, read where the head reads a
    position (BOS, then each move's last token); games run right-padded, ``batch_tokens`` at
    most per forward (one game at least); needs the outcome head."""
    out: list[list[list[float]]] = []
    start = 0
    while start < len(games):
        width, end = len(games[start]), start + 1
        while end < len(games) and max(width, len(games[end])) * (end + 1 - start) <= batch_tokens:
            width, end = max(width, len(games[end])), end + 1
        rows = [g + [tokens.PAD] * (width - len(g)) for g in games[start:end]]
        x = torch.tensor(rows, dtype=torch.long, device=device)
        with gpt.autocast(device):
            _, logits = net(x, outcome=True)
        p = logits.float().softmax(-1).cpu()
        for row, game in zip(p, games[start:end], strict=True):
            out.append(row[lead : len(game) - 1 : 3].tolist())  # BOS, each 3rd token; not the end
        start = end
    return out


def score_words(wdl: Sequence[float], show_wdl: bool) -> str:
    """``score cp N`` (and ``wdl W D L`` in permille) of a position's probabilities."""
    words = f"score cp {centipawns(wdl[0] + 0.5 * wdl[1])}"
    if show_wdl:
        words += " wdl " + " ".join(map(str, permille(wdl)))
    return words
