"""``offload-all``: offload every activation, then bring back what the budget does not need offloaded.

The rule of DeepSpeed's DeepCompile offloading pass, which moves the activations the backward pass
reads to host memory and back rather than recompute them: memory first, copy time second. Here, over
the baseline schedule (every node once in input order; nothing is recomputed):

1. **Offload everything** (`offload_everything`). Every gap (`remat_bench.toolkit.offload.held_gaps`:
   a value held across computations that do not read it) whose value is a forward value and whose
   reader a backward node (``scope=activations``; on a graph without backward nodes, and with
   ``scope=all``, every gap) gets an offload right after its earlier step and a reload right before
   its reader: each value away the longest it can be. A simulated peak above the budget is
   ``no_solution``, with the peak reached.
2. **Just in time** (`place_reloads`). The reloads are placed again one after another, in the order
   of their readers: each at the latest computation from which its copy in ends by the time its
   reader would start were nothing waiting, given what the engines carry
   (`OffloadPlan.hidden_reload`), where the simulated peak still fits the budget; where no
   computation hides it, it stays before its reader (the reader waits).
3. **Bring back** (`bring_back`). The moves are undone one at a time, the largest value first (of
   equal sizes, the one with the least compute time to hide its copies first), each kept undone when
   the simulated peak still fits the budget; then the reloads left are placed just in time again.
4. **Prefetch** (`prefetch`). Each reload its reader still waits for is moved to the earliest
   computation before which the simulated peak still fits the budget (bisection over the computations
   issued once its copy out has ended), kept there when the schedule is faster.

Where it differs from DeepCompile: its pass decides from profiled times in the compiled graph; here
every plan is scored by the simulator, and the order of the copies on each engine is the step order.

Statuses: ``feasible`` when the peak fits; ``no_solution`` with the peak offloading everything reached
when it does not. Never ``optimal``; no ``min``. It runs only on graphs with a host link (``transfer``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from remat_bench.core.baseline import baseline_schedule
from remat_bench.core.budget import memory_text
from remat_bench.core.graph import Graph, Number
from remat_bench.core.schedule import COMPUTE
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
from remat_bench.toolkit.offload import Gap, Move, OffloadPlan, held_gaps, host_link_missing

SCOPES = ("activations", "all")


def offloaded_gaps(graph: Graph, gaps: list[Gap], nodes: np.ndarray, scope: str) -> list[Gap]:
    """The gaps ``scope`` offloads: ``activations``, those from a forward value to a backward reader (every
    gap on a graph without backward nodes); ``all``, every gap.

    Parameters
    ----------
    graph : Graph
    gaps : list of Gap
        Gaps of a schedule (`held_gaps`).
    nodes : np.ndarray
        That schedule's step nodes.
    scope : str
        One of `SCOPES`.

    Returns
    -------
    list of Gap
    """
    if scope == "all" or not graph.has_backward:
        return gaps
    forward = graph.is_forward
    return [g for g in gaps if forward[g.value] and not forward[nodes[g.reader]]]


def offload_everything(plan: OffloadPlan, gaps: list[Gap]) -> OffloadPlan:
    """Every gap in ``gaps`` offloaded right after its earlier step and reloaded right before its reader: the
    value away the longest each can be.

    Parameters
    ----------
    plan : OffloadPlan
        A plan without moves over the schedule ``gaps`` come from.
    gaps : list of Gap

    Returns
    -------
    OffloadPlan
    """
    return plan.with_moves([Move(g, g.reader) for g in gaps])


def place_reloads(plan: OffloadPlan, budget: Number, deadline: Deadline) -> OffloadPlan:
    """Each reload placed just in time, in the order of the readers (the reloads before one are in place when
    it is placed): at the latest computation from which its copy in is hidden (`OffloadPlan.hidden_reload`),
    where the simulated peak still fits ``budget`` there; else where it was.

    Parameters
    ----------
    plan : OffloadPlan
        A plan whose simulated peak fits ``budget``.
    budget : Number
    deadline : Deadline
        Past it the reloads not yet placed stay where they were.

    Returns
    -------
    OffloadPlan
        Its peak within ``budget``.
    """
    order = sorted(range(len(plan.moves)), key=lambda m: (plan.moves[m].gap.reader, plan.moves[m].gap.value))
    for m in order:
        if deadline.expired():
            break
        gap = plan.moves[m].gap
        hidden = plan.hidden_reload(gap, moving=m)
        if hidden is None or hidden == plan.moves[m].reload_before:
            continue
        trial = _with_reload(plan, m, hidden)
        if trial.sim.valid and trial.sim.peak <= budget:
            plan = trial
    return plan


def _with_reload(plan: OffloadPlan, m: int, reload_before: int) -> OffloadPlan:
    """``plan`` with move ``m``'s reload right before ``base``'s step ``reload_before`` instead."""
    moves = list(plan.moves)
    moves[m] = Move(moves[m].gap, reload_before)
    return plan.with_moves(moves)


def bring_back(plan: OffloadPlan, budget: Number, deadline: Deadline) -> OffloadPlan:
    """Undo the moves one at a time, the largest value first, keeping each undone while the peak fits ``budget``.

    Parameters
    ----------
    plan : OffloadPlan
        A plan whose simulated peak fits ``budget``.
    budget : Number
    deadline : Deadline

    Returns
    -------
    OffloadPlan
        Its peak within ``budget``.
    """
    order = sorted(plan.moves, key=lambda m: (-m.gap.memory, m.gap.window, m.gap.reader, m.gap.value))
    for move in order:
        if deadline.expired():
            break
        trial = plan.with_moves([m for m in plan.moves if m != move])
        if trial.sim.valid and trial.sim.peak <= budget:
            plan = trial
    return plan


def prefetch(plan: OffloadPlan, budget: Number, deadline: Deadline) -> OffloadPlan:
    """Move each reload its reader waits for to the earliest computation at which the peak still fits ``budget``,
    in the order of the readers, where that makes the schedule faster.

    Parameters
    ----------
    plan : OffloadPlan
        A plan whose simulated peak fits ``budget``.
    budget : Number
    deadline : Deadline

    Returns
    -------
    OffloadPlan
        Its peak within ``budget``, its duration at most ``plan``'s.
    """
    computes = np.flatnonzero(plan.base.kinds == COMPUTE)  # every trial plan keeps this base
    for m in sorted(range(len(plan.moves)), key=lambda m: (plan.moves[m].gap.reader, plan.moves[m].gap.value)):
        if deadline.expired():
            break
        move = plan.moves[m]
        if plan.copied_in(m) <= plan.issue(move.gap.reader):
            continue  # hidden already
        out_end = plan.copied_out(m)
        between = computes[(computes > move.gap.after) & (computes < move.reload_before)]
        earlier = [int(q) for q in between if plan.issue(int(q)) >= out_end]  # sooner ones only hold memory longer
        if not earlier:
            continue

        low, high, best = 0, len(earlier), None  # the earliest fitting position among earlier[low:high]
        while low < high and not deadline.expired():
            mid = (low + high) // 2
            trial = _with_reload(plan, m, earlier[mid])
            if trial.sim.valid and trial.sim.peak <= budget:
                best, high = trial, mid
            else:
                low = mid + 1
        if best is not None and best.sim.duration < plan.sim.duration:
            plan = best
    return plan


class OffloadAll(Method):
    name = "offload-all"
    production = True
    offloads = True
    # A member of auto on a graph with a host link, first: its rule costs seconds and, where the link is
    # fast, no recompute-only plan comes near it.
    member = Membership(Role.FAST, rank=1, weight=2.0)
    supports_min = False
    search_space = "the baseline order with offloads of its activations, no recomputation"
    description = ("offload every activation, then bring back the largest while the budget holds "
                   "(DeepSpeed DeepCompile's rule; no recomputation)")
    params = (
        Param("scope", str, "activations", "what is offloaded: activations (forward values held until a backward "
              "reader; every held value on a graph without backward nodes) or all (every value held across "
              "computations that do not read it)", choices=SCOPES),
    )

    @classmethod
    def skip(cls, graph: Graph, budget: Number | None) -> str | None:
        return host_link_missing(graph) or super().skip(graph, budget)

    def solve(self, graph: Graph, budget: Number | None, time_limit: float | None,
              **params: Any) -> MethodResult:
        assert budget is not None  # supports_min is False: the pipeline never asks for min
        deadline = Deadline(time_limit)
        params = self.parse_params(params)
        base = baseline_schedule(graph)
        gaps = offloaded_gaps(graph, held_gaps(graph, base), base.nodes, params["scope"])
        plan = offload_everything(OffloadPlan.of(graph, base), gaps)
        stats: dict[str, Any] = {"offloaded_first": len(gaps), "peak_offloaded_first": plan.sim.peak}
        if plan.sim.peak > budget:
            return MethodResult(
                SolutionStatus.NO_SOLUTION, solve_time_s=deadline.elapsed(), stats=stats,
                termination=search_ended(deadline),
                message=(f"offloading every {'activation' if params['scope'] == 'activations' else 'held value'} "
                         f"({len(gaps)}) reached a peak of {memory_text(plan.sim.peak, graph)}, above the budget "
                         f"{memory_text(budget, graph)}"))
        plan = place_reloads(plan, budget, deadline)
        plan = place_reloads(bring_back(plan, budget, deadline), budget, deadline)
        plan = prefetch(plan, budget, deadline)
        sim = plan.sim
        stats.update(offloads=sim.offloads, wait=sim.wait)
        schedule = plan.schedule.with_meta(method=self.name, params=params, budget=budget)
        return MethodResult(SolutionStatus.FEASIBLE, schedule, objective=sim.duration,
                            solve_time_s=deadline.elapsed(), stats=stats, termination=search_ended(deadline))
