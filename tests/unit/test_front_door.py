"""The front door and the benchmarks' index: README stays short and links every docs page;
BENCHMARKS.md opens with the current figures, each row linking a note that exists; every note
is listed and holds its own result files; benchmarks/README.md names every script."""

from __future__ import annotations

import re
from pathlib import Path

from tests.helpers import ROOT

README_LINES = 200  # issue 47: a front door, not a wall
BENCHMARKS = ROOT / "BENCHMARKS.md"
NOTES = ROOT / "benchmarks" / "notes"
COLUMNS = ["what", "figure", "ratio to its reference", "machine", "date", "commit", "command",
           "note"]  # fmt: skip


def links(path: Path) -> list[str]:
    """The relative link targets of a Markdown file (comments left out)."""
    text = re.sub(r"<!--.*?-->", "", path.read_text(), flags=re.S)
    found = re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", text)
    return [t for t in found if not re.match(r"\w+://", t)]


def figures_table() -> list[list[str]]:
    """BENCHMARKS.md's first table, as rows of cells (the header row first)."""
    lines = BENCHMARKS.read_text().split("\n## ", 1)[0].splitlines()
    rows = [line for line in lines if line.startswith("| ")]
    return [[cell.strip() for cell in row.strip().strip("|").split("|")] for row in rows]


def test_readme_is_a_front_door_that_links_every_docs_page() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_LINES, f"README.md has {len(lines)} lines (at most {README_LINES})"
    linked = set(links(ROOT / "README.md"))
    pages = {p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md")}
    pages |= {"CHANGELOG.md", "BENCHMARKS.md", "benchmarks/README.md", "config/README.md"}
    assert not pages - linked, f"README.md links no {sorted(pages - linked)}"


def test_benchmarks_opens_with_the_current_figures_each_with_its_note() -> None:
    text = BENCHMARKS.read_text()
    assert text.index("| what |") < text.index("\n## "), "the table is not BENCHMARKS.md's first"
    header, _, *rows = figures_table()
    assert header == COLUMNS, header
    figures = [row for row in rows if any(row[1:])]  # the others name a group of rows
    assert len(figures) >= 20, len(figures)
    for row in figures:
        assert len(row) == len(COLUMNS), row
        what, figure, _, machine, date, commit, command, note = row
        assert figure and machine and commit and command, what
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", date), (what, date)
        target = re.fullmatch(r"\[note\]\((benchmarks/notes/[\w.-]+\.md)\)", note)
        assert target and (ROOT / target.group(1)).is_file(), (what, note)


def test_every_note_is_listed_and_holds_its_own_result_files() -> None:
    assert not (ROOT / "benchmarks" / "results").exists(), "results now live beside their notes"
    notes = sorted(NOTES.glob("*.md"))
    listed = set(links(BENCHMARKS))
    for note in notes:
        assert f"benchmarks/notes/{note.name}" in listed, f"BENCHMARKS.md lists no {note.name}"
        assert re.match(r"\d{4}-\d{2}-\d{2}-[a-z0-9-]+\.md$", note.name), note.name
    for folder in (p for p in NOTES.iterdir() if p.is_dir()):
        assert (NOTES / f"{folder.name}.md").is_file(), f"{folder.name}/: no note of its name"
    for doc in [BENCHMARKS, ROOT / "benchmarks" / "README.md", ROOT / "CHANGELOG.md", *notes]:
        for target in links(doc):
            assert (doc.parent / target).exists(), f"{doc.relative_to(ROOT)}: no {target}"


def test_benchmarks_readme_names_every_script_with_a_command() -> None:
    text = (ROOT / "benchmarks" / "README.md").read_text()
    index = text.split("\n## ", 1)[0]
    commands = "\n".join(re.findall(r"```bash\n(.*?)```", text, re.S))
    for script in sorted([*ROOT.glob("benchmarks/*.py"), *ROOT.glob("benchmarks/*.sh")]):
        assert f"| `{script.name}` |" in index, f"benchmarks/README.md: no row for {script.name}"
        if script.name != "device-env.sh":  # sourced by the gpu_*.sh drivers, never run
            assert f"benchmarks/{script.name}" in commands, f"no command runs {script.name}"
