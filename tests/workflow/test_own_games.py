"""docs/own-games.md end to end on the CPU: its config file, then its CPU commands run as the
page prints them (real snakemake: data, training, play, the report, the export; then
chesslm-analyse), in a tree laid out as a fresh clone, with the sample's first games standing
in for the user's; its GPU commands are planned (tests/workflow/test_docs.py plans every
command)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
import zstandard

from tests import forked
from tests.helpers import ROOT, first_games_pgn
from tests.workflow.test_docs import ALL_COMMANDS, config_files

PAGE = "docs/own-games.md"
# of the sample (first_games_pgn's limit): about 44 validation games, each played (a subset is
# played in the staged run: tests/workflow/test_train_workflow.py), one segment of training:
# 1,500 games trained two segments for nothing the page says (12 s more alone, 2026-12-05)
STAND_IN_GAMES = 900


def clone(root: Path) -> Path:
    """The repository as a fresh clone shows it, the page's config file and games added."""
    for name in ("Snakefile", "workflow", "profiles", "resources", "config"):
        (root / name).symlink_to(ROOT / name)
    games = zstandard.ZstdCompressor().compress(first_games_pgn(STAND_IN_GAMES).encode())
    for name, text in config_files().items():
        (root / name).write_text(text)
        for dataset in yaml.safe_load(text)["datasets"].values():
            for path in dataset["inputs"]:
                (root / path).parent.mkdir(parents=True, exist_ok=True)
                (root / path).write_bytes(games)
    return root


@pytest.mark.slow
def test_the_own_games_page_runs_end_to_end_on_the_cpu(tmp_path: Path) -> None:
    root = clone(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    page = [c for c in ALL_COMMANDS if c.where.startswith(PAGE)]
    assert {c.words[0] for c in page} == {"snakemake", "chesslm-analyse"}, page
    for command in page:
        words = list(command.words[1:])
        gpu = any("mine-gpu" in w for w in words)
        if command.words[0] == "snakemake":
            if "--report" in words or gpu:  # a GPU run here is a plan (CUDA: none here)
                words += [] if "--report" in words else ["-n"]
            done = forked.run("snakemake", words, cwd=root, env=env, timeout=1800)
            output = done.stdout + done.stderr
            assert done.returncode == 0, f"{command}\n{output[-4000:]}"
        else:
            games = next(w for w in words if w.endswith(".pgn"))
            (root / games).write_text(first_games_pgn(3))
            done = subprocess.run([sys.executable, "-m", "chesslm.engine.analyse", *words],
                                  cwd=root, env=env, capture_output=True, text=True)  # fmt: skip
            assert done.returncode == 0, f"{command}\n{done.stderr}"
            assert (root / words[words.index("--csv") + 1]).stat().st_size > 0
    summary = (root / "results/mine/report/summary.md").read_text()
    export = "snakemake --cores 2 results/mine/export/model.safetensors --configfile mine.yaml"
    assert f"`{export}`" in summary
    assert (root / "results/mine/export/model.safetensors").is_file()
    assert (root / "mine-report.html").stat().st_size > 0


def test_what_the_page_has_a_user_write_is_ignored_by_git(tmp_path: Path) -> None:
    """The page's config files, the games they name and the files its commands write (a
    ``--report`` page, a ``--csv``, the PGN analysed, results/, logs/) leave ``git status``
    clean in a repository with the project's .gitignore (issue 59 item 3)."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text((ROOT / ".gitignore").read_text())
    written = [Path(".snakemake/log/x.log"), Path("results/mine/results.json"), Path("logs/x")]
    for name, text in config_files().items():
        written.append(Path(name))
        written += [Path(p) for d in yaml.safe_load(text)["datasets"].values() for p in d["inputs"]]
    for command in (c for c in ALL_COMMANDS if c.where.startswith(PAGE)):
        words = command.words
        written += [
            Path(words[i + 1]) for i, w in enumerate(words[:-1]) if w in ("--report", "--csv")
        ]
        written += [Path(w) for w in words if w.endswith((".pgn", ".pgn.zst"))]
    assert len(written) > 6, written
    for path in written:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("x")
    status = subprocess.run(
        ["git", "-C", str(tmp_path), "status", "--porcelain", "--untracked-files=all"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert status.stdout.splitlines() == ["?? .gitignore"], status.stdout
