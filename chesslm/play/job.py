"""What rule play's parts share: the ``Job`` (the model, the datasets, the typed settings, where
state goes) and the ``Result`` a part hands back, written in its table order (``write``)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from matplotlib.figure import Figure

from chesslm import files, seal
from chesslm.data.cache import check_validation_only
from chesslm.figures import save_svg
from chesslm.layout import RunDir
from chesslm.match import matching
from chesslm.model import gpt, weights
from chesslm.play import workstate
from chesslm.progress import EVERY_SECONDS
from chesslm.record import play_files as outputs
from chesslm.scorer import prepare, scoring
from chesslm.scorer.settings import PlaySettings
from chesslm.scorer.threads import use_threads

logger = logging.getLogger(__name__)


@dataclass
class Job:
    """What the parts share: the model, the datasets, where state goes, the settings."""

    net: gpt.GPT
    model_info: dict[str, Any]
    device: torch.device
    settings: PlaySettings
    caches: dict[str, Path]
    state: Path
    host: dict[str, Any]
    progress_every: float
    ladder: Path | None


@dataclass
class Result:
    """What a part hands back for writing: its record (the ``.json``), its tables by output
    name (the ``.csv`` files) and its figure (the ``.svg``)."""

    record: dict[str, Any]
    tables: dict[str, pd.DataFrame]
    figure: Figure


Part = Callable[[Job], Result]
"""One part of the evaluation, bounded by its own ``seconds``; its outputs are the rows of
``chesslm.record.play_files`` with its name."""


@dataclass(frozen=True)
class Options:
    """How one evaluation runs (what it measures is the ``settings``): the device, torch's
    threads (the rule's ``threads:``), the checkpoint (``None``: the run's ``train/best.pt``),
    the seconds of work between progress lines, and the ladder file (rule ladder's)."""

    device: str
    threads: int = 1
    checkpoint_path: Path | None = None
    progress_every: float = EVERY_SECONDS
    ladder: Path | None = None


def open_job(run_dir: Path, settings: PlaySettings, caches: dict[str, Path], how: Options) -> Job:
    """Load the model, and keep or empty the work in progress (``workstate``)."""
    host = {"device": how.device, **use_threads(how.threads)}
    dev = torch.device(how.device)
    torch.manual_seed(settings.seed)
    prepare.start_job(how.threads, dev.type)  # forked while this process is small
    net, model_info = weights.load_with_record(how.checkpoint_path or RunDir(run_dir).best, dev)
    if settings.match.compile:
        logger.info("match.compile: the first batches compile (on an H200: 45 s cold, 12 s cached)")
        scoring.compile_layers(net)
    play_dir = Path(RunDir(run_dir).play)
    play_dir.mkdir(parents=True, exist_ok=True)
    wanted = workstate.identity(model_info, settings.as_dict(), caches, how.device)
    state = workstate.open_state(play_dir, wanted | matching.state_key())
    for cache_dir in caches.values():
        check_validation_only(cache_dir)
    return Job(net, model_info, dev, settings, caches, state, host, how.progress_every, how.ladder)


def write(result: Result, mine: tuple[outputs.Output, ...], out: dict[str, Path]) -> None:
    """A part's files, in its table order: the record, the tables, the figure."""
    for output in mine:
        path = out[output.name]
        if output.file.endswith(".json"):
            seal.write(path, result.record)  # record.play_records checks the seal before use
        elif output.file.endswith(".csv"):
            frame = result.tables[output.name]
            files.write_atomic(path, lambda fh, f=frame: fh.write(f.to_csv(index=False).encode()))
        else:
            save_svg(result.figure, path)
