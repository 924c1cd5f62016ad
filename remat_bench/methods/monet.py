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
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from remat_bench.core.budget import memory_text
from remat_bench.core.cleanup import place_frees
from remat_bench.core.graph import Graph, Number
from remat_bench.core.machine import available_memory_bytes
from remat_bench.core.schedule import COMPUTE, Schedule
from remat_bench.core.simulate import simulate
from remat_bench.methods import milp_setup
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
)
from remat_bench.methods.candidates import (
    KEEP_BEST,
    Candidate,
    Source,
    best_of,
    candidate_schedules,
    offered_candidates,
)
from remat_bench.toolkit.bound import BoundSource
from remat_bench.toolkit.milp import (
    CONSTANT,
    ModelBuilder,
    SparseModel,
    incumbent_reporter,
    memory_scale,
    model_stats,
    parse_backend,
    refuse_too_large,
)


class OutOfTime(Exception):
    """The time limit passed before the model was built."""


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
        """Forward positions with columns in stage t (every one in the forward pass).

        Parameters
        ----------
        t : int
            The stage, 0 (the forward pass) to K.

        Returns
        -------
        np.ndarray
            int64: the positions, ascending.
        """
        cache = self.__dict__.setdefault("_alive", {})
        if t not in cache:
            cache[t] = np.arange(self.F) if t == 0 else np.flatnonzero(self.last >= t)
        return cache[t]

    @classmethod
    def of(cls, graph: Graph) -> Stages:
        """The stages of a training graph: its forward nodes in file order, one stage per backward node.

        Parameters
        ----------
        graph : Graph
            A training graph (forward and backward nodes).

        Returns
        -------
        Stages
        """
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
                reads = graph.op_inputs[op]
                d.append(frozenset(int(fpos[u]) for u in reads if fpos[u] >= 0))
                for u in reads:
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

    Parameters
    ----------
    st : Stages
    exact : bool
        Count every term; False for the quick lower bound.

    Returns
    -------
    dict
        ``est_columns``, ``est_rows`` and ``est_nonzeros``.
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


def check_fits(st: Stages, cap: int | None = None) -> dict[str, Any]:
    """Refuse a model that would not fit in memory, naming the estimate.

    Parameters
    ----------
    st : Stages
    cap : int or None
        The most memory the run lets a model take, in bytes (None: the machine's limit alone).

    Returns
    -------
    dict
        The estimate (`model_size`, exact unless the lower bound alone is too large) and ``est_bytes``,
        the memory it needs in bytes.

    Raises
    ------
    ModelTooLargeError
        It would take more than 60% of the memory available (`remat_bench.toolkit.milp.refuse_too_large`),
        or more than ``cap``.
    """
    avail = available_memory_bytes()

    def need_of(size: dict[str, int]) -> int:
        return size["est_nonzeros"] * 60 + size["est_columns"] * 80 + size["est_rows"] * 40

    size = model_size(st, exact=False)
    exact = avail is None or need_of(size) <= 0.6 * avail
    if exact:
        size = model_size(st)
    need = need_of(size)
    refuse_too_large(need, f"the MONeT model of this graph ({st.F} forward and {st.K} backward nodes) "
                           f"would have {'about' if exact else 'at least'} {size['est_columns']:,} "
                           f"variables and {size['est_nonzeros']:,} nonzeros", cap=cap)
    return {**size, "est_bytes": need}


Terms = tuple[np.ndarray, np.ndarray, np.ndarray]
# (row, column, value) triplets: of a block of rows, or of one expression per item (its row is the
# item's index). MONeT's variables exist only for some (stage, value) pairs and are constants
# elsewhere, so a term's column may be `CONSTANT`; `ModelBuilder.add_affine_rows` moves those into
# the bounds.


def _ranges(starts: Any, counts: Any) -> np.ndarray:
    """The concatenation of ``range(s, s + c)`` over ``starts`` and ``counts``."""
    starts = np.asarray(starts, dtype=np.int64)
    counts = np.asarray(counts, dtype=np.int64)
    return np.repeat(starts - (np.cumsum(counts) - counts), counts) + np.arange(int(counts.sum()), dtype=np.int64)


def _flat(t: Any, index: Any) -> tuple[np.ndarray, np.ndarray]:
    """Stages and indices of items as two flat integer arrays (one stage may serve every item)."""
    t_arr, index_arr = np.broadcast_arrays(np.asarray(t, dtype=np.int64), np.asarray(index, dtype=np.int64))
    return t_arr.reshape(-1), index_arr.reshape(-1)


def _placed(rows: np.ndarray, terms: Terms, coef: Any = 1.0) -> Terms:
    """``coef`` times the terms of some items, item i's on row ``rows[i]``."""
    item, col, val = terms
    return rows[item], col, val * coef


def _gather(terms: Terms, owners: int, items: np.ndarray) -> Terms:
    """The terms of owner ``items[i]`` as item i's, for each item (an owner may recur)."""
    owner, col, val = terms
    order = np.argsort(owner, kind="stable")
    counts = np.bincount(owner, minlength=owners)
    per_item = counts[items]
    picked = order[_ranges((np.cumsum(counts) - counts)[items], per_item)]
    return np.repeat(np.arange(len(items)), per_item), col[picked], val[picked]


def _at(terms: Terms, x: np.ndarray, count: int) -> np.ndarray:
    """The value of each of ``count`` items' expression at the point ``x``."""
    item, col, val = terms
    known = col != CONSTANT
    return np.bincount(item, weights=val * np.where(known, x[np.where(known, col, 0)], 1.0), minlength=count)


@dataclass(frozen=True)
class _Reads:
    """The read edges (c, u) between forward positions: c reads u with some implementation, sorted
    by c, then u. Per edge, the implementations of c that read u (eq. 7 asks u of those), and
    whether all of them do."""

    c: np.ndarray
    u: np.ndarray
    every: np.ndarray
    impl_start: np.ndarray  # the edge's implementations: impls[impl_start:impl_start + impl_count]
    impl_count: np.ndarray
    impls: np.ndarray
    start: np.ndarray  # the edges of position c: start[c] .. start[c + 1]
    by_u: np.ndarray  # edge ids sorted by u (then c): the readers of u are by_u[by_u_start[u]:by_u_start[u + 1]]
    by_u_start: np.ndarray

    @classmethod
    def of(cls, st: Stages) -> _Reads:
        c_of, u_of, every, count, impls = [], [], [], [], []
        for c, reads in enumerate(st.op_inputs):
            for u in sorted(frozenset().union(*reads)):
                chosen = [im for im, ins in enumerate(reads) if u in ins]
                c_of.append(c)
                u_of.append(u)
                every.append(len(chosen) == len(reads))
                count.append(len(chosen))
                impls.extend(chosen)
        c_arr, u_arr = np.asarray(c_of, dtype=np.int64), np.asarray(u_of, dtype=np.int64)
        count_arr = np.asarray(count, dtype=np.int64)
        by_u = np.argsort(u_arr, kind="stable")
        positions = np.arange(st.F + 1)
        return cls(c_arr, u_arr, np.asarray(every, dtype=bool), np.cumsum(count_arr) - count_arr, count_arr,
                   np.asarray(impls, dtype=np.int64), np.searchsorted(c_arr, positions), by_u,
                   np.searchsorted(u_arr[by_u], positions))

    def find(self, c: np.ndarray, u: np.ndarray) -> np.ndarray:
        """The edge (c, u) of each item, -1 where c does not read u."""
        F = len(self.start) - 1
        keys = self.c * F + self.u  # sorted
        at = np.searchsorted(keys, c * F + u)
        found = at < len(keys)
        found[found] = keys[at[found]] == (c * F + u)[found]
        return np.where(found, at, -1)


@dataclass(frozen=True)
class _Dependencies:
    """Backward node t's dependencies D^l_t, per stage t (index 0, the forward pass, empty): the
    positions every implementation reads, those some read, and for the positions only some read,
    each (position, implementation) that reads it, by position then implementation."""

    read_by_all: list[np.ndarray]
    read_by_any: list[np.ndarray]
    partial_p: list[np.ndarray]
    partial_im: list[np.ndarray]

    @classmethod
    def of(cls, st: Stages) -> _Dependencies:
        empty = np.zeros(0, dtype=np.int64)
        every, some, partial_p, partial_im = [empty], [empty], [empty], [empty]
        for t in range(1, st.K + 1):
            d = st.deps[t]
            union, common = frozenset().union(*d), frozenset.intersection(*d)
            every.append(np.asarray(sorted(common), dtype=np.int64))
            some.append(np.asarray(sorted(union), dtype=np.int64))
            pairs = [(p, im) for p in sorted(union - common) for im, dl in enumerate(d) if p in dl]
            partial_p.append(np.asarray([p for p, _ in pairs], dtype=np.int64))
            partial_im.append(np.asarray([im for _, im in pairs], dtype=np.int64))
        return cls(every, some, partial_p, partial_im)


class MonetModel:
    """The MONeT 0-1 program of one graph and budget (None: the least peak), with its decoder.

    Built in blocks with `ModelBuilder`, in the paper's order (section 4, appendix C): the
    variables, the products of C.4, one implementation per computation, the checkpointing
    constraints (eq. 7, 8) with the rows this implementation adds, the memory constraints stage by
    stage (eq. 1, 5, 6, 12; C.1, C.2), then the objective (eq. 9).
    """

    def __init__(self, st: Stages, budget: Number | None, deadline: Deadline | None = None) -> None:
        """Raises `OutOfTime` if ``deadline`` passes while building."""
        start = time.perf_counter()
        self.st = st
        graph = st.graph
        scale = memory_scale(graph)
        self.mem_scale = scale
        self.mem = np.asarray(graph.memory, dtype=np.float64) / scale
        self.fmem = self.mem[st.fwd]
        self.ws = np.asarray(graph.op_workspace, dtype=np.float64) / scale
        self.cap = None if budget is None else (math.floor(budget / scale) if scale > 1 else float(budget))
        self.reads = _Reads.of(st)
        self.deps = _Dependencies.of(st)
        # Rows no variable enters whose constants break them: the budget is too small whatever is
        # stored or recomputed (what each one is, in words).
        self.violated: list[str] = []
        b = ModelBuilder()
        self._add_variables(b, least_peak=budget is None)
        self._add_products(b)
        self._add_implementation_choice(b)
        self._add_storage(b)
        self._add_recomputation_inputs(b)
        self._add_usefulness(b)
        self._add_backward_dependencies(b)
        self._add_memory(b, deadline)
        self.model: SparseModel = b.build()
        self._set_objective()
        self.build_time_s = time.perf_counter() - start

    # ------------------------------------------------------------------ variables

    def _add_variables(self, b: ModelBuilder, least_peak: bool) -> None:
        """s[t,p] and r[t,p] for the pairs 1 <= t <= last[p], stage-major; delta[p,l] of the forward
        pass for each forward node with several implementations, then delta[t,p,l] for each such
        pair; delta^[t,l] of each backward node with several; the budget B for the least peak. There
        are no columns for s and r in the forward pass (0 and 1) nor past last[p] (0, or 1 for a
        forward output at the end): there they are constants. Costs are set by `_set_objective`."""
        st = self.st
        F, K = st.F, st.K
        self.pair = np.full((K + 2, F), -1, dtype=np.int64)
        tt = np.concatenate([np.arange(1, int(st.last[p]) + 1) for p in range(F)]) if F else np.zeros(0, np.int64)
        pp = np.repeat(np.arange(F), st.last) if F else np.zeros(0, np.int64)
        order = np.lexsort((pp, tt))  # stage-major
        tt, pp = tt[order].astype(np.int64), pp[order].astype(np.int64)
        self.pair[tt, pp] = np.arange(len(tt))
        self.pair_t, self.pair_p = tt, pp
        self.s0 = int(b.add_vars(len(tt))[0]) if len(tt) else b.num_cols
        self.r0 = int(b.add_vars(len(tt))[0]) if len(tt) else b.num_cols
        self.delta0 = {p: int(b.add_vars(len(ops))[0]) for p, ops in enumerate(st.ops) if len(ops) > 1}
        self.delta = {k: int(b.add_vars(len(st.ops[p]))[0]) for k, p in enumerate(pp.tolist()) if len(st.ops[p]) > 1}
        self.dhat = {t: int(b.add_vars(len(st.bops[t]))[0]) for t in range(1, K + 1) if len(st.bops[t]) > 1}
        self.budget_col = int(b.add_vars(1, lower=0.0, upper=np.inf, integer=False)[0]) if least_peak else None
        # The first delta column of each position's forward pass and of each pair, -1 with one
        # implementation; the last entry, -1, answers the pair -1 (no columns).
        self._delta0_first = np.full(F, -1, dtype=np.int64)
        self._delta0_first[list(self.delta0)] = list(self.delta0.values())
        self._delta_first = np.full(len(tt) + 1, -1, dtype=np.int64)
        self._delta_first[list(self.delta)] = list(self.delta.values())
        self._op_first = np.asarray([ops[0] for ops in st.ops], dtype=np.int64)
        self._op_count = np.asarray([len(ops) for ops in st.ops], dtype=np.int64)

    # ------------------------------------------------------------------ the variables as terms, per item

    def _s(self, t: Any, p: Any) -> Terms:
        """s[t,p] per item: p resident entering stage t; outside its columns the constant 0, or 1 for a
        forward output past the last stage."""
        t, p = _flat(t, p)
        k = self.pair[t, p]
        has = k >= 0
        outside = ((t == self.st.K + 1) & self.st.out[p]).astype(np.float64)
        return np.arange(len(k)), np.where(has, self.s0 + k, CONSTANT), np.where(has, 1.0, outside)

    def _r(self, t: Any, p: Any) -> Terms:
        """r[t,p] per item: p computed in stage t; the constant 1 in the forward pass, 0 past last[p]."""
        t, p = _flat(t, p)
        k = self.pair[t, p]
        has = k >= 0
        return np.arange(len(k)), np.where(has, self.r0 + k, CONSTANT), np.where(has, 1.0, (t == 0).astype(np.float64))

    def _sel(self, t: Any, e: Any) -> Terms:
        """Per read edge e = (c, u): sum_l delta[t,c,l] over the implementations l of c that read u,
        r[t,c] when all of them do."""
        t, e = _flat(t, e)
        reads = self.reads
        c = reads.c[e]
        item = np.arange(len(e))
        every = reads.every[e]
        r_item, r_col, r_val = self._r(t[every], c[every])
        first = np.where(t == 0, self._delta0_first[c], self._delta_first[self.pair[t, c]])
        some = np.flatnonzero(~every & (first >= 0))  # first -1: c has no columns in stage t
        count = reads.impl_count[e[some]]
        cols = np.repeat(first[some], count) + reads.impls[_ranges(reads.impl_start[e[some]], count)]
        return (np.concatenate([item[every][r_item], np.repeat(item[some], count)]),
                np.concatenate([r_col, cols]), np.concatenate([r_val, np.ones(len(cols))]))

    def _partial(self, t: int, ps: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For each position of ``ps[mask]`` (``ps`` sorted) that only some implementations of backward
        node t read, each implementation l that does: (index in ``ps``, delta^[t,l], sm[t,p,l] or -1)."""
        p, im, sm = self.deps.partial_p[t], self.deps.partial_im[t], self._sm_col[t]
        if not len(p) or not len(ps):
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
        at = np.minimum(np.searchsorted(ps, p), len(ps) - 1)
        hit = (ps[at] == p) & mask[at]
        return at[hit], self.dhat[t] + im[hit], sm[hit]

    def _bsel(self, t: int, ps: np.ndarray) -> Terms:
        """Per position of ``ps`` (sorted): sum_l delta^[t,l] over the implementations of backward node
        t that read it, the constant 1 when all of them do."""
        item = np.arange(len(ps))
        every = np.isin(ps, self.deps.read_by_all[t])
        owner, col, _ = self._partial(t, ps, ~every)
        return (np.concatenate([item[every], owner]), np.concatenate([np.full(int(every.sum()), CONSTANT), col]),
                np.ones(int(every.sum()) + len(owner)))

    def _a(self, t: int, ps: np.ndarray) -> Terms:
        """a[t,p] per position of ``ps`` (sorted): p resident behind the sweep of stage t, because it is
        kept (s[t+1,p]) or the backward node reads it: s OR dep = s + sum_l delta^_l - sum_l sm[t,p,l]
        (C.4), or one of them alone when the other is a constant."""
        item, s_col, s_val = self._s(t + 1, ps)
        if t == 0:
            return item, s_col, s_val
        every = np.isin(ps, self.deps.read_by_all[t])
        some = np.isin(ps, self.deps.read_by_any[t])
        s_var = s_col != CONSTANT
        one = every | (~s_var & (s_val == 1.0))  # a dependency of every implementation, or kept to the end
        with_s = ~one & s_var
        owner, hat, sm = self._partial(t, ps, ~one & some & ~every)
        and_sm = with_s[owner]
        ones = int(one.sum())
        return (np.concatenate([item[one], item[with_s], owner, owner[and_sm]]),
                np.concatenate([np.full(ones, CONSTANT), s_col[with_s], hat, sm[and_sm]]),
                np.concatenate([np.ones(ones + int(with_s.sum()) + len(owner)), -np.ones(int(and_sm.sum()))]))

    # ------------------------------------------------------------------ constraints

    def _add_products(self, b: ModelBuilder) -> None:
        """sm[t,p,l] = delta^[t,l] * s[t+1,p] (C.4) where only some implementations of backward node t
        read p and s[t+1,p] is a variable: sm >= delta^ + s - 1, sm <= delta^, sm <= s (continuous:
        the binaries fix it)."""
        st, deps = self.st, self.deps
        first = b.num_cols
        self._sm_col = [np.zeros(0, dtype=np.int64)]
        self.sm: dict[tuple[int, int, int], int] = {}
        for t in range(1, st.K + 1):
            p, im = deps.partial_p[t], deps.partial_im[t]
            col = np.full(len(p), -1, dtype=np.int64)
            kept = np.flatnonzero(self.pair[t + 1, p] >= 0)
            col[kept] = first + len(self.sm) + np.arange(len(kept))
            self._sm_col.append(col)
            self.sm.update(zip(zip([t] * len(kept), p[kept].tolist(), im[kept].tolist()), col[kept].tolist()))
        sm = b.add_vars(len(self.sm), integer=False)
        t_of, p_of, im_of = (np.asarray([key[i] for key in self.sm], dtype=np.int64) for i in range(3))
        hat = np.asarray([self.dhat[t] for t in t_of.tolist()], dtype=np.int64) + im_of
        s_next = self.s0 + self.pair[t_of + 1, p_of]
        k, one = 3 * np.arange(len(sm)), np.ones(len(sm))
        b.add_rows(np.concatenate([k, k, k, k + 1, k + 1, k + 2, k + 2]),
                   np.concatenate([sm, hat, s_next, sm, hat, sm, s_next]),
                   np.concatenate([one, -one, -one, one, -one, one, -one]),
                   np.tile([-1.0, -np.inf, -np.inf], len(sm)), np.tile([np.inf, 0.0, 0.0], len(sm)), count=3 * len(sm))

    def _add_implementation_choice(self, b: ModelBuilder) -> None:
        """One implementation per computation (section 4): sum_l delta[p,l] = 1 in the forward pass,
        sum_l delta[t,p,l] = r[t,p] in a recomputation, sum_l delta^[t,l] = 1 for backward node t."""
        st = self.st

        def choices(first: dict[int, int], sizes: list[int]) -> tuple[np.ndarray, np.ndarray]:
            counts = np.asarray(sizes, dtype=np.int64)
            return np.repeat(np.arange(len(counts)), counts), _ranges(list(first.values()), counts)

        rows, cols = choices(self.delta0, [len(st.ops[p]) for p in self.delta0])
        b.add_rows(rows, cols, np.ones(len(cols)), 1.0, 1.0, count=len(self.delta0))
        pairs = np.asarray(list(self.delta), dtype=np.int64)
        rows, cols = choices(self.delta, [len(st.ops[p]) for p in self.pair_p[pairs].tolist()])
        b.add_rows(np.concatenate([rows, np.arange(len(pairs))]), np.concatenate([cols, self.r0 + pairs]),
                   np.concatenate([np.ones(len(cols)), -np.ones(len(pairs))]), 0.0, 0.0, count=len(pairs))
        rows, cols = choices(self.dhat, [len(st.bops[t]) for t in self.dhat])
        b.add_rows(rows, cols, np.ones(len(cols)), 1.0, 1.0, count=len(self.dhat))

    def _add_storage(self, b: ModelBuilder) -> None:
        """Per pair (t, p): r + s <= 1, a resident value is not computed again (the simulator forbids
        it); and eq. 8, only a stored or recomputed value is kept: s[t+1,p] - s[t,p] - r[t,p] <= 0."""
        st = self.st
        pairs = np.arange(len(self.pair_t))
        b.add_rows(np.concatenate([pairs, pairs]), np.concatenate([self.s0 + pairs, self.r0 + pairs]),
                   np.ones(2 * len(pairs)), -np.inf, 1.0, count=len(pairs))
        _, col, val = self._s(self.pair_t + 1, self.pair_p)
        k = np.flatnonzero((col != CONSTANT) | (val != 0.0))  # nothing to keep when s[t+1,p] is 0
        rows, minus = np.arange(len(k)), -np.ones(len(k))
        violated = b.add_affine_rows([(rows, col[k], val[k]), (rows, self.s0 + k, minus), (rows, self.r0 + k, minus)],
                                     -np.inf, 0.0, count=len(k))
        self.violated += [f"forward output '{st.graph.ids[int(st.fwd[self.pair_p[k[i]]])]}' kept to the end"
                          for i in violated.tolist()]

    def _add_recomputation_inputs(self, b: ModelBuilder) -> None:
        """eq. 7: a recomputation reads stored or recomputed inputs, delta[t,p,l] <= s[t,u] + r[t,u] for
        each input u of implementation l, summed over the implementations that read u."""
        reads = self.reads
        count = reads.start[self.pair_p + 1] - reads.start[self.pair_p]
        e = _ranges(reads.start[self.pair_p], count)
        t, u = np.repeat(self.pair_t, count), reads.u[e]
        rows = np.arange(len(e))
        b.add_affine_rows([self._sel(t, e), _placed(rows, self._s(t, u), -1.0), _placed(rows, self._r(t, u), -1.0)],
                          -np.inf, 0.0, count=len(e))

    def _add_usefulness(self, b: ModelBuilder) -> None:
        """A value held or recomputed in stage t is read there or kept: s[t,p] + r[t,p] <= a[t,p] +
        sum_c delta[t,c,reads p] over the recomputations c that may read it. (Added here: with it and
        r + s <= 1 the model is exact for MONeT's schedule space.)"""
        st, reads = self.st, self.reads
        pairs = np.arange(len(self.pair_t))
        ones = np.ones(len(pairs))
        parts = [(pairs, self.s0 + pairs, ones), (pairs, self.r0 + pairs, ones)]
        for t in range(1, st.K + 1):
            alive = st.alive(t)  # the pairs of stage t, in order
            parts.append(_placed(self.pair[t, alive], self._a(t, alive), -1.0))
        count = reads.by_u_start[self.pair_p + 1] - reads.by_u_start[self.pair_p]
        readers = reads.by_u[_ranges(reads.by_u_start[self.pair_p], count)]
        parts.append(_placed(np.repeat(pairs, count), self._sel(np.repeat(self.pair_t, count), readers), -1.0))
        b.add_affine_rows(parts, -np.inf, 0.0, count=len(pairs))

    def _add_backward_dependencies(self, b: ModelBuilder) -> None:
        """eq. 7's backward part: the chosen implementation of backward node t has what it reads,
        delta^[t,l] <= s[t,p] + r[t,p] for each p in D^l_t, summed over the implementations that read p."""
        st = self.st
        parts: list[Terms] = []
        stage_of: list[int] = []
        for t in range(1, st.K + 1):
            ps = self.deps.read_by_any[t]
            rows = len(stage_of) + np.arange(len(ps))
            parts += [_placed(rows, self._bsel(t, ps)), _placed(rows, self._s(t, ps), -1.0),
                      _placed(rows, self._r(t, ps), -1.0)]
            stage_of += [t] * len(ps)
        violated = b.add_affine_rows(parts, -np.inf, 0.0, count=len(stage_of))
        self.violated += [f"backward node '{st.graph.ids[int(st.bwd[stage_of[i] - 1])]}' reads a value it cannot have"
                          for i in violated.tolist()]

    # ------------------------------------------------------------------ memory

    def _add_memory(self, b: ModelBuilder, deadline: Deadline | None) -> None:
        """The memory constraints (eq. 1, 5, 6, 12; C.1, C.2), stage by stage: the running total v of
        the resident forward values along the stage's sweep, the local memory z, then one row per
        compute step within the budget, less the fixed memory and the gradients held through the stage."""
        st = self.st
        fixed = float(st.graph.fixed_memory) / self.mem_scale
        self.v_cols: list[np.ndarray] = []
        self.z_info: list[np.ndarray] = []  # per stage, one (column, value j, position k, chain next) per z
        for t in range(st.K + 1):
            if deadline is not None and deadline.expired():
                raise OutOfTime(f"the time limit ended while building the model ({t} of {st.K + 1} stages built)")
            alive = st.alive(t)
            self.v_cols.append(self._add_running_total(b, t, alive))
            self.z_info.append(self._add_local_memory(b, t, alive))
            limit = (self.cap if self.cap is not None else 0.0) - fixed - float(st.grads[t]) / self.mem_scale
            self._add_step_memory(b, t, alive, limit)

    def _add_running_total(self, b: ModelBuilder, t: int, alive: np.ndarray) -> np.ndarray:
        """v[t,k]: the resident forward values around position k of stage t's sweep, sum_{j<k} a[t,j]
        m_j + sum_{j>k} s[t,j] m_j (C.1, C.2), summed along the sweep, one short row per step rather
        than a dense one: v[t,0] = sum_{k>=1} s[t,alive[k]] m; v[t,k+1] = v[t,k] + a[t,alive[k]] m -
        s[t,alive[k+1]] m. Returns the columns."""
        n = len(alive)
        fm = self.fmem
        v = b.add_vars(n + 1, lower=0.0, upper=np.inf, integer=False)
        rows = np.arange(n + 1)
        next_mem = fm[alive[1:]]
        s_next = self._s(t, alive[1:])
        a = self._a(t, alive)
        b.add_affine_rows([(rows, v, np.ones(n + 1)),  # v[t,0], and v[t,k+1] in row k+1
                           _placed(np.zeros(len(next_mem), dtype=np.int64), s_next, -next_mem),  # row 0
                           (rows[1:], v[:-1], -np.ones(n)),
                           _placed(rows[1:], a, -fm[alive][a[0]]),
                           _placed(rows[1:], s_next, next_mem)],
                          0.0, 0.0, count=n + 1)
        return v

    def _add_local_memory(self, b: ModelBuilder, t: int, alive: np.ndarray) -> np.ndarray:
        """z[t,j,k]: j, behind position k of stage t's sweep, is still read by a recomputation at or
        after k and is neither kept nor a dependency (the local memory L^k_i of eq. 12, counted
        exactly). One column per position of j's range (up to its last reader), chained downwards,
        z[k] >= z[k+1]; at each reader c, z >= (s + r)[t,j] * delta[t,c,reads j] - a[t,j], linearised as
        in C.4: z >= s + r + delta - 1 - a (s + r <= 1). Returns (column, j, k, next column) per z."""
        reads = self.reads
        n = len(alive)
        live = np.flatnonzero(self.st.last[reads.c] >= t) if t else np.arange(len(reads.c))
        top = np.full(n, -1, dtype=np.int64)  # index of the last reader of alive[k] in the stage
        np.maximum.at(top, np.searchsorted(alive, reads.u[live]), np.searchsorted(alive, reads.c[live]))
        kj = np.flatnonzero(top >= 0)
        count = top[kj] - kj
        cols = b.add_vars(int(count.sum()), lower=0.0, upper=1.0, integer=False)
        owner = np.repeat(np.arange(len(kj)), count)
        k = _ranges(kj + 1, count)
        j = alive[kj][owner]
        chained = k < top[kj][owner]
        nxt = np.where(chained, cols + 1, -1)
        e = reads.find(alive[k], j)
        read = e >= 0
        # Rows in order of z: its chain row, then its row as a reader's.
        per_z = chained.astype(np.int64) + read
        base = np.cumsum(per_z) - per_z
        chain_row, read_row = base[chained], (base + chained)[read]
        lower = np.zeros(int(per_z.sum()))
        lower[read_row] = -1.0
        js = alive[kj]
        b.add_affine_rows([(chain_row, cols[chained], np.ones(len(chain_row))),
                           (chain_row, nxt[chained], -np.ones(len(chain_row))),
                           (read_row, cols[read], np.ones(len(read_row))),
                           _placed(read_row, self._s(t, j[read]), -1.0), _placed(read_row, self._r(t, j[read]), -1.0),
                           _placed(read_row, self._sel(t, e[read]), -1.0),
                           _placed(read_row, _gather(self._a(t, js), len(js), owner[read]))],
                          lower, np.inf, count=len(lower))
        return np.stack([cols, j, k, nxt], axis=1)

    def _add_step_memory(self, b: ModelBuilder, t: int, alive: np.ndarray, limit: float) -> None:
        """One memory row per compute step of stage t (eq. 1 in the forward pass, C.2's m_R for a
        recomputation, eq. 5 for the backward node): v + sum_j m_j z[t,j,k] + the computed value and
        its workspace, sum_l c_l delta[t,p,l] (eq. 12), within ``limit`` (less B for the least peak)."""
        st = self.st
        graph = st.graph
        n = len(alive)
        v, z = self.v_cols[t], self.z_info[t]
        rows = np.arange(n)
        op_first, op_count = self._op_first[alive], self._op_count[alive]
        single, many = np.flatnonzero(op_count == 1), np.flatnonzero(op_count > 1)
        first = self._delta0_first[alive] if t == 0 else self._delta_first[self.pair[t, alive]]
        parts = [(rows, v[:n], np.ones(n)),
                 (z[:, 2], z[:, 0], self.fmem[z[:, 1]]),
                 _placed(rows, self._r(t, alive), self.fmem[alive]),  # the computed value
                 # Its workspace: c r[t,p] with one implementation, sum_l c_l delta[t,p,l] with several.
                 _placed(single, self._r(t, alive[single]), self.ws[op_first[single]]),
                 (np.repeat(many, op_count[many]), _ranges(first[many], op_count[many]),
                  self.ws[_ranges(op_first[many], op_count[many])])]
        if self.budget_col is not None:
            parts.append((rows, np.full(n, self.budget_col), -np.ones(n)))
        violated = b.add_affine_rows(parts, -np.inf, limit, count=n)
        self.violated += [f"forward node '{graph.ids[int(st.fwd[alive[i]])]}' at stage {t}" for i in violated.tolist()]
        if t == 0:
            return
        # Backward node t: its value, and its workspace (a constant with one implementation).
        bnode, ops = int(st.bwd[t - 1]), st.bops[t]
        cols: list[int] = [int(v[n]), CONSTANT]
        vals: list[float] = [1.0, float(self.mem[bnode])]
        if len(ops) == 1:
            cols.append(CONSTANT)
            vals.append(float(self.ws[ops[0]]))
        else:
            cols.extend(self.dhat[t] + im for im in range(len(ops)))
            vals.extend(self.ws[ops].tolist())
        if self.budget_col is not None:
            cols.append(self.budget_col)
            vals.append(-1.0)
        if len(b.add_affine_rows([(np.zeros(len(cols), dtype=np.int64), cols, vals)], -np.inf, limit, count=1)):
            self.violated.append(f"backward node '{graph.ids[bnode]}'")

    # ------------------------------------------------------------------ objective

    def _set_objective(self) -> None:
        """eq. 9: the durations of the forward pass, the recomputations and the backward nodes, each its
        chosen implementation's, divided by their mean. A node with one implementation costs r's cost
        in a recomputation and the constant ``offset`` in the forward pass and as a backward node. For
        the least peak, the budget B alone is minimised (the duration is phase 2's objective)."""
        st = self.st
        dur = np.asarray(st.graph.op_duration, dtype=np.float64)
        positive = dur[dur > 0]
        self.dur_scale = float(positive.mean()) if len(positive) else 1.0
        cost = dur / self.dur_scale
        col_cost = self.model.cost
        self.offset = 0.0
        for p, ops in enumerate(st.ops):
            if len(ops) == 1:
                self.offset += cost[ops[0]]
            else:
                col_cost[self.delta0[p]:self.delta0[p] + len(ops)] = cost[ops]
        single = np.flatnonzero(self._op_count[self.pair_p] == 1)
        col_cost[self.r0 + single] = cost[self._op_first[self.pair_p[single]]]
        for k, c0 in self.delta.items():
            ops = st.ops[int(self.pair_p[k])]
            col_cost[c0:c0 + len(ops)] = cost[ops]
        for t in range(1, st.K + 1):
            ops = st.bops[t]
            if len(ops) == 1:
                self.offset += cost[ops[0]]
            else:
                col_cost[self.dhat[t]:self.dhat[t] + len(ops)] = cost[ops]
        if self.budget_col is not None:
            col_cost[:] = 0.0
            col_cost[self.budget_col] = 1.0

    # ------------------------------------------------------------------ decode / encode

    def choices(self, x: np.ndarray) -> tuple[list[list[tuple[int, int]]], list[int]]:
        """Per stage, the forward (position, implementation) pairs computed; per stage, the backward op.

        Parameters
        ----------
        x : np.ndarray
            A point of the model.

        Returns
        -------
        stages : list of list of tuple of (int, int)
            Per stage 0..K, the forward positions computed there, in order, with their implementation's
            index among the node's.
        backward : list of int
            Per stage, the index of the backward node's implementation (0 at stage 0).
        """
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
        """The compute sequence (nodes, implementation positions) of a solution.

        Parameters
        ----------
        x : np.ndarray
            A point of the model.

        Returns
        -------
        nodes : np.ndarray
            int64: the nodes computed, in order.
        impls : np.ndarray
            int64: each computation's implementation, as an index among its node's.
        """
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
        """The schedule of a solution: its compute sequence, each value freed after its last use.

        Parameters
        ----------
        x : np.ndarray
            A point of the model.

        Returns
        -------
        Schedule
        """
        nodes, impls = self.sequence(x)
        return place_frees(self.st.graph, nodes, impls, drop_unused=False)

    def duration(self, x: np.ndarray) -> Number:
        """Duration of the decoded schedule, in the graph's units.

        Parameters
        ----------
        x : np.ndarray
            A point of the model.

        Returns
        -------
        Number
        """
        nodes, impls = self.sequence(x)
        graph = self.st.graph
        return graph.op_duration[graph.op_start[nodes] + impls].sum().item()

    def encode(self, nodes: np.ndarray, impls: np.ndarray) -> np.ndarray | None:
        """The model's point for a compute sequence of MONeT's shape, or None if it has another shape.

        The sequence must compute every forward node once in file order, then
        the backward nodes in file order, each after forward recomputations
        (sorted here into file order). Recomputations that nothing reads are
        dropped, as the model forbids them.

        Parameters
        ----------
        nodes : np.ndarray
            The nodes computed, in order.
        impls : np.ndarray
            Each computation's implementation, as an index among its node's.

        Returns
        -------
        np.ndarray or None
            A value per column (for the least peak, the budget column at the least the point needs);
            None for a sequence of another shape, or one that holds a value where the model has no column.
        """
        st = self.st
        stages = self._read_sequence(nodes, impls)
        if stages is None:
            return None
        R, op, bop = stages
        S = self._minimal_storage(R, op, bop)
        if any((R[t] | S[t])[st.last < t].any() for t in range(1, st.K + 1)):
            return None  # held or recomputed in a stage where the model has no column for it
        x = np.zeros(self.model.num_cols)
        self._put_choices(x, R, S, op, bop)
        self._put_local_memory(x, R, S, op)
        self._put_running_totals(x)
        if self.budget_col is not None:
            # The least budget the point needs: the largest excess of a memory row (the rows with -B).
            memory_rows = self.model.A[:, self.budget_col].nonzero()[0]
            act = self.model.A[memory_rows] @ x
            x[self.budget_col] = max(0.0, float(np.max(act - self.model.row_upper[memory_rows], initial=0.0)))
        return x

    def _read_sequence(self, nodes: np.ndarray, impls: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """A sequence's stages: R[t,p] (p computed in stage t), the implementation op[t,p] of each
        computation and bop[t] of each backward node; None for a sequence of another shape."""
        st = self.st
        F, K = st.F, st.K
        if len(nodes) < F or nodes[:F].tolist() != st.fwd.tolist():
            return None
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
        return (R, op, bop) if t == K + 1 else None

    def _minimal_storage(self, R: np.ndarray, op: np.ndarray, bop: np.ndarray) -> np.ndarray:
        """Minimal storage, and no recomputation without a reader: s[t,p] = not r and (read or kept),
        the recomputations that nothing reads or keeps dropped from ``R`` (in place) until none is left.
        Returns S, by stage 0..K+1."""
        st = self.st
        F, K = st.F, st.K
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
                return S
            R[1:K + 1] &= ~idle

    def _put_choices(self, x: np.ndarray, R: np.ndarray, S: np.ndarray, op: np.ndarray, bop: np.ndarray) -> None:
        """s, r, the implementations chosen (delta, delta^) and the products sm, into ``x``."""
        pairs = np.arange(len(self.pair_t))
        x[self.s0 + pairs] = S[self.pair_t, self.pair_p]
        x[self.r0 + pairs] = R[self.pair_t, self.pair_p]
        for k, c0 in self.delta.items():
            t, p = int(self.pair_t[k]), int(self.pair_p[k])
            if R[t, p]:
                x[c0 + op[t, p]] = 1.0
        for p, c0 in self.delta0.items():
            x[c0 + op[0, p]] = 1.0
        for t, c0 in self.dhat.items():
            x[c0 + bop[t]] = 1.0
        for (t, p, im), col in self.sm.items():
            x[col] = float(im == bop[t] and S[t + 1, p])

    def _put_local_memory(self, x: np.ndarray, R: np.ndarray, S: np.ndarray, op: np.ndarray) -> None:
        """z by its chain, from the top of each range down: j held, read by the recomputation at k,
        and neither kept nor a dependency (eq. 12), or so further up the range."""
        st = self.st
        for t in range(st.K + 1):
            alive = st.alive(t)
            z = self.z_info[t]
            a = _at(self._a(t, alive), x, len(alive))[np.searchsorted(alive, z[:, 1])]
            for (col, j, k, nxt), a_j in zip(reversed(z.tolist()), reversed(a.tolist())):
                c = int(alive[k])
                need = 0.0
                if R[t, c] and j in st.op_inputs[c][op[t, c]]:
                    exists = 1.0 if t == 0 else float(S[t, j] or R[t, j])
                    need = exists - a_j
                x[col] = max(0.0, need, x[nxt] if nxt >= 0 else 0.0)

    def _put_running_totals(self, x: np.ndarray) -> None:
        """v by its rows, stage by stage, summed in the rows' order."""
        st = self.st
        for t in range(st.K + 1):
            alive = st.alive(t)
            v = self.v_cols[t]
            s = (_at(self._s(t, alive), x, len(alive)) * self.fmem[alive]).tolist()
            a = (_at(self._a(t, alive), x, len(alive)) * self.fmem[alive]).tolist()
            total = sum(s[1:])
            x[v[0]] = total
            for k in range(len(alive)):
                total += a[k]
                if k + 1 < len(alive):
                    total -= s[k + 1]
                x[v[k + 1]] = total


# ---------------------------------------------------------------------- the method


def monet_candidates(graph: Graph, st: Stages, budget: Number | None, deadline: Deadline, context: SolveContext,
                     stats: dict[str, Any] | None = None) -> list[tuple[str, Schedule, Number, Number]]:
    """A few MONeT-shaped schedules within ``budget``: (label, schedule, peak, duration), fastest first.

    Candidates: the plans of the fast heuristics whose schedules have
    MONeT's shape (chen, approximate kusumoto, fenghuang, greedy), with the
    recomputations the budget does not need undone (`remat_bench.toolkit.improve`),
    and keeping every forward value; each with the first implementations and
    with the fastest ones that fit (`remat_bench.toolkit.fastest_fit.fastest_fit`).
    They start the solver when `MonetModel.encode` accepts them, and are the
    answer when the time limit ends before the solver has one.

    Parameters
    ----------
    graph : Graph
    st : Stages
        The stages of ``graph``.
    budget : Number or None
        In the graph's memory units; None for ``min`` (every valid schedule is kept).
    deadline : Deadline
        The run's; each source gets a share of the time left.
    context : SolveContext
        The run's (its hints, runner and progress).
    stats : dict or None
        The run's stats: what each source gave is recorded under ``candidates``.

    Returns
    -------
    list of tuple of (str, Schedule, Number, Number)
        Fastest first (least peak first when ``budget`` is None).
    """
    from remat_bench.toolkit.fastest_fit import fastest_fit
    from remat_bench.toolkit.improve import drop_recomputations

    # The fast ones first. Each gets a share of the time left (unshared, approximate kusumoto alone
    # took most of a short limit on a deep transformer: docs/benchmarks.md, "Figures that used to live
    # in the code"); chen, the answer of last resort, gets at least a second. The shaved input
    # order recomputes only where memory peaks, before the backward node that needs the value.
    sources = [Source("chen", share=0.2, floor=1.0), Source("greedy", share=0.2),
               Source("kusumoto", {"variant": "approx"}, share=0.25), Source("fenghuang", share=0.25),
               Source("shaved", {"cap_s": 20.0})]
    sequences: list[tuple[str, np.ndarray]] = []
    for c in candidate_schedules(graph, budget, deadline, sources, context=context, stats=stats):
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
    then each backward node in file order, after forward recomputations at most once each.

    Parameters
    ----------
    st : Stages
    nodes : np.ndarray
        The nodes computed, in order.

    Returns
    -------
    bool
    """
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
    """The cheapest model point among the candidates the model accepts.

    Parameters
    ----------
    mm : MonetModel
    candidates : list of tuple of (str, Schedule, Number, Number)
        (label, schedule, peak, duration), as `monet_candidates` gives them.

    Returns
    -------
    x : np.ndarray or None
        The point; None when the model accepts no candidate.
    source : str or None
        Its candidate's label.
    """
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
             stats: dict[str, Any], termination: Termination | None = None) -> MethodResult:
    """The best candidate schedule when the solver had no time (or, ``termination``, stopped without a
    solution for that reason), or ``no_solution`` without one.

    Parameters
    ----------
    candidates : list of tuple of (str, Schedule, Number, Number)
        (label, schedule, peak, duration), best first (`monet_candidates`).
    why : str
        Why the solver gave nothing, the start of the result's message.
    deadline : Deadline
        The run's, whose elapsed time is the result's solve time.
    stats : dict
        The run's stats; ``returned`` names the candidate returned.
    termination : Termination or None
        Why the solver stopped; None: `cut_short`'s answer.

    Returns
    -------
    MethodResult
        ``feasible`` with the first candidate, or ``no_solution``.
    """
    termination = termination if termination is not None else cut_short()
    if not candidates:
        return MethodResult(SolutionStatus.NO_SOLUTION, solve_time_s=deadline.elapsed(), stats=stats,
                            termination=termination, message=f"{why}, and no heuristic schedule fits")
    name, schedule, _peak, duration = candidates[0]
    stats["returned"] = name
    return MethodResult(SolutionStatus.FEASIBLE, schedule, objective=duration, solve_time_s=deadline.elapsed(),
                        stats=stats, termination=termination, message=f"{why}; returning the {name} schedule")


class Monet(Method):
    name = "monet"
    search_space = "input-order stages with operator implementations (MONeT)"
    description = ("Shah et al. 2021 joint checkpointing and operator-implementation 0-1 program "
                   "(HiGHS, or any PuLP solver)")
    params = (
        *milp_setup.solver_params(),
        Param("warm_start", bool, True, "start from chen's plan or keeping everything, with the fastest "
              "implementations that fit, when the model accepts it"),
        KEEP_BEST,
    )
    requires = ("highspy", "pulp")
    needs_backward = True
    member = Membership(Role.EXACT, rank=3)

    @classmethod
    def member_skip(cls, graph: Graph, budget: Number | None, bounds: BoundSource) -> str | None:
        if not any(len(node.implementations) > 1 for node in graph.nodes):
            return "no node has operator implementations to choose from (checkmate covers the rest)"
        return None

    def solve(self, graph: Graph, budget: Number | None, time_limit: float | None,
              **params: Any) -> MethodResult:
        deadline = Deadline(time_limit)
        parse_backend(params["backend"])
        st = Stages.of(graph)
        stats: dict[str, Any] = check_fits(st, self.context.model_memory)
        if budget is None:
            return self._least_peak(st, deadline, params, stats)
        hints = self.context.hints
        # Candidates count as the run's progress only where it may answer with them (keep_best).
        held = self.context if params["keep_best"] else replace(self.context, progress=None)
        candidates = monet_candidates(graph, st, budget, deadline, held, stats) if params["warm_start"] else []
        result = self._solve(st, budget, deadline, params, stats, candidates=candidates)
        if not params["keep_best"]:
            return result
        # Never slower than a candidate: MONeT-shaped ones (with their fastest implementations) and
        # every schedule offered, shaped or not.
        pool = [Candidate(*c) for c in candidates] + offered_candidates(graph, budget, hints)
        return best_of(graph, budget, result, pool)

    def _run(self, mm: MonetModel, deadline: Deadline, params: dict[str, Any], start: np.ndarray | None) -> Any:
        return milp_setup.solve(mm.model, params, deadline.remaining(), start, keep_incumbents=False,
                                on_incumbent=incumbent_reporter(self.context.report, mm.decode, mm.dur_scale,
                                                                mm.offset))

    def _solve(self, st: Stages, budget: Number, deadline: Deadline, params: dict[str, Any],
               stats: dict[str, Any], candidates: list | None = None, mm: MonetModel | None = None,
               start: np.ndarray | None = None, start_from: str | None = None) -> MethodResult:
        if candidates is None:
            no_hints = replace(self.context, hints=[])
            candidates = monet_candidates(st.graph, st, budget, deadline, no_hints, stats) if params["warm_start"] \
                else []
        if mm is None:
            try:
                mm = MonetModel(st, budget, deadline)
            except OutOfTime as exc:
                return fallback(candidates, str(exc), deadline, stats)
        stats.update(model_stats(mm))
        if mm.violated:
            return MethodResult(SolutionStatus.INFEASIBLE, solve_time_s=deadline.elapsed(), stats=stats,
                                termination=Termination.PROVEN, message=(
                f"no MONeT schedule fits the budget: {mm.violated[0]} needs more than {memory_text(budget, st.graph)} "
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
        if (answer := milp_setup.unsolved(sol, lower, stats, deadline, "MONeT schedule")) is not None:
            return answer
        assert sol.x is not None
        schedule = mm.decode(sol.x)
        sim = simulate(graph, schedule)
        objective = mm.duration(sol.x)
        stats["recomputations"] = sim.recomputations
        stats["implementations_changed"] = int(np.count_nonzero(schedule.impls[schedule.kinds == COMPUTE]))
        if not sim.valid or (budget is not None and sim.peak > budget):
            # The model counts every value the decoded schedule holds: a mismatch is a bug here.
            why = sim.violation if not sim.valid else (
                f"peak {memory_text(sim.peak, graph)} above the budget {memory_text(budget or 0, graph)}")
            return MethodResult(SolutionStatus.NO_SOLUTION, solve_time_s=deadline.elapsed(), stats=stats,
                                termination=Termination.ERROR,
                                message=f"the decoded MONeT schedule does not match its model: {why}")
        optimal = sol.solution_status is SolutionStatus.OPTIMAL
        if optimal and lower is not None:
            lower = min(lower, objective)
        return MethodResult(SolutionStatus.OPTIMAL if optimal else SolutionStatus.FEASIBLE, schedule,
                            objective=objective, lower_bound=lower, solve_time_s=deadline.elapsed(), stats=stats,
                            termination=sol.termination)

    def _least_peak(self, st: Stages, deadline: Deadline, params: dict[str, Any],
                    stats: dict[str, Any]) -> MethodResult:
        """``budget=min``: the least peak over MONeT's space, then the least duration at that peak."""
        graph = st.graph
        no_hints = replace(self.context, hints=[])
        candidates = monet_candidates(graph, st, None, deadline, no_hints, stats) if params["warm_start"] else []
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
            infeasible = sol.solution_status is SolutionStatus.INFEASIBLE
            if not infeasible and candidates:
                return fallback(candidates, f"no solution while minimising the peak ({sol.message})", deadline,
                                stats, sol.termination)
            return MethodResult(SolutionStatus.INFEASIBLE if infeasible else SolutionStatus.NO_SOLUTION,
                                solve_time_s=deadline.elapsed(), stats=stats, termination=sol.termination,
                                message=f"no MONeT schedule found while minimising the peak ({sol.message})")
        phase1 = mm.decode(sol.x)
        peak = simulate(graph, phase1).peak
        stats["least_peak"] = peak
        stats["least_peak_proven"] = sol.solution_status is SolutionStatus.OPTIMAL
        # Phase 2 at that peak, from phase 1's schedule (the answer, where phase 2 gives none).
        phase1_answer = MethodResult(SolutionStatus.FEASIBLE, phase1, objective=mm.duration(sol.x),
                                     solve_time_s=deadline.elapsed(), stats=stats, termination=sol.termination)
        nodes, impls = mm.sequence(sol.x)
        try:
            mm2 = MonetModel(st, peak, deadline)
        except OutOfTime as exc:
            phase1_answer.message = f"phase 2: {exc}; returning the least-peak solution"
            phase1_answer.termination = cut_short()
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
            phase1_answer.termination = result.termination
            return phase1_answer
        if result.solution_status is SolutionStatus.OPTIMAL and not stats["least_peak_proven"]:
            # Its duration is proven at a peak that is not: the search as a whole stopped where phase 1 did.
            result.solution_status, result.termination = SolutionStatus.FEASIBLE, sol.termination
        return result
