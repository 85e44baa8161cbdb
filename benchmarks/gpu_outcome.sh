#!/usr/bin/env bash
# Issue 35 on one GPU host: benchmarks/outcome-real.yaml's two runs (the baseline on `real`
# without and with the outcome head, same seed) trained side by side to their early stops,
# scored and compared under Maia-2's protocol (rule compare), each run's play evaluation (the
# head measured; legality with trained weights), then the head's training cost in one process
# (train_speed.py: graphs and graphs+outcome). The records a comparison
# reads, the play records and the runs' summaries go to $OUT as one tarball.
# Usage: [RUNS='plain-all head-w01' COMPARISON=gpu-outcome] benchmarks/gpu_outcome.sh SECONDS   (the whole script's deadline; SPEED=no: no
# train_speed.py, the runs get all of it; a cut call's runs resume in the next)
set -uo pipefail
. benchmarks/device-env.sh
export PYTHONUNBUFFERED=1
deadline=$(( $(date +%s) + $1 ))
mark() { echo "[$(date +%s)] $*" | tee -a "$OUT/progress.log"; }
mark "start: $(nproc) cores; $(nvidia-smi --query-gpu=name --format=csv,noheader); torch $(python3 -c 'import torch; print(torch.__version__)')"
if [ -n "${MONTH_PGN:-}" ]; then  # the next call's month, generated on idle cores meanwhile
  ( nice -n 19 timeout -k 5 "$1" python3 benchmarks/month_pgn.py --games 10000000 --workers 4 \
      --out "$MONTH_PGN" > "$OUT/month-gen.log" 2>&1 && touch "$MONTH_PGN.ok" ) &
fi
runs=(${RUNS:-plain-all head-all}); comparison=${COMPARISON:-gpu-outcome-w1}
targets=("results/compare/$comparison/comparison.json")
for run in "${runs[@]}"; do
  targets+=("results/$run/play/move-match.json" "results/$run/report/summary.md")
done
reserve=75; [ "${SPEED:-yes}" = no ] && reserve=15
timeout -k 5 $(( deadline - $(date +%s) - reserve )) python3 -m snakemake "${targets[@]}" --cores 16 \
  --resources gpu=2 --keep-going --configfile config/config.yaml benchmarks/outcome-real.yaml \
  > "$OUT/snakemake.log" 2>&1
mark "snakemake rc=$?"
tar -czf "$OUT/outcome.tgz" results/*/results.json results/*/scores/*/scores.json \
  results/*/segments results/*/train/events.jsonl results/*/play/*.json results/*/play/*.csv \
  results/*/play/*.svg results/*/report/summary.md results/compare results/datasets/*/manifest.json \
  logs 2>/dev/null
mark "tarball: $(du -h "$OUT/outcome.tgz" | cut -f1)"
left=$(( deadline - $(date +%s) ))
if [ "${SPEED:-yes}" != no ] && [ "$left" -gt 40 ]; then
  timeout -k 5 "$left" python3 benchmarks/train_speed.py --paths graphs,graphs+outcome \
    --steps 60 --no-validation --json "$OUT/outcome-cost.json" > "$OUT/outcome-cost.log" 2>&1
  mark "train_speed rc=$? $(tail -6 "$OUT/outcome-cost.log")"
fi
wait
grep -E "Error|error:" "$OUT/snakemake.log" | tail -20
