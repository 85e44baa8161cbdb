"""What python-chess says a game's metadata columns and filter verdict are (the test oracle).

Written from the Lichess definitions independently of chesslm.data.metadata: headers via
``chess.pgn``, clocks via ``node.clock()``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import chess.pgn
import numpy as np

from chesslm.data import gamearrays, metadata, split

SPEED_ORDER = ["ultrabullet", "bullet", "blitz", "rapid", "classical", "correspondence"]


def _elo(text: str | None) -> int:
    return (
        int(text)
        if text is not None and re.fullmatch(r"[0-9]{1,5}", text) and int(text) <= 32767
        else -1
    )


def _speed(control: str | None) -> tuple[int, int, str | None]:
    if control == "-":
        return -1, -1, "correspondence"
    match = re.fullmatch(r"([0-9]+)\+([0-9]+)", control or "")
    if not match:
        return -1, -1, None
    base, inc = int(match[1]), int(match[2])
    seconds = base + 40 * inc
    if seconds < 29:
        name = "ultrabullet"
    elif seconds < 179:
        name = "bullet"
    elif seconds < 479:
        name = "blitz"
    elif seconds < 1499:
        name = "rapid"
    else:
        name = "classical"
    return base, inc, name


def _date(text: str | None) -> int:
    match = re.fullmatch(r"([0-9]{4})\.([0-9]{2})\.([0-9]{2})", text or "")
    return int(match[1] + match[2] + match[3]) if match else 0


def _rated(h: chess.pgn.Headers) -> int:
    """Rated by the word in Event (1), else by a RatingDiff tag (2), else casual by the word
    (0), else unknown: no Event (-1) or an Event that says neither (-2)."""
    event = h.get("Event")
    diff = any(h.get(t, "") not in ("", "?") for t in ("WhiteRatingDiff", "BlackRatingDiff"))
    if event in (None, "?", ""):
        return 2 if diff else -1
    if re.search(r"\brated\b", event, re.IGNORECASE):
        return 1
    if diff:
        return 2
    return 0 if re.search(r"\b(casual|unrated)\b", event, re.IGNORECASE) else -2


def _computer(name: str | None) -> bool:
    return bool(re.fullmatch(r"lichess AI level [0-9]+", name or "", re.IGNORECASE))


def expected(game: chess.pgn.Game) -> dict:
    """The metadata of one game, as python-chess reads it."""
    h = game.headers
    base, inc, speed = _speed(h.get("TimeControl"))
    results = ["1-0", "0-1", "1/2-1/2"]
    terminations = ["Normal", "Time forfeit", "Abandoned", "Rules infraction", "Unterminated"]
    clocks = []
    for node in game.mainline():
        clock = node.clock()
        clocks.append(-1.0 if clock is None else float(np.float32(clock)))
    return {
        "white_elo": _elo(h.get("WhiteElo")),
        "black_elo": _elo(h.get("BlackElo")),
        "base_seconds": base,
        "increment_seconds": inc,
        "speed": -1 if speed is None else SPEED_ORDER.index(speed),
        "speed_name": speed,
        "rated": _rated(h),
        "result": results.index(h["Result"]) if h.get("Result") in results else -1,
        "termination": terminations.index(h["Termination"])
        if h.get("Termination") in terminations
        else -1,
        "utc_date": _date(h.get("UTCDate")) or _date(h.get("Date")),
        "bot": (h.get("WhiteTitle") == "BOT")
        + 2 * (h.get("BlackTitle") == "BOT")
        + 4 * _computer(h.get("White"))
        + 8 * _computer(h.get("Black")),
        "clock": clocks,
    }


def reason(meta: dict, filters: dict) -> str:
    """The first Lichess filter a game fails, in the documented order, or ''."""
    if filters.get("speeds") is not None and meta["speed_name"] not in filters["speeds"]:
        return "speed"
    if filters.get("rated") and meta["rated"] not in (1, 2):
        return "unrated"
    low, high = filters.get("min_elo"), filters.get("max_elo")
    if low is not None or high is not None:
        for elo in (meta["white_elo"], meta["black_elo"]):
            if elo < 0 or (low is not None and elo < low) or (high is not None and elo > high):
                return "elo"
    if filters.get("exclude_bots") and meta["bot"] % 4:  # the BOT title, not the computer
        return "bot"
    names = ["Normal", "Time forfeit", "Abandoned", "Rules infraction", "Unterminated"]
    dropped = [names.index(t) for t in filters.get("exclude_terminations", [])]
    if meta["termination"] in dropped:
        return "termination"
    start, end = filters.get("date_from"), filters.get("date_to")
    if start is not None or end is not None:
        date = meta["utc_date"]
        if date == 0:
            return "date"
        if start is not None and date < int(start.replace("-", "")):
            return "date"
        if end is not None and date > int(end.replace("-", "")):
            return "date"
    return ""


def converted(out: Path) -> dict[str, dict]:
    """id -> metadata of every game of a converted dataset (all splits), read back."""
    manifest = json.loads((out / "manifest.json").read_text())
    games = {}
    for name in split.SPLITS:
        for prefix in manifest["shards"][name]:
            shard = gamearrays.Games(out / prefix)
            meta = metadata.Metadata(out / prefix, shard.offsets)
            for i in range(len(shard)):
                row = {c: int(meta[c][i]) for c in metadata.COLUMNS if c != "clock"}
                row["clock"] = [float(x) for x in meta.clocks(i)]
                games[shard.id(i)] = row
    return games
