"""An outcome checkpoint's evaluation for the UCI engine: the outcome head's win/draw/loss
probabilities (``runs.NAME.outcome``, ``chesslm.train.outcome``) at a position, from the side
to move, and the centipawns a GUI shows for them (``chesslm-analyse`` reads the head in the
scorer's pass: ``scoring.Scores.wdl``).

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
from typing import Any

import torch

from chesslm.model import gpt
from chesslm.scorer import times

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
def evaluations(
    net: gpt.GPT, games: list[list[int]], device: torch.device, clocks: Any = None
) -> list[list[float]]:
    """Win/draw/loss probabilities from the side to move at the end of each token sequence
    (prefix, BOS, the moves' triples: all of one length); needs the outcome head. A timed
    model reads ``clocks`` (each game's time rows, ``chesslm.scorer.times``; None: unknown)."""
    x = torch.tensor(games, dtype=torch.long, device=device)
    rows = times.batch_rows(net, list(clocks or [None] * len(games)), x.size(1), device)
    with gpt.autocast(device):
        _, outcome = net(x, outcome=True) if rows is None else net(x, outcome=True, time=rows)
    return outcome[:, -1].float().softmax(-1).cpu().tolist()


def score_words(wdl: Sequence[float], show_wdl: bool) -> str:
    """``score cp N`` (and ``wdl W D L`` in permille) of a position's probabilities."""
    words = f"score cp {centipawns(wdl[0] + 0.5 * wdl[1])}"
    if show_wdl:
        words += " wdl " + " ".join(map(str, permille(wdl)))
    return words
