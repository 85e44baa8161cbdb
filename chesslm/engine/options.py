"""What ``chesslm-uci`` says of itself before any checkpoint is read: its ``id`` lines and the
options it declares, the same for every checkpoint: ``TABLE``, one row per option (name, type,
default, bounds, the engine's setter or why it is ignored); ``uci`` answers from it before the
model loads, and the engine parses and sets options by it after. An option a checkpoint cannot serve
(``UCI_ShowWDL`` without the outcome head, ``HumanTime`` without the think-time head, the
ratings without conditioning) is declared all the same and said ignored once, in an ``info
string``: a ``.pt`` cannot be read without torch, and ``uci`` must be answered without it.

Nothing here imports torch, numpy or a module that does (``chesslm.engine.uci`` answers ``uci``
with these lines while the model loads in another thread).

>>> handshake()[-1], len(handshake()) == len(OPTIONS) + 3
('uciok', True)
>>> BY_NAME["multipv"].declaration()
'option name MultiPV type spin default 1 min 1 max 256'
>>> BY_NAME["multipv"].parse("300")
Traceback (most recent call last):
ValueError: 1..256 is needed
"""

from __future__ import annotations

from dataclasses import dataclass

from chesslm.data import tokens

NAME = "chesslm"
AUTHOR = "the chesslm authors"
MAX_SEED = 2**31 - 1
MAX_MULTIPV = 256  # more than any position's legal moves (218 at most)
MAX_ELO = 4000
DEFAULT_ELO = 1500  # chesslm.scorer.ratings.DEFAULT (a test holds them equal): it imports numpy
PICKS = ("median", "sample")  # HumanTimePick's values (chesslm.engine.think)


@dataclass(frozen=True)
class Option:
    """One UCI option, as Stockfish's ``engine.cpp`` declares each in one line: its name, type,
    default and bounds (``spin``) or values (``combo``), and what the engine does with it:
    ``setter``, the ``chesslm.engine.session.Engine`` method given the parsed value, or
    ``ignored``, why this engine ignores it whatever the checkpoint (said at each setoption)."""

    name: str
    kind: str  # UCI's type: spin, check, string or combo
    default: int | bool | str
    bounds: tuple[int, int] | None = None
    choices: tuple[str, ...] = ()
    setter: str = ""
    ignored: str = ""

    def declaration(self) -> str:
        """The ``option name ...`` line ``uci`` answers with."""
        default = str(self.default).lower() if self.kind == "check" else self.default
        line = f"option name {self.name} type {self.kind} default {default}"
        if self.bounds:
            line += f" min {self.bounds[0]} max {self.bounds[1]}"
        return line + "".join(f" var {c}" for c in self.choices)

    def parse(self, text: str) -> int | bool | str:
        """``text`` of a ``setoption`` as this option's value; a ValueError says what is
        needed."""
        if self.kind == "check":
            if text.lower() not in ("true", "false"):
                raise ValueError("true or false is needed")
            return text.lower() == "true"
        if self.kind == "combo" and text not in self.choices:
            raise ValueError(f"one of {', '.join(self.choices)} is needed")
        if self.kind != "spin":
            return text
        try:
            value = int(text)
        except ValueError:
            raise ValueError("a whole number is needed") from None
        low, high = self.bounds or (value, value)
        if not low <= value <= high:
            raise ValueError(f"{low}..{high} is needed")
        return value


ELO = (0, MAX_ELO)
# every option the engine declares, one row each. UCI has no float type: Temperature is a
# string option, as lc0 declares its own. Hash, SyzygyPath, Ponder and UCI_LimitStrength are
# what GUIs and lichess-bot's shipped config send (python-chess refuses to set an option the
# engine did not declare): declared, accepted, and meaningless to a searchless engine.
TABLE = (
    Option("Temperature", "string", "0", setter="set_temperature"),
    Option("Seed", "spin", 0, (0, MAX_SEED), setter="set_seed"),
    Option("Threads", "spin", 1, (1, 256), setter="set_threads"),
    Option("Elo", "spin", DEFAULT_ELO, ELO, setter="set_both_elos"),
    Option("SelfElo", "spin", DEFAULT_ELO, ELO, setter="set_self_elo"),
    Option("OppoElo", "spin", DEFAULT_ELO, ELO, setter="set_oppo_elo"),
    Option("MultiPV", "spin", 1, (1, MAX_MULTIPV), setter="set_multipv"),
    Option("UCI_Elo", "spin", DEFAULT_ELO, ELO, setter="set_self_elo"),
    Option("UCI_Opponent", "string", "<empty>", setter="set_opponent"),
    Option("Hash", "spin", 16, (1, 33554432), ignored="no search, so no hash table"),
    Option("Move Overhead", "spin", 100, (0, 10000), setter="set_overhead"),
    Option("SyzygyPath", "string", "<empty>",
           ignored="no tablebase probing: the model plays its own moves"),
    Option("UCI_ShowWDL", "check", False, setter="set_show_wdl"),
    Option("Ponder", "check", False,
           ignored="go ponder is answered at ponderhit; there is nothing to think ahead"),
    Option("UCI_LimitStrength", "check", False,
           ignored="the strength is the model's own (UCI_Elo sets a conditioned model's rating)"),
    # the think-time head's wait before bestmove (chesslm.engine.think)
    Option("HumanTime", "check", False, setter="set_human_time"),
    Option("HumanTimePick", "combo", PICKS[0], choices=PICKS, setter="set_pick"),
)  # fmt: skip
OPTIONS = tuple(option.declaration() for option in TABLE)
BY_NAME = {option.name.lower(): option for option in TABLE}  # UCI's names are case-blind


def default(name: str) -> int | bool | str:
    """The option's default: the engine starts with it."""
    return BY_NAME[name.lower()].default


def handshake() -> list[str]:
    """The answer to ``uci``: the ``id`` lines, every option, ``uciok``."""
    ident = [f"id name {NAME} ({tokens.VERSION})", f"id author {AUTHOR}"]
    return [*ident, *OPTIONS, "uciok"]
