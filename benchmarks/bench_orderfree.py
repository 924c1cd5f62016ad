"""Order-free scheduling and the any-order bound on the published graphs (issue: order-free and bounds).

For every graph of the Moccasin paper's Table 2 at 0.9 and 0.8 (then 0.7, 0.6,
0.5): the best schedule found by `moccasin --param order=free` (which tries
the order alone first, then the staged model as a hint for the free model),
the any-order bound (node cuts and prefix cuts, 30 s), whether it proves that
no order fits without recomputation, the gap between them, and the times to
each. A gap of zero proves the schedule optimal among all schedules.
"""

from __future__ import annotations

import os
import time

from benchmarks.common import Rows, paper, show
from remat_bench.app.pipeline import run
from remat_bench.core.budget import memory_floor, parse_budget
from remat_bench.core.graph_io import load_graph
from remat_bench.toolkit.bound_cache import BoundCache

GRAPHS = ["random_layered_n100", "random_layered_n250", "random_layered_n500", "random_layered_n1000",
          "checkmate_fcn8_vgg_train", "checkmate_resnet50_train", "checkmate_vgg16_train"]
LIMIT = float(os.environ.get("BENCH_TIME_LIMIT", 120))


def table(budgets: list[str], title: str) -> None:
    rows = Rows()
    bounds = BoundCache()  # in memory: the bound is computed here, timed, and the run reuses it
    for name in GRAPHS:
        g = load_graph(paper(name))
        for budget in budgets:
            amount = parse_budget(budget, g).amount
            if amount < memory_floor(g).amount:
                rows.append([name, budget, "infeasible (below the memory floor)", "-", "-", "-", "-", "-", "-", "-"])
                continue
            t0 = time.perf_counter()
            bound, _ = bounds.get(g, amount, 30.0)
            t_bound = time.perf_counter() - t0
            bound_pct = "-" if bound.value is None else f"{100 * (bound.value / g.total_duration - 1):.5f}"
            r = run(g, "moccasin", budget, time_limit=LIMIT, params={"order": "free"}, bounds=bounds)
            over = "-" if r.overhead_pct is None else f"{r.overhead_pct:.5f}"
            gap = "-" if r.gap_pct is None else f"{r.gap_pct:.5f}"
            how = "order only" if r.message.startswith("an order fits") else (
                "staged, best order" if r.stats.get("returned") == "staged" else "free model")
            needed = "yes (proven)" if bound.no_order_fits else (
                "no" if r.overhead_pct == 0 else "unknown")
            if not r.status.found_schedule:
                how = r.message[:60]
            rows.append([name, budget, r.status.value + (" (proven)" if r.proven_optimal else ""), over, bound_pct,
                         gap, needed, f"{r.solve_time_s:.1f}", f"{t_bound:.2f}", how])
    show(title, ["graph", "budget", "status", "best overhead %", "bound %", "gap %", "remat needed",
                 "time to best (s)", "bound time (s)", "found by"], rows)


def main() -> None:
    table(["0.9", "0.8"], f"Order-free best schedule vs any-order bound, Table 2 budgets (limit {LIMIT:g} s)")
    table(["0.7", "0.6", "0.5"], f"Order-free best schedule vs any-order bound, tighter budgets (limit {LIMIT:g} s)")


if __name__ == "__main__":
    main()
