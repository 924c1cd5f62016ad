"""The baseline: no rematerialization (docs/design.md section 3).

Every node is computed once, in file order, and each value is freed right
after its last consumer computes. Its peak and duration are the reference for
budgets and for overhead.
"""

from __future__ import annotations

import time
from typing import Any

from remat_bench.core.baseline import baseline, baseline_schedule
from remat_bench.core.budget import memory_text
from remat_bench.core.graph import Graph, Number
from remat_bench.methods.base import Method, MethodResult, SolutionStatus, Termination


class NoRemat(Method):
    name = "none"
    search_space = "the baseline schedule (file order, no recomputation)"
    description = "baseline: every node once in file order, freed after its last use"

    def solve(self, graph: Graph, budget: Number | None, time_limit: float | None,
              **params: Any) -> MethodResult:
        start = time.perf_counter()
        schedule = baseline_schedule(graph)
        peak = baseline(graph).peak
        elapsed = time.perf_counter() - start
        if budget is not None and peak > budget:
            return MethodResult(
                SolutionStatus.INFEASIBLE, schedule, objective=graph.total_duration, solve_time_s=elapsed,
                message=(f"the baseline peaks at {memory_text(peak, graph)}, above the budget "
                         f"{memory_text(budget, graph)}"),
                termination=Termination.PROVEN,  # its space is this one schedule
            )
        # Its space is one schedule, and computing each node once is the least duration
        # any schedule can have: whenever it fits, it is optimal.
        return MethodResult(
            SolutionStatus.OPTIMAL, schedule, objective=graph.total_duration,
            lower_bound=graph.total_duration, solve_time_s=elapsed, termination=Termination.PROVEN,
        )
