"""summary.md of a run: its state, then the answers a reader opens it for (top-1, Elo,
legality, how to play, share and analyse the model), then its best check, identity, times,
throughput, memory, data, play in full and what the summary had to skip. The tables it quotes
come from ``chesslm.report.summary``."""

from __future__ import annotations

import base64
import html
import json
import re
from pathlib import Path
from typing import Any

import pandas as pd

from chesslm import commands
from chesslm.files import sha256_file
from chesslm.layout import RunDir
from chesslm.report import sample_games
from chesslm.report.cells import md_table as _md_table
from chesslm.report.cells import num as _num
from chesslm.report.play_section import answers, markdown_section
from chesslm.report.run_reader import RunRecords, RunState
from chesslm.report.staleness import warning
from chesslm.train.state import WALL_PARTS


def stale_line(run: str, changes: list[str]) -> str:
    """The warning line of a run whose config or dataset changed since it trained."""
    return "Warning: " + warning(run, changes)


def _utc(value: Any) -> str:
    if value is None or pd.isna(value):
        return "n/a"
    return pd.Timestamp(float(value), unit="s", tz="UTC").strftime("%Y-%m-%d %H:%M:%S")


def _identity_value(value: Any) -> str:
    """A nested identity entry as ``key=value, ...`` (one level), lists as JSON."""
    if isinstance(value, dict):
        return ", ".join(f"{k}={_identity_value(v)}" for k, v in value.items())
    if isinstance(value, list):
        return json.dumps(value)
    return str(value)


PLAY_FILES = (".json", ".csv", ".svg")  # rule play's records, tables and figures
WALL_LABELS = {"startup": "start-up", "training": "training", "validation": "validation"}
WALL_LABELS |= {"checkpointing": "checkpointing", "other": "other"}


def _wall_columns(segments: pd.DataFrame) -> tuple[pd.DataFrame, pd.Series]:
    """The segments' wall-time parts (one column per ``WALL_PARTS``) and which rows have them."""
    parts = pd.DataFrame(
        {
            part: pd.to_numeric(segments.get(f"wall_split.{part}"), errors="coerce")
            for part in WALL_PARTS
        },
        index=segments.index,
    )
    return parts, parts.notna().all(axis=1)


def wall_time_section(segments: pd.DataFrame) -> list[str]:
    """Per segment and in total: seconds and share of start-up, training, validation,
    checkpointing and the rest; segments whose status file predates the split say so."""
    out = ["### Wall time", ""]
    parts, recorded = _wall_columns(segments)
    if not recorded.any():
        return out + ["Where the segments' wall time went: not recorded (older status files).", ""]

    def cells(values: pd.Series) -> list[str]:
        whole = values.sum()
        return [f"{_num(whole, '.1f')}"] + [
            f"{_num(values[p], '.1f')} ({values[p] / whole:.0%})" if whole > 0 else "n/a"
            for p in WALL_PARTS
        ]

    rows = []
    for index, row in segments.iterrows():
        if recorded[index]:
            rows.append([_num(row["segment"], ""), *cells(parts.loc[index])])
        else:
            rows.append([_num(row["segment"], ""), _num(row.get("seconds"), ".1f")])
            rows[-1] += ["not recorded"] * len(WALL_PARTS)
    total = "total" if recorded.all() else f"total of the {int(recorded.sum())} recorded"
    rows.append([total, *cells(parts[recorded].sum())])
    header = ["segment", "seconds"] + [f"{WALL_LABELS[p]} s (share)" for p in WALL_PARTS]
    return out + _md_table(header, rows)


def efficiency_line(segments: pd.DataFrame, train: pd.DataFrame) -> str:
    """Useful targets/s over the segments' whole wall time, against the training records'
    median: the share of the training rate a run keeps once start-up, checks and saves count."""
    _, recorded = _wall_columns(segments)
    targets = pd.to_numeric(segments.get("useful_targets"), errors="coerce")
    seconds = pd.to_numeric(segments["seconds"], errors="coerce")
    rows = recorded & targets.notna() & seconds.notna()
    if not rows.any() or seconds[rows].sum() <= 0:
        return "- useful targets/s over the segments' wall time: not recorded"
    rate = targets[rows].sum() / seconds[rows].sum()
    line = (
        f"- useful targets/s over the segments' wall time: {_num(rate, ',.0f')}"
        f" ({_num(targets[rows].sum(), '')} targets in {_num(seconds[rows].sum(), '.1f')} s"
        f" of {int(rows.sum())} segments)"
    )
    median = train["useful_targets_per_second"].median() if len(train) else None
    if median is not None and not pd.isna(median) and median > 0:
        return line + f"; efficiency {rate / median:.2f} of the training records' median"
    return line + "; efficiency n/a (no training record with a rate)"


def play_section(run_dir: Path) -> list[str]:
    """The play evaluation's section (``play_section.markdown_section``) when the run has
    ``play/``; nothing when it has not."""
    play_dir = Path(RunDir(run_dir).play)
    if not play_dir.is_dir():
        return []
    return [markdown_section(play_dir).rstrip("\n"), ""]


def handover_section(run_dir: Path, games: Path | None = None) -> list[str]:
    """List items: how to play the run's best.pt (the exact ``chesslm-uci`` command), where
    its export is or the command that writes it, and how to analyse a PGN with it: the run's
    ``games`` (``sample_games``) where that file is there, else an argument the command
    refuses in one line; one item saying so before best.pt exists."""
    best = Path(RunDir(run_dir).best)
    if not best.is_file():
        return [f"- Play it, share it, analyse games with it: not yet (no `{best}`)"]
    export = Path(RunDir(run_dir).export)
    # said so that it stays true when the export is built after this summary (the report
    # shows the summary as rule summarise wrote it)
    layout = "Hugging Face GPT-2 layout, `chess-tokenizer.json`, model card `README.md`"
    command = commands.snakemake(export / "model.safetensors")
    where = f"`{export}/` ({layout}), written by `{command}`"
    return [
        f'- Play it as a UCI engine (GUIs, lichess-bot; README.md "Play it or share it"): '
        f"`chesslm-uci --checkpoint {best}`",
        f"- Export: {where}",
        analyse_line(best, games),
    ]


def analyse_line(best: Path, games: Path | None) -> str:
    """The list item of ``chesslm-analyse`` on the run's validation games (as printed, it
    runs), or where there are none on ``YOUR-GAMES.pgn`` (as printed: "no such file")."""
    if games is not None and games.is_file():
        command = f"chesslm-analyse --checkpoint {best} {games} --csv analysis.csv"
        return (
            f"- Analyse games move by move: `{command}` (the first {sample_games.GAMES}"
            f" validation games of the run's dataset; any .pgn or .pgn.zst in their place)"
        )
    command = f"chesslm-analyse --checkpoint {best} YOUR-GAMES.pgn --csv analysis.csv"
    return f"- Analyse games move by move: `{command}` (YOUR-GAMES.pgn: a .pgn or .pgn.zst)"


def answers_section(
    rec: RunRecords,
    validation: pd.DataFrame,
    figures: dict[str, str] | None = None,
    games: Path | None = None,
) -> list[str]:
    """What a reader opens the report for, before anything else: the best validation NLL and
    play's answers (``play_section.answers``: top-1, Elo, legality), the headline figures
    (``figures``: alt text -> path relative to summary.md), then how to play, share and
    analyse it (``handover_section``)."""
    play_dir = Path(RunDir(rec.run_dir).play)
    out = ["## At a glance", "", headline_nll(rec, validation)]
    out += answers(play_dir if play_dir.is_dir() else None)
    if figures:  # one paragraph of images: side by side on the report's first screen
        out += ["", " ".join(f"![{alt}]({path})" for alt, path in figures.items())]
    out += ["", *handover_section(rec.run_dir, games)]
    return out + [
        "",
        "Below: the training's outcome; the run's identity, hashes and training code; time,"
        " throughput, memory and data; the play evaluation in full.",
        "",
    ]


def headline_nll(rec: RunRecords, validation: pd.DataFrame) -> str:
    """The list item of the best validation NLL, its step and the initial NLL."""
    step, nll, source = _best(rec, validation)
    initial = validation.loc[validation["kind"] == "initial", "validation.nll"]
    start = f", from {_num(initial.iloc[0], '.4f')} at step 0" if len(initial) else ""
    return (
        f"- Best validation NLL: **{_num(nll, '.4f')}** nats/target at step {_num(step, '')}"
        f"{start} ({source})"
    )


def held_out_line(evaluated: bool) -> str:
    """``test_evaluated`` and what it means."""
    if evaluated:
        return "test_evaluated: true (a record says the test split was evaluated; none should)"
    return (
        "test_evaluated: false (the test split is written and hashed into the integrity "
        "receipt, but nothing that reads tokens reads it: no stage caches, trains, validates "
        "or plays on it)"
    )


def segment_name(segment: Any, max_segments: int | None) -> str:
    """``segment N``, with the bound on the run's segments where it is known."""
    if max_segments is None:
        return f"segment {segment}"
    return f"segment {segment} of at most {max_segments}, numbered from 0"


def files_section(run_dir: Path, paths: dict[str, Path], games: Path | None = None) -> list[str]:
    """The report's files beside summary.md (``games`` too where it is there) and, when the
    run has played, its play files (``play/state/`` is play's work in progress, not a
    result)."""
    out = ["## Files", "", "Beside this summary:", ""]
    out += [f"- `{p.name}`" for name, p in paths.items() if name != "summary"]
    out += [f"- `{games.name}`"] if games is not None and games.is_file() else []
    out += [""]
    played = sorted(p for p in Path(RunDir(run_dir).play).glob("*") if p.suffix in PLAY_FILES)
    if played:
        out += ["The play evaluation's, in the run's `play/`:", ""]
        out += [f"- `play/{p.name}`" for p in played] + [""]
    return out


def _best(rec: RunRecords, validation: pd.DataFrame) -> tuple[Any, Any, str]:
    """Best step and NLL: from results.json, else the last status file, else the checks."""
    if rec.results and rec.results.get("best_validation_nll") is not None:
        return rec.results.get("best_step"), rec.results["best_validation_nll"], "results.json"
    for status in reversed(rec.segments):
        if status.get("best_validation_nll") is not None:
            source = f"segment {status.get('segment')} status"
            return status.get("best_step"), status["best_validation_nll"], source
    checks = validation[validation["kind"] == "check"].dropna(subset=["validation.nll"])
    if len(checks):
        row = checks.loc[checks["validation.nll"].idxmin()]
        return row["step"], row["validation.nll"], "lowest validation check in events.jsonl"
    return None, None, "no validation check yet"


def render(
    rec: RunRecords,
    state: RunState,
    tables: dict[str, pd.DataFrame],
    samples: pd.DataFrame,
    paths: dict[str, Path],
    *,
    test_evaluated: bool,
    changes: list[str] = (),
    max_segments: int | None = None,
    figures: dict[str, str] | None = None,
    games: Path | None = None,
) -> str:
    """summary.md: the state, then the answers (top-1, Elo, legality, how to play it), then
    the best check, identity, times, throughput, memory, data, play in full, files, skips.

    ``changes`` (what differs from the config now) and a dataset fingerprint that differs
    from the receipt's make the first line a warning that names them. ``max_segments``: the
    run's cap on its segments (``runs.{run}.max_segments``), where known. ``figures``: the
    headline figures under the answers (alt text -> path relative to summary.md). ``games``:
    the run's validation games (``sample_games``) the analyse command is shown on.
    """
    results, identity = rec.results or {}, rec.identity or {}
    data = tables["data"].iloc[0]
    out = header_section(rec, state, data, list(changes))
    out += answers_section(rec, tables["validation"], figures, games)
    out += [held_out_line(test_evaluated), ""]
    out += outcome_section(rec, tables["validation"])
    out += identity_section(identity)
    out += time_section(rec, tables["segments"], results, max_segments)
    out += throughput_section(tables, results, ranks(rec))
    out += memory_section(tables, samples, results)
    out += data_section(rec, data, identity)
    out += play_section(rec.run_dir)
    out += files_section(rec.run_dir, paths, games)
    out += ["## Skipped or missing input", ""]
    notes = list(dict.fromkeys(rec.notes))
    out += [f"- {n}" for n in notes] if notes else ["Nothing was skipped."]
    return "\n".join(out) + "\n"


def header_section(
    rec: RunRecords, state: RunState, data: pd.Series, changes: list[str]
) -> list[str]:
    """The stale-run warning (first, where there is one), the title, the state."""
    match = data["fingerprints_match"]
    mismatch = match is not None and not pd.isna(match) and not bool(match)
    if mismatch and not any("rebuilt" in c for c in changes):
        changes.append(
            f"its dataset fingerprint ({str(data['dataset_fingerprint'])[:12]}…) differs from "
            f"the integrity receipt's ({str(data['receipt_dataset_fingerprint'])[:12]}…)"
        )
    out = []
    if changes:  # the first line, so that nobody takes an out-of-date run for a current one
        out += [f"**{stale_line(rec.run_dir.name, changes)}**", ""]
    out += [f"# Run `{rec.run_dir.name}`", ""]
    if state.complete:
        out.append(
            ("**Complete, but out of date (see the first line).**" if changes else "**Complete.**")
            + f" Final status `{state.status}` (from {state.source})."
        )
    elif state.status is None:
        out.append("**Partial run: no segment has run yet.**")
    else:
        out.append(
            f"**Partial run: no terminal status yet.** Latest status `{state.status}` "
            f"(from {state.source}). Everything below covers only the records written so far."
        )
    return out + [""]


def outcome_section(rec: RunRecords, validation: pd.DataFrame) -> list[str]:
    step, nll, source = _best(rec, validation)
    checks = validation[validation["kind"] == "check"]
    initial = validation[validation["kind"] == "initial"]
    out = ["## Outcome", "", f"- best step {_num(step, '')}, best validation NLL "]
    out[-1] += f"{_num(nll, '.4f')} nats/target (from {source})"
    if len(initial):
        out.append(f"- initial validation NLL {_num(initial['validation.nll'].iloc[0], '.4f')}")
    if len(checks):
        last = checks.iloc[-1]
        out.append(
            f"- {len(checks)} validation checks; the last at step {_num(last['step'], '')}: "
            f"NLL {_num(last['validation.nll'], '.4f')}, bad checks {_num(last['bad_checks'], '')}"
        )
    out.append("")
    return out


def identity_section(identity: dict[str, Any]) -> list[str]:
    out = ["## Identity", ""]
    if identity:
        code = identity.get("training_code")
        rows = [[k, _identity_value(v)] for k, v in identity.items() if k != "training_code"]
        if isinstance(code, dict):
            rows.append(["training_code", f"{len(code)} files, listed below"])
        out += _md_table(["key", "value"], rows)
        if isinstance(code, dict):
            out += ["Training code the run was trained with (sha256 of each file):", ""]
            out += _md_table(["file", "sha256"], [[f"`{k}`", f"`{v}`"] for k, v in code.items()])
    else:
        out += ["identity.json was not found.", ""]
    return out


def time_section(
    rec: RunRecords, segments: pd.DataFrame, results: dict[str, Any], max_segments: int | None
) -> list[str]:
    out = ["## Time", ""]
    if len(segments):
        seconds = pd.to_numeric(segments["seconds"], errors="coerce")
        span = (
            pd.to_numeric(segments["end_unix"], errors="coerce").max()
            - pd.to_numeric(segments["start_unix"], errors="coerce").min()
        )
        bound = f" of at most {max_segments} (`runs.{rec.run_dir.name}.max_segments`)"
        out.append(
            f"{len(segments)} segments{bound if max_segments else ''}, "
            f"{_num(seconds.sum(), '.1f')} s in segments in all, "
            f"{_num(span, '.1f')} s from the first start to the last end."
        )
        out.append("")
        columns = ["segment", "status", "stop_reason", "start_unix", "end_unix", "seconds"]
        columns += ["first_update_seconds"]
        columns += ["step_start", "step_end", "updates"]
        rows = [
            [
                _utc(r[c])
                if c.endswith("_unix")
                else _num(r[c], ".1f" if c.endswith("seconds") else "")
                for c in columns
            ]
            for _, r in segments.iterrows()
        ]
        out += _md_table([c.replace("_unix", " (UTC)") for c in columns], rows)
        out += wall_time_section(segments)
    else:
        out += ["No segment has recorded a start yet.", ""]
    # a CPU run's ranks are workers: its "GPU work" is theirs (the records keep one key)
    cpu = ranks(rec) == "worker"
    said = {"gpu_work_wall_seconds": "work wall time of the workers (CPU)"} if cpu else {}
    for key in ("gpu_work_wall_seconds", "whole_process_seconds"):
        if results.get(key) is not None:
            out += [f"- results.json {said.get(key, key)}: {_num(results[key], '.1f')} s", ""]
    return out


def ranks(rec: RunRecords) -> str:
    """What the run's ranks ran on, as the report names them: "worker" for a CPU run (its
    segments' or probe's ``device``), "GPU" otherwise."""
    devices = [s.get("device") for s in rec.segments] + [(rec.probe or {}).get("device")]
    return "worker" if next((d for d in devices if d), None) == "cpu" else "GPU"


def throughput_section(
    tables: dict[str, pd.DataFrame], results: dict[str, Any], per: str = "GPU"
) -> list[str]:
    """Training's rates; ``per``: what a microbatch is per (``ranks``)."""
    segments, train = tables["segments"], tables["train_steps"]
    out = ["## Throughput", ""]
    if len(train):
        out.append(
            f"- training records ({len(train)}): median "
            f"{_num(train['useful_targets_per_second'].median(), ',.0f')} useful targets/s, "
            f"{_num(train['padded_tokens_per_second'].median(), ',.0f')} padded tokens/s, "
            f"mean padding fraction {_num(train['padding_fraction'].mean(), '.3f')}"
        )
    if not len(train):
        out.append("- no training record yet")
    if len(segments):
        out.append(efficiency_line(segments, train))
    totals = results.get("totals") or {}
    if totals.get("valid_targets") and totals.get("train_seconds"):
        rate = totals["valid_targets"] / totals["train_seconds"]
        out.append(f"- results.json totals: {_num(rate, ',.0f')} useful targets/s")
    for _, row in tables["probe"].iterrows():
        out.append(
            f"- probe, microbatch {_num(row['microbatch_per_gpu'], '')} per {per}: "
            f"{_num(row['useful_targets_per_second'], ',.0f')} useful targets/s"
        )
    out.append("")
    return out


def memory_section(
    tables: dict[str, pd.DataFrame], samples: pd.DataFrame, results: dict[str, Any]
) -> list[str]:
    out = ["## Memory", ""]
    for entry in results.get("memory") or []:
        if isinstance(entry, dict):
            # a CPU run has no allocator peaks: say what was measured, not "n/a GiB"
            parts = [
                f"{label} {entry[key] / 2**30:.2f} GiB"
                for key, label in (
                    ("peak_allocated", "peak allocated"),
                    ("peak_reserved", "peak reserved"),
                    ("peak_rss_bytes", "peak host RSS"),
                )
                if isinstance(entry.get(key), int | float)
            ]
            measured = ", ".join(parts) or "no memory figure recorded"
            out.append(f"- rank {entry.get('rank')}: {measured} (results.json)")
    probe = tables["probe"]
    if len(probe) and "peak_reserved_bytes_max" in probe:
        peak = pd.to_numeric(probe["peak_reserved_bytes_max"], errors="coerce").max()
        if pd.notna(peak):  # the CPU has no allocator peak
            out.append(f"- probe: peak reserved {peak / 2**30:.2f} GiB on the busiest rank")
    if len(samples):
        for _, row in tables["telemetry"].iterrows():
            out.append(
                f"- GPU {_num(row['gpu'], '')}: "
                f"memory max {_num(row['memory_used_MiB_max'], ',.0f')} MiB, "
                f"utilisation mean {_num(row['utilization_percent_mean'], '.1f')} %, "
                f"power mean {_num(row['power_W_mean'], '.1f')} W "
                f"({_num(row['samples'], '')} samples)"
            )
    else:
        out.append(
            "- No GPU telemetry was recorded (a CPU run, or gpu-telemetry.jsonl is absent or "
            "empty): the GPU table is empty and the GPU figure says so."
        )
    out.append("")
    return out


def data_section(rec: RunRecords, data: pd.Series, identity: dict[str, Any]) -> list[str]:
    out = ["## Data", ""]
    out.append(f"- dataset fingerprint (identity.json): `{_num(data['dataset_fingerprint'])}`")
    if rec.receipt is not None:
        out.append(
            f"- integrity receipt `{data['receipt_path']}`: dataset fingerprint "
            f"`{data['receipt_dataset_fingerprint']}`, matches identity: "
            f"{data['fingerprints_match']}"
        )
        out.append(
            f"- the receipt's seal `receipt_sha256` `{data['receipt_sha256']}` (sha256 of the "
            f"receipt's own fields, written by verify), seal valid: {data['receipt_seal_valid']}"
        )
        trained = identity.get("integrity_receipt_sha256")
        if trained:
            now = sha256_file(rec.receipt_path) if rec.receipt_path.is_file() else None
            out.append(
                f"- identity's `integrity_receipt_sha256` `{trained}` (sha256 of the receipt "
                f"file's bytes when the run trained): the receipt file is the same now: "
                f"{now == trained}"
            )
    else:
        out.append("- integrity receipt: not found")
    counts = ", ".join(f"{k} {_num(data[k], '')}" for k in ("train_games", "validation_games"))
    out += [f"- {counts}, train targets {_num(data['train_targets'], '')}", ""]
    return out


# --- summary.html: the Markdown above as an HTML fragment, for the report's first page -------

_IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)")
_INLINE = [
    (re.compile(r"\*\*(.+?)\*\*"), r"<strong>\1</strong>"),
    (_IMAGE, r'<img alt="\1" src="\2">'),
    (re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)"), r'<a href="\2">\1</a>'),
]
_CELL_STYLE = 'style="border:1px solid #ccc;padding:2px 6px;text-align:left"'


def _inline(text: str) -> str:
    text = html.escape(text, quote=False)
    parts = re.split(r"(`[^`]+`)", text)  # no emphasis inside code spans
    out = []
    for part in parts:
        if part.startswith("`") and part.endswith("`") and len(part) > 1:
            out.append(f"<code>{part[1:-1]}</code>")
        else:
            for pattern, replacement in _INLINE:
                part = pattern.sub(replacement, part)
            out.append(part)
    return "".join(out)


def _cells(line: str) -> list[str]:
    cells = re.split(r"(?<!\\)\|", line.strip().strip("|"))
    return [c.strip().replace("\\|", "|") for c in cells]


_SVG_SIZE = re.compile(rb'<svg[^>]*?width="([\d.]+)pt" height="([\d.]+)pt"')
# the report's stylesheet quotes code spans with backticks; a summary needs none. A table
# wider than the page scrolls within it instead of running on over what is beside it. A row of
# figures fills the column, each as wide as its share of the row's aspect ratios (one height).
_STYLE = (
    "<style>.chesslm-summary code::before, .chesslm-summary code::after { content: none; }"
    " .chesslm-summary table { display: block; max-width: 100%; overflow-x: auto; }"
    " .chesslm-summary .chesslm-figures { display: flex; gap: 0.5rem; align-items: flex-start; }"
    " .chesslm-summary .chesslm-figures img { min-width: 0; height: auto; margin: 0; }</style>"
)


def figures_html(line: str, base: Path | None) -> str:
    """A paragraph of images only, as one row: each a data URI of the file ``base / src``
    (so that summary.html shows them wherever it is embedded), else ``src`` as written."""
    images = []
    for alt, src in _IMAGE.findall(line):
        path = base / src if base is not None else None
        data = path.read_bytes() if path is not None and path.is_file() else None
        size = _SVG_SIZE.search(data[:4096]) if data and src.endswith(".svg") else None
        grow = float(size[1]) / float(size[2]) if size else 1.0
        if data is not None:
            kind = "image/svg+xml" if src.endswith(".svg") else "image/png"
            # in lines: docutils refuses a line over 10,000 characters in the report's first
            # page, and a URL parser drops the newlines
            src = f"data:{kind};base64,{base64.encodebytes(data).decode('ascii')}"
        alt = html.escape(alt)
        images.append(f'<img alt="{alt}" title="{alt}" src="{src}" style="flex: {grow:.3f} 1 0">')
    return f'<p class="chesslm-figures">{"".join(images)}</p>'


def to_html(text: str, base: Path | None = None) -> str:
    """The Markdown that ``render`` writes (headings, paragraphs, lists, pipe tables, bold,
    code, links, images) as an HTML fragment; no other Markdown is needed here. A paragraph
    of images only is a row of figures (``figures_html``), the files read from ``base``."""
    out = ['<div class="chesslm-summary">', _STYLE]
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
        elif heading := re.match(r"(#{1,6}) (.*)", line):
            level = len(heading.group(1))
            out.append(f"<h{level}>{_inline(heading.group(2))}</h{level}>")
            i += 1
        elif line.startswith("|"):
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                if not re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", lines[i].strip()):
                    rows.append(_cells(lines[i]))
                i += 1
            out.append('<table style="border-collapse:collapse">')
            for n, row in enumerate(rows):
                tag = "th" if n == 0 else "td"
                cells = "".join(f"<{tag} {_CELL_STYLE}>{_inline(c)}</{tag}>" for c in row)
                out.append(f"<tr>{cells}</tr>")
            out.append("</table>")
        elif line.startswith("- "):
            out.append("<ul>")
            while i < len(lines) and lines[i].startswith("- "):
                out.append(f"<li>{_inline(lines[i][2:])}</li>")
                i += 1
            out.append("</ul>")
        else:
            paragraph = []
            while i < len(lines) and lines[i].strip() and not re.match(r"[#|]|- ", lines[i]):
                paragraph.append(lines[i])
                i += 1
            joined = " ".join(paragraph)
            if re.fullmatch(rf"(?:{_IMAGE.pattern}\s*)+", joined):
                out.append(figures_html(joined, base))
            else:
                out.append(f"<p>{_inline(joined)}</p>")
    out.append("</div>")
    return "\n".join(out) + "\n"
