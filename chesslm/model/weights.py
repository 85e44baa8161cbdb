"""A checkpoint's model for inference: the play evaluation (and the comparison's scores through
it), the UCI engine and the export load it here, strictly (every weight of its preset, with its
shape), in eval mode.

The model's config carries the input layout it was trained with (``net.config.conditioning``:
``none`` or ``elo``, from the checkpoint's identity) so whatever feeds it builds the same
inputs (``chesslm.scorer.ratings``), and whether it has the outcome head (``net.config.outcome``,
``identity.model.outcome``; absent in checkpoints from before it: no head), the time inputs
and the think-time head (``time_inputs``, ``think_time``: likewise)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from chesslm.data import conditioning
from chesslm.files import lookup, sha256_file
from chesslm.model import checkpoint, gpt


def check_device(device: str | torch.device) -> None:
    """A CUDA device where torch sees none, refused in one line (torch's own error comes from
    deep in a load, as a traceback; the plan refuses it where jobs run on its machine, a job
    on a cluster node without CUDA meets it here).

    :raises ValueError: naming the device and the keys that set it."""
    if torch.device(device).type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"device {device}: torch sees no CUDA device on this machine; run the job where"
            " one is, or set the run's play.device (or device) to cpu"
        )


def model_of(payload: dict[str, Any], path: Path | str, device: str | torch.device) -> gpt.GPT:
    """The model of a loaded checkpoint (``path`` names it in errors).

    :raises checkpoint.CheckpointError: naming the file, if it has no preset, names no known
        conditioning or its weights do not fit its preset.
    :raises ValueError: a CUDA ``device`` on a machine without one (``check_device``)."""
    check_device(device)
    preset = lookup(payload, "identity.model.preset")
    if not isinstance(preset, str):
        raise checkpoint.CheckpointError(f"{path}: no model preset (identity.model.preset)")
    try:
        layout = conditioning.of_identity(payload["identity"])
    except ValueError as error:
        raise checkpoint.CheckpointError(f"{path}: {error}") from None
    parts = {}
    for name in ("outcome", "time_inputs", "think_time"):  # absent: from before the part
        value = lookup(payload, f"identity.model.{name}")
        if value not in (None, True, False):
            raise checkpoint.CheckpointError(f"{path}: identity.model.{name} is {value!r}")
        parts[name] = bool(value)
    try:
        net = gpt.build(preset, device=device, conditioning=layout, **parts)
    except ValueError as error:
        raise checkpoint.CheckpointError(f"{path}: {error}") from None
    unfit = misfit(net.state_dict(), payload["model"])
    if unfit:
        raise checkpoint.CheckpointError(f"{path}: weights unfit for preset {preset!r}: {unfit}")
    net.load_state_dict(payload["model"])
    bad = [name for name, p in net.named_parameters() if not torch.isfinite(p).all()]
    if bad:
        raise checkpoint.CheckpointError(
            f"{path}: {len(bad)} of the model's weight tensors hold NaN or infinite values"
            f" (first: {bad[0]}): nothing it would play or score could be trusted"
        )
    return net.eval()


def misfit(expected: dict[str, torch.Tensor], given: Any) -> str | None:
    """Why ``given`` is not a state dict of the model that has ``expected``, in one line: the
    first tensor (in the model's order) that is missing or of another shape, with both
    shapes, and how many differ (torch's own error lists every key over many lines); None if
    it fits."""
    if not isinstance(given, dict) or not all(isinstance(t, torch.Tensor) for t in given.values()):
        return f"its model is a {type(given).__name__}, not a table of weight tensors"
    missing = [k for k in expected if k not in given]
    extra = [k for k in given if k not in expected]
    shaped = [k for k in expected if k in given and given[k].shape != expected[k].shape]
    wrong = [k for k in expected if k in missing or k in shaped]
    if wrong:
        name = wrong[0]
        shape = list(expected[name].shape)
        found = f"{list(given[name].shape)}" if name in given else "no such tensor"
        first = f"first {name}: {found} in the file, {shape} in the model"
    elif extra:
        first = f"first unexpected: {extra[0]} {list(given[extra[0]].shape)}"
    else:
        return None
    counts = f"{len(shaped)} of another shape, {len(missing)} missing, {len(extra)} unexpected"
    return f"{first} ({counts})"


def load_model(path: Path | str, device: str | torch.device) -> gpt.GPT:
    """The checkpoint's model in eval mode on ``device``.

    :raises checkpoint.CheckpointError: naming the file, if it is not a chesslm checkpoint
        (``checkpoint.load``'s refusals) or its weights do not fit its own preset."""
    return model_of(checkpoint.load(path), path, device)


def load_with_record(
    path: Path | str, device: str | torch.device
) -> tuple[gpt.GPT, dict[str, Any]]:
    """The checkpoint's model (as ``load_model``) and what evaluation records say of it: the
    file and its sha256, preset, step, best validation NLL and input layout."""
    payload = checkpoint.load(path)
    net = model_of(payload, path, device)
    info = {
        "checkpoint": str(path),
        "checkpoint_sha256": sha256_file(path),
        "preset": payload["identity"]["model"]["preset"],
        "step": payload["cursor"]["step"],
        "best_nll": payload["metrics"].get("best_nll"),
        "conditioning": net.config.conditioning,
    }
    return net, info
