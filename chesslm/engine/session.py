"""The engine's model side: one UCI session over a loaded model (``Engine``), what
``chesslm-uci`` (``chesslm.engine.uci``) hands every command but ``uci`` and ``quit`` to once
the model is loaded, and the scoring pass its moves come from (``position_scores``); a
command's words are read by ``chesslm.engine.commands``. The protocol, the options and the
behaviour are documented in ``chesslm.engine.uci``; this module imports torch, so the engine
imports it in its loading thread, after ``uci`` can be answered.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

import chess
import numpy as np
import torch

from chesslm.data import tokens
from chesslm.engine import kvcache, options, think, timeman, wdl
from chesslm.engine.commands import parse_go, parse_position, unencodable_start
from chesslm.export.load import model_at
from chesslm.model import gpt
from chesslm.model.checkpoint import CheckpointError
from chesslm.scorer import branched, ratings, scoring

NO_THINK_HEAD = (
    "HumanTime needs a checkpoint with the think-time head (think_time: true): this one answers"
    " at once"
)
NO_OUTCOME_HEAD = (
    "no score and no win/draw/loss: this checkpoint has no outcome head (a run with outcome:"
    " true trains it); UCI_ShowWDL is accepted and ignored"
)
Ranked = tuple[chess.Move, float]  # a legal move and the model's probability of it


class Engine:
    """One UCI session: the current position, the options and a held ``bestmove``;
    ``interrupt``: set by the input's reader at ``stop`` and ``quit`` (it ends a HumanTime
    wait; None: one of its own)."""

    def __init__(
        self,
        net: gpt.GPT,
        send: Callable[[str], None],
        interrupt: threading.Event | None = None,
    ) -> None:
        self.net, self.send = net, send
        self.device = next(net.parameters()).device
        self.board = chess.Board()
        self.unencodable: str | None = None
        self.temperature = float(options.default("Temperature"))
        self.seed = options.default("Seed")
        self.rng = torch.Generator().manual_seed(self.seed)
        self.self_elo, self.oppo_elo = options.default("SelfElo"), options.default("OppoElo")
        self.multipv = options.default("MultiPV")
        self.evaluates = net.config.outcome  # has the outcome head
        self.position_wdl: list[float] | None = None  # the head's, from the go's scoring pass
        self.show_wdl = options.default("UCI_ShowWDL")
        self.held: str | None = None  # the bestmove line of a go infinite/ponder
        self.clocks = think.Clocks()  # what the go commands told of the game's clocks
        self.human_time, self.pick = options.default("HumanTime"), options.default("HumanTimePick")
        self.overhead_ms = options.default("Move Overhead")
        self.game = 0  # games begun (ucinewgame) since the Seed was set
        self.time_rng = np.random.default_rng((self.seed, self.game))
        self.think: np.ndarray | None = None  # the head's distribution, from the go's pass
        self.increment: int | None = None  # the mover's, from the last go (milliseconds)
        self.interrupt = interrupt or threading.Event()
        self.said: set[str] = set()  # what this checkpoint lacks, said once (``once``)
        # the game's keys and values between go commands (``kvcache``); False: a full pass at
        # every go (position_scores; the benchmark's and the tests' reference)
        self.incremental = True
        self.cache = kvcache.GameCache(net)
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

    def once(self, text: str) -> None:
        """``info`` the first time only: a checkpoint's missing head or conditioning does not
        change within the process, and a GUI's log needs it once, not at every move."""
        if text not in self.said:
            self.said.add(text)
            self.info(text)

    def uci(self, _: list[str]) -> None:
        for line in options.handshake():
            self.send(line)

    def new_game(self, _: list[str]) -> None:
        self.board, self.unencodable = chess.Board(), None
        self.cache.clear()
        self.rng.manual_seed(self.seed)
        self.game += 1  # think times differ game to game; Seed still replays a whole match
        self.time_rng = np.random.default_rng((self.seed, self.game))
        self.clocks.new_game()

    def setoption(self, args: list[str]) -> None:
        """Set an option by its row of ``options.TABLE``: the value parsed and bounded there,
        then given to the row's setter."""
        name, _, value = " ".join(args).removeprefix("name ").partition(" value ")
        name, value = name.strip(), value.strip()
        option = options.BY_NAME.get(name.lower())
        if option is None:
            self.info(f"unknown option {name!r}; ignored")
        elif option.ignored:
            self.info(f"option {name} accepted and ignored: {option.ignored}")
        else:
            try:
                getattr(self, option.setter)(option.parse(value))
            except ValueError as error:
                self.info(f"option {name} refused value {value!r} ({error}); unchanged")

    def set_threads(self, threads: int) -> None:
        torch.set_num_threads(threads)

    def set_both_elos(self, elo: int) -> None:
        self.set_elo(elo, own=True, opponent=True)

    def set_self_elo(self, elo: int) -> None:
        self.set_elo(elo, own=True, opponent=False)

    def set_oppo_elo(self, elo: int) -> None:
        self.set_elo(elo, own=False, opponent=True)

    def set_opponent(self, value: str) -> None:
        """lichess-bot's and python-chess's ``<title|none> <rating|none> <computer|human>
        <name>``: the rating, when given, is the opponent's (``OppoElo``)."""
        words = value.split()
        if len(words) < 2 or words[1] == "none":
            self.info(f"UCI_Opponent {value!r} gives no rating; OppoElo stays {self.oppo_elo}")
            return
        self.set_oppo_elo(options.BY_NAME["oppoelo"].parse(words[1]))

    def set_show_wdl(self, show: bool) -> None:
        self.show_wdl = show
        if not self.evaluates:
            self.once(NO_OUTCOME_HEAD)

    def set_human_time(self, wait: bool) -> None:
        self.human_time = wait
        if self.human_time and not self.net.config.think_time:
            self.once(NO_THINK_HEAD)

    def set_pick(self, pick: str) -> None:
        self.pick = pick

    def set_overhead(self, ms: int) -> None:
        self.overhead_ms = ms
        self.info(f"option Move Overhead accepted and ignored but by HumanTime ({ms} ms keep"
                  " its wait off the clock): one forward pass answers at once")  # fmt: skip

    def set_multipv(self, k: int) -> None:
        self.multipv = k

    def set_temperature(self, value: str) -> None:
        t = float(value)
        if not (math.isfinite(t) and t >= 0):
            raise ValueError("a finite number >= 0 is needed")
        self.temperature = t

    def set_elo(self, elo: int, *, own: bool, opponent: bool) -> None:
        if own:
            self.self_elo = elo
        if opponent:
            self.oppo_elo = elo
        if not ratings.conditioned(self.net):
            self.once("this checkpoint is not rating-conditioned (conditioning: none): the"
                      " rating options are accepted and ignored")  # fmt: skip

    def set_seed(self, seed: int) -> None:
        self.seed, self.game = seed, 0
        self.rng.manual_seed(seed)
        self.time_rng = np.random.default_rng((seed, self.game))

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
        self.read_clocks(ply, numbers)
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
        if ranked and not self.evaluates:  # a client that reads scores warns at each move
            self.once(NO_OUTCOME_HEAD)  # before the lines: python-chess keeps a move's last string
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
            self.wait_human(left, numbers.get("movestogo"), time.perf_counter() - started)
        line = f"bestmove {move.uci() if move is not None else '(none)'}"
        if flags & {"infinite", "ponder"}:
            self.held = line
        else:
            self.send(line)

    def read_clocks(self, ply: int, numbers: dict[str, int]) -> None:
        """A go's clocks into the game's (``think.Clocks``); where its first clocked go gives
        a timed model the base, or none, an ``info string`` says which (once a game)."""
        first = self.clocks.clocked is None
        self.clocks.record(ply, **{k: numbers.get(k) for k in ("wtime", "btime", "winc", "binc")})
        if first and self.clocks.clocked is not None and self.net.config.time_inputs:
            self.info(self.clocks.base_note())

    def wait_human(self, left_ms: int, movestogo: int | None, spent: float) -> None:
        """``HumanTime``: wait the think time chosen from the head (``chesslm.engine.think``)
        less ``spent``, never past the time manager's bound (``chesslm.engine.timeman``); a
        stop ends it."""
        if not self.net.config.think_time:
            self.once(NO_THINK_HEAD)
            return
        if self.think is None:  # a random move: the model was not asked
            self.info("HumanTime: no think time (the model did not choose this move):"
                      " answering at once")  # fmt: skip
            return
        chosen = think.chosen_seconds(self.think, self.pick, self.time_rng)
        bound = timeman.bound_seconds(
            left_ms, self.increment, overhead_ms=self.overhead_ms,
            moves_played=len(self.board.move_stack) // 2, movestogo=movestogo, latency_s=spent,
        )  # fmt: skip
        wait = think.wait_seconds(chosen, limit_s=bound, spent=spent)
        self.info(f"human time {chosen:.2f} s ({self.pick} of the think-time head), waiting"
                  f" {wait:.2f} s more after {spent:.2f} s of compute; bound {bound:.2f} s"
                  f" (clock {left_ms} ms, overhead {self.overhead_ms} ms)")  # fmt: skip
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
        if self.incremental:
            codes, logp, self.position_wdl, self.think = self.cache.scores(
                self.board, self.prefix(), rows
            )
        else:
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
        if self.incremental:  # what the go read from the game's cache (kvcache)
            why += f"; kv cache {self.cache.reused} of {self.cache.length} tokens"
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


def engine_at(
    path: str, device: str, send: Callable[[str], None], interrupt: threading.Event
) -> Engine:
    """The engine of a checkpoint file or an export folder on ``device``, torch at one thread
    (option ``Threads`` raises it).

    :raises CheckpointError: in one line, if it cannot be loaded or there is no such device."""
    if device == "cuda" and not torch.cuda.is_available():
        raise CheckpointError("--device cuda, but torch sees no CUDA device")
    # stored for every thread: the engine's, which has not run torch yet, takes it at its first
    torch.set_num_threads(1)
    return Engine(model_at(path, device), send, interrupt)
