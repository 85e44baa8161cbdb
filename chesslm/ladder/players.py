"""Anchor players for the Elo ladder, and the one interface every player of a game shares.

A ``Player`` is told ``new_game(seed)`` before each game and then asked ``move(board)`` for
each of its moves; ``close()`` ends it. Anchors, from weakest to strongest:

- ``random``: a uniformly random legal move (seeded per game: reproducible);
- ``greedy``: one ply of material: mate in one if there is one, else the move that wins the
  most material (the captured piece, plus the promotion's gain), ties broken at random
  (seeded per game: reproducible);
- ``stockfish``: Stockfish at a fixed node count, one thread, a fixed hash, strength not
  limited, a fresh game (``ucinewgame``) each game: deterministic for one engine build;
- ``random_share`` (greedy and stockfish): a seeded random legal move instead on that share
  of the moves, to bridge the gaps between random, greedy and the engine (still reproducible;
  the engine at 1 node already beats ``UCI_Elo`` 1350);
- ``stockfish_elo``: Stockfish with ``UCI_LimitStrength`` at a ``UCI_Elo``: the engine's own
  calibrated scale, which the ladder holds fixed. The engine weakens itself with an internal
  random generator it does not let a client seed: these games are NOT reproducible.

``ModelPlayer`` adapts a model of this project to the same interface.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import re
import selectors
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import chess
import chess.engine

if TYPE_CHECKING:
    import torch

KINDS = ("random", "greedy", "stockfish", "stockfish_elo")
REPRODUCIBLE = {"random": True, "greedy": True, "stockfish": True, "stockfish_elo": False}
VALUES = {chess.PAWN: 1, chess.KNIGHT: 3, chess.BISHOP: 3, chess.ROOK: 5, chess.QUEEN: 9}
HASH_MB = 16  # fixed so the node-limited search is the same on every host
ENGINE_FALLBACKS = ("/usr/games/stockfish", "/usr/local/bin/stockfish")  # Debian installs here


class Player(Protocol):
    """Anything that plays: told of each new game (with its seed), asked for its moves."""

    name: str

    def new_game(self, seed: int) -> None: ...

    def move(self, board: chess.Board) -> chess.Move: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class AnchorSpec:
    """One anchor's settings (JSON-able: the ladder file stores them)."""

    name: str
    kind: str
    nodes: int | None = None  # stockfish, stockfish_elo: nodes per move
    elo: int | None = None  # stockfish_elo: UCI_Elo, the rating the ladder holds fixed
    random_share: float = 0.0  # greedy, stockfish: share of moves played at random instead

    def __post_init__(self) -> None:
        object.__setattr__(self, "random_share", float(self.random_share))  # 0 and 0.0: one key
        if self.kind not in KINDS:
            raise ValueError(f"anchor {self.name!r}: kind {self.kind!r} is not one of {KINDS}")
        engine = self.kind.startswith("stockfish")
        if engine and (self.nodes is None or self.nodes < 1):
            raise ValueError(f"anchor {self.name!r}: {self.kind} needs nodes >= 1")
        if (self.kind == "stockfish_elo") != (self.elo is not None):
            raise ValueError(
                f"anchor {self.name!r}: elo must be set for stockfish_elo and only for it"
            )
        diluted = self.kind in ("greedy", "stockfish")
        if not 0.0 <= self.random_share < 1.0 or (self.random_share and not diluted):
            raise ValueError(
                f"anchor {self.name!r}: random_share must be in [0, 1), greedy or stockfish only"
            )

    @property
    def fixed(self) -> bool:
        """Whether the ladder holds this anchor's rating at its calibrated value."""
        return self.kind == "stockfish_elo"

    @property
    def reproducible(self) -> bool:
        return REPRODUCIBLE[self.kind]

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> AnchorSpec:
        try:
            return cls(**record)
        except TypeError as error:
            raise ValueError(f"anchor {record.get('name')!r}: {error}") from None


# Weakest to strongest, as a 4-games-a-pair ladder placed them (random -160, greedy 500,
# Stockfish at 1 node 1620, each +-120 to 290; without the random shares between them some
# pairs only ever won, and the fit had no finite maximum); the UCI_Elo anchors keep
# games.py's 20,000 nodes a move.
DEFAULT_ANCHORS = (
    AnchorSpec("random", "random"),
    AnchorSpec("stockfish-n1-r75", "stockfish", nodes=1, random_share=0.75),
    AnchorSpec("greedy-r50", "greedy", random_share=0.5),
    AnchorSpec("greedy", "greedy"),
    AnchorSpec("stockfish-n1-r50", "stockfish", nodes=1, random_share=0.5),
    AnchorSpec("stockfish-n1-r25", "stockfish", nodes=1, random_share=0.25),
    AnchorSpec("stockfish-n1-r10", "stockfish", nodes=1, random_share=0.1),
    AnchorSpec("stockfish-n1", "stockfish", nodes=1),
    AnchorSpec("stockfish-elo1350", "stockfish_elo", nodes=20_000, elo=1350),
    AnchorSpec("stockfish-elo1600", "stockfish_elo", nodes=20_000, elo=1600),
    AnchorSpec("stockfish-elo2000", "stockfish_elo", nodes=20_000, elo=2000),
    AnchorSpec("stockfish-elo2400", "stockfish_elo", nodes=20_000, elo=2400),
)


@dataclass
class RandomPlayer:
    name: str = "random"
    rng: random.Random = field(default_factory=random.Random)

    def new_game(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def move(self, board: chess.Board) -> chess.Move:
        return self.rng.choice(list(board.legal_moves))

    def close(self) -> None:
        pass


def material_gain(board: chess.Board, move: chess.Move) -> int:
    """Material the mover wins at once: the captured piece and a promotion's gain."""
    gain = VALUES[chess.PAWN] if board.is_en_passant(move) else 0
    captured = board.piece_type_at(move.to_square)
    if captured is not None:
        gain += VALUES[captured]
    if move.promotion is not None:
        gain += VALUES[move.promotion] - VALUES[chess.PAWN]
    return gain


@dataclass
class GreedyPlayer(RandomPlayer):
    name: str = "greedy"

    def move(self, board: chess.Board) -> chess.Move:
        legal = list(board.legal_moves)
        for move in legal:
            if not board.gives_check(move):  # cheap; spares a push and a mate search
                continue
            board.push(move)
            mate = board.is_checkmate()
            board.pop()
            if mate:
                return move
        gains = [material_gain(board, m) for m in legal]
        best = max(gains)
        return self.rng.choice([m for m, g in zip(legal, gains, strict=True) if g == best])


class EnginePlayer:
    """Stockfish as an anchor: node-limited (deterministic) or strength-limited (random)."""

    def __init__(
        self, spec: AnchorSpec, engine_path: str, engine: chess.engine.SimpleEngine | None = None
    ) -> None:
        """``engine``: a running engine to configure for ``spec`` (another anchor's, done with
        its games) instead of starting one; each game starts with ``ucinewgame`` either way."""
        self.name = spec.name
        self.spec = spec
        self.limit = chess.engine.Limit(nodes=spec.nodes)
        self.engine = engine or chess.engine.SimpleEngine.popen_uci(engine_path)
        self.game: object = object()
        options: dict[str, Any] = {"Threads": 1, "Hash": HASH_MB}
        if spec.kind == "stockfish_elo":
            option = self.engine.options["UCI_Elo"]
            if not option.min <= spec.elo <= option.max:
                self.engine.quit()
                raise ValueError(
                    f"anchor {spec.name!r}: UCI_Elo {spec.elo} is outside this engine's"
                    f" {option.min}-{option.max}"
                )
            options |= {"UCI_LimitStrength": True, "UCI_Elo": spec.elo}
        else:
            options |= {"UCI_LimitStrength": False}
        self.engine.configure(options)

    @property
    def build(self) -> str:
        return str(self.engine.id.get("name"))

    def new_game(self, seed: int) -> None:
        self.game = object()  # a new id makes python-chess send ucinewgame (clears the hash)

    def move(self, board: chess.Board) -> chess.Move:
        return self.engine.play(board, self.limit, game=self.game).move

    def close(self) -> None:
        self.engine.quit()


class DilutedPlayer(RandomPlayer):
    """``inner``'s move, or a seeded random legal move on a ``share`` of the moves."""

    def __init__(self, inner: Player, share: float) -> None:
        super().__init__(inner.name)
        self.inner, self.share = inner, share

    def new_game(self, seed: int) -> None:
        super().new_game(seed)
        self.inner.new_game(self.rng.getrandbits(63))

    def move(self, board: chess.Board) -> chess.Move:
        if self.rng.random() < self.share:
            return super().move(board)
        return self.inner.move(board)

    def close(self) -> None:
        self.inner.close()


def open_player(
    spec: AnchorSpec, engine_path: str, engine: chess.engine.SimpleEngine | None = None
) -> Player:
    """The anchor ``spec`` describes, ready to play (an engine anchor starts its process, or
    configures ``engine``)."""
    player: Player
    if spec.kind == "random":
        return RandomPlayer(spec.name)
    if spec.kind == "greedy":
        player = GreedyPlayer(spec.name)
    else:
        player = EnginePlayer(spec, engine_path, engine)
    return DilutedPlayer(player, spec.random_share) if spec.random_share else player


def find_engine(name: str, key: str = "ladders.NAME.engine") -> str:
    """The engine executable: ``name`` on PATH, else Debian's /usr/games location; the error
    names the config ``key`` that gave ``name``."""
    found = shutil.which(name) or next(
        (p for p in ENGINE_FALLBACKS if Path(p).name == name and Path(p).exists()), None
    )
    if found is None:
        raise FileNotFoundError(
            f"{key}: {name!r} not found on PATH nor in /usr/games"
            " (apt-get install -y stockfish, or set play.elo.games_per_anchor: 0)"
        )
    return found


HANDSHAKE_S = 5.0  # Stockfish answers `uci` in milliseconds; a program that is not an engine never
HANDSHAKE_BYTES = 1 << 20  # Stockfish's answer is ~2 kB; `/usr/bin/yes` floods gigabytes in 5 s
UCIOK = re.compile(rb"(^|\n)[ \t\r]*uciok[ \t\r]*(\n|$)")
UCI_ELO = re.compile(r"^option name UCI_Elo type spin .*\bmin (-?\d+) max (-?\d+)")


@dataclass(frozen=True)
class EngineInfo:
    """What a UCI engine says of itself in its handshake: its ``id name`` (part of a ladder's
    identity) and the range its ``UCI_Elo`` option takes (None: it has none)."""

    name: str
    elo_range: tuple[int, int] | None


def handshake(
    engine_path: str, *, timeout_s: float = HANDSHAKE_S, max_bytes: int = HANDSHAKE_BYTES
) -> EngineInfo:
    """``uci`` sent to the program, its answer read up to ``uciok``, within ``timeout_s`` and
    ``max_bytes`` (python-chess waits 10 s, then raises a TimeoutError naming nothing; reading
    all it says until then held a flooding program's gigabytes). The program and its children
    are killed at the end.

    :raises ValueError: one line, if it cannot be started or does not answer as UCI."""
    try:
        proc = subprocess.Popen([engine_path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    except OSError as error:
        raise ValueError(f"{engine_path} cannot be started: {error.strerror}") from None
    try:
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.write(b"uci\nquit\n")  # type: ignore[union-attr]
            proc.stdin.close()  # type: ignore[union-attr]
        out, wait = read_answer(proc, timeout_s, max_bytes)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # a script's children too (they hold the pipe)
        proc.stdout.close()  # type: ignore[union-attr]
        proc.wait()
    lines = [line.strip() for line in out.decode(errors="replace").splitlines()]
    if "uciok" not in lines:
        raise ValueError(
            f"{engine_path} is not a UCI engine: it did not answer `uci` with `uciok` {wait}"
        )
    name = next((line[len("id name ") :] for line in lines if line.startswith("id name ")), "")
    elo = next((m for m in map(UCI_ELO.match, lines) if m), None)
    return EngineInfo(name, (int(elo[1]), int(elo[2])) if elo else None)


def read_answer(proc: subprocess.Popen, timeout_s: float, max_bytes: int) -> tuple[bytes, str]:
    """What ``proc`` writes up to its ``uciok`` line, its exit, ``timeout_s`` or ``max_bytes``
    (whichever first), and how it ended in words (the refusal's "within ...")."""
    out = bytearray()
    give_up = time.monotonic() + timeout_s
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)  # type: ignore[arg-type]
        while (left := give_up - time.monotonic()) > 0:
            if not selector.select(left):
                continue
            chunk = os.read(proc.stdout.fileno(), 65536)  # type: ignore[union-attr]
            if not chunk:  # its output closed: it exits (a moment's wait for its status)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=1.0)
                return bytes(out), f"before it exited (status {proc.returncode})"
            out += chunk
            if UCIOK.search(out, max(0, len(out) - len(chunk) - 16)):  # the new bytes only
                return bytes(out), ""
            if len(out) >= max_bytes:
                return bytes(out[:max_bytes]), f"in its first {max_bytes} bytes"
    return bytes(out), f"within {timeout_s:.0f} s"


class ModelPlayer:
    """A model of this project as a player: its best legal move, as ``games.best_moves``
    scores it (argmax; deterministic for given weights), or a seeded sample."""

    def __init__(
        self,
        net: torch.nn.Module,
        *,
        name: str = "model",
        sample: bool = False,
        elo: tuple[int, int] = (1500, 1500),
    ):
        """``elo``: (its own, its opponent's) rating, for a rating-conditioned model."""
        import torch  # here, not above: the ladder's worker processes start without torch

        from chesslm.ladder import games

        self.best_moves, self.mover_prefix = games.best_moves, games.mover_prefix
        self.elo = elo
        self.name = name
        self.net = net
        self.sample = sample
        self.generator = torch.Generator()

    def new_game(self, seed: int) -> None:
        self.generator.manual_seed(seed)

    def twin(self) -> ModelPlayer:
        """The same model and settings with a generator of its own: one per game in flight
        (``inflight``), each seeded by its game as this one would be."""
        return ModelPlayer(self.net, name=self.name, sample=self.sample, elo=self.elo)

    def moves(self, seats: list[ModelPlayer], boards: list[chess.Board]) -> list[chess.Move]:
        """Each seat's move on its board (a twin's, in its game), in one batched pass; the
        same moves as ``move`` on each board alone, each drawn from its seat's generator."""
        leads = [self.mover_prefix(self.net, b, *s.elo) for s, b in zip(seats, boards, strict=True)]
        return self.best_moves(self.net, boards, sample=self.sample, prefixes=leads,
                               generators=[s.generator for s in seats])  # fmt: skip

    def move(self, board: chess.Board) -> chess.Move:
        return self.moves([self], [board])[0]

    def close(self) -> None:
        pass
