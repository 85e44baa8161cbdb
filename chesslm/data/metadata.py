"""Per-game metadata beside the tokens: ratings, time control, result, date, clocks.

Stored as plain ``.npy`` columns next to a shard's (or the token cache's) game arrays:
``PREFIX.meta.{column}.npy``. Per-game columns have one entry per game, in the games' order;
``clock`` has one entry per ply, game ``i``'s plies being ``clock[ply_offsets[i]:ply_offsets[i
+ 1]]`` (``ply_offsets`` from the token offsets: a game of ``n`` plies has ``2 + 3 n`` tokens).
Every column has a sentinel for "missing or unreadable" (``COLUMNS``).

Speed classes are Lichess's: estimated seconds = base + 40 x increment; under 29 ultrabullet,
under 179 bullet, under 479 blitz, under 1,499 rapid, else classical; ``TimeControl "-"`` is
correspondence.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from chesslm.data import gamearrays
from chesslm.data.gamearrays import save_npy

SPEEDS = ("ultrabullet", "bullet", "blitz", "rapid", "classical", "correspondence")
# upper bounds (exclusive) of the estimated duration in seconds, per timed speed class
SPEED_LIMITS = ((29, "ultrabullet"), (179, "bullet"), (479, "blitz"), (1499, "rapid"))
RESULTS = ("1-0", "0-1", "1/2-1/2")
TERMINATIONS = ("Normal", "Time forfeit", "Abandoned", "Rules infraction", "Unterminated")
BOT_WHITE, BOT_BLACK = 1, 2  # a BOT title (a Lichess bot account)
COMPUTER_WHITE, COMPUTER_BLACK = 4, 8  # the Lichess computer itself ("lichess AI level N")
BOT_TITLES = BOT_WHITE | BOT_BLACK
# the ``rated`` column's values (config/README.md, "rated"): why a game counts as rated or not
RATED_BY_EVENT, RATED_BY_RATING_DIFF, CASUAL, NO_EVENT, UNKNOWN = 1, 2, 0, -1, -2


@dataclass(frozen=True)
class Column:
    dtype: str
    missing: int | float
    doc: str
    per_ply: bool = False


COLUMNS: dict[str, Column] = {
    "white_elo": Column("int16", -1, "White's Elo (-1: missing or not a number)"),
    "black_elo": Column("int16", -1, "Black's Elo (-1: missing or not a number)"),
    "base_seconds": Column("int32", -1, "TimeControl base seconds (-1: none or unreadable)"),
    "increment_seconds": Column("int32", -1, "TimeControl increment seconds (-1: none)"),
    "speed": Column("int8", -1, "index into SPEEDS (-1: no readable TimeControl)"),
    "rated": Column(
        "int8",
        -1,
        "1 Event says rated, 2 RatingDiff tag only (arenas), 0 Event says casual/unrated,"
        " -1 no Event nor RatingDiff, -2 Event says neither, no RatingDiff",
    ),
    "result": Column("int8", -1, "index into RESULTS (-1: unknown, e.g. '*')"),
    "termination": Column("int8", -1, "index into TERMINATIONS (-1: missing or other)"),
    "utc_date": Column("int32", 0, "UTCDate (else Date) as YYYYMMDD (0: missing)"),
    "bot": Column(
        "int8", 0, "bit 1/2: White/Black has the BOT title; bit 4/8: is the Lichess computer"
    ),
    "clock": Column("float32", -1.0, "seconds left after each ply from [%clk] (-1: absent)", True),
}


def speed_class(base: int, increment: int) -> str:
    """Lichess's speed class of a timed game."""
    estimate = base + 40 * increment
    for limit, name in SPEED_LIMITS:
        if estimate < limit:
            return name
    return "classical"


def parse_time_control(text: str | None) -> tuple[int, int] | None:
    """``"base+inc"`` in seconds; None for ``"-"`` (correspondence), missing or unreadable."""
    if not text:
        return None
    base, plus, inc = text.strip().partition("+")
    if not plus or not base.isdigit() or not inc.isdigit():
        return None
    return int(base), int(inc)


def part_name(column: str) -> str:
    """A column's file part in a store (``PREFIX.meta.COLUMN.npy``: gamearrays.part_path)."""
    return f"meta.{column}"


def column_path(prefix: Path, column: str) -> Path:
    return gamearrays.part_path(prefix, part_name(column))


# every file of a store with its metadata: part name -> dtype (gamearrays.save_concat)
STORE: dict[str, object] = gamearrays.DTYPES | {
    part_name(name): column.dtype for name, column in COLUMNS.items()
}


def ply_offsets(token_offsets: np.ndarray) -> np.ndarray:
    """Offsets of each game's plies in a per-ply column, from its token offsets."""
    plies = (np.diff(np.asarray(token_offsets, dtype=np.int64)) - 2) // 3
    return np.concatenate([[0], np.cumsum(plies)]).astype(np.int64)


class Metadata:
    """The metadata columns of one set of games (memory-mapped, read-only)."""

    def __init__(self, prefix: Path, token_offsets: np.ndarray, *, mmap: bool = True) -> None:
        self.columns = {
            name: np.load(column_path(prefix, name), mmap_mode="r" if mmap else None)
            for name in COLUMNS
        }
        self.ply_offsets = ply_offsets(token_offsets)

    def __getitem__(self, column: str) -> np.ndarray:
        return self.columns[column]

    def clocks(self, game: int) -> np.ndarray:
        """Seconds left after each ply of a game (-1 where [%clk] is absent)."""
        return self.columns["clock"][self.ply_offsets[game] : self.ply_offsets[game + 1]]


# --- Reading the columns from a game's PGN headers (the converter's side of the contract) ---

PER_GAME = tuple(name for name, column in COLUMNS.items() if not column.per_ply)
_RATED = re.compile(r"\brated\b", re.IGNORECASE)
_CASUAL = re.compile(r"\b(casual|unrated)\b", re.IGNORECASE)
_COMPUTER = re.compile(r"lichess AI level \d+", re.IGNORECASE)
_RESULT_INDEX = {name: i for i, name in enumerate(RESULTS)}
_TERMINATION_INDEX = {name: i for i, name in enumerate(TERMINATIONS)}
_SPEED_INDEX = {name: i for i, name in enumerate(SPEEDS)}
_ELO_LIMIT = np.iinfo(np.int16).max
_INT32_LIMIT = np.iinfo(np.int32).max


@functools.lru_cache(maxsize=1 << 14)  # few distinct values in a month
def elo(text: str | None) -> int:
    """A rating, or -1 for missing, ``?`` or anything that is not a number that fits."""
    if text is None:
        return -1
    text = text.strip()
    if not text.isdigit() or not text.isascii() or int(text) > _ELO_LIMIT:
        return -1
    return int(text)


@functools.lru_cache(maxsize=1 << 14)  # few distinct values in a month
def date_number(text: str | None) -> int:
    """``YYYY.MM.DD`` as the number YYYYMMDD; 0 when missing or not all digits (``????``)."""
    if not text:
        return 0
    year, month, day = (text.strip().split(".") + ["", ""])[:3]
    if not (len(year) == 4 and len(month) == 2 and len(day) == 2):
        return 0
    digits = year + month + day
    return int(digits) if digits.isdigit() and digits.isascii() else 0


@functools.lru_cache(maxsize=1 << 14)  # few distinct values in a month
def is_rated(event: str | None, rating_diff: bool = False) -> int:
    """The ``rated`` column: why a game is rated, casual or unknown.

    Lichess writes ``WhiteRatingDiff``/``BlackRatingDiff`` only for rated games, but arena,
    swiss and team-battle games have the event's name as ``Event``, without the word
    "rated". So: rated if the Event has the word "rated" (1), else rated if a RatingDiff tag
    is present (2), else casual if the Event has "casual" or "unrated" (0), else unknown:
    no Event (-1) or an Event that says neither (-2; exports that drop RatingDiff).
    ``?`` (PGN's "unknown", what python-chess reports for a missing tag) counts as none.
    """
    if event is None or event.strip() in ("", "?"):
        return RATED_BY_RATING_DIFF if rating_diff else NO_EVENT
    if _RATED.search(event):
        return RATED_BY_EVENT
    if rating_diff:
        return RATED_BY_RATING_DIFF
    return CASUAL if _CASUAL.search(event) else UNKNOWN


def has_rating_diff(headers: dict[str, str]) -> bool:
    """Whether either RatingDiff tag has a value (Lichess writes them for rated games only)."""
    get = headers.get
    return _has_value(get("WhiteRatingDiff")) or _has_value(get("BlackRatingDiff"))


def _has_value(text: str | None) -> bool:
    return text is not None and text.strip() not in ("", "?")


def is_computer(name: str | None) -> bool:
    """Whether a player name is the Lichess computer (``lichess AI level N``, Elo ``?``)."""
    # not cached: player names are mostly distinct. Only a name with a space can match (an
    # account name has none), which spares the regex for nearly every game.
    return name is not None and " " in name and _COMPUTER.fullmatch(name.strip()) is not None


@functools.lru_cache(maxsize=1 << 14)  # few distinct values in a month
def speed_index(time_control: str | None) -> tuple[int, int, int]:
    """(base, increment, index into SPEEDS); ``-`` is correspondence, unreadable is -1s."""
    if time_control is not None and time_control.strip() == "-":
        return -1, -1, _SPEED_INDEX["correspondence"]
    parsed = parse_time_control(time_control)
    if parsed is None or max(parsed) > _INT32_LIMIT:
        return -1, -1, -1
    base, increment = parsed
    return base, increment, _SPEED_INDEX[speed_class(base, increment)]


def header_row(headers: dict[str, str]) -> tuple[int, ...]:
    """The per-game columns (in ``PER_GAME`` order) of one game's headers."""
    # the converter's hottest Python: once per game, so the checks are inline, not calls
    get = headers.get
    base, increment, speed = speed_index(get("TimeControl"))
    white, black = get("White"), get("Black")
    bot = (
        (BOT_WHITE if get("WhiteTitle", "").strip() == "BOT" else 0)
        | (BOT_BLACK if get("BlackTitle", "").strip() == "BOT" else 0)
        | (COMPUTER_WHITE if white and " " in white and is_computer(white) else 0)
        | (COMPUTER_BLACK if black and " " in black and is_computer(black) else 0)
    )
    diff = _has_value(get("WhiteRatingDiff")) or _has_value(get("BlackRatingDiff"))
    return (
        elo(get("WhiteElo")),
        elo(get("BlackElo")),
        base,
        increment,
        speed,
        is_rated(get("Event"), diff),
        _RESULT_INDEX.get(get("Result", "").strip(), -1),
        _TERMINATION_INDEX.get(get("Termination", "").strip(), -1),
        date_number(get("UTCDate")) or date_number(get("Date")),
        bot,
    )


def header_columns(rows: list[tuple[int, ...]]) -> dict[str, np.ndarray]:
    """The per-game column arrays of a list of ``header_row`` results."""
    table = np.array(rows, dtype=np.int64).reshape(len(rows), len(PER_GAME))
    return {name: table[:, k].astype(COLUMNS[name].dtype) for k, name in enumerate(PER_GAME)}


def clock_column(seconds: np.ndarray) -> np.ndarray:
    """Per-ply clocks as stored: float32 seconds, the sentinel where absent (NaN) or negative."""
    out = np.asarray(seconds, dtype=np.float32).copy()
    out[~(out >= 0)] = COLUMNS["clock"].missing
    return out


def empty_columns() -> dict[str, np.ndarray]:
    return {name: np.zeros(0, dtype=column.dtype) for name, column in COLUMNS.items()}


def save(prefix: Path, columns: dict[str, np.ndarray]) -> list[Path]:
    """Write every column under ``prefix`` (atomically each); returns the paths."""
    paths = []
    for name in COLUMNS:
        path = column_path(prefix, name)
        save_npy(path, np.ascontiguousarray(columns[name], dtype=COLUMNS[name].dtype))
        paths.append(path)
    return paths


def stored_names(columns: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Columns keyed by their part names in a store (``STORE``)."""
    return {part_name(name): columns[name] for name in COLUMNS}


def stored(prefix: Path, token_offsets: np.ndarray) -> dict[str, np.ndarray]:
    """The columns of one store (memory-mapped) keyed by part name, for ``STORE`` writes.

    A store written without metadata (games built in memory, e.g. by tests) gives its games
    every column at its sentinel (a broadcast view: no memory until written); a dataset's
    shards always have theirs (the integrity receipt covers them).
    """
    sizes = {True: int(ply_offsets(token_offsets)[-1]), False: len(token_offsets) - 1}
    out = {}
    for name, column in COLUMNS.items():
        path = column_path(prefix, name)
        if path.exists():
            out[part_name(name)] = np.load(path, mmap_mode="r")
        else:
            missing = np.array(column.missing, dtype=column.dtype)
            out[part_name(name)] = np.broadcast_to(missing, (sizes[column.per_ply],))
    return out


def file_names(prefix: str) -> list[str]:
    """The column files of one store, as names relative to where ``prefix`` is."""
    return [column_path(Path(prefix), name).as_posix() for name in COLUMNS]
