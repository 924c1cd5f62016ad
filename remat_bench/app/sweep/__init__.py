"""Batch sweeps (docs/design.md section 8): configs, hard-limited runs, the journal and the results table.

- `config`: read and check a YAML config (its node tree `document`, its graphs `graph_entries`), expand
  it into `RunSpec` runs (`runs`; their keys `keys`); `tracing`: its PyTorch graphs, when the sweep starts;
- `worker`: one run in its own process (``python -m remat_bench.app.sweep.worker``);
- `executors`: `supervise` one worker process; a thread pool or Dask runs many;
- `journal`: every finished row on disk at once, for ``--resume``;
- `results`: the table's columns, Parquet/CSV, success rates and shifted geometric means;
- `runner`: `run_sweep` ties them together; `progress`: the progress bar and summary.

The names below are imported on first use: every run starts a worker process
through this package, and it should not pay for pandas and the runner.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "RunSpec": "runs", "SweepConfig": "runs", "load_config": "config",
    "COLUMNS": "results", "build_table": "results", "load_table": "results", "summarize": "results",
    "SweepOutcome": "runner", "plan": "runner", "run_sweep": "runner",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'remat_bench.app.sweep' has no attribute {name!r}")
    return getattr(importlib.import_module(f"remat_bench.app.sweep.{_EXPORTS[name]}"), name)
