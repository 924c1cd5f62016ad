"""The eviction pass that greedy and dtr both drive: the input order under a budget, evicting and recomputing.

A pass computes the graph's nodes in their input order. Before each computation it makes
room: while the memory in use (the fixed memory and every resident value) plus the node's
output and workspace is above the budget, it evicts one resident value by its own rule
(`EvictionPass.evict`); a value needed again after its eviction is recomputed on demand, by
its own rule too (`EvictionPass.materialise`). After the last node, outputs evicted along
the way are computed again, every output held in place. The pass gives up (`Stuck`) when
nothing is left to evict and a computation still does not fit, or after 20 n + 1000
computations (its evictions thrash); given a deadline, it stops (`OutOfTime`) once that has
passed, looked at every `DEADLINE_POLL` computations.

The rules are the methods': XLA's cheapest value per byte (`remat_bench.methods.greedy`) and
DTR's heuristic score h(t) (`remat_bench.methods.dtr`).
"""

from __future__ import annotations

from collections.abc import Sequence

from remat_bench.core.budget import memory_text
from remat_bench.core.control import Deadline
from remat_bench.core.graph import Graph, Number
from remat_bench.core.schedule import Schedule, ScheduleBuilder

DEADLINE_POLL = 64  # computations between two looks at the deadline


class Stuck(Exception):
    """The pass cannot go on: nothing left to evict (``need`` does not fit), or thrashing past the cap."""

    def __init__(self, node: int, need: Number, thrashing: bool = False) -> None:
        super().__init__(node, need, thrashing)
        self.node = node
        self.need = need
        self.thrashing = thrashing

    def sentence(self, who: str, graph: Graph, budget: Number, thrashing_at: str = "") -> str:
        """Why ``who``'s pass gave up, in one sentence.

        Parameters
        ----------
        who : str
            The pass's name, as the sentence starts.
        graph : Graph
        budget : Number
            The pass's budget, in memory units.
        thrashing_at : str
            Where its evictions thrash, in words; empty: "the budget" and the amount.

        Returns
        -------
        str
        """
        if self.thrashing:
            at = thrashing_at or f"the budget {memory_text(budget, graph)}"
            return f"{who} gave up after {20 * graph.n + 1000} computations: its evictions thrash at {at}"
        return (f"{who} could not make room for node '{graph.ids[self.node]}': it needs "
                f"{memory_text(self.need, graph)} with everything evictable evicted, above the budget "
                f"{memory_text(budget, graph)}")


class OutOfTime(Exception):
    """The deadline passed (or Ctrl-C) during a pass."""


class EvictionPass:
    """One pass over ``graph`` at ``budget``: the state every eviction rule reads, and the steps they share.

    Per node v:

    - ``remaining[v]``: consumers not yet computed for the first time; v is *directly needed*
      while that is positive or v is an output (`direct`).
    - ``resident[v]``: v's value is in memory; ``used`` is the memory they and the fixed memory hold.
    - ``pinned[v]``: computations under way that read v; a pinned value is never evicted.
    - ``evicted[v]``: v is not resident and still needed; ``holds[v]`` counts the evicted values
      that read it (v is needed to recompute them, `needed`).

    ``now`` is the position in the input order of the node computed for the first time (n once
    the outputs are computed again), ``computes`` the computations so far, recomputations
    included. A subclass gives the rule: `step`, `materialise` and `evict`, and extends `compute`
    and `free` with its own bookkeeping.
    """

    def __init__(self, graph: Graph, budget: Number, inputs: Sequence[Sequence[int]],
                 consumers: Sequence[Sequence[int]], deadline: Deadline | None = None) -> None:
        n = graph.n
        self.n, self.budget, self.deadline = n, budget, deadline
        self.mem: list[Number] = graph.memory.tolist()
        self.dur: list[Number] = graph.duration.tolist()
        self.ws: list[Number] = graph.workspace.tolist()
        self.inputs = inputs
        self.consumers = consumers
        self.is_output: list[bool] = graph.is_output.tolist()
        self.output_indices = graph.output_indices
        self.remaining = [len(c) for c in consumers]
        self.resident = [False] * n
        self.pinned = [0] * n
        self.evicted = [False] * n
        self.holds = [0] * n
        self.used: Number = graph.fixed_memory
        self.now = 0
        self.computes = 0
        self.max_computes = 20 * n + 1000  # past this, evictions are thrashing: give up
        self.out = ScheduleBuilder()

    def run(self) -> Schedule:
        """Every node in input order, then the outputs evicted along the way computed again.

        Returns
        -------
        Schedule
            The pass's computations and frees.

        Raises
        ------
        Stuck
            Nothing is left to evict and a computation still does not fit the budget, or the pass made more
            than `max_computes` computations (thrashing).
        OutOfTime
            The deadline passed.
        """
        for target in range(self.n):
            self.now = target
            self.step(target)
        self.now = self.n
        for o in self.output_indices:
            self.pinned[o] += 1
        for o in self.output_indices:
            if not self.resident[o]:
                self.materialise(o)
        return self.out.build()

    # ------------------------------------------------------------------ the rule's steps

    def step(self, target: int) -> None:
        """Compute ``target``, the next node in input order, for the first time; then free what nothing reads.

        Parameters
        ----------
        target : int
        """
        raise NotImplementedError

    def materialise(self, target: int) -> None:
        """Compute ``target``, recomputing first the evicted inputs it needs; nothing when it is resident.

        Parameters
        ----------
        target : int
        """
        raise NotImplementedError

    def evict(self) -> bool:
        """Evict one resident, unpinned value by the rule.

        Returns
        -------
        bool
            False when nothing can be evicted.
        """
        raise NotImplementedError

    def room_made(self) -> None:
        """`make_room` has ended (made room or raised): the rule's bookkeeping of one search for room."""

    # ------------------------------------------------------------------ needs

    def direct(self, v: int) -> bool:
        """Whether ``v`` is directly needed: a consumer is yet to be computed for the first time, or it is an output.

        Parameters
        ----------
        v : int

        Returns
        -------
        bool
        """
        return self.remaining[v] > 0 or self.is_output[v]

    def needed(self, v: int) -> bool:
        """Whether ``v`` is read again: directly (`direct`), or to recompute an evicted value that reads it.

        Parameters
        ----------
        v : int

        Returns
        -------
        bool
        """
        return self.direct(v) or self.holds[v] > 0

    # ------------------------------------------------------------------ computing and freeing

    def make_room(self, v: int) -> None:
        """Evict by the rule until v's output and workspace fit; raise `Stuck` if they cannot.

        Parameters
        ----------
        v : int
            The node about to be computed.

        Raises
        ------
        Stuck
            Nothing is left to evict and they still do not fit.
        """
        need = self.mem[v] + self.ws[v]
        try:
            while self.used + need > self.budget:
                if not self.evict():
                    raise Stuck(v, self.used + need)
        finally:
            self.room_made()

    def compute(self, v: int) -> None:
        """One computation of ``v`` (its inputs resident and pinned), after making room for it.

        Parameters
        ----------
        v : int

        Raises
        ------
        Stuck
            No room can be made, or the pass has reached its cap of computations (thrashing).
        OutOfTime
            The deadline passed (looked at every `DEADLINE_POLL` computations).
        """
        if self.computes >= self.max_computes:
            raise Stuck(v, self.used, thrashing=True)
        if self.deadline is not None and self.computes % DEADLINE_POLL == 0 and self.deadline.expired():
            raise OutOfTime
        self.make_room(v)
        self.out.compute(v)
        self.computes += 1
        self.resident[v] = True
        self.used += self.mem[v]

    def free(self, v: int) -> None:
        """``v`` leaves memory.

        Parameters
        ----------
        v : int
            A resident value.
        """
        self.resident[v] = False
        self.used -= self.mem[v]
        self.out.free(v)
