# Export stage: a run's best.pt handed over for use without chesslm (chesslm/export).
#
# rule export: results/{run}/results.json (the run is complete) + its train/best.pt (verified
#   at plan time) + its dataset's manifest and
#   integrity receipt + its play evaluation (when play.enabled) -> results/{run}/export/:
#   model.safetensors and config.json (Hugging Face GPT-2 layout: transformers'
#   GPT2LMHeadModel.from_pretrained loads the folder), chess-tokenizer.json (the move tokenizer's
#   ids as plain JSON), README.md (the model card), for a checkpoint with the outcome head
#   outcome_head.safetensors (not an output: only some runs have it; config.json names it) and
#   SHA256SUMS (every other file's sha256, as `sha256sum -c` reads it; chesslm-uci and
#   chesslm-analyse check it before loading the folder).
#   Seconds on a CPU: run where Snakemake is.


localrules:
    export,


rule export:
    input:
        results=RUN.results,
        checkpoint=get_run_checkpoint,
        manifest=lambda wildcards: run_dataset(wildcards.run).manifest,
        receipt=get_run_receipt,
        play=get_run_play_outputs,
    output:
        weights=RUN.export_file("model.safetensors"),
        config=RUN.export_file("config.json"),
        tokenizer=RUN.export_file("chess-tokenizer.json"),
        card=RUN.export_file("README.md"),
        sums=RUN.export_file("SHA256SUMS"),
    log:
        "logs/{run}/export.log",
    params:
        # the input when results.json was there at plan time; else written by the segments
        checkpoint=RUN.best,
    script:
        "../scripts/export.py"
