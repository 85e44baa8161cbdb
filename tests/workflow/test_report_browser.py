"""The HTML report (``snakemake --report``) of a real trained run, opened in a real headless
Chromium: its first page shows the run's summary, its first screen the best NLL and the headline
figures above the hashes, and every figure of the run renders."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
import yaml

from chesslm.report import items
from tests.browser import Browser, file_url
from tests.conftest import StagedRun

pytestmark = pytest.mark.slow
SUMMARY = "results/mini/report/summary.md"
ARGS = ("--configfile", "train-workflow.yaml")


def check_report(browser: Browser, report: Path, run_dir: Path) -> None:
    """Open ``report`` in Chromium: the summary on the first page, every figure drawn."""
    summary_lines = (run_dir / "report" / "summary.md").read_text().splitlines()
    browser.open(file_url(report))
    text = browser.wait_for(
        "document.body && document.body.innerText.includes('test_evaluated: false')"
        " && document.body.innerText"
    )
    assert text, "the report's first page never showed the summary"
    assert f"Run {run_dir.name}" in text and "Complete." in text
    assert text.index("At a glance") < text.index("Outcome") < text.index("Identity")
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
    check_summary_lines(summary_lines, run_dir)
    assert browser.evaluate("document.querySelectorAll('.chesslm-summary table').length") > 1
    check_about(browser)
    figures = json.loads(
        browser.evaluate(
            "JSON.stringify(Object.keys(results).filter(p => p.endsWith('.svg')).sort())"
        )
    )
    plots = [item.file for item in items.ITEMS if item.file.endswith(".svg")]
    expected = sorted(
        [f"results/{run_dir.name}/report/{file}" for file in plots]
        + [f"results/{run_dir.name}/play/{p.name}" for p in (run_dir / "play").glob("*.svg")]
    )
    assert len(expected) > len(plots)  # the play figures are in the report too
    assert figures == expected
    for path in figures:
        size = browser.show_report_image(path)
        assert size, f"{path} was not drawn"


def check_summary_lines(lines: list[str], run_dir: Path) -> None:
    """summary.md, written by rule summarise: the run's play files among its files, and its
    segments counted against the config's cap."""
    played = sorted(p.name for p in (run_dir / "play").glob("*.*"))
    assert {"elo.json", "move-match.csv", "legality.svg"} <= set(played)
    for name in played:
        assert f"- `play/{name}`" in lines
    config = yaml.safe_load((run_dir.parents[1] / ARGS[1]).read_text())
    cap = config["runs"][run_dir.name]["max_segments"]
    assert any(line.startswith(f"2 segments of at most {cap} (") for line in lines)


def check_about(browser: Browser) -> None:
    """The report's "About this report" names (in bold) every category of its results."""
    shown = browser.evaluate("JSON.stringify(Object.keys(categories).sort())")
    named = browser.evaluate(
        "JSON.stringify([...document.querySelectorAll('#about-this-report strong')]"
        ".map(s => s.textContent))"
    )
    assert "Play" in json.loads(shown)
    missing = set(json.loads(shown)) - set(json.loads(named))
    assert not missing, f"About this report omits the categories {sorted(missing)}"


@pytest.fixture
def report(trained_workflow: Path, staged_run: StagedRun) -> Path:
    """The HTML report of the trained run ``mini`` (``snakemake SUMMARY --report``)."""
    return staged_run.report


def test_report_opens_with_the_summary_and_every_figure(
    browser: Browser, report: Path, trained_workflow: Path
) -> None:
    check_report(browser, report, trained_workflow / "results" / "mini")


# The first page in viewport coordinates: the summary's title, its tables, the extent of all
# it draws (a wide element overflows the summary's box) and the workflow graph, with the pane
# that scrolls (the title's nearest scrolling ancestor) as it is after load, or scrolled up.
LAYOUT = """(() => {
  const rect = e => {
    const r = e.getBoundingClientRect();
    return [r.left, r.top, r.right, r.bottom];
  };
  const summary = document.querySelector('.chesslm-summary');
  const drawn = [...summary.querySelectorAll('*')].filter(e => e.parentElement.closest('table')
    === null);  // a table's cells count as the table, which may scroll them
  const boxes = [summary, ...drawn].map(rect).filter(b => b[2] > b[0] && b[3] > b[1]);
  const extent = [0, 1, 2, 3].map(i => (i < 2 ? Math.min : Math.max)(...boxes.map(b => b[i])));
  let pane = summary.parentElement;
  while (pane && !['auto', 'scroll'].includes(getComputedStyle(pane).overflowY))
    pane = pane.parentElement;
  if (SCROLL_UP) pane.scrollTop = 0;
  return {title: rect(summary.querySelector('h1')),
          graph: rect(document.querySelector('#rulegraph')), summary: extent,
          tables: [...summary.querySelectorAll('table')].map(rect), scroll_top: pane.scrollTop,
          viewport: [innerWidth, innerHeight]};
})()"""
DRAWN = (  # vega-embed draws the graph after the page has loaded
    "document.querySelector('.chesslm-summary h1')"
    " && document.querySelector('#rulegraph canvas, #rulegraph svg')"
    "?.getBoundingClientRect().height > 0"
)
# every box of the page in one number: the report's Tailwind script styles the page for a
# moment after it is drawn, so the page is measured once this stops changing
LAID_OUT = """(() => {
  let h = 0;
  for (const e of document.querySelectorAll('#app *')) {
    const r = e.getBoundingClientRect();
    h = (h * 31 + r.left + 7 * r.top + 13 * r.width + 17 * r.height) % 1e9;
  }
  return h;
})()"""


def intersects(a: list[float], b: list[float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def check_first_page(layout: dict, size: tuple[int, int], when: str) -> None:
    """The title wholly in the window; the graph over nothing the summary draws."""
    assert layout["viewport"] == list(size)
    left, top, right, bottom = layout["title"]
    width, height = size
    assert 0 <= top and bottom <= height, f"{when}: the title spans y {top:.0f}..{bottom:.0f}"
    assert 0 <= left and right <= width, f"{when}: the title spans x {left:.0f}..{right:.0f}"
    for box in (layout["summary"], *layout["tables"]):
        assert not intersects(layout["graph"], box), f"{when}: graph {layout['graph']} over {box}"


@pytest.mark.parametrize("size", [(1400, 900), (1920, 1080), (1400, 2000)], ids=str)
def test_first_page_opens_at_the_summary_title(
    browser: Browser, report: Path, size: tuple[int, int]
) -> None:
    """What a person sees: snakemake centres its home pane vertically, so a summary taller
    than the window once began above its top, out of reach, with the graph over its tables."""
    browser.open(file_url(report), viewport=size)
    assert browser.wait_for(DRAWN), "the first page never drew the summary and the graph"
    browser.wait_until_stable(LAID_OUT)
    shot = browser.screenshot(report.with_name(f"first-page-{size[0]}x{size[1]}.png"))
    for when, scroll_up in (("after load", False), ("scrolled to the top", True)):
        layout = browser.evaluate(LAYOUT.replace("SCROLL_UP", str(scroll_up).lower()))
        check_first_page(layout, size, f"{size} {when} (see {shot})")


# Where a text of the summary's "At a glance" list is drawn: a Range over the text nodes that
# hold it, its box in viewport coordinates, and whether a person sees it there (styled visible,
# and the topmost element at its centre is the summary's, not something drawn over it).
GLANCE_TEXT = """((needle) => {
  const heading = [...document.querySelectorAll('.chesslm-summary h2')]
    .find(h => h.textContent === 'At a glance');
  const list = heading && heading.nextElementSibling;
  if (!list || list.tagName !== 'UL') return null;
  const walker = document.createTreeWalker(list, NodeFilter.SHOW_TEXT);
  const nodes = [];
  let text = '';
  while (walker.nextNode()) {
    nodes.push([walker.currentNode, text.length]);
    text += walker.currentNode.data;
  }
  const at = text.indexOf(needle);
  if (at < 0) return {found: false, text};
  const locate = (i, end) => {
    const [node, start] = nodes.find(([n, s]) => end ? i <= s + n.length : i < s + n.length);
    return [node, i - start];
  };
  const range = document.createRange();
  range.setStart(...locate(at, false));
  range.setEnd(...locate(at + needle.length, true));
  const r = range.getBoundingClientRect();
  const element = range.startContainer.parentElement;
  const top = document.elementFromPoint((r.left + r.right) / 2, (r.top + r.bottom) / 2);
  return {found: true, box: [r.left, r.top, r.right, r.bottom],
          visible: element.checkVisibility({opacityProperty: true, visibilityProperty: true}),
          topmost: top !== null && list.contains(top)};
})"""


def glance_figures(play: Path) -> list[str]:
    """The figures the answers must show, from the records themselves: each dataset's top-1
    under the headline protocol (the first) with its interval or "(no interval)", the Elo with
    its interval, and each legality mode's share of illegal proposals."""
    match = json.loads((play / "move-match.json").read_text())
    headline = next(iter(match["protocols"]))
    figures = []
    for d in match["datasets"].values():
        (row,) = [r for r in d["table"] if r["protocol"] == headline and r["grouping"] == "overall"]
        interval = (
            "(no interval)"
            if row["few_games"]
            else f"[{row['top1_low']:.1%}, {row['top1_high']:.1%}]"
        )
        figures.append(f"{row['top1']:.1%} {interval}")
    fit = json.loads((play / "elo.json").read_text())["fit"]
    finite = fit["bound"] is None  # else the bound, in the fit's own words
    figures.append(
        f"{fit['elo']:.0f} (95 % interval {fit['low']:.0f} to {fit['high']:.0f}"
        if finite
        else fit["text"]
    )
    for mode, r in json.loads((play / "legality.json").read_text())["modes"].items():
        figures.append(f"{mode} {r['illegal_share']:.1%} of {r['proposals']} proposals illegal")
    return figures


def test_the_answers_are_in_the_first_viewport(
    browser: Browser, report: Path, staged_run: StagedRun
) -> None:
    """At 1400x900, before any scrolling: top-1 with its interval, the Elo with its interval
    and the legality are drawn inside the window, visible, under nothing else."""
    size = (1400, 900)
    figures = glance_figures(staged_run.workdir / "results" / "mini" / "play")
    browser.open(file_url(report), viewport=size)
    assert browser.wait_for(DRAWN), "the first page never drew the summary and the graph"
    browser.wait_until_stable(LAID_OUT)
    shot = browser.screenshot(report.with_name("answers-1400x900.png"))
    assert browser.evaluate("[innerWidth, innerHeight]") == list(size)
    for figure in figures:
        drawn = browser.evaluate(f"{GLANCE_TEXT}({json.dumps(figure)})")
        assert drawn, f"summary.md has no 'At a glance' list (see {shot})"
        assert drawn["found"], f"{figure!r} not in the answers: {drawn['text']!r}"
        left, top, right, bottom = drawn["box"]
        assert right > left and bottom > top, f"{figure!r} is drawn with no area"
        assert 0 <= top and bottom <= size[1], (
            f"{figure!r} spans y {top:.0f}..{bottom:.0f} ({shot})"
        )
        assert 0 <= left and right <= size[0], (
            f"{figure!r} spans x {left:.0f}..{right:.0f} ({shot})"
        )
        assert drawn["visible"] and drawn["topmost"], f"{figure!r} is hidden or covered ({shot})"


# The run at a glance in viewport coordinates: the best validation NLL's list item, each
# headline figure (its box, whether it is drawn and is what a person sees at its centre, its
# bytes) and the top of the identity, the first of the hashes.
FIRST_SCREEN = """(() => {
  const summary = document.querySelector('.chesslm-summary');
  const rect = e => {
    const r = e.getBoundingClientRect();
    return [r.left, r.top, r.right, r.bottom];
  };
  const seen = e => {
    const [l, t, r, b] = rect(e);
    return e.contains(document.elementFromPoint((l + r) / 2, (t + b) / 2));
  };
  const nll = [...summary.querySelectorAll('li')]
    .find(li => li.textContent.startsWith('Best validation NLL'));
  const identity = [...summary.querySelectorAll('h2')].find(h => h.textContent === 'Identity');
  const figures = [...summary.querySelectorAll('.chesslm-figures img')].map(i => ({
    alt: i.alt, box: rect(i), drawn: i.complete && i.naturalWidth > 0, seen: seen(i),
    src: i.getAttribute('src'), natural: i.naturalWidth}));
  return {nll: nll ? {text: nll.textContent, box: rect(nll), seen: seen(nll)} : null, figures,
          identity: identity ? rect(identity) : null, viewport: [innerWidth, innerHeight]};
})()"""


def figure_bytes(src: str) -> bytes:
    """An image's bytes from its base64 data URI as summary.html writes it (in lines)."""
    head, _, data = src.partition(",")
    assert head == "data:image/svg+xml;base64", head
    return base64.b64decode("".join(data.split()), validate=True)


@pytest.mark.parametrize("size", [(1400, 900), (1920, 1080)], ids=str)
def test_the_first_screen_shows_the_nll_and_the_figures_above_the_hashes(
    browser: Browser, report: Path, staged_run: StagedRun, size: tuple[int, int]
) -> None:
    """Without scrolling: the best validation NLL (results.json's), the NLL curve and
    move-matching by rating, each inside the window, drawn, under nothing else and above the
    identity and its hashes; each figure 300 px wide at least and at 40 % of its own size or
    more (its text still legible: not a thumbnail)."""
    run = staged_run.workdir / "results" / "mini"
    best = json.loads((run / "results.json").read_text())["best_validation_nll"]
    browser.open(file_url(report), viewport=size)
    assert browser.wait_for(DRAWN), "the first page never drew the summary and the graph"
    browser.wait_until_stable(LAID_OUT)
    shot = browser.screenshot(report.with_name(f"first-screen-{size[0]}x{size[1]}.png"))
    screen = browser.evaluate(FIRST_SCREEN)
    assert screen["viewport"] == list(size) and screen["identity"], shot
    assert screen["nll"] and f"Best validation NLL: {best:.4f}" in screen["nll"]["text"], shot
    expected = {"NLL curve": run / "report" / "nll.svg"}
    expected["move-matching by rating"] = run / "play" / "move-match.svg"
    assert [f["alt"] for f in screen["figures"]] == list(expected), shot
    for figure in screen["figures"]:
        assert figure_bytes(figure["src"]) == expected[figure["alt"]].read_bytes()
        assert figure["drawn"], f"{figure['alt']} is not drawn ({shot})"
    width, height = size
    for what, box, seen in [("best NLL", screen["nll"]["box"], screen["nll"]["seen"])] + [
        (f["alt"], f["box"], f["seen"]) for f in screen["figures"]
    ]:
        left, top, right, bottom = box
        assert 0 <= left and right <= width and 0 <= top and bottom <= height, (
            f"{what} spans x {left:.0f}..{right:.0f}, y {top:.0f}..{bottom:.0f} ({shot})"
        )
        assert seen, f"{what} is covered ({shot})"
        assert bottom <= screen["identity"][1], f"{what} is below the identity ({shot})"
    for figure in screen["figures"]:
        left, _, right, _ = figure["box"]
        shown = right - left
        assert shown >= max(300, 0.4 * figure["natural"]), f"{figure['alt']}: {shown:.0f} px"
