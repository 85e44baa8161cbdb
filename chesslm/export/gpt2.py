"""This project's GPT (``chesslm.model.gpt``) as Hugging Face's GPT-2: its ``config.json``
and its weights under ``GPT2LMHeadModel``'s names.

The architectures are the same: learned positions, pre-LayerNorm blocks (eps 1e-5), fused
q/k/v projection split q, k, v and then into heads, attention scaled by 1/sqrt(head size),
a 4x MLP, a final LayerNorm and a head tied to the token embedding, no dropout at inference.
What differs is only how it is written down, and GPT-2's config expresses all of it:

* GPT-2 keeps its projections as ``Conv1D`` (weight ``(in, out)``); ``nn.Linear`` here is
  ``(out, in)``: each projection weight is transposed;
* ``nn.GELU()`` here is the exact (erf) GELU: ``activation_function: "gelu"``, not GPT-2's
  default ``gelu_new`` (the tanh approximation, up to ~1e-3 apart);
* a preset with ``bias=False`` has no biases in its Linears and LayerNorms, which GPT-2
  always has: they are written as zeros, which computes the same.

GPT-2 has no place for the outcome head (``GPTConfig.outcome``): it goes to a file of its own,
``outcome_head.safetensors`` (``OUTCOME_FILE``: ``weight`` (3, n_embd) and ``bias`` (3), the
``nn.Linear`` of win, draw, loss from the side to move, applied to ``GPT2Model``'s
``last_hidden_state``, which is after ``ln_f``), and ``config.json`` names it
(``OUTCOME_KEY``). Nor for human time (``GPTConfig.time_inputs``, ``think_time``): the time
inputs' embedding (``time_embedding``, (rows, n_embd): a position's four rows are summed into
its input embedding, which GPT-2 takes as ``inputs_embeds`` and adds its positions to) and the
think-time head (``think_head.weight``, ``think_head.bias``: a linear map of
``last_hidden_state`` to the bins) go to ``human_time.safetensors`` (``HUMAN_TIME_FILE``), and
``config.json``'s ``HUMAN_TIME_KEY`` names it with everything the card's code needs to build
the rows (the bins, the features, the rows per feature; ``chesslm.model.human_time``).
"""

from __future__ import annotations

import json
from typing import Any

import safetensors.torch
import torch

from chesslm.data import clocks, tokens
from chesslm.model import human_time
from chesslm.model.presets import OUTCOME_CLASSES, GPTConfig

PROJECTIONS = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")  # Linear here, Conv1D there
NORMS = ("ln_1", "ln_2")
TIED = "lm_head.weight"  # the same tensor as transformer.wte.weight; GPT-2 ties it on load
OUTCOME = "outcome_head."  # the outcome head's weights in GPT.state_dict()
OUTCOME_FILE = "outcome_head.safetensors"
OUTCOME_KEY = "chesslm_outcome_head"  # config.json: {"file": OUTCOME_FILE, "classes": [...]}
HUMAN_TIME = ("time_embedding.", "think_head.")  # human time's weights in GPT.state_dict()
HUMAN_TIME_FILE = "human_time.safetensors"
HUMAN_TIME_KEY = "chesslm_human_time"  # config.json: human_time_record()


def human_time_record(config: GPTConfig) -> dict[str, Any]:
    """config.json's entry for a model with human time: its file and how its rows are made."""
    return {
        "file": HUMAN_TIME_FILE,
        "time_inputs": config.time_inputs,
        "think_time": config.think_time,
        "bin_edges_seconds": list(human_time.EDGES),
        "features": list(human_time.FEATURES),
        "values_per_feature": human_time.VALUES,
        "no_time_row": human_time.NONE,
        "min_start_seconds": clocks.MIN_START_SECONDS,
    }


def hf_config(config: GPTConfig) -> dict[str, Any]:
    """``config.json`` of ``GPT2LMHeadModel`` for a model of ``config``."""
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": config.vocab_size,
        "n_positions": config.block_size,
        "n_embd": config.n_embd,
        "n_layer": config.n_layer,
        "n_head": config.n_head,
        "n_inner": 4 * config.n_embd,
        "activation_function": "gelu",
        "layer_norm_epsilon": 1e-5,  # torch.nn.LayerNorm's default, used here
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "initializer_range": 0.02,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False,
        "tie_word_embeddings": True,
        "bos_token_id": tokens.BOS,
        "eos_token_id": tokens.EOS,
        "pad_token_id": tokens.PAD,
        "torch_dtype": "float32",
        "use_cache": True,
        **({OUTCOME_KEY: {"file": OUTCOME_FILE, "classes": list(OUTCOME_CLASSES)}}
           if config.outcome else {}),
        **({HUMAN_TIME_KEY: human_time_record(config)}
           if config.time_inputs or config.think_time else {}),
    }  # fmt: skip


def hf_state_dict(state: dict[str, torch.Tensor], config: GPTConfig) -> dict[str, torch.Tensor]:
    """The weights of ``state`` (``GPT.state_dict()``) under GPT-2's names, FP32.

    :raises ValueError: naming the keys, if ``state`` has weights this mapping would drop or
        lacks ones it needs, or its head is not tied to its embedding."""
    used, out = {TIED}, {}

    def take(name: str, *, transpose: bool = False, bias_of: int | None = None) -> None:
        if name in state:
            t = state[name].t() if transpose else state[name]
        elif bias_of is not None and not config.bias:  # GPT-2 always has one: zero is the same
            t = torch.zeros(bias_of)
        else:
            raise ValueError(f"checkpoint model has no {name!r}")
        used.add(name)
        out[name] = t.detach().to(torch.float32).contiguous().clone()

    take("transformer.wte.weight")
    take("transformer.wpe.weight")
    for block in (f"transformer.h.{i}." for i in range(config.n_layer)):
        for norm in NORMS:
            take(f"{block}{norm}.weight")
            take(f"{block}{norm}.bias", bias_of=config.n_embd)
        for proj in PROJECTIONS:
            weight = state.get(f"{block}{proj}.weight")
            take(f"{block}{proj}.weight", transpose=True)
            take(f"{block}{proj}.bias", bias_of=None if weight is None else weight.size(0))
    take("transformer.ln_f.weight")
    take("transformer.ln_f.bias", bias_of=config.n_embd)
    extra = sorted(set(state) - used)
    if extra:
        raise ValueError(f"checkpoint model has weights GPT-2 has no place for: {extra}")
    if TIED in state and not torch.equal(state[TIED], state["transformer.wte.weight"]):
        raise ValueError(f"checkpoint model's {TIED} is not tied to transformer.wte.weight")
    return out


def split_outcome(
    state: dict[str, torch.Tensor], config: GPTConfig
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """``state`` without the outcome head, and the head's ``weight`` and ``bias`` FP32 (a zero
    bias where the preset has none: the same computation), empty without the head."""
    if not config.outcome:
        return state, {}  # hf_state_dict names any head weight found without the setting
    trunk = {k: v for k, v in state.items() if not k.startswith(OUTCOME)}
    head = {k[len(OUTCOME) :]: v for k, v in state.items() if k.startswith(OUTCOME)}
    if "weight" not in head:
        raise ValueError(f"checkpoint model has no {OUTCOME}weight")
    head.setdefault("bias", torch.zeros(head["weight"].size(0)))
    return trunk, {k: t.detach().to(torch.float32).contiguous().clone() for k, t in head.items()}


def split_human_time(
    state: dict[str, torch.Tensor], config: GPTConfig
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """``state`` without the time embedding and the think-time head, and those FP32 under
    their own names (``time_embedding``, ``think_head.weight``, ``think_head.bias``), empty
    without them."""
    if not (config.time_inputs or config.think_time):
        return state, {}
    trunk = {k: v for k, v in state.items() if not k.startswith(HUMAN_TIME)}
    part = {k.removesuffix(".weight") if k.startswith(HUMAN_TIME[0]) else k: v
            for k, v in state.items() if k.startswith(HUMAN_TIME)}  # fmt: skip
    return trunk, {k: t.detach().to(torch.float32).contiguous().clone() for k, t in part.items()}


def join_human_time(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``split_human_time``'s part back under ``GPT.state_dict()``'s names."""
    return {("time_embedding.weight" if k == "time_embedding" else k): t
            for k, t in tensors.items()}  # fmt: skip


def weights_bytes(tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> bytes:
    """``model.safetensors`` of ``tensors`` (safetensors' own writer; contiguous CPU copies),
    its header's keys sorted: the writer lists the metadata in a hash map's order, which
    differs from one process to the next, so equal weights gave unequal bytes (and digests)."""
    cpu = {name: t.detach().cpu().contiguous() for name, t in tensors.items()}
    raw = safetensors.torch.save(cpu, metadata=metadata)
    size = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + size])
    # every tensor's data_offsets are absolute, so the entries' order is free to change
    text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data stays 8-byte aligned, as the writer pads it
    return len(text).to_bytes(8, "little") + text + raw[8 + size :]


def from_hf_state_dict(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``hf_state_dict``'s inverse: GPT-2's names and layout back to ``GPT.state_dict()``'s
    (projections transposed back, the head tied to the embedding again); a model read this way
    has biases (GPT-2's, zero where the preset had none: the same computation)."""
    out = {}
    for name, t in tensors.items():
        projection = name.endswith(tuple(f"{p}.weight" for p in PROJECTIONS))
        out[name] = t.t().contiguous() if projection else t
    if "transformer.wte.weight" in out:
        out[TIED] = out["transformer.wte.weight"]
    return out
