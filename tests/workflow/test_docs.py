"""Every command and YAML snippet in README.md, config/README.md, benchmarks/README.md,
CHANGELOG.md and docs/*.md, and every command of BENCHMARKS.md's table of current figures, run
or checked, so that the documentation cannot drift from the code.

Commands come from indented code blocks and ```bash fences (```text fences and unlabelled ones
are diagrams or illustrations). Each command is handled by its program:

- ``snakemake``: parsed with Snakemake's own argument parser (every ``results/...`` word must
  be a target, not swallowed by an option that takes several values such as ``--forcerun``),
  then run in a scratch copy of the repository root: as a dry run (``-n``) when it would build
  something (training needs minutes or GPUs; the demo runs for real in the workflow tests),
  ``--report FILE`` as the plan of its targets (tests/workflow/test_report_browser.py builds a real
  report), ``--unlock`` and ``--lint`` as they are; Slurm commands plan through the Slurm
  executor, with the profile the docs show;
- ``python -m pytest``: collected (``--collect-only``) with the same arguments;
- ``python -m chesslm.report.summary``: run on a synthetic run of that name;
- ``chesslm-uci``: the engine's module with the same arguments, on a tiny checkpoint at the
  path shown, asked for a move; ``chesslm-analyse`` likewise, on the sample's first games;
- ``xboard -fcp ...``: the engine command xboard starts (Polyglot, the console script) run
  on a tiny checkpoint, answering 1.e4 in XBoard protocol;
- ``python benchmarks/*.py`` (or under ``torchrun``): every flag the docs use must be one the
  script accepts (GPU);
- ``python3 -m venv``: run; ``pip install``: each requirement checked against the installed
  environment and pyproject.toml (CI installs from scratch: .ci/run);
- ``squeue``, ``sacct``, ``bash tools/*.sh``, ``bash benchmarks/*.sh``, ``.ci/run``:
  syntax-checked here (the benchmarks' drivers need a lent GPU host); the Slurm commands run
  for real with CHESSLM_SLURM=1 on the CI cluster.

YAML snippets: a config snippet (``datasets``/``runs``) merged into config/config.yaml must
validate against the schema, and every default in config/README.md's tables must read (as
YAML) as the schema's default; profile snippets must parse and name real rules; a lichess-bot
``engine`` section must name the console script and only flags and options the engine has.
"""

from __future__ import annotations

import os
import queue
import re
import shlex
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import jsonschema
import pytest
import yaml

from chesslm.config import resolve_likes
from tests import forked
from tests.helpers import ROOT

DOCS = [
    ROOT / "README.md",
    ROOT / "config" / "README.md",
    ROOT / "benchmarks" / "README.md",
    ROOT / "CHANGELOG.md",
    *sorted((ROOT / "docs").glob("*.md")),
]
ARCHITECTURE = ROOT / "docs" / "architecture.md"  # how to read the code, and the layout
SCHEMA = yaml.safe_load((ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text())
RULES = {
    m.group(2)
    for smk in (ROOT / "workflow" / "rules").glob("*.smk")
    for m in re.finditer(r"^(rule|checkpoint) (\w+):", smk.read_text(), re.M)
}
SLURM = os.environ.get("CHESSLM_SLURM") == "1"
LINT_ACCEPTED = "Specify a conda environment or container for each rule."


@dataclass(frozen=True)
class Block:
    doc: Path
    line: int
    kind: str  # "commands" or "yaml"
    text: str

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"


def blocks(doc: Path) -> list[Block]:
    """The code blocks of a Markdown file: indented ones and fenced ones."""
    lines = doc.read_text().splitlines()
    out, i = [], 0
    while i < len(lines):
        fence = re.match(r"```(\w*)", lines[i])
        if fence:
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            lang, body = fence.group(1), "\n".join(lines[i + 1 : end])
            if lang in ("bash", "sh"):
                out.append(Block(doc, i + 2, "commands", body))
            elif lang == "yaml":
                out.append(Block(doc, i + 2, "yaml", body))
            i = end + 1
        elif lines[i].startswith("    ") and (i == 0 or not lines[i - 1].strip()):
            start = i
            while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
                i += 1
            body = "\n".join(line[4:] for line in lines[start:i]).strip("\n")
            kind = "yaml" if re.match(r"[\w-]+:(\s|$)", body) else "commands"
            out.append(Block(doc, start + 1, kind, body))
        else:
            i += 1
    return out


ALL_BLOCKS = [b for doc in DOCS for b in blocks(doc)]


@dataclass(frozen=True)
class Command:
    where: str
    words: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()

    def __str__(self) -> str:
        return f"{self.where}: {shlex.join(self.words)}"


def commands() -> list[Command]:
    """Every command of every command block; ``a && b`` gives two; comments dropped;
    an options-only line (``--set-resources ...``) continues the last snakemake command."""
    out: list[Command] = []
    for block in ALL_BLOCKS:
        if block.kind != "commands":
            continue
        joined = block.text.replace("\\\n", " ")
        for offset, line in enumerate(joined.splitlines()):
            words = shlex.split(line, comments=True)
            if not words:
                continue
            where = f"{block.where}+{offset}"
            if words[0].startswith("--"):
                last = next(c for c in reversed(out) if c.words[0] == "snakemake")
                out.append(Command(where, (*last.words, *words)))
                continue
            part: list[str] = []
            for word in [*words, "&&"]:
                if word != "&&":
                    part.append(word)
                    continue
                env = []
                while part and re.fullmatch(r"[A-Z_]+=\S*", part[0]):
                    env.append(tuple(part.pop(0).split("=", 1)))
                out.append(Command(where, tuple(part), tuple(env)))
                part = []
    return out


def figures_commands() -> list[Command]:
    """The command of each row of BENCHMARKS.md's first table (the current figures): a cell
    whose first code span starts with a program; "the same" and the like are no command."""
    text = (ROOT / "BENCHMARKS.md").read_text().split("\n## ", 1)[0]
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        cells = line.strip().strip("|").split("|")
        if len(cells) < 8 or not cells[6].strip().startswith("`"):
            continue
        words = shlex.split(re.match(r"\s*`([^`]+)`", cells[6]).group(1))
        env = []
        while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
            env.append(tuple(words.pop(0).split("=", 1)))
        out.append(Command(f"BENCHMARKS.md:{n}", tuple(words), tuple(env)))
    return out


ALL_COMMANDS = commands() + figures_commands()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repository root as a user sees it (links), with its own .snakemake/."""
    root = tmp_path_factory.mktemp("docs")
    for name in ("Snakefile", "workflow", "profiles", "resources", "config", "benchmarks"):
        (root / name).symlink_to(ROOT / name)
    # `--profile mysite` (docs/slurm.md): the profile the docs show, where Snakemake finds it
    profile = next(b for b in ALL_BLOCKS if b.text.startswith("default-resources:"))
    (root / "mysite").mkdir()
    (root / "mysite" / "config.yaml").write_text(profile.text + "\n")
    for name, text in config_files().items():  # docs/own-games.md's mine.yaml
        (root / name).write_text(text)
        for dataset in (yaml.safe_load(text).get("datasets") or {}).values():
            files = dataset.get("inputs", dataset.get("pgn", []))  # pgn: the key's old name
            for path in map(Path, files):  # the user's games: the sample
                if not (root / path).exists():
                    (root / path).parent.mkdir(parents=True, exist_ok=True)
                    (root / path).symlink_to(ROOT / "resources" / "lichess-sample.pgn.zst")
    return root


def config_files() -> dict[str, str]:
    """The config files the docs show: a YAML block whose first line is ``# NAME.yaml``."""
    out = {}
    for block in ALL_BLOCKS:
        first = block.text.splitlines()[0] if block.kind == "yaml" else ""
        if found := re.fullmatch(r"# ([\w.-]+\.yaml)", first.strip()):
            out[found.group(1)] = block.text + "\n"
    return out


_RUNS: dict[tuple, subprocess.CompletedProcess[str]] = {}


def run(
    command: list[str], cwd: Path, env: dict[str, str] | None = None, *, key: tuple = ()
) -> subprocess.CompletedProcess[str]:
    """Run ``command``; a command the docs repeat (same ``key``) runs once; snakemake's and
    python's forked (tests/forked.py)."""
    if key and key in _RUNS:
        return _RUNS[key]
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    if command[0] in ("snakemake", sys.executable) and command[1:3] != ["-m", "venv"]:
        program = "python" if command[0] == sys.executable else "snakemake"
        done = forked.run(program, command[1:], cwd=cwd, env=full_env)
    else:
        done = subprocess.run(command, cwd=cwd, env=full_env, capture_output=True, text=True)
    if key:
        _RUNS[key] = done
    return done


def snakemake_targets(words: list[str]) -> list[str]:
    from snakemake.cli import get_argument_parser

    return list(get_argument_parser().parse_args(words).targets)


def check_snakemake(command: Command, workdir: Path) -> None:
    words = list(command.words[1:])
    targets = snakemake_targets(words)
    for word in words:
        if word.startswith("results/"):
            assert word in targets, (
                f"{command}: {word} is taken as an option's value, not a target "
                "(options such as --forcerun take several values: put the targets first)"
            )
    if "--report" in words:
        i = words.index("--report")
        words[i : i + 2] = ["-n"]  # the report itself: tests/workflow/test_report_browser.py
    elif not {"--unlock", "--lint", "-n", "--dry-run"} & set(words):
        words.append("-n")
    slurm = "workflow/profiles/slurm" in words
    # a plan does not depend on --cores: the docs' repeats of a command run once
    key = ("snakemake", *(w for i, w in enumerate(words) if "--cores" not in words[i - 1 : i + 1]))
    done = run(["snakemake", *words], workdir, key=key)
    output = done.stdout + done.stderr
    if "--lint" in words:  # docs/commands.md "Lint": the one remark left is deliberate
        remarks = set(re.findall(r"^    \* (.+?):?$", output, re.M))
        assert remarks == {LINT_ACCEPTED}, f"{command}: new remarks {remarks - {LINT_ACCEPTED}}"
        return
    assert done.returncode == 0, f"{command}\n{output[-3000:]}"
    if targets and "-n" in words:
        assert not re.search(r"^(local)?rule all:", done.stdout, re.M), f"{command} plans `all`"
        assert "Job stats" in done.stdout or "Nothing to be done" in output, output[-2000:]
    if slurm and "-n" in words:
        assert "slurm" in output.lower(), f"{command}: not planned for the Slurm executor"


def check_python(command: Command, workdir: Path) -> None:
    words = list(command.words)
    env = dict(command.env)
    if words[1:3] == ["-m", "pytest"]:
        collect = [sys.executable, *words[1:], "--collect-only", "-q"]
        done = run(collect, ROOT, env, key=(*collect, *sorted(env.items())))
        assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
        # per file ("-q -q": file: count) or per test (one -q: file::test), as the words ask
        assert re.search(r"^tests/\S+\.py(: \d+$|::)", done.stdout, re.M), done.stdout[-2000:]
    elif words[1:3] == ["-m", "chesslm.report.summary"]:
        from tests.workflow.test_summary import make_run

        run_name = Path(words[3]).name
        scratch = workdir.parent / f"{workdir.name}-summary"  # apart from the dry runs' tree
        if not (scratch / "results" / run_name).exists():
            make_run(scratch, run_name)
        done = run([sys.executable, *words[1:]], scratch, env)
        assert done.returncode == 0, f"{command}\n{done.stderr}"
        assert done.stdout.startswith(f"# Run `{run_name}`"), done.stdout[:300]
        assert not (scratch / "results" / run_name / "report").exists()  # the rule's files
    elif words[1:3] == ["-m", "venv"]:
        done = run([sys.executable, "-m", "venv", "--without-pip", words[3]], workdir)
        assert done.returncode == 0, done.stderr
        assert (workdir / words[3] / "bin" / "activate").is_file()
    elif words[1].startswith("benchmarks/"):  # GPU benchmarks: their flags must exist
        done = run([sys.executable, words[1], "--help"], ROOT, env, key=(words[1], "--help"))
        assert done.returncode == 0, f"{command}\n{done.stderr}"
        for flag in (w.split("=")[0] for w in words[2:] if w.startswith("--")):
            assert re.search(rf"{re.escape(flag)}\b", done.stdout), f"{command}: no {flag}"
    else:
        raise AssertionError(f"{command}: no check for this python command; add one")


def check_pip(command: Command) -> None:
    from importlib.metadata import version

    assert command.words[1] == "install", command
    pyproject = (ROOT / "pyproject.toml").read_text()
    for word in command.words[2:]:
        if word == "-e":
            continue
        if word.startswith("."):
            extras = re.fullmatch(r"\.(?:\[([\w,]+)\])?", word)
            assert extras, f"{command}: {word}"
            for extra in filter(None, (extras.group(1) or "").split(",")):
                assert re.search(rf"^{extra} = \[", pyproject, re.M), f"{command}: no [{extra}]"
        else:
            name, _, pinned = word.partition("==")
            assert version(name).split("+")[0] == pinned, f"{command}: {name} {version(name)}"


def check_uci(command: Command, workdir: Path) -> None:
    """The engine answers ``uci`` and a ``go`` with a legal move, from a tiny checkpoint put
    where the command says (a scratch tree of its own)."""
    import chess

    from tests.helpers import model_checkpoint

    words = list(command.words[1:])
    scratch = workdir.parent / f"{workdir.name}-uci"
    path = scratch / words[words.index("--checkpoint") + 1]
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        model_checkpoint(path)
    engine = [sys.executable, "-m", "chesslm.engine.uci", *words]
    full_env = {**os.environ, "PYTHONPATH": str(ROOT)}
    talk = "uci\nposition startpos moves e2e4\ngo movetime 100\n"  # answered at its end
    done = subprocess.run(
        engine, cwd=scratch, env=full_env, capture_output=True, text=True, input=talk
    )
    assert done.returncode == 0, f"{command}\n{done.stderr}"
    assert "uciok" in done.stdout.splitlines(), done.stdout
    best = re.search(r"^bestmove (\S+)", done.stdout, re.M)
    board = chess.Board()
    board.push_uci("e2e4")
    assert best and chess.Move.from_uci(best.group(1)) in board.legal_moves, done.stdout


def xboard_words(line: str) -> list[str]:
    """xboard's split of an engine command (``-fcp``), no shell: blank-separated words, a word
    that starts with a quote running to the next such quote."""
    return [a or b or c for a, b, c in re.findall(r"'([^']*)'|\"([^\"]*)\"|(\S+)", line)]


def xboard_talk(argv: list[str], cwd: Path, env: dict[str, str], where: str) -> str:
    """Speak XBoard protocol to ``argv`` as a GUI does (features first, then 1.e4) and return
    the move it answers; every wait has a deadline, so a silent adapter fails, never hangs."""
    pipe = subprocess.PIPE
    proc = subprocess.Popen(
        argv, cwd=cwd, env=env, text=True, stdin=pipe, stdout=pipe, stderr=subprocess.STDOUT
    )
    lines: queue.Queue[str | None] = queue.Queue()  # None: the end of its output
    pump = threading.Thread(target=lambda: [*map(lines.put, proc.stdout), lines.put(None)])
    pump.daemon = True  # a stray engine holding the pipe cannot keep pytest alive
    pump.start()
    seen: list[str] = []

    def until(pattern: str, seconds: float) -> re.Match[str]:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = lines.get(timeout=left)
            except queue.Empty:
                line = None
            if line is None:  # silent past the deadline, or exited: fail now
                break
            seen.append(line.rstrip("\n"))
            if found := re.search(pattern, seen[-1]):
                return found
        raise AssertionError(f"{where}: no {pattern!r}; it said:\n" + "\n".join(seen[-40:]))

    def send(text: str) -> None:
        if proc.poll() is None:  # a dead adapter's output is the message (until's)
            proc.stdin.write(text + "\n")
            proc.stdin.flush()

    try:
        send("xboard\nprotover 2")
        until(r"^feature .*\bdone=1", 120)
        send("new\n" + ("usermove " if any("usermove=1" in f for f in seen) else "") + "e2e4")
        move = until(r"^move (\S+)$", 120).group(1)
        send("quit")
        assert proc.wait(timeout=30) == 0, f"{where}: exit {proc.returncode}\n" + "\n".join(seen)
        return move
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def check_xboard(command: Command, workdir: Path) -> None:
    """The ``-fcp`` engine command as xboard starts it: Polyglot (apt's, at the path shown,
    which README's install command brings) running the console script on a tiny checkpoint
    put where the command says, answering 1.e4 with a legal move in XBoard protocol."""
    import chess

    from tests.helpers import model_checkpoint

    words = list(command.words)
    adapter = xboard_words(words[words.index("-fcp") + 1])
    assert Path(adapter[0]).is_file(), f"{command}: no {adapter[0]} (apt-get install polyglot)"
    engine = shlex.split(adapter[adapter.index("-ec") + 1])  # Polyglot's wordexp: shell words
    scratch = workdir.parent / f"{workdir.name}-xboard"
    path = scratch / engine[engine.index("--checkpoint") + 1]
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        model_checkpoint(path)
    bin_dir = Path(sys.executable).parent  # the venv active, as README's commands assume
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    move = xboard_talk(adapter, scratch, env, str(command))
    board = chess.Board()
    board.push_uci("e2e4")
    assert chess.Move.from_uci(move) in board.legal_moves, f"{command}: {move} after 1.e4"


def check_analyse(command: Command, workdir: Path) -> None:
    """The analysis runs as shown on a tiny checkpoint and the sample's first games, both put
    where the command says (a scratch tree of its own), and writes what it names."""
    from tests.helpers import first_games_pgn, model_checkpoint

    words = list(command.words[1:])
    scratch = workdir.parent / f"{workdir.name}-analyse"
    path = scratch / words[words.index("--checkpoint") + 1]
    path.parent.mkdir(parents=True, exist_ok=True)
    model_checkpoint(path)
    games = next(w for w in words if w.endswith((".pgn", ".pgn.zst")) and "--pgn" not in w)
    (scratch / games).parent.mkdir(parents=True, exist_ok=True)
    (scratch / games).write_text(first_games_pgn(3))
    done = run([sys.executable, "-m", "chesslm.engine.analyse", *words], scratch)
    assert done.returncode == 0, f"{command}\n{done.stderr}"
    for flag in ("--csv", "--pgn"):
        if flag in words:
            assert (scratch / words[words.index(flag) + 1]).stat().st_size > 0, command


def check_board(command: Command, workdir: Path) -> None:
    """``chesslm-board CHECKPOINT [--pgn FILE]`` on a tiny checkpoint at the path shown (a
    scratch tree of its own) and the sample's first games, on a free port: its line names the
    address, where the page and its API answer."""
    import json
    import urllib.request

    from tests.helpers import first_games_pgn, model_checkpoint

    words = list(command.words[1:])
    scratch = workdir.parent / f"{workdir.name}-board"
    path = scratch / words[0]
    path.parent.mkdir(parents=True, exist_ok=True)
    model_checkpoint(path)
    if "--pgn" in words:
        (scratch / words[words.index("--pgn") + 1]).write_text(first_games_pgn(3))
    argv = [sys.executable, "-m", "chesslm.board", *words, "--port", "0"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    with subprocess.Popen(argv, cwd=scratch, env=env, stdout=subprocess.PIPE, text=True) as board:
        try:
            line = board.stdout.readline()
            url = re.search(r"(http://\S+/)", line)
            assert url, f"{command}: {line!r}"
            with urllib.request.urlopen(url.group(1) + "api/info", timeout=60) as answer:
                info = json.loads(answer.read())
            assert info["checkpoint"] == words[0], info
        finally:
            board.terminate()


def check(command: Command, workdir: Path) -> None:
    program = command.words[0]
    if program == "snakemake":
        check_snakemake(command, workdir)
    elif program == "chesslm-uci":
        check_uci(command, workdir)
    elif program == "chesslm-analyse":
        check_analyse(command, workdir)
    elif program == "chesslm-board":
        check_board(command, workdir)
    elif program == "xboard":  # no xboard here: its engine command runs (check_xboard)
        check_xboard(command, workdir)
    elif program in ("python", "python3"):
        check_python(command, workdir)
    elif program == "torchrun":  # its options, then the script and the script's own flags
        at = next(i for i, w in enumerate(command.words) if w.endswith(".py"))
        check_python(Command(command.where, ("python", *command.words[at:])), workdir)
    elif program == "pip":
        check_pip(command)
    elif program == ".":  # `. .venv/bin/activate`: made by the venv command before it
        assert command.words[1] == ".venv/bin/activate", command
        assert (workdir / ".venv" / "bin" / "activate").is_file() or any(
            c.words[:3] == ("python3", "-m", "venv") for c in ALL_COMMANDS
        )
    elif program == "apt-get":  # installing needs root and a network: check it was done
        if command.words[1:] == ("update",):
            return
        assert command.words[1:3] == ("install", "-y"), command
        for package in (w for w in command.words[3:] if not w.startswith("-")):
            done = run(["dpkg-query", "-W", "-f=${Status}", package], ROOT)
            assert done.stdout.startswith("install ok installed"), f"{command}: {package}"
    elif program in ("squeue", "sacct"):
        if not SLURM:
            pytest.skip(f"{program} needs the CI cluster (CHESSLM_SLURM=1)")
        done = run(list(command.words), workdir)
        assert done.returncode == 0, f"{command}\n{done.stderr}"
    elif program in ("bash", ".ci/run"):
        script = command.words[1] if program == "bash" else program
        assert (ROOT / script).is_file(), command
        done = run(["bash", "-n", script], ROOT)  # these bring clusters up: CI runs them
        assert done.returncode == 0, f"{command}\n{done.stderr}"
    else:
        raise AssertionError(
            f"{command}: no check for {program!r}; add one to tests/workflow/test_docs.py"
        )


@pytest.mark.slow
@pytest.mark.parametrize("command", ALL_COMMANDS, ids=str)
def test_command(command: Command, workdir: Path) -> None:
    check(command, workdir)


def test_the_docs_have_commands() -> None:
    programs = {c.words[0] for c in ALL_COMMANDS}
    assert {"snakemake", "python", "pip"} <= programs
    assert sum(c.words[0] == "snakemake" for c in ALL_COMMANDS) >= 10


def test_forcerun_before_its_target_is_caught() -> None:
    """The README's old re-probe line: --forcerun swallowed the target, so `all` was built."""
    words = ["--cores", "8", "--forcerun", "probe", "results/pilot/results.json"]
    assert snakemake_targets(words) == []
    assert snakemake_targets(["results/pilot/results.json", *words[:-1]]) == [words[-1]]


# --- YAML -----------------------------------------------------------------------------


def merged_config(snippet: dict) -> dict:
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    for table in ("datasets", "runs"):
        config.setdefault(table, {}).update(snippet.get(table) or {})
    config["runs"] = resolve_likes(config["runs"])  # as chesslm.config.load, before the schema
    return config


@pytest.mark.parametrize(
    "block", [b for b in ALL_BLOCKS if b.kind == "yaml"], ids=lambda b: b.where
)
def test_yaml_snippet(block: Block) -> None:
    value = yaml.safe_load(block.text)
    assert isinstance(value, dict), block.where
    if {"datasets", "runs"} & set(value):
        jsonschema.validate(merged_config(value), SCHEMA)
    elif "engine" in value and set(value) <= {"engine", "challenge"}:
        check_lichess_bot(value["engine"], block.where)
        # a position the model cannot read is declined: lichess-bot's variant fromPosition
        variants = (value.get("challenge") or {}).get("variants", ["standard"])
        assert variants == ["standard"], block.where
    else:  # a Snakemake profile
        assert set(value) <= {"default-resources", "set-resources"}, block.where
        for rule in value.get("set-resources") or {}:
            assert rule in RULES, f"{block.where}: no rule {rule!r}"


def check_lichess_bot(engine: dict, where: str) -> None:
    """A lichess-bot ``engine`` section: the console script, UCI, and only the engine's own
    command-line flags (``engine_options``: ``--KEY=VALUE``) and UCI options."""
    import tomllib

    from chesslm.engine import options

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert engine["name"] in scripts and engine["protocol"] == "uci", where
    done = run([sys.executable, "-m", "chesslm.engine.uci", "--help"], ROOT)
    for key in engine.get("engine_options") or {}:
        assert f"--{key}" in done.stdout, f"{where}: the engine has no --{key}"
    declared = {re.match(r"option name (.+?) type ", line).group(1) for line in options.OPTIONS}
    assert set(engine.get("uci_options") or {}) <= declared, where


def table_defaults(section: str) -> list[tuple[str, str]]:
    """(key, default cell) of the table under ``## `section```` in config/README.md."""
    text = (ROOT / "config" / "README.md").read_text()
    body = text.split(f"## `{section}`", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([\w.]+)` \| ([^|]+) \|", body, re.M)
    assert rows, section
    return [(key, cell.strip()) for key, cell in rows]


@pytest.mark.parametrize("table", ["datasets", "ladders", "runs", "comparisons"])
def test_config_readme_defaults_are_the_schema_defaults(table: str) -> None:
    section = f"{table}.NAME"
    schema = SCHEMA["properties"][table]["additionalProperties"]
    for key, cell in table_defaults(section):
        node = schema
        for part in key.split("."):
            node = node["properties"][part]
        if cell.startswith("("):  # (required)
            assert "default" not in node, key
            continue
        value = yaml.safe_load(cell.strip("`"))
        assert value == node["default"] and type(value) is type(node["default"]), (
            f"config/README.md: {section}.{key} default {cell} reads as {value!r} in YAML; "
            f"the schema's default is {node['default']!r}"
        )
        jsonschema.validate(value, {k: v for k, v in node.items() if k != "default"})


def test_links_and_figures_exist() -> None:
    """Every relative link and image of the docs names a file of the repository (a figure is
    a file some run produced, not a promise)."""
    for doc in DOCS:
        text = re.sub(r"<!--.*?-->", "", doc.read_text(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", text):
            if re.match(r"\w+://", target):
                continue
            assert (doc.parent / target).exists(), f"{doc.relative_to(ROOT)}: {target} is missing"


def readme_two_commands() -> list[str]:
    """The install line and the test line of README.md's "Two commands"."""
    section = (ROOT / "README.md").read_text().split("## Two commands", 1)[1].split("\n## ")[0]
    lines = [b.text for b in blocks(ROOT / "README.md") if b.text in section]
    assert len(lines) == 2 and all("\n" not in line for line in lines), lines
    return lines


def test_ci_runs_exactly_the_readmes_two_commands_in_a_clone_named_chesslm() -> None:
    """CI runs what a newcomer types, in the folder name `git clone` gives: README's two
    lines appear verbatim, as whole lines, in .ci/run, install first."""
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    install, tests = readme_two_commands()
    assert install in ci and tests in ci, "README.md's two commands are not .ci/run's"
    assert ci.index(install) < ci.index(tests)
    assert "results/demo/results.json" in install and "pytest" in tests
    assert any('"$(basename "$PWD")" != chesslm' in line for line in ci)


def layout_rows() -> dict[str, str]:
    """docs/architecture.md's Layout table: its first cell (the paths) -> its second (what)."""
    section = ARCHITECTURE.read_text().split("## Layout", 1)[1].split("\n## ")[0]
    cells = [line.split(" | ", 1) for line in section.splitlines() if line.startswith("| `")]
    return {path.removeprefix("| "): what for path, what in cells}


def test_the_layout_table_names_every_rule_file_and_every_module() -> None:
    rows = layout_rows()
    rules = next(path for path in rows if "workflow/rules/" in path)
    named = set(re.search(r"workflow/rules/\{([^}]*)\}\.smk", rules).group(1).split(","))
    assert named == {p.stem for p in (ROOT / "workflow" / "rules").glob("*.smk")}, rules
    for package in sorted(p for p in (ROOT / "chesslm").iterdir() if (p / "__init__.py").exists()):
        what = rows[f"`chesslm/{package.name}/`"]
        missing = [
            m.stem
            for m in sorted(package.glob("*.py"))
            if m.stem != "__init__"
            if f"`{m.stem}`" not in what
        ]
        assert not missing, f"docs/architecture.md Layout, chesslm/{package.name}/: no {missing}"


def test_every_package_docstring_names_its_modules() -> None:
    import ast

    for init in sorted((ROOT / "chesslm").rglob("__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        package = init.parent
        names = [m.stem for m in package.glob("*.py") if m.stem != "__init__"]
        names += [p.name for p in package.iterdir() if (p / "__init__.py").exists()]
        missing = [
            n for n in sorted(names) if f"``{n}``" not in doc and f"``chesslm.{n}``" not in doc
        ]
        assert not missing, f"{init.relative_to(ROOT)}: its docstring names no {missing}"


def test_how_to_read_the_code_names_files_and_rules_that_exist() -> None:
    """docs/architecture.md's walk through the code: every file it names is one, every rule it
    names is."""
    section = ARCHITECTURE.read_text().split("## How to read the code", 1)[1]
    section = section.split("\n## ", 1)[0]
    named = set(re.findall(r"`([\w/]+\.(?:py|smk))`", section))
    assert len(named) > 30, named
    ours = [*ROOT.glob("chesslm/**/*.py"), *ROOT.glob("workflow/**/*.py")]
    files = {p.relative_to(ROOT).as_posix() for p in ours + [*ROOT.glob("workflow/rules/*.smk")]}
    missing = [n for n in sorted(named) if not any(f == n or f.endswith(f"/{n}") for f in files)]
    assert not missing, f"docs/architecture.md 'How to read the code' names no file {missing}"
    rules = set(re.findall(r"^(?:rule|checkpoint) (\w+):", "".join(
        p.read_text() for p in (ROOT / "workflow/rules").glob("*.smk")), re.M))  # fmt: skip
    for rule in ("convert", "verify", "token_cache", "probe", "train_segment", "play", "export"):
        assert f"`{rule}`" in section and rule in rules, rule
