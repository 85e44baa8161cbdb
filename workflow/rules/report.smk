# Report stage: tables, figures and summary.md of a training run, for `snakemake --report`.
#
# rule summarise: results/{run}/results.json (the run is complete) + its dataset's integrity
#   receipt -> results/{run}/report/{data,validation,train-steps,segments,gpu-telemetry,probe}.csv,
#   {nll,validation-metrics,throughput,gpu,segments}.svg and summary.md, each a report() item.
# Partial runs (still training, or stopped before a terminal status) are summarised outside the
# DAG, so that asking for a summary never starts training and a partial summary is never taken
# for the final one: `python -m chesslm.report.summary results/{run}` writes the same files. Once the
# run completes, results.json is newer than them and `summarise` rewrites them.
#
# Build the HTML report for every run with
#   snakemake --cores 1 <get_summary_targets()>   (e.g. results/demo/report/summary.md)
#   snakemake --report report.html results/demo/report/summary.md
# --report collects report() items of the jobs upstream of its targets only, so its target
# must be a report file (or a rule whose input is get_summary_targets()), not results.json.


localrules:
    summarise,


rule summarise:
    input:
        results="results/{run}/results.json",
        receipt=get_run_receipt,
    output:
        data=report(
            "results/{run}/report/data.csv",
            caption="../report/data.rst",
            category="Data",
            subcategory="{run}",
            labels={"run": "{run}", "item": "dataset and integrity receipt"},
        ),
        probe=report(
            "results/{run}/report/probe.csv",
            caption="../report/probe.rst",
            category="Probe",
            subcategory="{run}",
            labels={"run": "{run}", "item": "probe results"},
        ),
        summary=report(
            "results/{run}/report/summary.md",
            caption="../report/summary.rst",
            category="Training",
            subcategory="{run}",
            labels={"run": "{run}", "item": "summary"},
        ),
        nll_plot=report(
            "results/{run}/report/nll.svg",
            caption="../report/nll.rst",
            category="Training",
            subcategory="{run}",
            labels={"run": "{run}", "item": "NLL curves"},
        ),
        validation_plot=report(
            "results/{run}/report/validation-metrics.svg",
            caption="../report/validation-metrics.rst",
            category="Training",
            subcategory="{run}",
            labels={"run": "{run}", "item": "accuracy and legality"},
        ),
        throughput_plot=report(
            "results/{run}/report/throughput.svg",
            caption="../report/throughput.rst",
            category="Training",
            subcategory="{run}",
            labels={"run": "{run}", "item": "throughput and padding"},
        ),
        segments_plot=report(
            "results/{run}/report/segments.svg",
            caption="../report/segments-timeline.rst",
            category="Training",
            subcategory="{run}",
            labels={"run": "{run}", "item": "segment timeline"},
        ),
        validation=report(
            "results/{run}/report/validation.csv",
            caption="../report/validation.rst",
            category="Training",
            subcategory="{run}",
            labels={"run": "{run}", "item": "validation history"},
        ),
        train_steps=report(
            "results/{run}/report/train-steps.csv",
            caption="../report/train-steps.rst",
            category="Training",
            subcategory="{run}",
            labels={"run": "{run}", "item": "training steps"},
        ),
        segments=report(
            "results/{run}/report/segments.csv",
            caption="../report/segments.rst",
            category="Training",
            subcategory="{run}",
            labels={"run": "{run}", "item": "segments"},
        ),
        gpu_plot=report(
            "results/{run}/report/gpu.svg",
            caption="../report/gpu.rst",
            category="Hardware",
            subcategory="{run}",
            labels={"run": "{run}", "item": "GPU utilisation, memory and power"},
        ),
        telemetry=report(
            "results/{run}/report/gpu-telemetry.csv",
            caption="../report/gpu-telemetry.rst",
            category="Hardware",
            subcategory="{run}",
            labels={"run": "{run}", "item": "GPU telemetry per GPU"},
        ),
    log:
        "logs/summarise/{run}.log",
    wildcard_constraints:
        run=r"[A-Za-z0-9_-]+",
    script:
        "../scripts/summarise.py"
