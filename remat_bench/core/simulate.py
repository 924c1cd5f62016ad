"""The shared simulator (docs/design.md section 3): is a schedule valid, and its peak and duration.

The model: the resident set R starts empty. ``compute v`` needs every input of
v (of the chosen implementation) in R and v not in R; the step's memory is
``fixed + sum(memory(R)) + memory(v) + workspace(v)``; then v joins R and the
duration grows by duration(v). ``free v`` needs v in R and removes it. A valid
schedule computes every node at least once and ends with every output in R.
A schedule with ``offload`` and ``reload`` steps is walked step by step beside
two copy engines (docs/design.md section 3, "Offload"), by `_simulate_moves`.

`simulate` checks and scores a schedule with numpy rather than by walking it
step by step in Python: residency at a step is decided by the last event of
that node before it, which one sort and one binary search give for every step
and every input at once. It handles millions of steps per second.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from remat_bench.core.graph import Graph, Number
from remat_bench.core.schedule import COMPUTE, FREE, OFFLOAD, RELOAD, Schedule


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
    host_peak: Number = 0
    to_host: Number = 0
    to_device: Number = 0
    wait: Number = 0
    offloads: int = 0
    reloads: int = 0
    step_start: np.ndarray | None = None
    step_end: np.ndarray | None = None

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
            ``steps``, ``computes``, ``frees`` and ``recomputations``; for a schedule that moves values to
            the host and back, also ``host_peak``, ``to_host`` and ``to_device`` (memory units moved),
            ``wait`` (the time compute waited for reloads), ``offloads`` and ``reloads``. ``step_memory`` and
            the step times are left out.
        """
        moves = {"host_peak": self.host_peak, "to_host": self.to_host, "to_device": self.to_device,
                 "wait": self.wait, "offloads": self.offloads, "reloads": self.reloads}
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
            **(moves if self.offloads or self.reloads else {}),
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
    if schedule.moves:
        return _simulate_moves(graph, schedule)
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


# ---------------------------------------------------------------------- offload


class _Walk:
    """The state of `_simulate_moves` as it walks a schedule: residency, clocks and memory in flight."""

    def __init__(self, graph: Graph) -> None:
        n = graph.n
        self.resident = np.zeros(n, dtype=bool)  # on the device and readable (a reload: from its step on)
        self.ready = [0.0] * n  # when the device copy can be read (a reload's end)
        self.host_end: list[float | None] = [None] * n  # the latest offload's copy end (None: no host copy)
        self.host_copy: list[int] = [-1] * n  # index into `host` of the value's latest host copy
        self.host: list[list[float]] = []  # [start, end, memory] of every host copy
        self.on_device: Number = 0  # memory of the resident values
        self.leaving: list[tuple[float, int, Number]] = []  # (end, step, memory) of device memory still held
        self.leaving_total: Number = 0
        self.clock = 0.0  # when the last computation ended
        self.engine_free = [0.0, 0.0]  # device-to-host, host-to-device

    def hold_until(self, end: float, step: int, memory: Number) -> None:
        heapq.heappush(self.leaving, (end, step, memory))
        self.leaving_total += memory

    def held_at(self, time: float) -> Number:
        """Device memory at ``time``: the resident values and the memory not yet let go."""
        while self.leaving and self.leaving[0][0] <= time:
            self.leaving_total -= heapq.heappop(self.leaving)[2]
        return self.on_device + self.leaving_total


def _simulate_moves(graph: Graph, schedule: Schedule) -> Simulation:
    """The step-by-step walk for schedules with offload and reload steps (docs/design.md section 3, "Offload").

    The compute stream runs the compute steps in order; an offload runs on the device-to-host engine and a
    reload on the host-to-device engine, each engine one copy at a time in step order. A copy starts at
    the later of its step's issue time (when the computation before it ended), its engine's last copy's end
    and, for an offload, its value's readiness, for a reload, the end of the offload that made its host copy.
    """
    kinds, nodes, impls = schedule.kinds.tolist(), schedule.nodes.tolist(), schedule.impls.tolist()
    S, n = len(kinds), graph.n
    mem = graph.memory.tolist()
    op_start = graph.op_start.tolist()
    op_duration, op_workspace = graph.op_duration.tolist(), graph.op_workspace.tolist()
    in_ptr, in_idx = graph.op_in_ptr.tolist(), graph.op_in_idx.tolist()
    fixed = graph.fixed_memory
    transfer = graph.transfer
    w = _Walk(graph)
    step_memory = np.zeros(S, dtype=np.float64 if graph.memory.dtype.kind == "f" else np.int64)
    step_start = np.zeros(S, dtype=np.float64)
    step_end = np.zeros(S, dtype=np.float64)
    computed = np.zeros(n, dtype=np.int64)
    peak, peak_step = fixed, -1
    wait = 0.0
    moved = [0, 0]
    counts = [0, 0, 0, 0]
    violation: Violation | None = None
    ids = graph.ids

    def fail(s: int, v: int, word: str, why: str) -> Violation:
        return Violation(s, ids[v], f"step {s} ({word} '{ids[v]}'): {why}")

    for s in range(S):
        kind, v = kinds[s], nodes[s]
        if kind == COMPUTE:
            if w.resident[v]:
                violation = fail(s, v, "compute", f"'{ids[v]}' is already resident; free it before computing it again")
                break
            op = op_start[v] + impls[s]
            start = w.clock
            missing = None
            for u in in_idx[in_ptr[op]:in_ptr[op + 1]]:
                if not w.resident[u]:
                    missing = u
                    break
                start = max(start, w.ready[u])
            if missing is not None:
                where = "; it is on the host: reload it first" if w.host_end[missing] is not None else ""
                violation = fail(s, v, "compute", f"input '{ids[missing]}' is not resident{where}")
                break
            wait += start - w.clock
            memory = fixed + w.held_at(start) + mem[v] + op_workspace[op]
            end = start + op_duration[op]
            w.clock = end
            w.resident[v] = True
            w.ready[v] = end
            w.on_device += mem[v]
            computed[v] += 1
        elif kind == FREE:
            if not w.resident[v]:
                violation = fail(s, v, "free", f"'{ids[v]}' is not resident")
                break
            w.resident[v] = False
            w.on_device -= mem[v]
            start = end = w.clock
            if w.ready[v] > w.clock:  # a reload still writing into its memory holds it until it ends
                w.hold_until(w.ready[v], s, mem[v])
            memory = fixed + w.held_at(start)
        else:
            word = "offload" if kind == OFFLOAD else "reload"
            if transfer is None:
                violation = fail(s, v, word, f"graph '{graph.name}' has no host link to copy over; give it a "
                                             "'transfer' (graphs import-torch --device-profile, or --link)")
                break
            if kind == OFFLOAD:
                if not w.resident[v]:
                    where = " (its last copy went to the host)" if w.host_end[v] is not None else ""
                    violation = fail(s, v, word, f"'{ids[v]}' is not resident on the device{where}; only a "
                                                 "resident value can be offloaded")
                    break
                start = max(w.clock, w.engine_free[0], w.ready[v])
                end = start + transfer.device_to_host.copy_time(mem[v])
                w.engine_free[0] = end
                w.resident[v] = False
                w.on_device -= mem[v]
                w.hold_until(end, s, mem[v])
                w.host_end[v] = end
                w.host_copy[v] = len(w.host)
                w.host.append([start, end, mem[v]])
                moved[0] += mem[v]
                memory = fixed + w.held_at(w.clock)
            else:
                if w.resident[v]:
                    violation = fail(s, v, word, f"'{ids[v]}' is already resident on the device")
                    break
                host_end = w.host_end[v]
                if host_end is None:
                    violation = fail(s, v, word, f"'{ids[v]}' has no copy on the host; offload it before "
                                                 "reloading it")
                    break
                start = max(w.clock, w.engine_free[1], host_end)
                end = start + transfer.host_to_device.copy_time(mem[v])
                w.engine_free[1] = end
                w.resident[v] = True
                w.ready[v] = end
                w.on_device += mem[v]
                copy = w.host[w.host_copy[v]]
                copy[1] = max(copy[1], end)
                moved[1] += mem[v]
                memory = fixed + w.held_at(w.clock)
        counts[kind] += 1
        step_memory[s] = memory
        step_start[s], step_end[s] = start, end
        if kind in (COMPUTE, RELOAD) and (peak_step < 0 or memory > peak):
            peak, peak_step = memory, s
    if violation is None:
        violation = _end_of_walk(graph, computed, w, S)
    limit = violation.step if violation is not None and violation.step < S else S
    ends = step_end[:limit]
    duration = float(ends.max()) if limit else 0.0
    n_computes = counts[COMPUTE]
    return Simulation(
        valid=violation is None,
        violation=violation,
        peak=peak,
        peak_step=peak_step,
        duration=_as_time(duration),
        step_memory=step_memory,
        num_steps=S,
        computes=n_computes,
        frees=counts[FREE],
        recomputations=n_computes - int(np.count_nonzero(computed)),
        host_peak=_host_peak(w.host),
        to_host=moved[0],
        to_device=moved[1],
        wait=_as_time(wait),
        offloads=counts[OFFLOAD],
        reloads=counts[RELOAD],
        step_start=step_start,
        step_end=step_end,
    )


def _as_time(t: float) -> Number:
    return int(t) if t.is_integer() and abs(t) < 2**53 else t


def _end_of_walk(graph: Graph, computed: np.ndarray, w: _Walk, S_end: int) -> Violation | None:
    """End of schedule: every node computed, then every output resident on the device."""
    never = np.flatnonzero(computed == 0)
    if len(never):
        v = graph.ids[int(never[0])]
        more = f" (and {len(never) - 1} other nodes)" if len(never) > 1 else ""
        return Violation(S_end, v, f"node '{v}'{more} is never computed; every node must be computed at least once")
    for o in graph.output_indices:
        if not w.resident[o]:
            v = graph.ids[o]
            where = " (it is on the host)" if w.host_end[o] is not None else ""
            return Violation(S_end, v, f"output '{v}' is not resident when the schedule ends{where}")
    return None


def _host_peak(copies: list[list[float]]) -> Number:
    """The most host memory held at once: each copy from its offload's start to its last reload's end."""
    events = sorted([(start, 1, m) for start, _, m in copies] + [(end, 0, m) for _, end, m in copies])
    total: Number = 0
    peak: Number = 0
    for _, opening, m in events:  # at one instant, copies ending go before copies starting
        total = total + m if opening else total - m
        peak = max(peak, total)
    return peak
