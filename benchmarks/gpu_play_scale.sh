#!/usr/bin/env bash
# Issue 33 on one GPU host: rule play's move-matching (benchmarks/play_rule_speed.py: the
# rule's evaluator, games prepared on every core, against the batched scorer in the same run),
# the steps named (several in one call: `split parts`):
#   bash benchmarks/gpu_play_scale.sh split   # both corpora, 35 % validation (>= 8,000 games),
#                                             # every game, match.compile: true (COMPILE="no yes":
#                                             # eager too)
#   bash benchmarks/gpu_play_scale.sh parts   # legality and the games against the anchors, old
#                                             # path and new (benchmarks/play_parts_speed.py)
#   bash benchmarks/gpu_play_scale.sh month   # a generated 10M-game month, 5 % validation,
#                                             # match.games 10,000 (the default), eager (the
#                                             # default; COMPILE_MONTH=yes: compiled)
#   bash benchmarks/gpu_play_scale.sh trained # legality's new path with a trained run's
#                                             # weights (CHECKPOINT, e.g. gpu_outcome.sh's)
# DEADLINE (epoch seconds) caps every step's time limit; REPEATS: split's rounds (2); PREP_WORKERS (e.g. 14,12) also runs
# each move-matching part with those preparation processes; ATTENTION (e.g. "dense split": each
# in turn; default split) sets split's match.attention; SDPA ("torch play": each in turn;
# torch: torch's own; efficient, cudnn, math) sets split's attention kernels (chesslm.scorer.kernels;
# default play's), BATCH_TOKENS split's match.batch_tokens, WINDOW ("1 16": each in turn) its chunks ordered by length together (matching.WINDOW_CHUNKS; 1: contiguous), IN_FLIGHT its passes queued, WARM_UP=no no warm-up pass (round 0 a fresh job's), PARTS_SDPA (e.g. torch,play) parts'; OLD=no skips parts' old paths; PROFILE=1 profiles rounds 0 and 1. JSON and a progress log go to $OUT.
set -uo pipefail
. benchmarks/device-env.sh
export PYTHONUNBUFFERED=1
CORES=$(nproc)
mark() { echo "[$(date +%s)] $*" | tee -a "$OUT/progress.log"; }
DEADLINE=${DEADLINE:-$(( $(date +%s) + 100000 ))}
limit() { local left=$(( DEADLINE - $(date +%s) )); echo $(( $1 < left ? $1 : (left > 1 ? left : 1) )); }
mark "start: $CORES cores; $(nvidia-smi --query-gpu=name --format=csv,noheader); torch $(python3 -c 'import torch; print(torch.__version__)')"
BENCH=(python3 benchmarks/play_rule_speed.py --preset baseline --device cuda --threads "$CORES")
[ -n "${PREP_WORKERS:-}" ] && BENCH+=(--prep-workers "$PREP_WORKERS")  # e.g. 14,12: the part again
[ -n "${PROFILE:-}" ] && BENCH+=(--profile)    # rounds 0 and 1 under torch.profiler
[ -n "${BATCH_TOKENS:-}" ] && BENCH+=(--batch-tokens "$BATCH_TOKENS")  # match.batch_tokens
[ -n "${IN_FLIGHT:-}" ] && BENCH+=(--in-flight "$IN_FLIGHT")  # scoring.IN_FLIGHT
[ "${WARM_UP:-yes}" = no ] && BENCH+=(--no-warm-up)  # round 0's part: compile, first kernels
for step in "${@:-split}"; do
case "$step" in
split)
  for attention in ${ATTENTION:-split}; do  # e.g. "dense split": each a fresh process
  for sdpa in ${SDPA:-play}; do  # e.g. "torch play": cuDNN's plans per new shape, then not
  for compiled in ${COMPILE:-yes}; do
  for window in ${WINDOW:-default}; do
    flag=(); [ "$compiled" = yes ] && flag=(--compile)
    [ "$window" != default ] && flag+=(--window "$window")
    name=split-$attention-compile-$compiled-sdpa-$sdpa-window-$window${BATCH_TOKENS:+-bt$BATCH_TOKENS}${IN_FLIGHT:+-if$IN_FLIGHT}${WARM_UP:+-warm-up-$WARM_UP}${PROFILE:+-profiled}
    timeout -k 5 "$(limit 250)" "${BENCH[@]}" --pgn resources/lichess-sample.pgn.zst resources/lichess-github.pgn.zst \
      --validation 0.35 --legality-games 1024 --repeats "${REPEATS:-2}" "${flag[@]}" --sdpa "$sdpa" \
      --attention "$attention" --json "$OUT/play-rule-$name.json" > "$OUT/$name.log" 2>&1
    rc=$?
    mark "split, attention $attention, compile $compiled, sdpa $sdpa, window $window: rc=$rc $(tail -1 "$OUT/$name.log")"
  done
  done
  done
  done
  ;;
parts)
  [ -d .deb ] && dpkg -x .deb/stockfish_*.deb /tmp/sf  # Debian's stockfish, carried
  export PATH=$PATH:/tmp/sf/usr/games
  old=(); [ "${OLD:-yes}" = no ] && old=(--no-old)  # OLD=no: the new paths only
  timeout -k 5 "$(limit 400)" python3 benchmarks/play_parts_speed.py --preset baseline --device cuda \
    --sdpa "${PARTS_SDPA:-play}" "${old[@]}" --json "$OUT/play-parts-h200.json" > "$OUT/parts.log" 2>&1
  rc=$?
  mark "parts: rc=$rc $(tail -3 "$OUT/parts.log")"
  ;;
month)
  pgn=${MONTH_PGN:-/tmp/month-10m.pgn.zst}
  if [ ! -e "$pgn.ok" ]; then  # not already generated (gpu_outcome.sh's MONTH_PGN)
    t0=$(date +%s)
    timeout -k 5 "$(limit 150)" python3 benchmarks/month_pgn.py --games 10000000 --out "$pgn" > "$OUT/month-gen.log" 2>&1
    rc=$?
    mark "generated 10M games in $(( $(date +%s) - t0 )) s: rc=$rc $(ls -la "$pgn" 2>&1)"
  fi
  flag=(); [ "${COMPILE_MONTH:-no}" = yes ] && flag=(--compile)
  timeout -k 5 "$(limit 420)" "${BENCH[@]}" --pgn "$pgn" --validation 0.05 --legality-games 1024 \
    --games 10000 "${flag[@]}" --repeats 2 --json "$OUT/play-rule-month-10m.json" > "$OUT/month.log" 2>&1
  rc=$?
  mark "month, 10,000 of its validation games, compile ${COMPILE_MONTH:-no}: rc=$rc $(tail -1 "$OUT/month.log")"
  ;;
trained)
  timeout -k 5 "$(limit 200)" python3 benchmarks/play_parts_speed.py --preset baseline --device cuda \
    --parts legality --checkpoint "$CHECKPOINT" --json "$OUT/play-parts-h200-trained.json" \
    > "$OUT/trained.log" 2>&1
  rc=$?
  mark "legality, trained weights ($CHECKPOINT): rc=$rc $(tail -3 "$OUT/trained.log")"
  ;;
*) echo "unknown step $step (split, parts, month, trained)" >&2; exit 2 ;;
esac
done
mark done
