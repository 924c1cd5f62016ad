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

from remat_bench.core.graph import Graph, Number
from remat_bench.core.schedule import Schedule
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
from remat_bench.toolkit.eviction import EvictionPass, Stuck
from remat_bench.toolkit.least_peak import least_peak_of_pass


class GreedyPass(EvictionPass):
    """One greedy pass over ``graph`` at ``budget``: the eviction pass (`remat_bench.toolkit.eviction`) with
    XLA's rule, one method per step of it.

    Beside the state every pass keeps, per node v:

    - ``version[v]``: bumped whenever v is computed, freed or re-keyed; a heap entry of an older
      version is stale and skipped when popped.
    - Like XLA, a value is evicted preferably to be recomputed from operands that stay live, so that
      recomputation does not cascade back through the graph (which pins most of a wide graph at once);
      values that would cascade (``holds[v] > 0``, or an input not resident) are evicted only when
      nothing else makes room.
    - ``heap``: resident values by `score`, cheapest first; ``parked``: values whose eviction would
      cascade, waiting (``parked_version[v]`` is the version parked, or -1) until they can be evicted
      cleanly again: re-admitted to ``heap`` when their holds drop to zero or an operand comes back.
      Re-checking them at every eviction instead was quadratic (docs/benchmarks.md, "Large graphs").
      ``skipped`` and ``skipped_parked`` hold the entries of pinned values popped while making room,
      pushed back once it is made.
    """

    def __init__(self, graph: Graph, budget: Number) -> None:
        super().__init__(graph, budget, graph.inputs, graph.consumers)
        n = graph.n
        self.version = [0] * n
        self.heap: list[tuple[float, int, int]] = []
        self.parked: list[tuple[float, int, int]] = []
        self.parked_version = [-1] * n
        self.skipped: list[tuple[float, int, int]] = []
        self.skipped_parked: list[tuple[float, int, int]] = []

    def step(self, target: int) -> None:
        self.materialise(target)
        self.first_use_of_inputs(target)
        self.release_inputs(target)
        if not self.needed(target):
            self.free(target)

    # ------------------------------------------------------------------ bookkeeping

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
            if self.evicted[u] and not self.direct(u):
                self.set_evicted(u, False)  # no longer needed: its operands are released
                for i in self.inputs[u]:
                    if self.resident[i] and not self.pinned[i] and not self.needed(i):
                        self.free(i)
            if self.resident[u] and self.needed(u) and self.mem[u]:
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
        super().free(u)
        self.version[u] += 1

    def release_inputs(self, v: int) -> None:
        """Free the inputs of v that nothing will read again.

        Parameters
        ----------
        v : int
        """
        for u in self.inputs[v]:
            if self.resident[u] and not self.pinned[u] and not self.needed(u):
                self.free(u)

    def evict(self) -> bool:
        """Evict the cheapest value whose eviction is clean, else (last resort) the cheapest parked one.

        Returns
        -------
        bool
            False when nothing can be evicted.
        """
        while self.heap:
            if self.evict_or_park(heapq.heappop(self.heap)):
                return True
        return self.evict_parked()

    def room_made(self) -> None:
        for item in self.skipped:
            heapq.heappush(self.heap, item)
        for item in self.skipped_parked:
            heapq.heappush(self.parked, item)
        self.skipped, self.skipped_parked = [], []

    def evict_or_park(self, item: tuple[float, int, int]) -> bool:
        """Evict the value of a heap entry if that is clean; park it if its recomputation would cascade.

        Parameters
        ----------
        item : tuple of (float, int, int)
            A popped heap entry: score, value, version (a stale one is dropped; a pinned value's goes to
            ``skipped``).

        Returns
        -------
        bool
            Whether the value was evicted.
        """
        _, u, ver = item
        if not self.resident[u] or ver != self.version[u]:
            return False  # stale
        if self.pinned[u]:
            self.skipped.append(item)
        elif self.holds[u] or not all(self.resident[i] for i in self.inputs[u]):
            if self.parked_version[u] != ver:
                self.parked_version[u] = ver
                heapq.heappush(self.parked, item)
        else:
            self.free(u)
            self.set_evicted(u, True)
            return True
        return False

    def evict_parked(self) -> bool:
        """Last resort: evict the cheapest parked value (its recomputation cascades); False if none.

        Returns
        -------
        bool
            Whether a value was evicted (a pinned parked value's entry goes to ``skipped_parked``).
        """
        while self.parked:
            item = heapq.heappop(self.parked)
            _, u, ver = item
            if not self.resident[u] or ver != self.version[u] or self.parked_version[u] != ver:
                continue
            if self.pinned[u]:
                self.skipped_parked.append(item)
                continue
            self.parked_version[u] = -1
            self.free(u)
            self.set_evicted(u, True)
            return True
        return False

    # ------------------------------------------------------------------ computing

    def compute(self, v: int) -> None:
        super().compute(v)
        self.version[v] += 1
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
        Stuck
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
    """The greedy schedule at ``budget``; raises `Stuck` when eviction cannot make room.

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
    Stuck
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
            except Stuck as stuck:
                # It gave up: its pass ran to its end (it polls no deadline).
                return MethodResult(SolutionStatus.NO_SOLUTION, solve_time_s=time.perf_counter() - start,
                                    message=stuck.sentence("greedy", graph, budget, thrashing_at="this budget"),
                                    termination=Termination.CONVERGED)
            sim = simulate(graph, schedule)
            return MethodResult(SolutionStatus.FEASIBLE, schedule, objective=sim.duration,
                                solve_time_s=time.perf_counter() - start, termination=Termination.CONVERGED)

        # Lowest peak: bisect the budget (the shared search of the eviction passes).
        best, rounds, converged = least_peak_of_pass(graph, partial(greedy_schedule, graph), deadline, (Stuck,))
        sim = simulate(graph, best)
        return MethodResult(SolutionStatus.FEASIBLE, best, objective=sim.duration,
                            solve_time_s=time.perf_counter() - start,
                            stats={"bisection_rounds": rounds},
                            termination=Termination.CONVERGED if converged else cut_short())

