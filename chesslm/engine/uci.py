"""A UCI engine for any checkpoint of this project, so GUIs, match runners and lichess-bot can
play the model: ``python -m chesslm.engine.uci --checkpoint PATH [--device cpu|cuda]``, installed
as the console script ``chesslm-uci``.

Its move is the argmax (option ``Temperature`` 0, the default) or a sample at that temperature
(seeded by option ``Seed``, reseeded at ``ucinewgame``) over the legal moves, scored as the play
evaluation scores them (``chesslm.scorer.scoring``: one batched pass, the legal-renormalised
source/destination/promotion factorisation). It searches nothing: ``go`` answers after one
forward pass whatever its limits (``movetime``, ``nodes``, clocks); ``go infinite`` and
``go ponder`` hold the answer until ``stop`` (or ``ponderhit``), read by a thread while the
engine thinks.

The model reads a game as tokens from the standard start (``chesslm.data.tokens``), so a
position given as another FEN, or a game longer than the model's context, cannot be encoded:
the engine says so in an ``info string`` and plays a uniformly random legal move (seeded
too). Bad input never stops it: an unknown command, an unknown option or a bad value is ignored
with an ``info string``; ``position`` with an illegal move keeps the moves before it. A file
that is not a chesslm checkpoint ends it at start with one line on stderr and exit status 1.

It declares the options GUIs, python-chess and lichess-bot's shipped config send (``Hash``,
``Move Overhead``, ``SyzygyPath``, ``UCI_ShowWDL``, ``Ponder``, ``UCI_LimitStrength``), since a
client refuses to set an option the engine did not declare: each is accepted and ignored with
one ``info string`` saying why. ``MultiPV`` k prints the k most probable legal moves, best
first, each ``info`` line ending in ``string p=…`` (its probability), then ``bestmove``.

A checkpoint with the outcome head (``runs.NAME.outcome``) evaluates too: each ``info`` line of
a move the model chose carries ``score cp N`` from the head's expected score W + D/2 (Lichess's
win-percentage curve read backwards, ``chesslm.engine.wdl``) and, with ``UCI_ShowWDL`` on,
``wdl W D L`` in permille; with ``MultiPV`` 1 that is the position's own evaluation, with
several lines each line's is the position after its move, from the engine's side. A checkpoint
without the head prints no score, and ``UCI_ShowWDL`` is accepted and ignored.

Ratings, as Maia-3's engine has them: ``SelfElo`` (the engine's own rating), ``OppoElo`` (its
opponent's) and ``Elo`` (sets both at once), spins of 0-4000, default 1500. Each ``setoption``
takes effect in the order received: ``Elo`` overwrites both, a later ``SelfElo`` or ``OppoElo``
overwrites its one (so ``Elo 1200`` then ``OppoElo 1800`` plays a 1200 against an 1800). A
rating-conditioned checkpoint (``conditioning: elo``) reads them as the game's prefix from the
side it moves for: playing White, White is ``SelfElo`` and Black ``OppoElo``; playing Black,
the other way round (``chesslm.scorer.ratings``); every move's ``info string`` names the ratings
read. ``UCI_Elo`` is ``SelfElo``, and ``UCI_Opponent`` (``<title> <rating> <computer|human>
<name>``, as lichess-bot and python-chess send it) sets ``OppoElo`` from its rating (``none``
leaves it). A checkpoint without conditioning accepts the options and ignores them, saying so.

Clocks (issue 48): a timed checkpoint reads the game's clocks from ``go wtime … btime …``, and
``HumanTime`` (off by default) makes one with the think-time head wait a human's time before
``bestmove`` (``HumanTimePick``: median or sample), never past its clock: ``engine.think``.
"""

from __future__ import annotations

import argparse
import math
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterable

import chess
import numpy as np
import torch

from chesslm.data import tokens
from chesslm.engine import think, wdl
from chesslm.engine.lines import Undecodable, byte_lines, read_lines
from chesslm.export.load import model_at
from chesslm.model import checkpoint, gpt
from chesslm.scorer import branched, ratings, scoring

NAME = "chesslm"
AUTHOR = "the chesslm authors"
MAX_SEED = 2**31 - 1
MAX_MULTIPV = 256  # more than any position's legal moves (218 at most)
# UCI has no float option type: Temperature is a string option, as lc0 declares its own
OPTIONS = (
    "option name Temperature type string default 0",
    f"option name Seed type spin default 0 min 0 max {MAX_SEED}",
    "option name Threads type spin default 1 min 1 max 256",
    *(f"option name {name} type spin default {ratings.DEFAULT} min 0 max {4000}"
      for name in ("Elo", "SelfElo", "OppoElo")),
    f"option name MultiPV type spin default 1 min 1 max {MAX_MULTIPV}",
    f"option name UCI_Elo type spin default {ratings.DEFAULT} min 0 max 4000",
    "option name UCI_Opponent type string default <empty>",
    # what GUIs and lichess-bot's shipped config send (python-chess refuses to set an option
    # the engine did not declare): declared, accepted, and meaningless to a searchless engine
    "option name Hash type spin default 16 min 1 max 33554432",
    "option name Move Overhead type spin default 100 min 0 max 10000",
    "option name SyzygyPath type string default <empty>",
    "option name UCI_ShowWDL type check default false",
    "option name Ponder type check default false",
    "option name UCI_LimitStrength type check default false",
    # the think-time head's wait before bestmove (chesslm.engine.think)
    "option name HumanTime type check default false",
    f"option name HumanTimePick type combo default {think.PICKS[0]} {think.PICK_VARS}",
)  # fmt: skip
# option (lower case) -> why this engine ignores it, said once in an info string
IGNORED = {
    "hash": "no search, so no hash table",
    "syzygypath": "no tablebase probing: the model plays its own moves",
    "uci_showwdl": "no win/draw/loss estimate: this checkpoint has no outcome head",
    "ponder": "go ponder is answered at ponderhit; there is nothing to think ahead",
    "uci_limitstrength": "the strength is the model's own (UCI_Elo sets a conditioned model's"
    " rating)",
}
Ranked = tuple[chess.Move, float]  # a legal move and the model's probability of it
GO_NUMBERS = ("movetime", "nodes", "wtime", "btime", "winc", "binc", "movestogo", "depth", "mate")
GO_WORDS = (*GO_NUMBERS, "infinite", "ponder", "searchmoves")


def unencodable_start(board: chess.Board) -> str | None:
    """Why the model cannot read a game from this starting board, or None for the standard
    start (move counters aside: they do not change the position)."""
    if board.epd() == chess.Board().epd():
        return None
    return (
        "the model reads games from the standard start position and this FEN is not it"
        " (its move history is unknown)"
    )


def parse_position(args: list[str]) -> tuple[chess.Board, list[str]]:
    """The board of a ``position`` command's arguments and the complaints about them (an
    illegal move ends the moves there; a bad FEN leaves the start position)."""
    words = list(args)
    moves = words[words.index("moves") + 1 :] if "moves" in words else []
    head = words[: words.index("moves")] if "moves" in words else words
    complaints = []
    board = chess.Board()
    if head[:1] == ["fen"]:
        fen = " ".join(head[1:])
        try:
            board = chess.Board(fen)
        except ValueError as error:
            complaints.append(f"invalid FEN {fen!r} ({error}); using the start position")
    elif head != ["startpos"]:
        complaints.append(f"position needs startpos or fen, got {' '.join(head)!r}; using startpos")
    for i, text in enumerate(moves):
        try:
            move = board.parse_uci(text)
            if not move:  # 0000: a null move has no tokens
                raise ValueError(text)
            board.push(move)
        except ValueError:
            complaints.append(
                f"illegal move {text!r} at move {i + 1} of the position's moves; position taken"
                f" up to the move before it ({len(board.move_stack)} moves)"
            )
            break
    return board, complaints


def parse_go(args: list[str]) -> tuple[set[str], dict[str, int], list[str]]:
    """``go``'s flags (``infinite``, ``ponder``), its numbers (the clocks read; no limit bounds
    the search: one forward pass is the whole of it) and complaints about its words."""
    flags, numbers, complaints = set(), {}, []
    i = 0
    while i < len(args):
        word = args[i]
        if word in ("infinite", "ponder"):
            flags.add(word)
        elif word in GO_NUMBERS and i + 1 < len(args):
            try:
                numbers[word] = int(args[i + 1])
            except ValueError:
                complaints.append(f"go {word}: not an integer: {args[i + 1]!r}; ignored")
            i += 1
        elif word == "searchmoves":
            complaints.append("go searchmoves is not supported: every legal move is considered")
            while i + 1 < len(args) and args[i + 1] not in GO_WORDS:
                i += 1
        else:
            complaints.append(f"go: ignored {word!r}")
        i += 1
    return flags, numbers, complaints


class Engine:
    """One UCI session: the current position, the options and a held ``bestmove``."""

    def __init__(self, net: gpt.GPT, send: Callable[[str], None]) -> None:
        self.net, self.send = net, send
        self.device = next(net.parameters()).device
        self.board = chess.Board()
        self.unencodable: str | None = None
        self.temperature = 0.0
        self.seed = 0
        self.rng = torch.Generator().manual_seed(self.seed)
        self.self_elo = self.oppo_elo = ratings.DEFAULT
        self.multipv = 1
        self.evaluates = net.config.outcome  # has the outcome head
        self.position_wdl: list[float] | None = None  # the head's, from the go's scoring pass
        self.show_wdl = False
        self.held: str | None = None  # the bestmove line of a go infinite/ponder
        self.clocks = think.Clocks()  # what the go commands told of the game's clocks
        self.human_time, self.pick, self.overhead_ms = False, think.PICKS[0], 100
        self.time_rng = np.random.default_rng(self.seed)
        self.think: np.ndarray | None = None  # the head's distribution, from the go's pass
        self.increment: int | None = None  # the mover's, from the last go (milliseconds)
        self.interrupt = threading.Event()  # a stop during the wait (set by serve's reader)
        self.commands = {
            "uci": self.uci,
            "isready": lambda _: self.send("readyok"),
            "ucinewgame": self.new_game,
            "setoption": self.setoption,
            "position": self.position,
            "go": self.go,
            "stop": self.release,
            "ponderhit": self.release,
            "debug": lambda _: None,
            "register": lambda _: None,
        }

    def handle(self, line: str) -> bool:
        """Act on one input line; False on ``quit``."""
        words = line.split()
        if not words:
            return True
        if words[0] == "quit":
            return False
        command = self.commands.get(words[0])
        if command is None:
            self.info(f"unknown command {words[0]!r}; ignored")
            return True
        try:
            command(words[1:])
        except Exception as error:  # noqa: BLE001 - a GUI's engine must outlive any one command
            self.info(f"{words[0]} failed: {type(error).__name__}: {error}")
        return True

    def info(self, text: str) -> None:
        self.send(f"info string {' '.join(text.split())}")

    def uci(self, _: list[str]) -> None:
        self.send(f"id name {NAME} ({self.net.config.n_layer} layers, {tokens.VERSION})")
        self.send(f"id author {AUTHOR}")
        for option in OPTIONS:
            self.send(option)
        self.send("uciok")

    def new_game(self, _: list[str]) -> None:
        self.board, self.unencodable = chess.Board(), None
        self.rng.manual_seed(self.seed)
        self.time_rng = np.random.default_rng(self.seed)
        self.clocks.new_game()

    def setoption(self, args: list[str]) -> None:
        name, _, value = " ".join(args).removeprefix("name ").partition(" value ")
        name, value = name.strip(), value.strip()
        if name.lower() == "uci_showwdl" and self.evaluates:
            self.show_wdl = value.lower() == "true"
            return
        if name.lower() in IGNORED:
            self.info(f"option {name} accepted and ignored: {IGNORED[name.lower()]}")
            return
        setter = {
            "temperature": self.set_temperature,
            "seed": self.set_seed,
            "threads": lambda v: torch.set_num_threads(max(1, int(v))),
            "elo": lambda v: self.set_elo(v, own=True, opponent=True),
            "selfelo": lambda v: self.set_elo(v, own=True, opponent=False),
            "oppoelo": lambda v: self.set_elo(v, own=False, opponent=True),
            "uci_elo": lambda v: self.set_elo(v, own=True, opponent=False),
            "uci_opponent": self.set_opponent,
            "multipv": self.set_multipv,
            "humantime": self.set_human_time,
            "humantimepick": self.set_pick,
            "move overhead": self.set_overhead,
        }.get(name.lower())
        if setter is None:
            self.info(f"unknown option {name!r}; ignored")
            return
        try:
            setter(value)
        except ValueError as error:
            self.info(f"option {name} refused value {value!r} ({error}); unchanged")

    def set_opponent(self, value: str) -> None:
        """lichess-bot's and python-chess's ``<title|none> <rating|none> <computer|human>
        <name>``: the rating, when given, is the opponent's (``OppoElo``)."""
        words = value.split()
        if len(words) < 2 or words[1] == "none":
            self.info(f"UCI_Opponent {value!r} gives no rating; OppoElo stays {self.oppo_elo}")
            return
        self.set_elo(words[1], own=False, opponent=True)

    def set_human_time(self, value: str) -> None:
        self.human_time = value.lower() == "true"
        if self.human_time and not self.net.config.think_time:
            self.info("HumanTime needs a checkpoint with the think-time head (think_time:"
                      " true): this one answers at once")  # fmt: skip

    def set_pick(self, value: str) -> None:
        if value not in think.PICKS:
            raise ValueError(f"one of {', '.join(think.PICKS)} is needed")
        self.pick = value

    def set_overhead(self, value: str) -> None:
        ms = int(value)
        if not 0 <= ms <= 10000:
            raise ValueError("0..10000 is needed")
        self.overhead_ms = ms
        self.info(f"option Move Overhead accepted and ignored but by HumanTime ({ms} ms keep"
                  " its wait off the clock): one forward pass answers at once")  # fmt: skip

    def set_multipv(self, value: str) -> None:
        k = int(value)
        if not 1 <= k <= MAX_MULTIPV:
            raise ValueError(f"1..{MAX_MULTIPV} is needed")
        self.multipv = k

    def set_temperature(self, value: str) -> None:
        t = float(value)
        if not (math.isfinite(t) and t >= 0):
            raise ValueError("a finite number >= 0 is needed")
        self.temperature = t

    def set_elo(self, value: str, *, own: bool, opponent: bool) -> None:
        elo = int(value)
        if not 0 <= elo <= 4000:
            raise ValueError("0..4000 is needed")
        if own:
            self.self_elo = elo
        if opponent:
            self.oppo_elo = elo
        if not ratings.conditioned(self.net):
            self.info("this checkpoint is not rating-conditioned (conditioning: none): the"
                      " rating options are accepted and ignored")  # fmt: skip

    def set_seed(self, value: str) -> None:
        seed = int(value)
        if not 0 <= seed <= MAX_SEED:
            raise ValueError(f"0..{MAX_SEED} is needed")
        self.seed = seed
        self.rng.manual_seed(seed)
        self.time_rng = np.random.default_rng(seed)

    def position(self, args: list[str]) -> None:
        board, complaints = parse_position(args)
        for text in complaints:
            self.info(text)
        root = board.root()
        self.board, self.unencodable = board, unencodable_start(root)

    def go(self, args: list[str]) -> None:
        flags, numbers, complaints = parse_go(args)
        for text in complaints:
            self.info(text)
        self.release([])  # a go before the last one's stop: answer that one first
        started = time.perf_counter()
        self.interrupt.clear()
        ply = len(self.board.move_stack)
        self.clocks.record(ply, wtime=numbers.get("wtime"), btime=numbers.get("btime"))
        own = "w" if self.board.turn == chess.WHITE else "b"
        self.increment = numbers.get(f"{own}inc")
        self.position_wdl, self.think = None, None
        try:
            move, why, ranked = self.choose()
        except Exception as error:  # noqa: BLE001 - every go gets a bestmove, or a GUI waits
            move, why = self.random_move(f"the model failed ({type(error).__name__}: {error})")
            ranked = []
        ms = round(1000 * (time.perf_counter() - started))
        try:
            scores = self.scores(ranked)
        except Exception as error:  # noqa: BLE001 - a failed evaluation still plays its move
            scores = None
            self.info(f"no score: the outcome head failed ({type(error).__name__}: {error})")
        lines = self.pv_lines(move, ranked, ms, scores)
        # a client files an info line without multipv under the first line: with several,
        # the reason goes first so that each line keeps its own probability
        if len(lines) > 1:
            self.info(why)
        for text in lines:
            self.send(text)
        if len(lines) <= 1:
            self.info(why)
        left = numbers.get(f"{own}time")
        if (
            self.human_time
            and move is not None
            and left is not None
            and not (flags or {"movetime", "nodes", "depth"} & set(numbers))
        ):
            self.wait_human(left, time.perf_counter() - started)
        line = f"bestmove {move.uci() if move is not None else '(none)'}"
        if flags & {"infinite", "ponder"}:
            self.held = line
        else:
            self.send(line)

    def wait_human(self, left_ms: int, spent: float) -> None:
        """``HumanTime``: wait the think time chosen from the head (``chesslm.engine.think``)
        less ``spent``, never past the clock less ``Move Overhead``; a stop ends it."""
        if self.think is None:
            self.info("HumanTime: no think time (this checkpoint has no think-time head, or the"
                      " model was not asked): answering at once")  # fmt: skip
            return
        chosen = think.chosen_seconds(self.think, self.pick, self.time_rng)
        wait = think.wait_seconds(chosen, left_ms=left_ms, overhead_ms=self.overhead_ms,
                                  spent=spent)  # fmt: skip
        self.info(f"human time {chosen:.2f} s ({self.pick} of the think-time head), waiting"
                  f" {wait:.2f} s more after {spent:.2f} s of compute; clock {left_ms} ms,"
                  f" overhead {self.overhead_ms} ms")  # fmt: skip
        self.interrupt.wait(wait)

    def release(self, _: list[str]) -> None:
        if self.held is not None:
            self.send(self.held)
            self.held = None

    def pv_lines(
        self,
        move: chess.Move | None,
        ranked: list[Ranked],
        ms: int,
        scores: list[str] | None = None,
    ) -> list[str]:
        """The ``info`` lines of a ``go``: with ``MultiPV`` k > 1 the k most probable legal
        moves, best first, each with its probability (an ``info string`` at the line's end,
        which python-chess reads as the line's ``string``); else the move played. ``scores``:
        each line's ``score …`` words (``scores``), or None: no score."""
        head = f"info depth 1 nodes 1 time {ms}"
        if move is None:
            return []
        if self.multipv == 1 or not ranked:
            p = dict(ranked).get(move)
            said = f" string p={p:.4f}" if p is not None else ""
            score = f" {scores[0]}" if scores else ""
            return [f"{head} multipv 1{score} pv {move.uci()}{said}"]
        return [
            f"{head} multipv {i}{f' {scores[i - 1]}' if scores else ''} pv {m.uci()}"
            f" string p={p:.4f}"
            for i, (m, p) in enumerate(ranked[: self.multipv], 1)
        ]

    def scores(self, ranked: list[Ranked]) -> list[str] | None:
        """The ``score`` words of each info line of a move the model chose (``ranked``: its
        legal moves, best first), from the outcome head; None without it, or when a line's
        position does not fit the context. ``MultiPV`` 1: the position's own evaluation;
        k > 1: each line's move played, the head read from the opponent's side, flipped."""
        if not self.evaluates or not ranked:
            return None
        game = [*self.prefix(), tokens.BOS]
        for move in self.board.move_stack:
            game.extend(tokens.move_tokens(move))
        plies = len(self.board.move_stack)
        if self.multipv == 1:  # the scoring pass's, else a pass of its own
            clocks = [self.time_rows(plies)]
            own = self.position_wdl or wdl.evaluations(self.net, [game], self.device, clocks)[0]
            return [wdl.score_words(own, self.show_wdl)]
        lines = [game + list(tokens.move_tokens(m)) for m, _ in ranked[: self.multipv]]
        if len(lines[0]) > self.net.config.block_size:
            return None
        clocks = [self.time_rows(plies + 1)] * len(lines)  # the reading after it: unknown
        children = wdl.evaluations(self.net, lines, self.device, clocks)
        return [wdl.score_words([w[2], w[1], w[0]], self.show_wdl) for w in children]

    def choose(self) -> tuple[chess.Move | None, str, list[Ranked]]:
        """The move to play, a line saying how it was chosen, and the legal moves with the
        model's probabilities, most probable first (empty where the model was not asked)."""
        if not any(self.board.legal_moves):
            return None, "no legal move: the game is over", []
        plies = len(self.board.move_stack)
        # the ratings, BOS, the triples so far, the next source and destination
        longest = len(self.prefix()) + 1 + 3 * plies + 2
        if self.unencodable is not None:
            return *self.random_move(self.unencodable), []
        if longest > self.net.config.block_size:
            limit = self.net.config.block_size
            why = f"the game is longer than the model's context ({limit})"
            return *self.random_move(why), []
        return self.model_move()

    def random_move(self, why: str) -> tuple[chess.Move | None, str]:
        legal = list(self.board.legal_moves)
        if not legal:
            return None, "no legal move: the game is over"
        pick = int(torch.randint(len(legal), (1,), generator=self.rng))
        return legal[pick], f"{why}: playing a uniformly random legal move"

    def prefix(self) -> list[int]:
        """The tokens before BOS: the ratings from the side to move (none: unconditioned)."""
        white, black = ratings.colours(self.board.turn, self.self_elo, self.oppo_elo)
        return ratings.prefix(self.net, white, black)

    def ratings_read(self) -> str:
        if not ratings.conditioned(self.net):
            return "no ratings read (not conditioned)"
        white, black = ratings.colours(self.board.turn, self.self_elo, self.oppo_elo)
        return f"ratings White {white} Black {black} (prefix {self.prefix()})"

    def time_rows(self, plies: int) -> np.ndarray | None:
        """A timed model's rows of the game's positions up to ``plies`` (the go's clocks:
        ``chesslm.engine.think``); None for a model without time inputs."""
        if not self.net.config.time_inputs:
            return None
        return self.clocks.rows(plies, self.increment)

    def model_move(self) -> tuple[chess.Move, str, list[Ranked]]:
        rows = self.time_rows(len(self.board.move_stack))
        codes, logp, self.position_wdl, self.think = position_scores(
            self.net, self.board, self.device, self.prefix(), rows
        )
        if self.temperature == 0:
            pick = int(torch.argmax(logp))
            how = "argmax"
        else:
            # from the best move down: a tiny temperature cannot make every weight zero
            probs = torch.softmax((logp - logp.max()) / self.temperature, dim=0)
            pick = int(torch.multinomial(probs, 1, generator=self.rng))
            how = f"sampled at temperature {self.temperature:g}"
        p = math.exp(float(logp[pick]))
        why = f"{how} of {len(codes)} legal moves, p={p:.3f}; {self.ratings_read()}"
        # a stable sort: equal probabilities keep the legal moves' order
        order = sorted(range(len(codes)), key=lambda i: -float(logp[i]))
        ranked = [(scoring.decode_code(codes[i]), math.exp(float(logp[i]))) for i in order]
        return scoring.decode_code(codes[pick]), why, ranked


def legal_scores(
    net: gpt.GPT, board: chess.Board, device: torch.device, prefix: list[int] | None = None
) -> tuple[list[int], torch.Tensor]:
    """The legal move codes of a board reached from the standard start and their
    log-probabilities (CPU, FP32), from one pass of the play evaluation's scoring;
    ``prefix``: the tokens before BOS (a conditioned model's ratings)."""
    return position_scores(net, board, device, prefix)[:2]  # type: ignore[return-value]


def position_scores(
    net: gpt.GPT,
    board: chess.Board,
    device: torch.device,
    prefix: list[int] | None = None,
    time: np.ndarray | None = None,
) -> tuple[list[int], torch.Tensor, list[float] | None, np.ndarray | None]:
    """``legal_scores``' and, with an outcome head, its win/draw/loss from the side to move
    at the board, with a think-time head its distribution over the bins, read in the same
    pass (``scoring.Scores``); None without the head. ``time``: a timed model's rows at the
    game's positions (None: every time unknown)."""
    main = [tokens.BOS]
    for move in board.move_stack:
        main.extend(tokens.move_tokens(move))
    codes = scoring.legal_codes(board)
    game = branched.GameInput.from_plies(main, [codes], start=len(board.move_stack),
                                        prefix=prefix or [], time=time)  # fmt: skip
    batch = branched.build_batch([game], device)
    scores = scoring.score(net, batch)
    wdl_here = None if scores.wdl is None else scores.wdl[0].cpu().tolist()
    think_here = None if scores.think is None else scores.think[0].cpu().numpy()
    return game.legal(0).tolist(), scores.move_logp.float().cpu(), wdl_here, think_here


def serve(engine: Engine, stream: Iterable[bytes]) -> None:
    """Answer commands until ``quit`` or the end of input; a thread reads the input, so a
    ``stop`` is seen while the engine is busy."""
    lines: queue.Queue[str | None] = queue.Queue()
    reader = threading.Thread(
        target=read_lines, args=(stream, lines, engine.interrupt), daemon=True
    )
    reader.start()
    while (line := lines.get()) is not None:
        if isinstance(line, Undecodable):
            engine.info(line)
        elif not engine.handle(line):
            break


def send_line(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="chesslm-uci", description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True,
                        help="a chesslm .pt (e.g. train/best.pt) or an export folder")  # fmt: skip
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("chesslm-uci: --device cuda, but torch sees no CUDA device", file=sys.stderr)
        return 1
    torch.set_num_threads(1)  # the Threads option raises it
    try:
        net = model_at(args.checkpoint, args.device)
    except checkpoint.CheckpointError as error:
        print(f"chesslm-uci: {error}", file=sys.stderr)
        return 1
    serve(Engine(net, send_line), byte_lines(sys.stdin.fileno()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
