"""The UCI engine's move latency: ``chesslm-uci`` (``python -m chesslm.engine.uci``) driven through
python-chess as a GUI drives it, playing Stockfish at one node per move, against the same
positions scored in this process with no UCI pipe (``session.legal_scores``: the engine's own
forward pass), same weights, same run. Prints one JSON line: milliseconds per move (median and
90th percentile) for each, and their ratio (what the protocol, the process boundary and the
engine's bookkeeping add to one forward pass). The same positions are also played in this
process by two of the engine's own sessions (``session.Engine``: ``position`` and ``go`` as
the protocol hands them over), one with the game's KV cache (``chesslm.engine.kvcache``, the
engine's default: each go steps the moves since the last one) and one with a full pass at
every go, alternating position by position so that both see the same load; their ratio is the
cache's gain (issue 58 item 1).

    python benchmarks/uci_latency.py --checkpoint results/demo/train/best.pt --device cpu
    python benchmarks/uci_latency.py --preset baseline --device cuda   # fresh weights
    python benchmarks/uci_latency.py --preset baseline --outcome       # the head's score too

Without ``--checkpoint`` a fresh model of ``--preset`` is saved with the project's own saver
(latency does not depend on the weights). ``--threads`` (default 1, the engine's own
default) sets torch's threads on both sides.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import chess
import chess.engine
import torch

from chesslm.engine import session
from chesslm.ladder.players import find_engine
from chesslm.model import weights


def fresh_checkpoint(preset: str, folder: Path, outcome: bool = False) -> Path:
    """A checkpoint of freshly initialised ``preset`` weights (tests.helpers' recipe), with
    the outcome head when ``outcome``."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.helpers import model_checkpoint

    return model_checkpoint(folder / "fresh.pt", preset=preset, outcome=outcome)


def engine_games(
    checkpoint: Path, device: str, moves: int, threads: int, wdl: bool = False
) -> tuple[list[float], list[chess.Board]]:
    """Seconds per model move through UCI over games (model White) until ``moves`` model
    moves, and the games' final boards; ``wdl``: with ``UCI_ShowWDL`` on (an outcome
    checkpoint's score and W/D/L on every move)."""
    command = [sys.executable, "-m", "chesslm.engine.uci", "--checkpoint", str(checkpoint)]
    model = chess.engine.SimpleEngine.popen_uci([*command, "--device", device])
    model.configure({"Threads": threads, **({"UCI_ShowWDL": True} if wdl else {})})
    rival = chess.engine.SimpleEngine.popen_uci(find_engine("stockfish", "--engine"))
    seconds: list[float] = []
    games: list[chess.Board] = []
    try:
        while len(seconds) < moves:
            board = chess.Board()
            while not board.is_game_over() and len(seconds) < moves:
                model_turn = board.turn == chess.WHITE
                start = time.perf_counter()
                limit = chess.engine.Limit(nodes=1)
                move = (model if model_turn else rival).play(board, limit).move
                if model_turn:
                    seconds.append(time.perf_counter() - start)
                board.push(move)
            games.append(board)
    finally:
        model.quit()
        rival.quit()
    return seconds, games


def in_process(checkpoint: Path, device: str, games: list[chess.Board]) -> list[float]:
    """Seconds to score each of the model's positions of those games in this process."""
    net = weights.load_model(str(checkpoint), device)
    where = torch.device(device)
    seconds = []
    for final in games:
        board = chess.Board()
        for move in final.move_stack:
            if board.turn == chess.WHITE:
                if where.type == "cuda":
                    torch.cuda.synchronize()
                start = time.perf_counter()
                session.legal_scores(net, board, where)
                seconds.append(time.perf_counter() - start)
            board.push(move)
    return seconds


def sessions(checkpoint: Path, device: str, games: list[chess.Board]) -> dict[str, list[float]]:
    """Seconds of each model position's ``position`` and ``go`` in two in-process sessions,
    the cache on (``cached``) and off (``full``), taking turns position by position."""
    net = weights.load_model(str(checkpoint), device)
    engines = {
        "full": session.Engine(net, lambda _: None),
        "cached": session.Engine(net, lambda _: None),
    }
    engines["full"].incremental = False
    seconds: dict[str, list[float]] = {name: [] for name in engines}
    cuda = torch.device(device).type == "cuda"
    for final in games:
        for engine in engines.values():
            engine.handle("ucinewgame")
        moves: list[str] = []
        for k, move in enumerate(final.move_stack):
            if k % 2 == 0:  # the model's positions: White's
                line = "position startpos" + (f" moves {' '.join(moves)}" if moves else "")
                for name, engine in engines.items():
                    if cuda:
                        torch.cuda.synchronize()
                    start = time.perf_counter()
                    engine.handle(line)
                    engine.handle("go nodes 1")
                    if cuda:
                        torch.cuda.synchronize()
                    seconds[name].append(time.perf_counter() - start)
            moves.append(move.uci())
    return seconds


def summary(seconds: list[float]) -> dict[str, float]:
    ms = sorted(1000 * s for s in seconds[1:])  # the first pays for warm-up
    return {"median_ms": statistics.median(ms), "p90_ms": ms[int(0.9 * (len(ms) - 1))]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", type=Path)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--moves", type=int, default=60, help="model moves timed")
    parser.add_argument("--threads", type=int, default=1, help="torch threads, both sides")
    parser.add_argument("--outcome", action="store_true",
                        help="a fresh model with the outcome head, UCI_ShowWDL on")  # fmt: skip
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as folder:
        checkpoint = args.checkpoint or fresh_checkpoint(args.preset, Path(folder), args.outcome)
        through_uci, games = engine_games(
            checkpoint, args.device, args.moves, args.threads, wdl=args.outcome
        )
        direct = in_process(checkpoint, args.device, games)
        both = sessions(checkpoint, args.device, games)
    uci_ms, direct_ms = summary(through_uci), summary(direct)
    full_ms, cached_ms = summary(both["full"]), summary(both["cached"])
    record = {
        "device": args.device,
        "gpu": torch.cuda.get_device_name() if args.device == "cuda" else None,
        "checkpoint": str(args.checkpoint) if args.checkpoint else f"fresh {args.preset}",
        "threads": args.threads,
        "outcome_head": args.outcome,
        "model_moves": len(through_uci),
        "games": len(games),
        "uci": uci_ms,
        "in_process": direct_ms,
        "ratio_median": uci_ms["median_ms"] / direct_ms["median_ms"],
        "session_full": full_ms,
        "session_cached": cached_ms,
        "cache_speedup_median": full_ms["median_ms"] / cached_ms["median_ms"],
        "cache_speedup_p90": full_ms["p90_ms"] / cached_ms["p90_ms"],
    }
    print(json.dumps(record))


if __name__ == "__main__":
    main()
