"""GPU telemetry: ``nvidia-smi`` once a second into ``gpu-telemetry.jsonl``, on a thread.

Only where a GPU and nvidia-smi exist; elsewhere it does nothing.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import threading
import time
from pathlib import Path
from types import TracebackType

import torch

logger = logging.getLogger(__name__)
QUERY = "index,utilization.gpu,memory.used,power.draw"


def available() -> bool:
    return torch.cuda.is_available() and shutil.which("nvidia-smi") is not None


class Telemetry:
    """``with Telemetry(path): ...`` samples the GPUs until the block ends."""

    def __init__(self, path: Path | str, *, interval_s: float = 1.0, enabled: bool = True) -> None:
        self.path = Path(path)
        self.interval_s = interval_s
        self.enabled = enabled and available()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        with self.path.open("a") as fh:
            while not self._stop.is_set():
                try:
                    result = subprocess.run(
                        ["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"],
                        capture_output=True,
                        text=True,
                        timeout=10,
                    )
                    gpus = result.stdout.strip()
                except (OSError, subprocess.TimeoutExpired) as error:
                    gpus = f"error: {error}"
                fh.write(
                    json.dumps({"time_unix": time.time(), "query": QUERY, "gpus": gpus}) + "\n"
                )
                fh.flush()
                self._stop.wait(self.interval_s)

    def __enter__(self) -> Telemetry:
        if self.enabled:
            self._thread = threading.Thread(target=self._run, name="gpu-telemetry", daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=3)
