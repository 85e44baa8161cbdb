# Play stage: move-matching, free-running legality and Elo against Stockfish of a run's best.pt
# (chesslm/play; config/README.md, section "play").
#
# rule play: results/{run}/results.json (a terminal status) + the token caches of the datasets
#   evaluated (validation splits only) -> results/{run}/play/{move-match,legality,elo}.json,
#   their CSV tables and figures. Bounded by play.*.seconds; work in progress stays in
#   results/{run}/play/state/, so `--forcerun play` after a budget stop resumes it.


rule play:
    input:
        results="results/{run}/results.json",
        caches=lambda w: list(get_play_caches(w).values()),
    output:
        move_match="results/{run}/play/move-match.json",
        legality="results/{run}/play/legality.json",
        elo="results/{run}/play/elo.json",
        move_match_table=report(
            "results/{run}/play/move-match.csv",
            caption="../report/play-move-match-table.rst",
            category="Play",
            subcategory="{run}",
            labels={"run": "{run}", "item": "move-matching table"},
        ),
        legality_table=report(
            "results/{run}/play/legality.csv",
            caption="../report/play-legality-table.rst",
            category="Play",
            subcategory="{run}",
            labels={"run": "{run}", "item": "free-running legality table"},
        ),
        elo_table=report(
            "results/{run}/play/elo.csv",
            caption="../report/play-elo-table.rst",
            category="Play",
            subcategory="{run}",
            labels={"run": "{run}", "item": "score per anchor"},
        ),
        elo_games="results/{run}/play/elo-games.csv",
        move_match_plot=report(
            "results/{run}/play/move-match.svg",
            caption="../report/play-move-match.rst",
            category="Play",
            subcategory="{run}",
            labels={"run": "{run}", "item": "move-matching by Elo"},
        ),
        legality_plot=report(
            "results/{run}/play/legality.svg",
            caption="../report/play-legality.rst",
            category="Play",
            subcategory="{run}",
            labels={"run": "{run}", "item": "illegal share by ply"},
        ),
        elo_plot=report(
            "results/{run}/play/elo.svg",
            caption="../report/play-elo.rst",
            category="Play",
            subcategory="{run}",
            labels={"run": "{run}", "item": "score against Stockfish"},
        ),
    log:
        "logs/{run}/play.log",
    wildcard_constraints:
        run=r"[A-Za-z0-9_-]+",
    # torch in the job uses exactly these threads (runs.NAME.play.threads, default 1)
    threads: lambda w: play_threads(w.run)
    resources:
        gpu=lambda w: 1 if play_device(w.run) == "cuda" else 0,
        mem_mb=8000,
        runtime=get_play_runtime,
    params:
        settings=lambda w: json.dumps(play_settings(w.run), sort_keys=True),
        caches=get_play_caches,
        device=lambda w: play_device(w.run),
    script:
        "../scripts/play.py"
