"""torch.compile of the training model, with the compiler's caches kept beside the run.

Every segment is a fresh process, so compilation must not be paid again each time: the
Inductor cache (FX graphs, AOTAutograd graphs, generated kernels) and Triton's kernel cache go
to ``results/{run}/train/compile-cache`` (``cache_env``), set before anything compiles. The
first segment compiles (cold); the next ones load the compiled graphs from there (warm).

``resolve("auto", "cuda")`` is True: compilation is on by default on CUDA and off on the
CPU, where the demo and the tests must stay fast and bitwise reproducible.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch

CHOICES = ("auto", "on", "off")
#: torch.compile mode; "reduce-overhead" adds CUDA graphs (CHESSLM_COMPILE_MODE overrides).
DEFAULT_MODE = "default"


def resolve(setting: str | bool | None, device: str) -> bool:
    """Whether to compile: ``auto``/None means on CUDA only.

    >>> resolve("auto", "cpu"), resolve(None, "cuda"), resolve("on", "cpu"), resolve(False, "cuda")
    (False, True, True, False)
    """
    if setting in (None, "auto"):
        return device == "cuda"
    if isinstance(setting, bool):
        return setting
    if setting not in CHOICES:
        raise ValueError(f"compile must be one of {CHOICES}, got {setting!r}")
    return setting == "on"


def cache_env(directory: Path | str) -> dict[str, str]:
    """Point Inductor's and Triton's on-disk caches at ``directory`` (call before compiling).

    Returns the variables it set. Variables already set by the caller are kept.
    """
    root = Path(directory).resolve()
    root.mkdir(parents=True, exist_ok=True)
    wanted = {
        "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"),
        "TRITON_CACHE_DIR": str(root / "triton"),
    }
    for key, value in wanted.items():
        os.environ.setdefault(key, value)
    # on by default in recent torch; explicit so a warm start never recompiles kernels
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    inductor_config.fx_graph_cache = True
    functorch_config.enable_autograd_cache = True
    return {key: os.environ[key] for key in wanted}


def compile_model(
    net: torch.nn.Module, *, static_shapes: bool, mode: str | None = None, scope: str | None = None
) -> None:
    """Compile the model's forward in place (state_dict keys stay the same).

    ``scope="blocks"`` (or ``CHESSLM_COMPILE_SCOPE=blocks``) compiles each transformer block
    instead: each block then has its own backward, so its gradients are complete as soon as
    it is done (several GPUs overlap their all-reduce with the rest of the backward this way,
    ``cuda_graphs.Buckets``). Regional compilation: the blocks share one compiled graph, so
    it compiles faster (H200, before floats were specialised: cold 65 -> 33 s, warm 34 -> 21
    s to the first update; the whole forward now starts in 35 s cold, 10-11 s warm), but the
    eager code between blocks slows validation (1.9x a bare forward, over the 1.5x goal) and
    the uncaptured packed path (576k -> 358k targets/s); the captured default path kept its
    speed (331k -> 326k); see BENCHMARKS.md. Hence the whole forward on one GPU.

    Padded game batches vary in length, so their length dimension is compiled dynamic (one
    graph for every bucket); packed rows have one fixed shape and compile static.
    """
    # Python floats in the traced code (symbolic by default) made Dynamo trace the model
    # twice (a TensorifyScalarRestartAnalysis after a whole joint-graph trace): about 25 s of
    # every segment's start on an H200, cold or warm. They are constants here.
    import torch._dynamo.config as dynamo_config

    dynamo_config.specialize_float = True
    options = {"dynamic": False if static_shapes else True, "mode": _mode(mode)}
    if (scope or os.environ.get("CHESSLM_COMPILE_SCOPE", "model")) == "model":
        net.compile(**options)
        return
    for block in net.transformer.h:
        block.compile(**options)


def _inference(net: torch.nn.Module, x: torch.Tensor, **kwargs: Any) -> Any:
    return net(x, **kwargs)  # kwargs: outcome=True (the outcome head's validation)


def compile_inference(
    net: torch.nn.Module, *, mode: str | None = None
) -> Callable[[torch.Tensor], torch.Tensor]:
    """The model's forward for validation, compiled as its own function (dynamic shapes:
    validation batches vary in length, packed runs included).

    Its own frame, not the training model's: Dynamo keys a graph it compiles after another
    one of the same frame differently from the same graph compiled first (seen on the CPU:
    the probe's inference graph, compiled after its updates, missed the cache in segment 0,
    which validates first; an H200 then spent ~12 s compiling it). In a frame of its own the
    inference graph is always its frame's first, so the probe's warm-up serves every segment,
    whether it validates before or after its first update."""
    return partial(torch.compile(_inference, dynamic=True, mode=_mode(mode)), net)


def _mode(mode: str | None) -> str | None:
    """torch.compile's ``mode``: the argument, else CHESSLM_COMPILE_MODE, else the default."""
    mode = mode or os.environ.get("CHESSLM_COMPILE_MODE") or DEFAULT_MODE
    return None if mode == "default" else mode
