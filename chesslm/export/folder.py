"""The export folder of a run (rule export): ``model.safetensors`` and ``config.json`` (the
Hugging Face GPT-2 layout, ``chesslm.export.gpt2``), ``chess-tokenizer.json``
(``chesslm.export.vocabulary``), ``README.md`` (``chesslm.export.card``), for a checkpoint
with the outcome head ``outcome_head.safetensors`` (``gpt2.OUTCOME_FILE``, which config.json
names), for one with human time ``human_time.safetensors`` (``gpt2.HUMAN_TIME_FILE``, named
likewise) and ``SHA256SUMS``
(``chesslm.seal``: every other file's sha256, as ``sha256sum -c`` reads it; ``load`` checks it
before it reads a weight). Writing needs safetensors (a core dependency), not transformers;
each file is written atomically, the weights with sorted metadata, so equal weights give equal
bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from chesslm import files, seal
from chesslm.data import conditioning
from chesslm.export import card, gpt2, vocabulary
from chesslm.model import checkpoint
from chesslm.model.presets import OUTCOME_CLASSES
from chesslm.model.weights import model_of
from chesslm.record.play_records import read_play

FILES = {
    "weights": "model.safetensors",
    "config": "config.json",
    "tokenizer": "chess-tokenizer.json",
    "card": "README.md",
    "outcome": gpt2.OUTCOME_FILE,  # only with the outcome head
    "human_time": gpt2.HUMAN_TIME_FILE,  # only with the time inputs or the think-time head
    "sums": seal.SUMS,
}
# the files only some models have: in the folder and in SHA256SUMS, never a rule's output
OPTIONAL = ("outcome", "human_time")


@dataclass
class Sources:
    """A run's files the export reads."""

    run: str
    checkpoint: Path  # results/{run}/train/best.pt
    results: Path  # results/{run}/results.json
    manifest: Path  # the dataset's manifest.json
    receipt: Path  # the dataset's integrity-receipt.json
    play: dict[str, Path] = field(default_factory=dict)  # the play records, by stem


def export(sources: Sources, out_dir: Path) -> dict[str, Path]:
    """Write the export of ``sources`` into ``out_dir``; returns the files by ``FILES`` key.

    :raises ValueError: naming the file, if the checkpoint or a record cannot be read."""
    payload = checkpoint.load(sources.checkpoint)
    net = model_of(payload, str(sources.checkpoint), "cpu")  # strict: every weight, its shape
    trunk, head = gpt2.split_outcome(net.state_dict(), net.config)
    trunk, timed = gpt2.split_human_time(trunk, net.config)
    tensors = gpt2.hf_state_dict(trunk, net.config)
    sha256 = files.sha256_file(sources.checkpoint)
    facts = card.Facts(
        run=sources.run,
        checkpoint={
            "path": str(sources.checkpoint),
            "sha256": sha256,
            "step": payload["cursor"].get("step"),
            "best_nll": payload.get("metrics", {}).get("best_nll"),
        },
        identity=payload["identity"],
        manifest=files.read_json(sources.manifest),
        receipt=files.read_json(sources.receipt),
        results=files.read_json(sources.results),
        play=read_play(sources.play.values()),
        outcome=bool(head),
        time_inputs=net.config.time_inputs,
        think_time=net.config.think_time,
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    present = {"outcome": bool(head), "human_time": bool(timed)}  # OPTIONAL's keys
    paths = {key: out_dir / name for key, name in FILES.items() if present.get(key, True)}
    files.write_json_atomic(paths["config"], gpt2.hf_config(net.config))
    layout = conditioning.of_identity(payload["identity"])
    files.write_json_atomic(paths["tokenizer"], vocabulary.record(layout))
    metadata = {"format": "pt", "chesslm_run": sources.run, "checkpoint_sha256": sha256}
    weights = gpt2.weights_bytes(tensors, metadata)
    files.write_atomic(paths["weights"], lambda fh: fh.write(weights))
    if head:
        head_bytes = gpt2.weights_bytes(head, {**metadata, "classes": ",".join(OUTCOME_CLASSES)})
        files.write_atomic(paths["outcome"], lambda fh: fh.write(head_bytes))
    elif (out_dir / FILES["outcome"]).exists():  # an earlier export's head: not this model's
        (out_dir / FILES["outcome"]).unlink()
    if timed:
        time_bytes = gpt2.weights_bytes(timed, metadata)
        files.write_atomic(paths["human_time"], lambda fh: fh.write(time_bytes))
    elif (out_dir / FILES["human_time"]).exists():  # an earlier export's: not this model's
        (out_dir / FILES["human_time"]).unlink()
    facts.weights_sha256 = files.sha256_file(paths["weights"])  # the card names it
    text = card.render(facts).encode()
    files.write_atomic(paths["card"], lambda fh: fh.write(text))
    listed = [path.name for key, path in paths.items() if key != "sums"]
    seal.write_sums(out_dir, listed)
    command = seal.rebuild(paths["weights"], "export")
    seal.check_sums(out_dir, listed, command, exact=True)  # as load will
    return paths
