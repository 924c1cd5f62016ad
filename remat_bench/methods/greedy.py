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
from functools import partial
from typing import Any

from remat_bench.core.budget import memory_text
from remat_bench.core.graph import Graph, Number
from remat_bench.core.schedule import Schedule, ScheduleBuilder
from remat_bench.core.simulate import simulate
from remat_bench.methods.base import (
    Deadline,
    Membership,
    Method,
    MethodResult,
    Role,
    SolutionStatus,
    Termination,
    cut_short,
)
from remat_bench.toolkit.least_peak import least_peak_of_pass


class _Stuck(Exception):
    def __init__(self, node: int, need: Number, thrashing: bool = False) -> None:
        self.node = node
        self.need = need
        self.thrashing = thrashing


class GreedyPass:
    """One greedy pass over ``graph`` at ``budget``: its state, and one method per step of the rule.

    Per node v, the state the rule reads:

    - ``remaining[v]``: first-order uses still to come (consumers not yet computed for the first time).
    - ``resident[v]``: v's value is in memory; ``used`` is the memory they and the fixed memory hold.
    - ``pinned[v]``: computations under way that read v; a pinned value is never evicted.
    - ``version[v]``: bumped whenever v is computed, freed or re-keyed; a heap entry of an older
      version is stale and skipped when popped.
    - ``evicted[v]``: v was evicted and is still needed; ``holds[i]`` counts such values that read i.
      Like XLA, a value is evicted preferably to be recomputed from operands that stay live, so that
      recomputation does not cascade back through the graph (which pins most of a wide graph at once);
      values that would cascade are evicted only when nothing else makes room.
    - ``heap``: resident values by `score`, cheapest first; ``parked``: values whose eviction would
      cascade, waiting (``parked_version[v]`` is the version parked, or -1) until they can be evicted
      cleanly again: re-admitted to ``heap`` when their holds drop to zero or an operand comes back.
      Re-checking them at every eviction instead was quadratic (docs/benchmarks.md, "Large graphs").
    """

    def __init__(self, graph: Graph, budget: Number) -> None:
        n = graph.n
        self.n = n
        self.budget = budget
        self.mem = graph.memory.tolist()
        self.dur = graph.duration.tolist()
        self.ws = graph.workspace.tolist()
        self.inputs = graph.inputs
        self.consumers = graph.consumers
        self.is_output = graph.is_output.tolist()
        self.output_indices = graph.output_indices
        self.remaining = [len(graph.consumers[v]) for v in range(n)]
        self.resident = [False] * n
        self.pinned = [0] * n
        self.version = [0] * n
        self.holds = [0] * n
        self.evicted = [False] * n
        self.heap: list[tuple[float, int, int]] = []
        self.parked: list[tuple[float, int, int]] = []
        self.parked_version = [-1] * n
        self.used = graph.fixed_memory
        self.now = 0  # position of the node being computed for the first time
        # Cascading evictions can thrash (each recomputation evicting what the next one needs);
        # past this many computations the pass gives up rather than run for minutes.
        self.max_computes = 20 * n + 1000
        self.computes = 0
        self.out = ScheduleBuilder()

    def run(self) -> Schedule:
        """Every node in input order, then the outputs evicted along the way computed again.

        Returns
        -------
        Schedule
            The pass's computations and frees.

        Raises
        ------
        _Stuck
            Nothing is left to evict and a computation still does not fit the budget, or the pass made more
            than 20 n + 1000 computations (thrashing).
        """
        for target in range(self.n):
            self.now = target
            self.materialise(target)
            self.first_use_of_inputs(target)
            self.release_inputs(target)
            if not self.needed_later(target):
                self.free(target)
        # Outputs evicted along the way are computed again, holding every output in place.
        self.now = self.n
        for o in self.output_indices:
            self.pinned[o] += 1
        for o in self.output_indices:
            if not self.resident[o]:
                self.materialise(o)
        return self.out.build()

    # ------------------------------------------------------------------ bookkeeping

    def needed_later(self, u: int) -> bool:
        """Whether ``u`` is read again: a first-time consumer to come, an output, or an evicted value's input.

        Parameters
        ----------
        u : int

        Returns
        -------
        bool
        """
        return self.remaining[u] > 0 or self.is_output[u] or self.holds[u] > 0

    def score(self, u: int) -> float:
        """Recompute cost per byte over the distance to the next use (the module docstring's rule).

        Parameters
        ----------
        u : int
            A resident value.

        Returns
        -------
        float
            duration / (memory x (next use - now + 1)); the least is evicted first, and a value of no memory
            scores infinity (evicting it makes no room).
        """
        mem = self.mem[u]
        if mem == 0:
            return float("inf")
        remaining = self.remaining[u]
        if remaining:
            consumers = self.consumers[u]
            next_use = consumers[len(consumers) - remaining]
        else:
            next_use = self.n  # an output, held to the end
        return self.dur[u] / (mem * (next_use - self.now + 1))

    def set_evicted(self, u: int, flag: bool) -> None:
        """Mark ``u`` evicted (or not): its inputs' holds follow, and an input no longer held is re-admitted.

        Parameters
        ----------
        u : int
        flag : bool
            True: u was evicted and is still needed; False: it is resident again or no longer needed.
        """
        if self.evicted[u] != flag:
            self.evicted[u] = flag
            step = 1 if flag else -1
            for i in self.inputs[u]:
                self.holds[i] += step
                if not self.holds[i]:
                    self.readmit(i)

    def readmit(self, u: int) -> None:
        """Move u from ``parked`` back to ``heap``: its eviction no longer cascades.

        Parameters
        ----------
        u : int
            Nothing is done unless u is resident and parked at its current version.
        """
        if self.resident[u] and self.parked_version[u] == self.version[u]:
            self.parked_version[u] = -1
            heapq.heappush(self.heap, (self.score(u), u, self.version[u]))

    def first_use_of_inputs(self, target: int) -> None:
        """``target`` has been computed for the first time: its inputs have one use fewer to come.

        Parameters
        ----------
        target : int
        """
        for u in self.inputs[target]:
            self.remaining[u] -= 1
            if self.evicted[u] and not (self.remaining[u] or self.is_output[u]):
                self.set_evicted(u, False)  # no longer needed: its operands are released
                for i in self.inputs[u]:
                    if self.resident[i] and not self.pinned[i] and not self.needed_later(i):
                        self.free(i)
            if self.resident[u] and self.needed_later(u) and self.mem[u]:
                # Its next use moved: re-key it (older heap entries go stale by version).
                self.version[u] += 1
                heapq.heappush(self.heap, (self.score(u), u, self.version[u]))

    # ------------------------------------------------------------------ freeing and evicting

    def free(self, u: int) -> None:
        """``u`` leaves memory (its heap entries go stale); the caller says whether it is evicted.

        Parameters
        ----------
        u : int
            A resident value.
        """
        self.resident[u] = False
        self.version[u] += 1
        self.used -= self.mem[u]
        self.out.free(u)

    def release_inputs(self, v: int) -> None:
        """Free the inputs of v that nothing will read again.

        Parameters
        ----------
        v : int
        """
        for u in self.inputs[v]:
            if self.resident[u] and not self.pinned[u] and not self.needed_later(u):
                self.free(u)

    def make_room(self, v: int) -> None:
        """Evict, cheapest first, until v's output and workspace fit; raise `_Stuck` if they cannot.

        Parameters
        ----------
        v : int
            The node about to be computed.

        Raises
        ------
        _Stuck
            Nothing is left to evict and they still do not fit.
        """
        need = self.mem[v] + self.ws[v]
        skipped: list[tuple[float, int, int]] = []  # pinned now: back into their heap afterwards
        skipped_parked: list[tuple[float, int, int]] = []
        try:
            while self.used + need > self.budget:
                if self.heap:
                    self.evict_or_park(heapq.heappop(self.heap), skipped)
                elif not self.evict_parked(skipped_parked):
                    raise _Stuck(v, self.used + need)
        finally:
            for item in skipped:
                heapq.heappush(self.heap, item)
            for item in skipped_parked:
                heapq.heappush(self.parked, item)

    def evict_or_park(self, item: tuple[float, int, int], skipped: list[tuple[float, int, int]]) -> None:
        """Evict the value of a heap entry if that is clean; park it if its recomputation would cascade.

        Parameters
        ----------
        item : tuple of (float, int, int)
            A popped heap entry: score, value, version (a stale one is dropped).
        skipped : list
            Where an entry of a pinned value goes, to be pushed back once room is made.
        """
        _, u, ver = item
        if not self.resident[u] or ver != self.version[u]:
            return  # stale
        if self.pinned[u]:
            skipped.append(item)
        elif self.holds[u] or not all(self.resident[i] for i in self.inputs[u]):
            if self.parked_version[u] != ver:
                self.parked_version[u] = ver
                heapq.heappush(self.parked, item)
        else:
            self.free(u)
            self.set_evicted(u, True)

    def evict_parked(self, skipped_parked: list[tuple[float, int, int]]) -> bool:
        """Last resort: evict the cheapest parked value (its recomputation cascades); False if none.

        Parameters
        ----------
        skipped_parked : list
            Where an entry of a pinned parked value goes, to be pushed back once room is made.

        Returns
        -------
        bool
            Whether a value was evicted.
        """
        while self.parked:
            item = heapq.heappop(self.parked)
            _, u, ver = item
            if not self.resident[u] or ver != self.version[u] or self.parked_version[u] != ver:
                continue
            if self.pinned[u]:
                skipped_parked.append(item)
                continue
            self.parked_version[u] = -1
            self.free(u)
            self.set_evicted(u, True)
            return True
        return False

    # ------------------------------------------------------------------ computing

    def compute(self, v: int) -> None:
        """One computation of ``v`` (its inputs resident and pinned), after making room for it.

        Parameters
        ----------
        v : int

        Raises
        ------
        _Stuck
            Nothing is left to evict and a computation still does not fit the budget, or the pass made more
            than 20 n + 1000 computations (thrashing).
        """
        self.computes += 1
        if self.computes > self.max_computes:
            raise _Stuck(v, self.used, thrashing=True)
        self.make_room(v)
        self.out.compute(v)
        self.resident[v] = True
        self.version[v] += 1
        self.used += self.mem[v]
        if self.mem[v]:  # evicting a value of no size never makes room
            heapq.heappush(self.heap, (self.score(v), v, self.version[v]))
        for c in self.consumers[v]:
            self.readmit(c)  # one of its operands is back

    def materialise(self, target: int) -> None:
        """Compute target and whatever evicted inputs it needs, depth first, without recursion.

        Parameters
        ----------
        target : int
            The value to make resident; nothing is done when it already is.

        Raises
        ------
        _Stuck
            Nothing is left to evict and a computation still does not fit the budget, or the pass made more
            than 20 n + 1000 computations (thrashing).
        """
        stack = [(target, False)]
        while stack:
            x, expanded = stack.pop()
            if not expanded:
                if self.resident[x]:
                    continue
                stack.append((x, True))
                for u in self.inputs[x]:
                    self.pinned[u] += 1
                    if not self.resident[u]:
                        stack.append((u, False))
            else:
                self.compute(x)
                self.set_evicted(x, False)
                for u in self.inputs[x]:
                    self.pinned[u] -= 1
                if x != target:
                    self.release_inputs(x)


def greedy_schedule(graph: Graph, budget: Number) -> Schedule:
    """The greedy schedule at ``budget``; raises `_Stuck` when eviction cannot make room.

    Parameters
    ----------
    graph : Graph
    budget : Number
        The most memory (the fixed memory, resident values and a workspace) any step may use, in memory units.

    Returns
    -------
    Schedule

    Raises
    ------
    _Stuck
        Eviction cannot make room, or the pass thrashes past 20 n + 1000 computations.
    """
    return GreedyPass(graph, budget).run()


class Greedy(Method):
    name = "greedy"
    search_space = "eviction under the budget in input order, recomputing on demand"
    description = "XLA-style greedy: evict the cheapest value per byte, recompute on demand"
    member = Membership(Role.FAST, rank=1)

    @classmethod
    def input_order(cls, params: dict[str, Any]) -> str | None:
        return "kept"

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
                           f"{memory_text(stuck.need, graph)} with everything evictable evicted, above the budget "
                           f"{memory_text(budget, graph)}")
                # It gave up: its pass ran to its end (it polls no deadline).
                return MethodResult(SolutionStatus.NO_SOLUTION, solve_time_s=time.perf_counter() - start, message=why,
                                    termination=Termination.CONVERGED)
            sim = simulate(graph, schedule)
            return MethodResult(SolutionStatus.FEASIBLE, schedule, objective=sim.duration,
                                solve_time_s=time.perf_counter() - start, termination=Termination.CONVERGED)

        # Lowest peak: bisect the budget (the shared search of the eviction passes).
        best, rounds, converged = least_peak_of_pass(graph, partial(greedy_schedule, graph), deadline, (_Stuck,))
        sim = simulate(graph, best)
        return MethodResult(SolutionStatus.FEASIBLE, best, objective=sim.duration,
                            solve_time_s=time.perf_counter() - start,
                            stats={"bisection_rounds": rounds},
                            termination=Termination.CONVERGED if converged else cut_short())

