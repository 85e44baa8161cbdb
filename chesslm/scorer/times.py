"""The time inputs of the model in play: which clocks a game is fed with.

A model trained with ``time_inputs: true`` reads, at every position of a game (BOS and each
move's last token), four time rows: the time control and both clocks before the move
(``chesslm.model.human_time``); one trained without reads none. The setting is the model's
config's (``net.config.time_inputs``, from the checkpoint's identity), so the scoring, the
games, the engine and the analysis ask here. A validation game is fed its own clocks and time
control (the cache's columns, ``chesslm.data.clocks``'s rule); a game without them (self-play,
the ladder's games, a PGN without clocks) has every time unknown, as the clockless games the
model trained on.

>>> rows = unknown(3)
>>> rows.shape, int(rows[0, 2]) == 1 + 2 * human_time.VALUES
((3, 4), True)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from chesslm.data import conditioning
from chesslm.model import human_time


def timed(net: Any) -> bool:
    """Whether the model reads time inputs (``GPTConfig.time_inputs``)."""
    return bool(getattr(net.config, "time_inputs", False))


def unknown(positions: int) -> np.ndarray:
    """(positions, 4) rows of a game whose clocks and time control are not known."""
    return human_time.unknown_features(positions)


def of_game(clock: Any, base: int, increment: int) -> np.ndarray:
    """(plies + 1, 4) rows at each position of a game with these per-ply readings (-1:
    absent) and time control (-1: unreadable)."""
    return human_time.features(np.asarray(clock), base=int(base), increment=int(increment))


def unknown_rows(pos: torch.Tensor, prefix: int) -> torch.Tensor:
    """(..., 4) rows for tokens at positions ``pos`` (any shape, on any device) of games fed
    from their start behind ``prefix`` rating tokens, every time unknown: the unknown rows
    where a token is a position (BOS, each triple's last token: ``pos - prefix`` a multiple
    of 3), row 0 elsewhere (the prefix, sources, destinations; a branch token never sits at
    a position). What a game without clocks is fed: self-play, the ladder, the engine without
    a clock."""
    at = (pos >= prefix) & ((pos - prefix) % 3 == 0)
    rows = torch.from_numpy(unknown(1)[0]).to(pos.device)
    return torch.where(at.unsqueeze(-1), rows, torch.zeros_like(rows))


def prefix_length(net: Any) -> int:
    """The rating tokens before BOS of the model's inputs (``ratings``' layout)."""
    return conditioning.PREFIX_LENGTH[net.config.conditioning]


def input_rows(net: Any, pos: torch.Tensor) -> torch.Tensor | None:
    """``unknown_rows`` for a timed model's tokens at ``pos``; None for a model without time
    inputs (``GPT.forward(time=None)``)."""
    return unknown_rows(pos, prefix_length(net)) if timed(net) else None


def batch_rows(
    net: Any, games: list[np.ndarray | None], T: int, device: torch.device | str
) -> torch.Tensor | None:
    """(B, T, 4) rows of right-padded token rows of B games fed from their start (behind the
    model's rating prefix): each game's own rows (``of_game``'s) at its positions where it
    has them, every time unknown where it has none (None); None for a model without time
    inputs."""
    if not timed(net):
        return None
    lead = prefix_length(net)
    out = unknown_rows(torch.arange(T), lead).repeat(len(games), 1, 1)
    for b, rows in enumerate(games):
        if rows is not None:
            out[b, lead : lead + 3 * len(rows) : 3] = torch.from_numpy(np.asarray(rows))
    return out.to(device)
