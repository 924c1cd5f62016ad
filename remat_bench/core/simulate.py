"""The shared simulator (docs/design.md section 3): is a schedule valid, and its peak and duration.

The model: the resident set R starts empty. ``compute v`` needs every input of
v (of the chosen implementation) in R and v not in R; the step's memory is
``fixed + sum(memory(R)) + memory(v) + workspace(v)``; then v joins R and the
duration grows by duration(v). ``free v`` needs v in R and removes it. A valid
schedule computes every node at least once and ends with every output in R.

`simulate` checks and scores a schedule with numpy rather than by walking it
step by step in Python: residency at a step is decided by the last event of
that node before it, which one sort and one binary search give for every step
and every input at once. It handles millions of steps per second.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from remat_bench.core.graph import Graph, Number
from remat_bench.core.schedule import COMPUTE, FREE, Schedule


def overhead_pct(duration: Number, baseline_duration: Number) -> float:
    """Extra duration over the baseline, in percent; a graph of zero duration has none (or infinite).

    Parameters
    ----------
    duration : Number
        A schedule's duration.
    baseline_duration : Number
        The baseline schedule's duration, in the same units.

    Returns
    -------
    float
        ``100 * (duration / baseline_duration - 1)``; with a baseline of zero, 0.0 for a duration of zero
        and infinity for any other.
    """
    if baseline_duration == 0:
        return 0.0 if duration == 0 else float("inf")
    return 100.0 * (duration / baseline_duration - 1.0)


@dataclass(frozen=True)
class Violation:
    """The first step at which a schedule breaks the model (``step == len(schedule)`` for end checks)."""

    step: int
    node: str
    message: str

    def __str__(self) -> str:
        return self.message


@dataclass
class Simulation:
    """What the simulator measured. ``peak`` and ``duration`` cover the valid prefix when invalid."""

    valid: bool
    violation: Violation | None
    peak: Number
    peak_step: int
    duration: Number
    step_memory: np.ndarray
    num_steps: int
    computes: int
    frees: int
    recomputations: int

    def overhead_pct(self, baseline_duration: Number) -> float:
        """Extra duration over the baseline, in percent (the TDI of the Moccasin paper).

        Parameters
        ----------
        baseline_duration : Number
            The baseline schedule's duration.

        Returns
        -------
        float
            As the module's `overhead_pct` gives it for this simulation's duration.
        """
        return overhead_pct(self.duration, baseline_duration)

    def summary(self) -> dict[str, Any]:
        """The measurements as JSON-ready fields.

        Returns
        -------
        dict
            ``valid``, ``violation`` (its message), ``violation_step``, ``peak``, ``peak_step``, ``duration``,
            ``steps``, ``computes``, ``frees`` and ``recomputations``; ``step_memory`` is left out.
        """
        return {
            "valid": self.valid,
            "violation": None if self.violation is None else self.violation.message,
            "violation_step": None if self.violation is None else self.violation.step,
            "peak": self.peak,
            "peak_step": self.peak_step,
            "duration": self.duration,
            "steps": self.num_steps,
            "computes": self.computes,
            "frees": self.frees,
            "recomputations": self.recomputations,
        }


def _item(x: Any) -> Number:
    return x.item() if isinstance(x, np.generic) else x


def simulate(graph: Graph, schedule: Schedule) -> Simulation:
    """Walk ``schedule`` over ``graph`` under the memory and time model of docs/design.md section 3.

    Parameters
    ----------
    graph : Graph
    schedule : Schedule
        A schedule over ``graph``'s node indices; any, valid or not.

    Returns
    -------
    Simulation
        Whether the schedule is valid and, if not, its first violation; the peak (memory units, over
        compute steps) and the duration, of the valid prefix when invalid; each step's memory; and counts.
    """
    kinds, nodes, impls = schedule.kinds, schedule.nodes, schedule.impls
    is_compute = kinds == COMPUTE
    unscorable = _index_violation(graph, nodes, impls, is_compute)
    if unscorable is not None:
        return _invalid_at_start(graph, schedule, unscorable)
    ops = np.where(is_compute, graph.op_start[nodes] + impls, -1)
    events = _events_by_node(kinds, nodes)
    violation = _first_violation(graph, nodes, is_compute, ops, events)
    return _measure(graph, nodes, is_compute, ops, violation)


def _index_violation(graph: Graph, nodes: np.ndarray, impls: np.ndarray, is_compute: np.ndarray
                     ) -> Violation | None:
    """The first node or implementation index out of range: such a schedule cannot be scored at all."""
    bad = np.flatnonzero((nodes < 0) | (nodes >= graph.n))
    if len(bad):
        s = int(bad[0])
        why = f"step {s} names node index {nodes[s]}, which is not in the graph"
        return Violation(s, str(nodes[s]), why)
    n_impl = graph.op_start[1:] - graph.op_start[:-1]
    bad = np.flatnonzero(is_compute & ((impls < 0) | (impls >= n_impl[nodes])))
    if len(bad):
        s = int(bad[0])
        v = int(nodes[s])
        why = f"step {s} computes '{graph.ids[v]}' with implementation {impls[s]}, which it does not have"
        return Violation(s, graph.ids[v], why)
    return None


class _EventsByNode(NamedTuple):
    """The steps sorted by (node, step): each node's events in step order, one node after another."""

    order: np.ndarray  # step of each sorted event
    nodes: np.ndarray
    kinds: np.ndarray


def _events_by_node(kinds: np.ndarray, nodes: np.ndarray) -> _EventsByNode:
    order = np.argsort(nodes, kind="stable")
    return _EventsByNode(order, nodes[order], kinds[order])


def _first_violation(graph: Graph, nodes: np.ndarray, is_compute: np.ndarray, ops: np.ndarray,
                     events: _EventsByNode) -> Violation | None:
    """The earliest step that breaks the model; failing none, the first end-of-schedule check that fails."""
    violations = _residency_violations(graph, nodes, events)
    violations += _input_violations(graph, nodes, is_compute, ops, events)
    if violations:
        return Violation(*min(violations))
    return _end_violation(graph, nodes, is_compute, events)


def _residency_violations(graph: Graph, nodes: np.ndarray, events: _EventsByNode) -> list[tuple[int, str, str]]:
    """The first compute of a resident node and the first free of a non-resident one."""
    S = len(nodes)
    first_of_node = np.ones(S, dtype=bool)
    first_of_node[1:S] = events.nodes[1:] != events.nodes[:-1]
    prev_kind = np.full(S, FREE, dtype=np.int8)
    prev_kind[1:] = events.kinds[:-1]
    resident_before = ~first_of_node & (prev_kind == COMPUTE)
    bad_compute = events.order[(events.kinds == COMPUTE) & resident_before]
    bad_free = events.order[(events.kinds == FREE) & ~resident_before]
    violations: list[tuple[int, str, str]] = []  # (step, node id, message)
    if len(bad_compute):
        s = int(bad_compute.min())
        v = graph.ids[int(nodes[s])]
        violations.append(
            (s, v, f"step {s} (compute '{v}'): '{v}' is already resident; free it before computing it again"))
    if len(bad_free):
        s = int(bad_free.min())
        v = graph.ids[int(nodes[s])]
        violations.append((s, v, f"step {s} (free '{v}'): '{v}' is not resident"))
    return violations


def _input_violations(graph: Graph, nodes: np.ndarray, is_compute: np.ndarray, ops: np.ndarray,
                      events: _EventsByNode) -> list[tuple[int, str, str]]:
    """The first compute that reads a value not resident: for every (compute step s, input u), the
    last event of u before s must be a compute."""
    S = len(nodes)
    comp_steps = np.flatnonzero(is_compute)
    comp_ops = ops[comp_steps]
    starts = graph.op_in_ptr[comp_ops]
    counts = graph.op_in_ptr[comp_ops + 1] - starts
    total = int(counts.sum())
    if not total:
        return []
    pair_step = np.repeat(comp_steps, counts)
    offsets = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
    pair_input = graph.op_in_idx[np.repeat(starts, counts) + offsets]
    sorted_keys = events.nodes * (S + 1) + events.order
    pos = np.searchsorted(sorted_keys, pair_input * (S + 1) + pair_step) - 1
    pos_clipped = np.maximum(pos, 0)
    ok = (pos >= 0) & (events.nodes[pos_clipped] == pair_input) & (events.kinds[pos_clipped] == COMPUTE)
    missing = np.flatnonzero(~ok)
    if not len(missing):
        return []
    k = int(missing[np.argmin(pair_step[missing])])
    s = int(pair_step[k])
    v, u = graph.ids[int(nodes[s])], graph.ids[int(pair_input[k])]
    return [(s, v, f"step {s} (compute '{v}'): input '{u}' is not resident")]


def _end_violation(graph: Graph, nodes: np.ndarray, is_compute: np.ndarray, events: _EventsByNode
                   ) -> Violation | None:
    """End of schedule: every node computed, then every output resident."""
    S, n = len(nodes), graph.n
    computed = np.bincount(nodes[is_compute], minlength=n)
    never = np.flatnonzero(computed == 0)
    if len(never):
        v = graph.ids[int(never[0])]
        more = f" (and {len(never) - 1} other nodes)" if len(never) > 1 else ""
        return Violation(S, v, f"node '{v}'{more} is never computed; every node must be computed at least once")
    last_event_kind = np.full(n, FREE, dtype=np.int8)
    last_of_node = np.ones(S, dtype=bool)
    last_of_node[:-1] = events.nodes[:-1] != events.nodes[1:]
    last_event_kind[events.nodes[last_of_node]] = events.kinds[last_of_node]
    outs = np.asarray(graph.output_indices, dtype=np.int64)
    gone = outs[last_event_kind[outs] != COMPUTE]
    if len(gone):
        v = graph.ids[int(gone[0])]
        return Violation(S, v, f"output '{v}' is not resident when the schedule ends")
    return None


def _measure(graph: Graph, nodes: np.ndarray, is_compute: np.ndarray, ops: np.ndarray,
             violation: Violation | None) -> Simulation:
    """Peak, duration and counts of the valid prefix (the whole schedule when valid)."""
    S, n = len(nodes), graph.n
    limit = violation.step if violation is not None and violation.step < S else S
    # Memory: resident total after each step, plus the computed value's workspace on compute steps.
    mem = graph.memory
    delta = np.where(is_compute, mem[nodes], -mem[nodes])
    resident_after = np.cumsum(delta)
    ws = np.where(is_compute, graph.op_workspace[np.maximum(ops, 0)], 0)
    step_memory = resident_after + ws + graph.fixed_memory
    prefix_compute = is_compute[:limit]
    if prefix_compute.any():
        masked = np.where(prefix_compute, step_memory[:limit], step_memory.min() if S else 0)
        peak_step = int(np.argmax(masked))
        peak = _item(step_memory[peak_step])
    else:
        peak_step, peak = -1, graph.fixed_memory
    duration = _item(graph.op_duration[ops[:limit][prefix_compute]].sum()) if limit else 0
    n_computes = int(prefix_compute.sum())
    return Simulation(
        valid=violation is None,
        violation=violation,
        peak=peak,
        peak_step=peak_step,
        duration=duration,
        step_memory=step_memory,
        num_steps=S,
        computes=n_computes,
        frees=int(limit - n_computes),
        recomputations=n_computes - int(np.count_nonzero(np.bincount(nodes[:limit][prefix_compute], minlength=n))),
    )


def _invalid_at_start(graph: Graph, schedule: Schedule, violation: Violation) -> Simulation:
    return Simulation(False, violation, graph.fixed_memory, -1, 0, np.zeros(len(schedule)), len(schedule), 0, 0, 0)
