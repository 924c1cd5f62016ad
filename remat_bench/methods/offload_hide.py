"""``offload-hide``: offload only what the copies hide, recompute the rest.

The rule production stacks follow when they mix host offloading with recomputation (XLA's host
offloading, torchtitan's greedy choice of what to offload): a value held across a gap between two
readers goes to host memory only where both copies fit in the compute time of the gap, so that no
computation waits for them; the values most expensive to recompute for their size go first; what
the copies cannot hide is recomputed.

Here, for a budget B (docs/design.md section 3, "Offload", for the model):

1. **A recompute-only schedule at B' >= B.** At B' equal to the baseline peak, the baseline
   (every node once in input order); below it, the input order with its memory peaks shaved to B'
   (`remat_bench.toolkit.improve.shaved_order`, the ``shave`` method's schedule: a recomputation
   inserted wherever memory peaks, those not needed undone; it answers every B', above it where it
   cannot shave further), each value freed after its last use. It comes from the toolkit: methods do
   not run one another.
2. **Offloads it hides** (`hide`). Its gaps (`remat_bench.toolkit.offload.held_gaps`: a value held
   across computations that do not read it) are ranked by recompute cost per byte, the highest
   first. While the simulated peak is above B, the first gap in that order whose copies can be hidden
   (`OffloadPlan.hidden_reload`: the offload right after the earlier step, the reload at the latest
   computation from which the copy in still ends by the time the reader would start were nothing
   waiting, given what the copy engines already carry) and which would take its value away from a
   step at the peak is tried: it is kept when the simulator confirms that it lowers the peak (or the
   number of steps at it) and that computations wait at most ``max_wait`` of the schedule's duration
   in all; each gap is tried once either way.
3. **The search over B'.** B' = the baseline peak first (no recomputation at all when the copies hide
   enough), then B' = B, then ``rounds`` bisection steps between the highest B' that fit and the
   lowest that did not: a higher B' recomputes less, so the fastest schedule sits near the highest
   B' the copies can bridge. The fastest schedule within B wins.

Where it differs from the production rules: they decide offloads at compile time from estimated
times; here every offload kept is one the simulator confirmed.

Statuses: ``feasible`` with the fastest schedule within the budget; ``no_solution`` with a sentence
when none fits. Never ``optimal``; no ``min``. It runs only on graphs with a host link (``transfer``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from remat_bench.core.baseline import baseline
from remat_bench.core.budget import memory_text
from remat_bench.core.cleanup import place_frees
from remat_bench.core.graph import Graph, Number
from remat_bench.core.schedule import Schedule
from remat_bench.methods.base import (
    Deadline,
    Membership,
    Method,
    MethodResult,
    Param,
    Role,
    SolutionStatus,
    search_ended,
)
from remat_bench.toolkit.improve import shaved_order
from remat_bench.toolkit.offload import Move, OffloadPlan, held_gaps, host_link_missing, recompute_cost_per_byte

# The share of the time left that shaving the input order to one B' may take.
BASE_SHARE = 0.5
# Waits this small, relative to the schedule's duration, are rounding of the copy times, not waits.
WAIT_ROUNDING = 1e-9


def hide(graph: Graph, base: Schedule, budget: Number, deadline: Deadline, max_wait: float = 0.0) -> OffloadPlan:
    """Offload the gaps of ``base`` whose copies the computations hide, the most costly to recompute per
    byte first, while the simulated peak is above ``budget``.

    Parameters
    ----------
    graph : Graph
        A graph with a host link (``transfer``).
    base : Schedule
        A valid schedule that moves nothing, its frees placed.
    budget : Number
        The peak to reach, in memory units.
    deadline : Deadline
        When to stop adding offloads (the plan so far is returned).
    max_wait : float
        The most time computations may wait for copies in all, as a fraction of ``base``'s duration.

    Returns
    -------
    OffloadPlan
        The moves kept and their simulated schedule; its peak may still be above ``budget``.
    """
    plan = OffloadPlan.of(graph, base)
    allowed = (max_wait + WAIT_ROUNDING) * plan.sim.duration
    gaps = sorted(held_gaps(graph, base), key=lambda g: (-recompute_cost_per_byte(graph, g), -g.memory, g.reader))
    left = list(range(len(gaps)))
    while plan.sim.peak > budget and left and not deadline.expired():
        kept = False
        for k in list(left):
            gap = gaps[k]
            reload_before = plan.hidden_reload(gap)
            if reload_before is None:  # the engines only get busier: it will not hide later either
                left.remove(k)
                continue
            if not plan.covers(gap, reload_before, plan.peak_steps):
                continue
            left.remove(k)
            trial = plan.with_moves((*plan.moves, Move(gap, reload_before)))
            if trial.sim.valid and trial.sim.wait <= allowed and trial.pressure < plan.pressure:
                plan, kept = trial, True
                break
            if deadline.expired():
                break
        if not kept:
            break
    return plan


@dataclass
class _Probe:
    """One B' tried and the plan offloading made of its recompute-only schedule."""

    level: Number
    plan: OffloadPlan

    def record(self) -> dict[str, Any]:
        sim = self.plan.sim
        return {"level": self.level, "peak": sim.peak, "duration": sim.duration, "offloads": sim.offloads,
                "recomputations": sim.recomputations}


class OffloadHide(Method):
    name = "offload-hide"
    production = True
    offloads = True
    supports_min = False
    # A member of auto on a graph with a host link, early and weighing four: with a link it beats the
    # recompute-only members where the copies hide (docs/benchmarks.md, "Keep, recompute or offload"),
    # and its search (the looser budgets B') needs several seconds on 500-node graphs.
    member = Membership(Role.FAST, rank=2, weight=4.0)
    search_space = "a recompute-only schedule with the offloads its computations hide"
    description = ("offload only what the copies hide, recompute the rest (XLA's host offloading, torchtitan's "
                   "greedy): hidden offloads, the costliest to recompute per byte first, over a recompute-only "
                   "schedule at a looser budget")
    params = (
        Param("rounds", int, 5, "bisection steps on B' between the budget and the baseline peak", minimum=0,
              maximum=50),
        Param("max_wait", float, 0.0, "the most time computations may wait for copies in all, as a fraction of "
              "the recompute-only schedule's duration (0: every copy hidden)", minimum=0.0, maximum=1.0),
    )

    @classmethod
    def skip(cls, graph: Graph, budget: Number | None) -> str | None:
        return host_link_missing(graph) or super().skip(graph, budget)

    def solve(self, graph: Graph, budget: Number | None, time_limit: float | None,
              **params: Any) -> MethodResult:
        assert budget is not None  # supports_min is False: the pipeline never asks for min
        deadline = Deadline(time_limit)
        params = self.parse_params(params)
        top = baseline(graph).peak
        probes: list[_Probe] = []
        best: _Probe | None = None

        def probe(level: Number) -> bool:
            """Try B' = ``level``; whether offloading took its schedule within the budget."""
            nonlocal best
            plan = hide(graph, self._base(graph, level, top, deadline), budget, deadline, params["max_wait"])
            probes.append(_Probe(level, plan))
            if plan.sim.peak > budget:
                return False
            if best is None or plan.sim.duration < best.plan.sim.duration:
                best = probes[-1]
                self.context.report(plan.schedule)
            return True

        if not probe(top) and top > budget:
            low, high = budget, top
            probe(low)
            integral = graph.memory.dtype.kind == "i" and isinstance(budget, int)
            for _ in range(params["rounds"]):
                mid = (low + high) // 2 if integral else (low + high) / 2
                if deadline.expired() or not low < mid < high:
                    break
                if probe(mid):
                    low = mid
                else:
                    high = mid
        stats: dict[str, Any] = {"levels": [p.record() for p in probes]}
        if best is None:
            return MethodResult(SolutionStatus.NO_SOLUTION, solve_time_s=deadline.elapsed(), stats=stats,
                                termination=search_ended(deadline),
                                message=_none_fits(graph, budget, probes, deadline.ran_out))
        sim = best.plan.sim
        stats.update(level=best.level, offloads=sim.offloads, recomputations=sim.recomputations, wait=sim.wait)
        schedule = best.plan.schedule.with_meta(method=self.name, params=params, budget=budget)
        return MethodResult(SolutionStatus.FEASIBLE, schedule, objective=sim.duration,
                            solve_time_s=deadline.elapsed(), stats=stats, termination=search_ended(deadline))

    @staticmethod
    def _base(graph: Graph, level: Number, top: Number, deadline: Deadline) -> Schedule:
        """The recompute-only schedule at B' = ``level``: the baseline at ``top`` (its peak), else the input order
        shaved to ``level``; each value freed after its last use."""
        if level >= top:
            nodes = np.arange(graph.n, dtype=np.int64)
        else:
            left = deadline.remaining()
            nodes = shaved_order(graph, level, Deadline(None if left is None else BASE_SHARE * left))
        return place_frees(graph, nodes, np.zeros(len(nodes), dtype=np.int64))


def _none_fits(graph: Graph, budget: Number, probes: list[_Probe], cut_short: bool) -> str:
    """The sentence for a search that found nothing within ``budget`` (``cut_short``: by the time limit)."""
    lowest = min(probes, key=lambda p: p.plan.sim.peak)
    return (f"offloading what the copies hide took the peak down to {memory_text(lowest.plan.sim.peak, graph)} at "
            f"best (from a recompute-only schedule at {memory_text(lowest.level, graph)}), above the budget "
            f"{memory_text(budget, graph)}" + ("; the time limit ran out before the search ended" if cut_short else ""))
