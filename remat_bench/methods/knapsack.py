"""``knapsack``: the production-style answer. Save the forward values a 0/1 knapsack picks, recompute the rest.

This is the idea behind PyTorch's activation-memory budget
(``torch._functorch.config.activation_memory_budget``, `torch/_functorch/partitioners.py`
and `torch/_functorch/_activation_checkpointing/knapsack.py` in torch 2.13): of the forward
values the backward pass reads (the *activations*), save those a 0/1 knapsack picks, at most
a memory capacity, maximising the recomputation time saved; recompute the others in the
backward pass. Here, on any training graph:

- items: the forward values some backward node reads; an item's weight is its memory, its
  value the duration of computing it again (its own duration: like PyTorch's estimate, the
  values it needs again are not charged);
- the knapsack is solved as PyTorch's default ``dp`` solver does, by dynamic programming over
  the capacity in `CAPACITY_STEPS` equal steps (weights rounded up, so a chosen set never
  exceeds the capacity); ``solver=greedy`` takes values by value per byte instead;
- the unsaved values are recomputed through the shared lowering
  (`remat_bench.toolkit.lowering`), each on its own (one-node segments) with whatever it
  needs, before the backward node that reads it; ``lowering=hold`` keeps a recomputed value
  until its last use, ``transient`` frees it after the backward node that needed it (and
  computes it again for later ones), ``best`` tries both;
- PyTorch's knob is a fraction of activation memory, remat-bench's budget a peak: the
  capacity is searched (bisection on the fraction of activation memory saved, ``fraction``
  in stats) for the fastest schedule whose simulated peak fits the budget.

Where it differs from PyTorch: PyTorch first partitions the joint graph by a min cut (which
values cross from forward to backward at all), and then runs the knapsack only over the
values the cut left to be saved or recomputed; this method takes every activation as an item
and lets the lowering decide what a recomputation needs. PyTorch fuses what it recomputes
into the backward graph; here the recomputation order is the lowering's. The schedule is
always simulated: the knapsack's own memory model is not trusted.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from remat_bench.core.graph import Graph, Number
from remat_bench.core.simulate import simulate
from remat_bench.methods.base import Deadline, Method, MethodResult, Param, SolutionStatus, search_ended
from remat_bench.toolkit.lowering import LOWERINGS, Found, Plan, lower_plan, search_knob

# The knapsack's capacity in this many equal steps (PyTorch's dp solver discretises memory too).
CAPACITY_STEPS = 4096
# Fractions of the items' memory tried first, and bisection steps after.
GRID = 64
BISECTION_STEPS = 12


def activations(graph: Graph) -> np.ndarray:
    """The forward values some backward node reads: what the backward pass needs saved or recomputed.

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    np.ndarray
        Their node indices (int), ascending.
    """
    read = np.zeros(graph.n, dtype=bool)
    for b in graph.backward_indices:
        read[list(graph.inputs[b])] = True
    return np.flatnonzero(read & graph.is_forward)


def knapsack_dp(weights: np.ndarray, values: np.ndarray, capacity: float, steps: int = CAPACITY_STEPS) -> np.ndarray:
    """0/1 knapsack by dynamic programming over the capacity in ``steps`` steps; the items chosen (bool).

    Weights are rounded up to whole steps, so the chosen weight never exceeds ``capacity``.

    Parameters
    ----------
    weights : np.ndarray
        Each item's weight (its memory, in the graph's memory units).
    values : np.ndarray
        Each item's value (its duration, in the graph's duration units).
    capacity : float
        The most weight the chosen items may have together, in the weights' units.
    steps : int
        How many equal steps the capacity is divided into (the table's width).

    Returns
    -------
    np.ndarray
        One bool per item, True for those chosen; none when ``capacity`` is not positive.
    """
    k = len(weights)
    if k == 0 or capacity <= 0:
        return np.zeros(k, dtype=bool)
    unit = capacity / steps
    w = np.ceil(np.asarray(weights, dtype=np.float64) / unit - 1e-9).astype(np.int64)
    best = np.zeros(steps + 1)
    take = np.zeros((k, steps + 1), dtype=bool)
    for i in range(k):
        if w[i] > steps:
            continue
        candidate = np.full(steps + 1, -np.inf)
        candidate[w[i]:] = best[:steps + 1 - w[i]] + values[i]
        better = candidate > best
        take[i] = better
        best = np.where(better, candidate, best)
    chosen = np.zeros(k, dtype=bool)
    c = steps
    for i in range(k - 1, -1, -1):  # walk back from the full capacity
        if take[i, c]:
            chosen[i] = True
            c -= w[i]
    return chosen


def knapsack_greedy(weights: np.ndarray, values: np.ndarray, capacity: float) -> np.ndarray:
    """Take items by value per unit of weight while they fit (PyTorch's ``greedy`` solver).

    Parameters
    ----------
    weights : np.ndarray
        Each item's weight (its memory, in the graph's memory units).
    values : np.ndarray
        Each item's value (its duration, in the graph's duration units).
    capacity : float
        The most weight the chosen items may have together, in the weights' units.

    Returns
    -------
    np.ndarray
        One bool per item, True for those chosen.
    """
    order = np.argsort(-(values / np.maximum(weights, 1e-12)), kind="stable")
    chosen = np.zeros(len(weights), dtype=bool)
    used = 0.0
    for i in order.tolist():
        if used + weights[i] <= capacity:
            chosen[i] = True
            used += float(weights[i])
    return chosen


class Knapsack(Method):
    name = "knapsack"
    search_space = "saved sets of forward values, the rest recomputed on demand by the shared lowering"
    description = ("production-style (PyTorch's memory budget): save the activations a 0/1 knapsack picks, "
                   "recompute the rest")
    params = (
        Param("solver", str, "dp", "dp: dynamic programming over the capacity (PyTorch's default); greedy: "
              "value per byte; search: drop by memory per unit of recomputation until the simulated peak fits",
              choices=("dp", "greedy", "search")),
        Param("polish", bool, False, "then save again each dropped value the budget allows, costliest first "
              "(simulated; not in PyTorch)"),
        Param("items", str, "forward", "the values the knapsack chooses among: every forward value (a saved value "
              "no recomputation needs is freed after its last use anyway), or only the activations the backward "
              "pass reads", choices=("forward", "activations")),
        Param("lowering", str, "best", "hold: a recomputed value stays until its last use; transient: freed "
              "after each use; best: both, the fastest that fits", choices=tuple(LOWERINGS)),
    )
    needs_backward = True

    def solve(self, graph: Graph, budget: Number | None, time_limit: float | None,
              **params: Any) -> MethodResult:
        deadline = Deadline(time_limit)
        items = activations(graph) if params["items"] == "activations" else np.asarray(graph.forward_indices)
        weights = graph.memory[items].astype(np.float64)
        values = graph.duration[items].astype(np.float64)
        total = float(weights.sum())
        segments = tuple((int(v),) for v in graph.forward_indices)
        modes = LOWERINGS[params["lowering"]]
        stats: dict[str, Any] = {"activations": len(items), "activation_memory": total}

        def plan_at(fraction: float) -> np.ndarray:
            if params["solver"] == "greedy":
                chosen = knapsack_greedy(weights, values, fraction * total)
            else:
                chosen = knapsack_dp(weights, values, fraction * total)
            return items[chosen]

        best: Found | None = None
        for transient in modes:
            if params["solver"] == "search":
                found = _drop_until_fit(graph, budget, items, segments, transient, deadline)
            else:
                found = self._search(graph, budget, plan_at, segments, transient, deadline)
            if found is not None and (params["polish"] or params["solver"] == "search") and budget is not None:
                found = _save_again(graph, budget, found, segments, deadline)
            if found is not None and (best is None or found[:2] < best[:2]):
                best = found
        if best is None:
            why = ("the time limit ran out before a knapsack capacity tried gave a schedule within the budget"
                   if deadline.expired() else
                   "no knapsack capacity gives a schedule within the budget, even saving nothing")
            return MethodResult(SolutionStatus.NO_SOLUTION, solve_time_s=deadline.elapsed(), stats=stats,
                                termination=search_ended(deadline), message=why)
        duration, _, schedule, fraction, transient = best
        stats.update({"fraction": round(fraction, 6), "lowering": "transient" if transient else "hold"})
        return MethodResult(SolutionStatus.FEASIBLE, schedule, objective=duration, solve_time_s=deadline.elapsed(),
                            stats=stats, termination=search_ended(deadline))

    @staticmethod
    def _search(graph: Graph, budget: Number | None, plan_at: Any, segments: tuple[tuple[int, ...], ...],
                transient: bool, deadline: Deadline) -> Found | None:
        """The capacity (a fraction of the items' memory) whose schedule is fastest within ``budget``
        (``budget`` None: the least peak): `remat_bench.toolkit.lowering.search_knob` over `GRID`
        steps, then `BISECTION_STEPS` bisections."""

        def lowered(fraction: float) -> list[Found]:
            return [_lowered(graph, set(plan_at(fraction).tolist()), segments, transient, fraction)]

        return search_knob(lowered, budget, deadline, GRID, BISECTION_STEPS)



def _lowered(graph: Graph, saved: set[int], segments: tuple[tuple[int, ...], ...], transient: bool,
             fraction: float = float("nan")) -> Found:
    schedule = lower_plan(graph, Plan(frozenset(saved), segments), transient)
    sim = simulate(graph, schedule)
    return sim.duration, sim.peak, schedule, fraction, transient


def _drop_until_fit(graph: Graph, budget: Number | None, items: np.ndarray, segments: tuple[tuple[int, ...], ...],
                    transient: bool, deadline: Deadline) -> Found | None:
    """From every item saved, drop items by memory per unit of duration (most first) until the simulated
    peak fits ``budget`` (``None``: all the way, keeping the least peak seen)."""
    order = sorted(items.tolist(), key=lambda v: -float(graph.memory[v]) / (float(graph.duration[v]) + 1.0))
    saved = set(order)
    current = _lowered(graph, saved, segments, transient, 1.0)
    least = current
    for v in order:
        if budget is not None and current[1] <= budget:
            break
        if deadline.expired():
            break
        saved.discard(v)
        current = _lowered(graph, saved, segments, transient, len(saved) / max(1, len(order)))
        if current[1] < least[1]:
            least = current
    if budget is None:
        return least
    return current if current[1] <= budget else None


def _save_again(graph: Graph, budget: Number, found: Found, segments: tuple[tuple[int, ...], ...],
                deadline: Deadline) -> Found:
    """Save again, costliest first, each forward value the schedule recomputes while the simulated peak
    still fits ``budget`` and the duration falls."""
    _, _, schedule, _, transient = found
    counts = np.bincount(schedule.nodes[schedule.kinds == 0], minlength=graph.n)
    forward = np.asarray(graph.forward_indices, dtype=np.int64)
    recomputed = forward[counts[forward] > 1]
    saved = set(forward.tolist()) - set(recomputed.tolist())
    best = found
    for v in sorted(recomputed.tolist(), key=lambda v: -float(graph.duration[v])):
        if deadline.expired():
            break
        trial = _lowered(graph, saved | {v}, segments, transient, best[3])
        if trial[1] <= budget and trial[0] < best[0]:
            saved.add(v)
            best = trial
    return best
