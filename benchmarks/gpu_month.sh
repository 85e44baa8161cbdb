#!/usr/bin/env bash
# The Lichess month end to end on a GPU host, as a background job the device tool polls:
#   play_speed (batched move-matching vs the oracle loop), a generated month of $GAMES games,
#   convert scaling (1 worker vs every core, $SCALE_GAMES games), then snakemake:
#   convert -> verify -> token_cache -> probe -> segments of run month_pilot (max_seconds 180,
#   benchmarks/month.yaml) with segment 1 killed (kill -9 of snakemake's process group) and
#   recovered by the same command, -> play -> summary.
# Usage: setsid benchmarks/gpu_month.sh > results/device/driver.log 2>&1 &
# Progress: results/device/month.log (one line a stage, with unix times); records copied there.
set -uo pipefail
GAMES=${GAMES:-5000000}
SCALE_GAMES=${SCALE_GAMES:-500000}
KILL_AFTER_S=${KILL_AFTER_S:-60}
export OUT=results/device
. benchmarks/device-env.sh
export PATH=$PATH:/tmp/sf/usr/games PYTHONUNBUFFERED=1
CORES=$(nproc)
CONFIG=(--configfile config/config.yaml benchmarks/month.yaml)  # takes several values: last
smk() { python3 -m snakemake "$@" --cores "$CORES" "${CONFIG[@]}"; }
mark() { echo "[$(date +%s)] $*" | tee -a "$OUT/month.log"; }
# peak RSS (KiB) of the largest process a command ran, and its wall time
measured() {
  python3 - "$@" <<'PY'
import resource, subprocess, sys, time
t = time.time(); rc = subprocess.call(sys.argv[1:])
print(f"wall_s={time.time() - t:.1f} peak_rss_mib={resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024:.0f} rc={rc}")
sys.exit(rc)
PY
}
mkdir -p results/month
mark "start: $CORES cores; $(nvidia-smi --query-gpu=name --format=csv,noheader)"
mark "generate $GAMES: $(measured python3 benchmarks/month_pgn.py --games "$GAMES" --out results/month/month.pgn.zst 2>&1 | tail -2 | tr '\n' ' ')"
python3 benchmarks/month_pgn.py --games "$SCALE_GAMES" --out results/month/scale.pgn.zst > /dev/null 2>&1
mark "convert scaling $SCALE_GAMES: $(python3 benchmarks/convert_throughput.py --pgn results/month/scale.pgn.zst --workers 1,$CORES --json $OUT/convert-scaling.json 2> $OUT/convert-scaling.err | tail -4 | tr '\n' ' ')"
for target in results/datasets/month/manifest.json results/datasets/month/integrity-receipt.json \
    results/datasets/month/token-cache/cache.json results/month_pilot/probe-results.json \
    results/month_pilot/segments/0.json; do
  mark "$target: $(measured python3 -m snakemake "$target" --cores "$CORES" "${CONFIG[@]}" > "$OUT/smk-$(basename "$target").log" 2>&1; tail -1 "$OUT/smk-$(basename "$target").log")"
done
# segment 1: killed mid-way with its whole process group, then the same command again
setsid python3 -m snakemake results/month_pilot/segments/1.json --cores "$CORES" "${CONFIG[@]}" > "$OUT/smk-killed.log" 2>&1 &
pid=$!
sleep "$KILL_AFTER_S"
kill -9 -- -"$pid"; sleep 5
mark "segment 1 killed after ${KILL_AFTER_S}s; trainers left: $(pgrep -fc chesslm.train.segment || true)"
smk results/month_pilot/results.json --unlock > /dev/null 2>&1
mark "chain to results.json: $(measured python3 -m snakemake results/month_pilot/results.json --rerun-incomplete --cores "$CORES" "${CONFIG[@]}" > "$OUT/smk-chain.log" 2>&1; tail -1 "$OUT/smk-chain.log")"
mark "play + summary: $(measured python3 -m snakemake results/month_pilot/report/summary.md --cores "$CORES" "${CONFIG[@]}" > "$OUT/smk-play.log" 2>&1; tail -1 "$OUT/smk-play.log")"
cp results/month_pilot/segments/*.json results/datasets/month/manifest.json "$OUT/" 2>/dev/null
cp results/month_pilot/report/summary.md results/month_pilot/play/*.json "$OUT/" 2>/dev/null
mark "play_speed flex+compile: $(python3 benchmarks/play_speed.py --preset baseline --device cuda --compile --attention flex 2>&1 | tail -1)"
mark done
