"""PGN analysis speed: ``chesslm-analyse`` end to end (reading the PGN, python-chess's legal
moves, one batched pass per batch of games, the top moves, SAN, writing the CSV and the
annotated PGN) against the play evaluation's scorer alone (``scoring.score_many`` over the same
games, their legal moves prepared beforehand and timed apart), same model, same run. Prints one
JSON line: positions per second of each and their ratio.

    python benchmarks/analyse_speed.py --preset tiny --device cpu --games 300
    python benchmarks/analyse_speed.py --preset baseline --device cuda --games 2000   # one H200

Games: the embedded Lichess sample's first ``--games``. The weights are freshly initialised:
the speed does not depend on them.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tempfile
import time
from pathlib import Path

import torch
import zstandard

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chesslm.engine import analyse  # noqa: E402
from chesslm.model import gpt  # noqa: E402
from chesslm.scorer import scoring

SAMPLE = Path(__file__).resolve().parents[1] / "resources" / "lichess-sample.pgn.zst"


def first_games(n: int) -> str:
    with open(SAMPLE, "rb") as fh:
        text = zstandard.ZstdDecompressor().stream_reader(fh).read().decode()
    return "\n\n[Event ".join(text.split("\n\n[Event ")[:n]) + "\n"


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--games", type=int, default=300)
    parser.add_argument("--batch-tokens", type=int, default=1 << 15)
    args = parser.parse_args()
    torch.manual_seed(0)
    net = gpt.build(args.preset, device=args.device).eval()
    with tempfile.TemporaryDirectory() as tmp:
        pgn = Path(tmp) / "games.pgn"
        pgn.write_text(first_games(args.games))
        analyse.analyse(pgn, Path(tmp) / "warm.csv", None, net=net)  # kernels, caches
        sync(args.device)
        started = time.perf_counter()
        counts = analyse.analyse(pgn, Path(tmp) / "a.csv", Path(tmp) / "a.pgn", net=net,
                                 batch_tokens=args.batch_tokens, say=io.StringIO())  # fmt: skip
        sync(args.device)
        analyse_s = time.perf_counter() - started
        started = time.perf_counter()
        lead = len(analyse.ratings.prefix(net, -1, -1))
        games = list(analyse.read_games(open(pgn), None, net.config.block_size, lead, []))
        inputs = [analyse.game_input(net, g) for g in games]
        prepare_s = time.perf_counter() - started
        started = time.perf_counter()
        for _ in scoring.score_many(net, inputs, batch_tokens=args.batch_tokens,
                                    device=args.device):  # fmt: skip
            pass
        sync(args.device)
        scorer_s = time.perf_counter() - started
    positions = counts["moves"]
    print(json.dumps({
        "preset": args.preset, "device": args.device, "games": counts["games"],
        "positions": positions, "torch_threads": torch.get_num_threads(),
        "analyse_seconds": round(analyse_s, 3),
        "analyse_positions_per_s": round(positions / analyse_s),
        "scorer_seconds": round(scorer_s, 3),
        "scorer_positions_per_s": round(positions / scorer_s),
        "scorer_preparation_seconds": round(prepare_s, 3),
        "analyse_over_scorer": round(scorer_s / analyse_s, 3),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
