"""Speed of play's legality part and of its games against the ladder's anchors: the old path
(one mode after the other, three passes over every whole sequence per ply; one game at a time
against each anchor) against the new one (every mode in one KV-cached batch; every game in
flight together), in the same run, as a ratio. Needs torch, python-chess and Stockfish (the
elo part) only.

    python benchmarks/play_parts_speed.py --preset baseline --device cuda \
        --json benchmarks/notes/2026-12-03-play-h200/play-parts-h200.json      # one H200
    python benchmarks/play_parts_speed.py --preset tiny --device cpu \
        --json benchmarks/notes/2026-12-03-legality-anchors-batched/play-parts-cpu2.json
    ... --checkpoint results/RUN/train/best.pt                              # trained weights

Legality: ``--games`` sampled games and one greedy game of ``--max-plies`` plies (the play
defaults: 16 + 1, 120); the new path is timed twice, its illegal proposals replaced from the KV
cache (``new_seconds``) and by a pass over the whole games (``pass_seconds``, as before the
cached replacement; ``pass_ratio`` = pass / new). Elo: ``--games-per-anchor`` games (8) against
each of the default ladder's 12 anchors (96 games), ``--elo-max-plies`` plies at most (300, the
ladder's), the openings of ``ladder.LadderSettings()``. The model plays argmax (as the elo part
does). Weights: freshly initialised unless ``--checkpoint`` (a fresh model proposes illegal
moves far more often than a trained one, so legality replaces more moves; and its games against
the anchors are other games than a trained model's).

The anchors' own thinking is measured apart: every anchor's ``move`` is timed, summed over
calls (``anchor_seconds``), and on the new path also as the wall time during which at least
one anchor was thinking (``anchor_busy_seconds``); and the new path's games are played again
with an instant model (``instant_model_seconds``: a player that replays the model's recorded
moves; where a UCI_Elo anchor's unseeded play leaves the recorded game, it plays the first
legal move), the wall time of those games with the model's cost taken out: the floor.
``identical`` says whether the new path's games are the old path's (the UCI_Elo anchors'
games are not compared: they do not replay).

``--sdpa torch,play`` runs the parts under each choice of attention kernels in turn
(``chesslm.scorer.kernels``: torch's own, which is cuDNN's on an H200 with a plan per new shape,
then play's), the old paths under the first only; ``--no-old`` skips the old paths.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import sys
import threading
import time
from pathlib import Path
from typing import Any

import chess
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chesslm.ladder import games, inflight
from chesslm.ladder import players as anchors  # noqa: E402
from chesslm.ladder import round_robin as ladder
from chesslm.model import gpt  # noqa: E402
from chesslm.scorer import kernels

MODES = {"greedy": 0.0, "temperature_1": 1.0}


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def timed(fn, device: str):  # noqa: ANN001, ANN201
    sync(device)
    start = time.perf_counter()
    out = fn()
    sync(device)
    return out, time.perf_counter() - start


def legality(net: gpt.GPT, args: argparse.Namespace) -> dict[str, Any]:
    kw = {"games": args.games, "max_plies": args.max_plies, "seed": 0, "deadline": 1e18}
    games.free_games(net, MODES, **{**kw, "max_plies": 4})  # warm-up (CUDA kernels)
    old, old_s = None, None
    if args.old:
        old, old_s = timed(lambda: {m: games.free_games_plain(net, temperature=t, **kw)[0]
                                    for m, t in MODES.items()}, args.device)  # fmt: skip
    new, new_s = timed(lambda: games.free_games(net, MODES, **kw)[0], args.device)
    # the new path with its replacements by best_moves' pass over the whole games
    passed, pass_s = timed(
        lambda: games.free_games(net, MODES, replace="pass", **kw)[0], args.device
    )

    def moves(play: dict) -> dict:
        return {m: [(g.board.move_stack, g.illegal_plies) for g in gs] for m, gs in play.items()}

    plies = sum(g.proposals for gs in new.values() for g in gs)
    illegal = sum(len(g.illegal_plies) for gs in new.values() for g in gs)
    out = {"games": sum(map(len, new.values())), "plies": plies, "illegal": illegal,
           "new_seconds": new_s, "new_plies_per_s": plies / new_s, "pass_seconds": pass_s,
           "pass_plies_per_s": plies / pass_s, "pass_ratio": pass_s / new_s,
           "pass_identical": moves(passed) == moves(new)}  # fmt: skip
    if old is not None:
        out |= {"old_seconds": old_s, "ratio": old_s / new_s, "old_plies_per_s": plies / old_s,
                "identical": moves(old) == moves(new)}  # fmt: skip
    return out


class Clock:
    """Every anchor's ``move`` timed: seconds summed, and the wall time with one thinking."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls, self.seconds, self.busy, self.thinking, self.since = 0, 0.0, 0.0, 0, 0.0

    def wrap(self, player: anchors.Player) -> anchors.Player:
        inner = player.move

        def move(board: chess.Board) -> chess.Move:
            with self.lock:
                if self.thinking == 0:
                    self.since = time.perf_counter()
                self.thinking += 1
            start = time.perf_counter()
            try:
                return inner(board)
            finally:
                end = time.perf_counter()
                with self.lock:
                    self.calls, self.seconds = self.calls + 1, self.seconds + end - start
                    self.thinking -= 1
                    if self.thinking == 0:
                        self.busy += end - self.since

        player.move = move  # type: ignore[method-assign]
        return player

    @contextlib.contextmanager
    def on_anchors(self):  # noqa: ANN201
        """Every anchor opened meanwhile is timed (``ladder`` and ``inflight`` open them
        through ``anchors.open_player``)."""
        real = anchors.open_player
        anchors.open_player = lambda *args: self.wrap(real(*args))
        try:
            yield self
        finally:
            anchors.open_player = real


class InstantModel:
    """The model's recorded moves, replayed at once (``inflight``'s batched player)."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.name, self.next = "model", {}
        for row in rows:
            moves = row["moves"].split()
            for i in range(len(moves)):
                self.next[tuple(moves[:i])] = moves[i]

    def twin(self) -> InstantModel:
        return self

    def new_game(self, seed: int) -> None:
        pass

    def moves(self, seats: list, boards: list[chess.Board]) -> list[chess.Move]:
        out = []
        for board in boards:
            uci = self.next.get(tuple(m.uci() for m in board.move_stack))
            move = chess.Move.from_uci(uci) if uci else None
            out.append(move if move in board.legal_moves else next(iter(board.legal_moves)))
        return out


def elo_games(net: gpt.GPT, args: argparse.Namespace) -> dict[str, Any]:
    settings = ladder.LadderSettings(max_plies=args.elo_max_plies)
    specs, per = settings.anchors, args.games_per_anchor
    model = anchors.ModelPlayer(net, name="model")
    model.move(chess.Board())  # warm-up

    def sequential() -> dict[str, list]:
        return {s.name: ladder.play_anchor(model, s, settings, args.engine, per) for s in specs}

    def together(player: Any) -> dict[str, list]:
        return inflight.play_anchors_together(
            player, specs, settings, args.engine, per, max_in_flight=args.max_in_flight
        )

    if args.old:
        with Clock().on_anchors() as old_clock:
            old, old_s = timed(sequential, args.device)
    with Clock().on_anchors() as new_clock:
        new, new_s = timed(lambda: together(model), args.device)
    rows = [r for by in new.values() for r in by]
    with Clock().on_anchors() as instant_clock:
        _, instant_s = timed(lambda: together(InstantModel(rows)), args.device)
    replayable = [s.name for s in specs if s.reproducible]
    out = {
        "games": len(rows),
        "plies": sum(r["plies"] for r in rows),
        "new_seconds": new_s,
        "new_anchor_seconds": new_clock.seconds,
        "new_anchor_busy_seconds": new_clock.busy,
        "instant_model_seconds": instant_s,
        "instant_model_anchor_busy_seconds": instant_clock.busy,
        "anchor_calls": new_clock.calls,
        "per_anchor_plies": {n: sum(r["plies"] for r in by) for n, by in new.items()},
    }
    if args.old:
        out |= {"old_seconds": old_s, "ratio": old_s / new_s,
                "old_anchor_seconds": old_clock.seconds,
                "identical": all(old[n] == new[n] for n in replayable)}  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny", choices=("tiny", "small", "baseline"))
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--checkpoint", type=Path, help="a run's best.pt (default: fresh weights)")
    parser.add_argument("--games", type=int, default=16, help="legality's sampled games")
    parser.add_argument("--max-plies", type=int, default=120, help="legality's plies")
    parser.add_argument("--games-per-anchor", type=int, default=8)
    parser.add_argument("--elo-max-plies", type=int, default=300)
    parser.add_argument("--max-in-flight", type=int, default=inflight.MAX_IN_FLIGHT)
    parser.add_argument("--engine", default=None, help="Stockfish (default: found on PATH)")
    parser.add_argument("--parts", default="legality,elo")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (play's default 1)")
    parser.add_argument("--no-old", dest="old", action="store_false",
                        help="the new paths only (the old ones take minutes on a GPU)")  # fmt: skip
    parser.add_argument("--sdpa", default="play",
                        help="attention kernels (chesslm.scorer.kernels), e.g. torch,play:"
                        " the parts under each in turn, the old paths under the first")  # fmt: skip
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    parts = args.parts.split(",")
    if "elo" in parts:  # legality alone needs no engine
        args.engine = args.engine or anchors.find_engine("stockfish", "--engine")
    torch.manual_seed(0)
    if args.checkpoint:
        from chesslm.model import weights

        net = weights.load_model(args.checkpoint, torch.device(args.device))
    else:
        net = gpt.build(args.preset, device=args.device).eval()
    out: dict[str, Any] = {"preset": args.preset, "device": args.device,
                           "checkpoint": str(args.checkpoint) if args.checkpoint else None,
                           "host": platform.node(), "torch": torch.__version__,
                           "engine": ladder.engine_identity(args.engine)["id_name"]
                           if args.engine else None,
                           "date": time.strftime("%Y-%m-%d %H:%M"),
                           "cores": inflight.default_engines(), "threads": args.threads,
                           "gpu": torch.cuda.get_device_name() if args.device == "cuda"
                           else None}  # fmt: skip
    choices = args.sdpa.split(",")
    for i, choice in enumerate(choices):
        kernels.choose(choice)
        for part, fn in (("legality", legality), ("elo", elo_games)):
            if part in parts:  # the first choice's figures as before; the others' by name
                key = part if i == 0 else f"{part}_sdpa_{choice}"
                out[key] = fn(net, args) | {"sdpa": choice}
                print(json.dumps({key: out[key]}), flush=True)
        args.old = False  # the old paths once
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
