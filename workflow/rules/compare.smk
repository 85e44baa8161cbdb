# Comparisons of runs on the same validation positions (chesslm/compare; config/README.md,
# section "comparisons").
#
# rule score: results/{run}/results.json (a terminal status) + its train/best.pt (verified at
#   plan time) + the token cache of {dataset}
#   (its validation split only) -> results/{run}/scores/{dataset}/positions.npz (one row per
#   validation position: the run's best.pt scored by play's scorer) and scores.json.
# rule compare: the score tables (positions.npz and scores.json, both inputs) of
#   comparisons.NAME's runs on its dataset + each run's results.json and dataset manifest ->
#   results/compare/{name}/: comparison.json, .csv and the figures of
#   chesslm.compare.outputs.FIGURES, each a report() item (category Comparisons).


rule score:
    input:
        results=RUN.results,
        checkpoint=get_run_checkpoint,
        cache=DATASET.cache_meta,
    output:
        positions=RUN.scores_file("{dataset}", "positions.npz"),
        record=RUN.scores_file("{dataset}", "scores.json"),
    log:
        "logs/{run}/score/{dataset}.log",
    # torch in the job uses exactly these threads (runs.NAME.play.threads)
    threads: of_play(lambda p: p.threads)
    resources:
        gpu=get_play_gpus,
        mem_mb=8000,
    params:
        device=get_play_device,
        batch_tokens=of_play(lambda p: p.match.batch_tokens),
        chunk_games=of_play(lambda p: p.match.chunk_games),
        # the run's move-matching bound (play.match.games) bounds its scores too (None: all)
        games=of_play(lambda p: p.match.games),
    script:
        "../scripts/score.py"


rule compare:
    input:
        scores=get_compare_scores,
        score_records=get_compare_score_records,
        results=get_compare_results,
        manifests=get_compare_manifests,
    output:
        **{
            figure: report(
                compare_file("{name}", f"{figure}.svg"),
                caption=f"../report/compare-{figure}.rst",
                category="Comparisons",
                subcategory="{name}",
                labels={"comparison": "{name}", "item": figure},
            )
            for figure in COMPARE_FIGURES
        },
        record=report(
            compare_file("{name}", "comparison.json"),
            caption="../report/compare-json.rst",
            category="Comparisons",
            subcategory="{name}",
            labels={"comparison": "{name}", "item": "record"},
        ),
        table=report(
            compare_file("{name}", "comparison.csv"),
            caption="../report/compare-table.rst",
            category="Comparisons",
            subcategory="{name}",
            labels={"comparison": "{name}", "item": "table"},
        ),
    log:
        "logs/compare/{name}.log",
    wildcard_constraints:
        name="|".join(COMPARISONS) or "NONE",
    params:
        settings=get_compare_settings_json,
        runs=get_compare_runs_json,
    script:
        "../scripts/compare.py"
