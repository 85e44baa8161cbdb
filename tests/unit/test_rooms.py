"""The package's rooms (issue 47) and floors (issue 60): every room (a sub-package of
``chesslm``, or a module at its top) stands on one floor of ``FLOORS``, which follow the
pipeline from the bottom up, and imports only rooms of its own floor or below; no two rooms
import each other, no room holds more than a quarter of the package's lines and rule play's
conductor under a tenth, and no module imports a private name (``_name``) of another room.
Read from the code's own imports (ast), so a new arrow up fails here."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "chesslm"

FLOORS: list[set[str]] = [
    # what every stage shares: files and the atomic writer, paths, seals, commands, logging
    {"files", "layout", "commands", "seal", "watch", "figures", "progress", "logs"},
    {"data"},  # games as tokens and caches
    {"model"},  # the network and its checkpoint
    {"scorer"},  # how the model scores positions, and a run's play settings
    {"match", "ladder"},  # what move-matching measures; games and the Elo
    {"record"},  # records every stage writes and later ones read, spelled once
    {"train"},
    {"export", "compare", "report"},  # what reads a trained run's records and weights
    {"engine"},  # the hand-over: reads an export
    {"board"},  # the board in the browser: drives the engine
    {"config", "owner"},  # the workflow's doors: the config checked once; a job's folder lock
    {"play"},  # the top stage: imported by the workflow's scripts and the tests only
]
"""The floors, bottom to top: a room imports its own floor's rooms and those below."""


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


def _floor_room(path: Path) -> str | None:
    """The room of ``path`` on the floors: its sub-package, or its own name for a module at
    the package's top (None: the package's ``__init__``)."""
    parts = path.relative_to(PACKAGE).parts
    return parts[0] if len(parts) > 1 else (None if path.stem == "__init__" else path.stem)


def _floor_target(module: str, name: str) -> str | None:
    """``_target_room``, with a module at the package's top its own room (``chesslm.files``,
    ``from chesslm import files``)."""
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else name
    found = (PACKAGE / top).is_dir() or (PACKAGE / f"{top}.py").exists()
    return top if found and top != "__init__" else None


def _floor_arrows() -> set[tuple[str, str, str]]:
    """(module, its room, the room it imports) of every import between rooms."""
    out = set()
    for path in PACKAGE.rglob("*.py"):
        source = _floor_room(path)
        for module, names in _imports(path):
            for name in names or [""]:
                target = _floor_target(module, name)
                if source and target and target != source:
                    out.add((str(path.relative_to(ROOT)), source, target))
    return out


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


def test_every_room_stands_on_one_floor() -> None:
    placed = [room for floor in FLOORS for room in floor]
    assert len(placed) == len(set(placed)), f"a room on two floors: {sorted(placed)}"
    rooms = {_floor_room(p) for p in PACKAGE.rglob("*.py")} - {None}
    assert not rooms - set(placed), f"rooms on no floor of FLOORS: {sorted(rooms - set(placed))}"
    assert not set(placed) - rooms, f"FLOORS names no room: {sorted(set(placed) - rooms)}"


def test_no_import_points_up_a_floor() -> None:
    level = {room: i for i, floor in enumerate(FLOORS) for room in floor}
    up = sorted(
        f"{path}: {source} (floor {level[source]}) imports {target} (floor {level[target]})"
        for path, source, target in _floor_arrows()
        if level[target] > level[source]
    )
    assert not up, "imports that point up a floor:\n" + "\n".join(up)


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
