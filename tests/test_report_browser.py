"""The HTML report (``snakemake --report``) of a real trained run, opened in a real headless
Chromium: its first page shows the run's summary, and every figure of the run renders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chesslm.report import items
from tests.browser import Browser, chromium, file_url
from tests.helpers import snakemake

pytestmark = pytest.mark.slow
SUMMARY = "results/mini/report/summary.md"
ARGS = ("--configfile", "train-workflow.yaml")


def check_report(report: Path, run_dir: Path) -> None:
    """Open ``report`` in Chromium: the summary on the first page, every figure drawn."""
    summary_lines = (run_dir / "report" / "summary.md").read_text().splitlines()
    executable = chromium()
    assert executable, "the report test needs a real browser: apt-get install -y chromium"
    with Browser(executable) as browser:
        browser.open(file_url(report))
        text = browser.wait_for(
            "document.body && document.body.innerText.includes('test_evaluated: false')"
            " && document.body.innerText"
        )
        assert text, "the report's first page never showed the summary"
        assert f"Run {run_dir.name}" in text and "Complete." in text
        headings = (
            "Outcome",
            "Identity",
            "Time",
            "Throughput",
            "Memory",
            "Data",
            "Play evaluation",
        )
        for heading in headings:
            assert heading in text, heading
        best = next(line for line in summary_lines if line.startswith("- best step"))
        assert best[2:] in text
        assert browser.evaluate("document.querySelectorAll('.chesslm-summary table').length") > 1
        figures = json.loads(
            browser.evaluate(
                "JSON.stringify(Object.keys(results).filter(p => p.endsWith('.svg')).sort())"
            )
        )
        expected = sorted(
            [
                f"results/{run_dir.name}/report/{item.file}"
                for item in items.ITEMS
                if item.name in items.PLOTS
            ]
            + [f"results/{run_dir.name}/play/{p.name}" for p in (run_dir / "play").glob("*.svg")]
        )
        assert len(expected) > len(items.PLOTS)  # the play figures are in the report too
        assert figures == expected
        for path in figures:
            # what a click on the figure's view button does (ToggleViewManager.handleImg)
            browser.evaluate(
                f"app.setView({{content: 'img', contentPath: results[{json.dumps(path)}].data_uri,"
                f" resultPath: {json.dumps(path)}}})"
            )
            size = browser.wait_for(
                "(() => { const i = [...document.querySelectorAll('img')].find(i =>"
                f" i.src === results[{json.dumps(path)}].data_uri);"
                " return i && i.complete && i.naturalWidth > 100 ? [i.naturalWidth,"
                " i.naturalHeight] : null })()"
            )
            assert size, f"{path} was not drawn"


def test_report_opens_with_the_summary_and_every_figure(trained_workflow: Path) -> None:
    snakemake(trained_workflow, SUMMARY, *ARGS, "--cores", "1")
    report = trained_workflow / "browser-report.html"
    snakemake(trained_workflow, SUMMARY, *ARGS, "--report", str(report))
    check_report(report, trained_workflow / "results" / "mini")
