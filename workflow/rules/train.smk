# Training stage: probe, then a chain of bounded segments (a Snakemake checkpoint), then results.
#
# checkpoint probe:      token cache -> results/{run}/probe-results.json (status 'passed')
# checkpoint train_segment: segment n resumes results/{run}/train/last.pt (checked against
#   segment n-1's status) and writes results/{run}/segments/{n}.json last; how many segments a
#   run needs is known only at run time, so get_segment_statuses walks them until a terminal
#   status (hard cap: runs.{run}.max_segments).
# rule results:          terminal train/results.json + every segment status -> results/{run}/results.json
#
# Both training rules start their ranks with chesslm.train.launch's command (torchrun, or one
# per node under srun) and pass the run's RunSettings as flags (get_trainer_args).
#
# The probe is a checkpoint, and no segment takes it (or the cache, or the receipt) as an input:
# results' input function asks for the probe first (get_segment_statuses), so it runs, and
# reruns, before any segment, yet `--forcerun probe`, a probe killed and rerun, or a rebuilt
# cache never restarts training (the trainer's identity check refuses a changed dataset on
# resume instead). The segments used to take them through ancient(), but Snakemake 9.27 then
# drops the unfinished segments when the probe reruns and reports "done" without training
# (a forced or incomplete job masks every job downstream of it, and an ancient() edge then
# never marks them: DAG.update_needrun; a three-rule reproduction is in docs/snakemake.md).
#
# Both trainer rules run under workflow/scripts/logged.sh: the log is appended to, one
# attempt after another, and a failure's one-line cause reaches snakemake's console.


checkpoint probe:
    input:
        cache=get_run_cache,
        receipt=get_run_receipt,
    output:
        RUN.probe,
    log:
        "logs/{run}/probe.log",
    threads: of_run(launch.threads)
    resources:
        gpu=of_run(launch.gpus),
        cpus_per_gpu=of_run(launch.cpus_per_gpu),
        mem_mb=of_run(launch.mem_mb),
        runtime=of_run(launch.runtime_minutes),
    params:
        logged=LOGGED,
        torchrun=get_launcher,
        args=get_trainer_args,
    shell:
        "{params.logged} {log:q} env {params.torchrun} -m chesslm.train.segment probe {params.args}"
        " --probe-out={output}"


checkpoint train_segment:
    input:
        previous=get_previous_segment,
    output:
        status=RUN.segment("{n}"),
    log:
        "logs/{run}/train_segment/{n}.log",
    threads: of_run(launch.threads)
    resources:
        gpu=of_run(launch.gpus),
        cpus_per_gpu=of_run(launch.cpus_per_gpu),
        mem_mb=of_run(launch.mem_mb),
        runtime=of_run(launch.runtime_minutes),
    params:
        logged=LOGGED,
        torchrun=get_launcher,
        args=get_trainer_args,
        previous=get_previous_status_flag,
        probe=RUN.probe,
    shell:
        "{params.logged} {log:q} env {params.torchrun} -m chesslm.train.segment train {params.args}"
        " --segment={wildcards.n} {params.previous} --probe-results={params.probe:q}"
        " --status-out={output.status}"


localrules:
    results,


rule results:
    input:
        statuses=get_segment_statuses,
    output:
        RUN.results,
    log:
        "logs/{run}/results.log",
    params:
        train_results=RUN.train_results,
    script:
        "../scripts/results.py"
