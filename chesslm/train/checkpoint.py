"""The checkpoint format: payload, atomic save, safe load, identity, best policy.

A checkpoint is one dict of tensors and plain containers::

    model, optimizer, scheduler   state_dicts
    cursor, metrics               ``TrainState.state_dict()`` (chesslm.train.state): the
                                  position in the batch plan, history, best, totals, ...
    rng_by_rank                   every rank's python/torch/cuda RNG state
    identity                      what must be equal to resume (see ``identity``)
    lineage                       {"segment", "parent_sha256", "segment_start_step"}: which
                                  segment wrote it, resuming which checkpoint

On disk a checkpoint is one line of header, ``chesslm-checkpoint-v1 sha256=<hex>\n``, followed
by the ``torch.save`` bytes, whose sha256 the header holds. The digest travels in the same file,
so the one atomic rename that publishes a checkpoint publishes its digest too: a kill at any
moment leaves either the old verified file or the new one. ``load`` checks the digest before
anything is unpickled, so a damaged file is reported as corruption, never fed to ``torch.load``;
and ``torch.load(weights_only=True)`` then refuses a file that would unpickle code or arbitrary
objects, so nothing in it runs.
"""

from __future__ import annotations

import hashlib
import io
import logging
import pickle
import random
from pathlib import Path
from typing import IO, Any

import torch

from chesslm import files
from chesslm.data import conditioning, tokens
from chesslm.files import lookup, sha256_file
from chesslm.train.optim import GRAD_CLIP
from chesslm.train.settings import RunSettings
from chesslm.train.state import TrainState

logger = logging.getLogger(__name__)

IMPROVEMENT = 1e-4  # best.pt moves only when validation NLL drops by more than this
# every module of chesslm.train enters the run identity: editing one refuses a resume
TRAINING_CODE = Path(__file__).resolve().parent


class CheckpointError(ValueError):
    """A checkpoint that cannot or must not be loaded."""


HEADER_PREFIX = b"chesslm-checkpoint-v1 sha256="
HEADER_SIZE = len(HEADER_PREFIX) + 64 + 1  # prefix, hex digest, newline
DAMAGED_ADVICE = (
    "do not resume from it; restore an intact copy, or remove the run directory to train again"
)


class _HashingWriter:
    """A write-only file that hashes what ``torch.save`` streams through it."""

    def __init__(self, fh: IO[bytes]) -> None:
        self.fh, self.digest = fh, hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        return self.fh.write(data)

    def flush(self) -> None:
        self.fh.flush()


class _Body(io.RawIOBase):
    """The checkpoint file seen from the end of its header on: what ``torch.load`` reads."""

    def __init__(self, fh: IO[bytes]) -> None:
        self.fh = fh
        fh.seek(HEADER_SIZE)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        return self.fh.readinto(buffer)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        offset += HEADER_SIZE if whence == io.SEEK_SET else 0
        return self.fh.seek(offset, whence) - HEADER_SIZE

    def tell(self) -> int:
        return self.fh.tell() - HEADER_SIZE


def save(path: Path, payload: dict[str, Any]) -> str:
    """Write ``payload`` and its digest atomically, in one file; returns the file's sha256."""

    def write(fh: IO[bytes]) -> None:
        fh.write(b"\0" * HEADER_SIZE)  # the digest is known only after the body
        body = _HashingWriter(fh)
        torch.save(payload, body)
        fh.seek(0)
        fh.write(HEADER_PREFIX + body.digest.hexdigest().encode() + b"\n")
        fh.seek(0, io.SEEK_END)

    files.write_atomic(path, write)
    return sha256_file(path)


def digest(path: Path | str) -> str:
    """The sha256 written in a checkpoint's header (of its body), read without the body: two
    files with the same digest that both ``verify`` hold the same checkpoint."""
    with open(path, "rb") as fh:
        header = fh.read(HEADER_SIZE)
    return header[len(HEADER_PREFIX) : -1].decode(errors="replace")


def verify(path: Path | str) -> None:
    """Check a checkpoint's body against the digest in its header, unpickling nothing.

    :raises CheckpointError: naming the file, if it is missing, torn, damaged or has no header.
    """
    try:
        with open(path, "rb") as fh:
            header = fh.read(HEADER_SIZE)
            digest = hashlib.sha256()
            while chunk := fh.read(1 << 20):
                digest.update(chunk)
    except OSError as error:
        raise CheckpointError(f"{path}: not a readable checkpoint ({error.strerror})") from None
    if not header.startswith(HEADER_PREFIX) or not header.endswith(b"\n"):
        if header.startswith(b"PK\x03\x04"):
            raise CheckpointError(
                f"{path}: a bare torch.save file without the chesslm digest header (written by an"
                " older chesslm or by another program), so it cannot be verified; refused"
            )
        raise CheckpointError(
            f"{path}: corrupt checkpoint: its digest header is damaged or missing; "
            + DAMAGED_ADVICE
        )
    written = header[len(HEADER_PREFIX) : -1]
    if digest.hexdigest().encode() != written:
        raise CheckpointError(
            f"{path}: corrupt checkpoint: the sha256 of its contents does not match the digest"
            f" written with it (damaged since it was saved); {DAMAGED_ADVICE}"
        )


def _refused_part(error: pickle.UnpicklingError) -> str:
    """What torch's weights_only unpickler refused (its line naming the GLOBAL, first sentence),
    without its advice to load the file with ``weights_only=False``, which would run it.

    >>> _refused_part(pickle.UnpicklingError("Weights only load failed. Re-running `torch.load`"
    ...     " with `weights_only` set to `False` will likely succeed.\\n\\nUnsupported global:"
    ...     " GLOBAL x.y was not an allowed global by default. Please use add_safe_globals"))
    'Unsupported global: GLOBAL x.y was not an allowed global by default'
    """
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    named = [line for line in lines if "GLOBAL" in line or "nsupported" in line]
    if not named:  # a message of another shape: its lines that do not mention weights_only
        named = [line for line in lines if "weights_only" not in line] or [type(error).__name__]
    return named[0].split(". ")[0].rstrip(".")


def load(path: Path | str) -> dict[str, Any]:
    """Verify a checkpoint (``verify``), then read it onto the CPU without unpickling anything
    but tensors and containers.

    :raises CheckpointError: if the file is damaged or unreadable or holds pickled objects or code.
    """
    verify(path)
    try:
        with open(path, "rb") as fh:
            payload = torch.load(_Body(fh), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        raise CheckpointError(
            f"{path}: refused: the checkpoint holds pickled objects that weights_only=True does not"
            f" allow (nothing was executed): {_refused_part(error)}"
        ) from None
    except Exception as error:  # verified bytes that torch cannot read: not ours, or a bug
        raise CheckpointError(f"{path}: not a readable checkpoint ({error!r})") from None
    if not isinstance(payload, dict) or not {"model", "cursor", "identity"} <= set(payload):
        raise CheckpointError(f"{path}: not a chesslm checkpoint (keys missing)")
    return payload


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


def code_hashes() -> dict[str, str]:
    """sha256 of every module of chesslm.train, by file name."""
    return {p.name: sha256_file(p) for p in sorted(TRAINING_CODE.glob("*.py"))}


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
    the training code (any module of chesslm.train) names the modules and what to do."""
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
        modules = ", ".join(f"chesslm/train/{name}" for name in code)
        message += (
            f". The training code changed since this run's last checkpoint ({modules}); a run"
            " resumes only under the code it started with, so restore that code (e.g. git"
            f" stash or git checkout), or train under a new run name, or {where}"
        )
    raise CheckpointError(message)


def improved(nll: float, best: float) -> bool:
    """Whether a validation NLL is a new best (by more than IMPROVEMENT)."""
    return nll < best - IMPROVEMENT
