#!/usr/bin/env bash
# Issue 23 on one GPU host: the pilot trained, evaluated on the ladder, summarised and exported
# in one call (benchmarks/pilot-handover.yaml), then the UCI engine's move latency on the GPU
# and on the CPU with its best.pt (benchmarks/uci_latency.py). Copies go to $OUT as one tarball.
# Usage: benchmarks/gpu_handover.sh [seconds for training and play, default 430]
set -uo pipefail
. benchmarks/device-env.sh
[ -d .debs ] && dpkg -x .debs/stockfish_*.deb /tmp/sf  # Debian's stockfish, carried
export PATH=$PATH:/tmp/sf/usr/games PYTHONUNBUFFERED=1
mark() { echo "[$(date +%s)] $*" | tee -a "$OUT/progress.log"; }
mark "start: $(nproc) cores; $(nvidia-smi --query-gpu=name --format=csv,noheader); torch $(python3 -c 'import torch; print(torch.__version__)')"
# training and play first, then the export (its card holds play's figures), then the summary
# (which names the export)
limit=${1:-430}
for target in results/pilot/play/move-match.json results/pilot/export/model.safetensors \
  results/pilot/report/summary.md; do
  timeout -k 5 "$limit" python3 -m snakemake "$target" --cores 16 \
    --configfile config/config.yaml benchmarks/pilot-handover.yaml >> "$OUT/snakemake.log" 2>&1
  mark "snakemake $target rc=$?"
  limit=60
done
grep -E "^(rule|checkpoint|localrule) |Finished job|Error|progress: " "$OUT/snakemake.log" | tail -40
best=results/pilot/train/best.pt
if [ -f "$best" ]; then
  timeout -k 5 60 python3 benchmarks/uci_latency.py --checkpoint "$best" --device cuda \
    --moves 60 | tee "$OUT/uci-latency-cuda.json"
  timeout -k 5 60 python3 benchmarks/uci_latency.py --checkpoint "$best" --device cpu \
    --moves 20 --threads 8 | tee "$OUT/uci-latency-cpu.json"
fi
mark "done"
tar -czf "$OUT/handover.tgz" results/pilot/results.json results/pilot/report/summary.md \
  results/pilot/play/*.json results/ladders/*/ladder.json results/pilot/export/README.md \
  results/pilot/export/config.json logs/ladders logs/pilot/play.log 2>/dev/null
ls -la "$OUT"
