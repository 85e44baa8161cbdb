# Export stage: a run's best.pt handed over for use without chesslm (chesslm/export).
#
# rule export: results/{run}/results.json (the run is complete) + its dataset's manifest and
#   integrity receipt + its play evaluation (when play.enabled) -> results/{run}/export/:
#   model.safetensors and config.json (Hugging Face GPT-2 layout: transformers'
#   GPT2LMHeadModel.from_pretrained loads the folder), chess-tokenizer.json (the move tokenizer's
#   ids as plain JSON) and README.md (the model card). Seconds on a CPU: run where Snakemake is.


localrules:
    export,


rule export:
    input:
        results="results/{run}/results.json",
        manifest=get_run_manifest,
        receipt=get_run_receipt,
        play=get_run_play_outputs,
    output:
        weights="results/{run}/export/model.safetensors",
        config="results/{run}/export/config.json",
        tokenizer="results/{run}/export/chess-tokenizer.json",
        card="results/{run}/export/README.md",
    log:
        "logs/{run}/export.log",
    params:
        checkpoint=get_best_checkpoint,
    script:
        "../scripts/export.py"
