"""match.compile (a GPU feature: the compiled two-part attention) checked on the CPU: the
compiled scorer scores as the eager one, with its graphs counted (about two minutes of
compilation on 2 cores, so out of the unit lane)."""

from __future__ import annotations

import torch

from chesslm.model import gpt
from chesslm.scorer import branched, scoring, split
from tests.playkit import (
    promotion_aside,
    sample_pgn_games,
    scorer_input,
)


def test_compiled_two_part_attention_scores_as_eager(net):
    """``match.compile`` compiles the two-part layer (one function for every block): batches
    of other shapes share a graph, one for batches with a promoting pair whose source is a
    branch token (however many) and one for those without (a batch of one game has its own),
    and score as the eager layer does."""
    pgn = sample_pgn_games(40)
    aside_ply, aside_moves = promotion_aside(pgn)
    inputs = [scorer_input(aside_moves[: aside_ply + 1])]
    inputs += [scorer_input(list(g.mainline_moves())[:n])
               for g, n in zip(pgn[:5], (9, 30, 17, 4, 25), strict=True)]  # fmt: skip
    torch.manual_seed(0)
    compiled = gpt.build("tiny").eval()
    compiled.load_state_dict(net.state_dict())
    scoring.compile_layers(compiled)
    counters = torch._dynamo.utils.counters
    frames, breaks = counters["frames"]["ok"], sum(counters["graph_break"].values())
    for group, graphs in (([0, 1], 1), ([2, 3, 4], 2), ([1, 4], 2), ([5], 3)):
        batch = branched.build_batch([inputs[i] for i in group], "cpu")
        eager, mine = scoring.score(net, batch, attention="split"), scoring.score(
            compiled, batch, attention="split")  # fmt: skip
        assert torch.allclose(eager.move_logp, mine.move_logp, atol=1e-5), group
        assert torch.equal(eager.rank, mine.rank)
        assert counters["frames"]["ok"] - frames == graphs, group
    assert sum(counters["graph_break"].values()) == breaks  # compiled whole
    assert net not in split._COMPILED  # the eager model stays eager
