"""What one run left in ``results/{run}/``, read: ``RunRecords`` (every record, with what
was skipped) and ``RunState`` (complete or partial). ``load_run`` never fails on a missing or
torn file; it notes it instead. ``summary`` builds the tables, ``markdown`` the text."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chesslm.layout import RunDir


@dataclass
class RunRecords:
    """Everything read from one run directory; ``None`` or empty where a file is absent."""

    run_dir: Path
    events: list[dict[str, Any]] = field(default_factory=list)
    telemetry: list[dict[str, Any]] = field(default_factory=list)
    segments: list[dict[str, Any]] = field(default_factory=list)
    identity: dict[str, Any] | None = None
    probe: dict[str, Any] | None = None
    results: dict[str, Any] | None = None
    receipt: dict[str, Any] | None = None
    receipt_path: Path | None = None
    notes: list[str] = field(default_factory=list)
    """What was skipped or missing, one line each, for summary.md."""


def read_jsonl(path: Path, notes: list[str]) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file; unreadable lines are skipped and noted."""
    if not path.is_file():
        notes.append(f"{path.name}: not found")
        return []
    records = []
    lines = path.read_text(errors="replace").splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            record = _after_torn_record(line)
            if record is not None:
                notes.append(
                    f"{path.name} line {number}: a truncated record (a killed writer?) "
                    "followed by a whole one; the truncated part skipped"
                )
            else:
                last = "the last line, truncated (a killed writer?)" if number == len(lines) else ""
                notes.append(f"{path.name} line {number}: not valid JSON, skipped {last}".rstrip())
                continue
        if not isinstance(record, dict):
            notes.append(f"{path.name} line {number}: not a JSON object, skipped")
            continue
        records.append(record)
    if not records:
        notes.append(f"{path.name}: no records")
    return records


def _after_torn_record(line: str) -> dict[str, Any] | None:
    """The whole record a later writer appended to a torn line, if there is one."""
    for start in range(1, len(line)):
        if line[start] == "{":
            try:
                record = json.loads(line[start:])
            except json.JSONDecodeError:
                continue
            return record if isinstance(record, dict) else None
    return None


def read_json(path: Path, notes: list[str], *, shown: str | None = None) -> dict[str, Any] | None:
    """A JSON object, or ``None`` (noted as ``shown``) when the file is absent or unreadable."""
    shown = shown or path.name
    if not path.is_file():
        notes.append(f"{shown}: not found")
        return None
    try:
        value = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        notes.append(f"{shown}: not readable JSON ({error}), skipped")
        return None
    if not isinstance(value, dict):
        notes.append(f"{shown}: not a JSON object, skipped")
        return None
    return value


def find_receipt(run_dir: Path, fingerprint: str | None) -> Path | None:
    """The receipt under ``results/datasets/*/`` whose dataset fingerprint is ``fingerprint``."""
    if not fingerprint:
        return None
    for path in sorted((run_dir.parent / "datasets").glob("*/integrity-receipt.json")):
        try:
            if json.loads(path.read_text()).get("dataset_fingerprint") == fingerprint:
                return path
        except (OSError, ValueError, AttributeError):
            continue
    return None


def load_run(run_dir: Path | str, *, receipt_path: Path | str | None = None) -> RunRecords:
    """Read every record of a run; absent files are noted, never fatal."""
    run_dir = Path(run_dir)
    rec = RunRecords(run_dir=run_dir)
    layout = RunDir(run_dir)
    rec.events = read_jsonl(Path(layout.events), rec.notes)
    telemetry_notes: list[str] = []
    rec.telemetry = read_jsonl(Path(layout.telemetry), telemetry_notes)
    rec.notes += [n for n in telemetry_notes if not n.endswith(("not found", "no records"))]
    segments = Path(layout.segments).glob("*.json")
    for path in sorted(segments, key=lambda p: (len(p.stem), p.stem)):
        if not path.stem.isdigit():
            rec.notes.append(f"segments/{path.name}: not named after a segment number, ignored")
        elif (status := read_json(path, rec.notes, shown=f"segments/{path.name}")) is not None:
            rec.segments.append({**status, "segment": status.get("segment", int(path.stem))})
    rec.identity = read_json(Path(layout.identity), rec.notes, shown="train/identity.json")
    rec.probe = read_json(Path(layout.probe), rec.notes)
    results_notes: list[str] = []
    for path in map(Path, (layout.results, layout.train_results)):  # the trainer's: train/
        rec.results = rec.results or read_json(path, results_notes)
    rec.notes += [n for n in results_notes if not n.endswith("not found")]  # partial: expected
    if not rec.segments and rec.results and isinstance(rec.results.get("segments"), list):
        rec.segments = [s for s in rec.results["segments"] if isinstance(s, dict)]
        rec.notes.append("segments/: no status files; segments taken from results.json")
    fingerprint = (rec.identity or {}).get("dataset_fingerprint") or next(
        (e["dataset_fingerprint"] for e in rec.events if e.get("dataset_fingerprint")), None
    )
    rec.receipt_path = Path(receipt_path) if receipt_path else find_receipt(run_dir, fingerprint)
    if rec.receipt_path is None:
        rec.notes.append("integrity receipt: not found (no receipt matches the run's dataset)")
    else:
        rec.receipt = read_json(rec.receipt_path, rec.notes, shown=str(rec.receipt_path))
    return rec


@dataclass
class RunState:
    """Where the run stands: complete (results.json or a terminal segment) or partial."""

    complete: bool
    status: str | None
    source: str
