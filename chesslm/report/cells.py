"""summary.md's numbers and pipe tables, one spelling for every section (training and play):
a missing value is ``n/a``, and a cell's ``|`` is escaped so it cannot split its row."""

from __future__ import annotations

from typing import Any

import pandas as pd

MISSING = "n/a"


def num(value: Any, spec: str = ".4g") -> str:
    """A number for summary.md; ``spec=""`` prints whole numbers without ``.0``."""
    if isinstance(value, str):
        return value
    if value is None or pd.isna(value):
        return MISSING
    if spec == "" and float(value).is_integer():
        return str(int(value))
    return format(value, spec)


def md_table(header: list[str], rows: list[list[Any]]) -> list[str]:
    """A pipe table and the blank line after it."""

    def cell(value: Any) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows] + [""]
