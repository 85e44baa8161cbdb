#!/usr/bin/env bash
# Two-GPU pilot: probe, segments resuming from last.pt, one segment SIGKILLed mid-way and
# recovered by rerunning the same command; then the probe with 1 and 2 GPUs for scaling.
set -uo pipefail
. benchmarks/device-env.sh
nvidia-smi --query-gpu=index,name,memory.total --format=csv | tee "$OUT/gpu.txt"
nvidia-smi topo -m >> "$OUT/gpu.txt" 2>&1
SNK=(python3 -m snakemake results/pilot/results.json --cores 32
     --configfile config/config.yaml benchmarks/pilot-2gpu.yaml)
t0=$(date +%s)
setsid "${SNK[@]}" > "$OUT/run1.log" 2>&1 &
pid=$!
# Wait for segment 1 to be under way, then kill everything of that run.
for _ in $(seq 300); do [ -f results/pilot/segments/0.json ] && break; sleep 1; done
sleep 30
echo "killing snakemake and its segment at $(( $(date +%s) - t0 )) s" | tee "$OUT/kill.txt"
ls results/pilot/segments >> "$OUT/kill.txt"
kill -9 -- -$pid; sleep 3; pkill -9 -f chesslm.train.segment; sleep 2
"${SNK[@]}" --unlock > "$OUT/unlock.log" 2>&1
timeout -k 10 400 "${SNK[@]}" --rerun-incomplete > "$OUT/run2.log" 2>&1
echo "rerun rc=$? after $(( $(date +%s) - t0 )) s" | tee -a "$OUT/kill.txt"
python3 -m chesslm.report.summary results/pilot > /dev/null 2>&1 || echo "summary failed"
for n in 1 2; do
  timeout -k 5 90 python3 -m torch.distributed.run --standalone --nproc-per-node=$n \
    -m chesslm.train.segment probe --cache results/datasets/sample/token-cache \
    --run-dir /tmp/probe-$n --dataset sample --model baseline --device cuda --workers $n \
    --probe-out "$OUT/probe-${n}gpu.json" > "$OUT/probe-${n}gpu.log" 2>&1 || echo "probe $n failed"
done
cp results/pilot/results.json results/pilot/report/summary.md results/pilot/train/events.jsonl "$OUT/" 2>/dev/null
tail -3 "$OUT/run2.log"; cat "$OUT/kill.txt"; ls results/pilot/segments
