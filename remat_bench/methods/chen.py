"""Chen et al. 2016, "Training Deep Nets with Sublinear Memory Cost" (arXiv:1604.06174).

Checkpoints may only be placed on *separators* of the forward graph: nodes v
such that no forward edge jumps over v in the input order, so that the
segments between consecutive checkpoints are independent (for a chain, every
node; for a ResNet, the block outputs).

- ``variant=sqrt`` (Chen section 4.1): split the forward pass into about
  sqrt(n) segments: among the separators, keep the ones nearest to the
  positions i * n / ceil(sqrt(n)).
- ``variant=greedy`` (Chen section 4.2, the memory-planning-with-budget loop):
  walk the forward pass accumulating memory and close a segment at the first
  separator where the running total passes a threshold b. Chen searches b
  around sqrt(x * y); here b runs over a geometric grid from the smallest
  value size to the whole forward pass, every resulting plan is lowered and
  simulated, and the cheapest schedule that fits the budget is kept (with
  ``--budget min``, the lowest peak).

The plans go through the shared lowering (`remat_bench.toolkit.lowering`). The
separator test is written out rather than taken from networkx's
``articulation_points``: undirected articulation points include the cut
vertices of side branches, which do not split the forward pass into
independent segments.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

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
    search_ended,
)
from remat_bench.toolkit.lowering import LoweringError, Plan, lower_plan, plan_from_checkpoints


def separators(graph: Graph) -> list[int]:
    """Forward nodes that every forward edge from before them to after them passes through.

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    list of int
        The separators' indices in file order; the last forward node is left out (the loss reads it at once,
        so keeping it is not a choice).
    """
    forward = graph.forward_indices
    position = np.full(graph.n, -1, dtype=np.int64)
    position[forward] = np.arange(len(forward))
    reach = np.arange(len(forward))  # furthest forward position each node feeds (itself if none)
    for p, v in enumerate(forward):
        for w in graph.consumers[v]:
            if graph.is_forward[w]:
                reach[p] = max(reach[p], position[w])
    before = np.maximum.accumulate(np.concatenate([[-1], reach[:-1]]))
    is_sep = before <= np.arange(len(forward))
    # The last forward node is a sink the loss reads at once: keeping it is not a choice.
    return [forward[p] for p in range(len(forward) - 1) if is_sep[p]]


def sqrt_checkpoints(graph: Graph, candidates: list[int]) -> list[int]:
    """About sqrt(n) checkpoints, evenly spread over the forward pass.

    Parameters
    ----------
    graph : Graph
    candidates : list of int
        The nodes a checkpoint may be placed on (`separators`), in file order.

    Returns
    -------
    list of int
        For each of the ceil(sqrt(n)) - 1 inner positions i * n / ceil(sqrt(n)) (n forward nodes), the
        candidate nearest to it, without repeats, sorted; empty when there are no candidates.
    """
    forward = graph.forward_indices
    if not candidates:
        return []
    k = math.ceil(math.sqrt(len(forward)))
    position = {v: p for p, v in enumerate(forward)}
    cand_pos = np.array([position[v] for v in candidates])
    chosen = set()
    for i in range(1, k):
        target = i * len(forward) / k
        chosen.add(candidates[int(np.argmin(np.abs(cand_pos - target)))])
    return sorted(chosen)


def greedy_checkpoints(graph: Graph, candidates: list[int], threshold: float) -> list[int]:
    """Chen's budgeted loop: close a segment at a separator once its memory passes ``threshold``.

    Parameters
    ----------
    graph : Graph
    candidates : list of int
        The nodes a segment may close at (`separators`).
    threshold : float
        Chen's b, in the graph's memory units: a segment closes at the first candidate where the
        memory of the forward nodes since the last checkpoint exceeds it.

    Returns
    -------
    list of int
        The checkpoints, in file order.
    """
    is_candidate = set(candidates)
    chosen = []
    running = 0
    for v in graph.forward_indices:
        running += graph.memory[v]
        if v in is_candidate and running > threshold:
            chosen.append(v)
            running = 0
    return chosen


class Chen(Method):
    name = "chen"
    search_space = "Chen's forward checkpoint plans, lowered by the shared lowering"
    description = "Chen et al. 2016: sqrt(n) checkpoints on separators, or the budget-greedy variant"
    needs_backward = True
    member = Membership(Role.FAST, rank=3)
    params = (
        Param("variant", str, "greedy", "sqrt: about sqrt(n) even segments; greedy: search Chen's threshold b",
              choices=("greedy", "sqrt")),
        Param("grid", int, 48, "number of thresholds b the greedy variant tries", minimum=1, maximum=10_000),
    )

    def solve(self, graph: Graph, budget: Number | None, time_limit: float | None,
              **params: Any) -> MethodResult:
        start = time.perf_counter()
        deadline = Deadline(time_limit)
        candidates = separators(graph)
        plans: dict[frozenset[int], Plan] = {}

        def add(checkpoints: list[int]) -> None:
            key = frozenset(checkpoints)
            if key not in plans:
                plans[key] = plan_from_checkpoints(graph, checkpoints)

        add(sqrt_checkpoints(graph, candidates))
        if params["variant"] == "greedy":
            sizes = graph.memory[graph.forward_indices]
            low = max(float(sizes[sizes > 0].min()) if (sizes > 0).any() else 1.0, 1.0)
            high = max(float(sizes.sum()), low)
            for b in np.geomspace(low / 2, high, params["grid"]):
                add(greedy_checkpoints(graph, candidates, float(b)))
            add([])  # recompute everything from the inputs
            add(candidates)  # keep every separator
        add(graph.forward_indices)  # no checkpointing at all: the degenerate plan, never above baseline

        best: tuple[tuple, Schedule, Any] | None = None
        tried = 0
        try:
            for plan in plans.values():
                if tried and deadline.expired():
                    break
                schedule = lower_plan(graph, plan)
                sim = simulate(graph, schedule)
                tried += 1
                fits = budget is None or sim.peak <= budget
                if budget is None:
                    key = (0, sim.peak, sim.duration)
                else:
                    key = (0 if fits else 1, sim.duration if fits else sim.peak, sim.peak)
                if best is None or key < best[0]:
                    best = (key, schedule, (sim, plan))
        except LoweringError as exc:
            return MethodResult(SolutionStatus.NO_SOLUTION, message=str(exc), termination=Termination.NOT_APPLICABLE)
        assert best is not None
        _, schedule, (sim, plan) = best
        stats = {
            "separators": len(candidates),
            "checkpoints": len(plan.kept),
            "segments": len(plan.segments),
            "plans_tried": tried,
        }
        elapsed = time.perf_counter() - start
        if budget is not None and sim.peak > budget:
            return MethodResult(
                SolutionStatus.NO_SOLUTION, schedule, objective=sim.duration, solve_time_s=elapsed, stats=stats,
                termination=search_ended(deadline),
                message=(f"chen's lowest peak over {tried} plans is {memory_text(sim.peak, graph)}, above the budget "
                         f"{memory_text(budget, graph)}"),
            )
        return MethodResult(SolutionStatus.FEASIBLE, schedule, objective=sim.duration, solve_time_s=elapsed,
                            stats=stats, termination=search_ended(deadline))
