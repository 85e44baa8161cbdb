"""The rating-gap sweep of a conditioned model with the outcome head (issue 35): how its
predicted result moves with the gap between the two ratings it is given, against the Elo
expectation.

At every counterfactual position (``counterfactual``'s chunks: the move-matching games'
positions), for each gap of ``counterfactual.gaps`` (White's rating minus Black's) White is
given ``gap_centre + gap // 2`` and Black ``gap`` less (``ratings``). The head's win/draw/loss
from the side to move comes from one plain causal pass per gap (the head needs none of the
branched legal-move rows: a plain pass is about a quarter of a branched one's tokens on the
sample's games), turned into White's: W/D/L where White moves, L/D/W where Black does. Per
protocol: White's mean predicted win, draw, loss (Black's win) and expected score W + D/2,
with its 95 % percentile bootstrap interval over games (``outcome``'s), against the Elo
expectation 1 / (1 + 10^(-gap / 400)). The model reads 100-point rating bins
(``chesslm.data.conditioning``): it sees a gap to within a bin.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from chesslm.data import conditioning
from chesslm.match import outcome
from chesslm.match.protocols import Protocol
from chesslm.model import gpt
from chesslm.model.outcome import DRAW, LOSS, WIN
from chesslm.scorer import branched, times

DEFINITION = (
    "per gap (White's rating minus Black's), White at gap_centre + gap // 2 and Black gap"
    " less, at every counterfactual position: the outcome head's win/draw/loss turned into"
    " White's (the mover's where White moves, reversed where Black does); white_score = mean"
    " of White's W + D/2 with a 95 % bootstrap interval over games (none for fewer than"
    " min_interval_games games), against elo_expectation = 1/(1+10^(-gap/400)); the model"
    " reads 100-point rating bins"
)


def ratings(centre: int, gap: int) -> tuple[int, int]:
    """(White's, Black's) rating ``gap`` apart (White's minus Black's) around ``centre``.

    >>> ratings(1500, 400), ratings(1500, -200), ratings(1500, 300)
    ((1700, 1300), (1400, 1600), (1650, 1350))
    """
    white = centre + gap // 2
    return white, white - gap


def leads(centre: int, gaps: Sequence[int]) -> list[np.ndarray]:
    """Each gap's rating prefix (the model's input tokens before BOS)."""
    return [np.asarray(conditioning.prefix(*ratings(centre, g)), np.int64) for g in gaps]


@torch.no_grad()
def head_wdl(
    net: gpt.GPT, games: Sequence[branched.GameInput], lead: np.ndarray, device: torch.device
) -> np.ndarray:
    """(plies, 3) the head's win/draw/loss from the side to move at every scored ply of
    ``games`` in the scorer's order (game by game, ply by ply), each game behind ``lead``:
    one causal pass, right-padded (padding comes after every position read)."""
    rows = [np.concatenate([lead, g.main]) for g in games]
    x = np.zeros((len(rows), max(map(len, rows))), dtype=np.int64)
    for i, row in enumerate(rows):
        x[i, : len(row)] = row
    clocks = times.batch_rows(net, [g.time for g in games], x.shape[1], device)
    with gpt.autocast(device):
        extra = {} if clocks is None else {"time": clocks}
        _, head = net(torch.from_numpy(x).to(device), outcome=True, **extra)
    p = head.float().softmax(-1).cpu().numpy()
    # ply k's position: BOS (k = 0) or move k-1's last token, 3k after BOS
    at = [(i, len(lead) + 3 * (g.start + np.arange(g.plies))) for i, g in enumerate(games)]
    return np.concatenate([p[i, cols] for i, cols in at]).astype(np.float32)


def sweep(
    net: gpt.GPT, games: Sequence[branched.GameInput], gap_leads: Sequence[np.ndarray],
    device: torch.device,
) -> np.ndarray:  # fmt: skip
    """(plies, gaps, 3) ``head_wdl`` behind each gap's prefix."""
    return np.stack([head_wdl(net, games, lead, device) for lead in gap_leads], axis=1)


def white_view(wdl: np.ndarray, ply: np.ndarray) -> np.ndarray:
    """(..., 3) win/draw/loss from the side to move as White's win, draw and loss."""
    black = (np.asarray(ply) % 2 == 1).reshape(-1, *([1] * (wdl.ndim - 1)))
    return np.where(black, wdl[..., [LOSS, DRAW, WIN]], wdl)


def table(
    pos: dict[str, np.ndarray],
    meta: dict[str, np.ndarray],
    protocols: list[Protocol],
    centre: int,
    gaps: Sequence[int],
    **boot: Any,
) -> list[dict[str, Any]]:
    """Rows (protocol, gap, ratings, positions, games, White's mean predicted win, draw,
    loss and score with its interval, the Elo expectation) per protocol and gap, from the
    positions' ``gap_wdl``; ``boot``: replicates, seed, min_games."""
    white = white_view(pos["gap_wdl"].astype(np.float64), pos["ply"])
    score = white[..., WIN] + 0.5 * white[..., DRAW]  # (positions, gaps)
    masks = [p.keep(pos["game"], pos["ply"], meta) for p in protocols]
    sums = outcome.game_sums(pos["game"], score, masks)
    games = (sums[:, :, 0] > 0).sum(axis=0)
    few = games < boot["min_games"]
    ci = np.full((len(masks), len(gaps), 2), np.nan)
    if not few.all():
        ci = outcome.bootstrap_intervals(sums, boot["replicates"], boot["seed"])
    value, rows = outcome.value_or_none, []
    for c, protocol in enumerate(protocols):
        n = int(masks[c].sum())
        mean = white[masks[c]].mean(axis=0) if n else np.full((len(gaps), 3), np.nan)
        for k, gap in enumerate(gaps):
            w, b = ratings(centre, gap)
            rows.append({
                "protocol": protocol.name, "gap": int(gap), "white_elo": w, "black_elo": b,
                "rating_bins": " / ".join(conditioning.bin_label(conditioning.rating_bin(r))
                                          for r in (w, b)),
                "positions": n, "games": int(games[c]), "few_games": bool(few[c]),
                "white_win": value(mean[k, WIN]), "draw": value(mean[k, DRAW]),
                "black_win": value(mean[k, LOSS]),
                "white_score": value(mean[k, WIN] + 0.5 * mean[k, DRAW]),
                "white_score_low": None if few[c] else value(ci[c, k, 0]),
                "white_score_high": None if few[c] else value(ci[c, k, 1]),
                "elo_expectation": float(outcome.elo_expectation(np.array([w]), np.array([b]))[0]),
            })  # fmt: skip
    return rows
