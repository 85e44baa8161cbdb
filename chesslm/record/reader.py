"""A play record read: the sealed JSON file (``chesslm.seal``) built into its dataclass, field
by field, so a record's shape is spelled once, by its dataclass (``move_match``, ``legality``,
``elo``, ``counterfactual``), and checked as it is read.

A missing file reads as ``None``; a file that is not JSON or not sealed as rule play wrote it
(``chesslm.seal``: edited, damaged or written before records were sealed) raises
``RecordError``, one line naming the file and the command that rebuilds it; one that misses a
key or holds a value of the wrong type, one line naming the file and the key. Keys the readers do
not need are ignored. Standard library only: the report reads JSON only.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

from chesslm import seal


class RecordError(ValueError):
    """A play record that cannot be read: names its file and key."""


T = TypeVar("T")


def _convert(kind: Any, value: Any, key: str, path: Path) -> Any:
    """``value`` (at ``key`` of ``path``) as the type ``kind`` of a record's field."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (kind,) = (a for a in args if a is not type(None))
        return _convert(kind, value, key, path)
    if dataclasses.is_dataclass(kind):
        return _build(kind, value, path, key)
    if origin is list and isinstance(value, list):
        return [_convert(args[0], v, f"{key}[{i}]", path) for i, v in enumerate(value)]
    if origin is dict and isinstance(value, dict):
        return {k: _convert(args[1], v, f"{key}.{k}", path) for k, v in value.items()}
    if kind is Any:
        return value
    if kind is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if kind in (int, str, bool) and type(value) is kind:
        return value
    raise RecordError(f"{path}: key {key!r} is {json.dumps(value)[:40]}, not {_name(kind)}")


def _name(kind: Any) -> str:
    origin = typing.get_origin(kind)
    names = {list: "a list", dict: "an object", float: "a number", int: "an integer"}
    return names.get(origin or kind, getattr(kind, "__name__", str(kind)))


def _build(cls: type[T], data: Any, path: Path, at: str = "") -> T:
    """The dataclass ``cls`` from the JSON object ``data``: every field without a default is
    a required key."""
    if not isinstance(data, dict):
        raise RecordError(f"{path}: {f'key {at!r}' if at else 'the record'} is not an object")
    hints = typing.get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        key = f"{at}.{f.name}" if at else f.name
        if f.name in data:
            values[f.name] = _convert(hints[f.name], data[f.name], key, path)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise RecordError(f"{path}: no key {key!r}")
    return cls(**values)


def _load(path: Path) -> dict[str, Any] | None:
    """The sealed record in ``path`` (``chesslm.seal``), checked; ``None`` when there is no
    such file. An unreadable, unsealed or edited one is a ``RecordError`` naming the file and
    the command that rebuilds it."""
    if not path.exists() and not path.is_symlink():
        return None
    try:
        return seal.read(path, seal.rebuild(path, "play"))
    except seal.SealError as error:
        raise RecordError(str(error)) from None


def read(cls: type[T], path: Path | str) -> T | None:
    """``path``'s record as ``cls``; ``None`` when there is no such file."""
    path = Path(path)
    data = _load(path)
    if data is None:
        return None
    record = _build(cls, data, path)
    missing = next((k for k in getattr(record, "required", ()) if k not in data), None)
    if missing is not None:
        raise RecordError(f"{path}: no key {missing!r}")
    return record
