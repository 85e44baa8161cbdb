#!/usr/bin/env bash
# Issue 48 on one GPU host: benchmarks/human-time-real.yaml's two runs (the baseline on `real`
# without and with human time: the clock inputs and the think-time head, same seed) trained side
# by side to their early stops (the yaml says how long that is), scored and
# compared under Maia-2's protocol (rule compare: paired top-1 with its interval), each run's
# play evaluation (move-matching by band and time-control class; the think-time head against
# its baselines), then the cost of human time in training throughput in one process
# (train_speed.py: graphs and graphs+time, packed and packed+time, each pair timed A B B A). The records a comparison
# reads, the play records and the runs' summaries go to $OUT as one tarball.
# Usage: benchmarks/gpu_human_time.sh SECONDS   (the whole call's deadline, at most the device
# tool's 600 s a call: a cut call's runs resume in the next call, so run it until
# progress.log says "done"; about 15 minutes of GPU time in all; SPEED=no: no train_speed.py)
set -uo pipefail
. benchmarks/device-env.sh
export PYTHONUNBUFFERED=1
deadline=$(( $(date +%s) + $1 ))
mark() { echo "[$(date +%s)] $*" | tee -a "$OUT/progress.log"; }
mark "start: $(nproc) cores; $(nvidia-smi --query-gpu=name --format=csv,noheader); torch $(python3 -c 'import torch; print(torch.__version__)')"
targets=("results/compare/gpu-human-time/comparison.json")
for run in time-off time-on; do
  targets+=("results/$run/play/move-match.json" "results/$run/report/summary.md")
done
reserve=90; [ "${SPEED:-yes}" = no ] && reserve=15
timeout -k 5 $(( deadline - $(date +%s) - reserve )) python3 -m snakemake "${targets[@]}" --cores 16 \
  --resources gpu=2 --keep-going --configfile config/config.yaml benchmarks/human-time-real.yaml \
  > "$OUT/snakemake.log" 2>&1
rc=$?
mark "snakemake rc=$rc"
tar -czf "$OUT/human-time.tgz" results/time-*/results.json results/time-*/scores/*/scores.json \
  results/time-*/segments results/time-*/train/events.jsonl results/time-*/play/*.json \
  results/time-*/play/*.csv results/time-*/play/*.svg results/time-*/report/summary.md \
  results/compare/gpu-human-time results/datasets/real/manifest.json logs 2>/dev/null
mark "tarball: $(du -h "$OUT/human-time.tgz" | cut -f1)"
left=$(( deadline - $(date +%s) ))
if [ "$rc" = 0 ] && [ "${SPEED:-yes}" != no ] && [ "$left" -gt 60 ]; then
  timeout -k 5 "$left" python3 benchmarks/train_speed.py --paths graphs,graphs+time,graphs+time,graphs,packed,packed+time,packed+time,packed \
    --steps 60 --no-validation --json "$OUT/time-cost.json" > "$OUT/time-cost.log" 2>&1
  mark "train_speed rc=$? $(tail -14 "$OUT/time-cost.log")"
fi
[ "$rc" = 0 ] && mark "done"
grep -E "Error|error:" "$OUT/snakemake.log" | tail -20
