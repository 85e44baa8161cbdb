"""match.compile (a GPU feature: the compiled two-part attention) checked on the CPU: the
compiled scorer scores as the eager one, with its graphs counted (about a minute of
compilation on 2 cores, so out of the unit lane).

The check runs in a child process (``python -m tests.gpu.test_scorer_compiled``) with an
Inductor cache of its own: compiled C++ that dies takes the interpreter with it, and in a
pytest-xdist worker that once cost CI its whole run (a worker replaced under ``--dist
loadgroup`` waits forever, pytest-xdist#1323); here it is one failed test with the child's
signal and output, and no kernel built by another process or torch is loaded."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import torch

from chesslm.model import gpt
from chesslm.scorer import branched, scoring, split
from tests.helpers import ROOT
from tests.playkit import (
    promotion_aside,
    sample_pgn_games,
    scorer_input,
)


def test_compiled_two_part_attention_scores_as_eager(tmp_path: Path) -> None:
    """``match.compile`` compiles the two-part layer (one function for every block): batches
    of other shapes share a graph, one for batches with a promoting pair whose source is a
    branch token (however many) and one for those without (a batch of one game has its own),
    and score as the eager layer does (``check``, in a child process)."""
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    done = subprocess.run(
        [sys.executable, "-m", "tests.gpu.test_scorer_compiled"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    how = (f"killed by {signal.Signals(-done.returncode).name}" if done.returncode < 0
           else f"exit status {done.returncode}")  # fmt: skip
    assert done.returncode == 0, f"{how}\n{done.stdout[-3000:]}{done.stderr[-6000:]}"
    assert done.stdout.strip().endswith("compiled scorer: 4 batches as eager")


def check() -> None:
    """The compiled tiny model against the eager one, batch by batch, its graphs counted."""
    pgn = sample_pgn_games(40)
    aside_ply, aside_moves = promotion_aside(pgn)
    inputs = [scorer_input(aside_moves[: aside_ply + 1])]
    inputs += [scorer_input(list(g.mainline_moves())[:n])
               for g, n in zip(pgn[:5], (9, 30, 17, 4, 25), strict=True)]  # fmt: skip
    torch.manual_seed(0)
    net = gpt.build("tiny").eval()
    compiled = gpt.build("tiny").eval()
    compiled.load_state_dict(net.state_dict())
    scoring.compile_layers(compiled)
    counters = torch._dynamo.utils.counters
    frames, breaks = counters["frames"]["ok"], sum(counters["graph_break"].values())
    groups = (([0, 1], 1), ([2, 3, 4], 2), ([1, 4], 2), ([5], 3))
    for group, graphs in groups:
        batch = branched.build_batch([inputs[i] for i in group], "cpu")
        eager, mine = scoring.score(net, batch, attention="split"), scoring.score(
            compiled, batch, attention="split")  # fmt: skip
        assert torch.allclose(eager.move_logp, mine.move_logp, atol=1e-5), group
        assert torch.equal(eager.rank, mine.rank)
        assert counters["frames"]["ok"] - frames == graphs, group
    assert sum(counters["graph_break"].values()) == breaks  # compiled whole
    assert net not in split._COMPILED  # the eager model stays eager
    print(f"compiled scorer: {len(groups)} batches as eager")


if __name__ == "__main__":  # the test's child process
    check()
