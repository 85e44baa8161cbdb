"""A comparison's settings (config ``comparisons.NAME``), typed, with the checks a schema cannot
express: every run named is a run, the dataset a dataset, the baseline one of the runs."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

SHAPES = ("none", "allie")
"""``comparisons.NAME.shape``: every position of the protocol, or Allie's equal positions per
mover band (``chesslm.compare.stats.allie_sample``)."""


@dataclass(frozen=True)
class Comparison:
    name: str
    runs: tuple[str, ...]
    dataset: str
    protocol: str = "maia2"
    baseline: str = ""
    bootstrap: int = 2000
    shape: str = "none"
    positions_per_band: int | None = None
    seed: int = 2026

    def __post_init__(self) -> None:
        if self.shape not in SHAPES:
            raise ValueError(
                f"comparisons.{self.name}.shape: {self.shape!r} is not one of {SHAPES}"
            )

    @classmethod
    def from_config(
        cls, name: str, raw: dict[str, Any], *, runs: list[str], datasets: list[str]
    ) -> Comparison:
        """From the schema-filled ``comparisons.NAME``; ValueError naming the key otherwise."""
        key = f"comparisons.{name}"
        for run in raw["runs"]:
            if run not in runs:
                raise ValueError(
                    f"{key}.runs names {run!r}, which is not a run (known: {', '.join(runs)})"
                )
        if len(set(raw["runs"])) != len(raw["runs"]):
            raise ValueError(f"{key}.runs names a run twice: {raw['runs']}")
        if raw["dataset"] not in datasets:
            raise ValueError(
                f"{key}.dataset is {raw['dataset']!r}, which is not a dataset"
                f" (known: {', '.join(datasets)})"
            )
        baseline = raw.get("baseline") or raw["runs"][0]
        if baseline not in raw["runs"]:
            raise ValueError(f"{key}.baseline is {baseline!r}, not one of {key}.runs")
        shape = raw.get("shape", "none")
        if shape not in SHAPES:
            raise ValueError(f"{key}.shape is {shape!r}, not one of {', '.join(SHAPES)}")
        if raw.get("positions_per_band") is not None and shape != "allie":
            raise ValueError(f"{key}.positions_per_band needs shape: allie")
        # absent keys take the defaults above (the schema's, tests/workflow/test_config.py)
        given = {f.name: raw[f.name] for f in fields(cls) if f.name in raw}
        return cls(**{**given, "name": name, "runs": tuple(raw["runs"]), "baseline": baseline})

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Comparison:
        """Back from ``as_dict`` (the rule hands the settings to its script as JSON)."""
        return cls(**{**raw, "runs": tuple(raw["runs"])})

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "runs": list(self.runs)}
