"""A training checkpoint's contents and the resume identity: payload, RNG states, identity,
the identity check and its message, and the best-checkpoint policy (the file format, save,
verify and load, is ``chesslm.model.checkpoint``).

A training checkpoint is one dict of tensors and plain containers::

    model, optimizer, scheduler   state_dicts
    cursor, metrics               ``TrainState.state_dict()`` (chesslm.train.state): the
                                  position in the batch plan, history, best, totals, ...
    rng_by_rank                   every rank's python/torch/cuda RNG state
    identity                      what must be equal to resume (see ``identity``)
    lineage                       {"segment", "parent_sha256", "segment_start_step"}: which
                                  segment wrote it, resuming which checkpoint
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import torch

from chesslm.data import conditioning, tokens
from chesslm.files import lookup, sha256_file
from chesslm.model.checkpoint import CheckpointError
from chesslm.train.optim import GRAD_CLIP
from chesslm.train.settings import RunSettings
from chesslm.train.state import TrainState

IMPROVEMENT = 1e-4  # best.pt moves only when validation NLL drops by more than this
ROOT = Path(__file__).resolve().parents[2]  # the directory holding the chesslm package
# What shapes training, hashed into the run identity (globs under ROOT): editing one of these
# files refuses a resume. The tokenizer (chesslm/data/tokens.py) has its own entry.
TRAINING_CODE = (
    "chesslm/model/*.py",  # the network, its presets, the checkpoint format, the weights
    "chesslm/train/*.py",  # the loop: batches, loss, optimizer, validation, checkpoints, ...
    "chesslm/data/cache.py",  # the token cache the batches are read from
    "chesslm/data/metadata.py",  # the per-game columns the rating prefix is read from
    "chesslm/data/conditioning.py",  # the rating prefix's bins
    "chesslm/data/clocks.py",  # the clock rule the time inputs and think times are read by
)


def payload(
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    state: TrainState,
    rng_by_rank: list[dict[str, Any]],
    identity: dict[str, Any],
    lineage: dict[str, Any],
) -> dict[str, Any]:
    raw = getattr(model, "module", model)  # save the bare model, not the DDP wrapper
    return {
        "model": raw.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        **state.state_dict(),  # cursor, metrics
        "rng_by_rank": rng_by_rank,
        "identity": identity,
        "lineage": lineage,
    }


def rng_state(device: torch.device) -> dict[str, Any]:
    """This rank's RNG states, as plain containers and tensors (weights_only-loadable)."""
    version, internal, gauss = random.getstate()
    return {
        "python": {"version": version, "internal": list(internal), "gauss": gauss},
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
    }


def restore_rng(state: dict[str, Any], device: torch.device) -> None:
    py = state["python"]
    random.setstate((py["version"], tuple(py["internal"]), py["gauss"]))
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and state.get("cuda") is not None:
        torch.cuda.set_rng_state(state["cuda"], device)


def code_files() -> list[Path]:
    """The files ``TRAINING_CODE`` names, sorted by path.

    :raises FileNotFoundError: naming an entry that matches no file (so none drops out
        silently)."""
    found = set()
    for pattern in TRAINING_CODE:
        matched = list(ROOT.glob(pattern))
        if not matched:
            raise FileNotFoundError(f"TRAINING_CODE entry {pattern!r} matches no file in {ROOT}")
        found.update(matched)
    return sorted(found)


def code_hashes() -> dict[str, str]:
    """sha256 of every file of ``TRAINING_CODE``, by its path (``chesslm/train/segment.py``)."""
    return {p.relative_to(ROOT).as_posix(): sha256_file(p) for p in code_files()}


def identity(
    settings: RunSettings,
    *,
    model_config: dict[str, Any],
    parameters: int,
    dataset_fingerprint: str,
    receipt_sha256: str | None,
    world_size: int,
) -> dict[str, Any]:
    """Everything that must be equal for a checkpoint to be resumed (JSON-able): the data,
    tokenizer, model, training code, world and the settings' ``identity()`` (``settings``
    with its LR horizon resolved, so an implicit horizon is pinned too)."""
    device = settings.device
    return {
        "tokenizer": {
            "version": tokens.VERSION,
            "sha256": sha256_file(tokens.__file__),
            # how the inputs were built: the rating prefix's layout too
            "layout": conditioning.LAYOUT_VERSION[settings.conditioning],
        },
        "model": {"preset": settings.model, **model_config},
        "parameters": parameters,
        "dataset_fingerprint": dataset_fingerprint,
        "integrity_receipt_sha256": receipt_sha256,
        "training_code": code_hashes(),
        "world_size": world_size,
        "device": device,
        **settings.identity(),
        "optimizer": (
            f"AdamW betas .9/.95, weight decay .1 on matrices, clip {GRAD_CLIP} (error if"
            " non-finite)"
        ),
        "precision": (
            "FP32 weights/gradients/optimizer; BF16 autocast SDPA"
            if device == "cuda"
            else "FP32 weights/gradients/optimizer; FP32 compute"
        ),
        "sampling": "seeded length buckets, disjoint full games; right pad; zero-target dummy rank"
        " on partial global batches",
        "torch": str(torch.__version__),
    }


def identity_differences(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Dotted names of the identity entries that differ (one level deep)."""
    names = []
    for key in sorted(set(saved) | set(current)):
        a, b = saved.get(key), current.get(key)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            names += [f"{key}.{k}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        else:
            names.append(key)
    return names


def check_identity(
    saved: dict[str, Any], current: dict[str, Any], *, run_dir: Path | str | None = None
) -> None:
    """:raises CheckpointError: naming every identity key whose value changed; a change of
    the training code (a file of ``TRAINING_CODE``) names the files and what to do."""
    diff = identity_differences(saved, current)
    if not diff:
        return
    code = [name.split(".", 1)[1] for name in diff if name.startswith("training_code.")]
    detail = "; ".join(
        f"{name}: checkpoint {lookup(saved, name)!r} != now {lookup(current, name)!r}"
        for name in diff
        if not name.startswith("training_code.")
    )
    message = f"incompatible checkpoint identity, changed: {', '.join(diff)}"
    if detail:
        message += f" ({detail})"
    if code:
        where = f"remove {run_dir} to restart it" if run_dir else "remove its results to restart"
        modules = ", ".join(code)
        message += (
            f". The training code changed since this run's last checkpoint ({modules}); a run"
            " resumes only under the code it started with, so restore that code (e.g. git"
            f" stash or git checkout), or train under a new run name, or {where}"
        )
    raise CheckpointError(message)


def improved(nll: float, best: float) -> bool:
    """Whether a validation NLL is a new best (by more than IMPROVEMENT)."""
    return nll < best - IMPROVEMENT
