"""Move-matching's row tokens against its real tokens, as rule play chunks a validation split.

    python benchmarks/play_padding.py --pgn resources/lichess-sample.pgn.zst \\
        resources/lichess-github.pgn.zst --validation 0.35 --windows 1,8,16

A batch pads every row to its longest main line plus its most branch tokens
(``chesslm.scorer.branched.prepare``), and a chunk's games are batched on their own, so what a
chunk holds decides how much of the device's work is padding. For each ``--windows`` value W,
the split's games are chunked as ``matching.chunked`` does with windows of W chunks (1: the
contiguous chunks of the code before it), each chunk planned into batches as
``scoring.score_chunks`` plans them, and every batch built on the host: row tokens (B x T),
real tokens (not padding), batches, and the host's seconds building them (one thread).
The counts do not depend on the machine; the seconds do. No model and no device: the legal
moves come from the token cache or python-chess (``--threads`` processes), as the rule's.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from play_rule_speed import build_cache, prepared_chunks  # noqa: E402

from chesslm.data import tokens  # noqa: E402
from chesslm.match import matching  # noqa: E402
from chesslm.model import gpt  # noqa: E402
from chesslm.scorer import branched  # noqa: E402


def inputs_of(cache_dir: Path, games: int | None, threads: int) -> tuple[matching.Evaluator, dict]:
    """The evaluator (tiny model: only its context matters here) and every selected game's
    input, tables prepared as the rule's benchmark prepares them (``threads`` processes)."""
    net = gpt.GPT(gpt.config_for("tiny"))
    ev = matching.Evaluator(net, cache_dir, Path(tempfile.mkdtemp()), games=games,
                            chunk_games=512, batch_tokens=1,
                            device=torch.device("cpu"), threads=threads)  # fmt: skip
    chunks, _ = prepared_chunks(ev)
    return ev, {int(g): game for c, ins in zip(ev.chunks, chunks, strict=True)
                for g, game in zip(c, ins, strict=True)}  # fmt: skip


def count(chunks: list[np.ndarray], inputs: dict, batch_tokens: int) -> dict:
    """Row and real tokens of the batches ``score_chunks`` makes of ``chunks``, and the row
    tokens the same batches would hold if each row's branches followed its own main line
    (``own_layout_per_real``: rows as long as the batch's longest game, not its longest main
    line plus its most branch tokens; what a layout change could save, not what runs)."""
    rows = real = own = batches = 0
    seconds = 0.0
    for chunk in chunks:
        games = [inputs[int(g)] for g in chunk]
        for group in branched.plan_batches(branched.branched_lengths(games).tolist(), batch_tokens):
            t0 = time.perf_counter()
            batch = branched.prepare([games[i] for i in group])
            seconds += time.perf_counter() - t0
            B, T = batch.shape
            at, n = batch.layout["idx"]
            per_row = (batch.packed[at : at + n] != tokens.PAD).view(B, T).sum(1)
            rows, real, own = rows + n, real + int(per_row.sum()), own + B * int(per_row.max())
            batches += 1
    return {"row_tokens": rows, "real_tokens": real, "rows_per_real": round(rows / real, 4),
            "own_layout_per_real": round(own / real, 4), "batches": batches,
            "host_seconds": round(seconds, 3)}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pgn", type=Path, nargs="+",
                   default=[ROOT / "resources/lichess-sample.pgn.zst"])  # fmt: skip
    p.add_argument("--validation", type=float, default=0.05)
    p.add_argument("--cache", type=Path, help="an existing token cache instead")
    p.add_argument("--games", type=int, help="rule play's match.games (default: every game)")
    p.add_argument("--chunk-games", type=int, default=512)
    p.add_argument("--batch-tokens", type=int, default=65536)
    p.add_argument("--windows", default=f"1,{matching.WINDOW_CHUNKS}",
                   help="chunks ordered together, comma-separated (1: contiguous)")  # fmt: skip
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", type=Path, help="also write the result here")
    args = p.parse_args()
    cache_dir = args.cache
    if cache_dir is None:
        args.context, args.legality_games = gpt.config_for("baseline").block_size, 1024
        cache_dir = build_cache(Path(tempfile.mkdtemp()), args.pgn, args)
    ev, inputs = inputs_of(cache_dir, args.games, args.threads)
    lengths = np.asarray(ev.games.lengths, dtype=np.int64)
    result = {"games": len(inputs), "positions": ev.positions_total,
              "chunk_games": args.chunk_games, "batch_tokens": args.batch_tokens,
              "source": str(args.cache) if args.cache else
              {"pgn": [str(p) for p in args.pgn], "validation": args.validation}}  # fmt: skip
    for w in [int(x) for x in args.windows.split(",")]:
        chunks = matching.chunked(ev.selected, lengths, args.chunk_games, window=w)
        result[f"window_{w}"] = count(chunks, inputs, args.batch_tokens)
        print(f"windows of {w:3d} chunks: {json.dumps(result[f'window_{w}'])}", flush=True)
    print(json.dumps(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
