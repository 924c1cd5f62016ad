"""Greedy rematerialization under a budget, in the style of XLA's rematerialization pass.

Follow the input order. Before each computation, if it would pass the budget,
evict the resident value with the lowest recompute cost per byte among those
still needed later and not needed right now, until it fits; a value that is
needed again but was evicted is recomputed on demand, recursively, under the
same rule. Values nothing will read again are freed at once.

The cost per byte is the value's duration over its memory, divided by the
distance (in the input order) to its next use: of two equally cheap values,
the one needed later goes first, as in Belady's rule for paging. Without that
tie to the next use, wide graphs evict values needed by the very next node
and spend most of their time recomputing.

With ``--budget min`` the budget is bisected between the memory floor and the
baseline peak for the lowest one the greedy pass meets.

XLA's pass (tensorflow/compiler/xla/service/hlo_rematerialization.cc) also
weighs the memory a rematerialization frees against what it adds; this
version keeps only the cost-per-byte rule, the part the name refers to.
"""

from __future__ import annotations

import heapq
import time
from typing import Any

from remat_bench.core.budget import memory_floor
from remat_bench.core.graph import Graph, Number
from remat_bench.core.schedule import Schedule, ScheduleBuilder
from remat_bench.core.simulate import baseline, baseline_schedule, simulate
from remat_bench.methods.base import Deadline, Method, MethodResult, Status


class _Stuck(Exception):
    def __init__(self, node: int, need: Number, thrashing: bool = False) -> None:
        self.node = node
        self.need = need
        self.thrashing = thrashing


def greedy_schedule(graph: Graph, budget: Number) -> Schedule:
    """The greedy schedule at ``budget``; raises `_Stuck` when eviction cannot make room."""
    n = graph.n
    mem = graph.memory.tolist()
    dur = graph.duration.tolist()
    ws = graph.workspace.tolist()
    inputs = graph.inputs
    is_output = graph.is_output.tolist()
    fixed = graph.fixed_memory
    # First-order uses still to come: consumers not yet computed for the first time.
    remaining = [len(graph.consumers[v]) for v in range(n)]
    resident = [False] * n
    pinned = [0] * n
    version = [0] * n
    heap: list[tuple[float, int, int]] = []
    used = fixed
    out = ScheduleBuilder()

    # holds[i]: evicted values, still needed, that read i. Like XLA, a value is evicted
    # preferably to be recomputed from operands that stay live, so that recomputation
    # does not cascade back through the graph (which pins most of a wide graph at once);
    # values that would cascade are evicted only when nothing else makes room.
    holds = [0] * n
    evicted = [False] * n

    def needed_later(u: int) -> bool:
        return remaining[u] > 0 or is_output[u] or holds[u] > 0

    def set_evicted(u: int, flag: bool) -> None:
        if evicted[u] != flag:
            evicted[u] = flag
            step = 1 if flag else -1
            for i in inputs[u]:
                holds[i] += step
                if not holds[i]:
                    readmit(i)

    consumers = graph.consumers
    now = 0  # position of the node being computed for the first time

    def score(u: int) -> float:
        if mem[u] == 0:
            return float("inf")
        if remaining[u]:
            next_use = consumers[u][len(consumers[u]) - remaining[u]]
        else:
            next_use = n  # an output, held to the end
        return dur[u] / (mem[u] * (next_use - now + 1))

    def free(u: int) -> None:
        nonlocal used
        resident[u] = False
        version[u] += 1
        used -= mem[u]
        out.free(u)

    # Values whose eviction would cascade wait in `parked` (a second heap, kept across calls) until
    # they can be evicted cleanly again: re-admitted to `heap` when their holds drop to zero or an
    # operand comes back. Re-checking them at every call instead was quadratic: 700 s on a
    # 100,000-node chain.
    parked: list[tuple[float, int, int]] = []
    parked_version = [-1] * n

    def readmit(u: int) -> None:
        if resident[u] and parked_version[u] == version[u]:
            parked_version[u] = -1
            heapq.heappush(heap, (score(u), u, version[u]))

    def make_room(v: int) -> None:
        need = mem[v] + ws[v]
        skipped: list[tuple[float, int, int]] = []  # pinned now: back into their heap afterwards
        skipped_parked: list[tuple[float, int, int]] = []
        try:
            while used + need > budget:
                if heap:
                    item = heapq.heappop(heap)
                    _, u, ver = item
                    if not resident[u] or ver != version[u]:
                        continue
                    if pinned[u]:
                        skipped.append(item)
                    elif holds[u] or not all(resident[i] for i in inputs[u]):
                        if parked_version[u] != ver:
                            parked_version[u] = ver
                            heapq.heappush(parked, item)
                    else:
                        free(u)
                        set_evicted(u, True)
                    continue
                # Last resort: values whose recomputation would cascade (operands held for evicted
                # values, or values whose own inputs are gone), cheapest first.
                while parked:
                    item = heapq.heappop(parked)
                    _, u, ver = item
                    if not resident[u] or ver != version[u] or parked_version[u] != ver:
                        continue
                    if pinned[u]:
                        skipped_parked.append(item)
                        continue
                    parked_version[u] = -1
                    free(u)
                    set_evicted(u, True)
                    break
                else:
                    raise _Stuck(v, used + need)
        finally:
            for item in skipped:
                heapq.heappush(heap, item)
            for item in skipped_parked:
                heapq.heappush(parked, item)

    # Cascading evictions can thrash (each recomputation evicting what the next one needs);
    # past this many computations the pass gives up rather than run for minutes.
    max_computes = 20 * n + 1000
    computes = 0

    def compute(v: int) -> None:
        nonlocal used, computes
        computes += 1
        if computes > max_computes:
            raise _Stuck(v, used, thrashing=True)
        make_room(v)
        out.compute(v)
        resident[v] = True
        version[v] += 1
        used += mem[v]
        if mem[v]:  # evicting a value of no size never makes room
            heapq.heappush(heap, (score(v), v, version[v]))
        for c in consumers[v]:
            readmit(c)  # one of its operands is back

    def release_inputs(v: int) -> None:
        for u in inputs[v]:
            if resident[u] and not pinned[u] and not needed_later(u):
                free(u)

    def materialise(target: int) -> None:
        """Compute target and whatever evicted inputs it needs, depth first, without recursion."""
        stack = [(target, False)]
        while stack:
            x, expanded = stack.pop()
            if not expanded:
                if resident[x]:
                    continue
                stack.append((x, True))
                for u in inputs[x]:
                    pinned[u] += 1
                    if not resident[u]:
                        stack.append((u, False))
            else:
                compute(x)
                set_evicted(x, False)
                for u in inputs[x]:
                    pinned[u] -= 1
                if x != target:
                    release_inputs(x)

    for target in range(n):
        now = target
        materialise(target)
        for u in inputs[target]:
            remaining[u] -= 1
            if evicted[u] and not (remaining[u] or is_output[u]):
                set_evicted(u, False)  # no longer needed: its operands are released
                for i in inputs[u]:
                    if resident[i] and not pinned[i] and not needed_later(i):
                        free(i)
            if resident[u] and needed_later(u) and mem[u]:
                # Its next use moved: re-key it (older heap entries go stale by version).
                version[u] += 1
                heapq.heappush(heap, (score(u), u, version[u]))
        release_inputs(target)
        if not needed_later(target):
            free(target)
    # Outputs evicted along the way are computed again, holding every output in place.
    now = n
    for o in graph.output_indices:
        pinned[o] += 1
    for o in graph.output_indices:
        if not resident[o]:
            materialise(o)
    return out.build()


class Greedy(Method):
    name = "greedy"
    search_space = "eviction under the budget in input order, recomputing on demand"
    description = "XLA-style greedy: evict the cheapest value per byte, recompute on demand"

    def solve(self, graph: Graph, budget: Number | None, time_limit: float | None,
              **params: Any) -> MethodResult:
        start = time.perf_counter()
        deadline = Deadline(time_limit)
        if budget is not None:
            try:
                schedule = greedy_schedule(graph, budget)
            except _Stuck as stuck:
                if stuck.thrashing:
                    why = (f"greedy gave up after {20 * graph.n + 1000} computations: its evictions "
                           "thrash at this budget")
                else:
                    why = (f"greedy could not make room for node '{graph.ids[stuck.node]}': it needs "
                           f"{stuck.need} with everything evictable evicted, above the budget {budget}")
                return MethodResult(Status.NO_SOLUTION, solve_time_s=time.perf_counter() - start, message=why)
            sim = simulate(graph, schedule)
            return MethodResult(Status.FEASIBLE, schedule, objective=sim.duration,
                                solve_time_s=time.perf_counter() - start)

        # Lowest peak: bisect the budget; the greedy pass need not be monotone, so keep the best seen.
        low, high = memory_floor(graph).amount, baseline(graph).peak
        try:
            best = greedy_schedule(graph, high)
        except _Stuck:
            # Fractional sizes summed in another order can overshoot the baseline peak by an ulp;
            # the baseline schedule itself reaches it.
            best = baseline_schedule(graph)
        best_peak = simulate(graph, best).peak
        integral = isinstance(high, int)
        rounds = 0
        while low < high and not deadline.expired():
            mid = (low + high) // 2 if integral else (low + high) / 2
            rounds += 1
            try:
                schedule = greedy_schedule(graph, mid)
            except _Stuck:
                low = mid + 1 if integral else mid
            else:
                peak = simulate(graph, schedule).peak
                if peak < best_peak:
                    best, best_peak = schedule, peak
                high = min(mid, peak)
            if not integral and high - low <= 1e-9 * max(1.0, float(high)):
                break
        sim = simulate(graph, best)
        return MethodResult(Status.FEASIBLE, best, objective=sim.duration,
                            solve_time_s=time.perf_counter() - start,
                            stats={"bisection_rounds": rounds})

