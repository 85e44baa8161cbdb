"""Where a run's and a dataset's files live under ``results/``, spelled once (standard library
only: the workflow reads it at parse time).

Every property is a path string; built on a name (``RunDir.of("demo")``) it is a file, built on
a wildcard (``RunDir.of("{run}")``) it is a rule's pattern, and built on a directory
(``RunDir(path)``) it is that run's file wherever the run lives.

>>> RunDir.of("demo").best
'results/demo/train/best.pt'
>>> RunDir.of("{run}").segment("{n}")
'results/{run}/segments/{n}.json'
>>> DatasetDir.of("sample").cache_meta
'results/datasets/sample/token-cache/cache.json'
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

RESULTS = "results"
LOGS = "logs"


@dataclass(frozen=True)
class _Folder:
    """A folder of results, by its path (a pattern such as ``results/{run}`` for the rules)."""

    path: str
    PARENT = RESULTS  # where ``of(name)`` puts the folder of that name

    def __init__(self, path: str | Path) -> None:
        object.__setattr__(self, "path", str(path))

    @classmethod
    def of(cls, name: str):  # noqa: ANN206 - the subclass
        return cls(f"{cls.PARENT}/{name}")

    def _(self, relative: str) -> str:
        return f"{self.path}/{relative}"


class RunDir(_Folder):
    """``results/{run}``: what training, play, scores, analyses, the report and the export write."""

    # training (rules probe, train_segment, results)
    @property
    def probe(self) -> str:
        return self._("probe-results.json")

    @property
    def results(self) -> str:
        """The run's results: the terminal status plus every segment's (rule results)."""
        return self._("results.json")

    @property
    def train(self) -> str:
        return self._("train")

    @property
    def best(self) -> str:
        return self._("train/best.pt")

    @property
    def last(self) -> str:
        return self._("train/last.pt")

    @property
    def train_results(self) -> str:
        """The trainer's own results, which rule results completes."""
        return self._("train/results.json")

    @property
    def identity(self) -> str:
        return self._("train/identity.json")

    @property
    def events(self) -> str:
        return self._("train/events.jsonl")

    @property
    def telemetry(self) -> str:
        return self._("train/gpu-telemetry.jsonl")

    @property
    def segments(self) -> str:
        return self._("segments")

    def segment(self, n: int | str) -> str:
        return self._(f"segments/{n}.json")

    # play, scores, report, export: a folder each, and its files by name
    play = property(lambda self: self._("play"))
    report = property(lambda self: self._("report"))
    export = property(lambda self: self._("export"))

    def play_file(self, file: str) -> str:
        """A file of ``chesslm.record.play_files`` under ``play/``."""
        return self._(f"play/{file}")

    def report_file(self, file: str) -> str:
        """A file of ``chesslm.report.items`` under ``report/``."""
        return self._(f"report/{file}")

    def export_file(self, file: str) -> str:
        return self._(f"export/{file}")

    def scores(self, dataset: str) -> str:
        """Rule score's folder: the run's best.pt on ``dataset``'s validation positions."""
        return self._(f"scores/{dataset}")

    def scores_file(self, dataset: str, file: str) -> str:
        return self._(f"scores/{dataset}/{file}")

    def analysis(self, dataset: str) -> str:
        """Rule analyse's per-move CSV: the run's best.pt on ``dataset``'s validation games."""
        return self._(f"analysis/{dataset}.csv")

    def analysis_games(self, dataset: str) -> str:
        """Its per-game companion (``games_csv``)."""
        return games_csv(self.analysis(dataset))


class DatasetDir(_Folder):
    """``results/datasets/{dataset}``: the converted dataset, its receipt and token cache."""

    PARENT = f"{RESULTS}/datasets"

    @property
    def manifest(self) -> str:
        return self._("manifest.json")

    def split(self, name: str) -> str:
        """A split's shard folder (train, validation, test)."""
        return self._(name)

    @property
    def receipt(self) -> str:
        return self._("integrity-receipt.json")

    @property
    def cache(self) -> str:
        return self._("token-cache")

    @property
    def cache_meta(self) -> str:
        """The token cache's cache.json (written last: the cache's output of record)."""
        return self._("token-cache/cache.json")


def games_csv(moves_csv: str | Path) -> str:
    """The per-game companion of an analysis's per-move CSV (``chesslm-analyse --csv``).

    >>> games_csv("results/{run}/analysis/{dataset}.csv")
    'results/{run}/analysis/{dataset}.games.csv'
    """
    path = Path(moves_csv)
    return str(path.with_name(path.stem + ".games.csv"))


def ladder_file(name: str, key: str) -> str:
    """Ladder ``name``'s file (rule ladder), ``key`` the short key of its settings and engine."""
    return f"{RESULTS}/ladders/{name}-{key}/ladder.json"


def compare_file(name: str, file: str) -> str:
    """A file of comparison ``name`` (rule compare) under ``results/compare/{name}/``."""
    return f"{RESULTS}/compare/{name}/{file}"
