#!/usr/bin/env bash
# Runs of benchmarks/sweep-real.yaml on one GPU host, one after another, each trained to its
# terminal status and scored on `real`'s validation positions (rule score). After each run, the
# files a comparison reads (results.json, scores, manifests) and the runs' summaries go to $OUT
# as one tarball, so a call cut by its time limit still returns the runs it finished.
# Usage: benchmarks/gpu_sweep.sh SECONDS RUN...   (e.g. 560 curve-4k curve-8k)
set -uo pipefail
. benchmarks/device-env.sh
export PYTHONUNBUFFERED=1
deadline=$(( $(date +%s) + $1 )); shift
mark() { echo "[$(date +%s)] $*" | tee -a "$OUT/progress.log"; }
mark "start: $(nproc) cores; $(nvidia-smi --query-gpu=name --format=csv,noheader); torch $(python3 -c 'import torch; print(torch.__version__)')"
for run in "$@"; do
  left=$(( deadline - $(date +%s) ))
  timeout -k 5 "$left" python3 -m snakemake "results/$run/scores/real/positions.npz" --cores 16 \
    --configfile config/config.yaml benchmarks/sweep-real.yaml >> "$OUT/snakemake.log" 2>&1
  mark "$run rc=$?"
  python3 -m chesslm.report.summary "results/$run" > "$OUT/$run-summary.md" 2>&1
  tar -czf "$OUT/sweep.tgz" results/*/results.json results/*/scores results/*/segments \
    results/datasets/*/manifest.json logs/*/score 2>/dev/null
done
grep -E "Error|error:" "$OUT/snakemake.log" | tail -20
ls -la "$OUT"
