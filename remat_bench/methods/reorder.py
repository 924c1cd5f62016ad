"""The best topological order, with no rematerialization at all.

Every node is computed exactly once, so the duration is the least any
schedule can have; only the order, and with it the peak, is chosen. This
answers the first question a user should ask: is rematerialization needed at
this budget at all? (On the published random layered graphs it is not: another
order fits the paper's 0.9 and 0.8 budgets at 0% overhead.)

1. A memory-aware list scheduler: among the nodes whose inputs are computed,
   take the one that raises resident memory least (its output and workspace,
   minus the inputs it is the last reader of), breaking ties by the step's
   memory; a few seeded random tie-breaks are tried too.
2. A CP-SAT model of the order alone: one compute event x_v per node, all
   distinct (no-overlap of unit intervals), x_u < x_v for each edge, v held
   on [x_v, max over consumers of x_c + 1) (outputs to the end), cumulative
   memory (workspace as a unit interval at x_v), minimising
   max(peak, budget), hinted with the list schedule and the input order.

Statuses: ``optimal`` when an order fits the budget (its duration is the least
possible) or, for ``--budget min``, when CP-SAT proves the lowest peak;
``infeasible`` when CP-SAT proves that no order fits.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from remat_bench.graph import Graph, Number
from remat_bench.methods.base import (
    Deadline,
    Method,
    MethodResult,
    Param,
    Status,
    run_interruptibly,
)
from remat_bench.simulate import place_frees, simulate


def order_peak(graph: Graph, order: list[int] | np.ndarray) -> Number:
    """Peak of computing ``order`` once each, every value freed after its last use."""
    nodes = np.asarray(order, dtype=np.int64)
    return simulate(graph, place_frees(graph, nodes, np.zeros(len(nodes), dtype=np.int64))).peak


def list_schedule(graph: Graph, rng: np.random.Generator | None = None) -> list[int]:
    """A low-peak topological order by the memory-aware list scheduler."""
    n = graph.n
    mem = graph.memory.astype(np.float64)
    ws = graph.workspace.astype(np.float64)
    inputs, consumers = graph.inputs, graph.consumers
    is_output = graph.is_output
    missing = np.array([len(ins) for ins in inputs])
    readers_left = np.array([len(c) for c in consumers])
    ready = {v for v in range(n) if missing[v] == 0}
    resident = 0.0
    order: list[int] = []
    while ready:
        best, best_key = -1, None
        for v in ready:
            released = sum(mem[u] for u in inputs[v] if readers_left[u] == 1 and not is_output[u])
            gone = 0.0 if consumers[v] or is_output[v] else mem[v]
            key = (mem[v] - released - gone, resident + mem[v] + ws[v],
                   rng.random() if rng is not None else 0.0, v)
            if best_key is None or key < best_key:
                best, best_key = v, key
        v = best
        ready.discard(v)
        order.append(v)
        resident += mem[v]
        for u in inputs[v]:
            readers_left[u] -= 1
            if readers_left[u] == 0 and not is_output[u]:
                resident -= mem[u]
        if not consumers[v] and not is_output[v]:
            resident -= mem[v]
        for w in consumers[v]:
            missing[w] -= 1
            if missing[w] == 0:
                ready.add(w)
    return order


@dataclass
class OrderAnswer:
    order: list[int]
    peak: Number
    proven: bool  # the peak is the lowest of every order (or fits the budget)
    infeasible: bool  # proven: no order fits the budget
    stats: dict[str, Any]


def best_order(graph: Graph, budget: Number | None, deadline: Deadline, workers: int = 0,
               seed: int = 0, tries: int = 8, hints: list[list[int]] | None = None) -> OrderAnswer:
    """The list schedule, then the CP-SAT order model, within ``deadline``."""
    from ortools.sat.python import cp_model

    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    candidates = [list(range(graph.n)), list_schedule(graph)]
    candidates += [list_schedule(graph, rng) for _ in range(tries)]
    candidates += hints or []
    scored = sorted(((order_peak(graph, c), i) for i, c in enumerate(candidates)))
    best_peak, best_i = scored[0]
    best = candidates[best_i]
    stats: dict[str, Any] = {"list_schedule_peak": order_peak(graph, candidates[1]),
                             "heuristic_peak": best_peak, "heuristic_time_s": round(time.perf_counter() - t0, 3)}
    if budget is not None and best_peak <= budget:
        return OrderAnswer(best, best_peak, True, False, stats)
    if deadline.expired():
        return OrderAnswer(best, best_peak, False, False, stats)

    n = graph.n
    fixed = graph.fixed_memory
    mem = np.asarray(graph.memory)
    ws = np.asarray(graph.workspace)
    scale = 1
    if mem.dtype.kind in "iu" and ws.dtype.kind in "iu":
        import math

        values = [int(x) for x in np.unique(np.concatenate([mem, ws])) if x]
        scale = math.gcd(*values) if values else 1
        if isinstance(fixed, int):
            scale = math.gcd(scale, fixed) if fixed else scale
    dem = np.ceil(mem / scale).astype(np.int64)
    wdem = np.ceil(ws / scale).astype(np.int64)
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
    fixed_units = int(np.ceil(fixed / scale))
    z = m.new_int_var(0, int(dem.sum() + wdem.max(initial=0)) + 1, "z")
    m.add(z >= peak)
    budget_units = None
    if budget is not None:
        budget_units = int(np.floor(budget / scale)) - fixed_units
        m.add(z >= max(budget_units, 0))
    m.minimize(z)
    # A complete hint: the best heuristic order with its hold intervals.
    pos = np.empty(n, dtype=np.int64)
    pos[np.asarray(best)] = np.arange(n)
    for v in range(n):
        last = max([pos[c] for c in graph.consumers[v]], default=pos[v]) + 1
        e = n if graph.is_output[v] else last
        m.add_hint(x[v], int(pos[v]))
        m.add_hint(end[v], int(e))
        m.add_hint(size[v], int(e - pos[v]))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.05, deadline.remaining() or 60.0)
    solver.parameters.num_workers = workers or (os.cpu_count() or 1)
    solver.parameters.random_seed = seed
    solver.parameters.catch_sigint_signal = False
    status = run_interruptibly(lambda: solver.solve(m), solver.stop_search)
    stats["cp_status"] = solver.status_name(status)
    stats["cp_time_s"] = round(solver.wall_time, 3)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        infeasible = status == cp_model.INFEASIBLE
        return OrderAnswer(best, best_peak, False, infeasible, stats)
    order = sorted(range(n), key=lambda v: solver.value(x[v]))
    peak_found = order_peak(graph, order)
    if peak_found > best_peak:
        order, peak_found = best, best_peak
    bound_units = solver.best_objective_bound
    stats["peak_lower_bound"] = bound_units * scale + fixed_units * scale if budget is None else None
    if budget is not None:
        fits = peak_found <= budget
        infeasible = not fits and bound_units > budget_units
        return OrderAnswer(order, peak_found, fits, infeasible, stats)
    return OrderAnswer(order, peak_found, status == cp_model.OPTIMAL, False, stats)


class Reorder(Method):
    name = "reorder"
    description = "the best topological order with no recomputation (list scheduling, then CP-SAT)"
    params = (
        Param("num_workers", int, 0, "CP-SAT workers (0: all cores)"),
        Param("seed", int, 0, "seed of the randomised list schedules and of CP-SAT"),
        Param("tries", int, 8, "randomised list schedules tried besides the plain one"),
    )
    requires = ("ortools",)

    def solve(self, graph: Graph, budget: Number | None, time_limit: float | None,
              **params: Any) -> MethodResult:
        deadline = Deadline(time_limit)
        answer = best_order(graph, budget, deadline, params["num_workers"], params["seed"], params["tries"])
        nodes = np.asarray(answer.order, dtype=np.int64)
        schedule = place_frees(graph, nodes, np.zeros(len(nodes), dtype=np.int64))
        total = graph.total_duration
        stats = {**answer.stats, "peak": answer.peak}
        if budget is not None and answer.peak > budget:
            status = Status.INFEASIBLE if answer.infeasible else Status.NO_SOLUTION
            why = ("CP-SAT proved that no order fits the budget without recomputation" if answer.infeasible
                   else f"the best order found peaks at {answer.peak}, above the budget {budget}")
            return MethodResult(status, schedule, objective=total, solve_time_s=deadline.elapsed(),
                                stats=stats, message=why)
        status = Status.OPTIMAL if answer.proven else Status.FEASIBLE
        return MethodResult(status, schedule, objective=total, lower_bound=total if budget is not None else None,
                            solve_time_s=deadline.elapsed(), stats=stats)
