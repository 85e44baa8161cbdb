# Input functions only. The config is checked once, here, by chesslm.config (its refusal is the
# console's one line), which also gives the typed settings and the output tables the rules
# name; the run and dataset folders are chesslm.layout's; how a run's ranks start and what its
# jobs ask a scheduler for is chesslm.train.launch. None of them imports torch.
import contextlib
import dataclasses
import io
import json
import math
import os
import shlex
import sys
from pathlib import Path

from chesslm import commands
from chesslm import config as chesslm_config
from chesslm import watch
from chesslm.config import (
    COMPARE_FIGURES,
    META_COLUMNS,
    PLAY_FILES,
    PLAY_OUTCOME,
    PLAY_OUTPUTS,
    REPORT_ITEMS,
)
from chesslm.files import UnreadableFileError
from chesslm.layout import DatasetDir, RunDir, compare_file, ladder_file
from chesslm.report import staleness
from chesslm.report.items import SAMPLE_GAMES
from chesslm.train import launch
from chesslm.train import status as segment_status


def command_line():
    """The arguments of the snakemake command that parses this, as snakemake's parser reads
    them (it hands the targets to the workflow only after parsing); None when they do not.
    """
    from snakemake.cli import get_argument_parser

    try:
        with contextlib.redirect_stderr(io.StringIO()):
            return get_argument_parser().parse_args(sys.argv[1:])
    except (SystemExit, Exception):
        return None


ARGS = command_line()
# a target swallowed by an option of several values: one line, not a silent other plan
if ARGS and (error := commands.swallowed(ARGS.forcerun or (), ARGS.configfile or ())):
    sys.exit(error)

try:
    # a SystemExit passes snakemake's handlers, which print any Exception (WorkflowError
    # included) with its type, "in file ...", and the traceback's frames: one line, status 1
    SETTINGS = chesslm_config.load(config)
except chesslm_config.ConfigError as error:
    sys.exit(str(error))

# keys set to no effect: said on every invocation, -n too
for line in SETTINGS.warnings:
    print(f"WARNING: {line}", file=sys.stderr)

# the commands jobs print (a seal's "rebuild with:") name this invocation's config files
commands.export_configfiles(workflow.overwrite_configfiles)


# a target of a run (dataset, comparison) that the config lacks: one line, not a rule's
# MissingRuleException nor an input function's KeyError
for target in (ARGS.targets if ARGS else None) or ():
    if error := SETTINGS.target_error(target):
        sys.exit(error)

DATASETS = sorted(SETTINGS.datasets)
RUNS = sorted(SETTINGS.runs)
LADDERS = sorted(SETTINGS.ladders)
COMPARISONS = sorted(SETTINGS.comparisons)
RUN = RunDir.of("{run}")  # the rules' patterns
DATASET = DatasetDir.of("{dataset}")

# convert and token_cache use every core Snakemake gives them: a rule's threads above --cores
# are scaled down to --cores. On a cluster the slurm profile sets their CPUs (set-threads).
DATA_THREADS = 64
# every job ends with the snakemake that parses this, the one that runs the jobs (here, or
# the job's own snakemake on a Slurm node): scripts call chesslm.watch.guard(), shell jobs
# run under `python -m chesslm.watch --`
os.environ[watch.ENV] = str(os.getpid())
# the trainer rules' wrapper: each attempt's log kept, a failure's cause on the console; the
# whole of it guarded by chesslm.watch
LOGGED = (
    f"{shlex.quote(sys.executable)} -m chesslm.watch -- bash"
    f" {shlex.quote(str(Path(workflow.basedir) / 'workflow/scripts/logged.sh'))}"
)


wildcard_constraints:
    dataset="|".join(DATASETS) or "NONE",
    ladder="|".join(LADDERS) or "NONE",
    run="|".join(RUNS) or "NONE",
    n=r"\d+",


def of_run(value):
    """An input function: ``value`` of the job's run's RunSettings (threads, resources)."""

    def function(wildcards):
        return value(SETTINGS.runs[wildcards.run])

    return function


def of_play(value):
    """An input function: ``value`` of the job's run's PlaySettings (runs.NAME.play)."""

    def function(wildcards):
        return value(SETTINGS.plays[wildcards.run])

    return function


def of_dataset(value):
    """An input function: ``value`` of the job's chesslm.config.Dataset."""

    def function(wildcards):
        return value(SETTINGS.datasets[wildcards.dataset])

    return function


def run_dataset(run):
    """The folder of the dataset run ``run`` trains on."""
    return DatasetDir.of(SETTINGS.runs[run].dataset)


def get_data_runtime(wildcards):
    """Minutes for a data rule: 15 plus 1 per 300 MB of the dataset's PGN input (convert
    measured >= 10,000 games/s per core, about 3 MB/s of .pgn.zst)."""
    inputs = SETTINGS.datasets[wildcards.dataset].inputs
    size_mb = sum(os.path.getsize(p) for p in inputs if os.path.exists(p)) / 2**20
    return 15 + math.ceil(size_mb / 300)


# --- training -------------------------------------------------------------------------


def get_run_cache(wildcards):
    return run_dataset(wildcards.run).cache_meta


def get_run_receipt(wildcards):
    return run_dataset(wildcards.run).receipt


def get_run_cache(wildcards):
    """The token cache's cache.json of the dataset run ``run`` trains on."""
    return run_dataset(wildcards.run).cache_meta


def get_run_checkpoint(wildcards):
    """Input function of the rules that load a run's best.pt (play, score, analyse, export):
    the file once results.json is there (the segments write both; before, nothing: the job's
    own load verifies it), verified at plan time, so that a damaged one is one line before
    Snakemake removes the good outputs of the job that would read it, and a replaced one makes
    its readers run again."""
    run = RunDir.of(wildcards.run)
    if not os.path.exists(run.results):
        return []
    try:
        return str(segment_status.planned_checkpoint(Path(run.best)))
    except UnreadableFileError as error:
        sys.exit(str(error))  # one line, as the config's refusals


def get_previous_segment(wildcards):
    """Segment n's input: the status of segment n-1 (none for the first segment)."""
    n = int(wildcards.n)
    return [] if n == 0 else RunDir.of(wildcards.run).segment(n - 1)


def get_previous_status_flag(wildcards):
    """The trainer's --previous-status flag for segment n (none for the first segment)."""
    previous = get_previous_segment(wildcards)
    return f"--previous-status={previous}" if previous else ""


def get_trainer_args(wildcards):
    """The chesslm.train.segment flags of a run (shared by probe and train_segment)."""
    run = wildcards.run
    dataset = run_dataset(run)
    args = [
        f"--run-name={run}",
        f"--cache={dataset.cache}",
        f"--run-dir={RunDir.of(run).path}",
        f"--integrity-receipt={dataset.receipt}",
        *SETTINGS.runs[run].to_args(),
    ]
    return shlex.join(args)


def get_segment_statuses(wildcards):
    """Input function: the status files of segments 0..k, k being the first terminal one,
    asked for after the probe (a checkpoint: this waits for it when it runs, or reruns).
    """
    run = wildcards.run
    checkpoints.probe.get(run=run)
    cap = SETTINGS.runs[run].max_segments
    paths = []
    for n in range(cap):
        path = checkpoints.train_segment.get(run=run, n=n).output.status
        paths.append(path)
        try:
            if segment_status.planned(Path(path)).get("terminal"):
                return paths
        except UnreadableFileError as error:
            sys.exit(str(error))  # one line, as the config's refusals
    raise ValueError(
        f"run {run}: no terminal status after runs.{run}.max_segments={cap} segments"
        f" (see {RunDir.of(run).segments}/); raise max_segments to continue"
    )


def get_launcher(wildcards, resources):
    """The shell prefix that starts the run's ranks under the job's deadline (launch.launcher)."""
    return launch.launcher(
        SETTINGS.runs[wildcards.run],
        run=wildcards.run,
        runtime_min=int(resources.runtime),
        nodes=int(resources.get("nodes", 1) or 1),
    )


# --- play evaluation (workflow/rules/play.smk) and scores (compare.smk) ----------------


def get_play_gpus(wildcards):
    return 1 if SETTINGS.play_device(wildcards.run) == "cuda" else 0


def get_play_device(wildcards):
    """The device of jobs on the run's play device (play, analyse, score): refused at plan
    time if it is cuda and jobs are about to run here without CUDA (the job would end in a
    traceback); a dry run (-n) still plans it, as one plans a GPU run on a laptop.
    """
    device = SETTINGS.play_device(wildcards.run)
    if workflow.local_exec and not workflow.dryrun and launch.no_cuda_here(device):
        key = "play.device" if SETTINGS.plays[wildcards.run].device else "device"
        sys.exit(
            f"config: runs.{wildcards.run}.{key} is cuda, but torch sees no CUDA device on"
            " this machine, where the jobs run; use cpu here, or a cluster profile"
        )
    return device


def get_play_settings_json(wildcards):
    """The run's play object (defaults applied) as the JSON rule play's script reads."""
    return json.dumps(SETTINGS.plays[wildcards.run].as_dict(), sort_keys=True)


def get_play_caches(wildcards):
    """Per dataset that play reads: its token cache's cache.json."""
    names = SETTINGS.play_datasets(wildcards.run)
    return {name: DatasetDir.of(name).cache_meta for name in names}


def get_play_cache_files(wildcards):
    return list(get_play_caches(wildcards).values())


def get_play_runtime(wildcards):
    """Minutes: every part's budget plus model load, tables and figures."""
    play = SETTINGS.plays[wildcards.run]
    seconds = sum(play.part(part).seconds for part in chesslm_config.PLAY_PARTS)
    return math.ceil((seconds + 300) / 60)


def get_play_ladder(wildcards):
    """The ladder file whose anchors the run's model plays (none without games): the engine is
    looked up here, when a plan needs the ladder, never at parse time."""
    elo = SETTINGS.plays[wildcards.run].elo
    if elo.games_per_anchor == 0:
        return []
    try:
        return SETTINGS.ladder_file(elo.ladder)
    except chesslm_config.ConfigError as error:
        sys.exit(str(error))


def get_run_play_outputs(wildcards):
    """The play records the run's report and export show (none when play.enabled is false)."""
    if not SETTINGS.plays[wildcards.run].enabled:
        return []
    files = chesslm_config.PLAY_FILES
    run = RunDir.of(wildcards.run)
    return [run.play_file(files[name]) for name in chesslm_config.PLAY_RECORDS.values()]


def get_run_outcome_outputs(wildcards):
    """Rule outcome_figures' files, which the run's summary asks for (so the report shows
    them) when its play evaluation runs and it has an outcome head; none otherwise, so a
    run without the head plans as before."""
    run = wildcards.run
    if not (SETTINGS.plays[run].enabled and SETTINGS.runs[run].outcome):
        return []
    return [RunDir.of(wildcards.run).play_file(out.file) for out in PLAY_OUTCOME]


# --- Elo ladders (workflow/rules/ladder.smk) --------------------------------------------


def get_ladder_settings_json(wildcards):
    settings = SETTINGS.ladders[wildcards.ladder].settings
    return json.dumps(settings.as_dict(), sort_keys=True)


def get_ladder_engine(wildcards):
    try:
        return SETTINGS.ladder_engine(wildcards.ladder)
    except chesslm_config.ConfigError as error:
        sys.exit(str(error))


# --- comparisons (workflow/rules/compare.smk) -------------------------------------------


def get_compare_scores(wildcards, name="positions.npz"):
    c = SETTINGS.comparisons[wildcards.name]
    return [RunDir.of(run).scores_file(c.dataset, name) for run in c.runs]


def get_compare_score_records(wildcards):
    """Each run's scores.json, which compare reads beside its table: an input too, so that a
    missing one reruns score."""
    return get_compare_scores(wildcards, "scores.json")


def get_compare_results(wildcards):
    return [RunDir.of(run).results for run in SETTINGS.comparisons[wildcards.name].runs]


def get_compare_manifests(wildcards):
    return [
        run_dataset(run).manifest for run in SETTINGS.comparisons[wildcards.name].runs
    ]


def get_compare_settings_json(wildcards):
    return json.dumps(SETTINGS.comparisons[wildcards.name].as_dict(), sort_keys=True)


def get_compare_runs_json(wildcards):
    """Per run: its dataset, its results and manifest paths, games per optimizer update."""
    out = {}
    for run in SETTINGS.comparisons[wildcards.name].runs:
        s = SETTINGS.runs[run]
        out[run] = {
            "dataset": s.dataset,
            "results": RunDir.of(run).results,
            "manifest": DatasetDir.of(s.dataset).manifest,
            "games_per_update": s.micro * s.accum * s.workers,
        }
    return json.dumps(out, sort_keys=True)


# --- reports and targets -----------------------------------------------------------------


def get_summary_targets(runs=None):
    """summary.md of each run (default: every run in config['runs']); one file pulls all."""
    return [RunDir.of(run).report_file("summary.md") for run in (runs or RUNS)]


def get_final_outputs(wildcards=None):
    """What `snakemake` with no target builds: every dataset's cache, every run's summary, less
    the runs this machine cannot run when jobs run here (a cuda run without CUDA), which it
    names in one line. On a cluster executor every run stays."""
    outputs = [DatasetDir.of(d).cache_meta for d in DATASETS]
    runs = RUNS
    if workflow.local_exec:
        reasons = {run: launch.left_out_here(SETTINGS.runs[run]) for run in RUNS}
        left = [f"{run} ({why})" for run, why in reasons.items() if why]
        if left:
            print(f"left out: {', '.join(left)}", file=sys.stderr)
        runs = [run for run in RUNS if not reasons[run]]
    outputs += get_summary_targets(runs) if runs else []
    return outputs


def _warn_changed_runs():
    """A finished run is not retrained when its settings change (rerun-triggers: mtime,
    input), so say so loudly on every invocation, -n included; summary.md opens with the same
    lines. Each run's changes, read once: a run that has not trained reads one missing file.
    """
    changes = {}
    for run in RUNS:
        s = SETTINGS.runs[run]
        changes[run] = staleness.run_changes(
            run,
            RunDir.of(run).path,
            dataclasses.asdict(s),
            dataset=s.dataset,
            dataset_dir=DatasetDir.of(s.dataset).path,
            dataset_settings=SETTINGS.datasets[s.dataset].settings.as_dict(),
        )
        if changes[run]:
            print(f"WARNING: {staleness.warning(run, changes[run])}", file=sys.stderr)
    return changes


RUN_CHANGES = _warn_changed_runs()


def get_run_changes(wildcards):
    return RUN_CHANGES.get(wildcards.run, [])
