"""The model presets (``runs.*.model``): each one's size and context, without torch, so the
workflow can check a config against them at parse time (``gpt`` builds the network)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from chesslm.data import tokens
from chesslm.model import human_time


@dataclass(frozen=True)
class GPTConfig:
    block_size: int = 1024  # context: the longest game the cache may hold, in tokens
    vocab_size: int = tokens.VOCAB_SIZE  # 128: already a multiple of 64, no padding needed
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    bias: bool = True  # GPT-2 has biases in Linears and LayerNorms
    # the input layout it reads (chesslm.data.conditioning.LAYOUTS): "elo" puts two rating
    # tokens before BOS; the network is the same, what feeds it builds other inputs
    conditioning: str = "none"
    # an outcome head (``runs.NAME.outcome``): n_embd -> len(OUTCOME_CLASSES) logits of the
    # game's result from the side to move, read at each position (chesslm.train.outcome)
    outcome: bool = False
    # the time inputs (``runs.NAME.time_inputs``): a learned embedding of the time control and
    # both clocks added at each position (chesslm.model.human_time)
    time_inputs: bool = False
    # a think-time head (``runs.NAME.think_time``): n_embd -> human_time.BINS logits of the
    # time the mover spends, read at each position (chesslm.train.human_time)
    think_time: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The config as a record; the fields added after runs existed (``LATER``) only when
        set, so that a run without them keeps the identity it had."""
        out = asdict(self)
        for name in LATER:
            if not out[name]:
                del out[name]
        return out


# fields a record omits when they are off (GPTConfig.to_dict): absent reads as off
LATER = ("time_inputs", "think_time")


PRESETS: dict[str, GPTConfig] = {
    # GPT-2 small with a 128-token vocabulary: exactly 85,940,736 parameters.
    "baseline": GPTConfig(),
    # CPU sizes for the demo run and tests.
    "tiny": GPTConfig(n_layer=2, n_head=2, n_embd=64),
    "small": GPTConfig(n_layer=4, n_head=4, n_embd=128),
}
BASELINE_PARAMETERS = 85_940_736
# the outcome head's classes, from the side to move (chesslm.train.outcome maps RESULTS)
OUTCOME_CLASSES = ("win", "draw", "loss")


def outcome_parameters(config: GPTConfig) -> int:
    """The outcome head's parameters (0 without it): one n_embd x 3 matrix and its bias.

    >>> outcome_parameters(GPTConfig(outcome=True)), outcome_parameters(GPTConfig())
    (2307, 0)
    """
    if not config.outcome:
        return 0
    return len(OUTCOME_CLASSES) * (config.n_embd + (1 if config.bias else 0))


def time_parameters(config: GPTConfig) -> int:
    """The time inputs' embedding and the think-time head's parameters (0 without them).

    >>> time_parameters(GPTConfig(time_inputs=True, think_time=True))
    153639
    """
    rows = human_time.ROWS * config.n_embd if config.time_inputs else 0
    head = human_time.BINS * (config.n_embd + (1 if config.bias else 0)) if config.think_time else 0
    return rows + head


def config_for(preset: str) -> GPTConfig:
    try:
        return PRESETS[preset]
    except KeyError:
        raise ValueError(f"unknown model preset {preset!r}; known: {sorted(PRESETS)}") from None
