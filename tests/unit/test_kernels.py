"""Play's passes attend without cuDNN's attention (``chesslm.scorer.kernels``): on an H200 it
builds a plan for every new shape, and play's passes rarely repeat one. Read through the
flags that ``sdpa_kernel`` sets, at every layer's attention, on the CPU as on a GPU."""

from __future__ import annotations

import chess
import pytest
import torch

from chesslm.data import tokens
from chesslm.ladder import games
from chesslm.model import gpt
from chesslm.scorer import decode, kernels


@pytest.fixture(scope="module")
def net() -> gpt.GPT:
    torch.manual_seed(0)
    return gpt.build("tiny").eval()


@pytest.fixture
def seen(net):  # noqa: ANN001, ANN201
    """Whether cuDNN's attention was allowed, at each layer's attention projection."""
    flags: list[bool] = []
    hook = lambda module, args: flags.append(torch.backends.cuda.cudnn_sdp_enabled())  # noqa: E731
    handles = [b.attn.c_attn.register_forward_pre_hook(hook) for b in net.transformer.h]
    yield flags
    for h in handles:
        h.remove()
    kernels.choose("play")


def _score(net: gpt.GPT) -> None:
    board = chess.Board()
    board.push_san("e4")
    games.best_moves(net, [board, chess.Board()])


def test_scoring_passes_attend_without_cudnn_and_leave_the_flags_as_they_were(net, seen):
    assert torch.backends.cuda.cudnn_sdp_enabled()  # torch's default, outside play's passes
    _score(net)
    assert seen == [False] * net.config.n_layer
    assert torch.backends.cuda.cudnn_sdp_enabled()


def test_the_decoders_steps_and_branches_attend_without_cudnn(net, seen):
    decoder = decode.Decoder(net, 2, 16)
    decoder.step(torch.full((2, 3), tokens.BOS), 0)
    mask = torch.ones(2, 1, 2, 5, dtype=torch.bool)
    decoder.branch(torch.tensor([0, 1]), torch.zeros(2, 2, dtype=torch.long),
                   torch.tensor([[3, 4], [3, 4]]), mask)  # fmt: skip
    assert seen == [False] * (2 * net.config.n_layer)


def test_torch_s_own_choice_is_left_alone_when_asked_for(net, seen):
    kernels.choose("torch")
    _score(net)
    assert seen == [True] * net.config.n_layer
    kernels.choose("efficient")  # one backend alone: the others off inside play's passes
    with kernels.play_kernels():
        assert torch.backends.cuda.mem_efficient_sdp_enabled()
        assert not torch.backends.cuda.math_sdp_enabled()
        assert not torch.backends.cuda.cudnn_sdp_enabled()
    assert torch.backends.cuda.math_sdp_enabled()


def test_an_unknown_choice_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"attention kernels must be one of .*'play'.*not 'fast'"):
        kernels.choose("fast")
