"""``dtr``: Dynamic Tensor Rematerialization as an online eviction policy.

Kirisame, Lyubomirsky, Haan, Brennan, He, Roesch, Chen and Tatlock, "Dynamic Tensor
Rematerialization", ICLR 2021. DTR runs a program operator by operator; before each
operator it makes the operator's inputs resident, recomputing evicted ones first
(recursively), and whenever an allocation would pass the budget it evicts the resident,
unpinned value of least heuristic score h(t), until the allocation fits.

Here the program is the graph in its input (file) order, and every computation is a step of
the schedule. Before computing node v, its inputs are taken in order, as the paper's
PerformOp takes an operator's arguments: each one not resident is recomputed first (the same
way, depth first), then pinned until v is computed. Then, while
``used + memory(v) + workspace(v)`` is above the budget (``used``: the fixed memory and every
resident value), the unpinned resident value of least score is evicted. A value is freed at
its last use: when no consumer is left to compute for the first time and it is not an
output; a value recomputed for a recomputation, once the last computation of that
recomputation that reads it is done. After the last node, outputs evicted along the way are
computed again, every output pinned.

A value t is **evicted** while it is not resident and some computation still needs it: a
consumer not yet computed for the first time, the outputs' final residency, or the
recomputation of another evicted value that reads it (so evicting t also marks, recursively,
its freed inputs as evicted). The score of a resident value t, with

- m(t) = memory(t), c0(t) = duration(t) (of its first implementation, from the graph);
- s(t) = max(1, k - last(t)), the staleness: k is the number of the computation being made
  room for (computations are numbered 1, 2, ... in schedule order, recomputations included)
  and last(t) the number of the last computation that produced or read t;

is, for each ``heuristic``:

- ``h_dtr`` (the paper's h_DTR with e*):  (c0(t) + sum of c0(u) over u in e*(t)) / (m(t) s(t)),
  where the evicted neighbourhood e*(t) is the union of the values recomputing t would
  recompute (reached from t through inputs that are not resident, recursively) and the
  evicted values whose recomputation needs t (reached from t through evicted consumers,
  recursively): the paper's "evicted tensors that would need to be rematerialized to
  rematerialize t, or that would need t to be rematerialized" (its simulator keeps the two
  as a region above t and one below). It is directed: an evicted value reached only by going
  down to a consumer and back up to another of its inputs is not in it;
- ``h_dtr_eq`` (the paper's h_DTR^eq): (c0(t) + sum of cost(C) over the distinct classes C of
  t's evicted inputs and consumers) / (m(t) s(t)). Evicted values are kept in union-find
  classes: a value that becomes evicted joins a new class of cost c0, merged with the class
  of each evicted input and consumer. A value recomputed (or no longer needed) leaves its
  class's cost but does not split the class, the paper's approximation: two groups stay
  merged through it;
- ``h_dtr_local`` (the paper's ablation, h_DTR without e*): c0(t) / (m(t) s(t));
- ``lru``: the largest staleness s(t) first;
- ``size``: the largest m(t) first.

The least score is evicted (``lru`` and ``size``: the largest); ties go to the lowest node
index. A value of no memory is never evicted (evicting it makes no room).

Where it differs from the paper. The paper's runtime measures c from the operators' own
run times and s from the wall clock; here c is the graph's duration and the clock counts
computations, so the schedule is deterministic. The paper's runtime learns that a tensor is
dead when the program drops its last reference, and may then banish it (free it for good,
which leaves its children unevictable, as they could no longer be recomputed). Here the
graph says when a value is dead, so it is freed at its last use; it stays recomputable from
the graph and its children stay evictable: evicting a child makes the freed value evicted
again (needed to recompute the child), and h_dtr counts it in e*(child) beforehand.
h_dtr_eq, like the paper's, sees only evicted neighbours: a freed input nothing needs is in
no class, so h_dtr_eq does not charge a value for recomputing its freed inputs (h_dtr does).
The paper samples candidates on large pools; here every resident value is a candidate, and
``h_dtr`` finds the least score exactly without searching e* of every candidate: candidates
are visited by their h_dtr_local score, a lower bound of their h_dtr score, until that bound
passes the best score found.

The pass gives up (``no_solution``) when nothing is left to evict and the computation still
does not fit, or after 20 n + 1000 computations (thrashing). With ``--budget min`` the
budget is bisected between the memory floor and the baseline peak for the lowest one the
pass meets (the pass is not monotone in the budget: the lowest simulated peak seen wins).
"""

from __future__ import annotations

import time
from typing import Any

from remat_bench.core.budget import memory_text
from remat_bench.core.graph import Graph, Number
from remat_bench.core.schedule import Schedule
from remat_bench.core.simulate import simulate
from remat_bench.methods.base import (
    Deadline,
    Membership,
    Method,
    MethodResult,
    Param,
    Role,
    SolutionStatus,
    Termination,
    cut_short,
)
from remat_bench.toolkit.eviction import EvictionPass, OutOfTime, Stuck
from remat_bench.toolkit.least_peak import least_peak_of_pass

HEURISTICS = ("h_dtr", "h_dtr_eq", "h_dtr_local", "lru", "size")


class EvictedClasses:
    """Union-find over evicted values (h_DTR^eq): each class carries the summed duration of its members.

    A value gets a fresh union-find node each time it becomes evicted; leaving, it takes its
    duration out of its class's cost and its node stays in the class (classes never split).
    """

    def __init__(self) -> None:
        self.parent: list[int] = []
        self.cost: list[Number] = []

    def add(self, cost: Number) -> int:
        """A new class of one member.

        Parameters
        ----------
        cost : Number
            The member's duration.

        Returns
        -------
        int
            The member's union-find node.
        """
        self.parent.append(len(self.parent))
        self.cost.append(cost)
        return len(self.parent) - 1

    def find(self, i: int) -> int:
        """The root of node ``i``'s class (halving the path on the way).

        Parameters
        ----------
        i : int
            A union-find node (from `add`).

        Returns
        -------
        int
            The class's root node, whose entry of ``cost`` is the class's cost.
        """
        parent = self.parent
        while parent[i] != i:
            parent[i] = parent[parent[i]]  # path halving
            i = parent[i]
        return i

    def union(self, a: int, b: int) -> None:
        """Merge the classes of nodes ``a`` and ``b``, their costs summed (nothing when already one class).

        Parameters
        ----------
        a, b : int
            Union-find nodes.
        """
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra
            self.cost[ra] += self.cost[rb]

    def take_out(self, i: int, cost: Number) -> None:
        """A member leaves: its duration comes out of its class's cost (never below 0); the class stays whole.

        Parameters
        ----------
        i : int
            The leaving member's union-find node.
        cost : Number
            Its duration.
        """
        root = self.find(i)
        self.cost[root] = max(0, self.cost[root] - cost)


class DTRPass(EvictionPass):
    """One DTR pass over ``graph`` at ``budget`` with ``heuristic``: the eviction pass
    (`remat_bench.toolkit.eviction`) with DTR's rule, one method per step of it.

    Each node is computed with its first implementation (its inputs, duration, workspace). Beside
    the state every pass keeps, per node v:

    - ``pool``: the resident nodes; ``pending[v]``: computations of the recomputation under way
      (`materialise`) that will read v; a value pinned or pending is not freed.
    - ``uf_node[v]``: v's node in ``classes`` while it is evicted.
    - ``last[v]``: number of the last computation that produced or read v (``computes`` counts them).
    """

    def __init__(self, graph: Graph, budget: Number, heuristic: str = "h_dtr",
                 deadline: Deadline | None = None) -> None:
        if heuristic not in HEURISTICS:
            raise ValueError(f"unknown DTR heuristic {heuristic!r}; choose one of {', '.join(HEURISTICS)}")
        n = graph.n
        inputs: list[tuple[int, ...]] = [graph.op_inputs[int(s)] for s in graph.op_start[:-1]]
        consumers: list[list[int]] = [[] for _ in range(n)]
        for v, ins in enumerate(inputs):
            for u in ins:
                consumers[u].append(v)
        super().__init__(graph, budget, inputs, [tuple(c) for c in consumers], deadline)
        self.heuristic = heuristic
        self.pool: set[int] = set()
        self.pending: dict[int, int] = {}
        self.classes = EvictedClasses()
        self.uf_node = [-1] * n
        self.last = [0] * n
        self.evictions = 0

    def step(self, target: int) -> None:
        self.materialise(target)
        for u in self.inputs[target]:
            self.remaining[u] -= 1
        if not self.direct(target):
            self.release(target)  # nothing reads it: freed at once
        for u in self.inputs[target]:
            self.release(u)

    # ------------------------------------------------------------------ needs

    def release(self, v: int) -> None:
        """Free v if it is resident and nothing under way or to come reads it.

        Parameters
        ----------
        v : int
        """
        if self.resident[v] and not self.pinned[v] and not self.direct(v) and self.pending.get(v, 0) <= 0:
            self.free(v)

    def set_evicted(self, v: int, flag: bool) -> None:
        """Mark v evicted (or not), and its freed inputs with it: what recomputing v needs (or needed).

        Parameters
        ----------
        v : int
        flag : bool
            True: v becomes evicted (and joins a class); False: it is resident again or no longer needed.
        """
        work = [v]
        while work:
            x = work.pop()
            if self.evicted[x] == flag:
                continue
            self.evicted[x] = flag
            if flag:
                self.join_class(x)
            else:
                self.classes.take_out(self.uf_node[x], self.dur[x])
                self.uf_node[x] = -1
            for u in self.inputs[x]:
                self.holds[u] += 1 if flag else -1
                if not self.resident[u] and self.needed(u) == flag:
                    work.append(u)

    def join_class(self, v: int) -> None:
        """h_DTR^eq: v's class is merged with those of its evicted inputs and consumers.

        Parameters
        ----------
        v : int
            A value just evicted; it gets a fresh union-find node.
        """
        node = self.uf_node[v] = self.classes.add(self.dur[v])
        for w in (*self.inputs[v], *self.consumers[v]):
            if self.evicted[w]:
                self.classes.union(self.uf_node[w], node)

    # ------------------------------------------------------------------ scores

    def staleness(self, v: int) -> int:
        """s(v): computations since v was last produced or read, counting the one being made room for; at least 1.

        Parameters
        ----------
        v : int

        Returns
        -------
        int
        """
        return max(1, self.computes + 1 - self.last[v])

    def neighbourhood(self, t: int) -> Number:
        """Summed duration of e*(t): what recomputing t recomputes, and the evicted values that need t.

        Parameters
        ----------
        t : int
            A resident value.

        Returns
        -------
        Number
            The sum of c0(u) over u in e*(t), t itself not included.
        """
        seen = {t}
        total: Number = 0
        above = (self.inputs, lambda u: not self.resident[u])
        below = (self.consumers, lambda u: self.evicted[u])
        for edges, admit in (above, below):
            stack = [t]
            while stack:
                for u in edges[stack.pop()]:
                    if u not in seen and admit(u):
                        seen.add(u)
                        total += self.dur[u]
                        stack.append(u)
        return total

    def adjacent_classes(self, t: int) -> Number:
        """Summed cost of the distinct classes of t's evicted inputs and consumers (h_DTR^eq).

        Parameters
        ----------
        t : int
            A resident value.

        Returns
        -------
        Number
        """
        roots = {self.classes.find(self.uf_node[w]) for w in (*self.inputs[t], *self.consumers[t])
                 if self.evicted[w]}
        return sum(self.classes.cost[r] for r in roots)

    def cost(self, t: int) -> Number:
        """c(t) of the heuristic: t's duration, plus its evicted neighbourhood's (exact or by classes).

        Parameters
        ----------
        t : int
            A resident value.

        Returns
        -------
        Number
            ``h_dtr``: c0(t) plus `neighbourhood`; ``h_dtr_eq``: plus `adjacent_classes`; otherwise c0(t).
        """
        if self.heuristic == "h_dtr":
            return self.dur[t] + self.neighbourhood(t)
        if self.heuristic == "h_dtr_eq":
            return self.dur[t] + self.adjacent_classes(t)
        return self.dur[t]

    def choose(self) -> int | None:
        """The value to evict: least score, ties to the lowest index; None if nothing can be evicted.

        Returns
        -------
        int or None
            A resident, unpinned value of nonzero memory.
        """
        candidates = [v for v in self.pool if not self.pinned[v] and self.mem[v] > 0]
        if not candidates:
            return None
        if self.heuristic == "lru":
            return min(candidates, key=lambda v: (-self.staleness(v), v))
        if self.heuristic == "size":
            return min(candidates, key=lambda v: (-self.mem[v], v))
        weight = {v: self.mem[v] * self.staleness(v) for v in candidates}
        # c(t) >= duration(t), so duration / (m s) bounds the score from below: candidates are
        # visited by that bound, and the search stops when the bound passes the best score found.
        best: tuple[float, int] | None = None
        for bound, v in sorted((self.dur[v] / weight[v], v) for v in candidates):
            if best is not None and (bound, v) > best:
                break
            score = (self.cost(v) / weight[v], v)
            if best is None or score < best:
                best = score
        assert best is not None
        return best[1]

    # ------------------------------------------------------------------ freeing and computing

    def free(self, v: int) -> None:
        """v leaves memory: evicted if still needed, else just freed (until a consumer's eviction needs it again).

        Parameters
        ----------
        v : int
            A resident value.
        """
        super().free(v)
        self.pool.discard(v)
        if self.needed(v):
            self.set_evicted(v, True)

    def evict(self) -> bool:
        """Evict the value of least score (`choose`).

        Returns
        -------
        bool
            False when nothing can be evicted.
        """
        victim = self.choose()
        if victim is None:
            return False
        self.evictions += 1
        self.free(victim)
        return True

    def compute(self, x: int) -> None:
        super().compute(x)
        self.pool.add(x)
        self.last[x] = self.computes
        for u in self.inputs[x]:
            self.last[u] = self.computes
        if self.evicted[x]:
            self.set_evicted(x, False)

    def materialise(self, target: int) -> None:
        """Compute target, recomputing first the evicted inputs it needs, depth first, without recursion.

        As the paper's PerformOp: the inputs are taken in order, each recomputed if it is not resident
        and then pinned, so an input already resident is pinned only once the ones before it are.

        Parameters
        ----------
        target : int
            The value to make resident; nothing is done when it already is.

        Raises
        ------
        Stuck
            As `compute`.
        OutOfTime
            As `compute`.
        """
        if self.resident[target]:
            return
        self.pending = self.plan_readers(target)
        stack = [(target, 0)]  # (node, how many of its inputs are resident and pinned)
        while stack:
            x, i = stack[-1]
            inputs = self.inputs[x]
            if i < len(inputs):
                u = inputs[i]
                if self.resident[u]:
                    self.pinned[u] += 1
                    stack[-1] = (x, i + 1)
                else:
                    stack.append((u, 0))
                continue
            stack.pop()
            self.compute(x)
            for u in inputs:
                self.pinned[u] -= 1
                self.pending[u] = self.pending.get(u, 0) - 1
                self.release(u)  # target's inputs stay: they are directly needed until `step` counts this use
        self.pending = {}

    def plan_readers(self, target: int) -> dict[int, int]:
        """How many computations of target's recomputation read each value (values not resident, from target up).

        Parameters
        ----------
        target : int

        Returns
        -------
        dict
            Value index to the number of computations that will read it.
        """
        readers: dict[int, int] = {}
        seen = {target}
        stack = [target]
        while stack:
            for u in self.inputs[stack.pop()]:
                readers[u] = readers.get(u, 0) + 1
                if not self.resident[u] and u not in seen:
                    seen.add(u)
                    stack.append(u)
        return readers


def dtr_schedule(graph: Graph, budget: Number, heuristic: str = "h_dtr", deadline: Deadline | None = None
                 ) -> Schedule:
    """The DTR schedule at ``budget``; raises `Stuck` when eviction cannot make room, `OutOfTime` past ``deadline``.

    Parameters
    ----------
    graph : Graph
    budget : Number
        The most memory (the fixed memory, resident values and a workspace) any step may use, in memory units.
    heuristic : str
        The eviction score, one of `HEURISTICS`.
    deadline : Deadline or None
        When to give up; None: never.

    Returns
    -------
    Schedule

    Raises
    ------
    Stuck
        Eviction cannot make room, or the pass thrashes past its cap of computations.
    OutOfTime
        ``deadline`` passed (or Ctrl-C).
    ValueError
        ``heuristic`` is not one of `HEURISTICS`.
    """
    return DTRPass(graph, budget, heuristic, deadline).run()


class DTR(Method):
    name = "dtr"
    production = True
    search_space = "eviction under the budget in input order by DTR's heuristic, recomputing on demand"
    description = ("Dynamic Tensor Rematerialization (Kirisame et al. 2021): evict by cost / (memory x staleness), "
                   "recompute on demand")
    params = (
        Param("heuristic", str, "h_dtr", "the eviction score: h_dtr (cost with the evicted neighbourhood e*), "
              "h_dtr_eq (e* by union-find classes), h_dtr_local (own cost only), lru, size",
              choices=HEURISTICS),
    )
    member = Membership(Role.FAST, rank=2)

    def solve(self, graph: Graph, budget: Number | None, time_limit: float | None,
              **params: Any) -> MethodResult:
        start = time.perf_counter()
        deadline = Deadline(time_limit)
        heuristic = params.get("heuristic", "h_dtr")
        if budget is None:
            return self._least_peak(graph, heuristic, deadline, start)
        try:
            run = DTRPass(graph, budget, heuristic, deadline)
            schedule = run.run()
        except Stuck as stuck:
            return MethodResult(SolutionStatus.NO_SOLUTION, solve_time_s=time.perf_counter() - start,
                                message=stuck.sentence("DTR", graph, budget), termination=Termination.CONVERGED)
        except OutOfTime:
            return MethodResult(SolutionStatus.NO_SOLUTION, solve_time_s=time.perf_counter() - start,
                                message="the time limit ran out before the DTR pass finished",
                                termination=cut_short())
        sim = simulate(graph, schedule)
        stats = {"heuristic": heuristic, "evictions": run.evictions, "recomputations": sim.recomputations}
        if sim.peak > budget:  # sizes that are not whole numbers, summed in another order than the simulator's
            return MethodResult(SolutionStatus.NO_SOLUTION, solve_time_s=time.perf_counter() - start, stats=stats,
                                termination=Termination.CONVERGED,
                                message=f"the DTR schedule peaks at {memory_text(sim.peak, graph)}, above the budget "
                                        f"{memory_text(budget, graph)}, by "
                                        "rounding of fractional sizes")
        return MethodResult(SolutionStatus.FEASIBLE, schedule, objective=sim.duration,
                            solve_time_s=time.perf_counter() - start, stats=stats, termination=Termination.CONVERGED)

    @staticmethod
    def _least_peak(graph: Graph, heuristic: str, deadline: Deadline, start: float) -> MethodResult:
        """Bisect the budget between the memory floor and the baseline peak; the lowest simulated peak wins."""
        best, rounds, converged = least_peak_of_pass(
            graph, lambda budget: dtr_schedule(graph, budget, heuristic, deadline), deadline, (Stuck,), (OutOfTime,))
        sim = simulate(graph, best)
        termination = Termination.CONVERGED if converged else cut_short()
        return MethodResult(SolutionStatus.FEASIBLE, best, objective=sim.duration,
                            solve_time_s=time.perf_counter() - start,
                            stats={"heuristic": heuristic, "bisection_rounds": rounds}, termination=termination)
