# Training stage: probe, then a chain of bounded segments (a Snakemake checkpoint), then results.
#
# rule probe:            token cache -> results/{run}/probe-results.json (status 'passed')
# checkpoint train_segment: segment n resumes results/{run}/train/last.pt (checked against
#   segment n-1's status) and writes results/{run}/segments/{n}.json last; how many segments a
#   run needs is known only at run time, so get_segment_statuses walks them until a terminal
#   status (hard cap: runs.{run}.max_segments).
# rule results:          terminal train/results.json + every segment status -> results/{run}/results.json
#
# The probe, the cache and the receipt enter the chain through ancient(): `--forcerun probe` or
# a rebuilt cache never restarts training (the trainer's identity check refuses a changed
# dataset on resume instead).
import json
import sys


def get_previous_segment(wildcards):
    """Segment n's input: the status of segment n-1 (none for the first segment)."""
    n = int(wildcards.n)
    return [] if n == 0 else f"results/{wildcards.run}/segments/{n - 1}.json"


def get_run_cache(wildcards):
    return f"{cache_dir(wildcards.run)}/cache.json"


def get_run_receipt(wildcards):
    return receipt_path(wildcards.run)


def get_trainer_args(wildcards):
    """The chesslm.segment flags of a run (shared by probe and train_segment)."""
    s = run_settings(wildcards.run)
    args = [
        f"--run-name={wildcards.run}",
        f"--cache={cache_dir(wildcards.run)}",
        f"--run-dir=results/{wildcards.run}",
        f"--integrity-receipt={receipt_path(wildcards.run)}",
        f"--model={s['model']}",
        f"--device={s['device']}",
        f"--workers={s['workers']}",
        f"--threads={s['threads_per_worker']}",
        f"--micro={s['micro']}",
        f"--accum={s['accum']}",
        f"--lr={s['lr']}",
        f"--epochs={s['epochs']}",
        f"--seed={s['seed']}",
        f"--max-seconds={s['max_seconds']}",
    ]
    for key in (
        "validation_every_steps",
        "legality_eval_games",
        "schedule_steps",
        "warmup_steps",
        "max_updates",
        "segment_updates",
    ):
        if s.get(key) is not None:
            args.append(f"--{key.replace('_', '-')}={s[key]}")
    return " ".join(args)


def get_torchrun(wildcards):
    """torchrun for the run's workers; OMP_NUM_THREADS is set per rank because Snakemake
    exports OMP_NUM_THREADS={threads} and torchrun hands it to every rank unchanged."""
    s = run_settings(wildcards.run)
    return (
        f"OMP_NUM_THREADS={s['threads_per_worker']} {sys.executable} -m torch.distributed.run"
        f" --standalone --nproc-per-node={s['workers']}"
    )


def get_segment_threads(wildcards):
    s = run_settings(wildcards.run)
    return s["workers"] * s["threads_per_worker"]


def get_segment_statuses(wildcards):
    """Input function: the status files of segments 0..k, k being the first terminal one."""
    run = wildcards.run
    cap = run_settings(run)["max_segments"]
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


rule probe:
    input:
        cache=get_run_cache,
        receipt=get_run_receipt,
    output:
        "results/{run}/probe-results.json",
    log:
        "logs/{run}/probe.log",
    threads: get_segment_threads
    params:
        torchrun=get_torchrun,
        args=get_trainer_args,
    shell:
        "{params.torchrun} -m chesslm.segment probe {params.args} --probe-out={output} > {log} 2>&1"


checkpoint train_segment:
    input:
        previous=get_previous_segment,
        probe=ancient("results/{run}/probe-results.json"),
        cache=ancient(get_run_cache),
        receipt=ancient(get_run_receipt),
    output:
        status="results/{run}/segments/{n}.json",
    log:
        "logs/{run}/train_segment/{n}.log",
    threads: get_segment_threads
    params:
        torchrun=get_torchrun,
        args=get_trainer_args,
        previous=lambda wildcards, input: (
            f"--previous-status={input.previous}" if input.previous else ""
        ),
    shell:
        "{params.torchrun} -m chesslm.segment train {params.args} --segment={wildcards.n}"
        " {params.previous} --status-out={output.status} > {log} 2>&1"


rule results:
    input:
        statuses=get_segment_statuses,
    output:
        "results/{run}/results.json",
    log:
        "logs/{run}/results.log",
    params:
        train_results="results/{run}/train/results.json",
    script:
        "../scripts/results.py"
