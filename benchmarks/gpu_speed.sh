#!/usr/bin/env bash
# Training speed on a GPU host: 1 and 2 GPUs (DDP) in one call, then the segment start-up.
# Usage: benchmarks/gpu_speed.sh [workers, default "1,2"]   (JSON and logs go to $OUT)
# Run from the repository root with .whl carried (the device machine lacks python-chess etc.).
set -euo pipefail
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD
fi
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-results/gpu-speed-out}
mkdir -p "$OUT"
CACHE=/tmp/chesslm-speed-compile-cache
python3 benchmarks/train_speed.py --workers "${1:-1,2}" --compile-cache "$CACHE" \
  --out /tmp/chesslm-speed --json "$OUT/train-speed.json" 2>&1 | tee "$OUT/train-speed.log" \
  | grep -v -i "warn" || true
python3 benchmarks/train_speed.py --startup --out /tmp/chesslm-startup \
  --json "$OUT/startup.json" 2>&1 | tee "$OUT/startup.log" | grep -v -i "warn" || true
