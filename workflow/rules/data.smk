# Data stages: PGN -> dataset (convert) -> integrity receipt (verify) -> token cache.
# Only `convert` (writing) and `verify` (hashing) ever take the test split as input.


rule convert:
    input:
        pgn=get_pgn_inputs,
    output:
        manifest="results/datasets/{dataset}/manifest.json",
        train=directory("results/datasets/{dataset}/train"),
        validation=directory("results/datasets/{dataset}/validation"),
        held_out=directory("results/datasets/{dataset}/test"),
    log:
        "logs/datasets/{dataset}/convert.log",
    threads: DATA_THREADS
    resources:
        mem_mb=4000,
        runtime=get_data_runtime,
    params:
        settings=get_dataset_settings,
    script:
        "../scripts/convert.py"


rule verify:
    input:
        manifest="results/datasets/{dataset}/manifest.json",
        train="results/datasets/{dataset}/train",
        validation="results/datasets/{dataset}/validation",
        held_out="results/datasets/{dataset}/test",
    output:
        receipt="results/datasets/{dataset}/integrity-receipt.json",
    log:
        "logs/datasets/{dataset}/verify.log",
    threads: 1
    resources:
        mem_mb=1000,
        runtime=get_data_runtime,
    script:
        "../scripts/verify.py"


rule token_cache:
    input:
        receipt="results/datasets/{dataset}/integrity-receipt.json",
        manifest="results/datasets/{dataset}/manifest.json",
        train="results/datasets/{dataset}/train",
        validation="results/datasets/{dataset}/validation",
    output:
        meta="results/datasets/{dataset}/token-cache/cache.json",
        arrays=multiext(
            "results/datasets/{dataset}/token-cache/",
            "train.tokens.npy",
            "train.offsets.npy",
            "train.ids.npy",
            "validation.tokens.npy",
            "validation.offsets.npy",
            "validation.ids.npy",
            "validation.legality_games.npy",
            "validation.legal_mask.npy",
            "validation.legal_moves.npy",
            "validation.legal_move_offsets.npy",
            *[
                f"{s}.meta.{c}.npy"
                for s in ("train", "validation")
                for c in META_COLUMNS
            ],
        ),
    log:
        "logs/datasets/{dataset}/token_cache.log",
    threads: DATA_THREADS
    resources:
        mem_mb=4000,
        runtime=get_data_runtime,
    params:
        legality_games=get_legality_games,
    script:
        "../scripts/token_cache.py"
