# Play stage: move-matching, free-running legality, Elo on a ladder and counterfactual ratings
# (a rating-conditioned model) of a run's best.pt
# (chesslm/play; config/README.md, section "play").
#
# rule play: results/{run}/results.json (a terminal status) + its train/best.pt (verified at
#   plan time: common.smk get_run_checkpoint) + the token caches of the datasets
#   evaluated (validation splits only) + the ladder of play.elo.ladder (rule ladder; none
#   without games) -> results/{run}/play/: the files of
#   chesslm.record.play_files.OUTPUTS (each part's record, tables and figure; those with a caption
#   are report() items). Bounded by play.*.seconds; after a budget stop the work in progress
#   stays in results/{run}/play/state/ and the next job (`--forcerun play`) resumes it; any
#   other job, a forced rerun of a finished evaluation included, measures afresh.
#
# rule outcome_figures: results/{run}/play/move-match.json -> results/{run}/play/: the files of
#   chesslm.record.play_files.OUTCOME (the outcome head's table and two figures, report() items).
#   Only a run with `outcome: true` asks for them (its summary's input): a rule's outputs
#   cannot differ by run, so they are not rule play's.


localrules:
    outcome_figures,


rule play:
    input:
        results=RUN.results,
        checkpoint=get_run_checkpoint,
        caches=get_play_cache_files,
        ladder=get_play_ladder,
    output:
        **{
            out.name: (
                report(
                    RUN.play_file(out.file),
                    caption=f"../report/{out.caption}",
                    category="Play",
                    subcategory="{run}",
                    labels={"run": "{run}", "item": out.label},
                )
                if out.in_report
                else RUN.play_file(out.file)
            )
            for out in PLAY_OUTPUTS
        },
    log:
        "logs/{run}/play.log",
    wildcard_constraints:
        run=r"[A-Za-z0-9_-]+",
    # the job's cores (runs.NAME.play.threads, default 1): torch and preparing games (prepare)
    threads: of_play(lambda p: p.threads)
    resources:
        gpu=get_play_gpus,
        mem_mb=8000,
        runtime=get_play_runtime,
    params:
        settings=get_play_settings_json,
        caches=get_play_caches,
        device=get_play_device,
    script:
        "../scripts/play.py"


rule outcome_figures:
    input:
        record=RUN.play_file(PLAY_FILES["move_match"]),
    output:
        **{
            out.name: report(
                RUN.play_file(out.file),
                caption=f"../report/{out.caption}",
                category="Play",
                subcategory="{run}",
                labels={"run": "{run}", "item": out.label},
            )
            for out in PLAY_OUTCOME
        },
    log:
        "logs/{run}/outcome_figures.log",
    wildcard_constraints:
        run=r"[A-Za-z0-9_-]+",
    script:
        "../scripts/outcome_figures.py"
