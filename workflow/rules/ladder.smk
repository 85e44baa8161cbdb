# Elo ladders: anchors from a random mover up to Stockfish's UCI_Elo, rated on one scale by a
# round robin among themselves (chesslm/ladder/round_robin.py; config/README.md, section "ladders").
#
# rule ladder: ladders.NAME of the config + the engine build -> results/ladders/NAME-KEY/
#   ladder.json, KEY the first 12 hex digits of the settings' and engine build's key (common.smk,
#   ladder_path): computed once, then reused by every run whose play.elo.ladder is NAME; a new
#   engine build or a changed setting is a new path, and so a new ladder.


rule ladder:
    output:
        ladder_file("{ladder}", "{key}"),
    log:
        "logs/ladders/{ladder}-{key}.log",
    wildcard_constraints:
        key=r"[0-9a-f]{12}",
    # pairs played at a time (each engine anchor is a process of its own)
    threads: lambda wildcards: SETTINGS.ladders[wildcards.ladder].threads
    resources:
        mem_mb=2000,
    params:
        settings=get_ladder_settings_json,
        engine=get_ladder_engine,
    script:
        "../scripts/ladder.py"
