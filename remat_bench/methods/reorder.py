"""The best topological order, with no rematerialization at all.

Every node is computed exactly once, so the duration is the least any
schedule can have; only the order, and with it the peak, is chosen. This
answers the first question a user should ask: is rematerialization needed at
this budget at all? (On the published random layered graphs it often is not:
docs/benchmarks.md, "Order-free scheduling".)

1. A memory-aware list scheduler: among the nodes whose inputs are computed,
   take the one that raises resident memory least (its output and workspace,
   minus the inputs it is the last reader of), breaking ties by the step's
   memory; a few seeded random tie-breaks are tried too.
2. A local search over topological orders (late-acceptance hill climbing,
   Burke and Bykov 2017): move one node to another place between its last
   input and its first consumer, scoring an order by the memory it holds above
   the target (the budget, or just below the best peak so far). It is written
   here because no maintained library searches permutations under
   precedence; each move is scored by a vectorised O(n + edges) profile.
   It finds an order that fits long before the CP-SAT model alone does
   (docs/benchmarks.md, "Figures that used to live in the code").
3. A CP-SAT model of the order alone: one compute event x_v per node, all
   distinct (no-overlap of unit intervals), x_u < x_v for each edge, v held
   on [x_v, max over consumers of x_c + 1) (outputs to the end), cumulative
   memory (workspace as a unit interval at x_v), minimising
   max(peak, budget), hinted with the best order found so far.

Before CP-SAT, the prefix probes of `remat_bench.toolkit.bound` (led by the best
order's memory at each step) look for a step k at which every order holds more
than the budget; finding one proves that no order fits. CP-SAT's own bound
stays far below that on the published random layered graphs.

Statuses: ``optimal`` when an order fits the budget (its duration is the least
possible) or, for ``--budget min``, when CP-SAT proves the lowest peak;
``infeasible`` when the prefix probes or CP-SAT prove that no order fits.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from remat_bench.core.budget import memory_text
from remat_bench.core.cleanup import place_frees
from remat_bench.core.graph import Graph, Number
from remat_bench.methods.base import (
    Deadline,
    Membership,
    Method,
    MethodResult,
    Param,
    Role,
    SolutionStatus,
    Termination,
    search_ended,
)
from remat_bench.toolkit import cp_sat
from remat_bench.toolkit.bound import BoundSource
from remat_bench.toolkit.order_search import OrderAnswer, best_order


class Reorder(Method):
    name = "reorder"
    search_space = "every topological order without recomputation"
    description = "the best topological order with no recomputation (list scheduling, local search, then CP-SAT)"
    params = (
        Param("threads", int, 0, "CP-SAT workers (0: all cores)", minimum=0, maximum=1024,
              aliases=("num_workers",)),
        Param("seed", int, 0, "seed of the randomised list schedules and of CP-SAT", minimum=0, maximum=2**31 - 1),
        Param("tries", int, 8, "randomised list schedules tried besides the plain one", minimum=0, maximum=10_000),
        Param("search_share", float, 0.3, "share of the time limit given to the local search before CP-SAT",
              minimum=0, maximum=1),
    )
    requires = ("ortools",)
    # Inside auto, a tenth of the members' time at most: its answer only matters when an order fits.
    member = Membership(Role.FAST, rank=9, share=0.1)

    @classmethod
    def input_order(cls, params: dict[str, Any]) -> str | None:
        return "free"

    @classmethod
    def member_skip(cls, graph: Graph, budget: Number | None, bounds: BoundSource) -> str | None:
        known = None if budget is None else bounds.peek(graph, budget)
        if known is not None and known.no_order_fits:
            return "the any-order bound proves that no order fits without recomputation"
        return None

    def solve(self, graph: Graph, budget: Number | None, time_limit: float | None,
              **params: Any) -> MethodResult:
        deadline = Deadline(time_limit)
        answer = best_order(graph, budget, deadline, params["threads"], params["seed"], params["tries"],
                            search_share=params["search_share"], bounds=self.context.bounds)
        nodes = np.asarray(answer.order, dtype=np.int64)
        schedule = place_frees(graph, nodes, np.zeros(len(nodes), dtype=np.int64))
        total = graph.total_duration
        stats = {**answer.stats, "peak": answer.peak}
        termination = _termination(answer, deadline)
        if budget is not None and answer.peak > budget:
            status = SolutionStatus.INFEASIBLE if answer.infeasible else SolutionStatus.NO_SOLUTION
            if answer.infeasible and "proven_by" in answer.stats:
                why = f"no order fits the budget without recomputation ({answer.stats['proven_by']})"
            elif answer.infeasible:
                why = "CP-SAT proved that no order fits the budget without recomputation"
            else:
                why = (f"the best order found peaks at {memory_text(answer.peak, graph)}, above the budget "
                       f"{memory_text(budget, graph)}")
            return MethodResult(status, schedule, objective=total, solve_time_s=deadline.elapsed(),
                                stats=stats, message=why, termination=termination)
        status = SolutionStatus.OPTIMAL if answer.proven else SolutionStatus.FEASIBLE
        return MethodResult(status, schedule, objective=total, lower_bound=total if budget is not None else None,
                            solve_time_s=deadline.elapsed(), stats=stats, termination=termination)


def _termination(answer: OrderAnswer, deadline: Deadline) -> Termination:
    """Why the order search stopped: a proof (an order that fits, or none can), else CP-SAT's own
    status when it ran (`remat_bench.toolkit.cp_sat`), else the deadline that ended the steps before it."""
    if answer.proven or answer.infeasible:
        return Termination.PROVEN
    if "cp_status" in answer.stats:
        return cp_sat.termination(answer.stats["cp_status"])
    return search_ended(deadline)
