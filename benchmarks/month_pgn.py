"""A month-like Lichess dump for scale tests and benchmarks: N games with realistic headers.

The moves are the real move sequences of the embedded sample (resources/lichess-sample.pgn.zst,
standard-chess games only), re-used round robin; the headers are generated: unique 8-letter
ids, Elo (now and then ``?``), TimeControl across every speed (``-`` for correspondence),
rated and casual Events, some BOT titles, Termination values, UTC dates within one month,
and ``[%clk]`` comments on about half the games. Deterministic for a given ``--seed``.

Written as independent zstd frames, one per block of games, compressed in parallel processes
(the converter reads multi-frame streams), so millions of games take a minute or so.

Usage: python benchmarks/month_pgn.py --games N --out FILE.pgn.zst [--seed S] [--workers W]
"""

from __future__ import annotations

import argparse
import os
import re
import time
from collections.abc import Iterator
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import zstandard

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "resources" / "lichess-sample.pgn.zst"
BLOCK_GAMES = 20_000
ALPHABET = np.frombuffer(
    b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", dtype=np.uint8
)
ID_SPACE = 62**8
# A multiplier coprime with 62**8 makes i -> (offset + i * M) mod 62**8 a bijection: unique ids.
ID_MULTIPLIER = 48_271_000_003
TIME_CONTROLS = (  # (TimeControl, weight); every Lichess speed class is present
    ("15+0", 2),
    ("0+1", 1),
    ("60+0", 10),
    ("120+1", 6),
    ("180+0", 14),
    ("180+2", 10),
    ("300+0", 12),
    ("300+3", 8),
    ("600+0", 12),
    ("600+5", 6),
    ("900+10", 5),
    ("1800+0", 4),
    ("1800+20", 2),
    ("-", 2),
)
SPEED_NAMES = {  # Lichess's Event wording for each TimeControl above
    "15+0": "UltraBullet",
    "0+1": "Bullet",
    "60+0": "Bullet",
    "120+1": "Bullet",
    "180+0": "Blitz",
    "180+2": "Blitz",
    "300+0": "Blitz",
    "300+3": "Blitz",
    "600+0": "Rapid",
    "600+5": "Rapid",
    "900+10": "Rapid",
    "1800+0": "Classical",
    "1800+20": "Classical",
    "-": "Correspondence",
}
TERMINATIONS = (
    ("Normal", 70),
    ("Time forfeit", 26),
    ("Abandoned", 2),
    ("Rules infraction", 1),
    ("Unterminated", 1),
)
_COMMENT = re.compile(r"\{[^}]*\}|\$\d+|\d+\.(?:\.\.)?")
_RESULTS = {"1-0", "0-1", "1/2-1/2", "*"}

# Filled in each worker process by _init (fork inherits them).
_MOVES: list[list[str]] = []
_RESULT_OF: list[str] = []
_CLOCK_TEXT: list[str] = []


def sample_games() -> tuple[list[list[str]], list[str]]:
    """SAN moves and result of each standard-chess game of the sample."""
    with open(SAMPLE, "rb") as fh:
        text = zstandard.ZstdDecompressor().stream_reader(fh).read().decode()
    moves, results = [], []
    for game in re.split(r"\n\n(?=\[)", text.strip()):
        head, _, body = game.partition("\n\n")
        if re.search(r'^\[(Variant|FEN|SetUp) "', head, re.M) and not re.search(
            r'^\[Variant "Standard"\]', head, re.M
        ):
            continue
        words = [w for w in _COMMENT.sub(" ", body).split() if w]
        result = words.pop() if words and words[-1] in _RESULTS else "*"
        if words:
            moves.append(words)
            results.append(result)
    return moves, results


def _init() -> None:
    global _MOVES, _RESULT_OF, _CLOCK_TEXT
    _MOVES, _RESULT_OF = sample_games()
    _CLOCK_TEXT = [f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" for s in range(4 * 3600)]


def game_ids(start: int, count: int, seed: int) -> list[str]:
    """Unique 8-character base-62 ids of games start .. start + count - 1."""
    offset = (seed * 2_654_435_761 + 12_345) % ID_SPACE
    n = (offset + (np.arange(start, start + count, dtype=object) * ID_MULTIPLIER)) % ID_SPACE
    n = n.astype(np.int64)
    digits = np.empty((count, 8), dtype=np.uint8)
    for k in range(7, -1, -1):
        digits[:, k] = ALPHABET[n % 62]
        n //= 62
    return [row.tobytes().decode() for row in digits]


def _weighted(rng: np.random.Generator, table: tuple, n: int) -> list[str]:
    names = [name for name, _ in table]
    weights = np.array([w for _, w in table], dtype=float)
    return [names[i] for i in rng.choice(len(names), size=n, p=weights / weights.sum())]


def _movetext(moves: list[str], result: str, clocks: np.ndarray | None) -> str:
    parts = []
    for ply, san in enumerate(moves):
        number = ply // 2 + 1
        if clocks is None:
            parts.append(f"{number}. {san}" if ply % 2 == 0 else san)
        else:
            prefix = f"{number}." if ply % 2 == 0 else f"{number}..."
            parts.append(f"{prefix} {san} {{ [%clk {_CLOCK_TEXT[clocks[ply]]}] }}")
    parts.append(result)
    return " ".join(parts)


def _clocks(rng: np.random.Generator, plies: int, base: int, inc: int) -> np.ndarray:
    """Seconds left after each ply: each side spends a few seconds a move, gains the increment."""
    spent = rng.integers(0, max(2, base // 30 + inc + 1), size=plies)
    left = np.empty(plies, dtype=np.int64)
    for side in (0, 1):
        own = spent[side::2]
        left[side::2] = base - np.cumsum(own) + inc * np.arange(1, len(own) + 1)
    return np.clip(left, 0, len(_CLOCK_TEXT) - 1)


def block(args: tuple[int, int, int, int]) -> bytes:
    """Games start .. start + count - 1 as one compressed zstd frame."""
    start, count, seed, level = args
    rng = np.random.default_rng([seed, start])
    ids = game_ids(start, count, seed)
    controls = _weighted(rng, TIME_CONTROLS, count)
    terminations = _weighted(rng, TERMINATIONS, count)
    elos = rng.normal(1600, 350, size=(count, 2)).clip(400, 3300).astype(int)
    unknown_elo = rng.random((count, 2)) < 0.01
    rated = rng.random(count) < 0.8
    bots = rng.random((count, 2)) < 0.02
    with_clock = rng.random(count) < 0.5
    days = rng.integers(1, 31, size=count)
    seconds = rng.integers(0, 86_400, size=count)
    which = rng.integers(0, len(_MOVES), size=count)
    out = []
    for i in range(count):
        control = controls[i]
        speed = SPEED_NAMES[control]
        event = f"{'Rated' if rated[i] else 'Casual'} {speed} game"
        moves, result = _MOVES[which[i]], _RESULT_OF[which[i]]
        white, black = ("?" if unknown_elo[i, k] else str(elos[i, k]) for k in (0, 1))
        date = f"2024.05.{days[i]:02d}"
        clock_time = f"{seconds[i] // 3600:02d}:{seconds[i] // 60 % 60:02d}:{seconds[i] % 60:02d}"
        head = [
            f'[Event "{event}"]',
            f'[Site "https://lichess.org/{ids[i]}"]',
            f'[Date "{date}"]',
            '[Round "-"]',
            f'[White "player{(which[i] * 7919 + i) % 100_003}"]',
            f'[Black "player{(which[i] * 104_729 + 3 * i) % 100_003}"]',
            f'[Result "{result}"]',
            f'[UTCDate "{date}"]',
            f'[UTCTime "{clock_time}"]',
            f'[WhiteElo "{white}"]',
            f'[BlackElo "{black}"]',
        ]
        if bots[i, 0]:
            head.append('[WhiteTitle "BOT"]')
        if bots[i, 1]:
            head.append('[BlackTitle "BOT"]')
        head += [f'[TimeControl "{control}"]', f'[Termination "{terminations[i]}"]']
        clocks = None
        if with_clock[i] and control != "-":
            base, _, inc = control.partition("+")
            clocks = _clocks(rng, len(moves), int(base), int(inc))
        out.append("\n".join(head) + "\n\n" + _movetext(moves, result, clocks) + "\n\n")
    return zstandard.ZstdCompressor(level=level).compress("".join(out).encode())


def blocks(games: int, seed: int, level: int) -> Iterator[tuple[int, int, int, int]]:
    for start in range(0, games, BLOCK_GAMES):
        yield start, min(BLOCK_GAMES, games - start), seed, level


def write(out: Path, games: int, *, seed: int = 0, workers: int = 0, level: int = 3) -> None:
    """Write ``games`` games to ``out`` (``.pgn.zst``), atomically."""
    workers = workers or os.cpu_count() or 1
    tmp = out.with_name(out.name + ".tmp")
    with open(tmp, "wb") as fh:
        if workers == 1 or games <= BLOCK_GAMES:
            _init()
            for args in blocks(games, seed, level):
                fh.write(block(args))
        else:
            with get_context("fork").Pool(workers, initializer=_init) as pool:
                for frame in pool.imap(block, blocks(games, seed, level), chunksize=1):
                    fh.write(frame)
    os.replace(tmp, out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=0, help="processes (0: every core)")
    parser.add_argument("--level", type=int, default=3, help="zstd level")
    args = parser.parse_args()
    if args.games < 1:
        parser.error("--games must be at least 1")
    started = time.perf_counter()
    write(args.out, args.games, seed=args.seed, workers=args.workers, level=args.level)
    elapsed = time.perf_counter() - started
    size = args.out.stat().st_size
    print(f"{args.out}: {args.games} games, {size / 1e6:.1f} MB, {elapsed:.1f} s")


if __name__ == "__main__":
    main()
