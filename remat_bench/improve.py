"""Local improvement of a schedule by undoing recomputations that the budget does not need.

Used to polish heuristic schedules before they seed an exact solver (the warm
start of `checkmate`, the phase-1 hint of `moccasin`); methods' own results
are never passed through it, so that each method is scored on what it found.

A recomputation of v can be dropped when keeping the previous copy of v
resident until the recomputation's uses still fits the budget. The search
tries the recomputations in decreasing order of duration and keeps every
drop the simulator accepts, until a full pass changes nothing.
"""

from __future__ import annotations

import numpy as np

from remat_bench.graph import Graph, Number
from remat_bench.methods.base import Deadline
from remat_bench.simulate import place_frees, simulate


def drop_recomputations(graph: Graph, nodes: np.ndarray, budget: Number,
                        deadline: Deadline | None = None) -> np.ndarray:
    """A compute order without the recomputations the budget does not need (frees at last use)."""
    nodes = np.asarray(nodes, dtype=np.int64)
    zeros = np.zeros(len(nodes), dtype=np.int64)
    if simulate(graph, place_frees(graph, nodes, zeros, drop_unused=False)).peak > budget:
        return nodes
    changed = True
    while changed:
        changed = False
        seen = np.zeros(graph.n, dtype=bool)
        repeat = np.zeros(len(nodes), dtype=bool)
        for p, v in enumerate(nodes.tolist()):
            repeat[p] = seen[v]
            seen[v] = True
        positions = np.flatnonzero(repeat)
        order = positions[np.argsort(-graph.duration[nodes[positions]], kind="stable")]
        dropped = np.zeros(len(nodes), dtype=bool)
        for p in order.tolist():
            if deadline is not None and deadline.expired():
                return nodes[~dropped]
            dropped[p] = True
            trial = nodes[~dropped]
            sim = simulate(graph, place_frees(graph, trial, np.zeros(len(trial), dtype=np.int64), drop_unused=False))
            if sim.valid and sim.peak <= budget:
                changed = True
            else:
                dropped[p] = False
        nodes = nodes[~dropped]
    return nodes
