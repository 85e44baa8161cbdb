"""The scorer's test oracle: every legal move's log-probability from a plain causal pass over
that move's own prefix (one pass per legal move), the loop ``chesslm.scorer.scoring``'s one
branched pass must reproduce."""

from __future__ import annotations

from collections.abc import Sequence

import chess
import torch

from chesslm.data import tokens
from chesslm.model import gpt

NEG_INF = float("-inf")


@torch.no_grad()
def oracle_scores(
    net: gpt.GPT,
    moves: Sequence[chess.Move],
    plies: set[int] | None = None,
    lead: Sequence[int] = (),
    time: Sequence[Sequence[int]] | None = None,
) -> dict[int, dict[chess.Move, float]]:
    """The test oracle: per ply of a game (``plies``: those only), every legal move's
    log-probability from a plain causal pass over that move's own prefix (one pass per legal
    move; ``lead``: the tokens before BOS, a conditioned model's ratings; ``time``: a timed
    model's rows at the game's positions, ``chesslm.scorer.times``), with the legal token
    sets from ``tokens.State`` (python-chess)."""
    device = next(net.parameters()).device
    out = {}
    board = chess.Board()
    prefix = [*lead, tokens.BOS]
    for ply, played in enumerate(moves):
        if plies is not None and ply not in plies:
            board.push(played)
            prefix += list(tokens.move_tokens(played))
            continue
        state = tokens.State(board)
        state.feed(tokens.BOS)
        src_ok = torch.tensor(state.mask(legal=True)[:64])
        per_move = {}
        for move in board.legal_moves:
            s, d, p = tokens.move_tokens(move)
            x = torch.tensor([prefix + [s, d]], device=device)
            with gpt.autocast(device):
                logits = net(x, **_time(time, len(lead), x.size(1), device))[0].float().cpu()
            branch = tokens.State(board)
            branch.feed(tokens.BOS)
            branch.feed(s)
            dst_ok = torch.tensor(branch.mask(legal=True)[:64])
            branch.feed(d)
            pro_ok = torch.tensor(branch.mask(legal=True)[64:69])
            lp = torch.log_softmax(logits[-3, :64].masked_fill(~src_ok, NEG_INF), -1)[s]
            lp = lp + torch.log_softmax(logits[-2, :64].masked_fill(~dst_ok, NEG_INF), -1)[d]
            if move.promotion is not None:
                z = logits[-1, 64:69].masked_fill(~pro_ok, NEG_INF)
                lp = lp + torch.log_softmax(z, -1)[p - tokens.PROMO_NONE]
            per_move[move] = float(lp)
        out[ply] = per_move
        board.push(played)
        prefix += list(tokens.move_tokens(played))
    return out


def _time(rows: Sequence[Sequence[int]] | None, lead: int, T: int, device: torch.device) -> dict:
    """``forward``'s ``time`` for a sequence of ``T`` tokens behind ``lead``: the given rows
    at its positions (BOS, each triple's last token), row 0 elsewhere; none without rows."""
    if rows is None:
        return {}
    time = torch.zeros((1, T, 4), dtype=torch.long)
    n = len(range(lead, T, 3))
    time[0, lead:T:3] = torch.as_tensor(rows[:n], dtype=torch.long)
    return {"time": time.to(device)}
