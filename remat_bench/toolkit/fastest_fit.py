"""Operator implementations after the fact: MONeT's "Checkmate-O" post-pass (Shah et al. 2021, section 5).

Any method's schedule picks each node's first implementation. ``--param
impl=fastest-fit`` then walks the cleaned schedule and gives every compute
step the fastest implementation of its node whose inputs are resident at
that step and whose workspace still fits the budget there. Memory elsewhere
does not change (outputs keep their size; only workspace and inputs differ),
so the schedule stays valid and within budget; the shared clean-up runs again
afterwards, since an implementation that reads fewer inputs can let values go
sooner.
"""

from __future__ import annotations

import numpy as np

from remat_bench.core.graph import Graph, Number
from remat_bench.core.schedule import COMPUTE, Schedule

MODES = ("first", "fastest-fit")


def fastest_fit(graph: Graph, schedule: Schedule, budget: Number | None) -> Schedule:
    """Each compute step with the fastest implementation that fits (``budget`` None: the step's own peak).

    Parameters
    ----------
    graph : Graph
    schedule : Schedule
        A valid schedule over ``graph``.
    budget : Number or None
        In the graph's memory units; None keeps each step within the memory it already had.

    Returns
    -------
    Schedule
        The same steps and metadata with other implementations; ``schedule`` itself when ``graph`` has none.
    """
    if not graph.has_implementations:
        return schedule
    mem = graph.memory
    fixed = graph.fixed_memory
    resident = np.zeros(graph.n, dtype=bool)
    used = 0
    impls = schedule.impls.copy()
    op_start = graph.op_start
    for s, (kind, v) in enumerate(zip(schedule.kinds.tolist(), schedule.nodes.tolist())):
        if kind != COMPUTE:
            resident[v] = False
            used -= mem[v]
            continue
        current = int(op_start[v] + impls[s])
        base = fixed + used + mem[v]
        # Without a budget, no step may rise above what the schedule already needed here.
        cap = budget if budget is not None else base + graph.op_workspace[current]
        best, best_time = current, graph.op_duration[current]
        for op in graph.ops_of(v):
            if graph.op_duration[op] >= best_time:
                continue
            if base + graph.op_workspace[op] > cap:
                continue
            if all(resident[u] for u in graph.op_inputs[op]):
                best, best_time = op, graph.op_duration[op]
        impls[s] = best - op_start[v]
        resident[v] = True
        used += mem[v]
    return Schedule(schedule.kinds, schedule.nodes, impls, method=schedule.method, params=schedule.params,
                    budget=schedule.budget, solver=schedule.solver, cleanup=schedule.cleanup)
