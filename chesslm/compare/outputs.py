"""The files of rule compare, in one table: ``chesslm.compare.build`` writes them and the rule
names them. Standard library only, so the Snakefile imports it without torch, pandas or
matplotlib."""

from __future__ import annotations

FIGURES = ("runs", "paired", "curve", "bands")  # {name}.svg next to comparison.json
