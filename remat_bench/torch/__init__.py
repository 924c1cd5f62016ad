"""PyTorch import and replay (docs/design.md section 9), in the optional ``torch`` extra.

- `remat_bench.torch.zoo`: the built-in models (mlp, vgg11, resnet18,
  resnet50, unet, gpt; and from `remat_bench.torch.families` gru, dunet,
  moe, convnext), defined here without torchvision;
- `remat_bench.torch.ecosystem`: torchvision, timm and transformers models by
  name (``torchvision:resnet50``, ``timm:vit_small_patch16_224``,
  ``hf:llama``), built with random weights (the optional ``models`` extra);
- `remat_bench.torch.build`: a model built by name, with real or fake
  tensors, its lazy modules materialized;
- `remat_bench.torch.spec`: the model spec (model, batch, shapes, task,
  seed), resolved from one fake forward pass, and the step and batch it
  rebuilds;
- `remat_bench.torch.trace`: a training step traced into one joint aten
  graph with fake tensors;
- `remat_bench.torch.program`: that graph lowered to remat-bench nodes;
- `remat_bench.torch.executor`: program nodes run one by one on real
  tensors, and the plain autograd step they are checked against;
- `remat_bench.torch.randomness`: random operators (dropout) seeded one by
  one, so that a recomputation and eager autograd draw the same values;
- `remat_bench.torch.importer`: `import_model` -> `Graph` (memory in bytes,
  durations measured in nanoseconds or counted in FLOPs, workspaces measured);
- `remat_bench.torch.calibrate`: operators timed and their scratch memory
  measured on this machine, cached by operator signature;
- `remat_bench.torch.measure`: allocator peaks, timing, free memory, and
  where a measurement was taken;
- `remat_bench.torch.replay`: `replay(graph, schedule)` runs a schedule with
  real tensors and measures the real peak;
- `remat_bench.torch.compiled`: a schedule's plan under ``torch.compile``
  (`compiled_plan`, `compile_training_step`), and PyTorch's own memory budget
  (`compile_with_memory_budget`).

Importing this package does not import torch; `require_torch` says, in one
sentence, how to install it when it is missing. docs/pytorch.md walks through
the whole path from a user's own ``nn.Module`` to a chart.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from typing import Any

from remat_bench.core.errors import RematBenchError

INSTALL_HINT = "install it with `pip install remat-bench[torch]` (CPU: `make install` or `pip install torch==2.14.1`)"


class TorchMissingError(RematBenchError):
    """PyTorch is not installed, and the command needs it."""


def torch_available() -> bool:
    """Whether PyTorch can be imported here (importing it, if it is installed).

    Returns
    -------
    bool
    """
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def require_torch(what: str = "this command") -> None:
    """Raise TorchMissingError (exit status 2) when PyTorch cannot be imported.

    Parameters
    ----------
    what : str
        What needs PyTorch, the subject of the error's sentence.

    Raises
    ------
    TorchMissingError
        PyTorch is not installed; the sentence says how to install it.
    """
    if not torch_available():
        raise TorchMissingError(f"{what} needs PyTorch, which is not installed: {INSTALL_HINT}")


# Environment variables by which a user asks torch for its own logs (torch._logging).
# A replay's timed pairs (baseline, schedule), after a warm-up of each (`remat-bench replay`, sweeps' replay:):
# at least DEFAULT_REPEATS (six is the fewest whose median has a 95% interval), then more until the measured
# overhead's 95% interval is within +-DEFAULT_PRECISION points, or DEFAULT_MAX_PAIRS have run. Here, where the
# command line reads them without importing torch.
DEFAULT_REPEATS = 6
DEFAULT_PRECISION = 1.0
DEFAULT_MAX_PAIRS = 40
TORCH_LOG_SWITCHES = ("TORCH_LOGS", "TORCH_TRACE", "TORCH_COMPILE_DEBUG", "TORCH_DTRACE")


def _logs_asked() -> bool:
    """Whether the user asked torch for its logs (`TORCH_LOG_SWITCHES`)."""
    return any(os.environ.get(name) for name in TORCH_LOG_SWITCHES)


def quiet_torch_logs() -> None:
    """Keep torch's logging at warnings unless the user asked for its logs.

    torch keeps its structured-trace logger (``torch.__trace``) at DEBUG at all
    times; tracing a model with fake tensors writes thousands of records to it,
    and any handler on it (pytest's log capture is one) prints them all.
    Called once torch is imported (`remat_bench.torch.zoo`).
    """
    if _logs_asked():
        return
    for name in ("torch", "torch.__trace"):
        logger = logging.getLogger(name)
        if logger.level < logging.WARNING:
            logger.setLevel(logging.WARNING)


@contextlib.contextmanager
def logger_quiet(name: str, level: int) -> Iterator[None]:
    """Raise logger ``name`` to ``level`` for the block, unless the user asked torch for its logs
    (TORCH_LOGS ...).

    Parameters
    ----------
    name : str
        The logger's name.
    level : int
        The `logging` level it is set to; its own level comes back after the block.

    Yields
    ------
    None
    """
    if _logs_asked():
        yield
        return
    logger = logging.getLogger(name)
    saved = logger.level
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.setLevel(saved)


_EXPORTS = {
    "import_model": "remat_bench.torch.importer",
    "program_for_graph": "remat_bench.torch.importer",
    "replay": "remat_bench.torch.replay",
    "replay_files": "remat_bench.torch.replay",
    "ReplayResult": "remat_bench.torch.replay",
    "ZOO": "remat_bench.torch.zoo",
}


def __getattr__(name: str) -> Any:
    """Lazy access to the public API, so that ``import remat_bench.torch`` never needs torch."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'remat_bench.torch' has no attribute {name!r}")
    require_torch(f"remat_bench.torch.{name}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = ["INSTALL_HINT", "TorchMissingError", "logger_quiet", "quiet_torch_logs", "require_torch", "torch_available",
           *_EXPORTS]
