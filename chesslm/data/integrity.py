"""Hashes, the dataset fingerprint and the integrity receipt.

``verify_dataset`` re-hashes every file the manifest lists (test split included: hashing
reads bytes, it never decodes games) and returns a receipt; ``check_receipt`` is what any
later stage calls before it trusts a file of the dataset.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chesslm.files import UnreadableFileError, digest_json, read_json, sha256_file

RECEIPT_FORMAT = "chesslm-integrity-receipt-v1"


class IntegrityError(UnreadableFileError):
    """A file does not match the hash recorded for it."""


# what the dataset is, not what it was read from: the same games from PGN or Parquet, or
# from files of other names, are one dataset (the manifest's "inputs" and "skipped" say where
# they came from and what was dropped on the way)
CONTENT = ("format", "converter_version", "tokenizer_version", "settings", "shards", "files",
           "games", "tokens")  # fmt: skip


def fingerprint(manifest: dict[str, Any]) -> str:
    """The dataset's identity: its content (``CONTENT``: the settings and every file's hash)."""
    return digest_json({k: manifest.get(k) for k in CONTENT})


def _earlier_fingerprint(manifest: dict[str, Any]) -> str:
    """Before 2026-12-07 (CHANGELOG): the whole manifest, inputs' names included; a dataset
    converted then keeps it, so that its runs resume."""
    return digest_json({k: v for k, v in manifest.items() if k != "fingerprint"})


def verify_dataset(dataset_dir: Path) -> dict[str, Any]:
    """Check every file of the dataset against its manifest; returns the receipt."""
    manifest_path = dataset_dir / "manifest.json"
    manifest = read_json(manifest_path)
    if manifest.get("fingerprint") not in (fingerprint(manifest), _earlier_fingerprint(manifest)):
        raise IntegrityError(f"{manifest_path}: fingerprint does not match its contents")
    files = manifest.get("files", {})
    for name, expected in sorted(files.items()):
        path = dataset_dir / name
        if not path.is_file():
            raise IntegrityError(f"{path}: listed in the manifest but missing")
        actual = sha256_file(path)
        if actual != expected:
            raise IntegrityError(
                f"{path}: sha256 {actual} does not match the manifest ({expected})"
            )
    body = {
        "format": RECEIPT_FORMAT,
        "dataset_fingerprint": manifest["fingerprint"],
        "manifest_sha256": sha256_file(manifest_path),
        "files": dict(sorted(files.items())),
        "games": manifest["games"],
        "all_files_verified": True,
        "test_decoded": False,
    }
    return {**body, "receipt_sha256": digest_json(body)}


def receipt_sealed(receipt: dict[str, Any]) -> bool:
    """Whether a receipt is unchanged since ``verify_dataset`` sealed it."""
    body = {k: v for k, v in receipt.items() if k != "receipt_sha256"}
    return receipt.get("format") == RECEIPT_FORMAT and receipt.get("receipt_sha256") == digest_json(
        body
    )


def check_receipt(receipt_path: Path, dataset_dir: Path, names: list[str]) -> dict[str, Any]:
    """Trust ``names`` (paths relative to the dataset) only if they match the receipt.

    :raises IntegrityError: naming the receipt, the manifest or the file that differs.
    """
    receipt = read_json(receipt_path)
    if not receipt_sealed(receipt):
        raise IntegrityError(f"{receipt_path}: receipt has been altered (seal does not match)")
    manifest_path = dataset_dir / "manifest.json"
    if sha256_file(manifest_path) != receipt["manifest_sha256"]:
        raise IntegrityError(f"{manifest_path}: manifest changed since it was verified")
    for name in names:
        expected = receipt["files"].get(name)
        if expected is None:
            raise IntegrityError(f"{dataset_dir / name}: not covered by {receipt_path}")
        actual = sha256_file(dataset_dir / name)
        if actual != expected:
            raise IntegrityError(
                f"{dataset_dir / name}: sha256 {actual} does not match the receipt ({expected})"
            )
    return receipt
