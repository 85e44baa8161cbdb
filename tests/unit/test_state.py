"""TrainState: the cursor and metrics of a run, round-tripped and judged terminal."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from chesslm.train.state import PATIENCE, TrainState, terminal_status


def test_state_dict_round_trips_and_is_a_copy() -> None:
    state = TrainState(epoch=1, next_group=2, step=9, best_nll=1.5, best_step=8, segments=2)
    state.history.append({"step": 8, "validation": {"nll": 1.5}})
    saved = state.state_dict()
    assert saved["cursor"] == {"epoch": 1, "next_group": 2, "step": 9}
    assert saved["metrics"]["best_nll"] == 1.5 and "step" not in saved["metrics"]
    state.history.append({"step": 9})
    assert len(saved["metrics"]["history"]) == 1
    assert TrainState.from_state_dict(saved) == TrainState(
        epoch=1, next_group=2, step=9, best_nll=1.5, best_step=8, segments=2,
        history=[{"step": 8, "validation": {"nll": 1.5}}],
    )  # fmt: skip
    assert math.isinf(TrainState.from_state_dict({"cursor": {}, "metrics": {}}).best_nll)


def test_an_unknown_entry_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown entries hook"):
        TrainState.from_state_dict({"cursor": {"step": 1}, "metrics": {"hook": 1}})


def test_advance_and_next_epoch_move_the_cursor() -> None:
    state = TrainState()
    state.advance(epoch=0, next_group=1)
    state.advance(epoch=0, next_group=2)
    state.next_epoch()
    assert state.cursor() == {"epoch": 1, "next_group": 0, "step": 2}
    state.bad_checks = PATIENCE
    assert state.terminal_status(max_updates=None, epochs=5) == "early_stop_5_checks"


@pytest.mark.parametrize(
    ("bad", "step", "epoch", "max_updates", "want"),
    [
        (5, 1, 0, None, "early_stop_5_checks"),
        (5, 10, 3, 10, "early_stop_5_checks"),  # patience wins
        (0, 10, 0, 10, "max_updates"),
        (0, 9, 3, 10, "max_epochs"),
        (4, 9, 2, 10, None),
    ],
)
def test_terminal_status(bad, step, epoch, max_updates, want) -> None:
    got = terminal_status(bad_checks=bad, step=step, epoch=epoch, max_updates=max_updates, epochs=3)
    assert got == want


def test_state_imports_no_torch() -> None:
    code = "import sys, chesslm.train.state; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
