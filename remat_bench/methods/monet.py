"""MONeT: joint checkpointing and operator-implementation selection (Shah et al., ICLR 2021).

MONeT fixes the shape of the schedule and optimises what happens inside it: a
forward pass computes every forward operator once, in order; then, for each
backward operator k in turn (a *stage*), some forward operators are
recomputed in order, and backward_k runs. Every operator, including each
recomputation, picks one of its implementations. Binary variables (paper
section 4, appendix C; stage 0 is the forward pass, stages 1..K the
backward nodes):

- s[t,i]: forward value i is resident entering stage t (s[1,.]: kept by the
  forward pass; s[K+1,o] = 1 for forward outputs);
- r[t,i]: i is recomputed in stage t (r[0,.] = 1);
- delta[t,i,l]: stage t computes i with implementation l (sum_l = r[t,i]);
- delta^[t,l]: backward node t runs implementation l (sum_l = 1).

Constraints (the paper's numbers):

- checkpointing (eq. 7, 8): delta[t,c,l] <= s[t,u] + r[t,u] for each input u
  of implementation l; s[t+1,i] <= s[t,i] + r[t,i]; delta^[t,l] <= s[t,i] +
  r[t,i] for each forward value i that implementation l of backward node t
  reads (its dependencies D^l_t);
- memory (eq. 1, 5, 6, 12; C.1, C.2), one row per compute step: the forward
  pass at i, a recomputation at (t, i), and backward node t. At a step of
  stage t the resident forward values are those stored entering the stage
  and not yet reached (s[t,j], j > i), and, behind the sweep, those kept or
  read by the backward node, ``a[t,j] = s[t+1,j] OR [j in D^l_t]``, written
  ``s[t+1,j] + sum_l delta^[t,l] [j in D^l_t] - sum_l sm[t,j,l] [j in D^l_t]``
  with ``sm = delta^ * s[t+1]`` linearised as in C.4 (sm >= delta^ + s - 1,
  sm <= delta^, sm <= s); plus the values a later recomputation of the stage
  still reads (the paper's local memory L^k_i, eq. 12): z[t,j,i] >=
  (s[t,j] + r[t,j]) * delta[t,c,l] - a[t,j] for every recomputed consumer c
  >= i, the product of C.4 again; plus workspace sum_l c_l delta[t,i,l];
- objective (eq. 9): the total duration of forward, recomputed and backward
  implementations.

Mapping to remat-bench's node model (docs/design.md section 3). The forward nodes
(kind ``forward``) are MONeT's forward operators; every backward node
(``backward``, the loss included) is a stage of its own, in file order. A
backward node's forward inputs are its dependencies D_t (per implementation:
an output-activated gradient reads other forward values than the default);
its backward inputs (gradients) are the paper's L^_t: computed once, in file
order, held until the last backward node that reads them (with any
implementation), so their memory at each stage is a constant. The decoded
schedule is the compute sequence (forward pass; per stage the recomputations
in file order, then the backward node, each with its implementation), with
every value freed right after its last use (`place_frees`); the model counts
at each step exactly the values that sequence holds, so the model's memory
is the simulator's, step by step.

What this implementation adds to the paper: the local memory L^k_i is
counted exactly, with the linearised products z above, rather than bounded
by "every later tensor is recomputed" (appendix B), and the memory between
steps (C.2's m_S) is not constrained since only compute steps count here;
with "a value held or recomputed in a stage is read there or kept"
(s[t,i] + r[t,i] <= a[t,i] + sum of its recomputed readers) and r + s <= 1
(recomputing a resident value is not allowed by the simulator), the model is
exact for MONeT's schedule space: its optimum is the best schedule of that
shape. Values are only given columns for the stages up to the last one that
can need them; the memory of a stage is summed along the sweep by a
continuous running total (one short row per step rather than a dense one);
the products sm and z are continuous (they are fixed by binaries). Memory is
divided by its gcd and durations by their mean, as for `checkmate`.
``budget=min`` is answered in two solves: the least peak over MONeT's
space (the budget becomes a variable to minimise), then the least duration
at that peak. Left out: in-place operators (C.3; remat-bench has no
in-place update) and intermediate-activated operators (they need extra
nodes); forward operators are never recomputed during the forward pass.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from remat_bench.core.errors import ModelTooLargeError
from remat_bench.core.graph import Graph, Number
from remat_bench.core.schedule import COMPUTE, Schedule
from remat_bench.core.simulate import place_frees, simulate
from remat_bench.methods.base import (
    Deadline,
    Method,
    MethodResult,
    Param,
    Status,
)
from remat_bench.methods.candidates import Source, candidate_schedules
from remat_bench.toolkit.milp import (
    ModelBuilder,
    SparseModel,
    available_memory_bytes,
    memory_scale,
    parse_backend,
    solve_milp,
)


class OutOfTime(Exception):
    """The time limit passed before the model was built."""


@dataclass
class Lin:
    """A linear expression: sum of vals[k] * x[cols[k]] plus const."""

    cols: list[int] = field(default_factory=list)
    vals: list[float] = field(default_factory=list)
    const: float = 0.0

    def add(self, other: Lin, coef: float = 1.0) -> Lin:
        self.cols.extend(other.cols)
        self.vals.extend(v * coef for v in other.vals)
        self.const += coef * other.const
        return self

    def value(self, x: np.ndarray) -> float:
        return self.const + float(np.dot(x[self.cols], self.vals)) if self.cols else self.const


def const(value: float) -> Lin:
    return Lin([], [], float(value))


def var(col: int, coef: float = 1.0) -> Lin:
    return Lin([col], [coef], 0.0)


class _Rows:
    """Rows ``lower <= expr <= upper`` collected as COO triplets, handed to ModelBuilder at once."""

    def __init__(self) -> None:
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.vals: list[float] = []
        self.lower: list[float] = []
        self.upper: list[float] = []
        self.violated: list[str] = []

    def add(self, expr: Lin, lower: float, upper: float, what: str = "") -> None:
        if not expr.cols:
            # A row of constants: the schedule shape is impossible whatever the variables.
            if expr.const < lower - 1e-9 or expr.const > upper + 1e-9:
                self.violated.append(what)
            return
        k = len(self.lower)
        self.rows.extend([k] * len(expr.cols))
        self.cols.extend(expr.cols)
        self.vals.extend(expr.vals)
        self.lower.append(lower - expr.const)
        self.upper.append(upper - expr.const)

    def flush(self, builder: ModelBuilder) -> None:
        builder.add_rows(np.asarray(self.rows, dtype=np.int64), np.asarray(self.cols, dtype=np.int64),
                         np.asarray(self.vals, dtype=np.float64), np.asarray(self.lower),
                         np.asarray(self.upper), count=len(self.lower))


@dataclass
class Stages:
    """A training graph in MONeT's terms: forward positions, backward stages and what each needs.

    Forward node ``fwd[p]`` is position p; backward node ``bwd[t - 1]`` is stage t
    (1..K). ``last[p]`` is the last stage with columns for p (0: p is needed
    only during the forward pass); ``out[p]`` marks forward outputs, resident
    at the end.
    """

    graph: Graph
    fwd: np.ndarray
    bwd: np.ndarray
    fpos: np.ndarray
    last: np.ndarray
    out: np.ndarray
    # Per forward position: its global ops and, per op, its inputs as positions.
    ops: list[list[int]]
    op_inputs: list[list[frozenset[int]]]
    consumers: list[list[int]]  # forward positions reading p with some op
    # Per stage t (index t, 0 unused): ops of the backward node and their forward dependencies.
    bops: list[list[int]]
    deps: list[list[frozenset[int]]]
    grads: np.ndarray  # memory of backward values resident through stage t (fixed memory excluded)

    @property
    def F(self) -> int:
        return len(self.fwd)

    @property
    def K(self) -> int:
        return len(self.bwd)

    def alive(self, t: int) -> np.ndarray:
        """Forward positions with columns in stage t (every one in the forward pass)."""
        cache = self.__dict__.setdefault("_alive", {})
        if t not in cache:
            cache[t] = np.arange(self.F) if t == 0 else np.flatnonzero(self.last >= t)
        return cache[t]

    @classmethod
    def of(cls, graph: Graph) -> Stages:
        fwd = np.asarray(graph.forward_indices, dtype=np.int64)
        bwd = np.asarray(graph.backward_indices, dtype=np.int64)
        F, K = len(fwd), len(bwd)
        fpos = np.full(graph.n, -1, dtype=np.int64)
        fpos[fwd] = np.arange(F)
        stage_of = np.zeros(graph.n, dtype=np.int64)
        stage_of[bwd] = np.arange(1, K + 1)

        ops = [list(graph.ops_of(int(v))) for v in fwd]
        op_inputs = [[frozenset(int(fpos[u]) for u in graph.op_inputs[op]) for op in node_ops] for node_ops in ops]
        consumers: list[set[int]] = [set() for _ in range(F)]
        for c in range(F):
            for ins in op_inputs[c]:
                for u in ins:
                    consumers[u].add(c)
        bops: list[list[int]] = [[]]
        deps: list[list[frozenset[int]]] = [[]]
        direct = np.zeros(F, dtype=np.int64)
        last_reader = np.zeros(graph.n, dtype=np.int64)  # last stage reading each backward value
        for t, b in enumerate(bwd.tolist(), start=1):
            b_ops = list(graph.ops_of(b))
            bops.append(b_ops)
            d = []
            for op in b_ops:
                ins = graph.op_inputs[op]
                d.append(frozenset(int(fpos[u]) for u in ins if fpos[u] >= 0))
                for u in ins:
                    if fpos[u] < 0:
                        last_reader[u] = t
            deps.append(d)
            for p in frozenset().union(*d):
                direct[p] = t
        out = np.zeros(F, dtype=bool)
        out[fpos[[o for o in graph.output_indices if fpos[o] >= 0]]] = True
        # The last stage that may need p: its own readers' or, through a recomputation, any
        # forward descendant's (consumers come later in file order).
        last = np.where(out, K + 1, direct)
        for p in range(F - 1, -1, -1):
            for c in consumers[p]:
                last[p] = max(last[p], last[c])
        last = np.minimum(last, K)

        # Backward value b_s is resident through stage t when s < t <= its last reader, or it is an output.
        mem = graph.memory
        grads = np.zeros(K + 2, dtype=np.float64)
        diff = np.zeros(K + 3, dtype=np.float64)
        for s, b in enumerate(bwd.tolist(), start=1):
            end = K + 1 if graph.is_output[b] else int(last_reader[b])
            if end > s:
                diff[s + 1] += float(mem[b])
                diff[end + 1] -= float(mem[b])
        grads[:] = np.cumsum(diff)[: K + 2]
        return cls(graph, fwd, bwd, fpos, last, out, ops, op_inputs, [sorted(c) for c in consumers],
                   bops, deps, grads)


def model_size(st: Stages, exact: bool = True) -> dict[str, int]:
    """Columns, rows and nonzeros of the MONeT model, counted before building it.

    ``exact=False`` leaves out the terms that need a pass over every (stage,
    value) pair (quadratic in a long chain), which makes it a lower bound in
    constant time: enough to refuse a model that is far too large at once.
    """
    pairs = int(st.last.sum())
    z = 0
    edges = 0
    for t in range(st.K + 1 if exact else 0):
        alive = st.alive(t)
        if not len(alive):
            continue
        is_alive = np.zeros(st.F, dtype=bool)
        is_alive[alive] = True
        for p in alive.tolist():
            cons = [c for c in st.consumers[p] if is_alive[c]]
            edges += len(cons)
            if cons:
                z += int(np.searchsorted(alive, max(cons), side="right") - np.searchsorted(alive, p, side="right"))
    cols = 3 * pairs + st.F + z + st.K + sum(len(o) for o in st.ops) * (1 + int(st.last.max(initial=0)) // 2)
    rows = 6 * pairs + st.F + st.K + 2 * z + edges
    nnz = 25 * pairs + 5 * z + 6 * edges + 4 * st.F
    return {"est_columns": cols, "est_rows": rows, "est_nonzeros": nnz}


def check_fits(st: Stages) -> dict[str, int]:
    """Refuse a model that would not fit in memory, naming the estimate."""
    avail = available_memory_bytes()

    def need_of(size: dict[str, int]) -> int:
        return size["est_nonzeros"] * 60 + size["est_columns"] * 80 + size["est_rows"] * 40

    size = model_size(st, exact=False)
    exact = need_of(size) <= 0.6 * avail
    if exact:
        size = model_size(st)
    need = need_of(size)
    if need > 0.6 * avail:
        about = "about" if exact else "at least"
        raise ModelTooLargeError(
            f"the MONeT model of this graph ({st.F} forward and {st.K} backward nodes) would have {about} "
            f"{size['est_columns']:,} variables and {size['est_nonzeros']:,} nonzeros, needing about "
            f"{need / 2**30:.1f} GiB, more than the {avail / 2**30:.1f} GiB available"
        )
    return {**size, "est_bytes": need}


class MonetModel:
    """The MONeT 0-1 program of one graph and budget (None: the least peak), with its decoder."""

    def __init__(self, st: Stages, budget: Number | None, deadline: Deadline | None = None) -> None:
        """Raises `OutOfTime` if ``deadline`` passes while building."""
        start = time.perf_counter()
        self.st = st
        graph = st.graph
        F, K = st.F, st.K
        scale = memory_scale(graph)
        self.mem_scale = scale
        mem = np.asarray(graph.memory, dtype=np.float64) / scale
        self.fmem = mem[st.fwd]
        ws = np.asarray(graph.op_workspace, dtype=np.float64) / scale
        dur = np.asarray(graph.op_duration, dtype=np.float64)
        positive = dur[dur > 0]
        self.dur_scale = float(positive.mean()) if len(positive) else 1.0
        cost = dur / self.dur_scale
        fixed = float(graph.fixed_memory) / scale
        self.cap = None if budget is None else (math.floor(budget / scale) if scale > 1 else float(budget))
        b = ModelBuilder()
        self.builder = b

        # -- variables: s, r per (stage, position) pair with 1 <= t <= last[p].
        self.pair = np.full((K + 2, F), -1, dtype=np.int64)
        tt = np.concatenate([np.arange(1, int(st.last[p]) + 1) for p in range(F)]) if F else np.zeros(0, np.int64)
        pp = np.repeat(np.arange(F), st.last) if F else np.zeros(0, np.int64)
        order = np.lexsort((pp, tt))  # stage-major
        tt, pp = tt[order].astype(np.int64), pp[order].astype(np.int64)
        self.pair[tt, pp] = np.arange(len(tt))
        self.pair_t, self.pair_p = tt, pp
        self.s0 = int(b.add_vars(len(tt))[0]) if len(tt) else b.num_cols
        single = np.array([len(o) == 1 for o in st.ops], dtype=bool)
        r_cost = np.where(single[pp], cost[[st.ops[p][0] for p in pp.tolist()]] if len(pp) else 0.0, 0.0)
        self.r0 = int(b.add_vars(len(tt), cost=r_cost)[0]) if len(tt) else b.num_cols
        # delta for forward nodes with several implementations: stage 0, then every pair.
        self.delta0: dict[int, int] = {}
        self.delta: dict[int, int] = {}  # pair -> first column
        self.offset = 0.0  # duration of the fixed choices (forward nodes and backward nodes with one op)
        for p in range(F):
            ops = st.ops[p]
            if len(ops) == 1:
                self.offset += cost[ops[0]]
            else:
                self.delta0[p] = int(b.add_vars(len(ops), cost=cost[ops])[0])
        for k in np.flatnonzero(~single[pp]).tolist():
            ops = st.ops[int(pp[k])]
            self.delta[k] = int(b.add_vars(len(ops), cost=cost[ops])[0])
        self.dhat: dict[int, int] = {}
        for t in range(1, K + 1):
            ops = st.bops[t]
            if len(ops) == 1:
                self.offset += cost[ops[0]]
            else:
                self.dhat[t] = int(b.add_vars(len(ops), cost=cost[ops])[0])
        self.budget_col = None if budget is not None else int(b.add_vars(1, lower=0.0, upper=np.inf, cost=1.0,
                                                                         integer=False)[0])
        rows = _Rows()
        self.rows = rows

        # sm[t,p,l] = delta^[t,l] * s[t+1,p] (C.4), for p read by some but not all implementations.
        self.sm: dict[tuple[int, int, int], int] = {}
        for t in range(1, K + 1):
            d = st.deps[t]
            if len(d) < 2:
                continue
            some, every = frozenset().union(*d), frozenset.intersection(*d)
            for p in sorted(some - every):
                s_next = self.S(t + 1, p)
                if not s_next.cols:
                    continue
                for im, dl in enumerate(d):
                    if p in dl:
                        col = int(b.add_vars(1, integer=False)[0])
                        self.sm[(t, p, im)] = col
                        hat = var(self.dhat[t] + im)
                        rows.add(Lin().add(var(col)).add(hat, -1).add(s_next, -1), -1.0, np.inf)
                        rows.add(Lin().add(var(col)).add(hat, -1), -np.inf, 0.0)
                        rows.add(Lin().add(var(col)).add(s_next, -1), -np.inf, 0.0)

        # Implementation choices: sum_l delta = r (1 in the forward pass), sum_l delta^ = 1.
        for p, c0 in self.delta0.items():
            rows.add(Lin(list(range(c0, c0 + len(st.ops[p]))), [1.0] * len(st.ops[p])), 1.0, 1.0)
        for k, c0 in self.delta.items():
            n_ops = len(st.ops[int(pp[k])])
            rows.add(Lin(list(range(c0, c0 + n_ops)), [1.0] * n_ops).add(var(self.r0 + k), -1), 0.0, 0.0)
        for t, c0 in self.dhat.items():
            n_ops = len(st.bops[t])
            rows.add(Lin(list(range(c0, c0 + n_ops)), [1.0] * n_ops), 1.0, 1.0)

        # Checkpointing constraints (eq. 7, 8) and the dominance rows, per stage t >= 1.
        for k in range(len(tt)):
            t, p = int(tt[k]), int(pp[k])
            s_here, r_here = var(self.s0 + k), var(self.r0 + k)
            # r + s <= 1: a resident value cannot be computed again.
            rows.add(Lin().add(s_here).add(r_here), -np.inf, 1.0)
            # s[t+1,p] <= s[t,p] + r[t,p].
            s_next = self.S(t + 1, p)
            if s_next.cols or s_next.const:
                rows.add(Lin().add(s_next).add(s_here, -1).add(r_here, -1), -np.inf, 0.0,
                         f"forward output '{graph.ids[int(st.fwd[p])]}' kept to the end")
            # Recomputation needs its inputs: delta[t,p,l] <= s[t,u] + r[t,u].
            for u in frozenset().union(*st.op_inputs[p]):
                rows.add(Lin().add(self.sel(t, p, u)).add(self.S(t, u), -1).add(self.R(t, u), -1), -np.inf, 0.0)
            # A value held or recomputed in stage t is read there or kept: s + r <= a + readers.
            useful = self.a(t, p)
            for c in st.consumers[p]:
                useful.add(self.sel(t, c, p))
            rows.add(Lin().add(s_here).add(r_here).add(useful, -1), -np.inf, 0.0)
        # A chosen backward implementation needs its dependencies: delta^[t,l] <= s[t,p] + r[t,p].
        for t in range(1, K + 1):
            for p in sorted(frozenset().union(*st.deps[t])):
                rows.add(Lin().add(self.bsel(t, p)).add(self.S(t, p), -1).add(self.R(t, p), -1), -np.inf, 0.0,
                         f"backward node '{graph.ids[int(st.bwd[t - 1])]}' reads a value it cannot have")

        # Memory (eq. 1, 5, 6, 12), with the running total v[t,k] of the resident forward values
        # around position k of stage t's sweep: sum_{j<k} a[t,j] m_j + sum_{j>k} s[t,j] m_j.
        self.v_cols: list[np.ndarray] = []
        self.z_info: list[list[tuple[int, int, int, list[int]]]] = []  # per stage: (col, p, k, chain next)
        for t in range(K + 1):
            if deadline is not None and deadline.expired():
                raise OutOfTime(f"the time limit ended while building the model ({t} of {K + 1} stages built)")
            self._stage_memory(t, fixed, mem, ws)

        rows.flush(b)
        self.model: SparseModel = b.build()
        if self.budget_col is not None:
            # Least peak: the budget alone is minimised (the duration is phase 2's objective).
            self.model.cost[:] = 0.0
            self.model.cost[self.budget_col] = 1.0
        self.build_time_s = time.perf_counter() - start

    # ------------------------------------------------------------------ expressions

    def S(self, t: int, p: int) -> Lin:
        """s[t,p]: p resident entering stage t (a constant outside its columns)."""
        st = self.st
        if 1 <= t <= st.last[p]:
            return var(self.s0 + int(self.pair[t, p]))
        return const(1.0 if (t == st.K + 1 and st.out[p]) else 0.0)

    def R(self, t: int, p: int) -> Lin:
        """r[t,p]: p computed in stage t (always in the forward pass)."""
        if t == 0:
            return const(1.0)
        if 1 <= t <= self.st.last[p]:
            return var(self.r0 + int(self.pair[t, p]))
        return const(0.0)

    def sel(self, t: int, p: int, reads: int | None = None) -> Lin:
        """Sum of delta[t,p,l] over the implementations l of p that read position ``reads`` (all: None)."""
        st = self.st
        ops = st.ops[p]
        chosen = [im for im in range(len(ops)) if reads is None or reads in st.op_inputs[p][im]]
        if len(chosen) == len(ops):
            return self.R(t, p)
        if t == 0:
            c0 = self.delta0[p]
        else:
            k = int(self.pair[t, p]) if 1 <= t <= st.last[p] else -1
            if k < 0:
                return const(0.0)
            c0 = self.delta[k]
        return Lin([c0 + im for im in chosen], [1.0] * len(chosen))

    def bsel(self, t: int, p: int) -> Lin:
        """Sum of delta^[t,l] over the implementations of backward node t that read position p."""
        d = self.st.deps[t]
        chosen = [im for im, dl in enumerate(d) if p in dl]
        if len(chosen) == len(d):
            return const(1.0)
        return Lin([self.dhat[t] + im for im in chosen], [1.0] * len(chosen))

    def a(self, t: int, p: int) -> Lin:
        """a[t,p]: p resident behind the sweep of stage t, kept (s[t+1]) or read by the backward node."""
        s_next = self.S(t + 1, p)
        if t == 0:
            return s_next
        d = self.st.deps[t]
        hat = self.bsel(t, p) if any(p in dl for dl in d) else const(0.0)
        if not hat.cols:
            return const(1.0) if (hat.const or s_next.const) else s_next
        if not s_next.cols:
            return const(1.0) if s_next.const else hat
        # s OR dep = s + sum_l delta^_l - sum_l delta^_l * s (C.4).
        out = Lin().add(s_next).add(hat)
        for im, dl in enumerate(d):
            if p in dl:
                out.add(var(self.sm[(t, p, im)]), -1)
        return out

    # ------------------------------------------------------------------ memory rows

    def _stage_memory(self, t: int, fixed: float, mem: np.ndarray, ws: np.ndarray) -> None:
        st, b, rows = self.st, self.builder, self.rows
        graph = st.graph
        alive = st.alive(t)
        n = len(alive)
        fm = self.fmem
        limit = (self.cap if self.cap is not None else 0.0) - fixed - float(st.grads[t]) / self.mem_scale
        budget_term = var(self.budget_col, -1.0) if self.budget_col is not None else Lin()
        v = b.add_vars(n + 1, lower=0.0, upper=np.inf, integer=False)
        self.v_cols.append(v)
        if n:
            # v[t,0] = sum_{k>=1} s[t,alive[k]] m; v[t,k+1] = v[t,k] + a[t,alive[k]] m - s[t,alive[k+1]] m.
            init = var(int(v[0]))
            for q in alive[1:].tolist():
                init.add(self.S(t, q), -fm[q])
            rows.add(init, 0.0, 0.0)
            for k in range(n):
                p = int(alive[k])
                step = Lin().add(var(int(v[k + 1]))).add(var(int(v[k])), -1).add(self.a(t, p), -fm[p])
                if k + 1 < n:
                    step.add(self.S(t, int(alive[k + 1])), fm[int(alive[k + 1])])
                rows.add(step, 0.0, 0.0)
        else:
            rows.add(var(int(v[0])), 0.0, 0.0)

        # z[t,j,k]: j (behind position k) is still read by a recomputation at or after k and is
        # neither kept nor a dependency. One column per position in j's range, chained downwards.
        z_at: list[list[tuple[int, int]]] = [[] for _ in range(n)]  # per position: (column, value position j)
        info = []
        if n:
            index_of = np.full(st.F, -1, dtype=np.int64)
            index_of[alive] = np.arange(n)
            for kj, j in enumerate(alive.tolist()):
                readers = [c for c in st.consumers[j] if index_of[c] >= 0]
                if not readers:
                    continue
                top = int(index_of[max(readers)])
                cols = b.add_vars(top - kj, lower=0.0, upper=1.0, integer=False)
                exists = Lin().add(self.S(t, j)).add(self.R(t, j))
                a_j = self.a(t, j)
                for off, k in enumerate(range(kj + 1, top + 1)):
                    col = int(cols[off])
                    z_at[k].append((col, j))
                    nxt = int(cols[off + 1]) if k < top else -1
                    if nxt >= 0:
                        rows.add(Lin().add(var(col)).add(var(nxt), -1), 0.0, np.inf)
                    c = int(alive[k])
                    if c in readers:
                        # z >= (s + r) * delta[t,c,reads j] - a, with s + r <= 1 binary: >= s + r + delta - 1 - a.
                        rows.add(Lin().add(var(col)).add(exists, -1).add(self.sel(t, c, j), -1).add(a_j),
                                 -1.0, np.inf)
                    info.append((col, j, k, nxt))
        self.z_info.append(info)

        # One row per compute step of the stage: v + z + the computed value and its workspace.
        for k in range(n):
            p = int(alive[k])
            row = Lin().add(var(int(v[k])))
            for col, j in z_at[k]:
                row.add(var(col), fm[j])
            row.add(self.R(t, p), fm[p])
            ops = st.ops[p]
            if len(ops) == 1:
                row.add(self.R(t, p), ws[ops[0]])
            else:
                c0 = self.delta0[p] if t == 0 else self.delta[int(self.pair[t, p])]
                row.add(Lin([c0 + im for im in range(len(ops))], [float(ws[op]) for op in ops]))
            row.add(budget_term)
            rows.add(row, -np.inf, limit, f"forward node '{graph.ids[int(st.fwd[p])]}' at stage {t}")
        if t >= 1:
            bnode = int(st.bwd[t - 1])
            ops = st.bops[t]
            row = var(int(v[n])).add(const(mem[bnode]))
            if len(ops) == 1:
                row.add(const(ws[ops[0]]))
            else:
                row.add(Lin([self.dhat[t] + im for im in range(len(ops))], [float(ws[op]) for op in ops]))
            row.add(budget_term)
            rows.add(row, -np.inf, limit, f"backward node '{graph.ids[bnode]}'")

    # ------------------------------------------------------------------ decode / encode

    def choices(self, x: np.ndarray) -> tuple[list[list[tuple[int, int]]], list[int]]:
        """Per stage, the forward (position, implementation) pairs computed; per stage, the backward op."""
        st = self.st
        xr = np.round(x) > 0.5
        stages: list[list[tuple[int, int]]] = []
        for t in range(st.K + 1):
            computed = []
            for p in st.alive(t).tolist():
                if t > 0 and not xr[self.r0 + int(self.pair[t, p])]:
                    continue
                ops = st.ops[p]
                if len(ops) == 1:
                    computed.append((p, 0))
                else:
                    c0 = self.delta0[p] if t == 0 else self.delta[int(self.pair[t, p])]
                    computed.append((p, int(np.argmax(x[c0:c0 + len(ops)]))))
            stages.append(computed)
        backward = [0]
        for t in range(1, st.K + 1):
            if t in self.dhat:
                c0 = self.dhat[t]
                backward.append(int(np.argmax(x[c0:c0 + len(st.bops[t])])))
            else:
                backward.append(0)
        return stages, backward

    def sequence(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The compute sequence (nodes, implementation positions) of a solution."""
        st = self.st
        stages, backward = self.choices(x)
        nodes: list[int] = []
        impls: list[int] = []
        for t, computed in enumerate(stages):
            for p, im in computed:
                nodes.append(int(st.fwd[p]))
                impls.append(im)
            if t >= 1:
                nodes.append(int(st.bwd[t - 1]))
                impls.append(backward[t])
        return np.asarray(nodes, dtype=np.int64), np.asarray(impls, dtype=np.int64)

    def decode(self, x: np.ndarray) -> Schedule:
        """The schedule of a solution: its compute sequence, each value freed after its last use."""
        nodes, impls = self.sequence(x)
        return place_frees(self.st.graph, nodes, impls, drop_unused=False)

    def duration(self, x: np.ndarray) -> Number:
        """Duration of the decoded schedule, in the graph's units."""
        nodes, impls = self.sequence(x)
        graph = self.st.graph
        return graph.op_duration[graph.op_start[nodes] + impls].sum().item()

    def encode(self, nodes: np.ndarray, impls: np.ndarray) -> np.ndarray | None:
        """The model's point for a compute sequence of MONeT's shape, or None if it has another shape.

        The sequence must compute every forward node once in file order, then
        the backward nodes in file order, each after forward recomputations
        (sorted here into file order). Recomputations that nothing reads are
        dropped, as the model forbids them.
        """
        st = self.st
        F, K = st.F, st.K
        fwd_list = st.fwd.tolist()
        if len(nodes) < F or nodes[:F].tolist() != fwd_list:
            return None
        x = np.zeros(self.model.num_cols)
        R = np.zeros((K + 1, F), dtype=bool)
        R[0] = True
        op = np.zeros((K + 1, F), dtype=np.int64)
        op[0] = impls[:F]
        bop = np.zeros(K + 1, dtype=np.int64)
        t = 1
        for v, im in zip(nodes[F:].tolist(), impls[F:].tolist()):
            if t > K:
                return None
            p = int(st.fpos[v])
            if p >= 0:
                if R[t, p]:
                    return None
                R[t, p] = True
                op[t, p] = im
            elif v == int(st.bwd[t - 1]):
                bop[t] = im
                t += 1
            else:
                return None
        if t != K + 1:
            return None
        # Minimal storage, and no recomputation without a reader: s[t,p] = not r and (read or kept).
        while True:
            used = np.zeros((K + 2, F), dtype=bool)
            for t in range(K + 1):
                for c in np.flatnonzero(R[t]).tolist():
                    for u in st.op_inputs[c][op[t, c]]:
                        used[t, u] = True
                if t >= 1:
                    for u in st.deps[t][bop[t]]:
                        used[t, u] = True
            S = np.zeros((K + 2, F), dtype=bool)
            S[K + 1] = st.out
            for t in range(K, 0, -1):
                S[t] = ~R[t] & (used[t] | S[t + 1])
            idle = R[1:K + 1] & ~used[1:K + 1] & ~S[2:K + 2]
            if not idle.any():
                break
            R[1:K + 1] &= ~idle
        for t in range(1, K + 1):
            if (R[t] | S[t])[st.last < t].any():
                return None
        for k in range(len(self.pair_t)):
            t, p = int(self.pair_t[k]), int(self.pair_p[k])
            x[self.s0 + k] = S[t, p]
            x[self.r0 + k] = R[t, p]
            if k in self.delta and R[t, p]:
                x[self.delta[k] + op[t, p]] = 1.0
        for p, c0 in self.delta0.items():
            x[c0 + op[0, p]] = 1.0
        for t, c0 in self.dhat.items():
            x[c0 + bop[t]] = 1.0
        for (t, p, im), col in self.sm.items():
            x[col] = float(im == bop[t] and S[t + 1, p])
        # z by its chain from the top of each range, then the running totals.
        for t in range(K + 1):
            alive = st.alive(t)
            for col, j, k, nxt in reversed(self.z_info[t]):
                c = int(alive[k])
                need = 0.0
                if R[t, c] and j in st.op_inputs[c][op[t, c]]:
                    exists = 1.0 if t == 0 else float(S[t, j] or R[t, j])
                    need = exists - self.a(t, j).value(x)
                x[col] = max(0.0, need, x[nxt] if nxt >= 0 else 0.0)
        if self.budget_col is not None:
            x[self.budget_col] = 0.0
        for t in range(K + 1):
            alive = st.alive(t)
            v = self.v_cols[t]
            total = sum(self.S(t, q).value(x) * self.fmem[q] for q in alive[1:].tolist())
            x[v[0]] = total
            for k, p in enumerate(alive.tolist()):
                total += self.a(t, p).value(x) * self.fmem[p]
                if k + 1 < len(alive):
                    total -= self.S(t, int(alive[k + 1])).value(x) * self.fmem[int(alive[k + 1])]
                x[v[k + 1]] = total
        if self.budget_col is not None:
            # The least budget the point needs: the largest excess of a memory row (the rows with -B).
            memory_rows = self.model.A[:, self.budget_col].nonzero()[0]
            act = self.model.A[memory_rows] @ x
            x[self.budget_col] = max(0.0, float(np.max(act - self.model.row_upper[memory_rows], initial=0.0)))
        return x


# ---------------------------------------------------------------------- the method


def monet_candidates(graph: Graph, st: Stages, budget: Number | None, deadline: Deadline,
                     stats: dict[str, Any] | None = None) -> list[tuple[str, Schedule, Number, Number]]:
    """A few MONeT-shaped schedules within ``budget``: (label, schedule, peak, duration), fastest first.

    Candidates: the plans of the fast heuristics whose schedules have
    MONeT's shape (chen, approximate kusumoto, fenghuang, greedy), with the
    recomputations the budget does not need undone (`remat_bench.toolkit.improve`),
    and keeping every forward value; each with the first implementations and
    with the fastest ones that fit (`remat_bench.toolkit.fastest_fit.fastest_fit`).
    They start the solver when `MonetModel.encode` accepts them, and are the
    answer when the time limit ends before the solver has one.
    """
    from remat_bench.toolkit.fastest_fit import fastest_fit
    from remat_bench.toolkit.improve import drop_recomputations

    # The fast ones first. Each gets a share of the time left (on a 48-layer transformer, 1,159
    # nodes, approximate kusumoto alone took 17 s whatever MONeT's own limit was); chen, the answer
    # of last resort, gets at least a second (milliseconds on hundreds of nodes). The shaved input
    # order recomputes only where memory peaks, before the backward node that needs the value.
    sources = [Source("chen", share=0.2, floor=1.0), Source("greedy", share=0.2),
               Source("kusumoto", {"variant": "approx"}, share=0.25), Source("fenghuang", share=0.25),
               Source("shaved", {"cap_s": 20.0})]
    sequences: list[tuple[str, np.ndarray]] = []
    for c in candidate_schedules(graph, budget, deadline, sources, stats=stats):
        nodes = c.schedule.nodes[c.schedule.kinds == COMPUTE]
        if budget is not None and c.source != "shaved":  # shaving has undone them already
            nodes = drop_recomputations(graph, nodes, budget, deadline)
        sequences.append((c.source, nodes))
    sequences.append(("keep-all", np.concatenate([st.fwd, st.bwd])))
    sequences = [(label, nodes) for label, nodes in sequences if monet_shaped(st, nodes)]
    found = []
    for label, nodes in sequences:
        first = place_frees(graph, nodes, np.zeros(len(nodes), dtype=np.int64), drop_unused=False)
        cap = simulate(graph, first).peak if budget is None else budget
        for schedule, name in ((fastest_fit(graph, first, cap), f"{label}+fastest-fit"), (first, label)):
            sim = simulate(graph, schedule)
            if sim.valid and (budget is None or sim.peak <= budget):
                found.append((name, schedule, sim.peak, sim.duration))
    return sorted(found, key=lambda c: (c[3], c[2]) if budget is not None else (c[2], c[3]))


def monet_shaped(st: Stages, nodes: np.ndarray) -> bool:
    """Whether a compute sequence has MONeT's shape: the forward nodes once each in file order,
    then each backward node in file order, after forward recomputations at most once each."""
    F = st.F
    if len(nodes) < F or not np.array_equal(nodes[:F], st.fwd):
        return False
    t = 0
    seen: set[int] = set()
    for v in nodes[F:].tolist():
        if t >= st.K:
            return False
        if st.fpos[v] >= 0:
            if v in seen:
                return False
            seen.add(v)
        elif v == st.bwd[t]:
            t += 1
            seen = set()
        else:
            return False
    return t == st.K


def warm_start(mm: MonetModel, candidates: list[tuple[str, Schedule, Number, Number]]
               ) -> tuple[np.ndarray | None, str | None]:
    """The cheapest model point among the candidates the model accepts."""
    best: tuple[float, np.ndarray, str] | None = None
    for name, schedule, _peak, _duration in candidates:
        computes = schedule.kinds == COMPUTE
        x = mm.encode(schedule.nodes[computes], schedule.impls[computes])
        if x is None or mm.model.violation(x) > 1e-6:
            continue
        value = float(mm.model.cost @ x)
        if best is None or value < best[0] - 1e-9:
            best = (value, x, name)
    return (best[1], best[2]) if best else (None, None)


def fallback(candidates: list[tuple[str, Schedule, Number, Number]], why: str, deadline: Deadline,
             stats: dict[str, Any]) -> MethodResult:
    """The best candidate schedule when the solver had no time, or ``no_solution`` without one."""
    if not candidates:
        return MethodResult(Status.NO_SOLUTION, solve_time_s=deadline.elapsed(), stats=stats,
                            message=f"{why}, and no heuristic schedule fits")
    name, schedule, _peak, duration = candidates[0]
    stats["returned"] = name
    return MethodResult(Status.FEASIBLE, schedule, objective=duration, solve_time_s=deadline.elapsed(),
                        stats=stats, message=f"{why}; returning the {name} schedule")


def model_stats(mm: MonetModel) -> dict[str, Any]:
    return {
        "variables": mm.model.num_cols,
        "integer_variables": int(mm.model.integer.sum()),
        "constraints": mm.model.num_rows,
        "nonzeros": int(mm.model.A.nnz),
        "build_time_s": round(mm.build_time_s, 3),
        "memory_scale": mm.mem_scale,
    }


class Monet(Method):
    name = "monet"
    search_space = "input-order stages with operator implementations (MONeT)"
    description = ("Shah et al. 2021 joint checkpointing and operator-implementation 0-1 program "
                   "(HiGHS, or any PuLP solver)")
    params = (
        Param("backend", str, "highs", "highs, or pulp:NAME for any PuLP solver (pulp:PULP_CBC_CMD, pulp:GUROBI_CMD)",
              check=parse_backend),
        Param("threads", int, 0, "solver threads (0: the solver's default)", minimum=0),
        Param("mip_gap", float, 0.0, "relative gap at which to stop (HiGHS's own default, 1e-4, stops 0.01% "
              "of the duration short of optimal)", minimum=0, maximum=1),
        Param("seed", int, 0, "solver random seed", minimum=0, maximum=2**31 - 1),
        Param("warm_start", bool, True, "start from chen's plan or keeping everything, with the fastest "
              "implementations that fit, when the model accepts it"),
    )
    requires = ("highspy", "pulp")
    needs_backward = True

    def solve(self, graph: Graph, budget: Number | None, time_limit: float | None,
              **params: Any) -> MethodResult:
        deadline = Deadline(time_limit)
        parse_backend(params["backend"])
        st = Stages.of(graph)
        stats: dict[str, Any] = check_fits(st)
        if budget is None:
            return self._least_peak(st, deadline, params, stats)
        return self._solve(st, budget, deadline, params, stats)

    def _run(self, mm: MonetModel, deadline: Deadline, params: dict[str, Any], start: np.ndarray | None) -> Any:
        return solve_milp(
            mm.model, backend=params["backend"], time_limit=deadline.remaining(),
            threads=params["threads"] or None, mip_gap=params["mip_gap"], seed=params["seed"], start=start,
            keep_incumbents=False,
        )

    def _solve(self, st: Stages, budget: Number, deadline: Deadline, params: dict[str, Any],
               stats: dict[str, Any], candidates: list | None = None, mm: MonetModel | None = None,
               start: np.ndarray | None = None, start_from: str | None = None) -> MethodResult:
        if candidates is None:
            candidates = monet_candidates(st.graph, st, budget, deadline, stats) if params["warm_start"] else []
        if mm is None:
            try:
                mm = MonetModel(st, budget, deadline)
            except OutOfTime as exc:
                return fallback(candidates, str(exc), deadline, stats)
        stats.update(model_stats(mm))
        if mm.rows.violated:
            return MethodResult(Status.INFEASIBLE, solve_time_s=deadline.elapsed(), stats=stats, message=(
                f"no MONeT schedule fits the budget: {mm.rows.violated[0]} needs more than {budget} "
                "whatever is stored or recomputed"))
        if start is None and candidates:
            start, start_from = warm_start(mm, candidates)
        stats["warm_start"] = start_from
        if deadline.expired():
            return fallback(candidates, "the time limit ended before the solver could start", deadline, stats)
        sol = self._run(mm, deadline, params, start)
        return self._result(mm, sol, budget, stats, deadline)

    def _result(self, mm: MonetModel, sol: Any, budget: Number | None, stats: dict[str, Any],
                deadline: Deadline) -> MethodResult:
        graph = mm.st.graph
        stats.update({"solver": sol.solver, "solver_status": sol.message, "solver_time_s": round(sol.solve_time_s, 3),
                      "nodes": sol.nodes, "mip_gap": sol.gap})
        lower = None if sol.dual_bound is None else (sol.dual_bound + mm.offset) * mm.dur_scale
        if sol.status == "infeasible":
            return MethodResult(Status.INFEASIBLE, solve_time_s=deadline.elapsed(), stats=stats,
                                message="the solver proved that no MONeT schedule fits the budget")
        if sol.x is None:
            return MethodResult(Status.NO_SOLUTION, lower_bound=lower, solve_time_s=deadline.elapsed(), stats=stats,
                                message=f"no schedule found before the solver stopped ({sol.message})")
        schedule = mm.decode(sol.x)
        sim = simulate(graph, schedule)
        objective = mm.duration(sol.x)
        stats["recomputations"] = sim.recomputations
        stats["implementations_changed"] = int(np.count_nonzero(schedule.impls[schedule.kinds == COMPUTE]))
        if not sim.valid or (budget is not None and sim.peak > budget):
            # The model counts every value the decoded schedule holds: a mismatch is a bug here.
            why = sim.violation if not sim.valid else f"peak {sim.peak} above the budget {budget}"
            return MethodResult(Status.ERROR, solve_time_s=deadline.elapsed(), stats=stats,
                                message=f"the decoded MONeT schedule does not match its model: {why}")
        status = Status.OPTIMAL if sol.status == "optimal" else Status.FEASIBLE
        if status is Status.OPTIMAL and lower is not None:
            lower = min(lower, objective)
        return MethodResult(status, schedule, objective=objective, lower_bound=lower,
                            solve_time_s=deadline.elapsed(), stats=stats)

    def _least_peak(self, st: Stages, deadline: Deadline, params: dict[str, Any],
                    stats: dict[str, Any]) -> MethodResult:
        """``budget=min``: the least peak over MONeT's space, then the least duration at that peak."""
        graph = st.graph
        candidates = monet_candidates(graph, st, None, deadline, stats) if params["warm_start"] else []
        try:
            mm = MonetModel(st, None, deadline)
        except OutOfTime as exc:
            return fallback(candidates, str(exc), deadline, stats)
        stats["peak_model"] = model_stats(mm)
        start, start_from = warm_start(mm, candidates) if candidates else (None, None)
        stats["peak_warm_start"] = start_from
        if deadline.expired():
            return fallback(candidates, "the time limit ended before the solver could start", deadline, stats)
        sol = self._run(mm, deadline, params, start)
        stats["peak_solver_status"] = sol.message
        if sol.x is None:
            if sol.status != "infeasible" and candidates:
                return fallback(candidates, f"no solution while minimising the peak ({sol.message})", deadline,
                                stats)
            status = Status.INFEASIBLE if sol.status == "infeasible" else Status.NO_SOLUTION
            return MethodResult(status, solve_time_s=deadline.elapsed(), stats=stats,
                                message=f"no MONeT schedule found while minimising the peak ({sol.message})")
        phase1 = mm.decode(sol.x)
        peak = simulate(graph, phase1).peak
        stats["least_peak"] = peak
        stats["least_peak_proven"] = sol.status == "optimal"
        # Phase 2 at that peak, from phase 1's schedule.
        phase1_answer = MethodResult(Status.FEASIBLE, phase1, objective=mm.duration(sol.x),
                                     solve_time_s=deadline.elapsed(), stats=stats)
        nodes, impls = mm.sequence(sol.x)
        try:
            mm2 = MonetModel(st, peak, deadline)
        except OutOfTime as exc:
            phase1_answer.message = f"phase 2: {exc}; returning the least-peak solution"
            return phase1_answer
        start2 = mm2.encode(nodes, impls)
        if start2 is not None and mm2.model.violation(start2) > 1e-6:
            start2 = None
        result = self._solve(st, peak, deadline, params, stats, candidates=[], mm=mm2, start=start2,
                             start_from="least-peak solution")
        if result.schedule is None:
            # Out of time in phase 2: phase 1's schedule still reaches the least peak found.
            phase1_answer.message = result.message
            phase1_answer.solve_time_s = deadline.elapsed()
            return phase1_answer
        if result.status is Status.OPTIMAL and not stats["least_peak_proven"]:
            result.status = Status.FEASIBLE
        return result
