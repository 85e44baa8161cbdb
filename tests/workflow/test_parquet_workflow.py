"""A dataset whose input is a Parquet file, through real snakemake: convert, verify and the
token cache, alike to the same games' PGN dataset; a bad Parquet file is one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from chesslm.data import pgn
from tests import lichess_parquet
from tests.helpers import ROOT, first_games_pgn, snakemake

pytestmark = pytest.mark.slow

NAMES = ("minipgn", "miniparquet")
SETTINGS = (
    "split: {validation: 0.1, test: 0.1}, legality_games: 16,"
    " filters: {speeds: [blitz, rapid, classical], exclude_bots: true}"
)


def _workdir(path: Path) -> Path:
    """The project's config and resources, and datasets `minipgn` (under the old key `pgn`)
    and `miniparquet` (under `inputs`) of the same 400 games."""
    (path / "config").mkdir(parents=True)
    shutil.copy(ROOT / "config" / "config.yaml", path / "config" / "config.yaml")
    (path / "resources").symlink_to(ROOT / "resources")
    text = first_games_pgn(400)
    (path / "mini.pgn").write_text(text)
    lichess_parquet.write(pgn.split_games(text), path / "mini.parquet", row_group_games=150)
    (path / "mini.yaml").write_text(
        "datasets:\n"
        f"  minipgn: {{pgn: [mini.pgn], {SETTINGS}}}\n"  # the key's old name, still read
        f"  miniparquet: {{inputs: [mini.parquet], {SETTINGS}}}\n"
    )
    return path


def _cache(name: str) -> str:
    return f"results/datasets/{name}/token-cache/cache.json"


def test_a_parquet_dataset_builds_to_the_pgn_datasets_cache(tmp_path):
    workdir = _workdir(tmp_path / "w")
    caches = [_cache(n) for n in NAMES]
    snakemake(workdir, *caches, "--cores", "2", "--configfile", "mini.yaml")
    datasets = workdir / "results/datasets"
    manifests = [json.loads((datasets / n / "manifest.json").read_text()) for n in NAMES]
    for key in ("files", "games", "skipped", "census"):
        assert manifests[0][key] == manifests[1][key], key
    assert manifests[1]["inputs"][0]["name"] == "mini.parquet"
    # one dataset's identity, whichever key lists its files and whatever their format
    assert manifests[0]["fingerprint"] == manifests[1]["fingerprint"]
    assert manifests[1]["skipped"]["speed"] > 0
    for name in ("train", "validation"):
        for part in ("tokens", "offsets", "ids", "meta.clock"):
            a, b = (datasets / n / "token-cache" / f"{name}.{part}.npy" for n in NAMES)
            assert a.read_bytes() == b.read_bytes(), f"{name}.{part}"
    again = snakemake(workdir, *caches, "--cores", "2", "--configfile", "mini.yaml")
    assert "Nothing to be done" in again.stdout + again.stderr


def test_a_file_that_is_not_parquet_fails_convert_with_one_line_naming_it(tmp_path):
    workdir = _workdir(tmp_path / "w")
    (workdir / "mini.parquet").write_bytes(b'[Event "not parquet"]\n' * 50)
    result = snakemake(
        workdir, _cache("miniparquet"), "--cores", "2", "--configfile", "mini.yaml", check=False
    )
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if "convert failed" in line]
    assert len(lines) == 1 and "mini.parquet: not a Parquet file" in lines[0], result.stderr[-2000:]
    assert not (workdir / "results/datasets/miniparquet/manifest.json").exists()
