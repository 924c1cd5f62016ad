"""The shared clean-up (docs/design.md section 3): frees placed at last use, unused computations dropped.

`place_frees` turns a sequence of computations into a schedule: it drops the
computations whose value is never read and frees every kept value right after
its last reader. Applied to a valid schedule with its frees stripped, it is the
clean-up every schedule goes through before it is scored (`clean_up`); methods
that decide only *what to compute when* get their frees from it too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from remat_bench.core.graph import Graph, Number
from remat_bench.core.schedule import COMPUTE, FREE, Schedule
from remat_bench.core.simulate import Simulation, simulate


@dataclass(frozen=True)
class CleanUp:
    """What the shared clean-up changed."""

    computes_before: int
    computes_after: int
    dropped: int
    duration_before: Number
    duration_after: Number
    peak_before: Number
    peak_after: Number

    def as_dict(self) -> dict[str, Any]:
        """The record a cleaned schedule carries in its ``cleanup`` field.

        Returns
        -------
        dict
            The fields by name, ``dropped`` written as ``dropped_computations``.
        """
        return {
            "computes_before": self.computes_before,
            "computes_after": self.computes_after,
            "dropped_computations": self.dropped,
            "duration_before": self.duration_before,
            "duration_after": self.duration_after,
            "peak_before": self.peak_before,
            "peak_after": self.peak_after,
        }


def place_frees(graph: Graph, nodes: np.ndarray, impls: np.ndarray, drop_unused: bool = True) -> Schedule:
    """A schedule from a sequence of computations: drop unused ones, free at last use.

    ``nodes``/``impls`` list computations in order; each one's inputs must have
    been computed at some earlier point (the most recent computation of a node
    serves every use until it is computed again). A computation whose value is
    never used is dropped, unless it is the node's only computation left; each
    kept value is freed right after its last use (or right after it is
    computed, if nothing uses it), except the last computation of an output.

    This is both the shared clean-up (applied to a valid schedule with its frees
    stripped) and how methods that decide only *what to compute when* get their
    frees. Residency intervals only shrink, so neither peak nor duration grows.
    With ``drop_unused=False`` every computation is kept (an unused one is freed
    at once): the schedule a method meant, before clean-up.

    Parameters
    ----------
    graph : Graph
    nodes : np.ndarray
        The node index of each computation, in order.
    impls : np.ndarray
        The implementation position of each computation.
    drop_unused : bool
        Drop the computations whose value is never used (keeping one of each node's).

    Returns
    -------
    Schedule
        Without metadata.
    """
    # The two sweeps walk Python lists (fast per step); the schedule is then assembled with
    # numpy. Building it step by step, one list of frees per step, made the garbage collector
    # rescan a large heap as the lists piled up (docs/benchmarks.md, "Figures that used to live
    # in the code").
    nodes = np.asarray(nodes, dtype=np.int64)
    ops = graph.op_start[nodes] + np.asarray(impls, dtype=np.int64)
    if drop_unused:
        keep = np.asarray(_keep_sweep(graph, nodes, ops), dtype=bool)
        nodes, ops = nodes[keep], ops[keep]
    k = len(nodes)
    nodes_l = nodes.tolist()
    op_inputs = graph.op_inputs
    # Forward sweep: each copy is freed after its last reader (after itself when unread).
    current = [-1] * graph.n  # the live copy of each node
    free_at = list(range(k))
    for j, op in enumerate(ops.tolist()):
        for u in op_inputs[op]:
            free_at[current[u]] = j
        current[nodes_l[j]] = j
    freed = np.ones(k, dtype=bool)
    for v in graph.output_indices:  # an output's last copy stays to the end
        if current[v] >= 0:
            freed[current[v]] = False
    # Interleave: compute j, then the copies freed after it in copy order.
    copies = np.flatnonzero(freed)
    after = np.asarray(free_at, dtype=np.int64)[copies]
    per_step = np.bincount(after, minlength=k)
    frees_before = np.concatenate(([0], np.cumsum(per_step)[:-1]))  # frees placed before step j's compute
    compute_at = np.arange(k) + frees_before
    by_step = np.argsort(after, kind="stable")
    rank = np.arange(len(copies)) - frees_before[after[by_step]]
    total = k + len(copies)
    kinds = np.full(total, FREE, dtype=np.int8)
    out_nodes = np.empty(total, dtype=np.int64)
    out_impls = np.zeros(total, dtype=np.int64)
    kinds[compute_at] = COMPUTE
    out_nodes[compute_at] = nodes
    out_impls[compute_at] = ops - graph.op_start[nodes]
    out_nodes[compute_at[after[by_step]] + 1 + rank] = nodes[copies[by_step]]
    return Schedule(kinds, out_nodes, out_impls)


def _keep_sweep(graph: Graph, nodes: np.ndarray, ops: np.ndarray) -> list[bool]:
    """Backward sweep: keep a computation when a kept later step (or the end, for an output)
    reads it, or when it is its node's first and none later is kept."""
    nodes_l = nodes.tolist()
    ops_l = ops.tolist()
    op_inputs = graph.op_inputs
    needed = graph.is_output.tolist()
    kept_later = [False] * graph.n
    remaining = np.bincount(nodes, minlength=graph.n).tolist()  # computations of v at or before i
    keep = [False] * len(nodes_l)
    for i in range(len(nodes_l) - 1, -1, -1):
        v = nodes_l[i]
        remaining[v] -= 1
        if needed[v] or (not kept_later[v] and remaining[v] == 0):
            keep[i] = True
            needed[v] = False
            kept_later[v] = True
            for u in op_inputs[ops_l[i]]:
                needed[u] = True
    return keep


def clean_up(graph: Graph, schedule: Schedule) -> tuple[Schedule, CleanUp]:
    """The shared clean-up of docs/design.md section 3, applied to a valid schedule.

    Raises ValueError if the schedule is not valid: clean-up is defined only
    for schedules the simulator accepts.

    Parameters
    ----------
    graph : Graph
    schedule : Schedule
        A valid schedule over ``graph``.

    Returns
    -------
    tuple of (Schedule, CleanUp)
        The cleaned schedule, with ``schedule``'s metadata and the report in its ``cleanup`` field, and the
        report of what changed.

    Raises
    ------
    ValueError
        ``schedule`` is not valid.
    """
    cleaned, report, _ = clean_up_simulated(graph, schedule)
    return cleaned, report


def clean_up_simulated(graph: Graph, schedule: Schedule, before: Simulation | None = None
                       ) -> tuple[Schedule, CleanUp, Simulation]:
    """`clean_up`, also returning the cleaned schedule's simulation; ``before``: the input's, if known.

    The pipeline scores every schedule this way, so each is simulated once
    before and once after clean-up, not again by the caller.

    Parameters
    ----------
    graph : Graph
    schedule : Schedule
        A valid schedule over ``graph``.
    before : Simulation or None
        ``schedule``'s simulation when the caller has it; None to simulate it here.

    Returns
    -------
    tuple of (Schedule, CleanUp, Simulation)
        As `clean_up` returns, and the cleaned schedule's simulation.

    Raises
    ------
    ValueError
        ``schedule`` is not valid.
    """
    if before is None:
        before = simulate(graph, schedule)
    if not before.valid:
        raise ValueError(f"cannot clean up an invalid schedule: {before.violation}")
    if schedule.moves:
        # A schedule that offloads chose where each copy starts and when each value leaves the device;
        # re-placing its frees would undo those choices. It is scored as its method wrote it.
        same = CleanUp(computes_before=before.computes, computes_after=before.computes, dropped=0,
                       duration_before=before.duration, duration_after=before.duration,
                       peak_before=before.peak, peak_after=before.peak)
        return schedule.with_meta(cleanup=same.as_dict()), same, before
    computes = schedule.kinds == COMPUTE
    steps = place_frees(graph, schedule.nodes[computes], schedule.impls[computes])
    after = simulate(graph, steps)
    report = CleanUp(
        computes_before=before.computes,
        computes_after=after.computes,
        dropped=before.computes - after.computes,
        duration_before=before.duration,
        duration_after=after.duration,
        peak_before=before.peak,
        peak_after=after.peak,
    )
    cleaned = Schedule(
        steps.kinds, steps.nodes, steps.impls,
        method=schedule.method, params=schedule.params, budget=schedule.budget,
        solver=schedule.solver, cleanup=report.as_dict(),
    )
    return cleaned, report, after
