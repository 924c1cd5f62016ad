"""Checkmate MILP (HiGHS) and its LP rounding on the published graphs (issue: Checkmate).

For each instance: the overhead reached (simulated, after clean-up), the time
its incumbent reached the published overhead (rounded to 0.1 point, as
published), the final gap, the model size and the build time.
"""

from __future__ import annotations

import os
import time

from benchmarks.common import Rows, paper, show
from remat_bench.app.pipeline import run
from remat_bench.core.budget import parse_budget
from remat_bench.core.graph_io import load_graph
from remat_bench.methods.checkmate_model import CheckmateModel, check_fits

# Moccasin paper, Table 2 (Checkmate MILP column; Gurobi on 16 cores).
PUBLISHED = {
    ("checkmate_fcn8_vgg_train", "0.9"): 0.0,
    ("checkmate_fcn8_vgg_train", "0.8"): 0.1,
    ("random_layered_n100", "0.9"): 0.8,
    ("random_layered_n100", "0.8"): 2.3,
    ("checkmate_resnet50_train", "0.9"): 0.1,
}
LIMIT = float(os.environ.get("BENCH_TIME_LIMIT", 300))


def time_to_reach(result, target: float) -> str:
    for inc in result.stats.get("incumbents", []):
        value = inc.get("cleaned_overhead_pct", inc["objective_overhead_pct"])
        if round(value, 1) <= target + 1e-9:
            return f"{inc['time_s']:.1f}"
    return "-"


def main() -> None:
    rows = Rows()
    for (name, budget), published in PUBLISHED.items():
        g = load_graph(paper(name))
        b = parse_budget(budget, g).amount
        t0 = time.perf_counter()
        check_fits(g.n, g.num_edges, "Checkmate")
        cm = CheckmateModel.build(g, b)
        build = time.perf_counter() - t0
        size = f"{cm.model.num_cols:,} x {cm.model.num_rows:,} ({cm.model.A.nnz:,} nz)"
        for method in ("checkmate", "checkmate-lp"):
            r = run(g, method, budget, time_limit=LIMIT)
            over = "-" if r.overhead_pct is None else f"{r.overhead_pct:.4f}"
            gap = "-"
            if r.lower_bound and r.objective:
                gap = f"{100 * (r.objective - r.lower_bound) / r.objective:.4f}"
            reach = time_to_reach(r, published) if method == "checkmate" else (
                f"{r.solve_time_s:.1f}"
                if r.overhead_pct is not None and round(r.overhead_pct, 1) <= published else "-")
            rows.append([name, budget, method, r.status.value, over, f"{published:.1f}", reach,
                         f"{r.solve_time_s:.1f}", gap, size, f"{build:.2f}", r.stats.get("warm_start", "")])
    show(f"Checkmate on the published graphs (time limit {LIMIT:g} s)",
         ["graph", "budget", "method", "status", "overhead %", "published %", "time to published (s)",
          "time (s)", "gap %", "model (cols x rows)", "build (s)", "warm start"], rows)


if __name__ == "__main__":
    main()
