# Helpers only: config validation, settings with defaults, paths and input functions. A run's
# settings are chesslm.train.settings.RunSettings; how its ranks start and what its jobs ask a
# scheduler for is chesslm.train.launch.
import dataclasses
import functools
import json
import math
import os
import shlex
import sys
from pathlib import Path

import yaml
from snakemake.utils import validate

from chesslm.compare.settings import Comparison
from chesslm.data import settings as chesslm_dataset
from chesslm.data.metadata import COLUMNS as META_COLUMNS
from chesslm.play import ladder as chesslm_ladder
from chesslm.play.anchors import find_engine
from chesslm.play.outputs import FILES as PLAY_FILES
from chesslm.play.outputs import PARTS as PLAY_PARTS
from chesslm.play.outputs import RECORDS as PLAY_RECORDS
from chesslm.report import staleness
from chesslm.report.items import ITEMS as REPORT_ITEMS  # report.smk's outputs
from chesslm.train import launch
from chesslm.train import prefix as chesslm_prefix
from chesslm.model.presets import config_for as model_config
from chesslm.train.settings import RunSettings, legality_request_error, schema_error


def _refuse(message):
    """Stop at parse time with ``message`` as the console's one line, exit status 1: a
    SystemExit passes snakemake's handlers, which print any Exception (WorkflowError included)
    with its type, "in file ...", and the traceback's frames."""
    sys.exit(message)


def _check_schema():
    """One line naming the first bad key; then snakemake's validate fills in the defaults."""
    schema_path = Path(workflow.basedir) / "workflow/schemas/config.schema.yaml"
    error = schema_error(yaml.safe_load(schema_path.read_text()), config)
    if error:
        _refuse(f"config: {error}")


_check_schema()
validate(config, schema="../schemas/config.schema.yaml")

DATASETS = sorted(config["datasets"])
RUNS = sorted(config.get("runs", {}))
LADDERS = sorted(config["ladders"])


def _run_settings():
    """Every run's RunSettings, after the checks the schema cannot express (one line naming
    the key)."""
    runs = {}
    for run, settings in config.get("runs", {}).items():
        if settings["dataset"] not in config["datasets"]:
            _refuse(
                f"config: runs.{run}.dataset is {settings['dataset']!r}, "
                f"which is not a dataset (known: {', '.join(DATASETS)})"
            )
        try:
            runs[run] = RunSettings.from_config(settings, name=run)
        except ValueError as error:
            _refuse(f"config: {error}")
    return runs


def _check_datasets():
    """The filters' cross-key rules (one line naming the key)."""
    try:
        chesslm_dataset.check_config(config["datasets"])
    except ValueError as error:
        _refuse(str(error))


_check_datasets()
SETTINGS = _run_settings()


def _check_contexts():
    """A dataset's context (its longest game) within the model context of every run that
    trains on it: the cache would hold games the model cannot read (one line)."""
    for run, settings in SETTINGS.items():
        context = config["datasets"][settings.dataset]["context"]
        model_context = model_config(settings.model).block_size
        if context > model_context:
            _refuse(
                f"config: datasets.{settings.dataset}.context is {context}, more than the"
                f" model context of runs.{run} (model {settings.model}: {model_context} tokens)"
            )
        # the rating prefix makes every game longer: its longest game's inputs, exactly
        error = chesslm_prefix.context_error(
            settings.conditioning,
            context=context,
            model_context=model_context,
            key=f"runs.{run}.conditioning",
        )
        if error:
            _refuse(f"config: {error} (datasets.{settings.dataset}.context)")


_check_contexts()


def _check_legality_requests():
    """A run's legality_eval_games within its dataset's legality_games, and within what its
    token cache holds when the cache exists for the same legality_games (one line)."""
    for run, settings in SETTINGS.items():
        asked = settings.legality_eval_games
        bound = config["datasets"][settings.dataset]["legality_games"]
        if asked is None:
            continue
        if asked > bound:
            _refuse(
                f"config: runs.{run}.legality_eval_games is {asked}, more than"
                f" datasets.{settings.dataset}.legality_games ({bound}), the validation games"
                " the token cache gives legality tables"
            )
        path = Path(f"{dataset_dir(settings.dataset)}/token-cache/cache.json")
        if not path.exists():
            continue  # the segment checks it when it starts
        info = json.loads(path.read_text())
        held = info.get("legality_games", {})
        if held.get("bound") != bound:
            continue  # built for another legality_games: it may be rebuilt before the run
        error = legality_request_error(
            asked,
            available=held["games"],
            validation_games=info["splits"]["validation"]["games"],
            key=f"runs.{run}.legality_eval_games",
            cache=path.parent,
        )
        if error:
            _refuse(f"config: {error}")


# convert and token_cache use every core Snakemake gives them: a rule's threads above --cores
# are scaled down to --cores. On a cluster the slurm profile sets their CPUs (set-threads).
DATA_THREADS = 64
# the trainer rules' wrapper: each attempt's log kept, a failure's cause on the console, and
# the trainer stopped if snakemake is gone (the rule's shell is snakemake's child: $PPID)
LOGGED = (
    f"{launch.WATCH_ENV}=$PPID bash"
    f" {shlex.quote(str(Path(workflow.basedir) / 'workflow/scripts/logged.sh'))}"
)


wildcard_constraints:
    dataset="|".join(DATASETS) or "NONE",
    ladder="|".join(LADDERS) or "NONE",
    run="|".join(RUNS) or "NONE",
    n=r"\d+",


def dataset_settings(name):
    """The conversion settings of a dataset (schema defaults already applied)."""
    return chesslm_dataset.Settings.from_config(config["datasets"][name])


def get_dataset_settings(wildcards):
    return dataset_settings(wildcards.dataset)


def get_legality_games(wildcards):
    """How many validation games the token cache gives legality tables (schema default)."""
    return config["datasets"][wildcards.dataset]["legality_games"]


def get_pgn_inputs(wildcards):
    return config["datasets"][wildcards.dataset]["pgn"]


def dataset_dir(name):
    return f"results/datasets/{name}"


def run_settings(run):
    """A run's RunSettings (every default filled in)."""
    return SETTINGS[run]


def run_dataset(run):
    return run_settings(run).dataset


def cache_dir(run):
    return f"{dataset_dir(run_dataset(run))}/token-cache"


def receipt_path(run):
    return f"{dataset_dir(run_dataset(run))}/integrity-receipt.json"


# --- training -------------------------------------------------------------------------


def get_previous_segment(wildcards):
    """Segment n's input: the status of segment n-1 (none for the first segment)."""
    n = int(wildcards.n)
    return [] if n == 0 else f"results/{wildcards.run}/segments/{n - 1}.json"


def get_previous_status_flag(wildcards):
    """The trainer's --previous-status flag for segment n (none for the first segment)."""
    previous = get_previous_segment(wildcards)
    return f"--previous-status={previous}" if previous else ""


def get_run_cache(wildcards):
    return f"{cache_dir(wildcards.run)}/cache.json"


def get_run_receipt(wildcards):
    return receipt_path(wildcards.run)


def get_trainer_args(wildcards):
    """The chesslm.train.segment flags of a run (shared by probe and train_segment)."""
    run = wildcards.run
    args = [
        f"--run-name={run}",
        f"--cache={cache_dir(run)}",
        f"--run-dir=results/{run}",
        f"--integrity-receipt={receipt_path(run)}",
        *run_settings(run).to_args(),
    ]
    return shlex.join(args)


def get_segment_threads(wildcards):
    return launch.threads(run_settings(wildcards.run))


def get_segment_statuses(wildcards):
    """Input function: the status files of segments 0..k, k being the first terminal one,
    asked for after the probe (a checkpoint: this waits for it when it runs, or reruns).
    """
    run = wildcards.run
    checkpoints.probe.get(run=run)
    cap = run_settings(run).max_segments
    paths = []
    for n in range(cap):
        path = checkpoints.train_segment.get(run=run, n=n).output.status
        paths.append(path)
        with open(path) as fh:
            if json.load(fh).get("terminal"):
                return paths
    raise ValueError(
        f"run {run}: no terminal status after runs.{run}.max_segments={cap} segments"
        f" (see results/{run}/segments/); raise max_segments to continue"
    )


# Cluster resources of probe and train_segment (docs/slurm.md), from chesslm.train.launch.


def get_segment_gpus(wildcards):
    return launch.gpus(run_settings(wildcards.run))


def get_segment_cpus_per_gpu(wildcards):
    return launch.cpus_per_gpu(run_settings(wildcards.run))


def get_segment_mem_mb(wildcards):
    return launch.mem_mb(run_settings(wildcards.run))


def get_segment_runtime(wildcards):
    return launch.runtime_minutes(run_settings(wildcards.run))


def get_data_runtime(wildcards):
    """Minutes for a data rule: 15 plus 1 per 300 MB of the dataset's PGN input (convert
    measured >= 10,000 games/s per core, about 3 MB/s of .pgn.zst)."""
    pgn = config["datasets"][wildcards.dataset]["pgn"]
    size_mb = sum(os.path.getsize(p) for p in pgn if os.path.exists(p)) / 2**20
    return 15 + math.ceil(size_mb / 300)


def get_launcher(wildcards, resources):
    """The shell prefix that starts the run's ranks under the job's deadline (launch.launcher)."""
    return launch.launcher(
        run_settings(wildcards.run),
        run=wildcards.run,
        runtime_min=int(resources.runtime),
        nodes=int(resources.get("nodes", 1) or 1),
    )


# --- play evaluation (workflow/rules/play.smk) ----------------------------------------


def play_settings(run):
    return run_settings(run).play


def play_datasets(run):
    """The datasets whose validation split a run's play evaluation reads (default: its own)."""
    names = play_settings(run)["datasets"] or [run_dataset(run)]
    for name in names:
        if name not in config["datasets"]:
            _refuse(
                f"config: runs.{run}.play.datasets names {name!r}, which is not a dataset"
                f" (known: {', '.join(DATASETS)})"
            )
    return names


def _check_play_ladder(run):
    """The ladder a run's model plays names one under ``ladders``."""
    name = play_settings(run)["elo"]["ladder"]
    if name not in config["ladders"]:
        _refuse(
            f"config: runs.{run}.play.elo.ladder is {name!r}, which is not a ladder"
            f" (known: {', '.join(LADDERS) or 'none'})"
        )


# at parse time, before any job
for _run in RUNS:
    play_datasets(_run)
    _check_play_ladder(_run)
_check_legality_requests()


def play_device(run):
    return play_settings(run)["device"] or run_settings(run).device


def get_play_threads(wildcards):
    """Rule play's threads, which its torch uses: more than one is slower on a loaded machine
    (BENCHMARKS.md)."""
    return play_settings(wildcards.run)["threads"]


def get_play_device(wildcards):
    return play_device(wildcards.run)


def get_play_gpus(wildcards):
    return 1 if play_device(wildcards.run) == "cuda" else 0


def get_play_settings_json(wildcards):
    """The run's play object (defaults applied) as the JSON chesslm.play.evaluate reads."""
    return json.dumps(play_settings(wildcards.run), sort_keys=True)


def get_play_caches(wildcards):
    return {
        name: f"{dataset_dir(name)}/token-cache/cache.json"
        for name in play_datasets(wildcards.run)
    }


def get_play_cache_files(wildcards):
    return list(get_play_caches(wildcards).values())


def get_play_runtime(wildcards):
    """Minutes: every part's budget plus model load, tables and figures."""
    p = play_settings(wildcards.run)
    seconds = sum(p[part]["seconds"] for part in PLAY_PARTS)
    return math.ceil((seconds + 300) / 60)


def get_play_ladder(wildcards):
    """The ladder file whose anchors the run's model plays (none without games)."""
    elo = play_settings(wildcards.run)["elo"]
    return ladder_path(elo["ladder"]) if elo["games_per_anchor"] > 0 else []


def get_run_play_outputs(wildcards):
    """Input function: the run's play files, which its summary reports."""
    return get_play_outputs(wildcards.run)


def get_play_outputs(run):
    """The play records the run's report shows (none when play.enabled is false)."""
    if not play_settings(run)["enabled"]:
        return []
    return [f"results/{run}/play/{PLAY_FILES[name]}" for name in PLAY_RECORDS.values()]


# --- export (workflow/rules/export.smk) -------------------------------------------------


def get_run_manifest(wildcards):
    return f"{dataset_dir(run_dataset(wildcards.run))}/manifest.json"


def get_best_checkpoint(wildcards):
    """The checkpoint rule export hands over (written by the run's segments, which
    results.json follows)."""
    return f"results/{wildcards.run}/train/best.pt"


# --- Elo ladders (workflow/rules/ladder.smk) --------------------------------------------


def ladder_settings(name):
    """``ladders.NAME`` as chesslm.play.ladder.LadderSettings (one line naming a bad key)."""
    try:
        return chesslm_ladder.settings_from_config(config["ladders"][name], name)
    except ValueError as error:
        _refuse(f"config: {error}")


for _ladder in LADDERS:  # at parse time, before any job
    ladder_settings(_ladder)


@functools.cache
def _engine(name, key):
    """The engine's path and build (sha256, UCI id name): once per invocation."""
    try:
        path = find_engine(name, key)
    except FileNotFoundError as error:
        _refuse(f"config: {error}")
    return path, chesslm_ladder.engine_identity(path)


def ladder_engine(name):
    return _engine(config["ladders"][name]["engine"], f"ladders.{name}.engine")


def ladder_path(name):
    """The ladder's file: its path holds the key of its settings and engine build, so a new
    build or a changed setting asks for a new ladder (the profile's rerun-triggers are mtime
    and input: changed params alone would rerun nothing)."""
    identity = ladder_engine(name)[1]
    return chesslm_ladder.ladder_path(name, ladder_settings(name), identity)


def get_ladder_settings_json(wildcards):
    return json.dumps(ladder_settings(wildcards.ladder).as_dict(), sort_keys=True)


def get_ladder_engine(wildcards):
    return ladder_engine(wildcards.ladder)[0]


def get_ladder_threads(wildcards):
    return config["ladders"][wildcards.ladder]["threads"]


# --- comparisons (workflow/rules/compare.smk) -------------------------------------------


def _comparisons():
    """Every comparison's settings, checked at parse time (one line naming the key)."""
    out = {}
    for name, raw in config.get("comparisons", {}).items():
        try:
            out[name] = Comparison.from_config(name, raw, runs=RUNS, datasets=DATASETS)
        except ValueError as error:
            _refuse(f"config: {error}")
        bounds = {run: play_settings(run)["match"]["games"] for run in out[name].runs}
        if (
            len(set(bounds.values())) > 1
        ):  # rule score scores that many games of each run
            listed = ", ".join(f"{run}: {games}" for run, games in bounds.items())
            _refuse(
                f"config: comparisons.{name}.runs score different numbers of validation games"
                f" (runs.NAME.play.match.games: {listed}); a comparison is on the same positions"
            )
    return out


COMPARE = _comparisons()
COMPARISONS = sorted(COMPARE)


def get_score_cache(wildcards):
    """The token cache whose validation split rule score reads (never a test split)."""
    return f"{dataset_dir(wildcards.dataset)}/token-cache/cache.json"


def get_score_batch_tokens(wildcards):
    return play_settings(wildcards.run)["match"]["batch_tokens"]


def get_score_games(wildcards):
    """The run's move-matching bound (play.match.games) bounds its scores too (None: all)."""
    return play_settings(wildcards.run)["match"]["games"]


def get_compare_scores(wildcards):
    c = COMPARE[wildcards.name]
    return [f"results/{run}/scores/{c.dataset}/positions.npz" for run in c.runs]


def get_compare_results(wildcards):
    return [f"results/{run}/results.json" for run in COMPARE[wildcards.name].runs]


def get_compare_manifests(wildcards):
    runs = COMPARE[wildcards.name].runs
    return [f"{dataset_dir(run_dataset(run))}/manifest.json" for run in runs]


def get_compare_settings_json(wildcards):
    return json.dumps(COMPARE[wildcards.name].as_dict(), sort_keys=True)


def get_compare_runs_json(wildcards):
    """Per run: its dataset, its results and manifest paths, games per optimizer update."""
    out = {}
    for run in COMPARE[wildcards.name].runs:
        s = run_settings(run)
        out[run] = {
            "dataset": s.dataset,
            "results": f"results/{run}/results.json",
            "manifest": f"{dataset_dir(s.dataset)}/manifest.json",
            "games_per_update": s.micro * s.accum * s.workers,
        }
    return json.dumps(out, sort_keys=True)


# --- reports and targets -----------------------------------------------------------------


def get_summary_targets(runs=None):
    """summary.md of each run (default: every run in config['runs']); one file pulls all."""
    return [f"results/{run}/report/summary.md" for run in (runs or RUNS)]


def get_final_outputs(wildcards=None):
    """What `snakemake` with no target builds: every dataset's cache, every run's summary, less
    the runs this machine cannot run when jobs run here (a cuda run without CUDA), which it
    names in one line. On a cluster executor every run stays."""
    outputs = [f"{dataset_dir(d)}/token-cache/cache.json" for d in DATASETS]
    runs = RUNS
    if workflow.local_exec:
        reasons = {run: launch.left_out_here(run_settings(run)) for run in RUNS}
        left = [f"{run} ({why})" for run, why in reasons.items() if why]
        if left:
            print(f"left out: {', '.join(left)}", file=sys.stderr)
        runs = [run for run in RUNS if not reasons[run]]
    outputs += get_summary_targets(runs) if runs else []
    return outputs


def run_changes(run):
    """What changed since a finished run trained (chesslm.report.staleness): none if nothing."""
    return staleness.run_changes(
        run,
        f"results/{run}",
        dataclasses.asdict(run_settings(run)),
        dataset=run_dataset(run),
        dataset_dir=dataset_dir(run_dataset(run)),
        dataset_settings=dataset_settings(run_dataset(run)).as_dict(),
    )


def _warn_changed_runs():
    """A finished run is not retrained when its settings change (rerun-triggers: mtime,
    input), so say so loudly on every invocation, -n included; summary.md opens with the same
    lines. Each run's changes, read once."""
    changes = {run: run_changes(run) for run in RUNS}
    for run, lines in changes.items():
        if lines:
            print(f"WARNING: {staleness.warning(run, lines)}", file=sys.stderr)
    return changes


RUN_CHANGES = _warn_changed_runs()


def get_run_changes(wildcards):
    return RUN_CHANGES.get(wildcards.run, [])


def get_max_segments(wildcards):
    return run_settings(wildcards.run).max_segments
