#!/usr/bin/env bash
# Usage: logged.sh LOG COMMAND [ARG...]   (the training rules; COMMAND may be `env VAR=... cmd`)
#
# Runs COMMAND with stdout and stderr in a file of its own, LOG's directory/NAME.attempts/
# STAMP-PID.log, which LOG then names too (a hard link; a symlink where links fail).
# Snakemake deletes a job's log before each attempt, and the trainer of a killed snakemake may
# still be writing to it: this way a second attempt (say one refused because that trainer
# still holds the run directory) never erases the first one's log.
# On failure it prints the attempt's cause on stderr, where snakemake's console shows it: a
# rank killed by a signal (torchrun's root cause), the launcher killed by one, else the
# trainer's one-line "chesslm...: error: ..." (rank 0's), else the last "ERROR" or
# "...Error: ..." line (another rank's, a traceback's); then the log's name. The trainer's
# progress lines reach that console too, as they come.
# It does not watch snakemake itself: the rules run it under `python -m chesslm.watch --`
# (common.smk, LOGGED), the one mechanism every job of the workflow ends by when its snakemake
# is killed alone; that stops this script, the trainer and its workers at once.
# The exit status is COMMAND's.
set -u
log=$1
shift
attempts="${log%.log}.attempts"
mkdir -p "$attempts"
attempt="$attempts/$(date -u +%Y%m%dT%H%M%SZ)-$$.log"
echo "==== $(date -u +%Y-%m-%dT%H:%M:%SZ) attempt, pid $$: $*" >"$attempt"
rm -f "$log"
ln "$attempt" "$log" 2>/dev/null || ln -s "$(basename "$attempts")/$(basename "$attempt")" "$log"
"$@" >>"$attempt" 2>&1 &
child=$!
# signals for the job (Ctrl-C, snakemake's or a scheduler's stop) go on to COMMAND, run in the
# background here so that the traps run while this script waits for it
for sig in INT TERM HUP; do trap "kill -$sig $child 2>/dev/null" "$sig"; done
# the trainer's progress lines (chesslm.train.progress.MARK) go on to snakemake's console, and
# its refusal of a segment another trainer trained (an exit 0: chesslm.train.resume)
tail -n +1 -f --pid="$child" "$attempt" 2>/dev/null |
    sed -u -n -e 's/.*\(progress: \)/\1/p' -e 's/^.*\(chesslm[a-z_.]*: refused: \)/\1/p' >&2 &
progress=$!
alive() { # a pid that is running (a zombie has exited; only its reaping is left)
    local stat
    stat=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null) && [ "${stat%% *}" != Z ]
}
while :; do # a trapped signal ends `wait` early: wait again until COMMAND has exited
    wait "$child"
    status=$?
    alive "$child" || break
done
wait "$progress" 2>/dev/null
# torchrun's "Root Cause" block: the rank that failed first, its pid and exit code (negative:
# the signal that killed it)
dead_rank() {
    awk '/Root Cause/ { on = 1 } on && $1 == "rank" { rank = $3 }
        on && $1 == "exitcode" { code = $3; pid = $5; sub(/\)/, "", pid) }
        END { if (code != "" && code < 0) printf "rank %s (pid %s) was killed by signal %d", rank, pid, -code }' "$1"
}
if [ "$status" -ne 0 ]; then
    rank='^(\[rank[0-9]+\]:? )?'  # torchrun may prefix a rank's lines
    died=$(dead_rank "$attempt")
    if [ -n "$died" ]; then
        cause="$died ($(kill -l "${died##* }" 2>/dev/null || echo ?)); the other ranks stopped"
    elif [ "$status" -gt 128 ] && ! grep -q "Root Cause" "$attempt"; then
        cause="the launcher (pid $child) was killed by signal $((status - 128)) ($(kill -l $((status - 128))))"
    else
        cause=$(grep -m1 -E "${rank}chesslm[a-z_.]*: error" "$attempt" ||
            grep -E "${rank}(ERROR |[A-Za-z_.]*(Error|Exception|Interrupt)\b)" "$attempt" | tail -n1)
    fi
    echo "${cause:-exit status $status} (log: $log)" >&2
fi
exit "$status"
