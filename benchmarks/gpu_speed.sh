#!/usr/bin/env bash
# Training speed on the embedded sample's real games, on a lent GPU machine: the token cache
# (carried, or built by the pipeline), optionally the GPU-only tests, the attention kernels
# (ATTENTION=1), the start-up (STARTUP=1), then the speed benchmark (WORKERS=1 or 1,2; PATHS;
# PROFILE updates profiled per path; SPEED_CC its compile cache; SPEED_S=0 skips it). Hard
# time limits per part; JSON, logs and profiles go to $OUT.
set -uo pipefail
. benchmarks/device-env.sh
CACHE=results/datasets/sample/token-cache
if [ ! -f "$CACHE/cache.json" ]; then
  timeout -k 5 90 python3 -m snakemake "$CACHE/cache.json" --cores 16 > "$OUT/data.log" 2>&1 \
    || echo "data stages failed"
fi
if [ -n "${GPU_TESTS:-}" ]; then
  timeout -k 5 "${GPU_TESTS_S:-150}" python3 -m pytest -q -p no:cacheprovider $GPU_TESTS \
    > "$OUT/gpu-tests.log" 2>&1
  echo "gpu tests rc=$?"; tail -3 "$OUT/gpu-tests.log"
fi
if [ -n "${ATTENTION:-}" ]; then
  timeout -k 5 "${ATTENTION_S:-90}" python3 benchmarks/attention_speed.py --cache "$CACHE" \
    --json "$OUT/attention.json" > "$OUT/attention.log" 2>&1
  echo "attention rc=$?"; grep -v -i warn "$OUT/attention.log" | tail -8
fi
if [ -n "${STARTUP:-}" ]; then
  # cold then warm on one compile cache; then, if this image ships no bytecode (.pyc) for
  # its packages, as pip installs normally write, compile it once and start warm again
  run_startup() {  # $1: runs, $2: JSON name
    CHESSLM_STARTUP_PROFILE=1 timeout -k 10 "${STARTUP_S:-200}" \
      python3 benchmarks/train_speed.py --startup --startup-runs "$1" \
      --cache "$CACHE" --compile-cache /tmp/startup-cc --out /tmp/chesslm-startup \
      --json "$OUT/$2" >> "$OUT/startup.log" 2>&1
    echo "startup $1 rc=$?"
  }
  python3 -c "import sys; print('bytecode writes off:', sys.dont_write_bytecode)"
  run_startup cold,warm startup.json
  SITE=$(python3 -c "import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))")
  PYC_BEFORE=$(find "$SITE/torch" -name "*.pyc" | wc -l)
  if [ "$PYC_BEFORE" -lt 100 ]; then
    ( time python3 -m compileall -q -j 16 "$SITE" > /dev/null 2>&1 ) 2>&1 | grep real
    echo "bytecode compiled: $PYC_BEFORE -> $(find "$SITE/torch" -name "*.pyc" | wc -l) torch .pyc"
    run_startup warm-pyc startup-pyc.json
  fi
  grep "^start-up" "$OUT/startup.log"
  cp /tmp/chesslm-startup/*.profile.txt "$OUT/" 2>/dev/null
fi
if [ -n "${SPEED_S:-330}" ] && [ "${SPEED_S:-330}" != 0 ]; then
  timeout -k 10 "${SPEED_S:-330}" python3 benchmarks/train_speed.py --workers "${WORKERS:-1,2}" \
    --paths "${PATHS:-reference,compiled,graphs,packed}" --profile "${PROFILE:-0}" \
    --cache "$CACHE" --compile-cache "${SPEED_CC:-/tmp/cc}" --out /tmp/chesslm-speed \
    --json "$OUT/train-speed.json" > "$OUT/train-speed.log" 2>&1
  echo "speed rc=$?"
  cp /tmp/chesslm-speed/*-profile.txt "$OUT/" 2>/dev/null
  grep -v -i warn "$OUT/train-speed.log" | tail -30
fi
