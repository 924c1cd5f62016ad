"""Moccasin: retention intervals on CP-SAT (Bartan et al., ICML 2023).

Each node v has up to C retention intervals [s, e) (parameter
``max_intervals``) with presence literals p: interval 1 is present, interval
j present implies interval j-1 present, and a node's intervals are ordered
and disjoint (paper (2), (3), (7)). An interval's first event computes v; the
value is held until its end. With the input-order stages of the paper's
section 2.3, stage i ends with the first computation of node i; earlier events
of stage i may recompute nodes before i, each at the position reserved for
it, so two computations never share an event (6).

- Memory (4): one cumulative constraint over all intervals, demand memory(v),
  capacity budget - fixed memory. Workspace is held only while v computes: a
  unit interval at each start, demand workspace(v), so that the model's peak
  is the simulator's.
- Precedence (5): for each edge (u, v) and each copy b of v, some present copy
  a of u covers the start of b: s_u^a < s_v^b < e_u^a.
- Outputs are held to the end; the objective (1) is sum_j p_v^j duration(v).
- Two phases (2.4): phase 1 minimises max(peak, budget) from a hint, phase 2
  minimises duration from phase 1's solution.

What this implementation changes, each for a measured gain (docs/benchmarks.md,
"Moccasin" and "Figures that used to live in the code"):

- Events are numbered stage * n + position, and the start of a recomputation
  of v is the affine expression n * stage + v of a contiguous stage variable,
  rather than the paper's packed numbering with gappy domains (a much shorter
  presolve).
- Precedence uses one Boolean per (edge, copy of v, copy of u) meaning "this
  copy of u is present and covers this start", at least one per present copy
  of v, instead of add_reservoir_constraint_with_active: faster presolve,
  earlier first solutions, and a lower bound where the reservoir gave none.
- Every recomputation feeds some consumer (a redundant constraint that
  shortens proofs).
- Hints are complete (interval sizes and precedence flags too), and phase 1
  is hinted with the best of the baseline and the greedy and chen schedules,
  so that CP-SAT starts from them at once.
- Memory is divided by its gcd; the budget is rounded down in that unit.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from remat_bench.core.baseline import baseline, baseline_schedule
from remat_bench.core.budget import memory_text
from remat_bench.core.cleanup import place_frees
from remat_bench.core.graph import Graph, Number
from remat_bench.core.schedule import COMPUTE, Schedule, ScheduleBuilder
from remat_bench.core.simulate import simulate
from remat_bench.methods.base import (
    Deadline,
    Membership,
    Method,
    MethodResult,
    Param,
    Role,
    SolutionStatus,
    SolveContext,
    Termination,
    cut_short,
    run_interruptibly,
)
from remat_bench.methods.candidates import (
    KEEP_BEST,
    Candidate,
    Source,
    best_of,
    candidate_schedules,
    offered_candidates,
)
from remat_bench.toolkit import cp_sat
from remat_bench.toolkit.bound import BoundSource, any_order_bound
from remat_bench.toolkit.improve import staged_repair
from remat_bench.toolkit.order_search import OrderAnswer

MAX_MODEL_OBJECTS = 3_000_000
# order=free: the staged step's share of the time left after the order step. The free model
# never beat the staged answer on the published random layered graphs (paper-moccasin sweep), so
# the staged step, which gains from more time there, gets most of it.
STAGED_SHARE = 0.7

# Per node, the (start, end) events of its present retention intervals: a hint, or a solution.
Intervals = list[list[tuple[int, int]]]


def integer_scale(values: np.ndarray, extra: list[Number]) -> tuple[int | float, bool]:
    """(q, exact): divide memory by q to get integers; exact when every value is a multiple of q.

    Parameters
    ----------
    values : np.ndarray
        Memory quantities (the node sizes).
    extra : list of Number
        More quantities the unit must divide (workspaces, fixed memory).

    Returns
    -------
    q : int or float
        The gcd of the nonzero values when all are integral (1 when none is nonzero); else a
        millionth of the largest, sizes then rounding up.
    exact : bool
        Whether every value is a multiple of ``q``.
    """
    arrays = [values, np.asarray(extra)]
    if all(a.dtype.kind in "iu" or np.all(np.mod(a, 1) == 0) for a in arrays):
        ints = [int(x) for a in arrays for x in np.unique(a) if x]
        return (math.gcd(*ints) if ints else 1), True
    # Fractional sizes: a fixed-point grid, rounding sizes up (the model is then conservative).
    top = max(float(np.max(values)), *map(float, extra), 1.0)
    return top / 1e6, False


@dataclass
class Copy:
    """One retention interval of a node in the model."""

    node: int
    index: int
    start: Any  # linear expression
    end: Any  # IntVar
    size: Any  # IntVar
    present: Any  # BoolVar or True
    stage: Any | None = None  # IntVar (None for the fixed first copy)
    stage_lb: int = 0


@dataclass
class StagedModel:
    """The staged retention-interval model of one graph, with what is needed to hint and decode."""

    graph: Graph
    model: Any
    copies: list[list[Copy]]
    flags: dict[tuple[int, int, int, int], Any]  # (u, v, b, a) -> covers
    horizon: int
    capacity: Any
    scale: float
    dur_scale: float
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return self.graph.n

    # ------------------------------------------------------------------ hints

    def intervals_of(self, schedule: Schedule) -> Intervals | None:
        """Per node, the (start, end) events of a staged schedule; None if outside the space.

        ``schedule`` is a compute order whose values are freed at last use (unused
        computations kept), its first computations in input order.

        Parameters
        ----------
        schedule : Schedule

        Returns
        -------
        Intervals or None
            Per node, its intervals sorted by start (one held to the end ends at the horizon); None
            when the schedule is not staged or needs more intervals than the model has.
        """
        n = self.n
        kinds, nodes = schedule.kinds, schedule.nodes
        first = np.full(n, -1, dtype=np.int64)
        stage_of_step = np.zeros(len(kinds), dtype=np.int64)
        seen = 0
        for s in range(len(kinds)):
            if kinds[s] == COMPUTE:
                v = int(nodes[s])
                if first[v] < 0:
                    if v != seen:
                        return None
                    first[v] = s
                    seen += 1
                stage_of_step[s] = seen - 1 if first[v] == s else seen
        if seen != n:
            return None
        out: Intervals = [[] for _ in range(n)]
        open_at: dict[int, int] = {}
        last_event = 0
        for s in range(len(kinds)):
            v = int(nodes[s])
            if kinds[s] == COMPUTE:
                stage = int(stage_of_step[s])
                if stage >= n or v > stage:
                    return None
                event = stage * n + v
                if event <= last_event and s > 0:
                    return None  # two computations in one event, or out of order in a stage
                last_event = event
                open_at[v] = event
            else:
                out[v].append((open_at.pop(v), last_event + 1))
        for v, start in open_at.items():
            out[v].append((start, self.horizon))
        for v in range(n):
            out[v].sort()
            if len(out[v]) > len(self.copies[v]):
                return None
        return out

    def free_intervals_of(self, schedule: Schedule) -> Intervals | None:
        """Per node, the (start, end) events of any valid schedule in the order-free model.

        Compute steps take events 0, 1, 2, ... in order; a value freed after the k-th
        computation ends at event k. None if the schedule needs more events or copies.

        Parameters
        ----------
        schedule : Schedule

        Returns
        -------
        Intervals or None
            Per node, its intervals sorted by start (one held to the end ends at the horizon).
        """
        out: Intervals = [[] for _ in range(self.n)]
        open_at: dict[int, int] = {}
        event = -1
        for kind, v in zip(schedule.kinds.tolist(), schedule.nodes.tolist()):
            if kind == COMPUTE:
                event += 1
                open_at[v] = event
            else:
                out[v].append((open_at.pop(v), event + 1))
        if event >= self.horizon:
            return None
        for v, start in open_at.items():
            out[v].append((start, self.horizon))
        for v in range(self.n):
            out[v].sort()
            if len(out[v]) > len(self.copies[v]):
                return None
        return out

    def hint(self, intervals: Intervals) -> None:
        """A complete hint: presences, stages, ends, sizes and every precedence flag.

        Parameters
        ----------
        intervals : Intervals
            Per node, the (start, end) events of its present intervals (`intervals_of`,
            `free_intervals_of`); the model's earlier hints are cleared.
        """
        m = self.model
        m.clear_hints()
        n = self.n
        for v in range(n):
            for j, c in enumerate(self.copies[v]):
                if j < len(intervals[v]):
                    s, e = intervals[v][j]
                    if j:
                        m.add_hint(c.present, True)
                    if c.stage is not None:
                        m.add_hint(c.stage, s // n)
                    elif not isinstance(c.start, int):
                        m.add_hint(c.start, s)
                    m.add_hint(c.end, e)
                    m.add_hint(c.size, e - s)
                elif c.stage is not None:
                    m.add_hint(c.present, False)
                    lo = c.stage_lb
                    m.add_hint(c.stage, lo)
                    m.add_hint(c.end, lo * n + v + 1)
                    m.add_hint(c.size, 1)
                else:  # order-free: an absent copy parks after the present ones
                    m.add_hint(c.present, False)
                    last = intervals[v][-1][1] if intervals[v] else 0
                    s_hint = min(max(last, j), self.horizon - 1)
                    m.add_hint(c.start, s_hint)
                    m.add_hint(c.end, s_hint + 1)
                    m.add_hint(c.size, 1)
        for (u, v, b, a), flag in self.flags.items():
            value = False
            if b < len(intervals[v]) and a < len(intervals[u]):
                sv = intervals[v][b][0]
                su, eu = intervals[u][a]
                value = su < sv < eu
            m.add_hint(flag, value)

    def decode(self, solver: Any) -> Schedule:
        """Compute at each present interval's start, free at its end (frees first within an event).

        Parameters
        ----------
        solver : Any
            A ``cp_model.CpSolver`` (or a solution callback) holding a solution of this model.

        Returns
        -------
        Schedule
        """
        events: list[tuple[int, int, int]] = []  # (event, 0 free / 1 compute, node)
        for v in range(self.n):
            for c in self.copies[v]:
                if c.present is True or solver.boolean_value(c.present):
                    start = solver.value(c.start)
                    end = solver.value(c.end)
                    events.append((start, 1, v))
                    if end < self.horizon:
                        events.append((end, 0, v))
        events.sort()
        out = ScheduleBuilder()
        for _, kind, v in events:
            if kind == 1:
                out.compute(v)
            else:
                out.free(v)
        return out.build()


@dataclass(frozen=True)
class _Units:
    """The graph's numbers in the model's integers: memory over ``scale``, durations over ``dur_scale``."""

    scale: float
    memory: np.ndarray
    workspace: np.ndarray
    fixed: int
    duration: np.ndarray
    dur_scale: float


def _model_units(graph: Graph) -> _Units:
    """Memory divided by its gcd (rounded up when fractional); fractional durations on a fixed-point grid."""
    q, _ = integer_scale(graph.memory, [*np.unique(graph.workspace).tolist(), graph.fixed_memory])
    mem = np.ceil(np.asarray(graph.memory, dtype=np.float64) / q).astype(np.int64)
    ws = np.ceil(np.asarray(graph.workspace, dtype=np.float64) / q).astype(np.int64)
    dur = np.asarray(graph.duration)
    dur_scale = 1.0
    if dur.dtype.kind == "f" and not np.all(np.mod(dur, 1) == 0):
        dur_scale = max(float(dur.max()), 1e-12) / 1e6
        dur = np.round(dur / dur_scale)
    return _Units(q, mem, ws, math.ceil(graph.fixed_memory / q), dur.astype(np.int64), dur_scale)


def _check_model_size(graph: Graph, max_intervals: int) -> None:
    """Refuse a model too large to build: raise `ModelTooLargeError`."""
    # Each interval costs about four model objects and each precedence flag three, built one by
    # one in Python (about 1 KiB each with OR-Tools' wrappers).
    n = graph.n
    objects = 4 * n * max_intervals + 3 * graph.num_edges * max_intervals**2
    if objects > MAX_MODEL_OBJECTS:
        from remat_bench.core.errors import ModelTooLargeError

        raise ModelTooLargeError(
            f"the Moccasin model of this graph ({n} nodes, {graph.num_edges} edges, {max_intervals} intervals "
            f"per node) would have about {objects:,} variables and constraints, beyond the "
            f"{MAX_MODEL_OBJECTS:,} that CP-SAT handles here; use a method that scales (twremat, greedy)")


def build_staged(graph: Graph, budget: Number | None, max_intervals: int,
                 feeds_consumer: bool = True, precedence: str = "flags",
                 order: str = "staged", events: int = 0, bounds: BoundSource | None = None) -> StagedModel:
    """The retention-interval model; ``budget`` None leaves the capacity a variable (phase 1 form).

    ``order="staged"``: the input-order stages (events stage * n + position).
    ``order="free"``: the paper's general formulation (its section 2.1): every copy
    starts at any of ``events`` events, compute events pairwise distinct.
    ``precedence``: "flags" (this implementation's encoding of (5)) or "reservoir" (the paper's (10)).
    The blocks below follow the paper's problem (1)-(8); each function cites its equations.

    Parameters
    ----------
    graph : Graph
    budget : Number or None
        In the graph's memory units; None: the capacity is a variable (phase 1).
    max_intervals : int
        Retention intervals per node, C.
    feeds_consumer : bool
        Add the redundant constraint that every recomputation feeds some consumer (flags only).
    precedence : str
        ``flags`` or ``reservoir``.
    order : str
        ``staged`` or ``free``.
    events : int
        Events of the order-free model (at least n are used); not read when staged.
    bounds : BoundSource or None
        The run's bound cache, for the any-order bound on the duration; None: a short bound of its own.

    Returns
    -------
    StagedModel

    Raises
    ------
    ModelTooLargeError
        The model would have more than `MAX_MODEL_OBJECTS` variables and constraints.
    """
    from ortools.sat.python import cp_model

    t0 = time.perf_counter()
    _check_model_size(graph, max_intervals)
    n = graph.n
    free = order == "free"
    # Events 0 .. T-1; an interval ending at T is held to the end.
    T = max(events, n) if free else n * n
    units = _model_units(graph)
    m = cp_model.CpModel()

    # Variables: start, end, size and presence of every retention interval, domain (9) or (11).
    copies = _free_copies(m, n, max_intervals, T) if free else _staged_copies(m, n, max_intervals)
    # (2), (3), (7): the intervals themselves, ordered and disjoint per node; outputs held to the end.
    held, demands = _retention_intervals(m, copies, units.memory, units.workspace)
    _hold_outputs(m, graph, copies, T)
    # (5): every input present at each computation.
    flags: dict[tuple[int, int, int, int], Any] = {}
    if precedence == "reservoir":
        _precedence_reservoir(m, graph, copies)
    elif precedence == "flags":
        flags = _precedence_flags(m, graph, copies, free)
    if feeds_consumer and precedence != "reservoir":  # stated over the flags, which the reservoir has not
        _feeds_some_consumer(m, graph, copies, flags)
    # (4) or, without a budget, (13): memory.
    capacity = _memory(m, held, demands, budget, units)
    if free:  # (6); the stages of section 2.3 make it hold by construction
        _distinct_compute_events(m, copies)
    # (1): total duration.
    objective = _objective(m, copies, units.duration)
    if budget is not None and units.dur_scale == 1.0:  # not in the paper: the any-order bound
        _duration_bound(m, objective, graph, budget, bounds)
    stats = {
        "intervals": sum(len(r) for r in copies),
        "precedence_flags": len(flags),
        "build_time_s": round(time.perf_counter() - t0, 3),
        "memory_scale": units.scale,
    }
    return StagedModel(graph, m, copies, flags, T, capacity, units.scale, units.dur_scale, stats)


def _free_copies(m: Any, n: int, max_intervals: int, T: int) -> list[list[Copy]]:
    """The variables of the general formulation (section 2.1): every start and end among the T events, (9).

    Copy j of v starts at event j or later and ends after it (its j earlier copies come first, (3));
    copy 0 is present, (7); the others have a presence literal p_v^j.
    """
    copies: list[list[Copy]] = []
    for v in range(n):
        row = []
        for j in range(max_intervals):
            start = m.new_int_var(j, T - 1, f"s{v}_{j}")
            end = m.new_int_var(j + 1, T, f"e{v}_{j}")
            size = m.new_int_var(1, T, f"z{v}_{j}")
            present = True if j == 0 else m.new_bool_var(f"p{v}_{j}")
            row.append(Copy(v, j, start, end, size, present))
        copies.append(row)
    return copies


def _staged_copies(m: Any, n: int, max_intervals: int) -> list[list[Copy]]:
    """The variables of the input-order stages (section 2.3, domain (11)), n stages of n events.

    Node v is computed only at position v of a stage. Its first copy starts at a fixed event,
    v * n + v (section 2.3: "no longer a variable"), and is present, (7). Copy j >= 1 starts at
    n * stage + v, with a stage variable in [v + j, n - 1]: its j earlier copies each take a
    stage of their own from v on. Copies that no stage can hold are left out.
    """
    T = n * n
    copies: list[list[Copy]] = []
    for v in range(n):
        row = []
        for j in range(min(max_intervals, n - v)):
            if j == 0:
                start = v * n + v
                end = m.new_int_var(start + 1, T, f"e{v}_0")
                size = m.new_int_var(1, T - start, f"z{v}_0")
                row.append(Copy(v, 0, start, end, size, True))
            else:
                stage = m.new_int_var(v + j, n - 1, f"t{v}_{j}")
                present = m.new_bool_var(f"p{v}_{j}")
                end = m.new_int_var(v * n + v + 1, T, f"e{v}_{j}")
                size = m.new_int_var(1, T, f"z{v}_{j}")
                row.append(Copy(v, j, stage * n + v, end, size, present, stage, v + j))
        copies.append(row)
    return copies


def _retention_intervals(m: Any, copies: list[list[Copy]], mem: np.ndarray,
                         ws: np.ndarray) -> tuple[list[Any], list[int]]:
    """The interval variables and the constraints between a node's copies; returns what memory (4) sums.

    (2): end after start (an interval's size is at least one event). (7): copy j present implies
    copy j - 1 present. (3): a node's present copies are ordered and disjoint; in stages, also in
    increasing stages. Besides each retention interval (demand memory(v)), a unit interval at its
    start holds v's workspace while v computes, so that the model's peak is the simulator's.
    """
    intervals, demands, ws_intervals, ws_demands = [], [], [], []
    for v, row in enumerate(copies):
        for j, c in enumerate(row):
            if j == 0:
                intervals.append(m.new_interval_var(c.start, c.size, c.end, f"i{v}_0"))
                if ws[v]:
                    ws_intervals.append(m.new_fixed_size_interval_var(c.start, 1, f"w{v}_0"))
            else:
                intervals.append(m.new_optional_interval_var(c.start, c.size, c.end, c.present, f"i{v}_{j}"))
                if ws[v]:
                    ws_intervals.append(m.new_optional_fixed_size_interval_var(c.start, 1, c.present, f"w{v}_{j}"))
                prev = row[j - 1]
                if j > 1:  # copy 0 is always present
                    m.add_implication(c.present, prev.present)
                m.add(prev.end <= c.start).only_enforce_if(c.present)
                if j > 1 and c.stage is not None and prev.stage is not None:
                    m.add(prev.stage + 1 <= c.stage).only_enforce_if(c.present)
            demands.append(int(mem[v]))
            if ws[v]:
                ws_demands.append(int(ws[v]))
    return intervals + ws_intervals, demands + ws_demands


def _hold_outputs(m: Any, graph: Graph, copies: list[list[Copy]], T: int) -> None:
    """Outputs are resident when the schedule ends (docs/design.md section 3): the last present copy ends at T."""
    for o in graph.output_indices:
        row = copies[o]
        for j, c in enumerate(row):
            nxt = row[j + 1].present if j + 1 < len(row) else None
            if nxt is None:
                if c.present is True:
                    m.add(c.end == T)
                else:
                    m.add(c.end == T).only_enforce_if(c.present)
            else:
                enforce = [nxt.Not()] if c.present is True else [c.present, nxt.Not()]
                m.add(c.end == T).only_enforce_if(enforce)


def _precedence_flags(m: Any, graph: Graph, copies: list[list[Copy]],
                      free: bool) -> dict[tuple[int, int, int, int], Any]:
    """Precedence (5), this implementation's encoding: for each edge (u, v) and copy b of v, some
    present copy a of u covers its start, s_u^a < s_v^b < e_u^a.

    One Boolean flags[(u, v, b, a)] per (edge, copy of v, copy of u) states "copy a of u is present
    and covers the start of copy b of v"; at least one is true per present copy of v. Faster to
    presolve than the reservoir (10), and it gives a lower bound where the reservoir gave none.
    """
    flags: dict[tuple[int, int, int, int], Any] = {}
    for v in range(graph.n):
        for u in graph.inputs[v]:
            for b, cv in enumerate(copies[v]):
                options = []
                for a, cu in enumerate(copies[u]):
                    f = m.new_bool_var(f"f{u}_{v}_{b}_{a}")
                    flags[(u, v, b, a)] = f
                    if cu.present is not True:
                        m.add_implication(f, cu.present)
                    # u's copy starts before (stages: u < v, so an earlier or equal stage) ...
                    if free:
                        m.add(cu.start + 1 <= cv.start).only_enforce_if(f)
                    elif cu.stage is not None or cv.stage is not None:
                        su = u if cu.stage is None else cu.stage
                        sv = v if cv.stage is None else cv.stage
                        m.add(su <= sv).only_enforce_if(f)
                    # ... and is held at v's start.
                    m.add(cu.end >= cv.start + 1).only_enforce_if(f)
                    options.append(f)
                if cv.present is True:
                    m.add_bool_or(options)
                else:
                    m.add_bool_or(options).only_enforce_if(cv.present)
    return flags


def _precedence_reservoir(m: Any, graph: Graph, copies: list[list[Copy]]) -> None:
    """Precedence (5), the paper's encoding (10) (section 2.2), one reservoir per edge (u, v).

    u's present copies raise a level over their interval; each present start of v lowers it
    for one event; the level may not go below zero.
    """
    true = m.new_constant(1)
    for v in range(graph.n):
        for u in graph.inputs[v]:
            times, changes, actives = [], [], []
            for cu in copies[u]:
                lit = true if cu.present is True else cu.present
                times += [cu.start, cu.end]
                changes += [1, -1]
                actives += [lit, lit]
            for cv in copies[v]:
                lit = true if cv.present is True else cv.present
                times += [cv.start, cv.start + 1]
                changes += [-1, 1]
                actives += [lit, lit]
            m.add_reservoir_constraint_with_active(times, changes, actives, 0, len(copies[u]))


def _feeds_some_consumer(m: Any, graph: Graph, copies: list[list[Copy]],
                         flags: dict[tuple[int, int, int, int], Any]) -> None:
    """A redundant constraint (not in the paper): a recomputation exists only to feed some consumer.

    Stated over the precedence flags: a present copy a >= 1 of a non-output v covers the start
    of some copy of a consumer. It shortens proofs (docs/benchmarks.md, "Figures that used to live
    in the code").
    Outputs are left out: they may be recomputed only to be held to the end.
    """
    feeds: dict[tuple[int, int], list[Any]] = {}
    for (u, _, _, a), f in flags.items():
        feeds.setdefault((u, a), []).append(f)
    for v in range(graph.n):
        if graph.is_output[v]:
            continue
        for a, c in enumerate(copies[v]):
            if a == 0:
                continue
            options = feeds.get((v, a), [])
            if options:
                m.add_bool_or(options).only_enforce_if(c.present)
            else:
                m.add(c.present == 0)


def _memory(m: Any, held: list[Any], demands: list[int], budget: Number | None, units: _Units) -> Any:
    """Memory (4) as one cumulative constraint (section 2.2); returns its capacity.

    With a budget, the capacity is the budget less the fixed memory, in memory units (rounded
    down). Without one it is a variable, the peak of phase 1's memory constraint (13).
    """
    if budget is None:
        capacity = m.new_int_var(0, int(units.memory.sum() + units.workspace.max(initial=0)), "peak")
    else:
        capacity = max(0, math.floor(budget / units.scale) - units.fixed)
    m.add_cumulative(held, demands, capacity)
    return capacity


def _distinct_compute_events(m: Any, copies: list[list[Copy]]) -> None:
    """(6): compute events are pairwise distinct (the paper's alldifferent), as a no-overlap of unit intervals."""
    units = []
    for row in copies:
        for c in row:
            if c.present is True:
                units.append(m.new_fixed_size_interval_var(c.start, 1, f"c{c.node}_{c.index}"))
            else:
                units.append(m.new_optional_fixed_size_interval_var(c.start, 1, c.present, f"c{c.node}_{c.index}"))
    m.add_no_overlap(units)


def _objective(m: Any, copies: list[list[Copy]], dur: np.ndarray) -> Any:
    """The objective (1), total duration: sum over v and j of p_v^j duration(v); minimised."""
    objective = sum(int(dur[c.node]) * (1 if c.present is True else c.present)
                    for row in copies for c in row if dur[c.node])
    m.minimize(objective)
    return objective


def _duration_bound(m: Any, objective: Any, graph: Graph, budget: Number, bounds: BoundSource | None) -> None:
    """A redundant constraint (not in the paper): the duration is at least the any-order cut bound.

    Every schedule, whatever its order, lasts at least that bound (`remat_bench.toolkit.bound`):
    stated, it lets CP-SAT stop as soon as it reaches it. The pipeline's bound when it computed
    one; else a short one of moccasin's own (its time).
    """
    if bounds is None:
        bound = any_order_bound(graph, budget, 3.0).value
    else:
        known = bounds.peek(graph, budget)
        bound = (known if known is not None else bounds.get(graph, budget, 3.0)[0]).value
    if bound is not None and bound > 0:
        m.add(objective >= int(bound))


class _Recorder:
    """Solution callback: time and objective of every improving solution, for stats and benchmarks;
    ``on_solution(callback)`` is called on each (the run's progress report) and stops the search when
    it answers True (the schedule, as the simulator scores it, meets the run's goal)."""

    def __init__(self, offset: float, on_solution: Any = None, stop_at: float | None = None) -> None:
        from ortools.sat.python import cp_model

        class Callback(cp_model.CpSolverSolutionCallback):
            def __init__(inner) -> None:
                super().__init__()

            def on_solution_callback(inner) -> None:
                self.points.append((round(offset + time.perf_counter() - self.t0, 3), inner.objective_value))
                done = on_solution is not None and on_solution(inner)
                if done or (stop_at is not None and inner.objective_value <= stop_at):
                    self.stopped_at_goal = True
                    inner.stop_search()  # the goal is met: nothing better is wanted

        self.points: list[tuple[float, float]] = []
        self.stopped_at_goal = False
        self.t0 = time.perf_counter()
        self.callback = Callback()


def _solve(sm: StagedModel, seconds: float | None, params: dict[str, Any], offset: float,
           on_solution: Any = None, stop_at: float | None = None,
           gap_units: float = 0) -> tuple[Any, Any, _Recorder]:
    """Solve ``sm`` for at most ``seconds`` (None: until proven), recording each solution's time and objective;
    the search stops at a solution of objective ``stop_at`` or less (the caller's goal, in model units), or
    within ``gap_units`` of its own bound (CP-SAT's absolute gap limit)."""
    from ortools.sat.python import cp_model

    solver = cp_model.CpSolver()
    if seconds is not None:
        solver.parameters.max_time_in_seconds = max(0.05, seconds)
    if gap_units > 0:
        solver.parameters.absolute_gap_limit = float(gap_units)
    solver.parameters.num_workers = params["threads"] or (os.cpu_count() or 1)
    solver.parameters.random_seed = params["seed"]
    if params["search"] == "hint":
        # Stay near the hint: LNS around it first (helps when the hint is already good).
        solver.parameters.repair_hint = True
        solver.parameters.hint_conflict_limit = 100
    # Ctrl-C stops the search (not the program): see `run_interruptibly`.
    solver.parameters.catch_sigint_signal = False
    recorder = _Recorder(offset, on_solution, stop_at)
    status = run_interruptibly(lambda: solver.solve(sm.model, recorder.callback), solver.stop_search)
    return solver, status, recorder


def staged_hint_candidates(graph: Graph, budget: Number | None, deadline: Deadline, context: SolveContext,
                           max_copies: int | None = None, stats: dict[str, Any] | None = None) -> list[Candidate]:
    """Schedules to start from: the baseline, the shaved input order, greedy's, chen's and kusumoto's,
    and the caller's hints (``context.hints``), valid ones above the budget included.

    Peak shaving from the input order (`remat_bench.toolkit.improve`): on the published random
    layered graphs at 0.8 it reaches the budget long before phase 1 from the baseline does.
    Kusumoto's lower-set DP (training graphs only) is often close to the best schedule known on
    transformers, where phase 2 from chen's schedule stays far above it; it gets at most 15% of
    the time (docs/benchmarks.md, "Moccasin" and "auto: the portfolio beside its members").

    Parameters
    ----------
    graph : Graph
    budget : Number or None
        In the graph's memory units; None: the baseline alone.
    deadline : Deadline
        The run's; each source gets a share of the time left.
    context : SolveContext
        The run's (its hints, runner and progress).
    max_copies : int or None
        The most computations of one value in the shaved order; None: no cap.
    stats : dict or None
        The run's stats: what each source gave is recorded under ``candidates``.

    Returns
    -------
    list of Candidate
        The baseline first, then the others fastest first.
    """
    base = baseline_schedule(graph)
    sim = simulate(graph, base)
    out = [Candidate("baseline", base, sim.peak, sim.duration)]
    if budget is None:
        return out
    sources = [Source("shaved", {"max_copies": max_copies}), Source("greedy"), Source("chen"),
               Source("kusumoto", share=0.15), Source("knapsack", {"solver": "search"}, share=0.1)]
    # A hint may be above the budget: phase 1 minimises max(peak, budget) from it.
    return out + candidate_schedules(graph, budget, deadline, sources, context=context, stats=stats,
                                     over_budget=True)


@dataclass
class _Hint:
    label: str
    intervals: Intervals
    peak: Number
    duration: Number


def _hints(sm: StagedModel, graph: Graph, candidates: list[tuple[str, Schedule]], order: str,
           budget: Number | None) -> tuple[_Hint | None, _Hint | None, list[str]]:
    """(lowest peak, fastest within ``budget``, labels tried) among the candidates the model can express.

    Phase 1 starts from the lowest-peak one (section 2.4: "any topological ordering ... provides
    a trivial feasible solution" to phase 1; the lower its peak, the less phase 1 has to do).
    When some candidate already fits, phase 1 has nothing to do and phase 2 starts from the
    fastest that fits (starting it from the lowest peak instead left it far above greedy's schedule
    on ResNet-50: docs/benchmarks.md, "auto: the portfolio beside its members").
    """
    lowest: _Hint | None = None
    fastest: _Hint | None = None
    tried = []
    for label, schedule in candidates:
        intervals = sm.intervals_of(schedule) if order == "staged" else sm.free_intervals_of(schedule)
        if intervals is None:
            continue
        sim = simulate(graph, schedule)
        tried.append(label)
        hint = _Hint(label, intervals, sim.peak, sim.duration)
        if lowest is None or hint.peak < lowest.peak:
            lowest = hint
        if budget is not None and hint.peak <= budget and (fastest is None or hint.duration < fastest.duration):
            fastest = hint
    return lowest, fastest, tried


class Moccasin(Method):
    name = "moccasin"
    search_space = "input-order stages, at most 2 retention intervals per node"
    description = "Bartan et al. 2023 retention intervals on CP-SAT (input-order stages or order=free)"
    params = (
        Param("max_intervals", int, 0, "retention intervals per node, C (0: 2 staged, 3 order-free)", minimum=0,
              maximum=100),
        Param("threads", int, 0, "CP-SAT workers (0: all cores)", minimum=0, maximum=1024, aliases=("num_workers",)),
        Param("phase1_share", float, 0.5, "largest share of the time limit phase 1 may use at budget=min (with a "
              "budget it ends as soon as a schedule fits)", minimum=0, maximum=1),
        Param("seed", int, 0, "CP-SAT random seed", minimum=0, maximum=2**31 - 1),
        Param("search", str, "default", "default: CP-SAT's portfolio; hint: repair and stay near the hint",
              choices=("default", "hint")),
        Param("feeds_consumer", bool, True, "add: every recomputation feeds some consumer (faster proofs)"),
        Param("precedence", str, "flags", "flags: one Boolean per (edge, copy, copy); reservoir: the paper's (10)",
              choices=("flags", "reservoir")),
        Param("hints", str, "all", "phase-1 hint from the baseline only, or the best of baseline/greedy/chen",
              choices=("all", "baseline")),
        Param("order", str, "staged", "staged: the input-order stages (section 2.3); free: any order (section 2.1)",
              choices=("staged", "free")),
        Param("events", int, 0, "events of the order-free model (0: 2n)", minimum=0, maximum=1_000_000),
        KEEP_BEST,
    )
    requires = ("ortools",)
    member = Membership(Role.EXACT, rank=1)

    @classmethod
    def input_order(cls, params: dict[str, Any]) -> str | None:
        return "free" if params.get("order") == "free" else "kept"

    @classmethod
    def space(cls, params: dict[str, Any]) -> str:
        if params.get("order") == "free":
            events = params.get("events") or "2n"
            return (f"any order, at most {params.get('max_intervals') or 3} retention intervals per node "
                    f"and {events} events")
        return f"input-order stages, at most {params.get('max_intervals') or 2} retention intervals per node"

    @classmethod
    def member_params(cls, graph: Graph, any_order_peak: Number | None) -> dict[str, Any]:
        """Inside auto, the order-free path (stages in the best order, then the free model) on a graph
        without backward nodes, whose input order is one topological order among many, and where a member
        that leaves the input order found an order of lower peak than the input order (it then starts from
        that order instead of searching for one again). On a training graph the input order (forward, then
        backward) is the one its stages are built for. On the published random layered graphs the
        order-free path ends at or below the staged model (docs/benchmarks.md, "auto on the published graphs").

        Parameters
        ----------
        graph : Graph
        any_order_peak : int or float or None
            The lowest peak of the orders found so far by members that may leave the input order.

        Returns
        -------
        dict
            ``{"order": "free"}`` where the order-free path applies, else no parameter.
        """
        if not len(graph.backward_indices):
            return {"order": "free"}
        if any_order_peak is None or any_order_peak >= baseline(graph).peak:
            return {}
        return {"order": "free"}

    def solve(self, graph: Graph, budget: Number | None, time_limit: float | None,
              **params: Any) -> MethodResult:
        deadline = Deadline(time_limit if time_limit is not None else 3600.0)
        if params["order"] == "free":
            return self._solve_free(graph, budget, deadline, params)
        # Two intervals per node were enough on the published graphs; three build a larger model and
        # slowed phase 2 down (docs/benchmarks.md, "Moccasin" and "Figures that used to live in the code").
        C = params["max_intervals"] or 2
        stats: dict[str, Any] = {}
        candidates = []
        all_hints = params["hints"] == "all"
        # Candidates count as the run's progress only where it may answer with them (keep_best).
        held = self.context if params["keep_best"] else replace(self.context, progress=None)
        pool = staged_hint_candidates(graph, budget if all_hints else None, deadline,
                                      held if all_hints else replace(held, hints=[]), max_copies=C, stats=stats)
        for c in pool:
            computes = c.schedule.nodes[c.schedule.kinds == COMPUTE]
            # Into the staged space where it has a counterpart (each stage in index order), else as it is.
            staged = staged_repair(graph, computes)
            nodes = computes if staged is None else staged
            candidates.append((c.source, place_frees(graph, nodes, np.zeros(len(nodes), dtype=np.int64),
                                                     drop_unused=False)))
        stats["max_intervals"] = C
        result = self._two_phase(graph, budget, deadline, params, C, "staged", 0, candidates, stats)
        return best_of(graph, budget, result, pool) if params["keep_best"] else result

    def _solve_free(self, graph: Graph, budget: Number | None, deadline: Deadline,
                    params: dict[str, Any]) -> MethodResult:
        """The general formulation, in the steps measured to work (issue: order-free scheduling).

        1. Order only (`remat_bench.methods.reorder`): often fits with no recomputation already.
        2. The staged model with its stages in that order (most of the time left: on the
           random layered graphs its answer is the best one), a complete hint for
        3. the free model, from the best of those.
        """
        from remat_bench.core.cleanup import clean_up_simulated
        from remat_bench.toolkit.order_search import best_order

        C = params["max_intervals"] or 3
        stats: dict[str, Any] = {}
        t0 = deadline.elapsed()
        remaining = deadline.remaining()
        answer = _offered_order(graph, self.context.hints)
        if answer is not None:  # a caller (auto's reorder member) already searched for the order
            stats["order_from"] = answer.stats["from"]
        else:
            share = Deadline(None if remaining is None else remaining * 0.3)
            answer = best_order(graph, budget, share, params["threads"], params["seed"], bounds=self.context.bounds)
        order_nodes = np.asarray(answer.order, dtype=np.int64)
        order_schedule = place_frees(graph, order_nodes, np.zeros(graph.n, dtype=np.int64))
        stats.update({"order_only_peak": answer.peak, "order_only_time_s": round(deadline.elapsed() - t0, 3),
                      "order_only_proven": answer.proven})
        total = graph.total_duration
        if budget is not None and answer.peak <= budget:
            # Every node computed once: no schedule can be shorter.
            return MethodResult(SolutionStatus.OPTIMAL, order_schedule, objective=total, lower_bound=total,
                                solve_time_s=deadline.elapsed(), stats=stats, termination=Termination.PROVEN,
                                message="an order fits the budget with no recomputation")
        candidates = [("order", order_schedule)]
        pool = offered_candidates(graph, budget, self.context.hints, stats=stats)
        staged_result = None
        if budget is not None and not deadline.expired():
            t1 = deadline.elapsed()
            remaining = deadline.remaining()
            staged_result = self._solve_staged_for_hint(
                graph, budget, Deadline(None if remaining is None else remaining * STAGED_SHARE), params,
                answer.order)
            stats["staged_time_s"] = round(deadline.elapsed() - t1, 3)
            stats["staged_status"] = staged_result.status.value
            stats["staged"] = {k: v for k, v in staged_result.stats.items()
                               if k.startswith(("phase", "hints", "candidates", "progress"))}
            staged_schedule = staged_result.schedule
            staged_sim = None if staged_schedule is None else simulate(graph, staged_schedule)
            if staged_sim is not None and staged_sim.valid and staged_result.status.found_schedule and \
                    self.context.reached(budget, staged_sim.peak, staged_sim.duration):
                staged_result.stats = {**stats, **staged_result.stats}
                staged_result.termination = Termination.PROVEN  # the goal is met: nothing is faster
                staged_result.message = "the staged step's schedule meets the any-order bound"
                return staged_result
            if staged_schedule is not None and staged_sim is not None and staged_sim.valid:
                # Within budget or not (phase 1's lowest peak): a better start than the order alone.
                cleaned, _, _ = clean_up_simulated(graph, staged_schedule, staged_sim)
                candidates.insert(0, ("staged", cleaned))
        events = max([params["events"] or 2 * graph.n] + [int((c.kinds == COMPUTE).sum()) for _, c in candidates])
        free_result = self._two_phase(graph, budget, deadline, params, C, "free", events, candidates, stats)
        # The free model's answer, or the staged step's or an offered schedule where one is faster.
        own = []  # the staged step is part of this search; offered schedules count only with keep_best
        if staged_result is not None and staged_result.schedule is not None and staged_result.status.found_schedule:
            sim = simulate(graph, staged_result.schedule)
            own.append(Candidate("staged", staged_result.schedule, sim.peak, sim.duration))
        best = best_of(graph, budget, free_result, own + pool if params["keep_best"] else own)
        best.solve_time_s = deadline.elapsed()
        best.stats["events"] = events
        return best

    def _solve_staged_for_hint(self, graph: Graph, budget: Number, deadline: Deadline,
                               params: dict[str, Any], order: list[int]) -> MethodResult:
        """The staged model with its stages in ``order`` (the best order found), mapped back to ``graph``.

        The stages follow the input order; the order-only step's order holds
        less memory, so its stages need fewer recomputations (the numbers are in
        docs/benchmarks.md, "Order-free scheduling").
        """
        staged_params = {**params, "order": "staged", "max_intervals": 2}
        return self.solve_in_order(graph, order, budget, deadline.remaining(), **staged_params)

    def _build(self, graph: Graph, budget: Number | None, C: int, order: str, events: int,
               params: dict[str, Any]) -> StagedModel:
        return build_staged(graph, budget, C, params["feeds_consumer"], params["precedence"], order=order,
                            events=events, bounds=self.context.bounds)

    def _two_phase(self, graph: Graph, budget: Number | None, deadline: Deadline, params: dict[str, Any],
                   C: int, order: str, events: int, candidates: list[tuple[str, Schedule]],
                   stats: dict[str, Any]) -> MethodResult:
        """Phase 1 (reach the budget, or the lowest peak) then phase 2 (least duration), section 2.4."""
        progress: list[tuple[str, float, float]] = []
        if deadline.expired():
            return self._out_of_time(deadline, stats, f"the time limit ran out before the {order} model was built")
        p1 = self._build(graph, None, C, order, events, params)
        stats.update({f"model_{k}": v for k, v in p1.stats.items()})
        if deadline.expired():  # building a large model takes a while; CP-SAT would only overrun further
            return self._out_of_time(deadline, stats, f"the time limit ran out while the {order} model was built")
        lowest, fastest, tried = _hints(p1, graph, candidates, order, budget)
        stats["hints"] = tried
        if lowest is None:
            return MethodResult(SolutionStatus.NO_SOLUTION, stats=stats, termination=Termination.ERROR, message=(
                f"could not express any starting schedule in the {order} model"))
        if budget is not None and fastest is not None:
            # A hint already fits: phase 1 has nothing to do, and phase 2 starts from the fastest.
            stats["phase1_hint"] = stats["phase2_hint"] = fastest.label
            stats["phase1_time_s"] = 0.0
            phase1_solution = fastest.intervals
        else:
            stats["phase1_hint"] = lowest.label
            reached = self._phase1(graph, budget, deadline, params, p1, lowest.intervals, C, order, stats, progress)
            if isinstance(reached, MethodResult):
                return reached
            phase1_solution, reached_budget = reached
            if budget is None and self.context.peak_goal is not None and reached_budget <= self.context.peak_goal:
                # The caller wants the peak only (`remat-bench floor`), and no schedule goes lower.
                schedule = self._schedule_from_intervals(graph, phase1_solution, p1.horizon)
                # It stopped at the goal it was given (CP-SAT's callback): proven, as a goal met is.
                return MethodResult(SolutionStatus.FEASIBLE, schedule, objective=simulate(graph, schedule).duration,
                                    stats=stats, solve_time_s=deadline.elapsed(), termination=Termination.PROVEN,
                                    message="the lowest peak is proven; its duration was not minimised")
            budget = reached_budget
        return self._phase2(graph, budget, deadline, params, C, order, events, phase1_solution, stats, progress)

    @staticmethod
    def _out_of_time(deadline: Deadline, stats: dict[str, Any], message: str) -> MethodResult:
        return MethodResult(SolutionStatus.NO_SOLUTION, stats=stats, solve_time_s=deadline.elapsed(),
                            termination=cut_short(), message=message)

    def _phase1(self, graph: Graph, budget: Number | None, deadline: Deadline, params: dict[str, Any],
                p1: StagedModel, hint: Intervals, C: int, order: str, stats: dict[str, Any],
                progress: list[tuple[str, float, float]]) -> MethodResult | tuple[Intervals, Number]:
        """Phase 1 (section 2.4): from ``hint``, minimise max(peak, budget) (12) under memory (13).

        ``p1`` is the model without a budget (its capacity the peak variable). Returns phase 1's
        solution and the budget phase 2 keeps (without a budget: the lowest peak reached), or
        the result to report when phase 1 found no schedule within the budget.
        """
        from ortools.sat.python import cp_model

        q = p1.scale
        budget_units = None if budget is None else math.floor(budget / q) - math.ceil(graph.fixed_memory / q)
        p1.hint(hint)
        # (12) linearised as in the paper: minimise z subject to z >= peak and z >= budget.
        z = p1.model.new_int_var(0, 1 << 60, "max_peak_budget")
        p1.model.add(z >= p1.capacity)
        if budget_units is not None:
            p1.model.add(z >= budget_units)
        p1.model.minimize(z)
        # With a budget, phase 1 is optimal (and stops) as soon as a schedule fits, and without one
        # phase 2 cannot run: it may take all the time. At ``min`` it minimises the peak, and phase 2,
        # the duration at that peak, needs time of its own.
        share = min(max(params["phase1_share"], 0.0), 1.0) if budget is None else 1.0
        t1 = deadline.elapsed()
        remaining = deadline.remaining()
        # At min for a caller that wants the peak only: stop at a peak no schedule goes below.
        goal = self.context.peak_goal if budget is None else None
        stop_at = None if goal is None else math.floor(goal / q) - math.ceil(graph.fixed_memory / q)
        def fits(inner: Any) -> bool:  # a solution within the budget is the run's first schedule
            if budget_units is not None and inner.objective_value <= budget_units:
                self.context.report(lambda: p1.decode(inner))
            return False  # phase 1 ends at the budget anyway

        solver1, status1, recorder1 = _solve(p1, None if remaining is None else remaining * share, params, t1,
                                             on_solution=fits, stop_at=stop_at)
        progress += [("phase1", t, v) for t, v in recorder1.points]
        stats["phase1_time_s"] = round(deadline.elapsed() - t1, 3)
        stats["phase1_status"] = solver1.status_name(status1)
        if status1 not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            stats["progress"] = progress
            if status1 == cp_model.INFEASIBLE:
                return MethodResult(SolutionStatus.INFEASIBLE, stats=stats, solve_time_s=deadline.elapsed(),
                                    termination=Termination.PROVEN,
                                    message=f"CP-SAT proved that no {order} schedule exists")
            return MethodResult(SolutionStatus.NO_SOLUTION, stats=stats, solve_time_s=deadline.elapsed(),
                                termination=cp_sat.termination(status1),
                                message="phase 1 found no schedule within the time limit")
        peak_units = solver1.value(p1.capacity)
        if budget is None:
            # Lowest peak: phase 2 keeps it while minimising duration.
            budget_units = peak_units
            budget = (peak_units + math.ceil(graph.fixed_memory / q)) * q
            stats["lowest_peak_proven"] = status1 == cp_model.OPTIMAL
        if peak_units > budget_units:
            stats["progress"] = progress
            proven = status1 == cp_model.OPTIMAL or solver1.best_objective_bound > budget_units
            space = f"{order} schedule with at most {C} intervals per node"
            # The lowest peak reached comes back too: it shows how close phase 1 got, and
            # seeds the order-free model.
            return MethodResult(
                SolutionStatus.INFEASIBLE if proven else SolutionStatus.NO_SOLUTION, p1.decode(solver1), stats=stats,
                solve_time_s=deadline.elapsed(),
                termination=Termination.PROVEN if proven else cp_sat.termination(status1),
                message=(f"CP-SAT proved that no {space} fits the budget" if proven else
                         f"phase 1 reached a peak of {memory_text(peak_units * q + graph.fixed_memory, graph)}, "
                         f"not the budget {memory_text(budget, graph)}, within its time"))
        return self._intervals_from(p1, solver1), budget

    def _phase2(self, graph: Graph, budget: Number, deadline: Deadline, params: dict[str, Any], C: int,
                order: str, events: int, phase1_solution: Intervals, stats: dict[str, Any],
                progress: list[tuple[str, float, float]]) -> MethodResult:
        """Phase 2 (section 2.4): least duration (1) within the budget, problem (1)-(8), from phase 1's solution."""
        from ortools.sat.python import cp_model

        p2 = self._build(graph, budget, C, order, events, params)
        p2.hint(phase1_solution)
        t2 = deadline.elapsed()
        stop = self.context.stop_duration

        def improved(inner: Any) -> bool:
            return self.context.report(lambda: p2.decode(inner), bound=inner.best_objective_bound * p2.dur_scale)

        solver2, status2, recorder2 = _solve(p2, deadline.remaining(), params, t2, on_solution=improved,
                                             stop_at=None if stop is None else stop / p2.dur_scale,
                                             gap_units=self.context.gap / p2.dur_scale)
        progress += [("phase2", t, v * p2.dur_scale) for t, v in recorder2.points]
        stats["phase2_time_s"] = round(deadline.elapsed() - t2, 3)
        stats["phase2_status"] = solver2.status_name(status2)
        stats["progress"] = progress
        stats["branches"] = solver2.num_branches
        stats["conflicts"] = solver2.num_conflicts
        if status2 == cp_model.INFEASIBLE:
            return MethodResult(SolutionStatus.INFEASIBLE, stats=stats, solve_time_s=deadline.elapsed(),
                                termination=Termination.PROVEN,
                                message=f"CP-SAT proved that no {order} schedule fits the budget")
        if status2 not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            # Phase 1's schedule fits: fall back to it rather than report nothing.
            schedule = self._schedule_from_intervals(graph, phase1_solution, p2.horizon)
            sim = simulate(graph, schedule)
            return MethodResult(SolutionStatus.FEASIBLE, schedule, objective=sim.duration, stats=stats,
                                solve_time_s=deadline.elapsed(), termination=cp_sat.termination(status2),
                                message="phase 2 found nothing better than phase 1 in time")
        schedule = p2.decode(solver2)
        objective = solver2.objective_value * p2.dur_scale
        lower = solver2.best_objective_bound * p2.dur_scale
        # Optimal when proven in its space (CP-SAT also says OPTIMAL at its gap limit: its bound tells),
        # or when it meets the goal (a duration no schedule goes below).
        closed = status2 == cp_model.OPTIMAL and solver2.best_objective_bound >= solver2.objective_value
        optimal = closed or self.context.proves(objective)
        if optimal:
            termination = Termination.PROVEN
        elif status2 == cp_model.OPTIMAL or recorder2.stopped_at_goal:
            termination = Termination.CONVERGED  # within the gap the caller accepts (``solve --gap``)
        else:
            termination = cp_sat.termination(status2)
        return MethodResult(SolutionStatus.OPTIMAL if optimal else SolutionStatus.FEASIBLE, schedule,
                            objective=_number(objective), lower_bound=_number(lower), solve_time_s=deadline.elapsed(),
                            stats=stats, termination=termination)

    @staticmethod
    def _intervals_from(sm: StagedModel, solver: Any) -> Intervals:
        out: Intervals = [[] for _ in range(sm.n)]
        for v in range(sm.n):
            for c in sm.copies[v]:
                if c.present is True or solver.boolean_value(c.present):
                    out[v].append((solver.value(c.start), solver.value(c.end)))
        return out

    @staticmethod
    def _schedule_from_intervals(graph: Graph, intervals: Intervals, horizon: int) -> Schedule:
        events = []
        for v, row in enumerate(intervals):
            for s, e in row:
                events.append((s, 1, v))
                if e < horizon:
                    events.append((e, 0, v))
        events.sort()
        out = ScheduleBuilder()
        for _, kind, v in events:
            out.compute(v) if kind == 1 else out.free(v)
        return out.build()


def _number(x: float) -> Number:
    return round(x) if abs(x - round(x)) < 1e-9 else x


def _offered_order(graph: Graph, hints: list[tuple[str, Schedule]]) -> OrderAnswer | None:
    """The lowest-peak offered schedule that computes every node once (an order), as an order answer."""
    best: OrderAnswer | None = None
    for label, schedule in hints:
        computed = schedule.nodes[schedule.kinds == COMPUTE]
        if len(computed) != graph.n or len(np.unique(computed)) != graph.n:
            continue
        sim = simulate(graph, schedule)
        if sim.valid and (best is None or sim.peak < best.peak):
            best = OrderAnswer([int(v) for v in computed], sim.peak, False, False, {"from": f"hint:{label}"})
    return best
