"""The baseline schedule (method `none`) and its peak and duration: the reference for budgets and overhead.

The baseline's peak and duration are asked for many times per run (budgets,
the judge, bounds, reports), so they are kept in a small cache keyed by the
graph's content hash (`Graph.sha256`): graphs with the same content share an
entry, whichever object holds them.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from remat_bench.core.cleanup import place_frees
from remat_bench.core.graph import Graph, Number
from remat_bench.core.schedule import Schedule
from remat_bench.core.simulate import simulate

# Graphs whose baseline is kept: a sweep or a test session touches a few hundred at most, and an entry is two
# numbers, so the bound only stops a long-lived process from growing without end.
CACHE_ENTRIES = 1024


def baseline_schedule(graph: Graph) -> Schedule:
    """Method `none`: every node once in file order, each value freed after its last consumer.

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    Schedule
        Each node with its first implementation; without metadata.
    """
    return place_frees(graph, np.arange(graph.n, dtype=np.int64), np.zeros(graph.n, dtype=np.int64))


@dataclass(frozen=True)
class Baseline:
    """The baseline schedule's peak (memory units) and duration."""

    peak: Number
    duration: Number


# The baseline of each graph by its sha256, least recently used first. The lock keeps the reordering and the
# eviction whole when the portfolio's threads ask at once.
_known: OrderedDict[str, Baseline] = OrderedDict()
_lock = threading.Lock()


def baseline(graph: Graph) -> Baseline:
    """Peak and duration of the baseline schedule: the reference for budgets and overhead.

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    Baseline
        The peak (memory units) and duration; computed once per graph content (`Graph.sha256`) and kept
        for the `CACHE_ENTRIES` graphs used last.
    """
    key = graph.sha256
    with _lock:
        known = _known.get(key)
        if known is not None:
            _known.move_to_end(key)
            return known
    sim = simulate(graph, baseline_schedule(graph))
    known = Baseline(sim.peak, sim.duration)
    with _lock:
        _known[key] = known
        if len(_known) > CACHE_ENTRIES:
            _known.popitem(last=False)
    return known
