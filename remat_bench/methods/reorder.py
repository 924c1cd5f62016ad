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
2. A local search over topological orders (late-acceptance hill climbing,
   Burke and Bykov 2017): move one node to another place between its last
   input and its first consumer, scoring an order by the memory it holds above
   the target (the budget, or just below the best peak so far). It is written
   here because no maintained library searches permutations under
   precedence; each move is scored by a vectorised O(n + edges) profile.
   On random_layered_n250 at 0.8 it finds an order that fits in about a
   second (`make bench BENCH=orderfree`), where the CP-SAT model alone took
   30-68 s (the solver measurements behind the order-free issue).
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

import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from remat_bench.core.graph import Graph, Number
from remat_bench.core.simulate import place_frees, simulate
from remat_bench.methods.base import (
    Deadline,
    Method,
    MethodResult,
    Param,
    Status,
    run_interruptibly,
)


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


class OrderProfile:
    """Memory at every step of computing an order once each, vectorised for the local search."""

    def __init__(self, graph: Graph):
        n = self.n = graph.n
        self.mem = graph.memory.astype(np.float64)
        self.ws = graph.workspace.astype(np.float64)
        self.fixed = float(graph.fixed_memory)
        self.inputs = [np.unique(np.asarray(ins, dtype=np.int64)) for ins in graph.inputs]
        self.consumers = [np.unique(np.asarray(c, dtype=np.int64)) for c in graph.consumers]
        self.src = np.repeat(np.arange(n), [len(c) for c in self.consumers])
        self.dst = np.concatenate(self.consumers) if n else np.zeros(0, dtype=np.int64)
        self.with_consumers = np.flatnonzero([len(c) > 0 for c in self.consumers])
        self.offsets = np.searchsorted(self.src, self.with_consumers)
        self.is_output = np.asarray(graph.is_output, dtype=bool)

    def __call__(self, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(memory at each step, position of each node) of ``order``; the same model as `order_peak`."""
        n = self.n
        pos = np.empty(n, dtype=np.int64)
        pos[order] = np.arange(n)
        end = pos + 1
        if len(self.dst):
            end[self.with_consumers] = np.maximum.reduceat(pos[self.dst] + 1, self.offsets)
        end[self.is_output] = n
        held = np.bincount(pos, weights=self.mem, minlength=n + 1) - np.bincount(end, weights=self.mem,
                                                                              minlength=n + 1)
        return np.cumsum(held)[:n] + self.ws[order] + self.fixed, pos


def local_search(graph: Graph, start: list[int], budget: Number | None, seconds: float,
                 seed: int = 0) -> list[int]:
    """The lowest-peak order met by late-acceptance hill climbing from ``start`` within ``seconds``.

    Rounds alternate two targets (the budget itself; just below the best peak so
    far) and a few history lengths, each from the best order yet, so that no one
    setting's bad luck decides the answer. A round ends after ``20 * history``
    moves without a new best; the search ends when an order fits, at
    ``seconds``, or after a whole cycle of rounds without a new best.
    """
    n = graph.n
    if n < 3 or seconds <= 0:
        return list(start)
    profile = OrderProfile(graph)
    rng = np.random.default_rng(seed)
    best = np.asarray(start, dtype=np.int64)
    best_peak = profile(best)[0].max()
    step = float(profile.mem.mean()) or 1.0
    settings = [(False, 2000), (True, 2000), (False, 10000), (True, 500)]
    t_end = time.perf_counter() + seconds
    rounds = idle_rounds = 0
    while (time.perf_counter() < t_end and idle_rounds < len(settings)
           and (budget is None or best_peak > budget)):
        adaptive, history = settings[rounds % len(settings)]
        history = min(history, 50 * n)  # small graphs: shorter memory, and rounds end sooner when idle
        rounds += 1
        idle_rounds += 1
        last_gain = 0
        round_end = min(t_end, time.perf_counter() + max(1.0, seconds / 8))
        order = best.copy()
        prof, pos = profile(order)

        def target_of(peak: float, adaptive: bool = adaptive) -> float:
            if budget is None:
                return peak - step
            return max(float(budget), peak - 2 * step) if adaptive else float(budget)

        target = target_of(best_peak)
        cost = float(np.maximum(prof - target, 0).sum())
        recent = np.full(history, cost)
        it = 0
        while ((it & 63) or time.perf_counter() < round_end) and it - last_gain < 20 * history:
            it += 1
            if rng.random() < 0.5:  # a node near a step above the target, or any node
                over = np.flatnonzero(prof > target)
                k = int(over[rng.integers(len(over))]) if len(over) else int(rng.integers(n))
                v = order[min(n - 1, max(0, k + int(rng.integers(-3, 4))))]
            else:
                v = order[rng.integers(n)]
            p = pos[v]
            lo = pos[profile.inputs[v]].max() + 1 if len(profile.inputs[v]) else 0
            hi = pos[profile.consumers[v]].min() - 1 if len(profile.consumers[v]) else n - 1
            if hi <= lo:
                continue
            q = int(rng.integers(lo, hi + 1))
            if q == p:
                continue
            moved = np.insert(np.delete(order, p), q, v)
            new_prof, new_pos = profile(moved)
            new_cost = float(np.maximum(new_prof - target, 0).sum())
            if new_cost <= cost or new_cost <= recent[it % history]:
                order, prof, pos, cost = moved, new_prof, new_pos, new_cost
                peak = prof.max()
                if peak < best_peak:
                    best, best_peak = order.copy(), peak
                    idle_rounds, last_gain = 0, it
                    if budget is not None and best_peak <= budget:
                        break
                    if target_of(best_peak) != target:  # a new target rescales every cost
                        target = target_of(best_peak)
                        cost = float(np.maximum(prof - target, 0).sum())
                        recent[:] = cost
            recent[it % history] = cost
    return best.tolist()


@dataclass
class OrderAnswer:
    order: list[int]
    peak: Number
    proven: bool  # the peak is the lowest of every order (or fits the budget)
    infeasible: bool  # proven: no order fits the budget
    stats: dict[str, Any]


def best_order(graph: Graph, budget: Number | None, deadline: Deadline, workers: int = 0,
               seed: int = 0, tries: int = 8, hints: list[list[int]] | None = None,
               search_share: float = 0.3, probe_share: float = 0.3) -> OrderAnswer:
    """The list schedule, the local search (``search_share`` of the time), then the CP-SAT order model."""
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
    t1 = time.perf_counter()
    remaining = deadline.remaining()
    searched = local_search(graph, best, budget, search_share * (60.0 if remaining is None else remaining), seed)
    searched_peak = order_peak(graph, searched)
    stats["local_search_peak"] = searched_peak
    stats["local_search_time_s"] = round(time.perf_counter() - t1, 3)
    if searched_peak < best_peak:
        best, best_peak = searched, searched_peak
    if budget is not None and best_peak <= budget:
        return OrderAnswer(best, best_peak, True, False, stats)
    if deadline.expired():
        return OrderAnswer(best, best_peak, False, False, stats)
    if budget is not None and _no_order_fits(graph, budget, best, deadline, probe_share, stats):
        return OrderAnswer(best, best_peak, False, True, stats)

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


def _no_order_fits(graph: Graph, budget: Number, best: list[int], deadline: Deadline, share: float,
                   stats: dict[str, Any]) -> bool:
    """True when the prefix probes (`remat_bench.toolkit.bound`) prove that no order fits the budget.

    The bound already computed for this graph and budget (the pipeline computes
    it before the method) answers at once; otherwise probes get ``share`` of the
    time left, led by the best order's memory at each step.
    """
    from remat_bench.toolkit.bound import order_profile_upper, peek_bound, prefix_probes

    known = peek_bound(graph, budget)
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


class Reorder(Method):
    name = "reorder"
    search_space = "every topological order without recomputation"
    description = "the best topological order with no recomputation (list scheduling, local search, then CP-SAT)"
    params = (
        Param("threads", int, 0, "CP-SAT workers (0: all cores)", minimum=0, aliases=("num_workers",)),
        Param("seed", int, 0, "seed of the randomised list schedules and of CP-SAT", minimum=0, maximum=2**31 - 1),
        Param("tries", int, 8, "randomised list schedules tried besides the plain one", minimum=0),
        Param("search_share", float, 0.3, "share of the time limit given to the local search before CP-SAT",
              minimum=0, maximum=1),
    )
    requires = ("ortools",)

    def solve(self, graph: Graph, budget: Number | None, time_limit: float | None,
              **params: Any) -> MethodResult:
        deadline = Deadline(time_limit)
        answer = best_order(graph, budget, deadline, params["threads"], params["seed"], params["tries"],
                            search_share=params["search_share"])
        nodes = np.asarray(answer.order, dtype=np.int64)
        schedule = place_frees(graph, nodes, np.zeros(len(nodes), dtype=np.int64))
        total = graph.total_duration
        stats = {**answer.stats, "peak": answer.peak}
        if budget is not None and answer.peak > budget:
            status = Status.INFEASIBLE if answer.infeasible else Status.NO_SOLUTION
            if answer.infeasible and "proven_by" in answer.stats:
                why = f"no order fits the budget without recomputation ({answer.stats['proven_by']})"
            elif answer.infeasible:
                why = "CP-SAT proved that no order fits the budget without recomputation"
            else:
                why = f"the best order found peaks at {answer.peak}, above the budget {budget}"
            return MethodResult(status, schedule, objective=total, solve_time_s=deadline.elapsed(),
                                stats=stats, message=why)
        status = Status.OPTIMAL if answer.proven else Status.FEASIBLE
        return MethodResult(status, schedule, objective=total, lower_bound=total if budget is not None else None,
                            solve_time_s=deadline.elapsed(), stats=stats)
