"""The play evaluation's work in progress, ``results/{run}/play/state/``: finished
move-matching chunks and the games against each finished anchor.

It is resumed only after a job that stopped by a part's time budget (``play.PART.seconds``),
with the same checkpoint and settings (threads and the budgets aside: they change how fast or
how far, not the results). Anything else empties it before the job starts: a finished
evaluation removes it at its end, and a changed setting or a killed job starts afresh, so
``--forcerun play`` re-measures instead of reading back the last job's numbers.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

from chesslm import files

logger = logging.getLogger(__name__)

STOPPED = "stopped.json"
"""Written into the state when a part stopped by its time budget: the next job resumes."""
IDENTITY = "identity.json"


def identity(
    model_info: dict[str, Any], settings: dict[str, Any], caches: dict[str, Path], device: str
) -> dict[str, Any]:
    """What the kept work must have been done with."""
    return {
        "checkpoint_sha256": model_info["checkpoint_sha256"],
        "settings": {
            k: {f: x for f, x in v.items() if f != "seconds"} if isinstance(v, dict) else v
            for k, v in settings.items()
            if k != "threads"
        },
        "caches": {k: str(v) for k, v in caches.items()},
        "device": device,
    }


def open_state(play_dir: Path, wanted: dict[str, Any]) -> Path:
    """The state folder: the kept work of a budget-stopped job with identity ``wanted``, else
    an empty one."""
    state = play_dir / "state"
    if state.exists():
        try:
            same = files.read_json(state / IDENTITY) == wanted
        except (OSError, ValueError):
            same = False
        if same and (state / STOPPED).exists():
            logger.info("%s: resuming the work of a job stopped by its time budget", state)
        else:
            why = "the checkpoint or settings changed" if not same else "no budget stop to resume"
            logger.info("%s: %s; starting afresh", state, why)
            shutil.rmtree(state)
    state.mkdir(parents=True, exist_ok=True)
    if not (state / IDENTITY).exists():
        files.write_json_atomic(state / IDENTITY, wanted)
    return state


def stopped(record: Any) -> bool:
    """A part's record that holds ``complete: false`` anywhere: stopped by its budget.

    >>> stopped({"datasets": {"a": {"complete": True}, "b": {"complete": False}}})
    True
    >>> stopped({"modes": {"greedy": {"complete": True}}, "complete": True})
    False
    """
    if isinstance(record, dict):
        return record.get("complete") is False or any(map(stopped, record.values()))
    return isinstance(record, list) and any(map(stopped, record))


def end(state: Path, parts_stopped: list[str]) -> None:
    """At a job's end: keep the state for the next job if a part stopped by its budget
    (naming the parts), else remove it."""
    if parts_stopped:
        files.write_json_atomic(state / STOPPED, {"parts": parts_stopped})
        logger.info("stopped by the time budget: %s; the next play job resumes them",
                    ", ".join(parts_stopped))  # fmt: skip
    else:
        shutil.rmtree(state)
