"""The shared simulator, the baseline schedule and the shared clean-up (docs/design.md section 3).

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


# ---------------------------------------------------------------------- clean-up


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
    peak: Number
    duration: Number


def baseline(graph: Graph) -> Baseline:
    """Peak and duration of the baseline schedule: the reference for budgets and overhead.

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    Baseline
        The peak (memory units) and duration; computed once per graph and kept on it.
    """
    cached = getattr(graph, "_baseline", None)
    if cached is None:
        sim = simulate(graph, baseline_schedule(graph))
        cached = Baseline(sim.peak, sim.duration)
        graph._baseline = cached  # type: ignore[attr-defined]
    return cached
