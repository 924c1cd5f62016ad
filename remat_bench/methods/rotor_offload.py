"""Beaumont, Eyraud-Dubois and Shilova 2021, "Efficient Combination of Rematerialization and Offloading for
Training DNNs" (NeurIPS): on a chain, each stage's activations are kept, recomputed, or copied to host memory
during the forward pass and back before their backward use, the copies running beside the computations.

Rotor's dynamic program (Beaumont et al. 2019: `remat_bench.methods.rotor`, its machinery in
`remat_bench.methods.rotor_dp`) over the same stages and stage model, with two more choices and a flag p in
the state. ``C(p, x, s, t, m)`` is the least time to run the backward of stages s..t from a_s with m memory
free (x: rotor's tail flag); p = 1 says that O_{s-1}, what stage s-1 keeps for its backward, is on its way
to the host while the subproblem's first forward computation runs, and comes back while its last, B_s, runs:

    F_all      u_all(s) + C(0, x, s+1, t, m - a_s - abar_s) + u_b(s)                          (rotor)
    F_all-off  u_all(s) + C(1, x, s+1, t, m) + u_b(s)             O_s offloaded after F_s, reloaded before B_{s+1}
    F_ck(s')   sum_{j=s}^{s'-1} u_f(j) + C(0, x, s', t, m - a_s) + C(., s, s'-1, m)              (rotor)
    F_ck-off   sum_{j=s}^{s'-1} u_f(j) + C(0, x, s', t, m) + C(., s, s'-1, m)   s' >= s+2; a_s offloaded
                                                                  after F_s, reloaded before B_{s'}

O_s is the values of a_s and abar_s that a backward computation reads (those only F_s reads are freed after
it), charged as rotor charges them, a_s + abar_s: F_all-off holds them during s+1..t only in the first
forward step, while they are still leaving, and in B_{s+1}, while they come back. Each copy is hidden (the
window of the Beaumont et al. model):

- a copy out ends within the forward computations after it: O_s's within stage s+1's first forward (the
  subproblem's first step, in whichever mode it runs: hence p), a_s's within F_{s+1}..F_{s'-1} (the sweep);
- a copy in ends within the backward computation before whose start it is issued: O_s's within B_{s+1},
  a_s's within B_{s'}.

The copy time of a set is that of its values one after the other, ``latency + memory / bandwidth`` each
(docs/design.md section 3, "Offload"). The memory checks add to rotor's: with p = 1, O_{s-1} to the first
forward step and to B_s; with F_ck-off, a_s to B_{s'} (the sweep holds it as in rotor). Every choice
reads subproblems already solved with the flags they need, so the table is exact over this space in the
discretised model (sizes rounded up to slots, as in rotor), by rotor's induction; ``search_space`` says
which schedules.

Why the simulator agrees: copies out are issued when a forward computation ends and end before the forward
computations hiding them do; copies in are issued just before a backward computation and end before it
does. Windows follow one another and each backward stage hides at most one set of reloads, so each engine
is idle when a copy is issued (one copy at a time per direction costs nothing) and no computation waits:
the duration is the DP's, the sum of the computations'. A value leaving is charged through its whole
window, so each step's memory is at most what the stage model says; where that model misses a transient,
the search lowers the DP's memory and tries again, as rotor's does. Frees are placed at last use, as
rotor's `place_frees` places them, except that a value offloaded leaves the device without one.

What is left out: offloading pinned values, gradients or weights; a copy out running past its window (the
paper lets a copy run over several later stages, charging them the memory it still holds), and a reload
issued earlier than just before the backward computation that hides it; offloading the checkpoint a_s when
the sweep is one stage (s' = s + 1). With no copy hidden (a slow link), the table, its ties and so its
schedule are rotor's.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from remat_bench.core.cleanup import place_frees
from remat_bench.core.graph import Graph, Number
from remat_bench.core.schedule import COMPUTE, OFFLOAD, RELOAD, Schedule, ScheduleBuilder
from remat_bench.core.simulate import Simulation, simulate
from remat_bench.methods.base import Deadline, Membership, MethodResult, Role, SolutionStatus, Termination
from remat_bench.methods.rotor_dp import (
    ChainDP,
    Chooser,
    StageModel,
    Stages,
    Table,
    _OutOfTime,
    _Search,
    _slots,
    keep_choices,
    kept_extra,
    stage_model,
)


@dataclass
class OffloadModel(StageModel):
    """Rotor's `StageModel` and what the offload choices move, per stage s.

    ``moved_all[s]``: O_s, the values F_all-off offloads after F_s and reloads before B_{s+1} (of a_s and
    abar_s, those of positive size a backward computation reads); ``moved_ck[s]``: a_s's values of positive
    size, which F_ck-off offloads after F_s and reloads before B_{s'}. ``out_*`` and ``in_*``: the time of
    the copies of that set out and in, one after the other.
    """

    moved_all: tuple[tuple[int, ...], ...]
    moved_ck: tuple[tuple[int, ...], ...]
    out_all: np.ndarray
    in_all: np.ndarray
    out_ck: np.ndarray
    in_ck: np.ndarray


def offload_model(graph: Graph, stages: Stages, max_options: int = 0) -> OffloadModel:
    """Rotor's stage model of ``stages`` with the values each offload choice moves and their copy times.

    Parameters
    ----------
    graph : Graph
        A training graph with a host link (``transfer``).
    stages : Stages
    max_options : int
        As `remat_bench.methods.rotor_dp.stage_model` takes it.

    Returns
    -------
    OffloadModel
    """
    transfer = graph.transfer
    if transfer is None:
        raise ValueError(f"graph '{graph.name}' has no host link to offload over")
    base = stage_model(graph, stages, max_options)
    K = stages.count
    mem = graph.memory
    read_back = {u for b in graph.backward_indices for u in graph.op_inputs[int(graph.op_start[b])]}
    ins = [*stages.inputs, frozenset()]
    moved_all = tuple(tuple(sorted(v for v in ins[s] | (stages.saved[s] - ins[s + 1])
                                   if v in read_back and mem[v] > 0)) for s in range(K))
    moved_ck = tuple(tuple(sorted(v for v in ins[s] if mem[v] > 0)) for s in range(K))

    def copies(sets: Iterable[tuple[int, ...]], link: Any) -> np.ndarray:
        return np.array([sum(link.copy_time(mem[v]) for v in values) for values in sets], dtype=np.float64)

    fields = {name: getattr(base, name) for name in StageModel.__dataclass_fields__}
    return OffloadModel(**fields, moved_all=moved_all, moved_ck=moved_ck,
                        out_all=copies(moved_all, transfer.device_to_host),
                        in_all=copies(moved_all, transfer.host_to_device),
                        out_ck=copies(moved_ck, transfer.device_to_host),
                        in_ck=copies(moved_ck, transfer.host_to_device))


@dataclass
class OffloadTable(Table):
    """The DP's table over (p, x, s, t, m): ``cost`` is its p = 0 part, [x, s, t, m], as rotor's search reads
    it; ``full`` all of it; ``choice`` [p, x, s, t, m]: -1 F_all (or the leaf when s == t), -2 F_all-off,
    -2 - o F_all with the stage's option o >= 1 (`remat_bench.methods.rotor_dp.KeepOption`), s' + K y + 2 K o
    for F_ck with checkpoint s', the left subproblem's tail y, and o = 1 for F_ck-off."""

    full: np.ndarray


def offload_table(model: OffloadModel, slot: float, top: int, deadline: Deadline | None = None) -> OffloadTable:
    """``C(p, x, s, t, m)`` (module docstring) over every subchain s..t, both flags, and memories 0..``top``.

    Rotor's choices are computed as `remat_bench.methods.rotor_dp.rotor_table` computes them, and taken first:
    an offload choice replaces them only where strictly faster, so that with none hidden the table is rotor's.

    Parameters
    ----------
    model : OffloadModel
    slot : float
        Bytes per slot.
    top : int
        The largest memory, in slots, the table covers.
    deadline : Deadline or None
        Polled once per t.

    Returns
    -------
    OffloadTable

    Raises
    ------
    _OutOfTime
        The deadline passed.
    """
    K = model.K
    a, extra = _slots(model.a, slot), _slots(model.extra, slot)
    outer = _slots(model.pin + model.grads, slot)
    tail = _slots(model.tail, slot)
    back = _slots(model.pin, slot) + _slots(model.back, slot)
    peak = {mode: _slots(p, slot) for mode, p in model.peak.items()}
    keep, drop = peak["keep"], peak["drop"]
    cost, u_back = model.cost, model.u_back
    keeps = [keep_choices(model, slot, s) for s in range(K)]
    width = top + 1
    m = np.arange(width)
    C = np.full((2, 2, K, K, width), np.inf)
    choice = np.full((2, 2, K, K, width), -1, dtype=np.int16 if 4 * K < 2**15 else np.int32)
    # p = 1 at s: O_{s-1} (carried[s] slots) leaves during the first forward step (which must last
    # window[s]) and comes back during B_s (which must last the copy in, else p = 1 is never possible).
    carried = np.zeros(K, dtype=np.int64)
    window = np.full(K, np.inf)
    can_carry = np.zeros(K, dtype=bool)
    for s in range(1, K):
        carried[s] = a[s - 1] + extra[s - 1]
        window[s] = model.out_all[s - 1]
        can_carry[s] = bool(model.moved_all[s - 1]) and model.in_all[s - 1] <= u_back[s]
    for t in range(K):
        if deadline is not None and deadline.expired():
            raise _OutOfTime
        f = int(t == K - 1)
        for x, mode in ((0, "leaf"), (1, "tail")):
            need = max(outer[t] + peak[mode][f, t], back[t])
            value = cost[mode][f, t] + u_back[t]
            if need <= top:
                C[0, x, t, t, need:] = value
            if can_carry[t] and cost[mode][f, t] >= window[t] and need + carried[t] <= top:
                C[1, x, t, t, need + carried[t]:] = value
        for s in range(t - 1, -1, -1):
            n = t - s
            behind = np.minimum(C[0, 0, s, s:t], C[0, 1, s, s:t])
            kept = C[0, 1, s, s:t] < C[0, 0, s, s:t]
            sweep = np.cumsum(cost["sweep"][f, s:t])[:, None]
            # F_ck-off with checkpoint s' = s + 1 + k hides a_s's copy out behind F_{s+1}..F_{s'-1} and its copy
            # in behind B_{s'}, which then holds a_s besides its own peak.
            hidden = np.concatenate(([0.0], np.cumsum(cost["sweep"][f, s + 1:t])))
            off_ck = (np.arange(n) >= 1) & (hidden >= model.out_ck[s]) & (model.in_ck[s] <= u_back[s + 1:t + 1])
            off_ck &= bool(model.moved_ck[s])
            reload_need = back[s + 1:t + 1] + a[s]
            cost_all = cost["all"][f, s] + u_back[s]
            for x in (0, 1):
                held = outer[t] + x * tail[t]
                ahead = np.full((n, width), np.inf)
                shift = int(a[s])
                if shift <= top:
                    ahead[:, shift:] = C[0, x, s + 1:t + 1, t, :width - shift]
                total = ahead + behind + sweep
                ahead_off = np.where(off_ck[:, None] & (m[None, :] >= reload_need[:, None]),
                                     C[0, x, s + 1:t + 1, t], np.inf)
                total_off = ahead_off + behind + sweep
                for p in (0, 1):
                    if p and not can_carry[s]:
                        continue
                    e = int(carried[s]) if p else 0  # O_{s-1}, held by F_s and by B_s
                    choose = Chooser(width)
                    # F_all: stage s keeping its activations, then s+1..t, then B_s.
                    need = int(max(held + peak["all"][f, s], back[s])) + e
                    all_ok = not p or cost["all"][f, s] >= window[s]
                    shift = int(a[s] + extra[s])
                    low = max(need, shift)
                    if all_ok and low <= top:
                        choose.take(low, C[0, x, s + 1, t, low - shift:width - shift] + cost_all, -1)
                    # F_all keeping fewer activations (rotor's options), offloading none.
                    for o, keep_s in enumerate(keeps[s][1:], start=1):
                        shift = int(a[s]) + keep_s.extra
                        low = max(int(max(held + keep_s.peak[f], keep_s.back)) + e, shift)
                        if (not p or model.options[s][o - 1].cost[f] >= window[s]) and low <= top:
                            choose.take(low, C[0, x, s + 1, t, low - shift:width - shift] + keep_s.cost[f], -2 - o)
                    # F_ck: the sweep s..s'-1 (its first stage keeping a_s), s'..t, then s..s'-1 again.
                    ck_ok = not p or cost["sweep"][f, s] >= window[s]
                    need_ck = np.full(n, held + keep[f, s] + e)
                    if n > 1:
                        need_ck[1:] = np.maximum(need_ck[1:], held + a[s] + np.maximum.accumulate(drop[f, s + 1:t]))
                    if p:
                        need_ck = np.maximum(need_ck, back[s] + e)
                    short = m[None, :] < need_ck[:, None]
                    codes = s + 1 + np.arange(n)[:, None] + K * kept
                    if ck_ok:
                        choose.take_best(np.where(short, np.inf, total), codes)
                    # The offload choices, where strictly faster.
                    if all_ok and model.moved_all[s] and need <= top:
                        choose.take(need, C[1, x, s + 1, t, need:] + cost_all, -2)
                    if ck_ok:
                        choose.take_best(np.where(short, np.inf, total_off), codes + 2 * K)
                    C[p, x, s, t] = choose.best
                    choice[p, x, s, t] = choose.code
    return OffloadTable(C[0], choice, slot, a, extra, C)


def emit(model: OffloadModel, table: OffloadTable, memory: int) -> list[tuple[int, int]]:
    """The steps of the DP's schedule at ``memory`` slots: (kind, node) with kind COMPUTE, OFFLOAD or RELOAD.

    Offloads come right after the forward computation they follow, reloads right before the backward
    computation that hides them; frees are placed afterwards (`place_moves`).

    Parameters
    ----------
    model : OffloadModel
    table : OffloadTable
    memory : int
        The top-level memory in slots; ``table.cost[0, 0, K-1, memory]`` must be finite.

    Returns
    -------
    list of (int, int)
    """
    K = model.K
    out: list[tuple[int, int]] = []
    before: dict[int, tuple[int, ...]] = {}  # stage j -> the values reloaded just before B_j

    def forward(nodes: Iterable[int]) -> None:
        out.extend((COMPUTE, v) for v in nodes)

    def offload(values: tuple[int, ...], reader: int) -> None:
        out.extend((OFFLOAD, v) for v in values)
        assert reader not in before, "each backward stage hides at most one set of reloads"
        before[reader] = values

    # Items: (p, x, s, t, m) a subproblem; (-1, o, j, 0, 0) the backward of stage j after F_all's option o.
    stack: list[tuple[int, int, int, int, int]] = [(0, 0, 0, K - 1, memory)]
    while stack:
        p, x, s, t, mem = stack.pop()
        if p < 0:
            out.extend((RELOAD, v) for v in before.pop(s, ()))
            if x:
                forward(model.options[s][x - 1].again)
            forward(model.backward[s])
            continue
        f = int(t == K - 1)
        if s == t:
            forward(model.nodes["tail" if x else "leaf"][f][t])
            stack.append((-1, 0, t, 0, 0))
            continue
        c = int(table.choice[p, x, s, t, mem])
        if c <= -3:  # F_all with option o, offloading nothing
            o = -2 - c
            forward(model.options[s][o - 1].nodes[f])
            stack.append((-1, o, s, 0, 0))
            stack.append((0, x, s + 1, t, mem - int(table.a[s]) - kept_extra(model, table, s, o)))
        elif c < 0:
            forward(model.nodes["all"][f][s])
            stack.append((-1, 0, s, 0, 0))
            if c == -1:
                stack.append((0, x, s + 1, t, mem - int(table.a[s]) - int(table.extra[s])))
            else:
                offload(model.moved_all[s], s + 1)
                stack.append((1, x, s + 1, t, mem))
        else:
            off, c = divmod(c, 2 * K)
            y, c = divmod(c, K)
            for j in range(s, c):
                forward(model.nodes["sweep"][f][j])
                if j == s and off:
                    offload(model.moved_ck[s], c)
            stack.append((0, y, s, c - 1, mem))
            stack.append((0, x, c, t, mem if off else mem - int(table.a[s])))
    return out


def place_moves(graph: Graph, steps: list[tuple[int, int]]) -> Schedule:
    """A schedule from computations, offloads and reloads in order, each value freed after its last reader.

    A value is on the device from its computation or reload to its next offload (which takes it off without a
    free), else to its last reader before it is computed or reloaded again, after which it is freed (right
    after it arrives when nothing reads it); an output's last copy stays. Without a copy, the schedule is
    `place_frees`'s, as rotor's is.

    Parameters
    ----------
    graph : Graph
    steps : list of (int, int)
        (kind, node) with kind COMPUTE, OFFLOAD or RELOAD; every computation with its first implementation.

    Returns
    -------
    Schedule
    """
    if all(kind == COMPUTE for kind, _ in steps):
        order = np.asarray([v for _, v in steps], dtype=np.int64)
        return place_frees(graph, order, np.zeros(len(order), dtype=np.int64))
    last: dict[int, int] = {}  # value on the device -> the step that last created or read it
    free_after: list[list[int]] = [[] for _ in steps]
    for i, (kind, v) in enumerate(steps):
        if kind == OFFLOAD:
            del last[v]
            continue
        if kind == COMPUTE:
            for u in graph.op_inputs[int(graph.op_start[v])]:
                last[u] = i
        if v in last:
            free_after[last[v]].append(v)
        last[v] = i
    outputs = set(graph.output_indices)
    for v, i in last.items():
        if v not in outputs:
            free_after[i].append(v)
    builder = ScheduleBuilder()
    emitters = {COMPUTE: builder.compute, OFFLOAD: builder.offload, RELOAD: builder.reload}
    for (kind, v), frees in zip(steps, free_after):
        emitters[kind](v)
        for u in frees:
            builder.free(u)
    return builder.build()


def lower(graph: Graph, model: OffloadModel, table: OffloadTable, memory: int) -> tuple[Schedule, Simulation]:
    """The DP's schedule at ``memory`` slots (`emit`, `place_moves`) and its simulation.

    Parameters
    ----------
    graph : Graph
    model : OffloadModel
    table : OffloadTable
    memory : int
        Slots; the table's duration there must be finite.

    Returns
    -------
    tuple of (Schedule, Simulation)
    """
    schedule = place_moves(graph, emit(model, table, memory))
    return schedule, simulate(graph, schedule)


class _OffloadSearch(_Search):
    """Rotor's search (decompositions, tightening and loosening around the budget) over the offload DP."""

    def model(self, stages: Stages) -> StageModel:
        return offload_model(self.graph, stages, self.options)

    def build(self, model: StageModel, slot: float, top: int) -> Table:
        assert isinstance(model, OffloadModel)
        return offload_table(model, slot, top, self.deadline)

    def lower(self, model: StageModel, table: Table, memory: int) -> tuple[Schedule, Simulation]:
        assert isinstance(model, OffloadModel) and isinstance(table, OffloadTable)
        return lower(self.graph, model, table, memory)


class RotorOffload(ChainDP):
    name = "rotor-offload"
    description = ("Beaumont, Eyraud-Dubois and Shilova 2021: rotor's chain DP where each stage's activations "
                   "are also offloaded to the host and back, copies hidden behind the computations")
    search_space = ("rotor's persistent schedules over a stage decomposition, where a stage keeping its "
                    "activations may offload them while the next forward stage runs and reload them while the "
                    "next backward stage runs, and a checkpoint may be offloaded while the rest of its sweep runs "
                    "(two stages or more) and reloaded while the backward stage at the sweep's end runs (every "
                    "copy hidden); pinned values kept")
    offloads = True
    # A member of auto on a graph with a host link, weighing as rotor does (exact on chains in its space).
    member = Membership(Role.FAST, rank=4, weight=3.0)

    @classmethod
    def skip(cls, graph: Graph, budget: Number | None) -> str | None:
        if graph.transfer is None:
            return _no_link(graph)
        return super().skip(graph, budget)

    def solve(self, graph: Graph, budget: Number | None, time_limit: float | None,
              **params: Any) -> MethodResult:
        if graph.transfer is None:
            return MethodResult(SolutionStatus.NO_SOLUTION, message=_no_link(graph),
                                termination=Termination.NOT_APPLICABLE)
        return super().solve(graph, budget, time_limit, **params)

    def _search(self, graph: Graph, budget: Number | None, params: dict[str, Any], deadline: Deadline) -> _Search:
        return _OffloadSearch(graph, budget, params["slots"], deadline, self.context.report, params["options"])


def _no_link(graph: Graph) -> str:
    return (f"method 'rotor-offload' copies activations to host memory and back, and graph '{graph.name}' has no "
            "host link ('transfer'); give it one (graphs import-torch --device-profile, or --link)")
