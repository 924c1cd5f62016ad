"""Offloading over a schedule that keeps or recomputes: the gaps it holds values across, and copies written there.

A schedule without copies holds a value on the device from the step that computes (or reads) it to its
next reader, even where the computations in between do not read it. Such a stretch is a **gap**
(`Gap`, found by `held_gaps`). Across a gap the value can wait in host memory instead: an ``offload``
step right after the earlier step starts its copy out, and a ``reload`` step before the later reader
brings it back (docs/design.md section 3, "Offload"). One such pair is a `Move`; `insert_moves` writes
a set of them into the schedule, which is otherwise left as it is.

Where the reload goes decides what the pair is worth. The value's device memory is let go when its
copy out ends and held again from the reload's step on, so it is absent from the computations that
start in between; the reader waits when the copy in ends after the computations before it. `OffloadPlan`
holds a schedule, its moves and the simulator's walk of the result, and answers, from the walk's times,
where a reload of a new gap is hidden (`OffloadPlan.hidden_reload`, XLA's rule: both copies fit in the
compute time of the gap, given what the copy engines already carry) and which computations the value
would be absent from (`OffloadPlan.covers`). Those answers are estimates from the current walk (a new
copy can delay the copies queued after it on its engine): every plan is scored by `simulate` again.

The offload methods (``offload-hide``, ``offload-all``) are built from these pieces; anything that places
copies on a recompute-only schedule (a MILP deciding which gaps to offload) can use `held_gaps` and
`insert_moves` alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from remat_bench.core.graph import Graph, Number
from remat_bench.core.schedule import COMPUTE, FREE, OFFLOAD, RELOAD, Schedule, ScheduleBuilder
from remat_bench.core.simulate import Simulation, simulate


def host_link_missing(graph: Graph) -> str | None:
    """Why no offload method applies to ``graph`` (it has no host link), or None when it has one.

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    str or None
        One sentence saying how to give the graph a ``transfer``; None when it has one.
    """
    if graph.transfer is not None:
        return None
    return f"graph '{graph.name}' has no host link ('transfer'); import it with --device-profile or give --link"


@dataclass(frozen=True)
class Gap:
    """A value held on the device across computations that do not read it.

    ``after`` is the step index of the computation that made the value or last read it, ``reader`` that
    of its next reader; at least one computation lies strictly between them. ``window`` is the summed
    duration of those computations (the compute time copies can hide behind when nothing waits), and
    ``memory`` the value's size.
    """

    value: int
    after: int
    reader: int
    memory: Number
    window: Number


def held_gaps(graph: Graph, schedule: Schedule) -> list[Gap]:
    """Every gap of a schedule that moves nothing, in the order of their readers.

    A value is held from a step that computes or reads it to the next step that reads it, until it is
    freed; a stretch with a computation in between that does not read it is a gap. A value of no
    memory frees nothing by leaving, and has none.

    Parameters
    ----------
    graph : Graph
    schedule : Schedule
        A valid schedule of compute and free steps only.

    Returns
    -------
    list of Gap
        Ordered by ``reader``, then by value.

    Raises
    ------
    ValueError
        ``schedule`` has offload or reload steps.
    """
    if schedule.moves:
        raise ValueError("held_gaps reads a schedule that moves nothing; give it the schedule before its copies")
    kinds, nodes, impls = schedule.kinds.tolist(), schedule.nodes.tolist(), schedule.impls.tolist()
    op_start, op_duration = graph.op_start.tolist(), graph.op_duration.tolist()
    memory = graph.memory.tolist()
    in_ptr, in_idx = graph.op_in_ptr.tolist(), graph.op_in_idx.tolist()
    # time[s]: the summed duration of the computations before step s; computes[s]: how many there are.
    time: list[Number] = []
    computes: list[int] = []
    elapsed: Number = 0
    done = 0
    for kind, v, k in zip(kinds, nodes, impls):
        time.append(elapsed)
        computes.append(done)
        if kind == COMPUTE:
            elapsed += op_duration[op_start[v] + k]
            done += 1
    touched: dict[int, int] = {}  # value -> the last step that computed or read it, while it is held
    gaps: list[Gap] = []
    for s, (kind, v, k) in enumerate(zip(kinds, nodes, impls)):
        if kind == FREE:
            touched.pop(v, None)
            continue
        op = op_start[v] + k
        for u in sorted(in_idx[in_ptr[op]:in_ptr[op + 1]]):
            a = touched.get(u)
            if a is not None and computes[s] - computes[a] > 1 and memory[u] > 0:
                end_of_a = time[a] + op_duration[op_start[nodes[a]] + impls[a]]
                gaps.append(Gap(u, a, s, memory[u], time[s] - end_of_a))
            touched[u] = s
        touched[v] = s
    return gaps


@dataclass(frozen=True)
class Move:
    """An offload step right after ``gap.after`` and a reload step right before step ``reload_before``
    (a computation after ``gap.after``, at the latest ``gap.reader``), both step indices of the schedule
    the gap was found in."""

    gap: Gap
    reload_before: int


def _layout(n_steps: int, moves: Sequence[Move]) -> list[tuple[int, int]]:
    """The steps of the schedule with ``moves`` in order: (-1, i) for step i of the schedule, (OFFLOAD, m)
    and (RELOAD, m) for move m's copies. Several copies at one place go in the order of their readers
    (the value needed first starts first on its engine), then by value."""
    after: dict[int, list[int]] = {}
    before: dict[int, list[int]] = {}
    for m, move in enumerate(moves):
        after.setdefault(move.gap.after, []).append(m)
        before.setdefault(move.reload_before, []).append(m)

    def in_reader_order(ms: list[int]) -> list[int]:
        return sorted(ms, key=lambda m: (moves[m].gap.reader, moves[m].gap.value))

    out: list[tuple[int, int]] = []
    for i in range(n_steps):
        out.extend((RELOAD, m) for m in in_reader_order(before.get(i, [])))
        out.append((-1, i))
        out.extend((OFFLOAD, m) for m in in_reader_order(after.get(i, [])))
    return out


def insert_moves(schedule: Schedule, moves: Sequence[Move]) -> Schedule:
    """``schedule`` with each move's offload step right after its gap's earlier step and its reload step
    right before ``reload_before``; every other step as it was, with the schedule's metadata.

    Parameters
    ----------
    schedule : Schedule
        The schedule the moves' gaps were found in (`held_gaps`).
    moves : sequence of Move
        At most one per gap; the gaps of one value must not overlap.

    Returns
    -------
    Schedule
        A version 2 schedule when ``moves`` is not empty; ``schedule`` itself when it is.
    """
    if not moves:
        return schedule
    b = ScheduleBuilder()
    kinds, nodes, impls = schedule.kinds.tolist(), schedule.nodes.tolist(), schedule.impls.tolist()
    for what, i in _layout(len(schedule), moves):
        if what == OFFLOAD:
            b.offload(moves[i].gap.value)
        elif what == RELOAD:
            b.reload(moves[i].gap.value)
        elif kinds[i] == COMPUTE:
            b.compute(nodes[i], impls[i])
        else:
            b.free(nodes[i])
    return b.build(method=schedule.method, params=schedule.params, budget=schedule.budget,
                   solver=schedule.solver)


@dataclass
class OffloadPlan:
    """A schedule that moves nothing (``base``), the moves written into it, and the simulator's walk of the
    result (``schedule``, ``sim``), read in ``base``'s step indices.

    Build one with `OffloadPlan.of`; `with_moves` gives the plan of another set of moves over the same base.
    """

    graph: Graph
    base: Schedule
    moves: tuple[Move, ...]
    schedule: Schedule
    sim: Simulation
    at: np.ndarray  # at[i]: the index in ``schedule`` of ``base``'s step i (at[len(base)]: len(schedule))
    offload_at: np.ndarray  # the index in ``schedule`` of each move's offload step
    reload_at: np.ndarray  # and of its reload step

    @classmethod
    def of(cls, graph: Graph, base: Schedule, moves: Sequence[Move] = ()) -> OffloadPlan:
        """The plan of ``moves`` over ``base``, simulated.

        Parameters
        ----------
        graph : Graph
            It must have a host link (``transfer``) when ``moves`` is not empty.
        base : Schedule
            A valid schedule that moves nothing.
        moves : sequence of Move
            Moves over gaps of ``base`` (`held_gaps`).

        Returns
        -------
        OffloadPlan
        """
        moves = tuple(moves)
        layout = _layout(len(base), moves)
        at = np.zeros(len(base) + 1, dtype=np.int64)
        offload_at = np.zeros(len(moves), dtype=np.int64)
        reload_at = np.zeros(len(moves), dtype=np.int64)
        for j, (what, i) in enumerate(layout):
            (offload_at if what == OFFLOAD else reload_at if what == RELOAD else at)[i] = j
        at[len(base)] = len(layout)
        schedule = insert_moves(base, moves)
        return cls(graph, base, moves, schedule, simulate(graph, schedule), at, offload_at, reload_at)

    def with_moves(self, moves: Sequence[Move]) -> OffloadPlan:
        """The plan of ``moves`` over the same base, simulated.

        Parameters
        ----------
        moves : sequence of Move
            Moves over gaps of ``base``; they replace this plan's.

        Returns
        -------
        OffloadPlan
        """
        return OffloadPlan.of(self.graph, self.base, moves)

    # ------------------------------------------------------------------ the walk's times

    @cached_property
    def _clock(self) -> np.ndarray:
        """clock[j]: when the last computation among the schedule's first j steps ends (the issue time of step j)."""
        ends = self.sim.step_end if self.sim.step_end is not None else _compute_ends(self.graph, self.schedule)
        return _running_max(np.where(self.schedule.kinds == COMPUTE, ends, 0.0))

    @cached_property
    def _base_clock(self) -> np.ndarray:
        """The same for ``base`` alone, where nothing waits: the summed duration of the computations before
        each step."""
        return _running_max(np.where(self.base.kinds == COMPUTE, _compute_ends(self.graph, self.base), 0.0))

    def _engine_free(self, kind: int, leave_out: int = -1) -> np.ndarray:
        """free[j]: when the copies of ``kind`` among the schedule's first j steps have all ended (the copy at
        step ``leave_out`` left out)."""
        kinds = self.schedule.kinds
        if self.sim.step_end is None:
            return np.zeros(len(kinds) + 1)
        copies = kinds == kind
        if leave_out >= 0:
            copies = copies.copy()
            copies[leave_out] = False
        return _running_max(np.where(copies, self.sim.step_end, 0.0))

    @cached_property
    def _d2h_free(self) -> np.ndarray:
        return self._engine_free(OFFLOAD)

    @cached_property
    def _h2d_free(self) -> np.ndarray:
        return self._engine_free(RELOAD)

    @cached_property
    def _starts(self) -> np.ndarray:
        """When each step starts (a computation after its wait)."""
        if self.sim.step_start is not None:
            return self.sim.step_start
        ends = _compute_ends(self.graph, self.schedule)
        ops = self.schedule.ops(self.graph)
        return ends - np.where(self.schedule.kinds == COMPUTE, self.graph.op_duration[ops], 0)

    @cached_property
    def _base_computes(self) -> np.ndarray:
        """The step indices of ``base``'s computations, ascending."""
        return np.flatnonzero(self.base.kinds == COMPUTE)

    def issue(self, i: int) -> float:
        """When a step written right before ``base``'s step ``i`` is issued in the walk.

        Parameters
        ----------
        i : int
            A step index of ``base`` (``len(base)``: the end).

        Returns
        -------
        float
            The end of the last computation before it (0 when there is none).
        """
        return float(self._clock[self.at[i]])

    def copied_out(self, m: int) -> float:
        """When move ``m``'s copy out ends in the walk.

        Parameters
        ----------
        m : int
            An index into ``moves``.

        Returns
        -------
        float
        """
        assert self.sim.step_end is not None
        return float(self.sim.step_end[self.offload_at[m]])

    def copied_in(self, m: int) -> float:
        """When move ``m``'s copy in ends in the walk.

        Parameters
        ----------
        m : int
            An index into ``moves``.

        Returns
        -------
        float
        """
        assert self.sim.step_end is not None
        return float(self.sim.step_end[self.reload_at[m]])

    def copy_out_end(self, gap: Gap) -> float:
        """When a copy out of the gap's value written right after ``gap.after`` would end, after the copies
        out the device-to-host engine already carries there.

        Parameters
        ----------
        gap : Gap
            A gap of ``base`` without a move in this plan.

        Returns
        -------
        float
        """
        assert self.graph.transfer is not None
        start = max(self.issue(gap.after + 1), float(self._d2h_free[self.at[gap.after + 1]]))
        return start + self.graph.transfer.device_to_host.copy_time(gap.memory)

    def reload_positions(self, gap: Gap, out_end: float) -> np.ndarray:
        """The computations of ``base`` a reload of the gap's value may usefully go right before.

        Parameters
        ----------
        gap : Gap
            A gap of ``base``.
        out_end : float
            When the value's copy out ends.

        Returns
        -------
        np.ndarray
            The step indices of the computations after the first one that starts once the copy out has
            ended (the value is away from that one), up to and including the reader; ascending, empty when
            no computation of the gap starts that late.
        """
        computes = self._base_computes
        lo, hi = np.searchsorted(computes, [gap.after + 1, gap.reader + 1])
        inside = computes[lo:hi]  # the computations after ``after``, the reader last
        late = np.flatnonzero(self._starts[self.at[inside[:-1]]] >= out_end)
        if not len(late):
            return inside[:0]
        return inside[late[0] + 1:]

    def hidden_reload(self, gap: Gap, moving: int | None = None) -> int | None:
        """The latest computation of ``base`` right before which a reload of the gap's value is hidden, or None.

        Hidden: its copy in, started at the latest of its issue, the end of the copies the host-to-device
        engine already carries there and the end of the copy out, ends by the time the reader would
        start were nothing waiting (``base``'s own clock); and a computation starts between the copy
        out's end and the reload, so that the value is away from it. This is XLA's rule (both copies fit
        in the compute time of the gap) with the engines' queues counted; the times before the reload
        are the walk's.

        Parameters
        ----------
        gap : Gap
            A gap of ``base``.
        moving : int or None
            The index of the move of ``gap`` in this plan when it has one (its reload is being placed
            again): its copy out's end is the walk's, and its own reload is left out of the engine's
            queue. None for a new gap (`copy_out_end` estimates its copy out).

        Returns
        -------
        int or None
            A step index of ``base``.
        """
        assert self.graph.transfer is not None
        if moving is None:
            out_end, h2d_free = self.copy_out_end(gap), self._h2d_free
        else:
            out_end, h2d_free = self.copied_out(moving), self._engine_free(RELOAD, int(self.reload_at[moving]))
        positions = self.reload_positions(gap, out_end)
        if not len(positions):
            return None
        j = self.at[positions]
        starts = np.maximum(np.maximum(self._clock[j], h2d_free[j]), out_end)
        ends = starts + self.graph.transfer.host_to_device.copy_time(gap.memory)  # non-decreasing along positions
        k = int(np.searchsorted(ends, self._base_clock[gap.reader], side="right"))
        return int(positions[k - 1]) if k else None

    # ------------------------------------------------------------------ memory

    @cached_property
    def peak_steps(self) -> np.ndarray:
        """The indices in ``schedule`` of the compute and reload steps whose memory is the peak."""
        kinds = self.schedule.kinds
        counted = (kinds == COMPUTE) | (kinds == RELOAD)
        return np.flatnonzero(counted & (self.sim.step_memory == self.sim.peak))

    @property
    def pressure(self) -> tuple[Number, int]:
        """The peak and how many steps reach it: a move that lowers either (the first) helps."""
        return self.sim.peak, len(self.peak_steps)

    def covers(self, gap: Gap, reload_before: int, steps: np.ndarray, out_end: float | None = None) -> bool:
        """Whether a move of ``gap`` reloaded right before ``reload_before`` takes the value away from one of
        the schedule's ``steps`` (indices in ``schedule``): a step between the two copies that starts (a
        reload: is issued) after the copy out has ended.

        Parameters
        ----------
        gap : Gap
        reload_before : int
            A step index of ``base``.
        steps : np.ndarray
            Step indices of ``schedule`` (`peak_steps`).
        out_end : float or None
            When the copy out ends (`copy_out_end` when None).

        Returns
        -------
        bool
        """
        if out_end is None:
            out_end = self.copy_out_end(gap)
        inside = steps[(steps > self.at[gap.after]) & (steps < self.at[reload_before])]
        if not len(inside):
            return False
        kinds = self.schedule.kinds[inside]
        times = np.where(kinds == COMPUTE, self._starts[inside], self._clock[inside])
        return bool((times >= out_end).any())


def _running_max(values: np.ndarray) -> np.ndarray:
    """out[j]: the largest of the first j values (0 for none)."""
    out = np.zeros(len(values) + 1)
    np.maximum.accumulate(values, out=out[1:])
    return out


def _compute_ends(graph: Graph, schedule: Schedule) -> np.ndarray:
    """Each step's end in a schedule that moves nothing (computations back to back; other steps end with the
    computation before them)."""
    ops = schedule.ops(graph)
    durations = np.where(schedule.kinds == COMPUTE, graph.op_duration[ops], 0)
    return np.cumsum(durations, dtype=np.float64)


def recompute_cost_per_byte(graph: Graph, gap: Gap) -> float:
    """The duration of computing the gap's value again per unit of its memory: torchtitan's and XLA's order
    of what to offload first (the values most expensive to recompute for their size).

    Parameters
    ----------
    graph : Graph
    gap : Gap

    Returns
    -------
    float
        Duration units per memory unit of the value's first implementation.
    """
    return float(graph.duration[gap.value]) / float(gap.memory)
