"""The scorer on CUDA (skipped without a device): split, dense and flex attention against
the oracle; the pipeline against one batch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from chesslm.model import gpt
from chesslm.scorer import branched, scoring
from chesslm.scorer.settings import PlaySettings
from tests.playkit import (
    sample_pgn_games,
    scorer_input,
)

typed = PlaySettings.from_dict  # rule play's script types the play settings so


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("attention", scoring.ATTENTION)
def test_cuda_pipeline_matches_one_batch(attention):
    """On the GPU the pipeline (pinned buffers, non-blocking copies, one sync per batch, the
    next batch prepared in a thread) yields each batch's own results, not a neighbour's."""
    torch.manual_seed(0)
    net = gpt.build("tiny", device="cuda").eval()
    inputs = [scorer_input(list(g.mainline_moves())[:n]) for g, n in zip(sample_pgn_games(6),
              (30, 7, 22, 15, 40, 11), strict=True)]  # fmt: skip
    lengths = branched.branched_lengths(inputs)
    batches = list(scoring.score_many(net, inputs, batch_tokens=int(lengths.max()) * 2,
                                      device="cuda", attention=attention, pad_to=16))  # fmt: skip
    assert len(batches) > 1
    for group, batch, host in batches:
        for b, g in enumerate(group):
            alone = scoring.score(net, branched.build_batch([inputs[g]], "cuda"))
            rows = batch.ply_game == b
            assert host["n_legal"][rows].tolist() == alone.n_legal.tolist()
            assert np.allclose(host["played_logp"][rows], alone.played_logp.cpu(), atol=3e-2)
