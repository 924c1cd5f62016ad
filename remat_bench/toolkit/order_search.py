"""The best topological order without recomputation: list schedules, a local search, prefix probes,
then CP-SAT (the search `reorder` runs, and `moccasin -p order=free` starts from).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from remat_bench.core.control import Deadline, run_interruptibly
from remat_bench.core.graph import Graph, Number
from remat_bench.toolkit.bound import BoundSource
from remat_bench.toolkit.orders import OrderProfile, list_schedule, local_search, order_peak


@dataclass
class OrderAnswer:
    order: list[int]
    peak: Number
    proven: bool  # the peak is the lowest of every order (or fits the budget)
    infeasible: bool  # proven: no order fits the budget
    stats: dict[str, Any]


def best_order(graph: Graph, budget: Number | None, deadline: Deadline, workers: int = 0,
               seed: int = 0, tries: int = 8, hints: list[list[int]] | None = None,
               search_share: float = 0.3, probe_share: float = 0.3, bounds: BoundSource | None = None) -> OrderAnswer:
    """The list schedules, the local search (``search_share`` of the time), the prefix probes
    (``probe_share``), then the CP-SAT order model; each step stops the search when its order fits.

    ``bounds``: the run's bound cache; a bound already computed there for this graph and
    budget that proves no order fits answers at once.

    Parameters
    ----------
    graph : Graph
    budget : Number or None
        In the graph's memory units: the search stops at an order whose peak fits it; None: the
        lowest peak is sought.
    deadline : Deadline
        When the search ends; shares are of the time left (of 60 s when it has no limit).
    workers : int
        CP-SAT's workers; 0 for one per CPU.
    seed : int
        Seed of the randomised list schedules, the local search and CP-SAT.
    tries : int
        How many randomised list schedules are tried.
    hints : list of list of int or None
        Orders of the caller's (each a topological order of ``graph``) tried with the list schedules.
    search_share : float
        Fraction of the time left the local search may take.
    probe_share : float
        Fraction of the time left the prefix probes may take.
    bounds : BoundSource or None
        The run's bound cache; None: the probes always run.

    Returns
    -------
    OrderAnswer
        The best order found and its peak; ``proven`` when it fits the budget (or, without one, is
        proven lowest), ``infeasible`` when it is proven that no order fits.
    """
    stats: dict[str, Any] = {}
    best, best_peak = _list_schedules(graph, seed, tries, hints, stats)
    if budget is not None and best_peak <= budget:
        return OrderAnswer(best, best_peak, True, False, stats)
    best, best_peak = _search_locally(graph, budget, deadline, best, best_peak, search_share, seed, stats)
    if budget is not None and best_peak <= budget:
        return OrderAnswer(best, best_peak, True, False, stats)
    if deadline.expired():
        return OrderAnswer(best, best_peak, False, False, stats)
    if budget is not None and _no_order_fits(graph, budget, best, deadline, probe_share, stats, bounds):
        return OrderAnswer(best, best_peak, False, True, stats)
    if deadline.expired():  # the probes took what was left: no time for CP-SAT
        return OrderAnswer(best, best_peak, False, False, stats)
    return _solve_order_model(graph, budget, deadline, best, best_peak, workers, seed, stats)


def _list_schedules(graph: Graph, seed: int, tries: int, hints: list[list[int]] | None,
                    stats: dict[str, Any]) -> tuple[list[int], Number]:
    """The order of lowest peak among the input order, the list schedule, ``tries`` randomised
    list schedules and the caller's ``hints``."""
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    candidates = [list(range(graph.n)), list_schedule(graph)]
    candidates += [list_schedule(graph, rng) for _ in range(tries)]
    candidates += hints or []
    scored = sorted(((order_peak(graph, c), i) for i, c in enumerate(candidates)))
    best_peak, best_i = scored[0]
    stats.update({"list_schedule_peak": order_peak(graph, candidates[1]),
                  "heuristic_peak": best_peak, "heuristic_time_s": round(time.perf_counter() - t0, 3)})
    return candidates[best_i], best_peak


def _search_locally(graph: Graph, budget: Number | None, deadline: Deadline, best: list[int], best_peak: Number,
                    share: float, seed: int, stats: dict[str, Any]) -> tuple[list[int], Number]:
    """The local search from ``best`` for ``share`` of the time left; the better of its order and ``best``."""
    t1 = time.perf_counter()
    remaining = deadline.remaining()
    searched = local_search(graph, best, budget, share * (60.0 if remaining is None else remaining), seed)
    searched_peak = order_peak(graph, searched)
    stats["local_search_peak"] = searched_peak
    stats["local_search_time_s"] = round(time.perf_counter() - t1, 3)
    if searched_peak < best_peak:
        return searched, searched_peak
    return best, best_peak


@dataclass
class _OrderModel:
    """The CP-SAT order model: ``x[v]`` is node v's position; memory is counted in units of ``scale``."""

    model: Any  # cp_model.CpModel
    x: list[Any]
    scale: int
    fixed_units: int
    budget_units: int | None


def _solve_order_model(graph: Graph, budget: Number | None, deadline: Deadline, best: list[int], best_peak: Number,
                       workers: int, seed: int, stats: dict[str, Any]) -> OrderAnswer:
    """CP-SAT over every topological order, hinted with ``best``, for the time left; its order when it
    is no worse than ``best``, proven when it fits the budget (or, without one, is optimal)."""
    from ortools.sat.python import cp_model

    om = _order_model(graph, budget, best)
    solver = cp_model.CpSolver()
    remaining = deadline.remaining()  # 0.0 once expired: never read it as "no limit"
    solver.parameters.max_time_in_seconds = max(0.05, 60.0 if remaining is None else remaining)
    solver.parameters.num_workers = workers or (os.cpu_count() or 1)
    solver.parameters.random_seed = seed
    solver.parameters.catch_sigint_signal = False
    status = run_interruptibly(lambda: solver.solve(om.model), solver.stop_search)
    stats["cp_status"] = solver.status_name(status)
    stats["cp_time_s"] = round(solver.wall_time, 3)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        infeasible = status == cp_model.INFEASIBLE
        return OrderAnswer(best, best_peak, False, infeasible, stats)
    order = sorted(range(graph.n), key=lambda v: solver.value(om.x[v]))
    peak_found = order_peak(graph, order)
    if peak_found > best_peak:
        order, peak_found = best, best_peak
    bound_units = solver.best_objective_bound
    stats["peak_lower_bound"] = bound_units * om.scale + om.fixed_units * om.scale if budget is None else None
    if budget is not None:
        fits = peak_found <= budget
        infeasible = not fits and om.budget_units is not None and bound_units > om.budget_units
        return OrderAnswer(order, peak_found, fits, infeasible, stats)
    return OrderAnswer(order, peak_found, status == cp_model.OPTIMAL, False, stats)


def _order_model(graph: Graph, budget: Number | None, best: list[int]) -> _OrderModel:
    """Positions, hold intervals (each value from its computation to its last reader) and their
    cumulative memory; minimise the peak, or, with a budget, only bring it within the budget."""
    from ortools.sat.python import cp_model

    n = graph.n
    scale = _memory_scale(graph)
    dem = np.ceil(np.asarray(graph.memory) / scale).astype(np.int64)
    wdem = np.ceil(np.asarray(graph.workspace) / scale).astype(np.int64)
    m = cp_model.CpModel()
    x = [m.new_int_var(0, n - 1, f"x{v}") for v in range(n)]
    end = [m.new_int_var(1, n, f"e{v}") for v in range(n)]
    size = [m.new_int_var(1, n, f"z{v}") for v in range(n)]
    units = [m.new_fixed_size_interval_var(x[v], 1, f"u{v}") for v in range(n)]
    m.add_no_overlap(units)
    for v in range(n):
        for u in graph.inputs[v]:
            m.add(x[u] + 1 <= x[v])
        # A value is held exactly until its last reader: ends are functions of the order,
        # not decisions (fewer branches than end >= x_c + 1 inequalities).
        if graph.is_output[v]:
            m.add(end[v] == n)
        elif graph.consumers[v]:
            m.add_max_equality(end[v], [x[c] + 1 for c in graph.consumers[v]])
        else:
            m.add(end[v] == x[v] + 1)
    holds = [m.new_interval_var(x[v], size[v], end[v], f"h{v}") for v in range(n)]
    ws_iv = [units[v] for v in range(n) if wdem[v]]
    peak = m.new_int_var(0, int(dem.sum() + wdem.max(initial=0)), "peak")
    m.add_cumulative(holds + ws_iv, [int(d) for d in dem] + [int(wdem[v]) for v in range(n) if wdem[v]], peak)
    fixed_units = int(np.ceil(graph.fixed_memory / scale))
    z = m.new_int_var(0, int(dem.sum() + wdem.max(initial=0)) + 1, "z")
    m.add(z >= peak)
    budget_units = None
    if budget is not None:
        budget_units = int(np.floor(budget / scale)) - fixed_units
        m.add(z >= max(budget_units, 0))
    m.minimize(z)
    _hint_order(m, graph, best, x, end, size)
    return _OrderModel(m, x, scale, fixed_units, budget_units)


def _memory_scale(graph: Graph) -> int:
    """The gcd of the memory sizes, workspaces and fixed memory when all are integers, else 1."""
    fixed = graph.fixed_memory
    mem = np.asarray(graph.memory)
    ws = np.asarray(graph.workspace)
    scale = 1
    if mem.dtype.kind in "iu" and ws.dtype.kind in "iu":
        values = [int(x) for x in np.unique(np.concatenate([mem, ws])) if x]
        scale = math.gcd(*values) if values else 1
        if isinstance(fixed, int):
            scale = math.gcd(scale, fixed) if fixed else scale
    return scale


def _hint_order(m: Any, graph: Graph, order: list[int], x: list[Any], end: list[Any], size: list[Any]) -> None:
    """A complete hint: ``order`` with its hold intervals."""
    n = graph.n
    pos = np.empty(n, dtype=np.int64)
    pos[np.asarray(order)] = np.arange(n)
    for v in range(n):
        last = max([pos[c] for c in graph.consumers[v]], default=pos[v]) + 1
        e = n if graph.is_output[v] else last
        m.add_hint(x[v], int(pos[v]))
        m.add_hint(end[v], int(e))
        m.add_hint(size[v], int(e - pos[v]))


def _no_order_fits(graph: Graph, budget: Number, best: list[int], deadline: Deadline, share: float,
                   stats: dict[str, Any], bounds: BoundSource | None = None) -> bool:
    """True when the prefix probes (`remat_bench.toolkit.bound`) prove that no order fits the budget.

    The bound already computed for this graph and budget (the pipeline computes
    it before the method) answers at once; otherwise probes get ``share`` of the
    time left, led by the best order's memory at each step.
    """
    from remat_bench.toolkit.bound import order_profile_upper, prefix_probes

    known = bounds.peek(graph, budget) if bounds is not None else None
    if known is not None and known.no_order_fits:
        stats["order_peak_at_least"] = known.order_peak_at_least
        stats["proven_by"] = "the any-order bound"
        return True
    remaining = deadline.remaining()
    seconds = share * (60.0 if remaining is None else remaining)
    upper = np.minimum(OrderProfile(graph)(np.asarray(best, dtype=np.int64))[0], order_profile_upper(graph))
    t0 = time.perf_counter()
    probes = prefix_probes(graph, budget, seconds, upper)
    stats["probe_time_s"] = round(time.perf_counter() - t0, 3)
    if not probes:
        return False
    top = max(probes, key=lambda p: p.at_least)
    stats["order_peak_at_least"] = top.at_least
    if top.at_least > budget:
        stats["proven_by"] = f"the prefix bound at step {top.k}: every order holds at least {top.at_least} there"
        return True
    return False


