"""The model playing: free-running legality (self-play without a legality mask) and games
against Stockfish at fixed ``UCI_Elo`` anchors. python-chess judges every move.

All games of a kind advance in lockstep so the model's moves of one ply are one batch.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import chess
import chess.engine
import numpy as np
import torch

from chesslm.data import tokens
from chesslm.play import scoring
from chesslm.play.progress import Progress
from chesslm.train import model as gpt

logger = logging.getLogger(__name__)

ENGINE_FALLBACKS = ("/usr/games/stockfish", "/usr/local/bin/stockfish")  # Debian installs here


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
    sample: bool = False,
    generator: torch.Generator | None = None,
) -> list[chess.Move]:
    """Each board's best legal move under the legal-renormalised factorisation (``scoring``),
    or a move sampled from it (``sample``); one batched pass for all boards."""
    if not boards:
        return []
    inputs = [
        scoring.GameInput.from_plies(
            move_tokens_of(b), [scoring.legal_codes(b)], start=len(b.move_stack)
        )
        for b in boards
    ]
    batch = scoring.build_batch(inputs, model_device(net))
    logp = scoring.score(net, batch).move_logp.cpu()
    moves = []
    for p in range(len(boards)):
        idx = np.nonzero(batch.move_ply == p)[0]
        codes = inputs[p].legal(0)
        lp = logp[idx]
        if sample:
            choice = int(torch.multinomial(lp.exp(), 1, generator=generator))
        else:
            choice = int(torch.argmax(lp))
        moves.append(scoring.decode_code(codes[choice]))
    return moves


# ------------------------------------------------------------------ free-running legality


@dataclass
class SelfPlay:
    """One self-play game: each ply's proposal (legal or not) and the move played."""

    board: chess.Board = field(default_factory=chess.Board)
    illegal_plies: list[int] = field(default_factory=list)  # 1-based plies
    proposals: int = 0


@torch.no_grad()
def _propose(
    net: torch.nn.Module, seqs: list[list[int]], temperature: float, gen: torch.Generator | None
) -> list[tuple[int, int, int]]:
    """Each sequence's next move triple, token by token, with the grammar only (squares,
    squares, promotion tokens): no legality mask."""
    device = model_device(net)
    x = torch.tensor(seqs, dtype=torch.long, device=device)
    out = []
    for phase in range(3):
        with gpt.autocast(device):
            logits = net(x)[:, -1].float()
        allowed = torch.zeros(logits.size(-1), dtype=torch.bool, device=device)
        if phase < 2:
            allowed[:64] = True
        else:
            allowed[tokens.PROMO_NONE : tokens.PROMO_NONE + 5] = True
        logits = logits.masked_fill(~allowed, float("-inf"))
        if temperature == 0:
            nxt = logits.argmax(-1)
        else:
            probs = torch.softmax(logits / temperature, -1).cpu()
            nxt = torch.multinomial(probs, 1, generator=gen).squeeze(1).to(device)
        out.append(nxt)
        x = torch.cat([x, nxt.unsqueeze(1)], dim=1)
    return [tuple(int(t) for t in triple) for triple in torch.stack(out, 1).cpu().tolist()]


def _judge(board: chess.Board, triple: tuple[int, int, int]) -> chess.Move | None:
    try:
        move = tokens.decode_move(triple)
    except ValueError:
        return None
    return move if board.is_legal(move) else None


def self_play_games(games: int, temperature: float) -> int:
    """Games self-play plays: greedy games from one start are identical, so one."""
    return 1 if temperature == 0 else games


def self_play(
    net: torch.nn.Module,
    *,
    games: int,
    max_plies: int,
    temperature: float,
    seed: int,
    deadline: float,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """``games`` self-play games from the start position without a legality mask. An illegal
    proposal is counted, then replaced by the model's best legal move (sampled at temperature
    1) so the game goes on. Greedy games from one start are identical: one is played.
    ``progress`` gets the games finished after each ply."""
    n = self_play_games(games, temperature)
    gen = torch.Generator().manual_seed(seed)
    play = [SelfPlay() for _ in range(n)]
    complete = True
    for ply in range(1, max_plies + 1):
        live = [g for g in play if not g.board.is_game_over(claim_draw=False)]
        if not live:
            break
        if time.monotonic() >= deadline:
            complete = False
            break
        triples = _propose(net, [move_tokens_of(g.board) for g in live], temperature, gen)
        need: list[SelfPlay] = []
        for g, triple in zip(live, triples, strict=True):
            g.proposals += 1
            move = _judge(g.board, triple)
            if move is None:
                g.illegal_plies.append(ply)
                need.append(g)
            else:
                g.board.push(move)
        replacements = best_moves(
            net, [g.board for g in need], sample=temperature != 0, generator=gen
        )
        for g, move in zip(need, replacements, strict=True):
            g.board.push(move)
        if progress is not None:
            over = sum(g.board.is_game_over(claim_draw=False) for g in play)
            progress.update(over if ply < max_plies else n, f"ply {ply} of {max_plies}")
    return summarise_self_play(play, max_plies, temperature, games_asked=games, complete=complete)


BUCKET = 10


def summarise_self_play(
    play: Sequence[SelfPlay],
    max_plies: int,
    temperature: float,
    *,
    games_asked: int,
    complete: bool,
) -> dict[str, Any]:
    buckets = []
    for start in range(1, max_plies + 1, BUCKET):
        end = start + BUCKET - 1
        proposals = sum(max(0, min(end, g.proposals) - start + 1) for g in play)
        illegal = sum(sum(start <= p <= end for p in g.illegal_plies) for g in play)
        if proposals:
            by_k = sum(bool(g.illegal_plies) and g.illegal_plies[0] <= end for g in play)
            buckets.append({
                "plies": f"{start}-{end}",
                "proposals": proposals,
                "illegal": illegal,
                "illegal_share": illegal / proposals,
                "games_with_illegal_by_end": by_k / len(play),
            })  # fmt: skip
    first = [g.illegal_plies[0] for g in play if g.illegal_plies]
    total = sum(g.proposals for g in play)
    return {
        "temperature": temperature,
        "games": len(play),
        "games_asked": games_asked,
        "complete": complete,
        "proposals": total,
        "illegal": sum(len(g.illegal_plies) for g in play),
        "illegal_share": sum(len(g.illegal_plies) for g in play) / total if total else None,
        "games_with_illegal": len(first) / len(play) if play else None,
        "first_illegal_ply_mean": float(np.mean(first)) if first else None,
        "first_illegal_ply_median": float(np.median(first)) if first else None,
        "games_without_illegal": len(play) - len(first),
        "mean_game_plies": float(np.mean([g.proposals for g in play])) if play else None,
        "buckets": buckets,
    }


# ------------------------------------------------------------------ games against Stockfish


def find_engine(name: str) -> str:
    """The engine executable: ``name`` on PATH, else Debian's /usr/games location."""
    found = shutil.which(name) or next(
        (p for p in ENGINE_FALLBACKS if Path(p).name == name and Path(p).exists()), None
    )
    if found is None:
        raise FileNotFoundError(
            f"play.elo.engine: {name!r} not found on PATH nor in /usr/games"
            " (apt-get install -y stockfish, or set play.elo.games_per_anchor: 0)"
        )
    return found


@dataclass
class EngineGame:
    anchor: int
    index: int
    model_white: bool
    opening: list[chess.Move]
    board: chess.Board = field(default_factory=chess.Board)

    def __post_init__(self) -> None:
        for move in self.opening:
            self.board.push(move)

    @property
    def key(self) -> str:
        return f"{self.anchor}-{self.index}"


def play_engine_games(
    net: torch.nn.Module,
    *,
    engine_path: str,
    anchors: Sequence[int],
    games_per_anchor: int,
    openings: Sequence[list[chess.Move]],
    limit: chess.engine.Limit,
    max_plies: int,
    deadline: float,
    done: dict[str, dict[str, Any]],
    on_result: Callable[[dict[str, Any]], None],
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Play every anchor's games not in ``done`` (keyed 'anchor-index'); ``on_result`` gets
    each finished game's record as soon as it ends. Game i of an anchor uses opening i // 2,
    the model White in even games: colours balanced per opening. ``progress`` gets the games
    finished (of every anchor's) after each ply."""
    engines: dict[int, chess.engine.SimpleEngine] = {}
    info: dict[str, Any] = {"engine_path": engine_path, "anchors_effective": {}}
    try:
        for anchor in anchors:
            engines[anchor] = _start_engine(engine_path, anchor, info)
        pending = [
            EngineGame(anchor, i, i % 2 == 0, openings[(i // 2) % len(openings)])
            for anchor in anchors
            for i in range(games_per_anchor)
            if f"{anchor}-{i}" not in done
        ]
        complete = True
        while pending:
            if time.monotonic() >= deadline:
                complete = False
                break
            pending = _finish_over(pending, max_plies, on_result, info)
            _play_round(net, pending, engines, limit)
            if progress is not None:
                total = len(anchors) * games_per_anchor
                progress.update(total - len(pending), f"{len(pending)} games in play")
        info["complete"] = complete
        return info
    finally:
        for eng in engines.values():
            eng.quit()


def _start_engine(engine_path: str, anchor: int, info: dict[str, Any]) -> chess.engine.SimpleEngine:
    """One engine limited to ``anchor`` (clamped to its UCI_Elo range, noted in ``info``)."""
    eng = chess.engine.SimpleEngine.popen_uci(engine_path)
    try:
        option = eng.options["UCI_Elo"]
        effective = min(max(anchor, option.min), option.max)
        eng.configure({"UCI_LimitStrength": True, "UCI_Elo": effective, "Threads": 1})
    except BaseException:
        eng.quit()  # not yet among the engines the caller quits
        raise
    info["anchors_effective"][str(anchor)] = effective
    info["engine"] = eng.id.get("name")
    return eng


def _finish_over(
    pending: list[EngineGame],
    max_plies: int,
    on_result: Callable[[dict[str, Any]], None],
    info: dict[str, Any],
) -> list[EngineGame]:
    """Hand the games that ended (or reached ``max_plies``: a draw) to ``on_result``; returns
    those still in play."""
    still = []
    for g in pending:
        over = g.board.is_game_over(claim_draw=True)
        if over or len(g.board.move_stack) >= max_plies:
            on_result(_record(g, adjudicated=not over, effective=info))
        else:
            still.append(g)
    return still


def _play_round(
    net: torch.nn.Module,
    pending: list[EngineGame],
    engines: dict[int, chess.engine.SimpleEngine],
    limit: chess.engine.Limit,
) -> None:
    """One ply of every game in play: the model's moves in one batch, then the engines'."""
    model_turn = [g for g in pending if g.board.turn == g.model_white]
    moves = best_moves(net, [g.board for g in model_turn])
    for g, move in zip(model_turn, moves, strict=True):
        g.board.push(move)
    for g in pending:
        if g in model_turn or g.board.is_game_over(claim_draw=True):
            continue
        g.board.push(engines[g.anchor].play(g.board, limit).move)


def _record(g: EngineGame, *, adjudicated: bool, effective: dict[str, Any]) -> dict[str, Any]:
    if adjudicated:
        result = "1/2-1/2"
    else:
        result = g.board.result(claim_draw=True)
    white_score = {"1-0": 1.0, "0-1": 0.0, "1/2-1/2": 0.5}[result]
    score = white_score if g.model_white else 1 - white_score
    return {
        "key": g.key,
        "anchor": g.anchor,
        "anchor_effective": effective["anchors_effective"][str(g.anchor)],
        "index": g.index,
        "model_colour": "white" if g.model_white else "black",
        "result": result,
        "score": score,
        "plies": len(g.board.move_stack),
        "opening_plies": len(g.opening),
        "adjudicated_draw": adjudicated,
        "moves": " ".join(m.uci() for m in g.board.move_stack),
    }


def openings_from(game_tokens: Sequence[np.ndarray], plies: int) -> list[list[chess.Move]]:
    """The first ``plies`` moves of each game that is at least that long (validation games)."""
    out = []
    for g in game_tokens:
        g = np.asarray(g)
        n = (len(g) - 2) // 3
        if n < plies:
            continue
        out.append([tokens.decode_move(g[1 + 3 * i : 4 + 3 * i]) for i in range(plies)])
    return out
