"""Sealed records: every record a later stage trusts carries the sha256 of its own content, and
is checked before it is used.

A JSON record is sealed by ``write``: the key ``SEAL`` holds the sha256 of the record's canonical
JSON without that key (sorted keys, no spaces: ``files.digest_json``), so an edited number, a
flipped byte or a truncation no longer matches and ``read`` refuses it. A binary file's digest
travels in the sealed record beside it (``check_file``: a score table's ``positions.npz`` in its
``scores.json``) or in its folder's ``SHA256SUMS`` (``write_sums``/``check_sums``: the export's),
in the format ``sha256sum -c`` reads. A record without a seal (written before records were
sealed) is refused the same way. Every refusal is one line naming the file and the command that
rebuilds it (``rebuild``). Standard library only: the report and the rules read records too.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from chesslm import commands, files

SEAL = "record_sha256"
SUMS = "SHA256SUMS"
HEX = re.compile(r"[0-9a-fA-F]{64}")
DAMAGED = "sealed record does not match its content (edited or damaged)"
UNSEALED = "record has no seal (written before records were sealed, or not by chesslm)"


class SealError(ValueError):
    """A record or file that does not match its seal: names the file and how to rebuild it."""


def rebuild(target: Path | str, rule: str) -> str:
    """The command that writes ``target`` again, whatever Snakemake thinks of its age (with
    the ``--configfile`` files of the snakemake that runs this job: ``commands``)."""
    return commands.snakemake(target, forcerun=rule)


def _refuse(path: Path | str, why: str, command: str) -> SealError:
    return SealError(f"{path}: {why}; rebuild with: {command}")


def seal(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with its seal: its JSON round trip (what a reader will see: tuples as lists,
    keys as strings), plus ``SEAL``."""
    body = json.loads(json.dumps({k: v for k, v in record.items() if k != SEAL}))
    return {**body, SEAL: files.digest_json(body)}


def write(path: Path | str, record: dict[str, Any]) -> dict[str, Any]:
    """Write ``record`` sealed, atomically; returns what was written."""
    sealed = seal(record)
    files.write_json_atomic(path, sealed)
    return sealed


def check(value: Any, path: Path | str, command: str) -> dict[str, Any]:
    """The record ``value`` (read from ``path``) without its seal, if the seal matches.

    :raises SealError: naming ``path`` and ``command``."""
    if not isinstance(value, dict):
        raise _refuse(path, "not a JSON object", command)
    if SEAL not in value:
        raise _refuse(path, UNSEALED, command)
    body = {k: v for k, v in value.items() if k != SEAL}
    if value[SEAL] != files.digest_json(body):
        raise _refuse(path, DAMAGED, command)
    return body


def read(path: Path | str, command: str) -> dict[str, Any]:
    """The sealed record in ``path``, checked (``check``); a missing or unparsable file is
    refused the same way."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise _refuse(path, "missing", command) from None
    except (OSError, UnicodeDecodeError) as error:
        why = f"unreadable ({getattr(error, 'strerror', None) or error})"
        raise _refuse(path, why, command) from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        why = f"not JSON ({error.msg}, line {error.lineno}: truncated or damaged)"
        raise _refuse(path, why, command) from None
    return check(value, path, command)


def check_file(path: Path | str, expected: Any, record: Path | str, command: str) -> None:
    """Trust the binary ``path`` only if its sha256 is ``expected``, as its sealed ``record``
    says."""
    if not isinstance(expected, str):
        raise _refuse(record, f"holds no sha256 of {Path(path).name}", command)
    try:
        actual = files.sha256_file(path)
    except OSError as error:
        raise _refuse(path, f"unreadable ({error.strerror})", command) from None
    if actual != expected:
        raise _refuse(path, f"sha256 does not match {record} (edited or damaged)", command)


def write_sums(folder: Path, names: list[str]) -> Path:
    """``folder``/SHA256SUMS for ``names`` (files in ``folder``), as ``sha256sum`` writes it."""
    text = "".join(f"{files.sha256_file(folder / n)}  {n}\n" for n in sorted(names))
    files.write_atomic(folder / SUMS, lambda fh: fh.write(text.encode()))
    return folder / SUMS


def read_sums(folder: Path, command: str) -> dict[str, str]:
    """``folder``/SHA256SUMS: file name -> sha256."""
    path = folder / SUMS
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        raise _refuse(path, "missing (a folder written before it had one)", command) from None
    except (OSError, UnicodeDecodeError) as error:
        raise _refuse(path, f"unreadable ({error})", command) from None
    sums = {}
    for number, line in enumerate(lines, 1):
        digest, _, name = line.partition("  ")
        if not HEX.fullmatch(digest) or not name or "/" in name:
            why = f"line {number} is not '<sha256>  <file>' (the file is damaged)"
            raise _refuse(path, why, command)
        sums[name] = digest.lower()
    return sums


def check_sums(
    folder: Path, needed: list[str], command: str, *, exact: bool = False
) -> dict[str, str]:
    """Trust ``folder``'s files only if each one SHA256SUMS lists matches it and it lists every
    one of ``needed``; ``exact``: and the folder holds no other file (a folder meant for upload
    would publish it: a killed writer's temporary copy of the weights, say)."""
    sums = read_sums(folder, command)
    missing = [n for n in needed if n not in sums]
    if missing:
        raise _refuse(folder / SUMS, f"does not list {', '.join(missing)}", command)
    others = sorted(p.name for p in folder.iterdir() if p.name not in {*sums, SUMS})
    if exact and others:
        raise _refuse(
            folder,
            f"holds {', '.join(others)}, which {SUMS} does not list (a killed writer's"
            " temporary, or a file put there by hand): remove it",
            command,
        )
    for name, expected in sums.items():
        try:
            actual = files.sha256_file(folder / name)
        except OSError as error:
            raise _refuse(folder / name, f"unreadable ({error.strerror})", command) from None
        if actual != expected:
            raise _mismatch(folder, name, actual, expected, command)
    return sums


NEAR = 8  # of 64 digits: a changed file's digest differs in about 60 (each digit anew)


def _mismatch(folder: Path, name: str, actual: str, listed: str, command: str) -> SealError:
    """The refusal of a file whose digest is not the one SHA256SUMS lists: of the list itself
    when the two are within ``NEAR`` digits (a byte of the list was damaged: a changed file
    would change every digit), so the weights are not blamed for a damaged list."""
    differ = sum(a != b for a, b in zip(actual, listed, strict=True))
    if differ > NEAR:
        return _refuse(folder / name, f"sha256 does not match {folder / SUMS} (edited or"
                       " damaged)", command)  # fmt: skip
    return _refuse(
        folder / SUMS,
        f"damaged: the digest it lists for {name} differs from the file's in {differ} of 64"
        f" digits (a changed file would differ in about 60): the list is damaged, not {name}",
        command,
    )
