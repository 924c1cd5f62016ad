"""The shared lowering: a forward-graph checkpoint plan -> a schedule of the whole training graph.

Forward-graph methods (chen, kusumoto, fenghuang) decide which forward values
to keep (checkpoints) and how the forward pass splits into segments; they do
not deal with the backward pass. The lowering turns their plan into steps
(docs/design.md section 6):

1. A forward pass computes every forward node once in file order. The plan's
   kept values and the forward sinks (the values the loss reads at once) stay
   resident; every other forward value is freed after its last forward use.
2. The backward nodes follow in file order. When one needs a forward value that
   was not kept, the missing values of that value's segment that some
   remaining backward node still reads are recomputed, together with whatever
   they need, before it; they then stay resident until their last use.
   With ``transient=True`` they are freed right after the backward node that
   needed them instead, and computed again for each later one: more
   recomputation, less memory (a value held from one backward node to the
   next is what keeps the tightest budgets out of reach).

Frees are placed by `remat_bench.core.cleanup.place_frees`: each value right after
its last use before it is computed again.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from remat_bench.core.cleanup import place_frees
from remat_bench.core.control import Deadline
from remat_bench.core.graph import Graph, Number
from remat_bench.core.schedule import Schedule


class LoweringError(ValueError):
    """The graph's shape does not allow a forward-then-backward lowering."""


@dataclass(frozen=True)
class Plan:
    """A checkpoint plan over the forward nodes of a training graph (node indices).

    ``kept``: forward values stored through the forward pass.
    ``segments``: a partition of the forward nodes, each segment in file order;
    a missing value is recomputed together with the rest of its segment.
    """

    kept: frozenset[int]
    segments: tuple[tuple[int, ...], ...]


def forward_consumers(graph: Graph) -> list[list[int]]:
    """For each node, its consumers that are forward nodes.

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    list of list of int
        One list per node index, in node order.
    """
    return [[w for w in graph.consumers[v] if graph.is_forward[w]] for v in range(graph.n)]


def check_forward_then_backward(graph: Graph) -> None:
    """Raise LoweringError when a forward node reads a backward value.

    Parameters
    ----------
    graph : Graph

    Raises
    ------
    LoweringError
        Naming the first such forward node and the backward node it reads.
    """
    for v in graph.forward_indices:
        for u in graph.inputs[v]:
            if not graph.is_forward[u]:
                raise LoweringError(
                    f"forward node '{graph.ids[v]}' reads backward node '{graph.ids[u]}'; "
                    "a forward-graph plan needs every forward node to depend on forward nodes only"
                )


def plan_from_checkpoints(graph: Graph, checkpoints: Iterable[int]) -> Plan:
    """Segments that end at each checkpoint, in the file order of the forward nodes.

    Parameters
    ----------
    graph : Graph
    checkpoints : Iterable of int
        The forward node indices to keep.

    Returns
    -------
    Plan
        The checkpoints kept; the forward nodes after the last checkpoint form the last segment.
    """
    kept = frozenset(checkpoints)
    segments: list[tuple[int, ...]] = []
    current: list[int] = []
    for v in graph.forward_indices:
        current.append(v)
        if v in kept:
            segments.append(tuple(current))
            current = []
    if current:
        segments.append(tuple(current))
    return Plan(kept, tuple(segments))


@functools.lru_cache(maxsize=8)
def _shape(graph: Graph) -> tuple[list[int], list[int], np.ndarray, np.ndarray]:
    """What every lowering of ``graph`` reads, computed once per graph (a planner's search lowers
    hundreds of plans of one graph): its forward and backward nodes, the backward position of each
    value's last backward reader (-1: none), and the values held whatever the plan (the forward sinks,
    which the loss reads at once, and every backward value). Raises `LoweringError` as
    `check_forward_then_backward` does."""
    check_forward_then_backward(graph)
    forward, backward = graph.forward_indices, graph.backward_indices
    last_backward_use = np.full(graph.n, -1, dtype=np.int64)
    for pos, b in enumerate(backward):
        last_backward_use[list(graph.inputs[b])] = pos
    held = np.zeros(graph.n, dtype=bool)
    fwd_cons = forward_consumers(graph)
    for v in forward:
        if not fwd_cons[v]:
            held[v] = True
    held[backward] = True
    last_backward_use.flags.writeable = False
    held.flags.writeable = False
    return forward, backward, last_backward_use, held


def lower_plan(graph: Graph, plan: Plan, transient: bool = False) -> Schedule:
    """The full training schedule of docs/design.md section 6 for ``plan`` (``transient``: above).

    Parameters
    ----------
    graph : Graph
        A training graph whose forward nodes read forward nodes only.
    plan : Plan
    transient : bool
        Free recomputed values after the backward node that needed them, not at their last use.

    Returns
    -------
    Schedule
        Without metadata.

    Raises
    ------
    LoweringError
        A forward node reads a backward value, or the plan's segments miss a forward node.
    """
    forward, backward, last_backward_use, sinks = _shape(graph)
    segment_of = np.full(graph.n, -1, dtype=np.int64)
    for s, segment in enumerate(plan.segments):
        segment_of[list(segment)] = s
    if (segment_of[forward] < 0).any():
        missing = graph.ids[forward[int(np.argmax(segment_of[forward] < 0))]]
        raise LoweringError(f"the plan's segments do not cover forward node '{missing}'")

    # Python lists: the loops below read them one item at a time.
    live = sinks.tolist()  # forward sinks (the loss reads them right away) and backward values
    for v in plan.kept:
        live[v] = True
    last_use = last_backward_use.tolist()
    segment_at = segment_of.tolist()

    computes: list[int] = list(forward)
    inputs = graph.inputs

    def recompute_segment(segment: Sequence[int], pos: int) -> list[int]:
        wanted = [x for x in segment if not live[x] and last_use[x] >= pos]
        closure: set[int] = set()
        stack = list(wanted)
        while stack:
            x = stack.pop()
            if x in closure or live[x]:
                continue
            closure.add(x)
            stack.extend(u for u in inputs[x] if not live[u] and u not in closure)
        for x in sorted(closure):  # file order is topological
            computes.append(x)
            live[x] = True
        return sorted(closure)

    for pos, b in enumerate(backward):
        recomputed: list[int] = []
        for u in inputs[b]:
            if not live[u]:
                recomputed += recompute_segment(plan.segments[segment_at[u]], pos)
        computes.append(b)
        if transient:  # freed after b (place_frees frees each at its last use before it is computed again)
            for x in recomputed:
                live[x] = False
    nodes = np.asarray(computes, dtype=np.int64)
    return place_frees(graph, nodes, np.zeros(len(nodes), dtype=np.int64))


# The ``lowering`` parameter of the saved-set planners (knapsack, policy, torch-budget): the values of
# ``transient`` to try. hold: a recomputed value stays until its last use; transient: it is freed after
# each use and computed again; best: both.
LOWERINGS: dict[str, tuple[bool, ...]] = {"hold": (False,), "transient": (True,), "best": (False, True)}

# A plan lowered and simulated: (duration, peak, schedule, the planner's knob, transient lowering).
Found = tuple[Number, Number, Schedule, float, bool]


def found_key(found: Found, budget: Number | None) -> tuple[Number, Number]:
    """Fastest first under a budget; least peak first without one.

    Parameters
    ----------
    found : Found
        A lowered plan: (duration, peak, schedule, knob, transient).
    budget : Number or None
        None for ``min``.

    Returns
    -------
    tuple of (Number, Number)
        A key for ``min``: (duration, peak) under a budget, (peak, duration) without one.
    """
    return (found[0], found[1]) if budget is not None else (found[1], found[0])


def coarse_to_fine(count: int) -> list[int]:
    """The indices 0 .. ``count`` - 1, both ends first, then the midpoints of the gaps, widest first.

    Parameters
    ----------
    count : int
        How many indices.

    Returns
    -------
    list of int
        Each index once (``coarse_to_fine(5)`` is 0, 4, 2, 1, 3).
    """
    if count <= 0:
        return []
    order = [0] if count == 1 else [0, count - 1]
    gaps = [(0, count - 1)]
    while gaps:
        wider = []
        for lo, hi in gaps:
            if hi - lo > 1:
                mid = (lo + hi) // 2
                order.append(mid)
                wider += [(lo, mid), (mid, hi)]
        gaps = wider
    return order


def search_knob(evaluate: Callable[[float], list[Found]], budget: Number | None, deadline: Deadline,
                grid: int, steps: int) -> Found | None:
    """The knob in [0, 1] whose lowered plan is fastest within ``budget`` (None: the least peak).

    For planners whose saved set is a function of one fraction (knapsack's capacity, PyTorch's
    activation-memory budget); ``evaluate(knob)`` lowers the plan there (one result per lowering
    mode). The peak is not monotone in the knob (saving less can mean holding more recomputed
    values at once), so the knob runs over a grid of ``grid`` steps from 1 down to 0 first; then it
    is bisected ``steps`` times between the best grid value that fits and the next larger one,
    where saving more may still fit.

    Parameters
    ----------
    evaluate : Callable[[float], list of Found]
        Lowers and simulates the plan at a knob.
    budget : Number or None
        In the graph's memory units; None for the least peak.
    deadline : Deadline
        Ends the grid (once one knob is tried) and the bisection.
    grid : int
        The grid's steps (``grid + 1`` knobs).
    steps : int
        The most bisection steps.

    Returns
    -------
    Found or None
        None when no knob tried gives a plan within ``budget``.
    """
    knobs = np.linspace(1.0, 0.0, grid + 1).tolist()
    # Coarse to fine (both ends, then midpoints): cut short, the knobs tried still span the range, so
    # a tight budget meets a knob near 0 early. Read back in grid order, so that with every knob tried
    # the answer (ties included) is the one a walk from 1 down to 0 gives.
    seen: dict[int, list[Found]] = {}
    for k in coarse_to_fine(len(knobs)):
        if deadline.expired() and seen:
            break
        seen[k] = evaluate(knobs[k])
    tried = [f for k in sorted(seen) for f in seen[k]]
    fits = [f for f in tried if budget is None or f[1] <= budget]
    if not fits:
        return None
    best = min(fits, key=lambda f: found_key(f, budget))
    if budget is not None:
        lo, hi = best[3], min(1.0, best[3] + 1.0 / grid)
        for _ in range(steps):
            if deadline.expired() or hi - lo < 1e-6:
                break
            mid = (lo + hi) / 2
            within = [f for f in evaluate(mid) if f[1] <= budget]
            if within:
                lo, best = mid, min([best, *within], key=lambda f: found_key(f, budget))
            else:
                hi = mid
    return best
