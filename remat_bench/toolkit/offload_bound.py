"""A lower bound on duration that holds for every schedule, those that copy values to the host included,
and the offload floor: a peak no schedule goes below.

The any-order bound (`remat_bench.toolkit.bound`) is not one: a value the budget cannot hold may wait on
the host instead of being computed again, so a schedule that offloads can be faster. The rules are those
of docs/design.md section 3, "Offload". Fix a budget B and any valid schedule within it.

Floor (`offload_floor`). A computation of v holds its inputs, v and its workspace beside the fixed memory
(`remat_bench.core.budget.memory_floor`). The last step that makes an output resident (a computation or
a reload, both counted in the peak) holds every output, since each output stays resident from its own
last such step to the end. The larger of the two is the floor; below it no schedule fits.

Duration (`offload_bound`), with T0 the durations of every node at its fastest implementation:

1. Every node is computed, on one stream, and the schedule ends no earlier than its last computation:
   D >= T0.
2. The link program. Let y_x = 1 when x is computed at least twice, and z_x = 1 when x is reloaded at
   least once. For a node c, let A(c) be the any-order bound's set: ancestors of c, not its inputs,
   read by a descendant of c or outputs. At c's first computation each x in A(c) was computed before
   and is needed after, so it is resident then, or it becomes resident again later, by a computation
   (y_x = 1) or a reload (z_x = 1). So every c gives the cut
   fixed + mem(c) + ws(c) + mem(inputs(c)) + sum_{x in A(c)} mem(x) (1 - y_x - z_x) <= B, and
   D >= T0 + sum_x d(x) y_x. Each x with z_x = 1 is copied out once and in once at least, and each copy
   engine copies one value at a time between 0 and D: D >= sum_x c_out(x) z_x and D >= sum_x c_in(x) z_x.
   A reload of x starts after a copy out of x ends, which starts after a computation of x, which comes
   after every ancestor of x is computed: D >= (A(x) + c_out(x) + c_in(x)) z_x, A(x) being the fastest
   durations of x and its ancestors. The least D over 0/1 values meeting these rows, P, is a bound
   (HiGHS's dual bound where it stops early).
3. A schedule that reloads nothing gives, with each offload made a free, a schedule without copies
   within B and no longer (the computations keep their times, since none waits for a copy out, and
   memory is let go no later): it takes at least the any-order bound, B_any (infinite where that bound
   proves no schedule without copies fits). A schedule that reloads some x takes at least
   R = min_x (A(x) + c_out(x) + c_in(x)), and P.

So every schedule within B takes at least min(B_any, max(P, R)), which is at least T0. Copy times are
those of the graph's ``transfer`` (`remat_bench.core.graph.Link.copy_time`); without one nothing can be
copied and the bound is the any-order bound.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from remat_bench.core.graph import Graph, Number
from remat_bench.core.outcome import SolutionStatus

# Above this many nodes the link program is left out (P = T0): its node cuts hold up to n^2 terms, as the
# any-order bound's do (`remat_bench.toolkit.bound.ALL_CUTS_NODES`).
MAX_PROGRAM_NODES = 2000
# The link program's optimum, evaluated exactly from HiGHS's 0/1 answer, is the bound when it lies within
# this fraction of HiGHS's dual bound (its optimality tolerance); else the dual bound is.
TOLERANCE = 1e-6
# HiGHS 1.14's presolve gave a wrong optimum on a small 0/1 program of the any-order bound
# (`remat_bench.toolkit.bound.EXACT`): the link program runs without it.
EXACT = {"presolve": "off", "mip_rel_gap": 0.0, "mip_abs_gap": 0.0}


def offload_floor(graph: Graph) -> Number:
    """The offload floor: a peak no schedule goes below, offloading or not (module docstring, "Floor").

    ``fixed + max over v of (inputs + v + workspace)`` at v's cheapest implementation, and
    ``fixed + every output`` held together at the end. With everything else on the host a schedule can
    come close to it; copies still in flight hold memory, so it is not always reached.

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    Number
        In memory units.
    """
    from remat_bench.core.budget import memory_floor

    outputs = graph.fixed_memory + sum(graph.memory[o].item() for o in graph.output_indices)
    return max(memory_floor(graph).amount, outputs)


def offload_bound(graph: Graph, budget: Number, time_limit: float = 3.0,
                  any_order: Any = None) -> tuple[Number | None, str]:
    """A lower bound on the duration of every schedule within ``budget``, offloading ones included
    (module docstring: min(B_any, max(P, R)), at least the computations' time).

    Parameters
    ----------
    graph : Graph
    budget : Number
        In the graph's memory units.
    time_limit : float
        Seconds for the link program and, when ``any_order`` is not given, the any-order bound (about half
        each); a program stopped early gives its dual bound, still a bound.
    any_order : Bound or None
        The any-order bound at ``budget`` (`remat_bench.toolkit.bound.Bound`), where the caller has it;
        computed here otherwise.

    Returns
    -------
    value : Number or None
        In duration units; None when no schedule fits (``budget`` below the offload floor, or below the
        memory floor of schedules without copies on a graph without a host link).
    why : str
        What the value rests on, in a phrase.
    """
    from remat_bench.toolkit.bound import any_order_bound

    start = time.perf_counter()
    floor = offload_floor(graph)
    if budget < floor:
        return None, f"the budget is below the offload floor {floor} (a computation with its inputs, or the outputs " \
                     "at the end, with everything else on the host)"
    t0 = graph.min_total_duration
    link = graph.transfer
    reload_least, program = math.inf, float(t0)
    if link is not None:
        fastest = np.minimum.reduceat(graph.op_duration, graph.op_start[:-1]).astype(np.float64)
        upto = _with_ancestors(graph, fastest)
        mem = graph.memory.astype(np.float64)
        c_out = np.array([link.device_to_host.copy_time(m) for m in mem.tolist()])
        c_in = np.array([link.host_to_device.copy_time(m) for m in mem.tolist()])
        reload_least = float((upto + c_out + c_in).min())
        if graph.n <= MAX_PROGRAM_NODES:
            program = _link_program(graph, budget, float(t0), fastest, upto, c_out, c_in, time_limit / 2)
    with_reload = max(program, reload_least)
    if with_reload <= t0:  # min(B_any, .) is T0 whatever B_any is (it is at least T0)
        return _number(float(t0)), "every node computed once, at its fastest implementation (the copies may hide " \
                                   "behind them)"
    if any_order is None:
        left = max(0.5, time_limit - (time.perf_counter() - start))
        any_order = any_order_bound(graph, budget, time_limit=left)
    without = math.inf if any_order.value is None else float(any_order.value)
    value = min(without, with_reload)
    if math.isinf(value):
        return None, "no schedule without copies fits the budget (the any-order bound), and the graph has no host link"
    if value <= t0:
        why = "every node computed once, at its fastest implementation (the copies may hide behind them)"
    elif value == without:
        why = ("a schedule that reloads nothing takes the any-order bound (its copies out made frees), and one that "
               "reloads no less")
    elif value == program:
        why = ("the values the budget cannot hold are computed again, or copied out and back one at a time each "
               "way")
    else:
        why = ("a schedule that reloads nothing takes longer (the any-order bound), and a reload comes after its "
               "value's ancestors and one copy each way")
    return _number(max(value, float(t0))), why


def _number(value: float) -> Number:
    return int(value) if isinstance(value, float) and value.is_integer() and abs(value) < 2**53 else value


def _with_ancestors(graph: Graph, fastest: np.ndarray) -> np.ndarray:
    """Per node x, the fastest durations of x and its ancestors (along the inputs of every implementation),
    summed; above `MAX_PROGRAM_NODES` nodes the longest path of fastest durations ending at x instead
    (less, and still a time every schedule spends before x's first computation ends)."""
    n = graph.n
    inputs = [sorted({u for op in graph.ops_of(v) for u in graph.op_inputs[op]}) for v in range(n)]
    out = np.zeros(n, dtype=np.float64)
    if n > MAX_PROGRAM_NODES:
        for v in range(n):
            out[v] = fastest[v] + max((out[u] for u in inputs[v]), default=0.0)
        return out
    ancestors = [0] * n
    for v in range(n):
        acc = 1 << v
        for u in inputs[v]:
            acc |= ancestors[u]
        ancestors[v] = acc
        bits = np.unpackbits(np.frombuffer(acc.to_bytes((n + 7) // 8, "little"), dtype=np.uint8),
                             bitorder="little")[:n].astype(bool)
        out[v] = float(fastest[bits].sum())
    return out


def _link_program(graph: Graph, budget: Number, t0: float, fastest: np.ndarray, upto: np.ndarray,
                  c_out: np.ndarray, c_in: np.ndarray, time_limit: float) -> float:
    """P of the module docstring: the least D over the node cuts with y and z and the link's rows."""
    from remat_bench.toolkit.bound import ROUND_OFF, memory_cuts
    from remat_bench.toolkit.milp import ModelBuilder, solve_milp

    base, sets = memory_cuts(graph)
    mem = graph.memory.astype(np.float64)
    if graph.memory.dtype.kind == "f" or isinstance(graph.fixed_memory, float):
        # Fractional sizes add up with round-off: a cut that a tie only seems to break must not bind. A
        # bound at a larger budget holds at this one.
        budget = float(budget) + ROUND_OFF * max(abs(float(budget)), 1.0)
    room = float(budget) - base
    binding = [(c, xs) for c, xs in enumerate(sets) if len(xs) and float(mem[xs].sum()) > room[c]]
    if not binding:
        return t0
    xs_all = np.unique(np.concatenate([xs for _, xs in binding]))
    m = len(xs_all)
    col = np.full(graph.n, -1, dtype=np.int64)
    col[xs_all] = np.arange(m)
    # Memory in units of the largest value and time in units of T0: coefficients of order one, which HiGHS
    # needs (`remat_bench.toolkit.milp.extreme_range`); the same feasible set.
    mem_unit = float(mem[xs_all].max()) or 1.0
    time_unit = t0 or 1.0
    b = ModelBuilder()
    y = b.add_vars(m, 0.0, 1.0)
    z = b.add_vars(m, 0.0, 1.0)
    d = b.add_vars(1, t0 / time_unit, np.inf, cost=1.0, integer=False)[0]
    # Cuts: sum_{x in A(c)} mem_x (y_x + z_x) >= sum_{x in A(c)} mem_x - (B - base_c).
    rows, cols, vals, lows = [], [], [], []
    for r, (c, xs) in enumerate(binding):
        k = col[xs]
        rows += [np.full(2 * len(k), r)]
        cols += [np.concatenate([y[k], z[k]])]
        vals += [np.concatenate([mem[xs], mem[xs]]) / mem_unit]
        lows.append((float(mem[xs].sum()) - room[c]) / mem_unit)
    b.add_rows(np.concatenate(rows), np.concatenate(cols), np.concatenate(vals), np.asarray(lows), np.inf,
               count=len(binding))
    k = np.arange(m)
    b.add_rows(np.concatenate([k, k]), np.concatenate([y, z]), np.ones(2 * m), -np.inf, 1.0, count=m)
    # D - sum d_x y_x >= T0; D - sum c_out z >= 0; D - sum c_in z >= 0.
    ones = np.zeros(m, dtype=np.int64)
    b.add_rows(np.concatenate([[0], ones]), np.concatenate([[d], y]),
               np.concatenate([[1.0], -fastest[xs_all] / time_unit]), t0 / time_unit, np.inf, count=1)
    for copy in (c_out, c_in):
        b.add_rows(np.concatenate([[0], ones]), np.concatenate([[d], z]),
                   np.concatenate([[1.0], -copy[xs_all] / time_unit]), 0.0, np.inf, count=1)
    # D - (A(x) + c_out(x) + c_in(x)) z_x >= 0.
    trip = upto[xs_all] + c_out[xs_all] + c_in[xs_all]
    b.add_rows(np.concatenate([k, k]), np.concatenate([np.full(m, d), z]),
               np.concatenate([np.ones(m), -trip / time_unit]), 0.0, np.inf, count=m)
    sol = solve_milp(b.build(), time_limit=max(time_limit, 0.1), options=dict(EXACT))
    dual = sol.dual_bound * time_unit if sol.dual_bound is not None else t0
    if sol.solution_status is SolutionStatus.OPTIMAL and sol.x is not None:
        yy, zz = np.round(sol.x[y]) > 0.5, np.round(sol.x[z]) > 0.5
        exact = max(t0 + float(fastest[xs_all][yy].sum()), float(c_out[xs_all][zz].sum()),
                    float(c_in[xs_all][zz].sum()), float(trip[zz].max(initial=0.0)))
        if exact <= dual + TOLERANCE * max(1.0, abs(dual)):
            return max(t0, exact)
    return max(t0, float(dual))
