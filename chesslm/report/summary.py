"""Tables, figures and ``summary.md`` for one training run, read from its records alone.

``summarise(run_dir)`` reads what training left in ``results/{run}/`` (``train/events.jsonl``,
``train/gpu-telemetry.jsonl``, ``train/identity.json``, ``segments/*.json``,
``probe-results.json``, ``results.json``) plus the dataset's integrity receipt, and writes
``results/{run}/report/`` (the names in ``OUTPUT_FILES``). It works on a run in any state:
every input is optional, a killed writer's truncated last line, unknown event stages and
missing fields are skipped, and each skip is listed under "Skipped or missing input" in
``summary.md``. A run without a terminal segment status is summarised as *partial*.

Snakemake's ``summarise`` rule runs it once a run is complete (its input is ``results.json``);
for a run still training, or one that was stopped, use the command line::

    python -m chesslm.report.summary results/demo                 # prints summary.md
    python -m chesslm.report.summary results/demo --out /tmp/demo # writes every file there

The command line never writes ``results/{run}/report/`` (the rule's outputs) unless ``--out``
names it.

This module reads JSON and draws with matplotlib; it never imports torch.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from chesslm import files
from chesslm.data import integrity
from chesslm.data.tokens import PHASES
from chesslm.files import write_atomic
from chesslm.layout import RunDir
from chesslm.record.play_files import FILES
from chesslm.record.reader import RecordError
from chesslm.report import markdown, plots, sample_games
from chesslm.report.items import OUTPUT_FILES
from chesslm.report.run_reader import RunRecords, RunState, load_run
from chesslm.train.state import TERMINAL, WALL_PARTS

LOGGER = logging.getLogger(__name__)


KNOWN_STAGES = frozenset(
    {"data_validated", "initial_validation", "train", "validation", "probe_complete"}
    | {"finished", "segment_start", "segment_end"}
)

# The seed's metrics, in its order; validation fields sit under ``validation.`` in checks.
VALIDATION_METRICS = [
    "nll",
    "valid_targets",
    "games",
    *(f"phase_accuracy.{p}" for p in PHASES),
    *(f"phase_counts.{p}" for p in PHASES),
    "teacher_forced_triple_legality",
    "raw_reserved_probability",
    "raw_illegal_token_probability",
    "legality_games",
    "legality_targets",
    "seconds",
]
CHECK_FIELDS = ["train_nll", "useful_targets_per_second", "padded_tokens_per_second"]
CHECK_FIELDS += ["padding_fraction", "best_nll", "bad_checks"]
TRAIN_FIELDS = ["epoch", "step", "nll", "lr", "gradient_norm_before_clip"]
TRAIN_FIELDS += ["useful_targets_per_second", "padded_tokens_per_second", "padding_fraction"]
TRAIN_FIELDS += ["gpu_work_wall_seconds"]
SEGMENT_FIELDS = ["segment", "status", "terminal", "stop_reason", "start_unix", "end_unix"]
SEGMENT_FIELDS += ["seconds", "first_update_seconds", "step_start", "step_end", "updates"]
SEGMENT_FIELDS += ["best_step"]
# where each segment's wall time went, and its useful targets (older status files lack them)
WALL_FIELDS = [f"wall_split.{part}" for part in WALL_PARTS] + ["useful_targets"]
SEGMENT_FIELDS += WALL_FIELDS
SEGMENT_FIELDS += ["best_validation_nll", "bad_checks", "last_pt_sha256", "world_size", "device"]
TELEMETRY_METRICS = {"utilization_percent": 1, "memory_used_MiB": 2, "power_W": 3}
# Text the seed repeats in every validation record; it describes the protocol, not a value.
PROTOCOL_TEXT = ("validation.legality_subset", "validation.protocol")


def _flatten(record: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in record.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        elif not isinstance(value, list):
            flat[f"{prefix}{key}"] = value
    return flat


def _note_missing(frame: pd.DataFrame, columns: list[str], what: str, notes: list[str]) -> None:
    for column in columns:
        missing = int(frame[column].isna().sum()) if column in frame else len(frame)
        if missing and len(frame):
            notes.append(
                f"{what}: field {column!r} missing in {missing} of {len(frame)}, left blank"
            )


def by_stage(rec: RunRecords) -> dict[str, list[dict[str, Any]]]:
    """Events grouped by stage, each tagged with its segment; unknown stages are noted."""
    bounds = [(s.get("segment"), s.get("step_start"), s.get("step_end")) for s in rec.segments]
    markers = any(e.get("stage") == "segment_start" for e in rec.events)
    grouped: dict[str, list[dict[str, Any]]] = {}
    unknown: Counter[str] = Counter()
    current = None
    for event in rec.events:
        stage = event.get("stage")
        if stage == "segment_start":
            current = event.get("segment")
        if stage not in KNOWN_STAGES:
            unknown[str(stage)] += 1
            continue
        segment = current if markers else _segment_of(event.get("step"), bounds)
        grouped.setdefault(stage, []).append({"segment": segment, **event})
    for stage, count in sorted(unknown.items()):
        notes_stage = "records without a stage" if stage == "None" else f"stage {stage!r}"
        rec.notes.append(f"events.jsonl: {count} {notes_stage} not known to the summary, ignored")
    return grouped


def _segment_of(step: Any, bounds: list[tuple[Any, Any, Any]]) -> Any:
    if not isinstance(step, int | float):
        return None
    for segment, start, end in bounds:
        if isinstance(start, int | float) and isinstance(end, int | float) and start <= step:
            if step <= end and (step > start or start == 0):
                return segment
    return None


def validation_table(stages: dict[str, list[dict[str, Any]]], notes: list[str]) -> pd.DataFrame:
    """One row per validation: the initial one (step 0), then every check."""
    rows = []
    for event in stages.get("initial_validation", []):
        metrics = {k: v for k, v in event.items() if k not in ("stage", "segment", "time_unix")}
        rows.append(
            {"kind": "initial", "segment": event["segment"], "time_unix": event.get("time_unix")}
            | {"epoch": 0, "step": 0}
            | _flatten(metrics, "validation.")
        )
    for event in stages.get("validation", []):
        if not isinstance(event.get("validation"), dict) or event.get("step") is None:
            notes.append("events.jsonl: validation record without step or metrics, skipped")
            continue
        rows.append({"kind": "check"} | _flatten(event))
    columns = ["kind", "segment", "time_unix", "epoch", "complete_epoch", "step"]
    columns += [f"validation.{m}" for m in VALIDATION_METRICS] + CHECK_FIELDS
    frame = _frame(rows, columns, drop=("stage", *PROTOCOL_TEXT))
    checks = frame[frame["kind"] == "check"]
    _note_missing(checks, [f"validation.{m}" for m in VALIDATION_METRICS], "validation", notes)
    _note_missing(checks, CHECK_FIELDS, "validation", notes)
    return frame


def train_table(stages: dict[str, list[dict[str, Any]]], notes: list[str]) -> pd.DataFrame:
    """One row per logged training step (the seed logs every 10th optimizer step)."""
    rows = [e for e in stages.get("train", []) if e.get("step") is not None]
    if len(rows) < len(stages.get("train", [])):
        notes.append("events.jsonl: train records without a step, skipped")
    frame = _frame(rows, ["segment", "time_unix", *TRAIN_FIELDS], drop=("stage",))
    _note_missing(frame, TRAIN_FIELDS, "train", notes)
    replayed = int(frame["step"].duplicated().sum())
    if replayed:
        notes.append(
            f"train: {replayed} steps logged twice (replayed after a resume); plots use the later"
        )
    return frame


def segments_table(rec: RunRecords, stages: dict[str, list[dict[str, Any]]]) -> pd.DataFrame:
    """One row per segment: its status file, or its start/end events when the file is absent."""
    rows = {s["segment"]: {"source": "status file", **s} for s in rec.segments}
    for event in stages.get("segment_start", []) + stages.get("segment_end", []):
        n = event.get("segment")
        if n is None or (n in rows and rows[n]["source"] == "status file"):
            continue
        row = rows.setdefault(n, {"segment": n, "source": "events"})
        key = "start_unix" if event["stage"] == "segment_start" else "end_unix"
        row[key] = event.get("time_unix")
        row.update({k: v for k, v in event.items() if k in SEGMENT_FIELDS and k != "segment"})
    for n, row in rows.items():
        if row["source"] == "events":
            if row.get("end_unix") is None:
                row.setdefault("status", "running or killed")
            rec.notes.append(f"segment {n}: no status file, row built from events.jsonl")
        if row.get("seconds") is None and row.get("end_unix") and row.get("start_unix"):
            row["seconds"] = row["end_unix"] - row["start_unix"]
    frame = _frame(
        [rows[n] for n in sorted(rows, key=str)], [*SEGMENT_FIELDS, "source"], drop=("run",)
    )
    if len(frame):
        frame = frame.sort_values("segment", key=pd.to_numeric).reset_index(drop=True)
    status_rows = frame[frame["source"] == "status file"]
    # a segment that ran no update (a no-op resume of a finished run) has no start-up figure
    # nor do status files from before the wall-time split (summary.md says "not recorded")
    expected = [f for f in SEGMENT_FIELDS if f != "first_update_seconds" and f not in WALL_FIELDS]
    _note_missing(status_rows, expected, "segments", rec.notes)
    return frame


def telemetry_samples(rec: RunRecords) -> pd.DataFrame:
    """Long form: one row per GPU per telemetry record (nvidia-smi's CSV text parsed)."""
    rows, bad = [], 0
    for record in rec.telemetry:
        gpus = record.get("gpus")
        lines = gpus.splitlines() if isinstance(gpus, str) else []
        if not isinstance(gpus, str):
            bad += 1
        for line in lines:
            parts = [p.strip() for p in line.split(",")]
            if len(parts) != 4 or not parts[0].isdigit():
                bad += 1
                continue
            row = {"time_unix": record.get("time_unix"), "gpu": int(parts[0])}
            for name, index in TELEMETRY_METRICS.items():
                row[name] = pd.to_numeric(parts[index], errors="coerce")  # "[N/A]" -> NaN
            rows.append(row)
    if bad:
        rec.notes.append(f"gpu-telemetry.jsonl: {bad} GPU lines not parsable, skipped")
    return pd.DataFrame(rows, columns=["time_unix", "gpu", *TELEMETRY_METRICS])


def telemetry_table(samples: pd.DataFrame) -> pd.DataFrame:
    """Per GPU: samples, then mean, p95 and max of utilisation, memory and power."""
    columns = ["gpu", "samples", "first_unix", "last_unix"]
    columns += [f"{m}_{s}" for m in TELEMETRY_METRICS for s in ("mean", "p95", "max")]
    rows = []
    for gpu, group in samples.groupby("gpu", sort=True):
        row = {"gpu": gpu, "samples": len(group)}
        row |= {"first_unix": group["time_unix"].min(), "last_unix": group["time_unix"].max()}
        for metric in TELEMETRY_METRICS:
            values = group[metric].dropna()
            row[f"{metric}_mean"] = values.mean()
            row[f"{metric}_p95"] = values.quantile(0.95) if len(values) else None
            row[f"{metric}_max"] = values.max()
        rows.append(row)
    return pd.DataFrame(rows, columns=columns)


def probe_table(rec: RunRecords) -> pd.DataFrame:
    """One row per probed microbatch size, peak memory per rank in bytes."""
    rows = []
    for result in (rec.probe or {}).get("results", []) or []:
        if not isinstance(result, dict):
            continue
        times = result.get("step_seconds") or []
        row = {"status": rec.probe.get("status"), "parameters": rec.probe.get("parameters")}
        row |= {k: v for k, v in result.items() if not isinstance(v, list | dict)}
        row |= {"step_seconds_mean": sum(times) / len(times) if times else None}
        memory = [m for m in result.get("memory") or [] if isinstance(m, dict)]
        for kind in ("peak_allocated", "peak_reserved"):
            values = [m.get(kind) for m in memory if m.get(kind) is not None]
            row[f"{kind}_bytes_max"] = max(values) if values else None
            for m in memory:
                row[f"rank{m.get('rank')}_{kind}_bytes"] = m.get(kind)
        rows.append(row)
    if rec.probe is not None and not rows:
        rec.notes.append("probe-results.json: no 'results' list, probe table empty")
    columns = ["status", "parameters", "microbatch_per_gpu", "sequence_length", "timed_steps"]
    columns += ["step_seconds_mean", "useful_targets_per_second", "padded_tokens_per_second"]
    return _frame(rows, columns)


def data_table(rec: RunRecords, stages: dict[str, list[dict[str, Any]]]) -> pd.DataFrame:
    """One row: the data this run trained on and its integrity receipt."""
    receipt = rec.receipt or {}
    validated = (stages.get("data_validated") or [{}])[-1]
    identity_fp = (rec.identity or {}).get("dataset_fingerprint")
    identity_fp = identity_fp or validated.get("dataset_fingerprint")
    row = {
        "dataset_fingerprint": identity_fp,
        "receipt_path": str(rec.receipt_path) if rec.receipt_path else None,
        "receipt_dataset_fingerprint": receipt.get("dataset_fingerprint"),
        "receipt_sha256": receipt.get("receipt_sha256"),
        "receipt_seal_valid": integrity.receipt_sealed(receipt) if receipt else None,
        "fingerprints_match": (identity_fp == receipt.get("dataset_fingerprint"))
        if identity_fp and receipt
        else None,
    }
    row |= {k: validated.get(k) for k in ("train_games", "validation_games", "train_targets")}
    row["test_evaluated"] = was_test_evaluated(rec)
    if row["fingerprints_match"] is False:
        rec.notes.append("integrity receipt: its dataset fingerprint differs from identity.json's")
    return pd.DataFrame([row])


def was_test_evaluated(rec: RunRecords) -> bool:
    """True only if some record says the test split was evaluated (it never should be)."""
    sources = [rec.results, rec.probe, *rec.events, *rec.segments]
    return any(isinstance(s, dict) and s.get("test_evaluated") is True for s in sources)


def _frame(rows: list[dict[str, Any]], columns: list[str], drop: tuple = ()) -> pd.DataFrame:
    """Known columns first in a fixed order, then any extra scalar fields the records carry."""
    rows = [{k: v for k, v in _flatten(r).items() if k not in drop} for r in rows]
    extra = sorted({k for r in rows for k in r} - set(columns))
    return pd.DataFrame(rows, columns=columns + extra)


def run_state(rec: RunRecords, segments: pd.DataFrame, max_segments: int | None = None) -> RunState:
    if rec.results is not None:
        return RunState(True, rec.results.get("status"), "results.json")
    for _, row in segments.iloc[::-1].iterrows():
        if _true(row.get("terminal")) or row.get("status") in TERMINAL:
            name = markdown.segment_name(row["segment"], max_segments)
            return RunState(True, row["status"], f"{name}; no results.json yet")
    last = segments.iloc[-1] if len(segments) else None
    if last is None:
        return RunState(False, None, "no segment has run")
    return RunState(False, last.get("status"), markdown.segment_name(last["segment"], max_segments))


def _true(value: Any) -> bool:
    return isinstance(value, bool | np.bool_) and bool(value)


def summarise(
    run_dir: Path | str,
    out_dir: Path | str | None = None,
    *,
    receipt: Path | str | None = None,
    changes: list[str] | None = None,
    max_segments: int | None = None,
    figures: bool = True,
    games: Path | None = None,
) -> dict[str, Path]:
    """Write every file of ``OUTPUT_FILES`` for the run; returns name -> path.

    ``changes``: what differs between the run's record and the config now
    (``chesslm.report.staleness.run_changes``); summary.md opens with them.
    ``max_segments``: the run's ``runs.{run}.max_segments`` (the workflow's cap, which the
    run's records do not hold), so that summary.md says how many segments it may still take.
    ``figures``: False leaves the five figures undrawn (the tables and summary.md are the same):
    the command line that prints summary.md only has no use for them.
    ``games``: the PGN of the run's validation games that summary.md's analyse command names
    (rule summarise writes it first); by default ``sample_games.FILE`` written beside the
    files from the dataset's token cache where it is found (when printing: the rule's file).
    """
    rec = load_run(run_dir, receipt_path=receipt)
    out = Path(out_dir or RunDir(rec.run_dir).report)
    out.mkdir(parents=True, exist_ok=True)
    paths = {name: out / filename for name, filename in OUTPUT_FILES.items()}
    stages = by_stage(rec)
    samples = telemetry_samples(rec)
    tables = {
        "data": data_table(rec, stages),
        "validation": validation_table(stages, rec.notes),
        "train_steps": train_table(stages, rec.notes),
        "segments": segments_table(rec, stages),
        "telemetry": telemetry_table(samples),
        "probe": probe_table(rec),
    }
    for name, table in tables.items():
        table.to_csv(paths[name], index=False)
    if figures:
        plots.draw_all(tables, samples, paths, run=rec.run_dir.name)
    if games is None:
        games = sample_beside(rec, out) if figures else Path(RunDir(rec.run_dir).report)
        games = games / sample_games.FILE if games is not None else None
    state = run_state(rec, tables["segments"], max_segments)
    text = markdown.render(
        rec,
        state,
        tables,
        samples,
        paths,
        test_evaluated=was_test_evaluated(rec),
        changes=changes or [],
        max_segments=max_segments,
        # the printed text's links as from the run's report/, where summary.md belongs
        figures=headline_figures(rec, paths, out if figures else Path(RunDir(rec.run_dir).report)),
        games=games,
    )
    write_atomic_text(paths["summary"], text)
    write_atomic_text(paths["summary_html"], markdown.to_html(text, base=out))
    LOGGER.info("wrote %d files to %s (%d notes)", len(paths), out, len(rec.notes))
    return paths


def sample_beside(rec: RunRecords, out: Path) -> Path | None:
    """``out`` once the run's validation games are written there (``sample_games``), from the
    token cache beside the dataset's integrity receipt; None where there is none."""
    cache = rec.receipt_path.parent / "token-cache" if rec.receipt_path else None
    if cache is None or not (cache / "cache.json").is_file():
        return None
    sample_games.write(cache, out / sample_games.FILE)
    return out


def headline_figures(rec: RunRecords, paths: dict[str, Path], folder: Path) -> dict[str, str]:
    """The figures summary.md shows under its answers (alt text -> path relative to its
    ``folder``): the NLL curve (named also where the command line leaves it undrawn, as the
    files list is) and, once the run has played, move-matching by the mover's rating."""
    shown = {"NLL curve": paths["nll_plot"].name}
    played = Path(RunDir(rec.run_dir).play) / FILES["move_match_plot"]
    if played.is_file():
        shown["move-matching by rating"] = os.path.relpath(played, folder)
    return shown


def write_atomic_text(path: Path, text: str) -> None:
    data = text.encode()
    write_atomic(path, lambda fh: fh.write(data))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m chesslm.report.summary", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("run_dir", type=Path, help="a run directory, e.g. results/demo")
    parser.add_argument(
        "--out",
        type=Path,
        help="write every report file to this folder (default: print summary.md only, write "
        "nothing)",
    )
    parser.add_argument(
        "--receipt", type=Path, help="integrity receipt (default: found by fingerprint)"
    )
    parser.add_argument(
        "--max-segments",
        type=int,
        help="the run's runs.{run}.max_segments, so the summary says segment N of at most M",
    )
    args = parser.parse_args(argv)
    files.unwind_on_signals()  # a kill leaves no temporary beside the outputs
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if not args.run_dir.is_dir():
        parser.error(f"not a directory: {str(args.run_dir)!r}")
    options = {"receipt": args.receipt, "max_segments": args.max_segments}
    try:
        if args.out is not None:
            paths = summarise(args.run_dir, args.out, **options)
            print(f"wrote {len(paths)} files to {args.out}", file=sys.stderr)
            return 0
        # results/{run}/report/ belongs to Snakemake's summarise rule: draw in a scratch folder.
        with tempfile.TemporaryDirectory(prefix="chesslm-summary-") as scratch:
            paths = summarise(args.run_dir, scratch, figures=False, **options)
            sys.stdout.write(paths["summary"].read_text())
    except RecordError as error:  # a play record it must not trust: one line, no traceback
        parser.exit(1, f"{parser.prog}: {error}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
