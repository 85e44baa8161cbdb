# Data stages: PGN or Parquet -> dataset (convert) -> integrity receipt (verify) -> token cache.
# Only `convert` (writing) and `verify` (hashing) ever take the test split as input.


rule convert:
    input:
        inputs=of_dataset(lambda d: list(d.inputs)),
    output:
        manifest=DATASET.manifest,
        train=directory(DATASET.split("train")),
        validation=directory(DATASET.split("validation")),
        held_out=directory(DATASET.split("test")),
    log:
        "logs/datasets/{dataset}/convert.log",
    threads: DATA_THREADS
    resources:
        mem_mb=4000,
        runtime=get_data_runtime,
    params:
        settings=of_dataset(lambda d: d.settings),
    script:
        "../scripts/convert.py"


rule verify:
    input:
        manifest=DATASET.manifest,
        train=DATASET.split("train"),
        validation=DATASET.split("validation"),
        held_out=DATASET.split("test"),
    output:
        receipt=DATASET.receipt,
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
        receipt=DATASET.receipt,
        manifest=DATASET.manifest,
        train=DATASET.split("train"),
        validation=DATASET.split("validation"),
    output:
        meta=DATASET.cache_meta,
        arrays=multiext(
            f"{DATASET.cache}/",
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
        legality_games=of_dataset(lambda d: d.legality_games),
    script:
        "../scripts/token_cache.py"
