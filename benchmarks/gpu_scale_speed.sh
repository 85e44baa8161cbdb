#!/usr/bin/env bash
# Issues 14-16 on one GPU host, as a background job the device tool polls:
#   1. conversion scaling, CPU only and nothing else running: generated months of 100k and
#      1M games with 1 to 16 workers, 10M games with 14 and 16 workers;
#   2. the GPU tests of the background checkpoint saver and of move-matching, the saver's
#      benchmark, and the move-matching variants (play_speed.py);
#   3. the 1M-game month through the pipeline: convert -> verify -> token cache -> probe ->
#      segment 0 of month_pilot (benchmarks/month.yaml + month-1m.yaml), then train_speed.py's
#      default path on the same token cache (the segment's reference, same run).
# Usage: setsid bash benchmarks/gpu_scale_speed.sh > results/device2/driver.log 2>&1 &
# Progress: results/device2/progress.log, one line a step with unix times.
set -uo pipefail
export OUT=results/device2
. benchmarks/device-env.sh
export PATH=$PATH:/tmp/sf/usr/games PYTHONUNBUFFERED=1
CORES=$(nproc)
D=/tmp/scale
mkdir -p "$D" results/month
mark() { echo "[$(date +%s)] $*" | tee -a "$OUT/progress.log"; }
gen() { python3 benchmarks/month_pgn.py --games "$1" --out "$2" --seed "$3" --workers "$CORES" > /dev/null 2>&1; }
scale() {  # input, workers, name
  timeout -k 5 "${4:-400}" python3 benchmarks/convert_throughput.py --pgn "$1" --workers "$2" \
    --json "$OUT/convert-$3.json" > "$OUT/convert-$3.log" 2>&1
  tr '\n' '|' < "$OUT/convert-$3.log"
}
measured() {  # wall time and peak RSS of the largest process of a command
  python3 - "$@" <<'PY'
import resource, subprocess, sys, time
t = time.time(); rc = subprocess.call(sys.argv[1:])
print(f"wall_s={time.time() - t:.1f} peak_rss_mib={resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024:.0f} rc={rc}")
PY
}
mark "start: $CORES cores; $(nvidia-smi --query-gpu=name --format=csv,noheader); torch $(python3 -c 'import torch; print(torch.__version__)')"
if [ -z "${SKIP_SCALE:-}" ]; then
  gen 100000 "$D/m100k.pgn.zst" 1 && mark "100k: $(scale "$D/m100k.pgn.zst" 1,14,16 100k)"
  gen 1000000 "$D/m1m.pgn.zst" 2 && mark "1M: $(scale "$D/m1m.pgn.zst" 1,8,12,14,16 1m)"
  gen 10000000 "$D/m10m.pgn.zst" 3 && mark "10M: $(scale "$D/m10m.pgn.zst" 14,16 10m)"
  rm -f "$D/m10m.pgn.zst"
fi
timeout -k 5 150 python3 -m pytest -q -p no:cacheprovider tests/test_saver.py tests/test_play.py \
  -k cuda > "$OUT/gpu-tests.log" 2>&1
mark "gpu tests rc=$?: $(tail -1 "$OUT/gpu-tests.log")"
timeout -k 5 120 python3 benchmarks/checkpoint_save.py --model baseline --device cuda --saves 3 \
  --dir /tmp/ckpt --json "$OUT/checkpoint-save.json" > "$OUT/checkpoint-save.log" 2>&1
mark "checkpoint_save rc=$?: $(tail -3 "$OUT/checkpoint-save.log" | tr '\n' '|')"
timeout -k 5 "${PLAY_S:-240}" python3 benchmarks/play_speed.py --preset baseline --device cuda \
  --batch-tokens "${PLAY_TOKENS:-65536,131072}" --attention dense,flex --compile no,yes \
  --repeats 2 --profile-batches 2 --budget-s "${PLAY_BUDGET_S:-170}" \
  --json "$OUT/play-speed.json" > "$OUT/play-speed.log" 2>&1
mark "play_speed rc=$?: $(grep -v -i warn "$OUT/play-speed.log" | tail -2 | tr '\n' '|')"
[ -f "$D/m1m.pgn.zst" ] || gen 1000000 "$D/m1m.pgn.zst" 2
cp "$D/m1m.pgn.zst" results/month/month.pgn.zst
CONFIG=(--configfile config/config.yaml benchmarks/month.yaml benchmarks/month-1m.yaml)
for target in results/datasets/month/manifest.json results/datasets/month/integrity-receipt.json \
    results/datasets/month/token-cache/cache.json results/month_pilot/probe-results.json \
    results/month_pilot/segments/0.json; do
  log="$OUT/smk-$(basename "$target").log"
  mark "$target: $(measured timeout -k 10 "${STAGE_S:-400}" python3 -m snakemake "$target" --cores "$CORES" "${CONFIG[@]}" > "$log" 2>&1; tail -1 "$log")"
done
cp results/month_pilot/segments/*.json results/datasets/month/manifest.json "$OUT/" 2>/dev/null
cp results/month_pilot/train/events.jsonl "$OUT/" 2>/dev/null
timeout -k 10 "${SPEED_S:-200}" python3 benchmarks/train_speed.py --workers 1 --paths graphs \
  --profile 0 --cache results/datasets/month/token-cache \
  --compile-cache results/month_pilot/train/compile-cache --out /tmp/chesslm-speed \
  --json "$OUT/train-speed-month.json" > "$OUT/train-speed-month.log" 2>&1
mark "train_speed graphs on the month rc=$?: $(grep -v -i warn "$OUT/train-speed-month.log" | tail -4 | tr '\n' '|')"
mark done
