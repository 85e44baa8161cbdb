"""The model presets (``runs.*.model``): each one's size and context, without torch, so the
workflow can check a config against them at parse time (``gpt`` builds the network)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from chesslm.data import tokens


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


PRESETS: dict[str, GPTConfig] = {
    # GPT-2 small with a 128-token vocabulary: exactly 85,940,736 parameters.
    "baseline": GPTConfig(),
    # CPU sizes for the demo run and tests.
    "tiny": GPTConfig(n_layer=2, n_head=2, n_embd=64),
    "small": GPTConfig(n_layer=4, n_head=4, n_embd=128),
}
BASELINE_PARAMETERS = 85_940_736


def config_for(preset: str) -> GPTConfig:
    try:
        return PRESETS[preset]
    except KeyError:
        raise ValueError(f"unknown model preset {preset!r}; known: {sorted(PRESETS)}") from None
