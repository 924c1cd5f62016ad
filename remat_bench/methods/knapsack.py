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

from collections.abc import Callable
from typing import Any

import numpy as np

from remat_bench.core.graph import Graph, Number
from remat_bench.core.schedule import COMPUTE, Schedule
from remat_bench.core.simulate import simulate
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
from remat_bench.toolkit.blocks import find_blocks
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
    production = True
    search_space = "saved sets of forward values, the rest recomputed on demand by the shared lowering"
    description = ("production-style (PyTorch's memory budget): save the activations a 0/1 knapsack picks, "
                   "recompute the rest")
    # Inside auto its simulator-guided search: it reaches far tighter budgets than the default, PyTorch's
    # plain knapsack (the production answer).
    member = Membership(Role.FAST, rank=6, params={"solver": "search"})
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
        Param("exchange", bool, True, "search: then save one more value at a time and drop the cheapest saved "
              "values that free its memory at the peak, while that is faster"),
        Param("blocks", bool, True, "search: decide one place in every repeated block at once (the graph's "
              "identical layers, found from its structure), then value by value"),
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

        singles = [[int(v)] for v in items]
        blocks = find_blocks(graph) if params["solver"] == "search" and params["blocks"] else None
        groups = singles if blocks is None else blocks.classes(items)
        if blocks is not None:
            stats["blocks"] = {"period": blocks.period, "copies": blocks.copies}
        save_again = (params["polish"] or params["solver"] == "search") and budget is not None
        best: Found | None = None
        for transient in modes:
            if params["solver"] == "search":
                found = _drop_until_fit(graph, budget, groups, segments, transient, deadline)
            else:
                found = self._search(graph, budget, plan_at, segments, transient, deadline)
            if found is not None and save_again and budget is not None:
                if self.context.report(found[2]):
                    best = found
                    break
                found = _save_again(graph, budget, found, singles, segments, deadline)
            if found is not None and (best is None or found[:2] < best[:2]):
                best = found
                if self.context.report(found[2]):
                    break
        if best is not None and params["solver"] == "search" and params["exchange"] and budget is not None \
                and not deadline.expired():
            best = _exchange(graph, budget, best, segments, deadline, self.context.report)
        if best is None:
            why = ("the time limit ran out before a knapsack capacity tried gave a schedule within the budget"
                   if deadline.expired() else
                   # Not "even saving nothing": with recomputed values held until their last use, saving
                   # nothing holds nearly everything at once, so the walk's end is not its least peak.
                   "no knapsack capacity tried, from every value saved to none, gives a schedule within the "
                   "budget")
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


def _drop_until_fit(graph: Graph, budget: Number | None, groups: list[list[int]],
                    segments: tuple[tuple[int, ...], ...], transient: bool, deadline: Deadline) -> Found | None:
    """From every item saved, drop groups of items by memory per unit of duration (most first) until the
    simulated peak fits ``budget`` (``None``: all the way, keeping the least peak seen). A group is one
    item, or the items of one place in every repeated block (`remat_bench.toolkit.blocks`), ranked by
    its first item.

    Under a budget the walk starts at the first count whose forward pass fits (`_forward_fits`, exact
    without lowering a plan): no fewer dropped can fit. The group whose drop makes the plan fit is then
    walked again value by value, so that with repeated blocks the walk takes a block's places, not every
    value, and still stops at the first value that makes it fit.
    """
    order = sorted(groups, key=lambda g: -float(graph.memory[g[0]]) / (float(graph.duration[g[0]]) + 1.0))
    saved = {v for g in order for v in g}
    total = max(1, len(saved))
    current = _lowered(graph, saved, segments, transient, 1.0)
    least = current
    start = 0 if budget is None or current[1] <= budget else _forward_fits(graph, current[2], order, budget)
    for g in order[:start]:
        saved.difference_update(g)
    if start:
        current = _lowered(graph, saved, segments, transient, len(saved) / total)
    for g in order[start:]:
        if budget is not None and current[1] <= budget:
            break
        if deadline.expired():
            break
        before = current
        saved.difference_update(g)
        current = _lowered(graph, saved, segments, transient, len(saved) / total)
        if current[1] < least[1]:
            least = current
        if budget is not None and current[1] <= budget and len(g) > 1:
            # The group that made it fit, value by value: fewer of its values dropped may fit too.
            saved.update(g)
            current = before
            for v in g:
                saved.discard(v)
                current = _lowered(graph, saved, segments, transient, len(saved) / total)
                if current[1] <= budget or deadline.expired():
                    break
    if budget is None:
        return least
    return current if current[1] <= budget else None


def _forward_fits(graph: Graph, schedule: Schedule, order: list[list[int]], budget: Number) -> int:
    """How many groups of ``order`` must be dropped, in that order, before the forward pass of the lowered
    plan fits ``budget`` (``len(order)`` when it never does). ``schedule`` is the plan that saves every
    value of ``order``.

    The forward pass of a lowered plan computes the forward nodes once in file order; a value dropped
    from the saved set is freed after its last forward reader instead of being held into the backward
    pass, which takes exactly its memory off every later forward step. So the forward peak after each
    drop follows from the saved plan's steps alone.

    Parameters
    ----------
    graph : Graph
    schedule : Schedule
        The lowered plan saving every value of ``order``.
    order : list of list of int
        The groups of values in the order they are dropped.
    budget : Number

    Returns
    -------
    int
        The least count whose forward pass fits.
    """
    sim = simulate(graph, schedule)
    is_compute = schedule.kinds == COMPUTE
    steps = np.flatnonzero(is_compute)
    nodes = schedule.nodes[steps]
    in_forward = graph.is_forward[nodes]
    forward_steps = len(nodes) if in_forward.all() else int(np.argmin(in_forward))
    memory = sim.step_memory[steps[:forward_steps]].astype(np.float64)
    if not forward_steps or memory.max() <= budget:
        return 0
    position = np.full(graph.n, -1, dtype=np.int64)
    position[nodes[:forward_steps]] = np.arange(forward_steps)
    # Held into the backward pass by the saved plan: not freed before the first backward step.
    end = int(steps[forward_steps]) if forward_steps < len(steps) else len(is_compute)
    held = np.zeros(graph.n, dtype=bool)
    held[graph.forward_indices] = True
    held[schedule.nodes[:end][~is_compute[:end]]] = False
    for k, group in enumerate(order):
        for v in group:
            readers = [int(position[w]) for w in graph.consumers[v] if graph.is_forward[w]]
            if held[v] and readers:
                memory[max(readers) + 1:] -= float(graph.memory[v])
        if memory.max() <= budget:
            return k + 1
    return len(order)


def _save_again(graph: Graph, budget: Number, found: Found, groups: list[list[int]],
                segments: tuple[tuple[int, ...], ...], deadline: Deadline) -> Found:
    """Save again, costliest first, each group of forward values the schedule recomputes (a group: one
    value, or one place in every repeated block) while the simulated peak still fits ``budget`` and the
    duration falls.

    A group is passed over without lowering its plan when the schedule's own steps show that it cannot
    fit (`_Held`): until a value's first recomputation, the plan that saves it makes the same computations
    and holds it besides. Near a tight budget that rules out most values at once.
    """
    _, _, schedule, _, transient = found
    counts = np.bincount(schedule.nodes[schedule.kinds == COMPUTE], minlength=graph.n)
    forward = np.asarray(graph.forward_indices, dtype=np.int64)
    again = set(forward[counts[forward] > 1].tolist())
    saved = set(forward.tolist()) - again
    best = found
    held = _Held(graph, schedule, budget)
    wanted = [[v for v in g if v in again] for g in groups]
    for group in sorted((g for g in wanted if g), key=lambda g: -float(graph.duration[g[0]])):
        if deadline.expired():
            break
        if held.cannot_fit(group, again - saved):
            continue
        trial = _lowered(graph, saved.union(group), segments, transient, best[3])
        if trial[1] <= budget and trial[0] < best[0]:
            saved.update(group)
            best = trial
            held = _Held(graph, trial[2], budget)
    return best


class _Held:
    """What a lowered plan's steps say about saving one of the values it recomputes, without lowering
    the plan that saves it.

    Up to the recomputations that end with a value v's first one, the plan that saves v makes the same
    computations in the same order (nothing before needed v) and holds v besides; frees may come sooner
    only for values whose last reader was a recomputation v's no longer needs (its inputs, through the
    recomputed values it reads).
    So when v's memory, less those values', does not fit beside the largest step between v's free after
    its forward use and its first recomputation, the plan that saves v goes over the budget.
    """

    def __init__(self, graph: Graph, schedule: Schedule, budget: Number) -> None:
        self.graph = graph
        sim = simulate(graph, schedule)
        nodes = schedule.nodes.tolist()
        is_compute = (schedule.kinds == COMPUTE).tolist()
        step = np.where(schedule.kinds == COMPUTE, sim.step_memory, -np.inf).astype(np.float64)
        self.room = np.full(graph.n, np.inf)  # budget less the largest step while v would be held
        self.held_from = np.full(graph.n, -1, dtype=np.int64)  # v's free after its forward use, if recomputed
        # For each free step, the last compute before it (its node's last reader) and whether that compute
        # was a recomputation.
        self.frees: dict[int, list[int]] = {}
        self.reader: dict[int, tuple[int, bool]] = {}
        first_free: dict[int, int] = {}
        computed: set[int] = set()
        last, last_again = -1, False
        run = 0  # where the recomputations (and frees) right before this step began
        for k, (v, compute) in enumerate(zip(nodes, is_compute)):
            if compute:
                last, last_again = v, v in computed
                if not last_again:
                    run = k + 1
                elif self.held_from[v] < 0 and v in first_free:
                    self.held_from[v] = first_free[v]
                    # Up to the recomputations v's first one ends: those may be v's inputs, not needed when
                    # v is held.
                    window = step[first_free[v] + 1:run]
                    self.room[v] = float(budget) - (window.max() if len(window) else -np.inf)
                computed.add(v)
            else:
                first_free.setdefault(v, k)
                self.frees.setdefault(v, []).append(k)
                self.reader[k] = (last, last_again)

    def cannot_fit(self, group: list[int], recomputed: set[int]) -> bool:
        """Whether saving the values of ``group`` surely goes over the budget.

        Parameters
        ----------
        group : list of int
            Values the plan recomputes, to be saved together.
        recomputed : set of int
            Every value the plan recomputes.

        Returns
        -------
        bool
            True when one of them cannot be held up to its first recomputation.
        """
        released = sum(self._releasable(v, recomputed) for v in group)
        return any(self.graph.memory[v] - released > self.room[v] for v in group)

    def _releasable(self, v: int, recomputed: set[int]) -> float:
        """The memory of the values whose last reader is a recomputation saving ``v`` may make unneeded:
        the inputs of v's recomputation, through the recomputed values it reads."""
        at = int(self.held_from[v])
        if at < 0:
            return 0.0
        closure, stack, boundary = {v}, [v], list[int]()
        while stack:
            for u in self.graph.inputs[stack.pop()]:
                if u in closure:
                    continue
                closure.add(u)
                (stack if u in recomputed else boundary).append(u)
        released = 0.0
        for u in boundary:
            later = [k for k in self.frees.get(u, ()) if k > at]
            if later:
                reader, again = self.reader[later[0]]
                if again and reader in closure:
                    released += float(self.graph.memory[u])
        return released


# The exchange's repairs: at most this many rounds of drops after saving one more value.
REPAIR_ROUNDS = 4


def _exchange(graph: Graph, budget: Number, found: Found, segments: tuple[tuple[int, ...], ...],
              deadline: Deadline, report: Callable[[Schedule], bool]) -> Found:
    """Save one more recomputed value, costliest first, and repair: drop the cheapest set of saved values
    that frees what the plan now needs at its peak; keep the trade when the plan fits and is faster.

    Dropping values one by one, as the walk does, cannot make such a trade: on a ViT at half its peak
    the fastest plan recomputes one block's attention projection (and the values computed from it) to
    keep one more MLP activation, three values for one. Each repair round lowers the plan, takes the
    values it holds at its peak step, and drops a least-cost set of them (`_drop_chains`) whose memory
    covers the excess; the peak may move, so up to `REPAIR_ROUNDS` rounds. The values are tried in a
    cycle, each improvement starting the next from where it was, until a whole cycle gives nothing or
    the time runs out.
    """
    best = found
    transient = found[4]
    forward = np.asarray(graph.forward_indices, dtype=np.int64)
    tried_since = 0  # values tried since the last improvement
    position = 0
    while not deadline.expired():
        counts = np.bincount(best[2].nodes[best[2].kinds == COMPUTE], minlength=graph.n)
        recomputed = sorted(forward[counts[forward] > 1].tolist(), key=lambda v: -float(graph.duration[v]))
        if not recomputed or tried_since >= len(recomputed):
            break
        saved = set(forward.tolist()) - set(recomputed)
        x = recomputed[position % len(recomputed)]
        position += 1
        tried_since += 1
        trial_saved = saved | {x}
        trial = _lowered(graph, trial_saved, segments, transient, best[3])
        for _ in range(REPAIR_ROUNDS):
            if trial[1] <= budget or trial[0] >= best[0] or deadline.expired():
                break
            drop = _drop_chains(graph, trial[2], trial_saved - {x}, trial[1] - budget)
            if not drop:
                break
            trial_saved -= drop
            trial = _lowered(graph, trial_saved, segments, transient, best[3])
        if trial[1] <= budget and trial[0] < best[0]:
            best = trial
            tried_since, position = 0, 0
            if report(best[2]):
                break
    return best


def _drop_chains(graph: Graph, schedule: Schedule, saved: set[int], excess: Number) -> set[int]:
    """A least-cost set of saved values whose drop frees ``excess`` memory at ``schedule``'s peak step.

    A saved value resident at the peak is dropped with the saved values held only to compute it again
    (its inputs whose every reader is dropped with it or recomputed anyway: a lowered plan holds a saved
    value until its last reader, so dropping a value alone would hold its input instead). Each such chain
    weighs its members' memory resident at the peak and costs their durations; the cheapest chains
    covering ``excess`` are a 0/1 knapsack over what is kept (`knapsack_dp`).

    Parameters
    ----------
    graph : Graph
    schedule : Schedule
        A lowered plan over the budget.
    saved : set of int
        Its saved values that may be dropped.
    excess : Number
        How far its peak is above the budget.

    Returns
    -------
    set of int
        The values to drop; empty when the resident saved values cannot cover ``excess``.
    """
    sim = simulate(graph, schedule)
    resident = np.zeros(graph.n, dtype=bool)
    upto = sim.peak_step + 1
    last = np.full(graph.n, -1, dtype=np.int64)
    last[schedule.nodes[:upto]] = np.arange(upto)  # the last event of each node up to the peak
    seen = last >= 0
    resident[seen] = schedule.kinds[last[seen]] == COMPUTE
    chains = [_chain(graph, y, saved) for y in sorted(saved) if resident[y]]
    if not chains:
        return set()
    weight = np.array([sum(float(graph.memory[v]) for v in c if resident[v]) for c in chains])
    cost = np.array([sum(float(graph.duration[v]) for v in c) for c in chains])
    room = float(weight.sum()) - float(excess)
    if room < 0:
        return set()
    kept = knapsack_dp(weight, cost, room)
    return set().union(*(chains[k] for k in np.flatnonzero(~kept)))


def _chain(graph: Graph, y: int, saved: set[int]) -> set[int]:
    """``y`` and the saved values held only to compute it (or other recomputed values) again."""
    chain, stack = {y}, [y]
    while stack:
        for u in graph.inputs[stack.pop()]:
            if u in chain or u not in saved or not graph.is_forward[u]:
                continue
            if all(w in chain or (graph.is_forward[w] and w not in saved) for w in graph.consumers[u]):
                chain.add(u)
                stack.append(u)
    return chain
