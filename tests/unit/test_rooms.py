"""The package's rooms (issue 47): every folder-level import runs one way (no two sub-packages
of ``chesslm`` import each other), no room holds more than a quarter of the package's lines and
rule play's conductor under a tenth, and no module imports a private name (``_name``) of
another room. Read from the code's own imports (ast), so a new arrow back up fails here."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "chesslm"


def _room(path: Path) -> str | None:
    """The sub-package a module belongs to (None: a module at the package's top)."""
    parts = path.relative_to(PACKAGE).parts
    return parts[0] if len(parts) > 1 else None


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module imported, names taken from it) of every chesslm import in ``path``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("chesslm"):
            out.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names if a.name.startswith("chesslm")]
    return out


def _target_room(module: str, name: str) -> str | None:
    """The room an import reaches: ``chesslm.X.y`` -> X; ``from chesslm import X`` -> X when X
    is a sub-package."""
    parts = module.split(".")
    if len(parts) > 1:
        return parts[1] if (PACKAGE / parts[1]).is_dir() else None
    return name if (PACKAGE / name).is_dir() else None


def _arrows() -> dict[str, set[str]]:
    arrows: dict[str, set[str]] = defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        source = _room(path)
        if source is None:
            continue
        for module, names in _imports(path):
            for name in names or [""]:
                target = _target_room(module, name)
                if target and target != source:
                    arrows[source].add(target)
    return arrows


def test_no_two_rooms_import_each_other() -> None:
    arrows = _arrows()
    both = sorted({tuple(sorted((a, b))) for a, bs in arrows.items() for b in bs
                   if a in arrows.get(b, set())})  # fmt: skip
    assert not both, f"rooms importing each other: {both}"


def test_no_room_too_large_and_the_conductor_small() -> None:
    lines: dict[str | None, int] = defaultdict(int)
    for path in PACKAGE.rglob("*.py"):
        lines[_room(path)] += len(path.read_text().splitlines())
    total = sum(lines.values())
    share = {room: n / total for room, n in lines.items() if room}
    assert max(share.values()) <= 0.25, share
    assert share["play"] < 0.10, f"rule play's conductor holds {share['play']:.1%}"


def test_no_module_imports_a_private_name_of_another_room() -> None:
    taken = []
    for path in PACKAGE.rglob("*.py"):
        for module, names in _imports(path):
            target = _target_room(module, "")
            private = [n for n in names if n.startswith("_") and n != "__version__"]
            if private and target and target != _room(path):
                taken.append(f"{path.relative_to(ROOT)}: {module}.{private}")
    assert not taken, taken
