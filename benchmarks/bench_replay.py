"""Replay: measured against simulated peaks for the zoo, at three budgets (docs/design.md section 9).

Each zoo model is imported at a batch where activations outweigh parameters
(else no budget much below the baseline is feasible), solved by `greedy` at
three budgets (1.0 is the baseline, method `none`), and every schedule is
replayed on CPU with the model's real operators. The table gives the
simulated peak, the peak the CPU allocator reached (profiler memory events,
on the same footing: parameters, buffers and batch included), their gap, the
check against autograd, and the modelled overhead beside the one measured
against the baseline (median of 5 paired runs, with their min and max).

A second table replays ResNet-18 imported with the default costs (calibrated
durations, measured workspaces): its operators' scratch memory is in the
graph's workspaces, which closes the gap of the FLOPs graph.

Timings use one intra-op thread: on a shared 2-core machine, two OpenMP
threads are slower and far noisier than one.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from benchmarks.common import Rows, show
from remat_bench.app.pipeline import run
from remat_bench.core.baseline import baseline
from remat_bench.core.graph import Graph
from remat_bench.torch.importer import import_model
from remat_bench.torch.replay import replay

CASES: list[tuple[str, dict[str, Any]]] = [
    ("mlp", {"batch": 4096}),
    ("vgg11", {"batch": 64}),
    ("resnet18", {"batch": 16, "input_shape": (3, 128, 128)}),
    ("resnet50", {"batch": 8, "input_shape": (3, 128, 128)}),
    ("unet", {"batch": 8}),
    ("gpt", {"batch": 8, "input_shape": (256,)}),
]
BUDGETS = ("1", "0.85", "0.7")
METHOD = "greedy"
MIB = 2**20


def label(model: str, kwargs: dict[str, Any]) -> str:
    shape = kwargs.get("input_shape")
    return f"{model} b{kwargs['batch']}" + (f" {'x'.join(map(str, shape))}" if shape else "")


def rows_for(name: str, g: Graph) -> list[list[str]]:
    rows = Rows()
    base = baseline(g)
    for budget in BUDGETS:
        method = "none" if budget == "1" else METHOD
        result = run(g, method, budget, 60, {})
        if result.schedule is None or not result.status.found_schedule:
            rows.append([name, str(g.n), budget, method, "-", "-", "-", "-", "-", result.status.value, "-", "-"])
            continue
        start = time.perf_counter()
        r = replay(g, result.schedule, "cpu")
        elapsed = time.perf_counter() - start
        rows.append([
            name, str(g.n), budget, method,
            f"{r.simulated_peak / MIB:.2f}", f"{r.measured_peak / MIB:.2f}", f"{r.peak_error_pct:+.2f}%",
            str(r.recomputations), f"{result.overhead_pct:+.1f}%",
            f"{'yes' if r.outputs_match else 'NO'} ({r.max_abs_diff:.1g})",
            _measured(r), f"{r.wall_time_s:.2f} ({elapsed:.0f})",
        ])
        print(f"  {name} at {budget}: simulated {r.simulated_peak / MIB:.2f} MiB, measured "
              f"{r.measured_peak / MIB:.2f} MiB ({base.peak / MIB:.2f} MiB baseline)", flush=True)
    return rows


def _measured(r: Any) -> str:
    """The overhead measured against the baseline: median of the paired runs (min to max)."""
    m = r.measured_overhead
    return "-" if m is None else f"{m.median_pct:+.1f}% ({m.min_pct:+.1f} to {m.max_pct:+.1f})"


COLUMNS = ["model", "nodes", "budget", "method", "simulated peak (MiB)", "measured peak (MiB)",
           "measured - simulated", "recomputations", "modelled overhead", "outputs match (max abs diff)",
           "measured overhead (min to max)", "step s (replay s)"]


def main() -> None:
    torch.set_num_threads(1)
    rows: list[list[str]] = []
    for model, kwargs in CASES:
        rows += rows_for(label(model, kwargs), import_model(model, durations="flops", workspace="none", **kwargs))
    show("Replay on CPU: measured against simulated peaks (FLOPs graphs, workspace 0)", COLUMNS, rows)

    model, kwargs = CASES[2]
    g = import_model(model, **kwargs)  # the default: calibrated durations, measured workspaces
    show("Replay on CPU: ResNet-18 imported with the default costs (calibrated, measured workspaces)", COLUMNS,
         rows_for(label(model, kwargs) + " calibrated", g))


if __name__ == "__main__":
    main()
