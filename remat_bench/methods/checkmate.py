"""Checkmate: the optimal rematerialization MILP of Jain et al., MLSys 2020.

Stages t = 0..n-1 follow the input order; stage t ends with the first
computation of node t. Binary variables (Jain et al. section 4):

- R[t,i], i <= t: node i is computed in stage t (R[t,t] = 1, R[t,i] = 0 for i > t);
- S[t,i], i < t: i is resident entering stage t (S[0,.] = 0);
- FREE[t,(i,k)], for each edge (i,k) with k <= t: i is freed right after k is
  computed in stage t;
- U[t,k] (continuous): memory right after k is computed in stage t.

Constraints (numbers as in the paper's section 4 and appendix):

- (1b) S[t+1,i] <= S[t,i] + R[t,i];  (1c) R[t,v] <= R[t,u] + S[t,u] for each edge (u,v);
- FREE[t,(i,k)] = R[t,k] (1 - S[t+1,i]) prod_{j in users(i), k < j <= t} (1 - R[t,j]),
  linearised with the hazard count h = (1 - R[t,k]) + S[t+1,i] + sum_j R[t,j]:
  1 - FREE <= h and h_max (1 - FREE) >= h;
- U[t,0] = fixed + sum_i mem_i S[t,i] + mem_0 R[t,0];
  U[t,k] = U[t,k-1] + mem_k R[t,k] - sum_{(i,k-1)} mem_i FREE[t,(i,k-1)];
  U[t,k] + ws_k R[t,k] <= budget;
- minimise sum_{t,i} R[t,i] duration_i.

What this implementation adds: R[t,i] + S[t,i] <= 1 (recomputing a resident
value never helps; it removes symmetric solutions and a double count of its
memory); R[t,i] + S[t,i] <= S[t+1,i] + sum_{(i,j), j <= t} R[t,j] (a value is
held or recomputed only to be read or kept); outputs other than the last node stay resident to the end (S at a
virtual stage n is 1 for outputs); workspace and fixed memory in U, so that
the model's memory is the simulator's; memory divided by its gcd and the
budget rounded down in that unit, durations divided by their mean, so the
solver sees small numbers with the same feasible set. The model is built as
numpy COO blocks and handed to HiGHS whole (`remat_bench.toolkit.milp`); a warm start
comes from the best `chen`/`greedy` schedule that the model accepts.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from typing import Any

import numpy as np

from remat_bench.core.cleanup import clean_up_simulated, place_frees
from remat_bench.core.graph import Graph, Number
from remat_bench.core.schedule import COMPUTE, Schedule
from remat_bench.core.simulate import overhead_pct, simulate
from remat_bench.methods import milp_setup
from remat_bench.methods.base import (
    Deadline,
    Membership,
    Method,
    MethodResult,
    Param,
    Role,
    SolutionStatus,
    SolveContext,
    Termination,
    cut_short,
)
from remat_bench.methods.candidates import (
    KEEP_BEST,
    Candidate,
    Source,
    best_of,
    candidate_schedules,
    mark_used,
)
from remat_bench.methods.checkmate_model import CheckmateModel, check_fits, too_short
from remat_bench.toolkit.least_peak import least_peak_by_bisection
from remat_bench.toolkit.milp import (
    incumbent_reporter,
    model_stats,
    parse_backend,
)
from remat_bench.toolkit.orders import backward_need, deferred_gradients


class Checkmate(Method):
    name = "checkmate"
    search_space = "input-order stages (Checkmate's frontier-advancing schedules)"
    description = "Jain et al. 2020 MILP over input-order stages (HiGHS, or any PuLP solver)"
    params = (
        *milp_setup.solver_params(gap_note="overheads differ by less than that"),
        Param("warm_start", bool, True, "start from the best greedy/chen/kusumoto/shaved schedule the model "
              "accepts (and the caller's hints)"),
        Param("heuristic_effort", float, 0.3, "HiGHS mip_heuristic_effort (HiGHS default 0.05; more effort left "
              "the warm start sooner: docs/benchmarks.md, 'Figures that used to live in the code')",
              minimum=0, maximum=1),
        KEEP_BEST,
        Param("order", str, "input", "the stages' order: input (the paper's), deferred (weight gradients larger than "
              "their inputs moved last: toolkit/orders.py, deferred_gradients), or auto (deferred where the input "
              "order's backward pass cannot fit the budget and the deferred one needs less)",
              choices=("input", "deferred", "auto")),
    )
    requires = ("highspy", "pulp")
    # In auto, the stages may follow the deferred order: on a ConvNeXt at 0.4 the input order's backward pass
    # alone holds more than the budget (docs/benchmarks.md, "Deferred weight gradients").
    member = Membership(Role.EXACT, rank=2, params={"order": "auto"})

    @classmethod
    def space(cls, params: dict[str, Any]) -> str:
        order = params.get("order", "input")
        if order == "deferred":
            return "stages in the input order with the larger weight gradients moved last"
        if order == "auto":
            return ("input-order stages, or stages with the larger weight gradients moved last where the input "
                    "order's backward pass cannot fit (stats: order)")
        return cls.search_space

    @classmethod
    def input_order(cls, params: dict[str, Any]) -> str | None:
        return "kept"

    @classmethod
    def member_covered(cls, graph: Graph, exact: Collection[str]) -> str | None:
        # Without backward nodes moccasin runs its order-free path, whose space holds the input-order stages
        # here, and gets every core (docs/benchmarks.md, "auto on the published graphs": checkmate alone
        # never beat moccasin order=free alone there).
        if not len(graph.backward_indices) and "moccasin" in exact:
            return "no backward nodes: moccasin's order-free search holds checkmate's space and takes every core"
        return None

    def solve(self, graph: Graph, budget: Number | None, time_limit: float | None,
              **params: Any) -> MethodResult:
        deadline = Deadline(time_limit)
        parse_backend(params["backend"])
        if params["order"] != "input":
            order, stats = stages_order(graph, budget, params["order"])
            if order is not None:
                result = self.solve_in_order(graph, order, budget, deadline.remaining(), **{**params, "order": "input"})
            else:
                result = self.solve(graph, budget, deadline.remaining(), **{**params, "order": "input"})
            result.stats.update(stats)
            return result
        if budget is None:
            # The least peak of the staged space, by bisection on the budget, then the least duration there.
            # Each probe answers for the staged space alone: a faster candidate from outside it
            # (keep_best) would not say whether the space reaches that budget.
            return least_peak_by_bisection(
                graph, lambda b, t: self.solve(graph, b, t, **{**params, "keep_best": False}), deadline,
                peak_goal=self.context.peak_goal)
        stats = check_fits(graph.n, graph.num_edges, "Checkmate", self.context.model_memory)
        if (short := too_short(stats, deadline)) is not None:
            return short
        cm = CheckmateModel.build(graph, budget)
        stats.update(model_stats(cm))
        start, start_from = None, None
        pool: list[Candidate] = []
        if params["warm_start"] and not deadline.expired():
            # Candidates count as the run's progress only where it may answer with them (keep_best).
            held = self.context if params["keep_best"] else replace(self.context, progress=None)
            start, start_from, pool = warm_start(cm, graph, budget, deadline, held, stats)
        stats["warm_start"] = start_from
        if not params["keep_best"]:
            pool = []
        remaining = deadline.remaining()
        if remaining is not None and remaining <= 0.05:
            # No time left to solve: the warm start is the answer, if there is one.
            from remat_bench.toolkit.milp import MilpSolution

            sol = MilpSolution(SolutionStatus.FEASIBLE if start is not None else SolutionStatus.NO_SOLUTION,
                               cut_short(), x=start,
                               objective=None if start is None else float(cm.model.cost @ start),
                               message="the time limit ran out before the MILP could start")
            return best_of(graph, budget, milp_result(cm, sol, stats, deadline), pool)
        options: dict[str, Any] | None = None
        if params["backend"] == "highs":
            options = {"mip_heuristic_effort": params["heuristic_effort"]}
            if (stop := self.context.stop_duration) is not None:
                # HiGHS stops at an incumbent this good: the any-order bound (plus the gap the caller
                # accepts), in the model's cost units (a relative 1e-9 above it, for their rounding).
                options["objective_target"] = stop / cm.dur_scale * (1 + 1e-9)
            if self.context.gap:
                options["mip_abs_gap"] = self.context.gap / cm.dur_scale
        sol = milp_setup.solve(cm.model, params, remaining, start, keep_incumbents=True, options=options,
                               on_incumbent=incumbent_reporter(self.context.report, cm.decode, cm.dur_scale))
        return best_of(graph, budget, milp_result(cm, sol, stats, deadline, self.context.duration_goal,
                                                  self.context.gap), pool)


def stages_order(graph: Graph, budget: Number | None, order: str) -> tuple[list[int] | None, dict[str, Any]]:
    """The order the stages follow for ``order`` ``deferred`` or ``auto`` (None: the input order), and stats.

    ``auto`` takes the deferred order (`remat_bench.toolkit.orders.deferred_gradients`) where the input
    order's backward pass alone needs more than the budget (`remat_bench.toolkit.orders.backward_need`:
    no staged schedule fits then) and the deferred one needs less; never at ``min``.

    Parameters
    ----------
    graph : Graph
    budget : int or float or None
    order : str
        ``deferred`` or ``auto``.

    Returns
    -------
    tuple of (list of int or None, dict)
        The order, and ``order`` (``input`` or ``deferred``) with the needs compared, for the stats.
    """
    deferred = deferred_gradients(graph)
    if deferred is None:
        return None, {"order": "input"}
    if order == "deferred":
        return deferred, {"order": "deferred"}
    if budget is None:
        return None, {"order": "input"}
    need = backward_need(graph)
    if need <= budget:
        return None, {"order": "input", "backward_need": need}
    need_deferred = backward_need(graph.in_order(deferred))
    stats = {"backward_need": need, "backward_need_deferred": need_deferred}
    if need_deferred < need:
        return deferred, {"order": "deferred", **stats}
    return None, {"order": "input", **stats}


def warm_start(cm: CheckmateModel, graph: Graph, budget: Number, deadline: Deadline, context: SolveContext,
               stats: dict[str, Any] | None = None) -> tuple[np.ndarray | None, str | None, list[Candidate]]:
    """The cheapest schedule the model accepts as a point (greedy, chen, kusumoto, peak shaving, the
    hints in ``context``, else LP rounding), its source, and every candidate within the budget.

    The MILP's bottleneck is its first incumbent (docs/benchmarks.md, "Checkmate": HiGHS
    alone, without a warm start, stays far above the optimum). The fast heuristics and the shaved
    input order come first (`remat_bench.methods.candidates`); LP rounding
    (``checkmate-lp``), given at most a quarter of the time left and a minute,
    only when none of them is accepted. A candidate is moved into the staged
    space first (`remat_bench.toolkit.improve.staged_repair`) where it has a
    counterpart there. The candidates are returned so that the answer is never
    slower than one of them (`remat_bench.methods.candidates.best_of`).

    Parameters
    ----------
    cm : CheckmateModel
        The model the start must be a point of.
    graph : Graph
    budget : Number
        In the graph's memory units.
    deadline : Deadline
        The run's; candidates take shares of the time left.
    context : SolveContext
        The run's (its hints, runner and progress).
    stats : dict or None
        The run's stats: the candidates and ``warm_start`` are recorded there.

    Returns
    -------
    x : np.ndarray or None
        The cheapest accepted candidate as a point of ``cm.model``; None when none is accepted.
    source : str or None
        Its source.
    pool : list of Candidate
        Every candidate within the budget, LP roundings included.
    """
    from remat_bench.toolkit.improve import drop_recomputations, staged_repair

    record = stats if stats is not None else {}

    def encoded(schedule: Schedule) -> tuple[float, np.ndarray] | None:
        # Compute order only: the model places its own frees (frees at last use are its rule
        # too). Unused computations stay: dropping one can move a first computation out of order.
        # Recomputations the budget does not need are undone first (`remat_bench.toolkit.improve`).
        computes = schedule.nodes[schedule.kinds == COMPUTE]
        repaired = staged_repair(graph, computes)
        nodes = drop_recomputations(graph, computes if repaired is None else repaired, budget, deadline)
        x = cm.encode(place_frees(graph, nodes, np.zeros(len(nodes), dtype=np.int64), drop_unused=False))
        if x is None or cm.model.violation(x) > 1e-6:
            return None
        return float(cm.model.cost @ x), x

    def cheapest(candidates: list[Candidate]) -> tuple[np.ndarray | None, str | None]:
        points = [(point, c.source) for c in candidates if not deadline.expired()
                  if (point := encoded(c.schedule)) is not None]
        if not points:
            return None, None
        (_, x), source = min(points, key=lambda p: p[0][0])
        return x, source

    fast = [Source("greedy"), Source("chen"), Source("shaved"), Source("kusumoto", share=0.15),
            Source("knapsack", {"solver": "search"}, share=0.1)]
    pool = candidate_schedules(graph, budget, deadline, fast, context=context, stats=record)
    x, source = cheapest(pool)
    if x is None and not deadline.expired():
        remaining = deadline.remaining()
        share = 0.25 if remaining is None or remaining < 240 else 60.0 / remaining
        rounded = candidate_schedules(graph, budget, deadline, [Source("checkmate-lp", share=share)],
                                      context=replace(context, hints=[]), stats=record)
        pool += rounded
        x, source = cheapest(rounded)
    mark_used(record, source)
    return x, source, pool


def milp_result(cm: CheckmateModel, sol: Any, stats: dict[str, Any], deadline: Deadline,
                goal: Number | None = None, gap: Number = 0) -> MethodResult:
    """Decode a MILP answer into a MethodResult (shared by checkmate's backends); optimal also when its
    objective meets ``goal``, a duration no schedule goes below (`SolveContext.duration_goal`). With a
    ``gap`` (duration units, `SolveContext.gap`), HiGHS's optimal may be an incumbent within that gap of
    its bound: optimal only where the bound closes.

    Parameters
    ----------
    cm : CheckmateModel
        The model ``sol`` solved.
    sol : MilpSolution
        The solver's answer (`remat_bench.toolkit.milp.solve_milp`).
    stats : dict
        The run's stats: the solver, its status, time, nodes, gap and incumbents are added.
    deadline : Deadline
        The run's, whose elapsed time is the result's solve time.
    goal : Number or None
        A duration no schedule goes below; None when there is none.
    gap : Number
        The gap the caller accepts, in duration units; 0 for none.

    Returns
    -------
    MethodResult
        Infeasible when the solver proved it, no_solution without a point, else the decoded schedule
        with the dual bound (in duration units) as its lower bound.
    """
    graph = cm.graph
    stats.update({
        "solver": sol.solver, "solver_status": sol.message, "solve_time_s": round(sol.solve_time_s, 3),
        "nodes": sol.nodes, "mip_gap": sol.gap,
    })
    base_duration = graph.total_duration
    incumbents = []
    for inc in sol.incumbents:
        row: dict[str, Any] = {"time_s": round(inc.time_s, 3),
                               "objective_overhead_pct": overhead_pct(inc.objective * cm.dur_scale, base_duration)}
        if inc.x is not None:
            decoded = cm.decode(inc.x)
            sim = simulate(graph, decoded)
            if sim.valid:
                cleaned_sim = clean_up_simulated(graph, decoded, sim)[2]
                row["cleaned_overhead_pct"] = cleaned_sim.overhead_pct(base_duration)
        incumbents.append(row)
    stats["incumbents"] = incumbents
    lower = None if sol.dual_bound is None else sol.dual_bound * cm.dur_scale
    if (answer := milp_setup.unsolved(sol, lower, stats, deadline, "staged schedule")) is not None:
        return answer
    assert sol.x is not None
    schedule = cm.decode(sol.x)
    objective = cm.objective(sol.x)
    # Optimal when proven in its space, or when it meets the goal (HiGHS's objective target: a duration
    # no schedule goes below). A target HiGHS met that the exact objective misses by its rounding is not
    # a proof: the search ended on the target's criterion.
    closed = sol.solution_status is SolutionStatus.OPTIMAL and not (
        gap and lower is not None and objective > lower * (1 + 1e-9) + 1e-9)
    optimal = closed or (goal is not None and objective <= goal)
    if sol.solution_status is SolutionStatus.OPTIMAL and not optimal:
        termination = Termination.CONVERGED  # stopped within the gap the caller accepts (``solve --gap``)
    elif optimal:
        termination = Termination.PROVEN
    else:
        termination = sol.termination if sol.termination is not Termination.PROVEN else Termination.CONVERGED
    if optimal and lower is not None:
        lower = min(lower, objective)
    return MethodResult(SolutionStatus.OPTIMAL if optimal else SolutionStatus.FEASIBLE, schedule, objective=objective,
                        lower_bound=lower, solve_time_s=deadline.elapsed(), stats=stats, termination=termination)
