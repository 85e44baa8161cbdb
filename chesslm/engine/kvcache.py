"""The engine's KV cache between ``go`` commands (issue 58 item 1): a game's keys and values
kept from one position to the next, so that a ``go`` in a game runs the model on the moves
played since the last one (and the legal moves' branches), not on the whole game again.

``GameCache.scores`` gives what ``chesslm.engine.session.position_scores`` gives (the legal
codes, their log-probabilities, the outcome head's win/draw/loss and the think-time head's
distribution at the position), from the play scorer's own machinery: ``decode.Decoder.step``
writes the new tokens of the main line (the rating prefix, BOS, the triples) into the cache,
and ``scoring.cached_scores`` runs every legal source and promoting destination beside it, as
an illegal proposal's replacement is scored in free-running play. The cache holds the token
sequence it was last given and, for a model with time inputs, each token's time rows (the
clocks the ``go`` commands gave: ``chesslm.engine.think``). A new position reuses the longest
start it shares with that sequence, tokens and time rows alike, and steps the rest:

* the next position of the same game (the common case): the moves since the last ``go``;
* a takeback (a position with fewer moves): the last token alone, stepped again to read its
  output (the cache keeps keys and values, not outputs); what lies after it is masked off;
* a different game, a ``position fen`` of the start with other moves, a changed rating prefix
  (the side to move changed with ``SelfElo`` ≠ ``OppoElo``), a time row the clocks changed:
  everything from the first token that differs, all of it when the prefix differs.

``ucinewgame`` empties it (``clear``). A ``position fen`` the model cannot read asks no model
and leaves the cache as it was. On the CPU the numbers are the full pass's to float rounding
(the tests hold them within 1e-5 on the sample's games); on CUDA both paths run under BF16
autocast and agree to BF16's precision.
"""

from __future__ import annotations

import chess
import numpy as np
import torch

from chesslm.data import tokens
from chesslm.model import gpt
from chesslm.scorer import decode, scoring, times


class GameCache:
    """One game's token sequence (and a timed model's per-token time rows) as last scored,
    and the decoder holding its keys and values; ``reused``: the tokens the last ``scores``
    read from the cache, of ``length`` in all."""

    def __init__(self, net: gpt.GPT) -> None:
        self.net = net
        self.device = next(net.parameters()).device
        self.decoder: decode.Decoder | None = None  # made at the first scores
        self.sequence = np.zeros(0, dtype=np.int64)
        self.rows: np.ndarray | None = None
        self.reused = self.length = 0

    def clear(self) -> None:
        """Forget the game: the next ``scores`` steps its whole sequence."""
        self.sequence, self.rows = np.zeros(0, dtype=np.int64), None

    def inputs(
        self, board: chess.Board, prefix: list[int], time: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """The position's main line (``prefix``, BOS, the triples) and, for a timed model, each
        token's time rows: ``time`` (plies + 1, 4) at BOS and each triple's last token, row 0
        elsewhere, as ``branched`` feeds them (every time unknown where ``time`` is None)."""
        main = [*prefix, tokens.BOS]
        for move in board.move_stack:
            main.extend(tokens.move_tokens(move))
        sequence = np.asarray(main, dtype=np.int64)
        if not times.timed(self.net):
            return sequence, None
        lead = len(prefix)
        rows = times.unknown_rows(torch.arange(len(sequence)), lead).numpy().astype(np.int64)
        if time is not None:
            rows[lead::3] = np.asarray(time, dtype=np.int64)
        return sequence, rows

    def shared(self, sequence: np.ndarray, rows: np.ndarray | None) -> int:
        """How many first tokens ``sequence`` (and ``rows``) share with the cached ones."""
        n = min(len(sequence), len(self.sequence))
        same = sequence[:n] == self.sequence[:n]
        if rows is not None and self.rows is not None:
            same &= (rows[:n] == self.rows[:n]).all(axis=1)
        elif rows is not None or self.rows is not None:
            return 0
        return n if same.all() else int(np.argmin(same))

    @torch.no_grad()
    def scores(
        self, board: chess.Board, prefix: list[int], time: np.ndarray | None = None
    ) -> tuple[list[int], torch.Tensor, list[float] | None, np.ndarray | None]:
        """``session.position_scores(net, board, device, prefix, time)`` from the cache: the
        legal codes, their log-probabilities (CPU, FP32), the win/draw/loss and the
        think-time distribution at the board (None without the head)."""
        sequence, rows = self.inputs(board, prefix, time)
        limit = self.net.config.block_size
        if len(sequence) + 2 > limit:  # the next source and destination fit, or no move
            raise ValueError(f"a game is longer than the model's context {limit}")
        # the last token is always stepped: its output is the position's
        common = min(self.shared(sequence, rows), len(sequence) - 1)
        if self.decoder is None:
            self.decoder = decode.Decoder(self.net, 1, self.net.config.block_size)
        self.clear()  # a step that fails leaves no sequence the cache does not hold
        idx = torch.from_numpy(sequence[common:]).to(self.device).unsqueeze(0)
        rows_in = None if rows is None else torch.from_numpy(rows[common:]).to(self.device)
        logits, hidden = self.decoder.step(
            idx, common, time=None if rows_in is None else rows_in.unsqueeze(0), final=True
        )
        self.sequence, self.rows = sequence, rows
        self.reused, self.length = common, len(sequence)
        one = torch.zeros(1, dtype=torch.long, device=self.device)
        at = len(sequence)
        inputs, _, logp = scoring.cached_scores(self.decoder, logits[:, -1], at, one, [board])
        here = hidden[:, -1]
        with gpt.autocast(self.device):
            head = self.net.outcome_head(here) if self.net.config.outcome else None
            think = self.net.think_head(here) if self.net.config.think_time else None
        wdl = None if head is None else head.float().softmax(-1)[0].cpu().tolist()
        think_here = None if think is None else think.float().softmax(-1)[0].cpu().numpy()
        return inputs[0].legal(0).tolist(), logp, wdl, think_here
