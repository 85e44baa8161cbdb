"""What ``chesslm-uci`` says of itself before any checkpoint is read: its ``id`` lines and the
options it declares, the same for every checkpoint (one table: ``uci`` answers from it before
the model loads, and the engine sets options by it after). An option a checkpoint cannot serve
(``UCI_ShowWDL`` without the outcome head, ``HumanTime`` without the think-time head, the
ratings without conditioning) is declared all the same and said ignored once, in an ``info
string``: a ``.pt`` cannot be read without torch, and ``uci`` must be answered without it.

Nothing here imports torch, numpy or a module that does (``chesslm.engine.uci`` answers ``uci``
with these lines while the model loads in another thread).

>>> handshake()[-1], len(handshake()) == len(OPTIONS) + 3
('uciok', True)
"""

from __future__ import annotations

from chesslm.data import tokens

NAME = "chesslm"
AUTHOR = "the chesslm authors"
MAX_SEED = 2**31 - 1
MAX_MULTIPV = 256  # more than any position's legal moves (218 at most)
MAX_ELO = 4000
DEFAULT_ELO = 1500  # chesslm.scorer.ratings.DEFAULT (a test holds them equal): it imports numpy
PICKS = ("median", "sample")  # HumanTimePick's values (chesslm.engine.think)
PICK_VARS = " ".join(f"var {p}" for p in PICKS)  # the UCI combo option's values
# UCI has no float option type: Temperature is a string option, as lc0 declares its own
OPTIONS = (
    "option name Temperature type string default 0",
    f"option name Seed type spin default 0 min 0 max {MAX_SEED}",
    "option name Threads type spin default 1 min 1 max 256",
    *(f"option name {name} type spin default {DEFAULT_ELO} min 0 max {MAX_ELO}"
      for name in ("Elo", "SelfElo", "OppoElo")),
    f"option name MultiPV type spin default 1 min 1 max {MAX_MULTIPV}",
    f"option name UCI_Elo type spin default {DEFAULT_ELO} min 0 max {MAX_ELO}",
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
    f"option name HumanTimePick type combo default {PICKS[0]} {PICK_VARS}",
)  # fmt: skip
# option (lower case) -> why this engine ignores it whatever the checkpoint, said in an info
# string at each setoption
IGNORED = {
    "hash": "no search, so no hash table",
    "syzygypath": "no tablebase probing: the model plays its own moves",
    "ponder": "go ponder is answered at ponderhit; there is nothing to think ahead",
    "uci_limitstrength": "the strength is the model's own (UCI_Elo sets a conditioned model's"
    " rating)",
}


def handshake() -> list[str]:
    """The answer to ``uci``: the ``id`` lines, every option, ``uciok``."""
    ident = [f"id name {NAME} ({tokens.VERSION})", f"id author {AUTHOR}"]
    return [*ident, *OPTIONS, "uciok"]
