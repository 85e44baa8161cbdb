"""A PGN analysed move by move: how likely the model found each move a person played.

``chesslm-analyse --checkpoint PATH GAMES.pgn[.zst] --csv OUT.csv [--pgn OUT.pgn]`` scores every
move of every standard game with the play evaluation's batched scorer (``chesslm.scorer.scoring``:
one branched pass per game, games batched together): the probability of the move played, its
rank among the legal moves (1 = the model's first choice), the number of legal moves and the
model's three most probable moves. ``OUT.games.csv`` holds each game's mean log-probability of
the played moves, per side; ``--pgn`` writes the games again with the same figures as a comment
after each move (``{ p=0.31 rank=2 top: e4 0.35, d4 0.31, c4 0.09 }``), so a GUI shows them.
A checkpoint with the outcome head (``runs.NAME.outcome``) adds the mover's chances before each
move, from the head (read in the scorer's same pass): the CSV's last columns
``win_probability``, ``draw_probability`` and ``loss_probability`` (of the side that plays the
move, in the position before it) and `` win=0.41 draw=0.30 loss=0.29`` at the end of the
comment; without the head the files are as they were. A checkpoint with the think-time head
(``runs.NAME.think_time``) adds ``think_seconds`` (the time the mover took, from the PGN's
``[%clk]`` comments and ``TimeControl`` by Lichess's clock rule, ``chesslm.data.clocks``; empty
where it gives none) and ``predicted_think_seconds`` (the head's median, before the move), and
`` think=12s predicted=8.3s`` in the comment; a checkpoint with time inputs reads the game's
clocks and time control (every time unknown where the PGN has none).

The file is read one game at a time (``chesslm.engine.pgnfile``: memory flat in the number of
games) and scored in batches of ``BATCH_GAMES``; a progress line on stderr every
``PROGRESS_SECONDS``; ``--games N`` stops after the file's first N games. A game the model
cannot read (a parse error, a variant, a start from a FEN, longer than its context) is skipped
with one line on stderr naming it, and counted; the rest is written. A file that cannot be read
as PGN (another compression, binary data, not PGN, damaged or truncated zstd) is one line naming
it and what is wrong, exit status 1, after writing the games read before the fault. Every
output is written atomically, its folder made. ``--ratings``: a rating-conditioned model's
prefix from the games' ``WhiteElo``/``BlackElo`` tags (``from-tags``, the default: a missing
tag is unknown), unknown for both (``none``) or fixed (``W,B``); a model without conditioning
reads none.

Rule analyse (``workflow/rules/analyse.smk``) writes the same two CSV files for a dataset's
validation split (``analyse_validation``): its games come from the token cache, which holds no
test split, each named by its id in the dataset and scored at its own ratings.
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import os
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TextIO

import chess
import chess.pgn
import numpy as np
import torch

from chesslm import files, layout
from chesslm.data import clocks, metadata, tokens
from chesslm.data.cache import TokenCache
from chesslm.engine.pgnfile import InputError, game_texts, open_text
from chesslm.export.load import model_at
from chesslm.match import matching
from chesslm.model import human_time
from chesslm.scorer import branched, ratings, scoring, times
from chesslm.scorer.settings import Match

MOVE_FIELDS = ("game", "ply", "side", "move", "san", "p", "logp", "rank", "legal_moves",
               "top1", "p1", "top2", "p2", "top3", "p3")  # fmt: skip
# with the outcome head: the mover's chances before the move (Ply.chances)
OUTCOME_FIELDS = ("win_probability", "draw_probability", "loss_probability")
# with the think-time head: the time the mover took and the head's median (Ply.think)
TIME_FIELDS = ("think_seconds", "predicted_think_seconds")
GAME_FIELDS = ("game", "white", "black", "white_elo", "black_elo", "moves",
               "white_mean_logp", "black_mean_logp")  # fmt: skip
TOP = 3
NEG_INF = float("-inf")
MATCH = Match()  # play.match's defaults: one per key, play's, score's and analyse's alike
BATCH_GAMES = 64  # games read and scored together: memory stays flat whatever the file's size
PROGRESS_SECONDS = 5.0
# tokens scored in one pass, by device: the pass's buffers set the peak memory (on the CPU,
# 640 games, one thread: 8,192 peaked at 327 MB in 35 s, 32,768 at 449 MB in 55 s)
BATCH_TOKENS = {"cpu": 1 << 13, "cuda": 1 << 15}
# oneDNN keeps a primitive per input shape (1,024 by default), and every batch of games has
# shapes of its own: on the CPU its cache grew chesslm-analyse by ~100 MB per 1,000 games;
# without it memory stays flat, at the same speed (measured: BENCHMARKS.md)
ONEDNN_CACHE = "ONEDNN_PRIMITIVE_CACHE_CAPACITY"


def flat_memory() -> None:
    """No oneDNN primitive cache (``ONEDNN_CACHE``) unless the environment sets one: call it
    before the first forward pass (oneDNN reads it then)."""
    os.environ.setdefault(ONEDNN_CACHE, "0")


@dataclass
class Game:
    label: int | str  # the CSV's game: 1-based number in the file, or its id in the dataset
    game: chess.pgn.Game
    moves: list[chess.Move]
    elo: tuple[int, int]  # the ratings fed to a conditioned model (-1: unknown)
    clock: np.ndarray | None = None  # seconds after each ply ([%clk]; -1: absent)
    control: tuple[int, int] = (-1, -1)  # TimeControl's base and increment (-1: unreadable)

    def time_rows(self) -> np.ndarray:
        """The game's time rows at each position (``chesslm.scorer.times``)."""
        clock = np.full(len(self.moves), -1.0) if self.clock is None else self.clock
        return times.of_game(clock, *self.control)

    def taken(self) -> np.ndarray:
        """Seconds each ply took by the clock rule (NaN where it gives none)."""
        clock = np.full(len(self.moves), -1.0) if self.clock is None else self.clock
        return clocks.spent(clock, base=self.control[0], increment=self.control[1])[:-1]


def fixed_ratings(text: str) -> tuple[int, int] | None:
    """``--ratings``: None for ``from-tags``, (-1, -1) for ``none``, else ``W,B``."""
    if text == "from-tags":
        return None
    if text == "none":
        return -1, -1
    try:
        white, black = (int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--ratings must be from-tags, none or WHITE,BLACK (e.g. 1500,1700), not {text!r}"
        ) from None
    return white, black


def why_unreadable(game: chess.pgn.Game, context: int, lead: int) -> str | None:
    """Why the model cannot read this game, or None."""
    if game.errors:
        return f"does not parse ({game.errors[0]})"
    variant = game.headers.get("Variant", "Standard")
    if variant.lower() not in ("standard", "chess"):
        return f"is a {variant} game"
    if "FEN" in game.headers or game.board().epd() != chess.Board().epd():
        return "starts from a FEN (the model reads games from the standard start)"
    return why_unfit(sum(1 for _ in game.mainline_moves()), context, lead)


def why_unfit(plies: int, context: int, lead: int) -> str | None:
    """Why a game of ``plies`` moves does not fit the model (none, or past its context)."""
    if plies == 0:
        return "has no moves"
    if lead + 1 + 3 * plies > context:
        return f"is longer ({plies} plies) than the model's context ({context} tokens)"
    return None


def read_games(
    stream: TextIO,
    fixed: tuple[int, int] | None,
    context: int,
    lead: int,
    skipped: list[str],
    *,
    path: Path = Path("-"),
    limit: int | None = None,
) -> Iterator[Game]:
    """The readable games of a PGN stream (its first ``limit``); each unreadable one is named
    in ``skipped``. :raises InputError: for the file as a whole (``pgnfile``)."""
    for number, text in enumerate(game_texts(stream, path), 1):
        if limit is not None and number > limit:
            return
        try:
            game = chess.pgn.read_game(io.StringIO(text), Visitor=QuietBuilder)
        except Exception as error:  # python-chess raises on some malformed movetext (IndexError)
            skipped.append(f"game {number}{_site(text)}: does not parse ({error!r})")
            continue
        if game is None:
            continue
        why = why_unreadable(game, context, lead)
        if why is not None:
            skipped.append(f"game {number}{_site(text)}: {why}")
            continue
        tags = game.headers
        elo = fixed or (metadata.elo(tags.get("WhiteElo")), metadata.elo(tags.get("BlackElo")))
        clock = [-1.0 if (c := node.clock()) is None else c for node in game.mainline()]
        control = metadata.speed_index(tags.get("TimeControl"))[:2]
        yield Game(number, game, list(game.mainline_moves()), elo,
                   metadata.clock_column(np.array(clock, dtype=np.float64)), control)  # fmt: skip


class QuietBuilder(chess.pgn.GameBuilder):
    """python-chess's game builder without its log line per error: the game's skip line
    names the first (``why_unreadable``)."""

    def handle_error(self, error: Exception) -> None:
        self.game.errors.append(error)


def _site(text: str) -> str:
    """`` (SITE)`` of a game's text, where its Site tag names one: the game on Lichess."""
    for line in text.splitlines():
        if line.startswith('[Site "') and line.rstrip().endswith('"]'):
            return f" ({line.rstrip()[7:-2]})"
    return ""


def validation_games(
    cache: TokenCache, context: int, lead: int, skipped: list[str]
) -> Iterator[Game]:
    """A token cache's validation games: the moves decoded from their token triples, the
    ratings of its metadata columns (unknown where it has none: ``matching.load_metadata``),
    each labelled by its id in the dataset; one that does not fit is named in ``skipped``."""
    split = cache.validation
    meta, _ = matching.load_metadata(cache.directory, split.offsets)
    for i, raw_id in enumerate(split.ids):
        game_id, row = raw_id.decode("ascii"), np.asarray(split[i])
        plies = (len(row) - 2) // 3  # BOS, a triple per ply, EOS
        why = why_unfit(plies, context, lead)
        if why is not None:
            skipped.append(f"game {game_id}: {why}")
            continue
        moves = [tokens.decode_move(row[1 + 3 * k : 4 + 3 * k]) for k in range(plies)]
        elo = int(meta["white_elo"][i]), int(meta["black_elo"][i])
        game = chess.pgn.Game({"GameId": game_id})  # the annotated PGN's headers
        game.add_line(moves)
        clock = meta["clock"][meta["ply_offsets"][i] : meta["ply_offsets"][i + 1]]
        control = int(meta["base_seconds"][i]), int(meta["increment_seconds"][i])
        yield Game(game_id, game, moves, elo, np.asarray(clock), control)


def game_input(net: torch.nn.Module, game: Game) -> branched.GameInput:
    """Every ply of the game scored: the main line and each position's legal moves."""
    board, legal = chess.Board(), []
    for move in game.moves:
        legal.append(scoring.legal_codes(board))
        board.push(move)
    main = tokens.encode_moves(game.moves)[:-1]  # BOS and the triples, no EOS
    rows = game.time_rows() if times.timed(net) else None
    return branched.GameInput.from_plies(
        main, legal, prefix=ratings.prefix(net, *game.elo), time=rows
    )


def batches(games: Iterator[Game]) -> Iterator[list[Game]]:
    """``games`` in lists of ``BATCH_GAMES``; on an ``InputError`` the games read before it
    first, then the error."""
    chunk: list[Game] = []
    try:
        for game in games:
            chunk.append(game)
            if len(chunk) == BATCH_GAMES:
                yield chunk
                chunk = []
    except InputError:
        if chunk:
            yield chunk
        raise
    if chunk:
        yield chunk


@dataclass
class Ply:
    """One played move, as the model saw it."""

    logp: float  # natural log of p
    p: float
    rank: int  # 1 = the model's most probable move
    legal: int
    top: list[tuple[chess.Move, float]]
    chances: list[float] | None = None  # the outcome head's win/draw/loss of the mover before it
    think: tuple[float, float] | None = None  # the time taken (NaN: none), the head's median


def top_moves(s: scoring.Scores, batch: branched.Batch) -> tuple[np.ndarray, np.ndarray]:
    """(P, TOP) log-probabilities and indices into the batch's moves of each ply's most probable
    moves, on the device in one go (index -1 past a ply's legal moves)."""
    counts = torch.as_tensor(batch.counts, device=s.move_logp.device)
    ply = torch.as_tensor(batch.move_ply, device=s.move_logp.device)
    starts = torch.cumsum(counts, 0) - counts
    column = torch.arange(len(ply), device=ply.device) - starts[ply]
    dense = torch.full((len(counts), int(batch.counts.max())), NEG_INF, device=ply.device)
    dense[ply, column] = s.move_logp.float()
    values, index = dense.topk(min(TOP, dense.size(1)), dim=1)
    index = torch.where(torch.isinf(values), -1, index + starts[:, None])
    return values.cpu().numpy(), index.cpu().numpy()


def score_games(net: torch.nn.Module, games: list[Game], batch_tokens: int) -> list[list[Ply]]:
    """Per game, per ply: the played move's probability, rank, legal count and the top moves."""
    device = next(net.parameters()).device
    inputs = [game_input(net, g) for g in games]
    out: list[list[Ply]] = [[] for _ in games]
    lengths = branched.branched_lengths(inputs).tolist()
    for group in branched.plan_batches(lengths, batch_tokens):
        batch = branched.build_batch([inputs[i] for i in group], device)
        s = scoring.score(net, batch, attention="split")  # whole games: the two-part pass
        top_logp, top_index = top_moves(s, batch)
        played, rank = s.played_logp.float().cpu().numpy(), s.rank.cpu().numpy()
        chances = None if s.wdl is None else s.wdl.cpu().numpy()
        medians = None if s.think is None else human_time.median_seconds(s.think.cpu().numpy())
        codes = np.concatenate([inputs[i].codes for i in group])
        for p in range(len(batch.counts)):
            top = [(scoring.decode_code(codes[i]), math.exp(v))
                   for v, i in zip(top_logp[p], top_index[p], strict=True) if i >= 0]  # fmt: skip
            logp = float(played[p])
            ply = Ply(logp, math.exp(logp), int(rank[p]) + 1, int(batch.counts[p]), top,
                      None if chances is None else chances[p].tolist())  # fmt: skip
            g = group[batch.ply_game[p]]
            if medians is not None:
                taken = games[g].taken()[int(batch.ply_number[p])]
                ply.think = (float(taken), float(medians[p]))
            out[g].append(ply)
    return out


def move_rows(game: Game, plies: list[Ply]) -> list[dict[str, object]]:
    """The CSV rows of a game's moves (the annotated PGN reads its comments off them), with the
    mover's win/draw/loss before each move where the plies have them (the outcome head)."""
    board, rows = game.game.board(), []
    for i, (move, ply) in enumerate(zip(game.moves, plies, strict=True)):
        row: dict[str, object] = {
            "game": game.label, "ply": i + 1, "side": "white" if board.turn else "black",
            "move": move.uci(), "p": f"{ply.p:.6g}", "logp": f"{ply.logp:.6f}",
            "rank": ply.rank, "legal_moves": ply.legal,
        }  # fmt: skip
        for k, (top, p) in enumerate(ply.top, 1):
            row[f"top{k}"], row[f"p{k}"] = board.san(top), f"{p:.6g}"
        if ply.chances is not None:
            row.update(zip(OUTCOME_FIELDS, (f"{p:.6g}" for p in ply.chances), strict=True))
        if ply.think is not None:
            taken, predicted = ply.think
            row[TIME_FIELDS[0]] = "" if math.isnan(taken) else f"{taken:g}"
            row[TIME_FIELDS[1]] = f"{predicted:.4g}"
        row["san"] = board.san_and_push(move)
        rows.append(row)
    return rows


def game_row(game: Game, plies: list[Ply]) -> dict[str, object]:
    sides = {side: [p.logp for p in plies[side::2]] for side in (0, 1)}
    mean = {side: f"{np.mean(v):.6f}" if v else "" for side, v in sides.items()}
    return {"game": game.label, "white": game.game.headers.get("White", "?"),
            "black": game.game.headers.get("Black", "?"), "white_elo": game.elo[0],
            "black_elo": game.elo[1], "moves": len(plies),
            "white_mean_logp": mean[0], "black_mean_logp": mean[1]}  # fmt: skip


def annotate(game: Game, rows: list[dict[str, object]]) -> str:
    """The game with each move's figures (its CSV row's) as its comment, others replaced."""
    for node, row in zip(game.game.mainline(), rows, strict=True):
        top = ", ".join(f"{row[f'top{k}']} {float(row[f'p{k}']):.2f}"
                        for k in range(1, TOP + 1) if row.get(f"top{k}"))  # fmt: skip
        node.comment = f"p={float(row['p']):.2f} rank={row['rank']} top: {top}"
        if OUTCOME_FIELDS[0] in row:  # the mover's chances before the move
            node.comment += "".join(f" {name.split('_')[0]}={float(row[name]):.2f}"
                                    for name in OUTCOME_FIELDS)  # fmt: skip
        if TIME_FIELDS[1] in row:  # the time taken (where known) and the head's median
            taken = f" think={row[TIME_FIELDS[0]]}s" if row[TIME_FIELDS[0]] != "" else ""
            node.comment += f"{taken} predicted={float(row[TIME_FIELDS[1]]):.3g}s"
    return str(game.game.accept(chess.pgn.StringExporter(headers=True, variations=False)))


def analyse(
    source: Path,
    out_csv: Path,
    out_pgn: Path | None,
    *,
    net: torch.nn.Module,
    fixed: tuple[int, int] | None = None,
    batch_tokens: int = MATCH.batch_tokens,
    say: IO[str] = sys.stderr,
    limit: int | None = None,
    every: float = PROGRESS_SECONDS,
) -> dict[str, int]:
    """Write the analysis files of ``net``'s scores of a PGN's games (its first ``limit``);
    returns the counts of games, moves and skipped games.

    :raises InputError: the file cannot be read as PGN (after writing what was read before)."""
    lead = len(ratings.prefix(net, -1, -1))
    skipped: list[str] = []
    with open_text(source) as stream:
        games = read_games(stream, fixed, net.config.block_size, lead, skipped, path=source,
                           limit=limit)  # fmt: skip
        return write(games, skipped, out_csv, out_pgn, net=net, batch_tokens=batch_tokens,
                     say=say, source=source, every=every)  # fmt: skip


def analyse_validation(
    cache_dir: Path,
    out_csv: Path,
    out_pgn: Path | None = None,
    *,
    net: torch.nn.Module,
    batch_tokens: int = MATCH.batch_tokens,
    say: IO[str] = sys.stderr,
) -> dict[str, int]:
    """``analyse`` of a token cache's validation split (``validation_games``): rule analyse."""
    lead = len(ratings.prefix(net, -1, -1))
    skipped: list[str] = []
    cache = TokenCache(cache_dir, verify=True)
    games = validation_games(cache, net.config.block_size, lead, skipped)
    return write(games, skipped, out_csv, out_pgn, net=net, batch_tokens=batch_tokens, say=say,
                 source=cache_dir)  # fmt: skip


def write(
    games: Iterator[Game],
    skipped: list[str],
    out_csv: Path,
    out_pgn: Path | None,
    *,
    net: torch.nn.Module,
    batch_tokens: int,
    say: IO[str],
    source: Path,
    every: float = PROGRESS_SECONDS,
) -> dict[str, int]:
    """Score ``games`` and write the files; each game named in ``skipped`` while they are read
    is said on ``say``, after ``source``, and the counts every ``every`` seconds. An
    ``InputError`` while reading is raised once the games before it are written."""
    counts = {"games": 0, "moves": 0, "skipped": 0}
    progress = Progress(source, say, every)
    fault: InputError | None = None
    with ExitStack() as stack:
        outputs = {"moves": out_csv, "games": games_csv(out_csv), "pgn": out_pgn}
        for path in outputs.values():
            if path is not None:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
                # a SIGKILLed run's (SIGTERM and Ctrl-C unwind: unwind_on_signals)
                files.remove_stale_temporaries(Path(path).parent, Path(path).name)
        text = {name: stack.enter_context(files.open_atomic(path, "w", encoding="utf-8",
                                                            newline=""))
                for name, path in outputs.items() if path is not None}  # fmt: skip
        fields = MOVE_FIELDS + (OUTCOME_FIELDS if net.config.outcome else ())
        moves = csv.DictWriter(
            text["moves"], fields + (TIME_FIELDS if net.config.think_time else ())
        )
        per_game = csv.DictWriter(text["games"], GAME_FIELDS)
        moves.writeheader()
        per_game.writeheader()
        chunks = batches(games)
        while True:
            try:
                chunk = next(chunks, None)
            except InputError as error:  # raised after the games before it (batches)
                fault, chunk = error, None
            if chunk is None:
                break
            for game, plies in zip(chunk, score_games(net, chunk, batch_tokens),
                                   strict=True):  # fmt: skip
                rows = move_rows(game, plies)
                moves.writerows(rows)
                per_game.writerow(game_row(game, plies))
                if "pgn" in text:
                    text["pgn"].write(annotate(game, rows) + "\n\n")
                counts["games"] += 1
                counts["moves"] += len(plies)
            counts["skipped"] += say_skipped(skipped, source, say)
            progress.update(counts)
            files.stop_if_signalled()
    # games skipped after the last chunk (or with no chunk at all) are read by now
    counts["skipped"] += say_skipped(skipped, source, say)
    if fault is not None and counts["games"]:
        raise InputError(f"{fault}; wrote the {counts['games']} games analysed before it")
    if fault is not None:
        raise fault
    return counts


class Progress:
    """A line of counts on ``say`` whenever ``every`` seconds have passed since the last one
    (checked after each batch of games)."""

    def __init__(self, source: Path, say: IO[str], every: float) -> None:
        self.source, self.say, self.every = source, say, every
        self.start = self.last = time.monotonic()

    def update(self, counts: dict[str, int]) -> None:
        now = time.monotonic()
        if now - self.last < self.every:
            return
        self.last = now
        rate = counts["games"] / max(now - self.start, 1e-9)
        print(
            f"chesslm-analyse: {self.source}: progress: {counts['games']:,} games,"
            f" {counts['moves']:,} moves analysed, {counts['skipped']:,} skipped"
            f" ({rate:,.1f} games/s)",
            file=self.say,
            flush=True,
        )


def say_skipped(skipped: list[str], source: Path, say: IO[str]) -> int:
    """Say and forget the games named in ``skipped``; returns how many there were."""
    for line in skipped:
        print(f"chesslm-analyse: {source}: skipped {line}", file=say)
    count = len(skipped)
    skipped.clear()
    return count


def games_csv(out_csv: Path) -> Path:
    return Path(layout.games_csv(out_csv))


def positive(text: str) -> int:
    """``--games``: a whole number above 0."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number above 0, not {text!r}")
    return int(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="chesslm-analyse", description=__doc__.split("\n\n")[0])
    parser.add_argument("games", type=Path, help="a PGN file (.pgn or .pgn.zst)")
    parser.add_argument("--checkpoint", required=True,
                        help="a chesslm .pt (e.g. train/best.pt) or an export folder")  # fmt: skip
    parser.add_argument("--csv", required=True, type=Path, help="the per-move CSV to write")
    parser.add_argument("--pgn", type=Path, help="also write the games with a comment per move")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--ratings", default="from-tags", type=fixed_ratings,
                        help="a conditioned model's ratings: from-tags, none, or W,B")  # fmt: skip
    parser.add_argument("--games", type=positive, metavar="N", dest="limit",
                        help="only the file's first N games")  # fmt: skip
    parser.add_argument(
        "--batch-tokens",
        type=positive,
        metavar="N",
        help="tokens scored in one pass (default: 8192 on cpu, 32768 on cuda)",
    )
    args = parser.parse_args(argv)
    files.unwind_on_signals()  # a kill leaves no temporary beside the outputs
    if not args.games.is_file():
        parser.exit(1, f"chesslm-analyse: {args.games}: no such file\n")
    from chesslm.model import checkpoint

    flat_memory()
    try:
        net = model_at(args.checkpoint, args.device)
        counts = analyse(args.games, args.csv, args.pgn, net=net, fixed=args.ratings,
                         limit=args.limit, say=sys.stderr,
                         batch_tokens=args.batch_tokens or BATCH_TOKENS[args.device])  # fmt: skip
    except (checkpoint.CheckpointError, InputError) as error:
        parser.exit(1, f"chesslm-analyse: {error}\n")
    if counts["skipped"] and not counts["games"]:
        parser.exit(1, f"chesslm-analyse: {args.games}: none of its {counts['skipped']} games"
                       " could be analysed (each named above)\n")  # fmt: skip
    print(
        f"chesslm-analyse: {counts['games']} games, {counts['moves']} moves analysed;"
        f" {counts['skipped']} skipped; wrote {args.csv}, {games_csv(args.csv)}"
        + (f", {args.pgn}" if args.pgn else ""),
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
