"""The model playing: its best legal moves (``best_moves``, which ``anchors.ModelPlayer`` plays
the Elo ladder's games with) and free-running legality (self-play without a legality mask).
python-chess judges every move.

Self-play games advance in lockstep so the model's moves of one ply are one batch.

A rating-conditioned model plays behind a rating prefix (``chesslm.scorer.ratings``): its own
rating (``self``) for the side it moves, the opponent's for the other; in self-play, where
it moves both sides, White is ``self`` and Black ``opponent`` throughout.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import chess
import chess.engine
import numpy as np
import torch

from chesslm.data import tokens
from chesslm.model import gpt
from chesslm.progress import Progress
from chesslm.scorer import branched, decode, ratings, scoring, times

logger = logging.getLogger(__name__)


def model_device(net: torch.nn.Module) -> torch.device:
    return next(net.parameters()).device


def move_tokens_of(board: chess.Board) -> list[int]:
    """BOS and the triples of a board's move stack (the model's main line)."""
    out = [tokens.BOS]
    for move in board.move_stack:
        out.extend(tokens.move_tokens(move))
    return out


@torch.no_grad()
def best_moves(
    net: torch.nn.Module,
    boards: Sequence[chess.Board],
    *,
    sample: bool | Sequence[bool] = False,
    prefixes: Sequence[Sequence[int]] | None = None,
    generators: Sequence[torch.Generator | None] | None = None,
) -> list[chess.Move]:
    """Each board's best legal move under the legal-renormalised factorisation (``scoring``),
    or a move sampled from it (``sample``, for all boards or each board's: from each board's
    own of ``generators``, board after board; one generator may stand several times); one
    batched pass for all boards. ``prefixes``: each board's tokens before BOS
    (``mover_prefix``; none: the default ratings')."""
    if not boards:
        return []
    if prefixes is None:
        prefixes = [mover_prefix(net, b, ratings.DEFAULT, ratings.DEFAULT) for b in boards]
    inputs = [
        branched.GameInput.from_plies(
            move_tokens_of(b), [scoring.legal_codes(b)], start=len(b.move_stack), prefix=lead
        )
        for b, lead in zip(boards, prefixes, strict=True)
    ]
    batch = branched.build_batch(inputs, model_device(net))
    return _pick(batch, inputs, scoring.score(net, batch).move_logp.cpu(), sample, generators)


def _pick(batch, inputs, logp, sample, generators) -> list[chess.Move]:  # noqa: ANN001
    """Each board's argmax of its legal moves' ``logp`` (scored ``inputs``), or a draw
    (``best_moves``' ``sample`` and ``generators``), board after board."""
    samples = [sample] * len(inputs) if isinstance(sample, bool) else sample
    moves = []
    for p in range(len(inputs)):
        idx = np.nonzero(batch.move_ply == p)[0]
        codes = inputs[p].legal(0)
        lp = logp[idx]
        if samples[p]:
            gen = None if generators is None else generators[p]
            choice = int(torch.multinomial(lp.exp(), 1, generator=gen))
        else:
            choice = int(torch.argmax(lp))
        moves.append(scoring.decode_code(codes[choice]))
    return moves


@torch.no_grad()
def cached_best_moves(
    decoder: decode.Decoder,
    last: torch.Tensor,
    at: int,
    rows: torch.Tensor,
    boards: Sequence[chess.Board],
    **choose: Any,
) -> list[chess.Move]:
    """``best_moves`` of ``boards``, whose sequences are the decoder's ``rows`` (a device
    index), cached before position ``at`` (their next source's), ``last`` the logits there:
    the branches of ``scoring`` (every legal source, every promoting destination) stepped
    over the cache, so no pass reads the games again (``scoring.cached_scores``, which the
    engine's cache shares): the same rows, mask and arithmetic as ``best_moves``' pass.
    ``choose``: its sample and generators."""
    if not boards:
        return []
    inputs, batch, logp = scoring.cached_scores(decoder, last, at, rows, boards)
    return _pick(batch, inputs, logp, choose.get("sample", False), choose.get("generators"))


def mover_prefix(net: torch.nn.Module, board: chess.Board, self_elo: int, opponent_elo: int):  # noqa: ANN201
    """The prefix for the model to move on ``board`` at ``self_elo`` against ``opponent_elo``
    (empty for a model without conditioning)."""
    return ratings.prefix(net, *ratings.colours(board.turn, self_elo, opponent_elo))


# ------------------------------------------------------------------ free-running legality


@dataclass
class SelfPlay:
    """One self-play game: each ply's proposal (legal or not) and the move played."""

    board: chess.Board = field(default_factory=chess.Board)
    illegal_plies: list[int] = field(default_factory=list)  # 1-based plies
    proposals: int = 0


def _judge(board: chess.Board, triple: tuple[int, int, int]) -> chess.Move | None:
    try:
        move = tokens.decode_move(triple)
    except ValueError:
        return None
    return move if board.is_legal(move) else None


def self_play_games(games: int, temperature: float) -> int:
    """Games self-play plays: greedy games from one start are identical, so one."""
    return 1 if temperature == 0 else games


GRAMMAR = ((0, 64), (0, 64), (tokens.PROMO_NONE, tokens.PROMO_NONE + 5))  # each token's range


def self_play(
    net: torch.nn.Module,
    *,
    games: int,
    max_plies: int,
    temperature: float,
    seed: int,
    deadline: float,
    progress: Progress | None = None,
    elo: tuple[int, int] = (ratings.DEFAULT, ratings.DEFAULT),
) -> dict[str, Any]:
    """``games`` self-play games from the start position without a legality mask. An illegal
    proposal is counted, then replaced by the model's best legal move (sampled at temperature
    1) so the game goes on. Greedy games from one start are identical: one is played.
    ``progress`` gets the games finished after each ply; ``elo``: (self, opponent), White's
    and Black's ratings for a conditioned model."""
    one = {"mode": temperature}
    return self_play_modes(net, one, games=games, max_plies=max_plies, seed=seed,
                           deadline=deadline, progress={"mode": progress},
                           elo=elo)["mode"]  # fmt: skip


def self_play_modes(
    net: torch.nn.Module, modes: dict[str, float], *, games: int, max_plies: int, **options: Any
) -> dict[str, dict[str, Any]]:
    """``self_play`` at each mode's temperature, every mode's games in one batch per ply
    (``free_games``, which takes ``options``: seed, deadline, progress, elo): each mode's
    summary."""
    by_mode, complete = free_games(net, modes, games=games, max_plies=max_plies, **options)
    return {
        mode: summarise_self_play(by_mode[mode], max_plies, t, games_asked=games, complete=complete)
        for mode, t in modes.items()
    }


def free_games(
    net: torch.nn.Module,
    modes: dict[str, float],
    *,
    games: int,
    max_plies: int,
    seed: int,
    deadline: float,
    progress: dict[str, Progress | None] | None = None,
    elo: tuple[int, int] = (ratings.DEFAULT, ratings.DEFAULT),
    replace: str = "cache",
) -> tuple[dict[str, list[SelfPlay]], bool]:
    """Each mode's self-play games, and whether they ended before ``deadline``. Every mode's
    games advance in one batch per ply, each mode drawing from a generator of its own seeded
    by ``seed`` (so each mode's games are the ones it plays alone). Every live game is at the
    same ply, so the decoder's cache (``decode``) holds one length: a ply is three one-token
    steps and one three-token step (the move played, over the proposal), not three passes
    over the whole sequences. An illegal proposal's replacement is scored over the cache too
    (``replace`` "cache"; "pass": ``best_moves``' pass over the whole game, as first written,
    which the tests and the benchmark compare with)."""
    if replace not in REPLACE:
        raise ValueError(f"replace must be one of {REPLACE}, not {replace!r}")
    lead = list(ratings.prefix(net, *elo))
    rows = [
        (mode, SelfPlay()) for mode, t in modes.items() for _ in range(self_play_games(games, t))
    ]
    games_of = {mode: [g for m, g in rows if m == mode] for mode in modes}
    gens = {mode: torch.Generator().manual_seed(seed) for mode in modes}
    device = model_device(net)
    decoder = decode.Decoder(net, len(rows), len(lead) + 1 + 3 * max_plies)
    start = torch.tensor([lead + [tokens.BOS]] * len(rows), dtype=torch.long, device=device)
    last = decoder.step(start, 0)[:, -1]
    complete = True
    for ply in range(1, max_plies + 1):
        alive = [i for i, (_, g) in enumerate(rows) if not g.board.is_game_over(claim_draw=False)]
        if not alive:
            break
        if time.monotonic() >= deadline:
            complete = False
            break
        if len(alive) < len(rows):  # ended games leave the batch
            keep = torch.tensor(alive, device=device)
            decoder.keep(keep)
            last, rows = last[keep], [rows[i] for i in alive]
        at = len(lead) + 1 + 3 * (ply - 1)
        triples = _propose(decoder, last, at, _groups(rows, modes, gens, device))
        played = _settle(rows, triples, ply, modes, gens, (net, lead, replace, decoder, last, at))
        if ply < max_plies:
            last = decoder.step(torch.tensor(played, device=device), at)[:, -1]
        for mode, each in (progress or {}).items():
            if each is not None:
                over = sum(g.board.is_game_over(claim_draw=False) for g in games_of[mode])
                each.update(
                    over if ply < max_plies else len(games_of[mode]), f"ply {ply} of {max_plies}"
                )
    return games_of, complete


Group = tuple[torch.Tensor, float, torch.Generator]  # a mode's rows, temperature, generator


def _groups(rows, modes, gens, device) -> list[Group]:  # noqa: ANN001
    """Each mode's rows of the batch (a device index), its temperature and generator."""
    out = []
    for mode, t in modes.items():
        mine = [i for i, (m, _) in enumerate(rows) if m == mode]
        if mine:
            out.append((torch.tensor(mine, device=device), t, gens[mode]))
    return out


@torch.no_grad()
def _propose(
    decoder: decode.Decoder, last: torch.Tensor, at: int, groups: list[Group]
) -> list[tuple[int, int, int]]:
    """Each row's next move triple, token by token, with the grammar only (no legality mask):
    greedy rows' argmax stays on the device; sampled rows draw on the host from their mode's
    generator, as ``_propose_plain`` does."""
    logits, out = last, []
    for phase, (low, high) in enumerate(GRAMMAR):
        allowed = torch.zeros(logits.size(-1), dtype=torch.bool, device=logits.device)
        allowed[low:high] = True
        logits = logits.masked_fill(~allowed, float("-inf"))
        nxt = logits.argmax(-1)
        for rows, t, gen in groups:
            if t != 0:
                probs = torch.softmax(logits[rows] / t, -1).cpu()
                drawn = torch.multinomial(probs, 1, generator=gen).squeeze(1)
                nxt[rows] = drawn.to(nxt.device)
        out.append(nxt)
        if phase < 2:
            logits = decoder.step(nxt.unsqueeze(1), at + phase)[:, -1]
    return [tuple(triple) for triple in torch.stack(out, 1).cpu().tolist()]


REPLACE = ("cache", "pass")  # free_games' replacements: from the decoder, or best_moves'


def _settle(rows, triples, ply, modes, gens, where) -> list[tuple[int, int, int]]:  # noqa: ANN001
    """Each game's proposal judged: legal ones played, illegal ones counted and replaced by
    the model's best legal move (one batch for every mode's: ``cached_best_moves`` over the
    decoder's cache, or ``best_moves``' pass over the whole games, ``free_games``'
    ``replace``); the triples played."""
    net, lead, replace, decoder, last, at = where
    need = []
    for i, ((mode, g), triple) in enumerate(zip(rows, triples, strict=True)):
        g.proposals += 1
        move = _judge(g.board, triple)
        if move is None:
            g.illegal_plies.append(ply)
            need.append((i, mode, g))
        else:
            g.board.push(move)
    boards, sampled = [g.board for _, _, g in need], [modes[m] != 0 for _, m, _ in need]
    choose = {"sample": sampled, "generators": [gens[m] for _, m, _ in need]}
    if replace == "cache":
        index = torch.tensor([i for i, _, _ in need], dtype=torch.long, device=last.device)
        replacements = cached_best_moves(decoder, last, at, index, boards, **choose)
    else:
        replacements = best_moves(net, boards, prefixes=[lead] * len(need), **choose)
    for (_, _, g), move in zip(need, replacements, strict=True):
        g.board.push(move)
    return [tokens.move_tokens(g.board.peek()) for _, g in rows]


# ------------------------------------------------------------------ the reference


@torch.no_grad()
def _propose_plain(
    net: torch.nn.Module, seqs: list[list[int]], temperature: float, gen: torch.Generator | None
) -> list[tuple[int, int, int]]:
    """Each sequence's next move triple, token by token, with the grammar only (squares,
    squares, promotion tokens): no legality mask."""
    device = model_device(net)
    x = torch.tensor(seqs, dtype=torch.long, device=device)
    out = []
    for phase in range(3):
        with gpt.autocast(device):
            pos = torch.arange(x.size(1), device=device)
            rows = times.input_rows(net, pos)  # None: the model reads no time inputs
            logits = net(x) if rows is None else net(x, time=rows.expand(len(x), -1, -1))
            logits = logits[:, -1].float()
        low, high = GRAMMAR[phase]
        allowed = torch.zeros(logits.size(-1), dtype=torch.bool, device=device)
        allowed[low:high] = True
        logits = logits.masked_fill(~allowed, float("-inf"))
        if temperature == 0:
            nxt = logits.argmax(-1)
        else:
            probs = torch.softmax(logits / temperature, -1).cpu()
            nxt = torch.multinomial(probs, 1, generator=gen).squeeze(1).to(device)
        out.append(nxt)
        x = torch.cat([x, nxt.unsqueeze(1)], dim=1)
    return [tuple(int(t) for t in triple) for triple in torch.stack(out, 1).cpu().tolist()]


def free_games_plain(
    net: torch.nn.Module, *, temperature: float, **limits: Any
) -> tuple[list[SelfPlay], bool]:
    """``free_games`` of one mode as first written, the reference the tests and the benchmark
    compare it with: each ply three forward passes over every whole sequence, one per
    token. ``limits``: ``self_play``'s games, max_plies, seed, deadline and elo."""
    lead = ratings.prefix(net, *limits.get("elo", (ratings.DEFAULT, ratings.DEFAULT)))
    n = self_play_games(limits["games"], temperature)
    gen = torch.Generator().manual_seed(limits["seed"])
    games_of = [SelfPlay() for _ in range(n)]
    complete = True
    for ply in range(1, limits["max_plies"] + 1):
        live = [g for g in games_of if not g.board.is_game_over(claim_draw=False)]
        if not live:
            break
        if time.monotonic() >= limits["deadline"]:
            complete = False
            break
        triples = _propose_plain(
            net, [lead + move_tokens_of(g.board) for g in live], temperature, gen
        )
        need: list[SelfPlay] = []
        for g, triple in zip(live, triples, strict=True):
            g.proposals += 1
            move = _judge(g.board, triple)
            if move is None:
                g.illegal_plies.append(ply)
                need.append(g)
            else:
                g.board.push(move)
        replacements = best_moves(net, [g.board for g in need], sample=temperature != 0,
                                  generators=[gen] * len(need),
                                  prefixes=[lead] * len(need))  # fmt: skip
        for g, move in zip(need, replacements, strict=True):
            g.board.push(move)
    return games_of, complete


BUCKET = 10


def summarise_self_play(
    games_of: Sequence[SelfPlay],
    max_plies: int,
    temperature: float,
    *,
    games_asked: int,
    complete: bool,
) -> dict[str, Any]:
    buckets = []
    for start in range(1, max_plies + 1, BUCKET):
        end = start + BUCKET - 1
        proposals = sum(max(0, min(end, g.proposals) - start + 1) for g in games_of)
        illegal = sum(sum(start <= p <= end for p in g.illegal_plies) for g in games_of)
        if proposals:
            by_k = sum(bool(g.illegal_plies) and g.illegal_plies[0] <= end for g in games_of)
            buckets.append({
                "plies": f"{start}-{end}",
                "proposals": proposals,
                "illegal": illegal,
                "illegal_share": illegal / proposals,
                "games_with_illegal_by_end": by_k / len(games_of),
            })  # fmt: skip
    first = [g.illegal_plies[0] for g in games_of if g.illegal_plies]
    total = sum(g.proposals for g in games_of)
    return {
        "temperature": temperature,
        "games": len(games_of),
        "games_asked": games_asked,
        "complete": complete,
        "proposals": total,
        "illegal": sum(len(g.illegal_plies) for g in games_of),
        "illegal_share": sum(len(g.illegal_plies) for g in games_of) / total if total else None,
        "games_with_illegal": len(first) / len(games_of) if games_of else None,
        "first_illegal_ply_mean": float(np.mean(first)) if first else None,
        "first_illegal_ply_median": float(np.median(first)) if first else None,
        "games_without_illegal": len(games_of) - len(first),
        "mean_game_plies": float(np.mean([g.proposals for g in games_of])) if games_of else None,
        "buckets": buckets,
    }
