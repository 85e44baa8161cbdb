# Analysis of a dataset's validation games move by move by a run's best.pt, as chesslm-analyse
# does a PGN (chesslm/engine/analyse.py; README.md, "Play it or share it").
#
# rule analyse: results/{run}/results.json (a terminal status) + its train/best.pt (verified
#   at plan time) + the token cache of {dataset}
#   (its validation split only: a cache holds no test split) ->
#   results/{run}/analysis/{dataset}.csv (one row per validation move: the played move's
#   probability and rank, the legal moves, the model's top 3; the game column is the game's id
#   in the dataset) and {dataset}.games.csv (per game: the mean log-probability per side).


rule analyse:
    input:
        results=RUN.results,
        checkpoint=get_run_checkpoint,
        cache=DATASET.cache_meta,
    output:
        moves=RUN.analysis("{dataset}"),
        games=RUN.analysis_games("{dataset}"),
    log:
        "logs/{run}/analyse/{dataset}.log",
    # torch in the job uses exactly these threads (runs.NAME.play.threads)
    threads: of_play(lambda p: p.threads)
    resources:
        gpu=get_play_gpus,
        mem_mb=8000,
    params:
        device=get_play_device,
        batch_tokens=of_play(lambda p: p.match.batch_tokens),
    script:
        "../scripts/analyse.py"
