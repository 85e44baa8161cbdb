"""A checkpoint's model for inference: the play evaluation (and the comparison's scores through
it), the UCI engine and the export load it here, strictly (every weight of its preset, with its
shape), in eval mode.

The model's config carries the input layout it was trained with (``net.config.conditioning``:
``none`` or ``elo``, from the checkpoint's identity) so whatever feeds it builds the same
inputs (``chesslm.play.ratings``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from chesslm.data import conditioning
from chesslm.files import lookup
from chesslm.model import checkpoint, gpt


def model_of(payload: dict[str, Any], path: Path | str, device: str | torch.device) -> gpt.GPT:
    """The model of a loaded checkpoint (``path`` names it in errors).

    :raises checkpoint.CheckpointError: naming the file, if it has no preset, names no known
        conditioning or its weights do not fit its preset."""
    preset = lookup(payload, "identity.model.preset")
    if not isinstance(preset, str):
        raise checkpoint.CheckpointError(f"{path}: no model preset (identity.model.preset)")
    try:
        layout = conditioning.of_identity(payload["identity"])
    except ValueError as error:
        raise checkpoint.CheckpointError(f"{path}: {error}") from None
    try:
        net = gpt.build(preset, device=device, conditioning=layout)
        net.load_state_dict(payload["model"])
    except (ValueError, RuntimeError) as error:
        first = str(error).strip().splitlines()[0]
        message = f"{path}: weights unfit for preset {preset!r}: {first}"
        raise checkpoint.CheckpointError(message) from None
    return net.eval()


def load_model(path: Path | str, device: str | torch.device) -> gpt.GPT:
    """The checkpoint's model in eval mode on ``device``.

    :raises checkpoint.CheckpointError: naming the file, if it is not a chesslm checkpoint
        (``checkpoint.load``'s refusals) or its weights do not fit its own preset."""
    return model_of(checkpoint.load(path), path, device)
