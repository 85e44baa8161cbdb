#!/usr/bin/env bash
# Issues 14-16 on one GPU host (nvidia-h200-x2: 2 GPUs, 32 cores), as a background job the
# device tool polls; each step has a hard time limit, most important first:
#   1. conversion scaling, CPU only and nothing else running: generated months of 1M games
#      (1, 16 and 30 workers) and 10M games (16 workers); the machine's own ceiling
#      (16 independent one-worker conversions of 100k games at once, against one alone);
#   2. move-matching speed variants (play_speed.py) on one GPU;
#   3. the GPU tests of the background saver, move-matching and the CUDA graphs (the 2-GPU
#      bucketed all-reduce against the single one);
#   4. the user's pilot on the embedded sample with every GPU (snakemake results/pilot/
#      results.json, then its summary.md with the wall-time split; a short play evaluation,
#      benchmarks/pilot-quick-play.yaml); the bucketed all-reduce only if step 3 passed;
#   5. train_speed.py's default path on 1 and 2 GPUs, bucketed and single all-reduce.
# Usage: setsid bash benchmarks/gpu_scale_speed.sh > results/device3/driver.log 2>&1 &
# Progress: $OUT/progress.log, one line a step with unix times.
set -uo pipefail
export OUT=${OUT_DIR:-results/device3}
. benchmarks/device-env.sh
export PATH=$PATH:/tmp/sf/usr/games PYTHONUNBUFFERED=1
CORES=$(nproc)
D=/tmp/scale
[ -d .debs ] && dpkg -x .debs/stockfish_*.deb /tmp/sf  # Debian's stockfish, carried
mkdir -p "$D"
mark() { echo "[$(date +%s)] $*" | tee -a "$OUT/progress.log"; }
gen() { python3 benchmarks/month_pgn.py --games "$1" --out "$2" --seed "$3" --workers "$CORES" > /dev/null 2>&1; }
bench() {  # name, time limit, arguments of convert_throughput.py
  local name=$1 limit=$2; shift 2
  timeout -k 5 "$limit" python3 benchmarks/convert_throughput.py "$@" --json "$OUT/convert-$name.json" \
    > "$OUT/convert-$name.log" 2>&1
  tr '\n' '|' < "$OUT/convert-$name.log"
}
mark "start: $CORES cores; $(nvidia-smi --query-gpu=name --format=csv,noheader | tr '\n' ' '); torch $(python3 -c 'import torch; print(torch.__version__)')"
if [ -z "${SKIP_SCALE:-}" ]; then
  gen 100000 "$D/m100k.pgn.zst" 1; gen 1000000 "$D/m1m.pgn.zst" 2; gen 10000000 "$D/m10m.pgn.zst" 3
  mark "generated: $(ls -la $D | tr '\n' '|')"
  mark "1M: $(bench 1m 150 --pgn "$D/m1m.pgn.zst" --workers 1,16,30)"
  mark "10M: $(bench 10m 100 --pgn "$D/m10m.pgn.zst" --workers 16)"
  mark "ceiling: $(bench independent 60 --pgn "$D/m100k.pgn.zst" --independent 16)"
  rm -f "$D/m10m.pgn.zst"
fi
timeout -k 5 "${PLAY_S:-140}" python3 benchmarks/play_speed.py --preset baseline --device cuda \
  --batch-tokens "${PLAY_TOKENS:-65536,131072}" --attention dense,flex --compile no,yes \
  --repeats 2 --budget-s "${PLAY_BUDGET_S:-80}" \
  --json "$OUT/play-speed.json" > "$OUT/play-speed.log" 2>&1
mark "play_speed rc=$?: $(grep -v -i warn "$OUT/play-speed.log" | tail -3 | tr '\n' '|')"
timeout -k 5 "${TESTS_S:-150}" python3 -m pytest -q -p no:cacheprovider tests/unit/test_saver.py \
  tests/gpu/test_cuda_graphs.py tests/test_play.py -k "cuda or gpu" > "$OUT/gpu-tests.log" 2>&1
tests=$?
mark "gpu tests rc=$tests: $(grep -E "passed|failed|FAILED|Error" "$OUT/gpu-tests.log" | tail -6 | tr '\n' '|')"
[ "$tests" = 0 ] || export CHESSLM_GRAD_OVERLAP=0
timeout -k 10 "${PILOT_S:-280}" python3 -m snakemake results/pilot/results.json \
  results/pilot/report/summary.md --cores "$CORES" \
  --configfile config/config.yaml benchmarks/pilot-quick-play.yaml > "$OUT/pilot.log" 2>&1
mark "pilot rc=$? (overlap ${CHESSLM_GRAD_OVERLAP:-1}): $(tail -2 "$OUT/pilot.log" | tr '\n' '|')"
cp results/pilot/segments/*.json results/pilot/report/summary.md results/pilot/train/events.jsonl \
  "$OUT/" 2>/dev/null
unset CHESSLM_GRAD_OVERLAP
timeout -k 10 "${SPEED_S:-200}" python3 benchmarks/train_speed.py --workers 1,2 \
  --paths graphs,graphs-overlap --profile 0 --cache results/datasets/sample/token-cache \
  --compile-cache /tmp/cc --out /tmp/chesslm-speed --json "$OUT/train-speed.json" \
  > "$OUT/train-speed.log" 2>&1
mark "train_speed rc=$?: $(grep -v -i warn "$OUT/train-speed.log" | tail -8 | tr '\n' '|')"
mark done
