"""A lower bound on schedule duration valid for every order and every rematerialization.

Derivation. Fix a budget B and any valid schedule. Every node is computed at
least once, which costs sum_v duration(v). Take a node c and the step of its
first computation:

- its inputs are resident, and so are c itself and its workspace;
- let x be an ancestor of c (not an input) that some descendant d of c reads,
  or that is an output. x was first computed before c (c depends on it), and d
  is computed after c's first computation (d depends on c), with x resident
  then (or, for an output, at the end). So at c's first computation x is
  either resident, or it was freed and is computed again later, which costs
  at least duration(x) more.

Let y_x = 1 when x is computed again after having been dropped. Every valid
schedule gives a y that satisfies, for every node c, the memory cut

    fixed + mem(c) + ws(c) + mem(inputs(c)) + sum_{x in A(c)} mem(x) (1 - y_x) <= B,

and its duration is at least sum_v duration(v) + sum_x duration(x) y_x, each
x charged once however many cuts it helps. Minimising that over y subject
to the cuts (a small 0/1 program, solved by HiGHS) is therefore a lower bound
on the duration of every schedule within B. When even y = 1 everywhere
breaks a cut, no schedule fits: that is the memory floor.

With operator implementations, the cut of c uses its cheapest implementation
(least input memory plus workspace), a reader d counts only if every
implementation of d reads x, and duration(x) is x's fastest implementation,
so the bound stays valid.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from remat_bench.graph import Graph, Number

# Above this many nodes the n x n ancestor sets would cost too much; the trivial bound is used.
MAX_NODES = 5000


@dataclass(frozen=True)
class Bound:
    """A lower bound on duration for every schedule at one budget."""

    value: Number | None  # None when infeasible
    status: str  # "optimal" (the 0/1 program was solved), "trivial", "infeasible", "limit"
    recomputed: tuple[str, ...] = ()  # the values the bound says must be computed again
    solve_time_s: float = 0.0
    cuts: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"value": self.value, "status": self.status, "recomputed": list(self.recomputed),
                "solve_time_s": self.solve_time_s, "cuts": self.cuts}


def _bits_to_array(bits: int, n: int) -> np.ndarray:
    raw = bits.to_bytes((n + 7) // 8, "little")
    return np.unpackbits(np.frombuffer(raw, dtype=np.uint8), bitorder="little")[:n].astype(bool)


def memory_cuts(graph: Graph) -> tuple[np.ndarray, list[np.ndarray]]:
    """Per node c: the fixed part of its cut (fixed + c + ws + inputs) and the set A(c)."""
    n = graph.n
    mem = graph.memory
    # Inputs every implementation of d reads (a reader counts only then).
    common_inputs: list[int] = []
    for d in range(n):
        ops = graph.ops_of(d)
        bits = None
        for op in ops:
            b = 0
            for u in graph.op_inputs[op]:
                b |= 1 << u
            bits = b if bits is None else bits & b
        common_inputs.append(bits or 0)
    # Ancestors (forward) and "read by a descendant" (backward), as Python-int bitsets:
    # one pass each in topological order, O(n * edges / 64) word operations.
    ancestors = [0] * n
    for v in range(n):
        acc = 0
        for u in graph.inputs[v]:
            acc |= ancestors[u] | (1 << u)
        for op in graph.ops_of(v):
            for u in graph.op_inputs[op]:
                acc |= ancestors[u] | (1 << u)
        ancestors[v] = acc
    consumers_all: list[set[int]] = [set() for _ in range(n)]
    for op in range(graph.n_ops):
        d = int(graph.op_node[op])
        for u in graph.op_inputs[op]:
            consumers_all[u].add(d)
    read_below = [0] * n  # values read by some strict descendant
    for v in range(n - 1, -1, -1):
        acc = 0
        for d in consumers_all[v]:
            acc |= common_inputs[d] | read_below[d]
        read_below[v] = acc
    outputs = 0
    for o in graph.output_indices:
        outputs |= 1 << o
    base = np.empty(n, dtype=np.float64)
    sets: list[np.ndarray] = []
    for c in range(n):
        # The cheapest implementation of c: least input memory plus workspace.
        best_need, best_inputs = None, 0
        for op in graph.ops_of(c):
            ins = 0
            for u in graph.op_inputs[op]:
                ins |= 1 << u
            need = float(sum(mem[u] for u in graph.op_inputs[op])) + float(graph.op_workspace[op])
            if best_need is None or need < best_need:
                best_need, best_inputs = need, ins
        base[c] = float(graph.fixed_memory) + float(mem[c]) + (best_need or 0.0)
        a = ancestors[c] & (read_below[c] | outputs) & ~best_inputs & ~(1 << c)
        sets.append(np.flatnonzero(_bits_to_array(a, n)) if a else np.zeros(0, dtype=np.int64))
    return base, sets


def any_order_bound(graph: Graph, budget: Number | None, time_limit: float = 30.0) -> Bound:
    """The cut bound at ``budget`` (None: the lowest peak, where only the trivial bound holds)."""
    trivial = graph.min_total_duration
    if budget is None:
        return Bound(trivial, "trivial")
    if graph.n > MAX_NODES:
        return Bound(trivial, "trivial")
    start = time.perf_counter()
    base, sets = memory_cuts(graph)
    fastest = np.minimum.reduceat(graph.op_duration, graph.op_start[:-1]).astype(np.float64)
    mem = graph.memory.astype(np.float64)
    if np.any(base > budget):
        return Bound(None, "infeasible", solve_time_s=time.perf_counter() - start)
    # Cut of c: sum_{x in A(c)} mem_x y_x >= sum_{x in A(c)} mem_x - (B - base_c). Only cuts that
    # bind, and only x with positive memory and duration, matter (y_x = 1 is free when duration is 0).
    rows, cols, vals, lower = [], [], [], []
    free_x = fastest <= 0
    r = 0
    for c in range(graph.n):
        xs = sets[c]
        if not len(xs):
            continue
        need = float(mem[xs].sum()) - (budget - base[c])
        if need <= 0:
            continue
        zero_cost = xs[free_x[xs]]
        need -= float(mem[zero_cost].sum())
        xs = xs[~free_x[xs] & (mem[xs] > 0)]
        if need <= 0:
            continue
        rows.append(np.full(len(xs), r))
        cols.append(xs)
        vals.append(mem[xs])
        lower.append(need)
        r += 1
    if r == 0:
        return Bound(trivial, "optimal", solve_time_s=time.perf_counter() - start)
    import scipy.sparse as sp

    from remat_bench.milp import SparseModel, solve_milp

    A = sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(r, graph.n))
    model = SparseModel(
        cost=fastest, lower=np.zeros(graph.n), upper=np.ones(graph.n), integer=np.ones(graph.n, dtype=bool),
        A=A, row_lower=np.asarray(lower), row_upper=np.full(r, np.inf),
    )
    sol = solve_milp(model, time_limit=time_limit, mip_gap=0.0)
    elapsed = time.perf_counter() - start
    if sol.status == "infeasible":
        return Bound(None, "infeasible", solve_time_s=elapsed, cuts=r)
    if sol.status == "optimal" and sol.x is not None:
        y = np.round(sol.x) > 0.5
        extra = float(fastest[y].sum())
        value = trivial + (round(extra) if isinstance(trivial, int) else extra)
        return Bound(value, "optimal", tuple(graph.ids[i] for i in np.flatnonzero(y)), elapsed, r)
    # Stopped early: the solver's dual bound is still a valid bound.
    extra = max(0.0, sol.dual_bound or 0.0)
    value = trivial + (int(np.ceil(extra - 1e-9)) if isinstance(trivial, int) else extra)
    return Bound(value, "limit", solve_time_s=elapsed, cuts=r)


_CACHE: dict[tuple[str, Number | None], Bound] = {}


def cached_bound(graph: Graph, budget: Number | None, time_limit: float = 30.0) -> Bound:
    """`any_order_bound`, remembered per graph hash and budget (the pipeline and methods share it)."""
    key = (graph.sha256, budget)
    if key not in _CACHE:
        if len(_CACHE) > 256:
            _CACHE.clear()
        _CACHE[key] = any_order_bound(graph, budget, time_limit)
    return _CACHE[key]
