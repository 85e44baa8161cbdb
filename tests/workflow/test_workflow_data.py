"""The data stages through real snakemake: plan, run, rerun, refusals, the sealed test split."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from chesslm.data import cache, filters, gamearrays, metadata
from tests.helpers import ROOT, first_games_pgn, snakemake

pytestmark = pytest.mark.slow

RECEIPT = "results/datasets/mini/integrity-receipt.json"
CACHE = "results/datasets/mini/token-cache/cache.json"
FILTERS = "{speeds: [blitz, rapid, classical], exclude_bots: true}"


def make_workdir(path: Path, pgn_text: str | bytes | None = None, name: str = "mini.pgn") -> Path:
    """A scratch working directory: the project's config and resources plus a `mini` dataset."""
    (path / "config").mkdir(parents=True)
    shutil.copy(ROOT / "config" / "config.yaml", path / "config" / "config.yaml")
    (path / "resources").symlink_to(ROOT / "resources")
    data = pgn_text if pgn_text is not None else first_games_pgn(300)
    (path / name).write_bytes(data if isinstance(data, bytes) else data.encode())
    (path / "mini.yaml").write_text(
        f"datasets:\n  mini:\n    inputs: [{name}]\n    split: {{validation: 0.1, test: 0.1}}\n"
        f"    filters: {FILTERS}\n"
    )
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    workdir = make_workdir(tmp_path_factory.mktemp("wf"))
    plan = snakemake(workdir, CACHE, "--configfile", "mini.yaml", "-n")
    for rule in ("convert", "verify", "token_cache"):
        assert rule in plan.stdout
    snakemake(workdir, CACHE, "--cores", "2", "--configfile", "mini.yaml")
    return workdir


def test_run_then_rerun_is_nothing_to_be_done(built):
    again = snakemake(built, CACHE, RECEIPT, "--cores", "2", "--configfile", "mini.yaml")
    assert "Nothing to be done" in again.stdout + again.stderr
    assert (built / "logs/datasets/mini/convert.log").read_text().strip()


def test_no_test_split_game_reaches_the_token_cache(built):
    ds = built / "results/datasets/mini"
    manifest = json.loads((ds / "manifest.json").read_text())
    test_ids = {i for p in manifest["shards"]["test"] for i in gamearrays.Games(ds / p).ids}
    assert manifest["games"]["test"] == len(test_ids) > 0
    cached = set()
    for split_name in ("train", "validation"):
        cached |= set(gamearrays.Games(ds / "token-cache" / split_name).ids.tolist())
    assert len(cached) == manifest["games"]["train"] + manifest["games"]["validation"]
    assert not cached & test_ids


def test_filters_reach_convert_and_metadata_reaches_the_cache(built):
    ds = built / "results/datasets/mini"
    manifest = json.loads((ds / "manifest.json").read_text())
    assert manifest["settings"]["filters"]["exclude_bots"] is True
    assert manifest["skipped"]["speed"] > 0 and set(filters.REASONS) <= set(manifest["skipped"])
    opened = cache.TokenCache(ds / "token-cache", verify=True)
    for split_name in ("train", "validation"):
        shards = [ds / p for p in manifest["shards"][split_name]]
        got = opened.metadata(split_name)
        for column in metadata.COLUMNS:
            want = [np.load(metadata.column_path(p, column)) for p in shards]
            assert np.array_equal(got[column], np.concatenate(want)), column
        assert not got["bot"].any()
        assert set(np.unique(got["speed"]).tolist()) <= {2, 3, 4}  # blitz, rapid, classical
        assert len(got.clocks(0)) == (len(getattr(opened, split_name)[0]) - 2) // 3


def test_a_filter_out_of_range_stops_before_any_job(tmp_path):
    workdir = make_workdir(tmp_path / "w")
    (workdir / "bad.yaml").write_text(
        "datasets:\n  mini:\n    inputs: [mini.pgn]\n    filters: {min_elo: 2000, max_elo: 1000}\n"
    )
    result = snakemake(workdir, CACHE, "--configfile", "bad.yaml", "-n", check=False)
    assert result.returncode != 0
    said = result.stdout + result.stderr
    assert "config: datasets.mini.filters.min_elo: 2000 is above max_elo (1000)" in said
    assert "Job stats" not in said  # stopped before planning any job


def test_tampered_shard_makes_verify_refuse_naming_the_file(built, tmp_path):
    workdir = tmp_path / "copy"
    shutil.copytree(built, workdir, symlinks=True)
    shard = workdir / "results/datasets/mini/test/00000.ids.npy"
    data = bytearray(shard.read_bytes())
    data[-1] ^= 1
    shard.write_bytes(bytes(data))
    result = snakemake(
        workdir, RECEIPT, "--cores", "1", "--configfile", "mini.yaml", "-f", check=False
    )
    assert result.returncode != 0
    assert "test/00000.ids.npy" in result.stderr and "does not match the manifest" in result.stderr
    assert not (workdir / RECEIPT).exists()  # a failed job leaves no receipt behind


def test_truncated_input_fails_with_one_line_and_no_dataset(tmp_path):
    whole = (ROOT / "resources/lichess-sample.pgn.zst").read_bytes()
    workdir = make_workdir(tmp_path / "w", whole[: len(whole) // 3], name="mini.pgn.zst")
    result = snakemake(workdir, RECEIPT, "--cores", "2", "--configfile", "mini.yaml", check=False)
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if "convert failed" in line]
    assert len(lines) == 1 and "mini.pgn.zst" in lines[0] and "truncated" in lines[0]
    assert not (workdir / "results/datasets/mini/manifest.json").exists()
    assert not (workdir / "results/datasets/mini/train").exists()


def test_the_test_split_is_read_by_convert_and_verify_only(tmp_path):
    """Build the DAG of every target the workflow offers; only verify may take test files."""
    workdir = make_workdir(tmp_path / "w")
    datasets = ["sample", "mini"]
    runs = ["demo", "pilot"]
    targets = ["all"]
    for d in datasets:
        base = f"results/datasets/{d}"
        targets += [
            f"{base}/manifest.json",
            f"{base}/integrity-receipt.json",
            f"{base}/token-cache/cache.json",
        ]
    for r in runs:
        targets += [
            f"results/{r}/probe-results.json",
            f"results/{r}/segments/0.json",
            f"results/{r}/results.json",
            f"results/{r}/report/summary.md",
            f"results/{r}/play/move-match.json",
            *(f"results/{r}/analysis/{d}.csv" for d in datasets),
        ]
    # the dry run's plan names every job's inputs (--detailed-summary names none of a job not
    # yet run); inputs a checkpoint decides are <TBD>: results', which reads status files only
    plan = snakemake(workdir, *targets, "--configfile", "mini.yaml", "-n", "-F").stdout
    jobs = re.findall(r"^(?:local)?(?:rule|checkpoint) (\w+):\n(?:    input: (.*)$)?", plan, re.M)
    rules = {rule for rule, _ in jobs}
    expected = {"convert", "verify", "token_cache", "probe", "train_segment", "play", "analyse"}
    assert expected <= rules, rules
    readers = set()
    for rule, inputs in jobs:
        for path in inputs.split(", "):
            parts = Path(path).parts
            if len(parts) >= 4 and parts[:2] == ("results", "datasets") and parts[3] == "test":
                assert rule == "verify", f"rule {rule} reads the test split: {path}"
                readers.add(rule)
    assert readers == {"verify"}  # the check sees test-split inputs where there are some
