"""An export folder read back as this project's model, so that what a person downloaded plays
and analyses as the run's ``best.pt`` does: ``chesslm-uci --checkpoint DIR`` and
``chesslm-analyse --checkpoint DIR`` (``model_at`` takes either).

Nothing in the folder is read before every file ``SHA256SUMS`` lists matches it (``seal``:
a flipped byte in the weights would load silently otherwise). The network comes from
``config.json`` (GPT-2's sizes), its weights from ``model.safetensors``
(``gpt2.from_hf_state_dict``) and its input layout (rating prefix or none) from
``chess-tokenizer.json``; every weight must fit, strictly. A ``config.json`` that names the
outcome head (``gpt2.OUTCOME_KEY``) gives a model with it, its weights from
``outcome_head.safetensors``: the engine's score and wdl, analyse's win probability.
"""

from __future__ import annotations

from pathlib import Path

import safetensors.torch
import torch

from chesslm import files, seal
from chesslm.data import tokens
from chesslm.export import gpt2, vocabulary
from chesslm.export.folder import FILES
from chesslm.model import gpt, weights
from chesslm.model.checkpoint import CheckpointError
from chesslm.model.presets import GPTConfig

NEEDED = ("weights", "config", "tokenizer")  # FILES keys: the card is for people


def model_at(path: Path | str, device: str | torch.device) -> gpt.GPT:
    """The model of a checkpoint file or of an export folder, in eval mode on ``device``.

    :raises CheckpointError: in one line naming the file, if it cannot be read as either."""
    if Path(path).is_dir():
        return load_export(Path(path), device)
    return weights.load_model(path, device)


def export_config(folder: Path) -> GPTConfig:
    """The network of an export folder, from its ``config.json`` and ``chess-tokenizer.json``."""
    missing = [FILES[key] for key in NEEDED if not (folder / FILES[key]).is_file()]
    if missing:
        raise CheckpointError(
            f"{folder}: not an export folder (no {', '.join(missing)}): rule export writes"
            f" {', '.join(FILES[key] for key in NEEDED)}; or give a .pt checkpoint file"
        )
    command = seal.rebuild(folder / FILES["weights"], "export") + " (or download it again)"
    head = folder / FILES["outcome"]  # when there, sealed as the weights are
    timed = folder / FILES["human_time"]
    needed = [FILES[key] for key in NEEDED] + [p.name for p in (head, timed) if p.exists()]
    try:
        seal.check_sums(folder, needed, command, exact=True)
        hf = files.read_json(folder / FILES["config"])
        vocab = files.read_json(folder / FILES["tokenizer"])
    except (seal.SealError, files.UnreadableFileError) as error:
        raise CheckpointError(str(error)) from None
    for key, path in ((gpt2.OUTCOME_KEY, head), (gpt2.HUMAN_TIME_KEY, timed)):
        if key in hf and not path.exists():
            raise CheckpointError(f"{path}: no such file, which {FILES['config']} names ({key})")
    human = hf.get(gpt2.HUMAN_TIME_KEY) or {}
    if (vocab.get("format"), vocab.get("version")) != (vocabulary.FORMAT, tokens.VERSION):
        raise CheckpointError(
            f"{folder / FILES['tokenizer']}: format {vocab.get('format')!r} version"
            f" {vocab.get('version')!r}; this code reads {vocabulary.FORMAT} {tokens.VERSION}"
        )
    try:
        return GPTConfig(block_size=int(hf["n_positions"]), vocab_size=int(hf["vocab_size"]),
                         n_layer=int(hf["n_layer"]), n_head=int(hf["n_head"]),
                         n_embd=int(hf["n_embd"]), bias=True,
                         conditioning=str(vocab.get("conditioning", "none")),
                         outcome=gpt2.OUTCOME_KEY in hf,
                         time_inputs=bool(human.get("time_inputs")),
                         think_time=bool(human.get("think_time")))  # fmt: skip
    except (KeyError, TypeError, ValueError) as error:
        raise CheckpointError(
            f"{folder / FILES['config']}: {type(error).__name__}: {error}"
        ) from None


def read_tensors(path: Path) -> dict[str, torch.Tensor]:
    try:
        return safetensors.torch.load_file(path)
    except Exception as error:  # noqa: BLE001 - safetensors' errors, one line
        first = (str(error).strip().splitlines() or [""])[0]
        raise CheckpointError(f"{path}: not this export's weights ({first})") from None


def load_export(folder: Path, device: str | torch.device) -> gpt.GPT:
    weights.check_device(device)
    config = export_config(folder)
    path = folder / FILES["weights"]
    tensors = gpt2.from_hf_state_dict(read_tensors(path))
    if config.outcome:
        head = read_tensors(folder / FILES["outcome"])
        tensors.update({gpt2.OUTCOME + name: t for name, t in head.items()})
        path = folder / f"{{{FILES['weights']},{FILES['outcome']}}}"
    if config.time_inputs or config.think_time:
        tensors.update(gpt2.join_human_time(read_tensors(folder / FILES["human_time"])))
        path = folder / f"{{{FILES['weights']},...,{FILES['human_time']}}}"
    net = gpt.GPT(config)
    unfit = weights.misfit(net.state_dict(), tensors)
    if unfit:  # e.g. another preset's weights beside this config.json
        raise CheckpointError(f"{path}: not the weights of {FILES['config']}'s model: {unfit}")
    net.load_state_dict(tensors)
    return net.to(device).eval()
