#!/usr/bin/env bash
# Issue 16 on one nvidia-h200-x2 host (2 GPUs, 32 cores), as a background job the device tool
# polls (a call must stay in flight: an idle machine is given back). Each step has a limit.
#   phase 1, at once on the two GPUs:
#     GPU 0: a generated month of 1M games -> convert -> verify -> token cache -> probe ->
#            segment 0 of run month_speed (benchmarks/month-speed.yaml: one 420 s segment);
#     GPU 1: packed-row attention kernels (attention_speed.py: default and max-autotuned
#            FlexAttention, varlen flash with and without layout copies), then the packed
#            path (train_speed.py) compiled as today and with max-autotune;
#   phase 2, both GPUs: the saver's GPU test; the user's pilot on the sample (snakemake
#     results/pilot/results.json) and its summary with the wall-time split; train_speed.py's
#     default path (one all-reduce) and the bucketed one on 1 and 2 GPUs, profiled: the
#     reference figures of the two runs' efficiency and of two-GPU scaling; the all-reduce
#     alone (allreduce_speed.py), as NCCL picks it and with 32 channels (and if that is faster,
#     the default path on 2 GPUs with it).
# The month and the pilot share one compile cache, so the pilot's probe starts warm (every
# run's probe warms its segment 0 either way).
# Usage: setsid bash benchmarks/gpu_efficiency.sh > results/device4/driver.log 2>&1 &
#   PHASES=1 or 2: one phase; in phase 2, TESTS_S=0 skips the GPU test, STEPS=0 times
#   train_speed.py over the rest of the first epoch (1 and 2 GPUs then train the same games),
#   PROFILE=0 profiles nothing, ALLREDUCE=0 skips the all-reduce runs, PACKED=1 times the
#   packed path with the model's FlexAttention kernel options and with Inductor's own pick.
# Progress: $OUT/progress.log, one line a step with unix times.
set -uo pipefail
export OUT=${OUT_DIR:-results/device4}
. benchmarks/device-env.sh
export PYTHONUNBUFFERED=1
CORES=$(nproc)
RUNS_CC=/tmp/cc-runs
SAMPLE=results/datasets/sample/token-cache
mark() { echo "[$(date +%s)] $*" | tee -a "$OUT/progress.log"; }
last() { grep -v -i warn "$1" | tail -"${2:-3}" | tr '\n' '|'; }
smk() {  # target, log name, time limit, config files...
  local target=$1 name=$2 limit=$3; shift 3
  local t=$(date +%s)
  timeout -k 10 "$limit" python3 -m snakemake "$target" --cores "$CORES" --configfile "$@" \
    > "$OUT/smk-$name.log" 2>&1
  echo "rc=$? $(( $(date +%s) - t ))s"
}
mark "start: $CORES cores; $(nvidia-smi --query-gpu=name --format=csv,noheader | tr '\n' ' '); torch $(python3 -c 'import torch; print(torch.__version__)')"
mark "sample cache: $(smk $SAMPLE/cache.json sample 120 config/config.yaml)"

gpu1() {
  export CUDA_VISIBLE_DEVICES=1
  timeout -k 5 "${ATTENTION_S:-200}" python3 benchmarks/attention_speed.py --cache "$SAMPLE" \
    --json "$OUT/attention.json" > "$OUT/attention.log" 2>&1
  mark "gpu1 attention rc=$?: $(last "$OUT/attention.log" 8)"
  timeout -k 5 "${PACKED_S:-150}" python3 benchmarks/train_speed.py --paths packed --profile 3 \
    --cache "$SAMPLE" --compile-cache /tmp/cc-packed --out /tmp/speed-packed \
    --json "$OUT/packed-default.json" > "$OUT/packed-default.log" 2>&1
  mark "gpu1 packed default rc=$?: $(last "$OUT/packed-default.log" 4)"
  CHESSLM_COMPILE_MODE=max-autotune-no-cudagraphs timeout -k 5 "${TUNED_S:-330}" \
    python3 benchmarks/train_speed.py --paths packed --profile 3 --cache "$SAMPLE" \
    --compile-cache /tmp/cc-packed-tuned --out /tmp/speed-tuned \
    --json "$OUT/packed-autotuned.json" > "$OUT/packed-autotuned.log" 2>&1
  mark "gpu1 packed max-autotune rc=$?: $(last "$OUT/packed-autotuned.log" 4)"
}

gpu0() {
  export CUDA_VISIBLE_DEVICES=0 TORCHINDUCTOR_CACHE_DIR=$RUNS_CC/inductor TRITON_CACHE_DIR=$RUNS_CC/triton
  local month=(config/config.yaml benchmarks/month-speed.yaml) d=results/datasets/month1m
  mkdir -p results/month
  python3 benchmarks/month_pgn.py --games "${GAMES:-1000000}" --out results/month/month1m.pgn.zst \
    --workers "$CORES" > "$OUT/month-generate.log" 2>&1
  mark "gpu0 month generated rc=$?: $(ls -la results/month | tail -1)"
  mark "gpu0 convert: $(smk $d/manifest.json convert 120 "${month[@]}")"
  mark "gpu0 verify: $(smk $d/integrity-receipt.json verify 60 "${month[@]}")"
  mark "gpu0 token cache: $(smk $d/token-cache/cache.json cache 120 "${month[@]}")"
  mark "gpu0 probe: $(smk results/month_speed/probe-results.json probe 240 "${month[@]}")"
  mark "gpu0 segment 0: $(smk results/month_speed/segments/0.json segment 520 "${month[@]}")"
  cp results/month_speed/segments/0.json "$OUT/month-segment-0.json"
  cp results/month_speed/probe-results.json "$OUT/month-probe.json"
  cp results/month_speed/train/events.jsonl "$OUT/month-events.jsonl"
  python3 -m chesslm.report.summary results/month_speed > "$OUT/month-summary.md" 2> "$OUT/month-summary.err"
  mark "gpu0 month summary rc=$?"
}

PHASES=${PHASES:-1 2}  # one call each, if need be: PHASES=1, then PHASES=2 on a fresh machine
if [[ " $PHASES " == *" 1 "* ]]; then
  gpu1 & one=$!
  gpu0 & zero=$!
  wait "$one" "$zero"
fi
if [[ " $PHASES " != *" 2 "* ]]; then mark done; exit 0; fi
mark "phase 2"
if [ "${TESTS_S:-90}" != 0 ]; then
  timeout -k 5 "${TESTS_S:-90}" python3 -m pytest -q -p no:cacheprovider tests/unit/test_saver.py \
    -k cuda > "$OUT/gpu-tests.log" 2>&1
  mark "gpu tests rc=$?: $(last "$OUT/gpu-tests.log" 2)"
fi
export TORCHINDUCTOR_CACHE_DIR=$RUNS_CC/inductor TRITON_CACHE_DIR=$RUNS_CC/triton
mark "pilot: $(smk results/pilot/results.json pilot 300 config/config.yaml)"
cp results/pilot/segments/*.json "$OUT/" 2>/dev/null
cp results/pilot/probe-results.json "$OUT/pilot-probe.json" 2>/dev/null
cp results/pilot/train/events.jsonl "$OUT/pilot-events.jsonl" 2>/dev/null
python3 -m chesslm.report.summary results/pilot > "$OUT/pilot-summary.md" 2> "$OUT/pilot-summary.err"
mark "pilot summary rc=$?"
unset TORCHINDUCTOR_CACHE_DIR TRITON_CACHE_DIR
timeout -k 10 "${SPEED_S:-300}" python3 benchmarks/train_speed.py --workers 1,2 \
  --paths graphs,graphs-overlap --profile "${PROFILE:-3}" --steps "${STEPS:-30}" \
  --cache "$SAMPLE" --compile-cache $RUNS_CC \
  --out /tmp/chesslm-speed --json "$OUT/train-speed.json" > "$OUT/train-speed.log" 2>&1
mark "train_speed rc=$?: $(last "$OUT/train-speed.log" 8)"
# the all-reduce alone, as NCCL picks it (its transport in the log), then with more channels
ar() {  # name, extra environment...
  local name=$1; shift
  env NCCL_DEBUG=INFO "$@" timeout -k 5 60 python3 -m torch.distributed.run --standalone \
    --nproc-per-node=2 benchmarks/allreduce_speed.py --json "$OUT/allreduce-$name.json" \
    > "$OUT/allreduce-$name.log" 2>&1
  mark "allreduce $name rc=$?: $(grep -E '^\{' "$OUT/allreduce-$name.log" | tr '\n' '|')"
}
if [ "${PACKED:-0}" = 1 ]; then  # the packed path, FlexAttention as configured vs Inductor's pick
  for flex in model inductor; do
    CHESSLM_FLEX_OPTIONS=$flex timeout -k 5 150 python3 benchmarks/train_speed.py --paths packed \
      --profile 3 --cache "$SAMPLE" --compile-cache /tmp/cc-packed-$flex --out /tmp/speed-$flex \
      --json "$OUT/packed-flex-$flex.json" > "$OUT/packed-flex-$flex.log" 2>&1
    mark "packed, flex options $flex, rc=$?: $(last "$OUT/packed-flex-$flex.log" 2)"
  done
fi
[ "${ALLREDUCE:-1}" = 1 ] || { mark done; exit 0; }
ar default
ar channels32 NCCL_MIN_NCHANNELS=32 NCCL_MAX_NCHANNELS=32
faster=$(python3 -c "import json; d, c = (json.load(open(f'$OUT/allreduce-{n}.json'))['results'][-1]['milliseconds'] for n in ('default', 'channels32')); print(int(c < 0.9 * d))" 2>/dev/null)
if [ "$faster" = 1 ]; then  # worth an update's measure: the default path on 2 GPUs with it
  NCCL_MIN_NCHANNELS=32 NCCL_MAX_NCHANNELS=32 timeout -k 10 150 python3 benchmarks/train_speed.py \
    --workers 2 --paths graphs --cache "$SAMPLE" --compile-cache $RUNS_CC --out /tmp/speed-ch32 \
    --json "$OUT/train-speed-channels32.json" > "$OUT/train-speed-channels32.log" 2>&1
  mark "train_speed channels32 rc=$?: $(last "$OUT/train-speed-channels32.log" 4)"
fi
mark done
