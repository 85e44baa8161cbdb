"""A UCI engine for any checkpoint of this project, so GUIs, match runners and lichess-bot can
play the model: ``python -m chesslm.engine.uci --checkpoint PATH [--device cpu|cuda]``, installed
as the console script ``chesslm-uci``.

It answers ``uci`` at once (``id``, every option, ``uciok``: ``chesslm.engine.options``, the
same for every checkpoint), before torch is imported, while a thread loads the model: torch's
import and the load take seconds on a busy machine, and match runners give up on an engine
whose ``uciok`` is late (fastchess waits 10 s). Every other command read before the model is
loaded waits for it, in order: ``isready`` answers ``readyok`` once the model is loaded, and
a ``position`` or ``go`` before it is answered after it. ``quit`` ends the engine at once
whatever it is doing (loading, waiting a human's time, holding a ``go infinite``): it ends its
process without the interpreter's teardown, which with torch loaded takes most of a second; a
command read before a ``quit`` that came during the load is left unanswered (an ``info
string`` says how many). The end of the input ends it once every command read is answered, so
a script pipes its commands without ``quit``.

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
that is not a chesslm checkpoint ends it with one line on stderr and exit status 1 as soon as
the load finds it out (after the answer to ``uci``, before any ``readyok``; a ``quit`` before
that ends it with status 0, unsaid).

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
without the head prints no score and says so once, at its first move or at ``UCI_ShowWDL``
(accepted and ignored), whichever comes first.

Ratings, as Maia-3's engine has them: ``SelfElo`` (the engine's own rating), ``OppoElo`` (its
opponent's) and ``Elo`` (sets both at once), spins of 0-4000, default 1500. Each ``setoption``
takes effect in the order received: ``Elo`` overwrites both, a later ``SelfElo`` or ``OppoElo``
overwrites its one (so ``Elo 1200`` then ``OppoElo 1800`` plays a 1200 against an 1800). A
rating-conditioned checkpoint (``conditioning: elo``) reads them as the game's prefix from the
side it moves for: playing White, White is ``SelfElo`` and Black ``OppoElo``; playing Black,
the other way round (``chesslm.scorer.ratings``); every move's ``info string`` names the ratings
read. ``UCI_Elo`` is ``SelfElo``, and ``UCI_Opponent`` (``<title> <rating> <computer|human>
<name>``, as lichess-bot and python-chess send it) sets ``OppoElo`` from its rating (``none``
leaves it). A checkpoint without conditioning accepts the options and ignores them, saying so once.

Clocks (issue 48): a timed checkpoint reads the game's clocks from ``go wtime … btime …`` and
the time control's base from the first such go, whatever came before it (lichess-bot's ``go
movetime 10000``), snapped to a Lichess base a client's overhead above it, and says so once a
game; ``HumanTime`` (off by default) makes one with the think-time head wait a human's time before
``bestmove`` (``HumanTimePick``: median or sample), never past its clock: ``engine.think``;
a checkpoint without the head answers at once, saying so once.

The model side of a session is ``chesslm.engine.session``; this module imports neither torch nor
numpy (a test holds it so). Environment variable ``CHESSLM_UCI_HOLD``, when set, names a file
the load waits for before it starts: the tests' way to talk to the engine before its model.
"""

from __future__ import annotations

import argparse
import os
import queue
import sys
import threading
import time
from typing import TYPE_CHECKING, NamedTuple

from chesslm.engine import options
from chesslm.engine.lines import Undecodable, byte_lines, read_lines

if TYPE_CHECKING:  # torch's: imported by the load, never here
    from chesslm.engine.session import Engine

HOLD = "CHESSLM_UCI_HOLD"  # a file the load waits for (the module docstring)
STDIN = 0  # not sys.stdin.fileno(): an in-process caller's sys.stdin may have none (pytest's)


class Loaded(NamedTuple):
    """The loading thread's outcome, queued among the input lines."""

    engine: Engine | None  # None if the load failed
    error: Exception | None = None


Inbox = queue.Queue  # the input's lines (None: its end) and the load's ``Loaded``


def load(args: argparse.Namespace, interrupt: threading.Event, inbox: Inbox) -> None:
    """Load the model, torch with it, and queue its engine or the load's error."""
    while (hold := os.environ.get(HOLD)) and not os.path.exists(hold):
        time.sleep(0.05)
    try:
        from chesslm.engine import session  # torch: the seconds uci does not wait for

        engine = session.engine_at(args.checkpoint, args.device, send_line, interrupt)
    except Exception as error:  # noqa: BLE001 - raised again in the engine's thread (refused)
        inbox.put(Loaded(None, error))
        return
    inbox.put(Loaded(engine))


def until_loaded(inbox: Inbox) -> tuple[Loaded | None, list[str | None]]:
    """Answer ``uci`` until the model is loaded; the load's outcome (None: ``quit`` came
    first) and the input read meanwhile, for the engine, in order (None: the input's end)."""
    held: list[str | None] = []
    while not isinstance(item := inbox.get(), Loaded):
        word = (item or "").split()[:1]
        if word == ["quit"]:
            if held:
                send_line(f"info string quit while the model loads: {len(held)} command(s) read"
                          " before it left unanswered")  # fmt: skip
            return None, held
        if word == ["uci"]:
            for line in options.handshake():
                send_line(line)
        else:
            held.append(item)
    return item, held


def refused(error: Exception) -> int:
    """A checkpoint that cannot be loaded: its one line on stderr, status 1; any other error
    (torch's import's too) is raised, a bug's traceback, as it was before the load had a
    thread."""
    checkpoint = sys.modules.get("chesslm.model.checkpoint")  # there if the load got to it
    if checkpoint is None or not isinstance(error, checkpoint.CheckpointError):
        raise error
    print(f"chesslm-uci: {error}", file=sys.stderr)
    return 1


def answer(engine: Engine, line: str | None) -> bool:
    """Hand one input line to the engine; False at ``quit`` or the end of input."""
    if line is None:
        return False
    if isinstance(line, Undecodable):
        engine.info(line)
        return True
    return engine.handle(line)


def serve(inbox: Inbox) -> int:
    """Answer the input until ``quit`` or its end; the status to exit with. A thread reads the
    input, so a ``stop`` or ``quit`` is seen while the engine loads, thinks or waits."""
    loaded, held = until_loaded(inbox)
    if loaded is None:
        return 0
    if loaded.error is not None:
        return refused(loaded.error)
    if all(answer(loaded.engine, line) for line in held):
        while answer(loaded.engine, inbox.get()):
            pass
    return 0


def send_line(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    """The engine. After ``quit`` or the end of input it ends its process itself
    (``os._exit``): the interpreter's teardown with torch loaded takes 0.4-0.8 s (seconds on
    a busy machine), and the loading thread may be inside torch's import."""
    parser = argparse.ArgumentParser(prog="chesslm-uci", description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True,
                        help="a chesslm .pt (e.g. train/best.pt) or an export folder")  # fmt: skip
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    args = parser.parse_args(argv)
    inbox: Inbox = queue.Queue()
    interrupt = threading.Event()  # set by the reader at stop and quit: ends a HumanTime wait
    threading.Thread(target=load, args=(args, interrupt, inbox), daemon=True).start()
    reading = (byte_lines(STDIN), inbox, interrupt)
    threading.Thread(target=read_lines, args=reading, daemon=True).start()
    status = serve(inbox)
    if status == 0:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return status


if __name__ == "__main__":
    sys.exit(main())
