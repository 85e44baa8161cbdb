"""A comparison's settings (config ``comparisons.NAME``), typed, with the checks a schema cannot
express: every run named is a run, the dataset a dataset, the baseline one of the runs."""

from __future__ import annotations

from dataclasses import asdict, dataclass
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
        return cls(
            name=name,
            runs=tuple(raw["runs"]),
            dataset=raw["dataset"],
            protocol=raw.get("protocol", "maia2"),
            baseline=baseline,
            bootstrap=int(raw.get("bootstrap", 2000)),
            shape=shape,
            positions_per_band=raw.get("positions_per_band"),
            seed=int(raw.get("seed", 2026)),
        )

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Comparison:
        """Back from ``as_dict`` (the rule hands the settings to its script as JSON)."""
        return cls(**{**raw, "runs": tuple(raw["runs"])})

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "runs": list(self.runs)}
