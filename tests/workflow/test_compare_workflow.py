"""Rules score and compare for real on the trained ``mini`` run and a second tiny run: the
comparison's files, Allie's shape, the refusal of an unknown run, and the HTML report with the
comparison's figures and captions as a person sees them in Chromium."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from chesslm.compare.outputs import FIGURES
from chesslm.match.matching import elo_band
from tests.browser import Browser, file_url
from tests.helpers import ROOT, snakemake

pytestmark = pytest.mark.slow
ARGS = ("--configfile", "train-workflow.yaml", "compare-workflow.yaml")
# words of each caption (workflow/report/compare-*.rst), no quotes: docutils may curl them
CAPTION_WORDS = {
    "runs": "top-k agreement with the move played",
    "paired": "Paired differences: each run minus the baseline",
    "curve": "Learning curve: top-1 agreement and NLL per move",
    "bands": "Top-1 agreement by the band of the mover",
}
TARGETS = ("results/compare/mini-cmp/comparison.json", "results/compare/mini-allie/comparison.json")


@pytest.fixture
def compared(trained_workflow: Path) -> Path:
    """The staged run compared with a second tiny run (built by the first test; nothing to be
    done for the others)."""
    shutil.copy(ROOT / "tests" / "compare-workflow.yaml", trained_workflow)
    snakemake(trained_workflow, *TARGETS, *ARGS, "--cores", "2")
    return trained_workflow


def test_the_comparison_pairs_the_runs_on_every_validation_position(compared: Path) -> None:
    record = json.loads((compared / TARGETS[0]).read_text())
    scores = {r: json.loads((compared / f"results/{r}/scores/mini/scores.json").read_text())
              for r in ("mini", "mini-b")}  # fmt: skip
    assert scores["mini"]["validation_ids_sha256"] == scores["mini-b"]["validation_ids_sha256"]
    # both runs' play.match.games: 8 evenly spaced validation games, no more
    assert scores["mini"]["games_bound"] == 8 and scores["mini"]["games_scored"] <= 8
    table = np.load(compared / "results/mini/scores/mini/positions.npz")
    assert record["positions"] == len(table["game"]) == scores["mini"]["positions"] > 0
    assert record["settings"]["baseline"] == "mini-b"
    assert [r["name"] for r in record["runs"]] == ["mini-b", "mini"]
    assert {r["step"] for r in record["runs"]} == {3, 6}
    # one dataset: the curve is over games seen (step x micro 4 x accum 1 x workers 2)
    assert sorted(r["x"] for r in record["runs"]) == [24, 48] and "seen" in record["curve_x"]
    (paired,) = [p for p in record["paired"] if (p["group"], p["metric"]) == ("all", "top1")]
    own = {m["run"]: m["value"] for m in record["metrics"]
           if (m["group"], m["metric"]) == ("all", "top1")}  # fmt: skip
    assert paired["run"] == "mini" and paired["value"] == pytest.approx(own["mini"] - own["mini-b"])
    assert float(np.mean(table["rank"] < 1)) == pytest.approx(own["mini"])
    frame = pd.read_csv(compared / "results/compare/mini-cmp/comparison.csv")
    assert set(frame["kind"]) == {"metric", "paired"} and len(frame) == len(
        record["metrics"]) + len(record["paired"])  # fmt: skip
    for figure in FIGURES:
        assert (compared / f"results/compare/mini-cmp/{figure}.svg").stat().st_size > 1000
    assert [a["model"] for a in record["anchors"]][0] == "Maia-2"


def test_allie_shape_has_equal_positions_per_band(compared: Path) -> None:
    record = json.loads((compared / TARGETS[1]).read_text())
    sel = record["selection"]
    k = sel["positions_per_band"]
    bands = {m["group"]: m["positions"] for m in record["metrics"]
             if m["run"] == "mini" and m["metric"] == "top1" and m["group"] != "all"}  # fmt: skip
    assert set(bands.values()) == {k} and "unknown" not in bands
    table = np.load(compared / "results/mini/scores/mini/positions.npz")
    available = {b: int((elo_band(table["mover_elo"].astype(np.int64)) == b).sum()) for b in bands}
    assert available == {b: sel["band_positions_available"][b] for b in bands}
    assert k == min(available.values()) and record["positions"] == k * len(bands)


def test_an_unknown_run_stops_the_plan_in_one_line(compared: Path) -> None:
    bad = yaml.safe_load((ROOT / "tests" / "compare-workflow.yaml").read_text())
    bad["comparisons"]["mini-cmp"]["runs"] = ["mini", "nope"]
    (compared / "bad-compare.yaml").write_text(yaml.safe_dump(bad))
    done = snakemake(compared, TARGETS[0], "--configfile", "train-workflow.yaml",
                     "bad-compare.yaml", "-n", check=False)  # fmt: skip
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "config: comparisons.mini-cmp.runs names 'nope', which is not a run (known: "
    ), last
    assert "mini, mini-b" in last  # the config's runs, config/config.yaml's among them


def test_a_missing_scores_json_reruns_score(compared: Path) -> None:
    """compare reads each run's scores.json beside its table: an input, so a plan that runs
    compare (here: its record gone) without it scores the run again first (compare used to
    run alone and fail reading it)."""
    moved = [compared / "results/mini/scores/mini/scores.json", compared / TARGETS[0]]
    for path in moved:
        path.rename(path.with_name(path.name + ".aside"))
    try:
        done = snakemake(compared, TARGETS[0], *ARGS, "-n")
    finally:
        for path in moved:
            path.with_name(path.name + ".aside").rename(path)
    plan = done.stdout + done.stderr
    counts = dict(re.findall(r"^(score|compare)\s+(\d+)$", plan, re.M))
    assert counts == {"score": "1", "compare": "1"}, plan


def test_the_report_shows_the_comparison_figures_with_captions(
    compared: Path, browser: Browser
) -> None:
    out = compared / "compare-report.html"
    snakemake(compared, TARGETS[0], *ARGS, "--report", str(out))
    browser.open(file_url(out))
    assert browser.wait_for("typeof results !== 'undefined'")
    assert "Comparisons" in json.loads(browser.evaluate("JSON.stringify(Object.keys(categories))"))
    for figure in FIGURES:
        path = f"results/compare/mini-cmp/{figure}.svg"
        # the figure's info pane, as a click on it opens: its caption as rendered text
        browser.evaluate(f"app.showResultInfo({json.dumps(path)})")
        first = CAPTION_WORDS[figure]
        assert browser.wait_for(f"document.body.innerText.includes({json.dumps(first)})"), (
            f"{path}: its caption ({first!r}...) is not on the page"
        )
        size = browser.show_report_image(path)
        assert size, f"{path} was not drawn"
