"""The snakemake command lines chesslm prints (a seal's "rebuild with:", summary.md's export,
staleness's rebuild), so that each runs as printed: it names the ``--configfile`` files of the
snakemake that defined the run, which the workflow puts in ``ENV`` at parse time
(workflow/rules/common.smk) for its jobs to read. Outside a job (no ``ENV``) the command names
none: the config of config/config.yaml alone. Standard library only: seals and the rules use it.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Iterable
from pathlib import Path

ENV = "CHESSLM_CONFIGFILES"
CORES = 2  # what the printed commands ask for, as README.md's CPU commands do


def shown(paths: Iterable[Path | str], cwd: Path | str | None = None) -> list[str]:
    """``paths`` as a command run from ``cwd`` (default: here) names them: relative below it,
    absolute elsewhere."""
    here = Path(cwd or os.getcwd()).resolve()
    out = []
    for path in paths:
        full = Path(path).resolve()
        out.append(str(full.relative_to(here)) if full.is_relative_to(here) else str(full))
    return out


def export_configfiles(paths: Iterable[Path | str]) -> None:
    """Name the invocation's ``--configfile`` files to every job it starts (``ENV``)."""
    os.environ[ENV] = json.dumps(shown(paths))


def configfiles() -> list[str]:
    """The ``--configfile`` files of the snakemake that started this job (none outside one)."""
    try:
        value = json.loads(os.environ.get(ENV) or "[]")
    except json.JSONDecodeError:
        return []
    return [str(p) for p in value] if isinstance(value, list) else []


def snakemake(*targets: Path | str, forcerun: str | None = None) -> str:
    """``snakemake --cores 2 TARGETS [--configfile FILES] [--forcerun RULE]``: options that
    take several values after the targets, so none swallows one."""
    words = ["snakemake", "--cores", str(CORES), *map(str, targets)]
    files = configfiles()
    if files:
        words += ["--configfile", *files]
    if forcerun:
        words += ["--forcerun", forcerun]
    return shlex.join(words)


def swallowed(forcerun: Iterable[str], configfiles: Iterable[Path | str]) -> str | None:
    """One line when a target was read as a value of ``--forcerun`` or ``--configfile`` (both
    take every word after them): a rule's name is an identifier, a config file's name ends in
    .yaml, .yml or .json and lies outside results/; None when neither holds a target."""
    rules = [w for w in forcerun if not str(w).isidentifier()]
    configs = [str(p) for p in configfiles
               if Path(p).suffix not in (".yaml", ".yml", ".json")
               or Path(p).parts[:1] == ("results",)]  # fmt: skip
    for option, words in (("--forcerun", rules), ("--configfile", configs)):
        if words:
            return (
                f"snakemake: {', '.join(sorted(words))} read as {option}'s value: that option"
                " takes every word after it; put the targets first (snakemake --cores 2"
                f" TARGET... {option} ...) or end its values with --"
            )
    return None
