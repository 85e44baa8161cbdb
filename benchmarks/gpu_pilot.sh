#!/usr/bin/env bash
# The pilot's probe and one full segment of the baseline on a GPU host, then its summary.
# Usage: benchmarks/gpu_pilot.sh [extra configfile]   (writes copies of the records to $OUT)
set -euo pipefail
. benchmarks/device-env.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'gpus', torch.cuda.device_count())" | tee -a "$OUT/gpu.txt"
start=$(date +%s)
python3 -m snakemake results/pilot/probe-results.json results/pilot/segments/0.json \
  --cores 16 --configfile config/config.yaml ${1:-} 2>&1 | tee "$OUT/snakemake.log" | grep -E "rule |Finished|Error|error" || true
echo "pipeline seconds: $(( $(date +%s) - start ))" | tee -a "$OUT/gpu.txt"
python3 -m chesslm.report.summary results/pilot > /dev/null 2>&1 || echo "summary failed"
for f in results/pilot/probe-results.json results/pilot/segments/0.json \
  results/pilot/train/events.jsonl results/pilot/train/gpu-telemetry.jsonl \
  results/pilot/report/summary.md logs/pilot/train_segment/0.log; do
  [ -f "$f" ] && cp "$f" "$OUT/" || echo "missing $f"
done
