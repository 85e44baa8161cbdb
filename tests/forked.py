"""Real command lines of snakemake and torchrun, each in a process forked from one that
imported its program once. Imports are 2.3 of the 3.3 CPU seconds of a snakemake dry run here
(the executor plugins' registry imports the slurm plugin, and it pandas), and the suite runs
snakemake over a hundred times; torchrun's launcher and each of its ranks import torch (1.8 s
each of the 6.5 CPU seconds of a tiny two-rank segment): the launcher is forked from a process
that imported torch and ``chesslm.train.segment``, and it forks each rank of
``-m chesslm.train.segment`` in turn (``fork_ranks``) where torchrun would start a fresh
interpreter; so do most of the project's commands (``python benchmarks/*.py --help``: 1.5 of
its 1.6 s). The child is the program's own ``main`` with the given arguments, working
directory, environment and output files: what the command runs, minus the imports. ``start``
leaves a command running and gives its pid, for a test that signals it
(tests/workflow/test_orphans.py, tests/workflow/test_recovery.py: but its two snakemakes at once,
the server running one at a time); tests/workflow/test_launch.py starts its commands itself.
``run`` gives a command its standard input (tests/workflow/test_uci.py's engine). A fault to inject
(tests/fault_injection/) is read by the forking process's sitecustomize, one process per
fault."""

from __future__ import annotations

import inspect
import io
import json
import logging
import os
import runpy
import select
import signal
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path

# each program's imports, done once by its forking process, and its main
PROGRAMS = {
    "snakemake": (
        "import snakemake.cli\n"
        "from snakemake_interface_executor_plugins.registry import ExecutorPluginRegistry\n"
        "ExecutorPluginRegistry()  # the plugins' imports, done once\n"
        "snakemake.cli.get_argument_parser()",
        "snakemake.cli.main",
    ),
    "torchrun": (
        "import torch.distributed.run\nhelpers['fork_ranks']()",  # helpers: this file's
        "torch.distributed.run.main",
    ),
    # ``python -m MODULE ...`` or ``python SCRIPT ...`` as the interpreter runs them (the
    # script's folder first on sys.path), torch imported: the project's commands import it.
    # Not for a command that forks a pool of workers: benchmarks/play_rule_speed.py's
    # fork-context pool (chesslm/scorer/prepare.py) hung so; it runs as a command
    "python": (
        "import runpy, torch\n"
        "def python(args):\n"
        "    if args[0] == '-m':\n"
        "        sys.argv = args[1:]\n"
        "        runpy.run_module(args[1], run_name='__main__', alter_sys=True)\n"
        "    else:\n"
        "        sys.argv = args\n"
        "        sys.path[0] = os.path.dirname(os.path.abspath(args[0]))\n"
        "        runpy.run_path(args[0], run_name='__main__')",
        "python",
    ),
}

# the forking process: one per program and test process, started at its first command, ended
# with it
SERVER = r"""
import atexit, json, logging, os, runpy, sys
helpers = runpy.run_path({here!r})  # this file's functions
{imports}
channel = os.fdopen(os.dup(1), "w")
for line in sys.stdin:
    request = json.loads(line)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        def child():
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update(request["env"])
            if request.get("setsid"):
                os.setsid()
            os.dup2(os.open(request.get("stdin", os.devnull), os.O_RDONLY), 0)
            os.dup2(os.open(request["stdout"], os.O_RDWR | os.O_CREAT | os.O_TRUNC), 1)
            if request["stderr"] == request["stdout"]:  # one offset, as stderr=STDOUT
                os.dup2(1, 2)
            else:
                os.dup2(os.open(request["stderr"], os.O_RDWR | os.O_CREAT | os.O_TRUNC), 2)
            sys.argv = [{program!r}, *request["args"]]
            {main}(request["args"])
        code = helpers["exit_status"](child)
        # what an interpreter's exit does: snakemake's log listener drains there
        atexit._run_exitfuncs()
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    channel.write(json.dumps({{"pid": pid}}) + "\n")
    channel.flush()
    _, status = os.waitpid(pid, 0)
    channel.write(json.dumps({{"rc": os.waitstatus_to_exitcode(status)}}) + "\n")
    channel.flush()
"""

# by program, PYTHONPATH and the fault to inject: sys.path is set at start, and a sitecustomize
# on it (tests/fault_injection/) reads its fault then
_servers: dict[tuple[str, str | None, str | None], subprocess.Popen[str]] = {}


def _started(program: str, env: dict[str, str]) -> subprocess.Popen[str]:
    key = (program, env.get("PYTHONPATH"), env.get("CHESSLM_FAULT"))
    server = _servers.get(key)
    if server is None or server.poll() is not None:
        imports, main = PROGRAMS[program]
        source = SERVER.format(imports=imports, main=main, program=program, here=__file__)
        server = _servers[key] = subprocess.Popen(
            [sys.executable, "-c", source, program],  # ps (and a rank) see which
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
    return server


def _reply(server: subprocess.Popen[str], timeout: float | None) -> dict:
    assert server.stdout is not None
    ready, _, _ = select.select([server.stdout], [], [], timeout)
    line = server.stdout.readline() if ready else ""
    if not line:
        raise TimeoutError("the fork server gave no answer")
    return json.loads(line)


def run(
    program: str,
    args: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    timeout: float | None = None,
    stdin: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """``program *args`` in ``cwd`` with exactly ``env``; its exit status and output.
    ``stdin``: what it reads on its standard input, then the input's end (None: nothing)."""
    server = _started(program, env)
    assert server.stdin is not None
    with tempfile.TemporaryDirectory() as scratch:
        out, err = Path(scratch, "stdout"), Path(scratch, "stderr")
        request = {"args": args, "cwd": str(cwd), "env": env, "stdout": str(out)}
        if stdin is not None:  # a file: the whole text is there before the child reads
            Path(scratch, "stdin").write_text(stdin)
            request["stdin"] = str(Path(scratch, "stdin"))
        server.stdin.write(json.dumps({**request, "stderr": str(err)}) + "\n")
        server.stdin.flush()
        pid = _reply(server, 60)["pid"]
        try:
            rc = _reply(server, timeout)["rc"]
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
            _reply(server, 60)
            raise subprocess.TimeoutExpired([program, *args], timeout or 0) from None
        output = (out.read_text(errors="replace"), err.read_text(errors="replace"))
    return subprocess.CompletedProcess([program, *args], rc, *output)


def start(
    program: str,
    args: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    console: Path | None = None,
    new_session: bool = False,
) -> tuple[int, Callable[..., int]]:
    """``program *args`` started, its stdout and stderr to ``console`` (None: dropped), in a
    session of its own if ``new_session`` (as Popen's ``start_new_session``): its pid, and a
    function that waits up to ``timeout`` seconds (default 900) for its exit status, or raises
    TimeoutError (call it before the next command: the server runs one at a time)."""
    server = _started(program, env)
    assert server.stdin is not None
    request = {"args": args, "cwd": str(cwd), "env": env, "setsid": new_session}
    streams = {"stdout": str(console or os.devnull), "stderr": str(console or os.devnull)}
    server.stdin.write(json.dumps({**request, **streams}) + "\n")
    server.stdin.flush()
    return _reply(server, 60)["pid"], lambda timeout=900: _reply(server, timeout)["rc"]


# a rank's command as torchrun's agent starts it (``python -u -m MODULE ...``)
RANK_MODULE = "chesslm.train.segment"


def fork_ranks() -> None:
    """In torchrun's launcher: each rank of ``-m chesslm.train.segment`` a fork of the launcher,
    which imported the module once, instead of a fresh interpreter (any other command as
    before). The agent's own handler (its ``Popen``: poll, wait, signals) keeps the rank as its
    child; what exec would give a fresh interpreter the child sets itself."""
    from torch.distributed.elastic.multiprocessing.subprocess_handler import subprocess_handler

    import chesslm.train.segment  # noqa: F401  the ranks' imports, done once

    class ForkedRank(subprocess.Popen):
        def _execute_child(self, *args: object) -> None:
            bound = inspect.signature(subprocess.Popen._execute_child).bind(self, *args)
            call = bound.arguments
            command = [str(word) for word in call["args"]]
            if command[1:4] != ["-u", "-m", RANK_MODULE]:
                return super()._execute_child(*args)
            sys.stdout.flush()
            sys.stderr.flush()
            self.pid = os.fork()
            self._child_created = True
            if self.pid == 0:
                _rank(command[4:], call)

    subprocess_handler.Popen = ForkedRank  # what the agent's handler starts its workers with


def _rank(argv: list[str], call: dict) -> None:
    """The forked rank: a session of its own, its output files, its environment and default
    signal handling, no inherited descriptors, unbuffered streams (``-u``); then the module as
    ``python -m`` runs it. Never returns into the launcher's code."""

    def rank() -> None:
        if call["start_new_session"]:
            os.setsid()
        for fd, source in ((1, call["c2pwrite"]), (2, call["errwrite"])):
            if source != -1:
                os.dup2(source, fd)
        os.closerange(3, 1 << 16)
        for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
            signal.signal(signum, signal.SIG_DFL)  # the agent's handlers raise in the agent
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.environ.clear()
        os.environ.update(call["env"])
        if call["cwd"]:
            os.chdir(call["cwd"])
        for name, fd in (("stdout", 1), ("stderr", 2)):
            stream = io.TextIOWrapper(open(fd, "wb", 0, closefd=False), write_through=True)
            setattr(sys, name, stream)
        logging.root.handlers.clear()  # as a fresh interpreter has them: basicConfig works
        logging.root.setLevel(logging.WARNING)
        sys.argv = [RANK_MODULE, *argv]
        sys.modules.pop(RANK_MODULE)  # as under ``python -m``: its code runs as __main__ only
        runpy.run_module(RANK_MODULE, run_name="__main__", alter_sys=True)

    os._exit(exit_status(rank))


def exit_status(run: Callable[[], object]) -> int:
    """The status an interpreter would exit with after ``run()``: 0, a ``sys.exit`` code (its
    text printed, status 1), or 1 after the traceback of an exception."""
    try:
        run()
    except SystemExit as done:
        if done.code is None or isinstance(done.code, int):
            return done.code or 0
        print(done.code, file=sys.stderr)
        return 1
    except BaseException:
        traceback.print_exc()
        return 1
    return 0
