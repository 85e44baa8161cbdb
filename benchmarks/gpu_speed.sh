#!/usr/bin/env bash
# Training speed on the embedded sample's real games: token cache via the pipeline, then
# 1 and 2 GPUs (DDP) in one call, then cold/warm segment start-up. Hard time limits per part.
set -uo pipefail
. benchmarks/device-env.sh
timeout -k 5 60 python3 -m snakemake results/datasets/sample/token-cache/cache.json --cores 16 \
  > "$OUT/data.log" 2>&1 || echo "data stages failed"
timeout -k 10 ${SPEED_S:-330} python3 benchmarks/train_speed.py --workers "${WORKERS:-1,2}" \
  --cache results/datasets/sample/token-cache --compile-cache /tmp/cc \
  --out /tmp/chesslm-speed --json "$OUT/train-speed.json" > "$OUT/train-speed.log" 2>&1
echo "speed rc=$?"
timeout -k 10 ${STARTUP_S:-140} python3 benchmarks/train_speed.py --startup \
  --cache results/datasets/sample/token-cache --out /tmp/chesslm-startup \
  --json "$OUT/startup.json" > "$OUT/startup.log" 2>&1
echo "startup rc=$?"
grep -v -i warn "$OUT/train-speed.log" | tail -40; grep -v -i warn "$OUT/startup.log" | tail -12
