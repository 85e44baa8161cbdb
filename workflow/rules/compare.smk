# Comparisons of runs on the same validation positions (chesslm/compare; config/README.md,
# section "comparisons").
#
# rule score: results/{run}/results.json (a terminal status) + the token cache of {dataset}
#   (its validation split only) -> results/{run}/scores/{dataset}/positions.npz (one row per
#   validation position: the run's best.pt scored by play's scorer) and scores.json.
# rule compare: the score tables of comparisons.NAME's runs on its dataset + each run's
#   results.json and dataset manifest -> results/compare/{name}/: comparison.json, .csv and the
#   figures of chesslm.compare.build.FIGURES, each a report() item (category Comparisons).

from chesslm.compare.build import FIGURES as COMPARE_FIGURES


rule score:
    input:
        results="results/{run}/results.json",
        cache=get_score_cache,
    output:
        positions="results/{run}/scores/{dataset}/positions.npz",
        record="results/{run}/scores/{dataset}/scores.json",
    log:
        "logs/{run}/score/{dataset}.log",
    # torch in the job uses exactly these threads (runs.NAME.play.threads)
    threads: get_play_threads
    resources:
        gpu=get_play_gpus,
        mem_mb=8000,
    params:
        device=get_play_device,
        batch_tokens=get_score_batch_tokens,
        games=get_score_games,
    script:
        "../scripts/score.py"


rule compare:
    input:
        scores=get_compare_scores,
        results=get_compare_results,
        manifests=get_compare_manifests,
    output:
        **{
            figure: report(
                f"results/compare/{{name}}/{figure}.svg",
                caption=f"../report/compare-{figure}.rst",
                category="Comparisons",
                subcategory="{name}",
                labels={"comparison": "{name}", "item": figure},
            )
            for figure in COMPARE_FIGURES
        },
        record=report(
            "results/compare/{name}/comparison.json",
            caption="../report/compare-json.rst",
            category="Comparisons",
            subcategory="{name}",
            labels={"comparison": "{name}", "item": "record"},
        ),
        table=report(
            "results/compare/{name}/comparison.csv",
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
