#!/usr/bin/env bash
# Usage: logged.sh LOG COMMAND [ARG...]   (the training rules' shell lines)
#
# Runs COMMAND with stdout and stderr appended to LOG under a line naming this attempt, so a
# second attempt (say one refused because a live trainer holds the run directory) never erases
# the first one's log. On failure it prints the attempt's cause on stderr, where snakemake's
# console shows it: the trainer's one-line "chesslm...: error: ..." (rank 0's), else the last
# "ERROR" or "...Error: ..." line (another rank's, a traceback's); then the log's name. The
# exit status is COMMAND's.
set -u
log=$1
shift
start=$(stat -c %s "$log" 2>/dev/null || echo 0)
echo "==== $(date -u +%Y-%m-%dT%H:%M:%SZ) attempt, pid $$: $*" >>"$log"
"$@" >>"$log" 2>&1
status=$?
if [ "$status" -ne 0 ]; then
    attempt() { tail -c +"$((start + 1))" "$log"; }
    rank='^(\[rank[0-9]+\]:? )?'  # torchrun may prefix a rank's lines
    cause=$(attempt | grep -m1 -E "${rank}chesslm[a-z_.]*: error" ||
        attempt | grep -E "${rank}(ERROR |[A-Za-z_.]*(Error|Exception|Interrupt)\b)" | tail -n1)
    echo "${cause:-exit status $status} (log: $log)" >&2
fi
exit "$status"
