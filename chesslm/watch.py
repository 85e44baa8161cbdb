"""Every job of the workflow dies with the snakemake that started it (Linux).

Killed alone (SIGKILL to its pid, not its group), snakemake leaves its jobs running, handed to
init: a ladder or play job went on for up to 44 s with its Stockfish processes and wrote its
outputs after snakemake was gone, beside the job of a rerun. So every job is guarded: each
workflow/scripts/*.py calls ``guard()`` first thing, and the trainer rules' shell runs under
``python -m chesslm.watch -- COMMAND`` (workflow/rules/common.smk, LOGGED), which guards
itself and then becomes COMMAND (exec: same pid, signals and exit status).

The workflow names its snakemake in ``CHESSLM_WATCH_PID`` at parse time (common.smk): the
pid of the process that parses it, which is the one that runs the jobs, locally and in a
Slurm job alike (the job's own snakemake on the node parses the workflow again). ``guard``
forks a watcher that waits on that pid and on the job's (pidfds: no polling delay). When
snakemake ends first it stops the job and every process below it (SIGSTOP, so that none
writes or forks meanwhile; then SIGKILL), Stockfish and torchrun's workers included. The job
is made a child subreaper, so that a process whose parent died stays below it and is found.
Writes are atomic (chesslm.files), so a killed job leaves no partial output.

A job whose snakemake is already gone when it starts (or whose ``CHESSLM_WATCH_PID`` is not
one of its ancestors) ends at once with one line on stderr. Without the variable (a job run
by hand), or not on Linux, ``guard`` does nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import sys

from chesslm import files

ENV = "CHESSLM_WATCH_PID"
POLL_S = 0.25  # the fallback's interval where pidfds are missing (Linux < 5.3)
PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
PR_SET_PDEATHSIG = 1
USAGE = "usage: python -m chesslm.watch -- COMMAND [ARG...]"


def guard(environ: os._Environ[str] | dict[str, str] = os.environ) -> None:
    """Make this process and everything it starts end with the snakemake named in
    ``environ[ENV]``: a watcher process is forked, and this returns at once."""
    value = environ.get(ENV)
    if not value or not sys.platform.startswith("linux"):
        return
    if not value.isdigit():
        sys.exit(f"chesslm.watch: {ENV}={value!r} is not a pid (common.smk sets it)")
    watched, job = int(value), os.getpid()
    if watched == job:  # code in snakemake's own process ends with it anyway
        return
    if watched not in ancestors(job):
        _say(f"snakemake (pid {watched}) that started this job is gone: job {job} stops")
        os._exit(1)
    files.unwind_on_signals()  # snakemake's stop or a user's kill: no temporary left behind
    fds = [_pidfd(watched), _pidfd(job)]
    _subreaper()
    if os.fork() == 0:
        try:
            _watcher(watched, job, *fds)
        finally:
            os._exit(0)
    for fd in fds:
        if fd is not None:
            os.close(fd)


def ancestors(pid: int) -> list[int]:
    """The parent of ``pid``, its parent, and so on up to init."""
    found = []
    while (pid := _parent(pid)) > 0:
        found.append(pid)
    return found


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (one walk of /proc)."""
    below: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            below.setdefault(_parent(int(name)), []).append(int(name))
    found, todo = set(), [pid]
    while todo:
        for child in below.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def stop_tree(job: int, *, spare: int | None = None) -> set[int]:
    """SIGKILL ``job`` and every process below it (``spare`` left out); returns their pids.
    All are stopped first, walking until no new one appears: a stopped process writes and
    forks nothing, and none is handed to init before it is found."""
    stopped: set[int] = set()
    new = {job}
    while new:
        for pid in new:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        stopped |= new
        new = {job, *descendants(job)} - stopped - {spare}
    for pid in stopped:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return stopped


def _watcher(watched: int, job: int, watched_fd: int | None, job_fd: int | None) -> None:
    """The forked watcher: it waits for the first of the two to end; snakemake first means
    the job stops. Signals for the job (Ctrl-C, snakemake's stop) are the job's to handle."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):  # not holding the job's pipes open
        os.dup2(null, fd)
    if watched_fd is not None and job_fd is not None:
        poller = select.poll()
        poller.register(watched_fd, select.POLLIN)
        poller.register(job_fd, select.POLLIN)
        ready = {fd for fd, _ in poller.poll()}
        gone = job_fd not in ready
    else:
        while _alive(watched) and os.getppid() == job:
            select.select([], [], [], POLL_S)
        gone = os.getppid() == job
    if gone:
        killed = stop_tree(job, spare=os.getpid())
        below = len(killed) - 1
        _say(f"snakemake (pid {watched}) is gone: job {job} and {below} processes below it killed")


def _parent(pid: int) -> int:
    """The parent pid of ``pid``; 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return int(fh.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _alive(pid: int) -> bool:
    """``pid`` runs (a zombie has exited; only its reaping is left)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # an old kernel or Python: the fallback polls
        return None


def _prctl(option: int, value: int, name: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({name}) failed")


def _subreaper() -> None:
    _prctl(PR_SET_CHILD_SUBREAPER, 1, "PR_SET_CHILD_SUBREAPER")


def die_with_parent() -> None:
    """This process is SIGKILLed when its parent (thread) exits (Linux; elsewhere nothing):
    torchrun's workers, play's preparation workers."""
    if sys.platform.startswith("linux"):
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, "PR_SET_PDEATHSIG")


def _say(line: str) -> None:
    with contextlib.suppress(OSError):  # snakemake's console may be gone with it
        os.write(2, f"chesslm.watch: {line}\n".encode())


def main(argv: list[str] | None = None) -> None:
    """``python -m chesslm.watch -- COMMAND [ARG...]``: COMMAND guarded (it replaces this
    process)."""
    args = sys.argv[1:] if argv is None else argv
    args = args[1:] if args[:1] == ["--"] else args
    if not args:
        sys.exit(USAGE)
    guard()
    try:
        os.execvp(args[0], args)
    except OSError as error:
        _say(f"cannot run {args[0]}: {error.strerror}")
        os._exit(127)


if __name__ == "__main__":
    main()
