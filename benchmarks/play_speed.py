"""Move-matching speed: the batched branched-sequence scoring against the oracle loop (one
causal pass per legal move), same model, same run. Prints positions per second.

    python benchmarks/play_speed.py --preset baseline --device cuda          # one H200
    python benchmarks/play_speed.py --preset tiny --device cpu --games 200   # a laptop

Games: the embedded Lichess sample (legal moves from python-chess, as the token cache stores
them; that one-time preparation is timed apart). The weights are freshly initialised: the
speed does not depend on them. Target: >= 100,000 positions/s for ``baseline`` on one H200.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import time
from pathlib import Path

import chess
import chess.pgn
import numpy as np
import torch
import zstandard

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chesslm.data import tokens  # noqa: E402
from chesslm.play import scoring  # noqa: E402
from chesslm.train import model as gpt  # noqa: E402

SAMPLE = Path(__file__).resolve().parents[1] / "resources" / "lichess-sample.pgn.zst"


def load_games(n: int | None, context: int) -> tuple[list[scoring.GameInput], list]:
    inputs, moves_of = [], []
    with open(SAMPLE, "rb") as fh:
        text = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(fh), encoding="utf-8")
        while n is None or len(inputs) < n:
            game = chess.pgn.read_game(text)
            if game is None:
                break
            moves = list(game.mainline_moves())
            if not moves or 2 + 3 * len(moves) > context:
                continue
            board, legal = chess.Board(), []
            for move in moves:
                legal.append(scoring.legal_codes(board))
                board.push(move)
            main = np.array(tokens.encode_moves(moves)[:-1], dtype=np.int64)
            inputs.append(scoring.GameInput.from_plies(main, legal))
            moves_of.append(moves)
    return inputs, moves_of


def batched(net, inputs, args) -> tuple[int, float]:  # noqa: ANN001
    positions = 0
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    for _, _, host in scoring.score_many(
        net, inputs, batch_tokens=args.batch_tokens, device=args.device, attention=args.attention
    ):
        positions += len(host["rank"])
    sync()
    return positions, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="baseline")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--games", type=int, default=None, help="sample games (default: all)")
    parser.add_argument("--batch-tokens", type=int, default=65536)
    parser.add_argument("--attention", choices=("dense", "flex"), default="dense")
    parser.add_argument("--compile", action="store_true", help="torch.compile the blocks")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--oracle-plies", type=int, default=12)
    args = parser.parse_args()
    torch.manual_seed(0)
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    net = gpt.build(args.preset, device=args.device).eval()
    if args.compile:
        for block in net.transformer.h:
            block.compile(dynamic=True)
    t0 = time.perf_counter()
    inputs, moves_of = load_games(args.games, net.config.block_size)
    prep = time.perf_counter() - t0
    plies = sum(g.plies for g in inputs)
    host = time.perf_counter()
    for group in scoring.plan_batches(
        [scoring.branched_length(g) for g in inputs], args.batch_tokens
    ):
        scoring.build_batch([inputs[i] for i in group], "cpu")
    host = time.perf_counter() - host
    batched(net, inputs[: min(len(inputs), 64)], args)  # warm-up (kernels, allocator)
    runs = [batched(net, inputs, args) for _ in range(args.repeats)]
    positions, seconds = min(runs, key=lambda r: r[1])
    assert positions == plies
    # the oracle: one causal pass per legal move, over the first plies of the first game
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    sync()
    t1 = time.perf_counter()
    scoring.oracle_scores(net, moves_of[0][: args.oracle_plies])
    sync()
    oracle_s = time.perf_counter() - t1
    n_oracle = min(args.oracle_plies, len(moves_of[0]))
    print(
        json.dumps(
            {
                "preset": args.preset,
                "device": args.device,
                "gpu": torch.cuda.get_device_name() if args.device == "cuda" else None,
                "attention": args.attention,
                "compile": args.compile,
                "batch_tokens": args.batch_tokens,
                "games": len(inputs),
                "positions": positions,
                "batched_seconds": round(seconds, 3),
                "batched_positions_per_s": round(positions / seconds),
                "host_batch_building_positions_per_s": round(plies / host),
                "oracle_positions": n_oracle,
                "oracle_positions_per_s": round(n_oracle / oracle_s, 2),
                "speedup": round((positions / seconds) / (n_oracle / oracle_s), 1),
                "game_preparation_seconds": round(prep, 1),
            }
        )  # fmt: skip
    )


if __name__ == "__main__":
    main()
