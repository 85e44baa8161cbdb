"""A writer killed mid-write, then README's recovery (``--unlock``, then the same command with
``--rerun-incomplete``), through real snakemake on a copy of the staged tiny run, for rules
export, analyse, compare, summarise and play: the kill lands in an atomic write
(tests/fault_injection: ``killwrite:NAME``, SIGKILL once the temporary is written, before its
rename), which leaves ``.NAME.PID.RANDOM.tmp``; the recovered job removes it (chesslm/owner.py),
so no ``*.tmp`` is left under results/, and the export folder holds exactly the files its
SHA256SUMS lists. (Before, such temporaries stayed for good: in the export folder a whole
copy of the weights beside a SHA256SUMS that still passed ``sha256sum -c``.)"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from chesslm import seal
from chesslm.export.load import export_config
from tests import forked
from tests.conftest import STAGED_ARGS, StagedRun, copy_tree
from tests.helpers import ROOT

pytestmark = pytest.mark.slow
FAULTS = os.pathsep.join([str(ROOT / "tests" / "fault_injection"), str(ROOT)])
# a comparison of the mini run alone: rule compare without training a second run
SOLO = "comparisons: {solo: {runs: [mini], dataset: mini, protocol: all, bootstrap: 50}}\n"
# rule -> its target, the file whose write is killed, the rule forced to run again
KILLS = {
    "export": ("results/mini/export/model.safetensors", "model.safetensors", "export"),
    "analyse": ("results/mini/analysis/mini.csv", "mini.csv", None),
    "compare": ("results/compare/solo/comparison.json", "comparison.json", None),
    "summarise": ("results/mini/report/summary.md", "summary.md", "summarise"),
    "play": ("results/mini/play/move-match.json", "counterfactual.svg", "play"),
}


def snakemake(work: Path, *args: str, fault: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": FAULTS if fault else str(ROOT)}
    env.pop("CHESSLM_FAULT", None)
    env.update({"CHESSLM_FAULT": fault} if fault else {})
    command = ["--snakefile", str(ROOT / "Snakefile"), "--directory", str(work), *args]
    return forked.run("snakemake", command, cwd=work, env=env, timeout=900)


def temporaries(work: Path) -> list[Path]:
    return sorted((work / "results").rglob("*.tmp"))


@pytest.mark.parametrize("rule", KILLS)
def test_a_writer_killed_mid_write_leaves_nothing_after_recovery(
    staged_run: StagedRun, tmp_path: Path, rule: str
) -> None:
    target, name, forced = KILLS[rule]
    work = staged_run.copy(tmp_path / "work")
    (work / "solo.yaml").write_text(SOLO)
    args = [target, *STAGED_ARGS, "solo.yaml", "--cores", "2"]
    force = ["--forcerun", forced] if forced else []
    killed = snakemake(work, *args, *force, fault=f"killwrite:{name}")
    console = killed.stdout + killed.stderr
    assert killed.returncode != 0, console[-4000:]
    left = temporaries(work)
    assert [p.name for p in left if p.name.startswith(f".{name}.")], (left, console[-4000:])
    unlocked = snakemake(work, target, *STAGED_ARGS, "solo.yaml", "--unlock")
    assert unlocked.returncode == 0, unlocked.stderr[-3000:]
    recovered = snakemake(work, *args, "--rerun-incomplete")
    console = recovered.stdout + recovered.stderr
    assert recovered.returncode == 0, console[-4000:]
    assert temporaries(work) == [], console[-4000:]
    assert "left by a killed writer" in console, console[-4000:]
    assert (work / target).exists()
    if rule == "export":
        folder = (work / target).parent
        sums = seal.check_sums(folder, [], "rebuild", exact=True)
        assert sorted(p.name for p in folder.iterdir()) == sorted([*sums, seal.SUMS])
        export_config(folder)  # what chesslm-uci and chesslm-analyse check first
        unbroken = staged_run.workdir / "results/mini/export"
        for path in folder.iterdir():
            assert path.read_bytes() == (unbroken / path.name).read_bytes(), path.name


def test_the_export_folder_refuses_a_file_its_sums_do_not_list(
    staged_run: StagedRun, tmp_path: Path
) -> None:
    """What an upload would publish: a stray file in the export folder, and a SHA256SUMS
    damaged by a byte (one that is not a hex digit, or a digit of the weights' digest), are
    each refused in one line naming the file, when the folder is loaded."""
    folder = copy_tree(staged_run.workdir / "results/mini/export", tmp_path / "export")
    stray = folder / ".model.safetensors.31082.1b0d5a4c.tmp"
    stray.write_bytes((folder / "model.safetensors").read_bytes())
    with pytest.raises(ValueError) as refused:
        export_config(folder)
    line = str(refused.value)
    assert stray.name in line and "SHA256SUMS does not list" in line and "\n" not in line
    stray.unlink()
    sums = folder / seal.SUMS
    text = sums.read_text()
    sums.write_text(text[:10] + "z" + text[11:])  # a byte of the first digest damaged
    with pytest.raises(ValueError) as refused:
        export_config(folder)
    assert str(refused.value).startswith(f"{sums}: line 1 is not '<sha256>  <file>'")
    assert "damaged" in str(refused.value)
    # one digit of the weights' digest changed for another: the list is blamed, not the weights
    line = next(x for x in text.splitlines(True) if x.endswith("  model.safetensors\n"))
    digit = "0" if line[0] != "0" else "1"
    sums.write_text(text.replace(line, digit + line[1:]))
    with pytest.raises(ValueError) as refused:
        export_config(folder)
    assert str(refused.value).startswith(
        f"{sums}: damaged: the digest it lists for model.safetensors differs from the file's in"
        " 1 of 64 digits"
    ), str(refused.value)
