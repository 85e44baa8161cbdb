# Report stage: tables, figures and summary.md of a training run, for `snakemake --report`.
#
# rule summarise: results/{run}/results.json (the run is complete), its segment statuses and
#   probe results + its dataset's integrity receipt -> results/{run}/report/: the files of chesslm.report.items.ITEMS (tables, figures,
#   summary.md and summary.html), each a report() item; workflow/report/workflow.rst, the
#   report's first page, shows each run's summary.html. Beside them, validation-games.pgn:
#   the first validation games of the run's dataset (from its token cache), which the analyse
#   command that summary.md prints runs on as printed.
# Partial runs (still training, or stopped before a terminal status) are summarised outside the
# DAG, so that asking for a summary never starts training and a partial summary is never taken
# for the final one: `python -m chesslm.report.summary results/{run}` prints it (with --out DIR
# it writes the files there). Once the run completes, `summarise` writes results/{run}/report/.
#
# Build the HTML report for every run with
#   snakemake --cores 1 <get_summary_targets()>   (e.g. results/demo/report/summary.md)
#   snakemake --report report.html results/demo/report/summary.md
# --report collects report() items of the jobs upstream of its targets only, so its target
# must be a report file (or a rule whose input is get_summary_targets()), not results.json.


localrules:
    summarise,


rule summarise:
    input:
        results=RUN.results,
        # the files of the run the summary reads that a rule writes (the trainer's own
        # events, telemetry and identity have none: results.json stands for them)
        statuses=get_segment_statuses,
        probe=RUN.probe,
        receipt=get_run_receipt,
        play=get_run_play_outputs,
        outcome=get_run_outcome_outputs,  # an outcome run's figures: in its report too
        # the validation games the printed analyse command runs on (no test split in a cache)
        cache=get_run_cache,
    output:
        **{
            item.name: report(
                RUN.report_file(item.file),
                caption=f"../report/{item.caption}",
                category=item.category,
                subcategory="{run}",
                labels={"run": "{run}", "item": item.label},
            )
            for item in REPORT_ITEMS
        },
        games=RUN.report_file(SAMPLE_GAMES),
    log:
        "logs/summarise/{run}.log",
    wildcard_constraints:
        run=r"[A-Za-z0-9_-]+",
    params:
        changes=get_run_changes,
        max_segments=of_run(lambda s: s.max_segments),
    script:
        "../scripts/summarise.py"
