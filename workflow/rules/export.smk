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
        results=RUN.results,
        manifest=lambda wildcards: run_dataset(wildcards.run).manifest,
        receipt=get_run_receipt,
        play=get_run_play_outputs,
    output:
        weights=RUN.export_file("model.safetensors"),
        config=RUN.export_file("config.json"),
        tokenizer=RUN.export_file("chess-tokenizer.json"),
        card=RUN.export_file("README.md"),
    log:
        "logs/{run}/export.log",
    params:
        # written by the run's segments, which results.json follows
        checkpoint=RUN.best,
    script:
        "../scripts/export.py"
