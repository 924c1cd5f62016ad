"""checkmate-offload: Checkmate's MILP with a third way to hold a value, a copy to host memory and back.

Checkmate (Jain et al., MLSys 2020; `remat_bench.methods.checkmate`) decides over input-order stages which
values to keep (S) and which to compute again (R). POET (Patil et al., ICML 2022) and the ILP of
Rockmate/OffMate add paging: a value may leave the device for host memory after a read and come back
before the next. Stage t ends with the first computation of node t; to Checkmate's R[t,i], S[t,i],
U[t,k] and FREE[t,(i,k)] (`remat_bench.methods.checkmate_model`, whose variables, (1c) and budget rows
it shares) this model adds, with p a position in stage t (-1 its start, k right after computing k):

- O[t,i,p]: i is offloaded in stage t at position p, where p is i (just computed), a reader of i
  (its last read in the stage), or -1 (held into the stage and not read in it);
- H[t,i] (continuous): i has a host copy entering stage t;
- L[t,i]: i is reloaded at the start of stage t, before its computations, to be read from stage t+1 on.

Constraints (writing O[t,i] for sum_p O[t,i,p]):

- S[t+1,i] + O[t,i] <= S[t,i] + R[t,i] + L[t,i] (kept or offloaded only from the device), with S at a
  virtual stage n equal to 1 on the outputs; R[t,i] + S[t,i] + L[t,i] <= 1;
- O[t,i,-1] <= S[t,i], O[t,i,i] <= R[t,i], O[t,i,k] <= R[t,k]; R[t,k] + sum_{p < k} O[t,i,p] <= 1 for
  each reader k of i (nothing reads i in its stage after its copy out);
- H[t+1,i] <= H[t,i] + O[t,i], L[t,i] <= H[t,i] (a reload reads a copy made in an earlier stage);
- memory: U[t,0] = fixed + sum_i mem_i (S[t,i] + L[t,i]) + mem_0 R[t,0] and Checkmate's recursion
  for U[t,k]; a reload holds its memory from its stage's start, and an offloaded value is not freed
  in its stage (FREE's hazard count gains O[t,i] beside S[t+1,i]): its memory counts to the stage's end;
- the copy windows, with c(i) = latency + mem_i / bandwidth of each direction
  (`remat_bench.core.graph.Link.copy_time`) and d_k the durations:
  out, for every position p: Z[t,p] = sum_{i, p' >= p} c_out(i) O[t,i,p'] - sum_{k > p} d_k R[t,k] <= 0
  (a recursion over p); in: sum_i c_in(i) L[t,i] <= sum_k d_k R[t,k];
- Checkmate's tightening with the new choices: a value held or recomputed in a stage is read, kept or
  offloaded there; a reloaded value is kept (L[t,i] <= S[t+1,i]).

Objective: sum_{t,i} d_i R[t,i], the computations' time; the copies are hidden by the windows.

Lowering (`OffloadModel.decode`), stage by stage: the reloads L[t,.] and the offloads at position -1,
then each computation followed by the frees FREE names and the offloads at its position, then frees of
what is neither kept nor offloaded. The simulator scores the steps (docs/design.md section 3, "Offload").

The windows stand in for the copy engines' queues, and they are an approximation in one direction only:
every copy must end inside the stage that issued it, and a value comes back one whole stage before it is
read, so the model leaves the link idle where a schedule could still use it. Within that, the lowered
schedule does what the model says: by induction over the stages, every copy issued in a stage ends by
its end (the reloads start together when the stage starts; a copy out issued at p starts no earlier
than p's computation ends, and one engine copying in issue order ends its last copy by the largest,
over p, of p's end plus the copies issued at p or later, which Z <= 0 keeps within the stage), so no
computation waits, no copy outlasts the last computation, a value offloaded holds memory at most to its
stage's end and a reload from its issue. The simulated duration is then the objective and the peak at
most the model's U, up to the floating-point rounding of the copy times and HiGHS's feasibility
tolerance; the simulator's number is the one reported.

Solving. First the model without recomputation (R[t,i] = 0 for i < t), with up to half the time: every
point of it computes each node once, the least any point does, so the first point found is optimal; it
is a question of placing copies, which HiGHS answers far sooner than the whole model. Where it has none,
the whole model, from the best candidate schedule it accepts (checkmate's warm start: the candidates copy
nothing, so O = L = H = 0 and R, S, FREE and U are Checkmate's encoding); the answer is never slower than
a candidate (``keep_best``).

What this leaves out: operator implementations (each node's first, as `checkmate`), host memory limits,
and a copy that spans stages. ``budget=min`` bisects on the budget (`least_peak_by_bisection`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from remat_bench.core.cleanup import place_frees
from remat_bench.core.graph import Graph, Number
from remat_bench.core.schedule import COMPUTE, OFFLOAD, RELOAD, Schedule, ScheduleBuilder
from remat_bench.methods import milp_setup
from remat_bench.methods.base import (
    Deadline,
    Method,
    MethodResult,
    Param,
    SolutionStatus,
    SolveContext,
    Termination,
    cut_short,
)
from remat_bench.methods.candidates import KEEP_BEST, Candidate, Source, best_of, candidate_schedules, mark_used
from remat_bench.methods.checkmate_model import (
    CheckmateModel,
    _add_1c,
    _add_budget,
    _add_variables,
    _Columns,
    estimate_size,
    too_short,
)
from remat_bench.toolkit.least_peak import least_peak_by_bisection
from remat_bench.toolkit.milp import (
    MilpSolution,
    ModelBuilder,
    SparseModel,
    incumbent_reporter,
    memory_scale,
    model_stats,
    parse_backend,
    refuse_too_large,
)

START = -1  # the position of an offload issued at its stage's start


def _stri(t: Any, i: Any) -> Any:
    """Index of (t, i), i < t, in a strictly lower-triangular block (S, L and H)."""
    return t * (t - 1) // 2 + i


def offload_slots(graph: Graph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every (t, i, p) with an O column: i offloaded in stage t at position p, where the copy can fit.

    A copy out issued at p must end by the stage's end, after at most every node p < k <= t computed: a
    slot whose copy takes longer than those durations is always 0, and has no column.

    Parameters
    ----------
    graph : Graph
        With a ``transfer``.

    Returns
    -------
    t, i, p : np.ndarray
        int64, one entry per slot, sorted by (t, i, p): p is `START` (t > i), i itself, or a reader
        k <= t of i.
    """
    assert graph.transfer is not None
    n = graph.n
    copy = [graph.transfer.device_to_host.copy_time(m) for m in graph.memory.tolist()]
    upto = np.concatenate([[0.0], np.cumsum(np.asarray(graph.duration, dtype=np.float64))])

    def fits(t: int, i: int, p: int) -> bool:
        window = upto[t + 1] - upto[p + 1]  # every node p < k <= t
        return copy[i] <= window * (1 + 1e-9)

    ts, is_, ps = [], [], []
    for i in range(n):
        positions = [i, *graph.consumers[i]]
        for t in range(i, n):
            for p in ([START] if t > i else []) + [q for q in positions if q <= t]:
                if fits(t, i, p):
                    ts.append(t)
                    is_.append(i)
                    ps.append(p)
    t_arr = np.asarray(ts, dtype=np.int64)
    i_arr = np.asarray(is_, dtype=np.int64)
    p_arr = np.asarray(ps, dtype=np.int64)
    order = np.lexsort((p_arr, i_arr, t_arr))
    return t_arr[order], i_arr[order], p_arr[order]


def estimate(graph: Graph) -> dict[str, Any]:
    """The model's size before building it: Checkmate's (`estimate_size`) and the offload columns and rows.

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    dict
        ``est_columns``, ``est_rows``, ``est_nonzeros`` and ``est_bytes`` (numpy blocks, the CSR copy and
        HiGHS's own copies, as `remat_bench.methods.checkmate_model.check_fits` counts them).
    """
    n, edges = graph.n, graph.num_edges
    cols, rows, nnz = estimate_size(n, edges, edges)
    consumers_stages = sum(n - k for k in range(n) for _ in graph.inputs[k])
    slots = n * (n - 1) // 2 + n * (n + 1) // 2 + consumers_stages
    stri = n * (n - 1) // 2
    z = n * (n + 3) // 2
    cols += slots + 2 * stri + z
    # Per slot: its position row, its Z term, its Osum in 3 row families and about one "no later reader"
    # row; per (t, i): the L, H and keep rows.
    rows += slots + 4 * stri + z + n
    nnz += slots * 7 + consumers_stages * 2 + 12 * stri + 3 * z
    need = nnz * 60 + cols * 80 + rows * 40
    return {"est_columns": cols, "est_rows": rows, "est_nonzeros": nnz, "est_bytes": need}


def check_fits(graph: Graph, cap: int | None = None) -> dict[str, Any]:
    """Refuse a model that would not fit in memory, naming the estimate (`estimate`).

    Parameters
    ----------
    graph : Graph
    cap : int or None
        The most memory the run lets a model take, in bytes (None: the machine's limit alone).

    Returns
    -------
    dict
        The estimate, for the run's stats.

    Raises
    ------
    ModelTooLargeError
        The model would need more than 60% of the memory available now, or more than ``cap``.
    """
    est = estimate(graph)
    refuse_too_large(est["est_bytes"], f"the checkmate-offload model of this graph ({graph.n} nodes, "
                                       f"{graph.num_edges} edges) would have about {est['est_columns']:,} "
                                       f"variables and {est['est_nonzeros']:,} nonzeros",
                     "; use a method that scales (dtr, greedy)", cap)
    return est


class _Rows:
    """COO triplets of one block of rows, gathered before `ModelBuilder.add_rows`."""

    def __init__(self) -> None:
        self.rows: list[np.ndarray] = []
        self.cols: list[np.ndarray] = []
        self.vals: list[np.ndarray] = []

    def add(self, rows: Any, cols: Any, vals: Any) -> None:
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        self.rows.append(rows)
        self.cols.append(np.asarray(cols, dtype=np.int64).reshape(-1))
        self.vals.append(np.broadcast_to(np.asarray(vals, dtype=np.float64), rows.shape).copy())

    def flush(self, b: ModelBuilder, lower: Any, upper: Any, count: int) -> None:
        if not count:
            return
        b.add_rows(np.concatenate(self.rows), np.concatenate(self.cols), np.concatenate(self.vals),
                   lower, upper, count=count)


@dataclass(frozen=True)
class _Layout:
    """Where the variables sit: Checkmate's (`_Columns`), then O (one per slot of `offload_slots`), L and H
    (strictly lower-triangular, as S) and Z (t + 2 per stage t: positions -1..t)."""

    c: _Columns
    graph: Graph
    slot_t: np.ndarray
    slot_i: np.ndarray
    slot_p: np.ndarray
    o0: int
    l0: int
    h0: int
    z0: int

    @property
    def n(self) -> int:
        return self.c.n

    def l(self, t: Any, i: Any) -> Any:  # noqa: E743 (the paper's letter)
        return self.l0 + _stri(t, i)

    def h(self, t: Any, i: Any) -> Any:
        return self.h0 + _stri(t, i)

    def z(self, t: Any, p: Any) -> Any:
        return self.z0 + t * (t + 3) // 2 + p + 1

    def osum(self, rows_of_ti: np.ndarray, coef: float, out: _Rows) -> None:
        """Add ``coef`` O[t,i,p] for every slot to the row ``rows_of_ti[t, i]`` (skipped where it is -1)."""
        r = rows_of_ti[self.slot_t, self.slot_i]
        keep = r >= 0
        out.add(r[keep], self.o0 + np.flatnonzero(keep), coef)


def _add_offload_variables(b: ModelBuilder, graph: Graph, cap: float) -> _Layout:
    """Checkmate's R, S, U and FREE (`_add_variables`), then O and L (0/1), H in [0, 1] and Z <= 0."""
    n = graph.n
    c = _add_variables(b, graph, cap)
    slot_t, slot_i, slot_p = offload_slots(graph)
    stri = n * (n - 1) // 2
    o0 = b.num_cols
    b.add_vars(len(slot_t), 0.0, 1.0)
    l0 = b.num_cols
    # A reload at stage t's start must end by its end: L[t,i] = 0 where i's copy outlasts every node <= t.
    assert graph.transfer is not None
    copy = np.array([graph.transfer.host_to_device.copy_time(m) for m in graph.memory.tolist()])
    upto = np.cumsum(np.asarray(graph.duration, dtype=np.float64))
    st, si = np.tril_indices(n, -1)
    b.add_vars(stri, 0.0, (copy[si] <= upto[st] * (1 + 1e-9)).astype(np.float64))
    h0 = b.num_cols
    b.add_vars(stri, 0.0, 1.0, integer=False)
    z0 = b.num_cols
    b.add_vars(n * (n + 3) // 2, -np.inf, 0.0, integer=False)
    return _Layout(c, graph, slot_t, slot_i, slot_p, o0, l0, h0, z0)


def _add_keep(b: ModelBuilder, lay: _Layout) -> None:
    """S[t+1,i] + O[t,i] - S[t,i] - R[t,i] - L[t,i] <= 0 for i <= t (S[n,.]: the outputs), and
    R[t,i] + S[t,i] + L[t,i] <= 1 for i < t."""
    n, c = lay.n, lay.c
    tt, ii = np.tril_indices(n)
    k = np.arange(len(tt))
    row_of = np.full((n, n), -1, dtype=np.int64)
    row_of[tt, ii] = k
    out = _Rows()
    inner = tt < n - 1
    out.add(k[inner], c.s(tt[inner] + 1, ii[inner]), 1.0)
    lay.osum(row_of, 1.0, out)
    held = ii < tt
    out.add(k[held], c.s(tt[held], ii[held]), -1.0)
    out.add(k[held], lay.l(tt[held], ii[held]), -1.0)
    out.add(k, c.r(tt, ii), -1.0)
    upper = np.where(inner, 0.0, -lay.graph.is_output[ii].astype(np.float64))
    out.flush(b, -np.inf, upper, len(k))

    st, si = np.tril_indices(n, -1)
    k = np.arange(len(st))
    b.add_rows(np.concatenate([k, k, k]), np.concatenate([c.r(st, si), c.s(st, si), lay.l(st, si)]),
               np.ones(3 * len(k)), -np.inf, 1.0, count=len(k))


def _add_positions(b: ModelBuilder, lay: _Layout) -> None:
    """O[t,i,-1] <= S[t,i], O[t,i,i] <= R[t,i], O[t,i,k] <= R[t,k]; and for each reader k <= t of i,
    R[t,k] + sum_{p < k} O[t,i,p] <= 1 (one row per FREE column, whose (t, edge) it shares)."""
    n, c = lay.n, lay.c
    t, i, p = lay.slot_t, lay.slot_i, lay.slot_p
    k = np.arange(len(t))
    at_start = p == START
    on = np.where(at_start, c.s(t, i), c.r(t, np.where(at_start, i, p)))
    b.add_rows(np.concatenate([k, k]), np.concatenate([lay.o0 + k, on]),
               np.concatenate([np.ones(len(k)), -np.ones(len(k))]), -np.inf, 0.0, count=len(k))

    edge_of = {(u, v): e for e, (u, v) in enumerate(c.edges.tolist())}
    counts = n - c.edges[:, 1]
    first_col = np.cumsum(counts) - counts
    rows, cols = [], []
    consumers = lay.graph.consumers
    for s, (ts, is_, ps) in enumerate(zip(t.tolist(), i.tolist(), p.tolist(), strict=True)):
        for kk in consumers[is_]:
            if ps < kk <= ts:
                rows.append(first_col[edge_of[(is_, kk)]] + ts - kk)
                cols.append(lay.o0 + s)
    free_rows = np.arange(len(c.free_t))
    b.add_rows(np.concatenate([free_rows, np.asarray(rows, dtype=np.int64)]),
               np.concatenate([c.r(c.free_t, c.edges[c.free_e, 1]), np.asarray(cols, dtype=np.int64)]),
               np.ones(len(free_rows) + len(rows)), -np.inf, 1.0, count=len(free_rows))


def _add_host(b: ModelBuilder, lay: _Layout) -> None:
    """H[t,i] - H[t-1,i] - O[t-1,i] <= 0 and L[t,i] - H[t,i] <= 0 for i < t."""
    n = lay.n
    st, si = np.tril_indices(n, -1)
    k = np.arange(len(st))
    row_of = np.full((n, n), -1, dtype=np.int64)  # by (t-1, i): the stage whose offloads the row reads
    row_of[st - 1, si] = k
    out = _Rows()
    out.add(k, lay.h(st, si), 1.0)
    before = si < st - 1
    out.add(k[before], lay.h(st[before] - 1, si[before]), -1.0)
    lay.osum(row_of, -1.0, out)
    out.flush(b, -np.inf, 0.0, len(k))
    b.add_rows(np.concatenate([k, k]), np.concatenate([lay.l(st, si), lay.h(st, si)]),
               np.concatenate([np.ones(len(k)), -np.ones(len(k))]), -np.inf, 0.0, count=len(k))


def _add_tightening(b: ModelBuilder, lay: _Layout) -> None:
    """R[t,i] + S[t,i] - S[t+1,i] - O[t,i] - sum_{(i,j), j <= t} R[t,j] <= 0 and L[t,i] - S[t+1,i] <= 0
    for i < t (S[n,.]: the outputs). Dropping a value nobody reads, keeps or offloads, and a reload nobody
    keeps, only lowers memory, time and the copies: no optimum is cut off."""
    n, c = lay.n, lay.c
    st, si = np.tril_indices(n, -1)
    k = np.arange(len(st))
    row_of = np.full((n, n), -1, dtype=np.int64)
    row_of[st, si] = k
    inner = st < n - 1
    out_const = np.where(inner, 0.0, lay.graph.is_output[si].astype(np.float64))
    out = _Rows()
    out.add(k, c.r(st, si), 1.0)
    out.add(k, c.s(st, si), 1.0)
    out.add(k[inner], c.s(st[inner] + 1, si[inner]), -1.0)
    lay.osum(row_of, -1.0, out)
    pu, pv, pt = c.edges[c.free_e, 0], c.edges[c.free_e, 1], c.free_t
    out.add(_stri(pt, pu), c.r(pt, pv), -1.0)
    out.flush(b, -np.inf, out_const, len(k))
    b.add_rows(np.concatenate([k, k[inner]]), np.concatenate([lay.l(st, si), c.s(st[inner] + 1, si[inner])]),
               np.concatenate([np.ones(len(k)), -np.ones(int(inner.sum()))]), -np.inf, out_const, count=len(k))


def _add_free_linearisation(b: ModelBuilder, lay: _Layout) -> None:
    """FREE[t,(i,k)] = R[t,k] (1 - S[t+1,i] - O[t,i]) prod_{j in users(i), k < j <= t} (1 - R[t,j]), with the
    hazard count h = (1 - R[t,k]) + S[t+1,i] + O[t,i] + sum_j R[t,j] (Checkmate's with O[t,i], which
    keeps h_max since S[t+1,i] + O[t,i] <= 1): 1 - FREE <= h and h_max (1 - FREE) >= h."""
    n, c, graph = lay.n, lay.c, lay.graph
    edges = c.edges
    pair_e, pair_j = [], []
    for e, (i, kk) in enumerate(edges.tolist()):
        for j in graph.consumers[i]:
            if j > kk:
                pair_e.append(e)
                pair_j.append(j)
    pair_e_arr = np.asarray(pair_e, dtype=np.int64)
    pair_j_arr = np.asarray(pair_j, dtype=np.int64)
    counts = n - edges[:, 1]
    first_col = np.cumsum(counts) - counts
    tcounts = n - pair_j_arr
    trip_pair = np.repeat(np.arange(len(pair_e_arr)), tcounts)
    trip_t = pair_j_arr[trip_pair] + (np.arange(len(trip_pair)) - np.repeat(np.cumsum(tcounts) - tcounts, tcounts))
    trip_e = pair_e_arr[trip_pair]
    trip_row = first_col[trip_e] + (trip_t - edges[trip_e, 1])
    trip_col = c.r(trip_t, pair_j_arr[trip_pair])
    later = np.bincount(trip_row, minlength=len(c.free_e)).astype(np.float64)
    h_max = 2.0 + later
    fi, fk, free_t = edges[c.free_e, 0], edges[c.free_e, 1], c.free_t
    rows_f = np.arange(len(c.free_e))
    inner = free_t < n - 1
    const = np.where(inner, 0.0, graph.is_output[fi].astype(np.float64))
    # O[t,i] enters every FREE row of (t, (i, k)).
    rows_by_ti: dict[tuple[int, int], list[int]] = {}
    for r, key in enumerate(zip(free_t.tolist(), fi.tolist(), strict=True)):
        rows_by_ti.setdefault(key, []).append(r)
    slot_rows, slot_cols = [], []
    for s, key in enumerate(zip(lay.slot_t.tolist(), lay.slot_i.tolist(), strict=True)):
        for r in rows_by_ti.get(key, ()):
            slot_rows.append(r)
            slot_cols.append(lay.o0 + s)
    sr = np.asarray(slot_rows, dtype=np.int64)
    sc = np.asarray(slot_cols, dtype=np.int64)
    rr = [rows_f, rows_f, rows_f[inner], trip_row, sr]
    cc = [c.f0 + rows_f, c.r(free_t, fk), c.s(free_t[inner] + 1, fi[inner]), trip_col, sc]
    # (e1) FREE - R[t,k] + S[t+1,i] + O[t,i] + sum R[t,j] >= 0 (constant S moved to the bound).
    vv = [np.ones(len(rows_f)), -np.ones(len(rows_f)), np.ones(int(inner.sum())), np.ones(len(trip_row)),
          np.ones(len(sr))]
    b.add_rows(np.concatenate(rr), np.concatenate(cc), np.concatenate(vv), -const, np.inf, count=len(rows_f))
    # (e2) -h_max FREE + R[t,k] - S[t+1,i] - O[t,i] - sum R[t,j] >= 1 - h_max (+ constant S).
    vv = [-h_max, np.ones(len(rows_f)), -np.ones(int(inner.sum())), -np.ones(len(trip_row)), -np.ones(len(sr))]
    b.add_rows(np.concatenate(rr), np.concatenate(cc), np.concatenate(vv), 1.0 - h_max + const, np.inf,
               count=len(rows_f))


def _add_memory(b: ModelBuilder, lay: _Layout, mem: np.ndarray, fixed: float) -> None:
    """U[t,0] = fixed + sum_i mem_i (S[t,i] + L[t,i]) + mem_0 R[t,0];
    U[t,k] = U[t,k-1] + mem_k R[t,k] - sum_{(i,k-1)} mem_i FREE[t,(i,k-1)] (Checkmate's, with L)."""
    n, c = lay.n, lay.c
    tt, ii = np.tril_indices(n)
    st, si = np.tril_indices(n, -1)
    t_all = np.arange(n)
    zero = np.zeros(n, dtype=np.int64)
    k = np.arange(n)
    b.add_rows(np.concatenate([k, k, st, st]),
               np.concatenate([c.u(t_all, zero), c.r(t_all, zero), c.s(st, si), lay.l(st, si)]),
               np.concatenate([np.ones(n), -np.full(n, mem[0]), -mem[si], -mem[si]]), fixed, fixed, count=n)
    mt, mk = tt[ii >= 1], ii[ii >= 1]
    k = np.arange(len(mt))
    row_of = np.full((n, n), -1, dtype=np.int64)
    row_of[mt, mk] = k
    fi, fk, free_t = c.edges[c.free_e, 0], c.edges[c.free_e, 1], c.free_t
    has = fk + 1 <= free_t
    fr = row_of[free_t[has], fk[has] + 1]
    b.add_rows(np.concatenate([k, k, k, fr]),
               np.concatenate([c.u(mt, mk), c.u(mt, mk - 1), c.r(mt, mk), c.f0 + np.flatnonzero(has)]),
               np.concatenate([np.ones(len(k)), -np.ones(len(k)), -mem[mk], mem[fi[has]]]), 0.0, 0.0, count=len(k))


def _add_windows(b: ModelBuilder, lay: _Layout, d: np.ndarray, c_out: np.ndarray, c_in: np.ndarray) -> None:
    """Out: Z[t,t] = sum_i c_out(i) O[t,i,t]; Z[t,p] = Z[t,p+1] + sum_i c_out(i) O[t,i,p] - d_{p+1} R[t,p+1]
    for p = -1..t-1; Z <= 0 (its bound). In: sum_i c_in(i) L[t,i] - sum_k d_k R[t,k] <= 0."""
    n, c = lay.n, lay.c
    zt = np.repeat(np.arange(n), np.arange(n) + 2)
    zp = np.concatenate([np.arange(-1, t + 1) for t in range(n)])
    k = np.arange(len(zt))  # one row per Z, in Z's own order
    out = _Rows()
    out.add(k, lay.z(zt, zp), 1.0)
    inner = zp < zt
    out.add(k[inner], lay.z(zt[inner], zp[inner] + 1), -1.0)
    out.add(k[inner], c.r(zt[inner], zp[inner] + 1), d[zp[inner] + 1])
    out.add(lay.z(lay.slot_t, lay.slot_p) - lay.z0, lay.o0 + np.arange(len(lay.slot_t)), -c_out[lay.slot_i])
    out.flush(b, 0.0, 0.0, len(k))

    tt, ii = np.tril_indices(n)
    st, si = np.tril_indices(n, -1)
    b.add_rows(np.concatenate([st, tt]), np.concatenate([lay.l(st, si), c.r(tt, ii)]),
               np.concatenate([c_in[si], -d[ii]]), -np.inf, 0.0, count=n)


@dataclass
class OffloadModel:
    """The checkmate-offload MILP of one graph and budget, with the map to decode its solutions."""

    graph: Graph
    model: SparseModel
    layout: _Layout
    mem_scale: int
    dur_scale: float
    build_time_s: float

    @property
    def n(self) -> int:
        return self.graph.n

    @classmethod
    def build(cls, graph: Graph, budget: Number) -> OffloadModel:
        """The model of ``graph`` (which has a ``transfer``) within ``budget``: variables, rows, objective.

        Parameters
        ----------
        graph : Graph
        budget : Number
            The peak allowed, in memory units (rounded down to whole units of the memory's gcd).

        Returns
        -------
        OffloadModel
        """
        assert graph.transfer is not None
        start = time.perf_counter()
        n = graph.n
        # Memory in units of its gcd and durations divided by their mean, as checkmate's
        # (`remat_bench.methods.checkmate_model`): the same feasible set in numbers of order one.
        scale = memory_scale(graph)
        mem = np.asarray(graph.memory, dtype=np.float64) / scale
        ws = np.asarray(graph.workspace, dtype=np.float64) / scale
        fixed = float(graph.fixed_memory) / scale
        cap = math.floor(budget / scale) if scale > 1 else float(budget)
        dur = np.asarray(graph.duration, dtype=np.float64)
        positive = dur[dur > 0]
        dur_scale = float(positive.mean()) if len(positive) else 1.0
        raw = graph.memory.tolist()
        c_out = np.array([graph.transfer.device_to_host.copy_time(m) for m in raw], dtype=np.float64) / dur_scale
        c_in = np.array([graph.transfer.host_to_device.copy_time(m) for m in raw], dtype=np.float64) / dur_scale

        b = ModelBuilder()
        lay = _add_offload_variables(b, graph, cap)
        _add_1c(b, lay.c)
        _add_keep(b, lay)
        _add_positions(b, lay)
        _add_host(b, lay)
        _add_tightening(b, lay)
        _add_free_linearisation(b, lay)
        _add_memory(b, lay, mem, fixed)
        _add_budget(b, lay.c, ws, cap)
        _add_windows(b, lay, dur / dur_scale, c_out, c_in)
        model = b.build()
        tt, ii = np.tril_indices(n)
        model.cost[lay.c.r(tt, ii)] = dur[ii] / dur_scale  # the computations' time
        return cls(graph, model, lay, scale, dur_scale, time.perf_counter() - start)

    # ------------------------------------------------------------------ decode

    def split(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Rounded R, S, L and the positions of the offloads.

        Parameters
        ----------
        x : np.ndarray
            A point of the model.

        Returns
        -------
        R : np.ndarray
            n x n bool.
        S : np.ndarray
            (n + 1) x n bool; its last row keeps the outputs past the last stage.
        L : np.ndarray
            n x n bool.
        offload_at : np.ndarray
            n x n int64: the position of i's offload in stage t, or -2 for none.
        """
        n, lay = self.n, self.layout
        tt, ii = np.tril_indices(n)
        R = np.zeros((n, n), dtype=bool)
        R[tt, ii] = np.round(x[lay.c.r0:lay.c.r0 + len(tt)]) > 0.5
        st, si = np.tril_indices(n, -1)
        S = np.zeros((n + 1, n), dtype=bool)
        S[st, si] = np.round(x[lay.c.s0:lay.c.s0 + len(st)]) > 0.5
        S[n, list(self.graph.output_indices)] = True
        L = np.zeros((n, n), dtype=bool)
        L[st, si] = np.round(x[lay.l0:lay.l0 + len(st)]) > 0.5
        offload_at = np.full((n, n), -2, dtype=np.int64)
        on = np.round(x[lay.o0:lay.o0 + len(lay.slot_t)]) > 0.5
        offload_at[lay.slot_t[on], lay.slot_i[on]] = lay.slot_p[on]
        return R, S, L, offload_at

    def objective(self, x: np.ndarray) -> Number:
        """The duration of the computations the rounded R of ``x`` makes.

        Parameters
        ----------
        x : np.ndarray
            A point of the model.

        Returns
        -------
        Number
            In the graph's duration units (not scaled as the model's objective is).
        """
        R = self.split(x)[0]
        return (self.graph.duration[np.nonzero(R)[1]]).sum().item()

    def decode(self, x: np.ndarray) -> Schedule:
        """The steps of a point, stage by stage (module docstring, "Lowering").

        Parameters
        ----------
        x : np.ndarray
            A point of the model, rounded here (`split`).

        Returns
        -------
        Schedule
        """
        R, S, L, offload_at = self.split(x)
        return lower(self.graph, R, S, L, offload_at)

    def without_recomputation(self) -> SparseModel:
        """The model with R[t,i] = 0 for i < t: every node computed once, in its own stage.

        Returns
        -------
        SparseModel
            A copy of the model whose off-diagonal R columns have upper bound 0; its every point has the
            objective sum_i d_i, the least of any point of the model.
        """
        tt, ii = np.tril_indices(self.n)
        upper = self.model.upper.copy()
        upper[self.layout.c.r(tt[tt != ii], ii[tt != ii])] = 0.0
        return replace(self.model, upper=upper)

    def encode(self, schedule: Schedule) -> np.ndarray | None:
        """The model's point for a schedule of Checkmate's staged space, which copies nothing.

        R, S, FREE and U sit where Checkmate's model has them, so its encoder fills them
        (`remat_bench.methods.checkmate_model.CheckmateModel.encode`); O, L and H are 0, and Z follows
        from its recursion.

        Parameters
        ----------
        schedule : Schedule
            A schedule of the model's graph (its compute steps are read), to start the solver from.

        Returns
        -------
        np.ndarray or None
            A value for every column; None when the schedule is not in the staged space.
        """
        lay = self.layout
        c = lay.c
        checkmate = CheckmateModel(self.graph, self.model, self.n, c.edges, c.free_t, c.free_e, c.r0, c.s0, c.u0,
                                   c.f0, self.mem_scale, self.dur_scale, 0.0)
        x = checkmate.encode(schedule)
        if x is None:
            return None
        R = self.split(x)[0]
        d = np.asarray(self.graph.duration, dtype=np.float64) / self.dur_scale
        # Z[t,p] = -sum_{p < k <= t} d_k R[t,k]: the computations after p, with no copy to hide.
        after = np.cumsum((R * d)[:, ::-1], axis=1)[:, ::-1]  # after[t, k] = sum_{k' >= k} d R[t, k']
        for t in range(self.n):
            p = np.arange(-1, t + 1)
            x[lay.z(t, p)] = -np.concatenate([after[t, p[:-1] + 1], [0.0]])
        return x


def lower(graph: Graph, R: np.ndarray, S: np.ndarray, L: np.ndarray, offload_at: np.ndarray) -> Schedule:
    """The steps of a staged plan with offloads (module docstring, "Lowering").

    Stage t: reload every i with L[t,i] and offload every i whose ``offload_at[t,i]`` is `START`; then for
    each k with R[t,k], in node order, compute k, free each input of k that k reads last in the stage and
    that is neither kept (S[t+1]) nor offloaded in the stage, and offload every i whose ``offload_at[t,i]``
    is k; at the stage's end free what is resident and not kept.

    Parameters
    ----------
    graph : Graph
    R : np.ndarray
        n x n bool: i computed in stage t.
    S : np.ndarray
        (n + 1) x n bool: i resident entering stage t (row n: resident at the end).
    L : np.ndarray
        n x n bool: i reloaded at the start of stage t.
    offload_at : np.ndarray
        n x n int64: the position of i's offload in stage t (`START`, or a node), -2 for none.

    Returns
    -------
    Schedule
    """
    n = graph.n
    out = ScheduleBuilder()
    resident = np.zeros(n, dtype=bool)
    for t in range(n):
        for i in np.flatnonzero(L[t]).tolist():
            if not resident[i]:
                out.reload(i)
                resident[i] = True
        offloaded = offload_at[t] >= START
        for i in np.flatnonzero(offload_at[t] == START).tolist():
            if resident[i]:
                out.offload(i)
                resident[i] = False
        computed = np.flatnonzero(R[t, : t + 1]).tolist()
        last_read: dict[int, int] = {}
        for k in computed:
            for u in graph.inputs[k]:
                last_read[u] = k
        for k in computed:
            if resident[k]:
                continue  # cannot happen with R + S + L <= 1; numerics aside
            out.compute(k)
            resident[k] = True
            for u in graph.inputs[k]:
                if last_read.get(u) == k and resident[u] and not S[t + 1, u] and not offloaded[u]:
                    out.free(u)
                    resident[u] = False
            for i in np.flatnonzero(offload_at[t] == k).tolist():
                if resident[i]:
                    out.offload(i)
                    resident[i] = False
        for v in np.flatnonzero(resident & ~S[t + 1]).tolist():
            out.free(v)
            resident[v] = False
    return out.build()


class CheckmateOffload(Method):
    name = "checkmate-offload"
    search_space = ("input-order stages, each value kept, computed again, or copied to the host after its last "
                    "read in a stage and back a stage before its next (copies within their stage)")
    description = "Checkmate's MILP with offload: keep, recompute or copy to the host and back (HiGHS, or PuLP)"
    params = (
        *milp_setup.solver_params(gap_note="overheads differ by less than that"),
        Param("warm_start", bool, True, "start from the best greedy/chen/kusumoto/shaved schedule the model "
              "accepts (and the caller's hints)"),
        Param("heuristic_effort", float, 0.3, "HiGHS mip_heuristic_effort (as checkmate's)", minimum=0, maximum=1),
        KEEP_BEST,
    )
    requires = ("highspy", "pulp")
    offloads = True

    @classmethod
    def input_order(cls, params: dict[str, Any]) -> str | None:
        return "kept"

    @classmethod
    def skip(cls, graph: Graph, budget: Number | None) -> str | None:
        if graph.transfer is None:
            return (f"method '{cls.name}' copies values to the host and back, and graph '{graph.name}' has no host "
                    "link; give it one (solve --link, or a graph with a 'transfer')")
        return super().skip(graph, budget)

    def solve(self, graph: Graph, budget: Number | None, time_limit: float | None,
              **params: Any) -> MethodResult:
        deadline = Deadline(time_limit)
        parse_backend(params["backend"])
        if graph.transfer is None:  # called directly, past `skip`
            return MethodResult(SolutionStatus.NO_SOLUTION, termination=Termination.NOT_APPLICABLE,
                                message=self.skip(graph, budget) or "")
        if budget is None:
            return least_peak_by_bisection(graph, lambda b, t: self.solve(graph, b, t, **params), deadline,
                                           peak_goal=self.context.peak_goal)
        stats = check_fits(graph, self.context.model_memory)
        if (short := too_short(stats, deadline)) is not None:
            return short
        om = OffloadModel.build(graph, budget)
        stats.update(model_stats(om))
        once = self._every_node_once(om, params, deadline, stats)
        if once is not None:
            return once
        start: np.ndarray | None = None
        pool: list[Candidate] = []
        if params["warm_start"] and not deadline.expired():
            start, source, pool = warm_start(om, budget, deadline, self.context, stats)
            mark_used(stats, source)
        if not params["keep_best"]:
            pool = []
        remaining = deadline.remaining()
        if remaining is not None and remaining <= 0.05:
            sol = MilpSolution(SolutionStatus.FEASIBLE if start is not None else SolutionStatus.NO_SOLUTION,
                               cut_short(), x=start, message="the time limit ran out before the MILP could start")
            return best_of(graph, budget, offload_result(om, sol, stats, deadline), pool)
        options: dict[str, Any] | None = None
        if params["backend"] == "highs":
            options = {"mip_heuristic_effort": params["heuristic_effort"]}
            if self.context.gap:
                options["mip_abs_gap"] = self.context.gap / om.dur_scale
        sol = milp_setup.solve(om.model, params, remaining, start, keep_incumbents=False, options=options,
                               on_incumbent=incumbent_reporter(self.context.report, om.decode, om.dur_scale))
        return best_of(graph, budget, offload_result(om, sol, stats, deadline, self.context.gap), pool)


    def _every_node_once(self, om: OffloadModel, params: dict[str, Any], deadline: Deadline,
                         stats: dict[str, Any]) -> MethodResult | None:
        """The model without recomputation (R[t,i] = 0 for i < t), with up to half the time left: where it
        has a point, that point computes every node once, the least any point of the model does, so it is
        optimal; None where it has none (proven or not), and the whole model is solved."""
        remaining = deadline.remaining()
        share = None if remaining is None else remaining / 2
        if share is not None and share <= 0.05:
            return None
        sol = milp_setup.solve(om.without_recomputation(), params, share, None, keep_incumbents=False,
                               on_incumbent=incumbent_reporter(self.context.report, om.decode, om.dur_scale))
        stats["every_node_once"] = sol.message
        if sol.x is None:
            return None
        point = MilpSolution(SolutionStatus.OPTIMAL, Termination.PROVEN, x=sol.x, solve_time_s=sol.solve_time_s,
                             solver=sol.solver, message=f"{sol.message}, every node computed once", nodes=sol.nodes)
        return offload_result(om, point, stats, deadline)


def warm_start(om: OffloadModel, budget: Number, deadline: Deadline, context: SolveContext,
               stats: dict[str, Any]) -> tuple[np.ndarray | None, str | None, list[Candidate]]:
    """The cheapest candidate schedule the model accepts as a point, its source, and every candidate.

    The candidates are checkmate's (greedy, chen, shaved, kusumoto, knapsack and the caller's hints,
    `remat_bench.methods.candidates`): each compute order is moved into the staged space
    (`remat_bench.toolkit.improve.staged_repair`), rid of the recomputations the budget does not need,
    and encoded with nothing copied (`OffloadModel.encode`); a point the model refuses is skipped.

    Parameters
    ----------
    om : OffloadModel
    budget : Number
    deadline : Deadline
        The run's; the candidates take shares of the time left.
    context : SolveContext
        The run's (its hints, runner and progress).
    stats : dict
        The run's stats: the candidates are recorded there.

    Returns
    -------
    x : np.ndarray or None
    source : str or None
    pool : list of Candidate
        Every candidate within the budget.
    """
    from remat_bench.toolkit.improve import drop_recomputations, staged_repair

    graph = om.graph
    fast = [Source("greedy"), Source("chen"), Source("shaved"), Source("kusumoto", share=0.15),
            Source("knapsack", {"solver": "search"}, share=0.1)]
    pool = candidate_schedules(graph, budget, deadline, fast, context=context, stats=stats)
    best: tuple[float, np.ndarray, str] | None = None
    for c in pool:
        if deadline.expired():
            break
        computes = c.schedule.nodes[c.schedule.kinds == COMPUTE]
        repaired = staged_repair(graph, computes)
        nodes = drop_recomputations(graph, computes if repaired is None else repaired, budget, deadline)
        x = om.encode(place_frees(graph, nodes, np.zeros(len(nodes), dtype=np.int64), drop_unused=False))
        if x is None or om.model.violation(x) > 1e-6:
            continue
        cost = float(om.model.cost @ x)
        if best is None or cost < best[0]:
            best = (cost, x, c.source)
    if best is None:
        return None, None, pool
    return best[1], best[2], pool


def offload_result(om: OffloadModel, sol: MilpSolution, stats: dict[str, Any], deadline: Deadline,
                   gap: Number = 0) -> MethodResult:
    """Decode a MILP answer into a MethodResult: the solver's status and dual bound, the lowered schedule.

    Parameters
    ----------
    om : OffloadModel
        The model ``sol`` solved.
    sol : MilpSolution
        The solver's answer.
    stats : dict
        The run's stats: the solver, its status, time, nodes and gap are added.
    deadline : Deadline
        The run's, whose elapsed time is the result's solve time.
    gap : Number
        The gap the caller accepts, in duration units; 0 for none.

    Returns
    -------
    MethodResult
        Infeasible where the solver proved it, no solution without a point, else the lowered schedule
        with the dual bound (duration units) as its lower bound: optimal in the staged space where the
        bound closes.
    """
    stats.update({"solver": sol.solver, "solver_status": sol.message, "solve_time_s": round(sol.solve_time_s, 3),
                  "nodes": sol.nodes, "mip_gap": sol.gap})
    lower_bound = None if sol.dual_bound is None else sol.dual_bound * om.dur_scale
    space = "staged schedule with offload"
    if (answer := milp_setup.unsolved(sol, lower_bound, stats, deadline, space)) is not None:
        return answer
    assert sol.x is not None
    schedule = om.decode(sol.x)
    objective = om.objective(sol.x)
    closed = sol.solution_status is SolutionStatus.OPTIMAL and not (
        gap and lower_bound is not None and objective > lower_bound * (1 + 1e-9) + 1e-9)
    if closed:
        termination = Termination.PROVEN
        lower_bound = objective if lower_bound is None else min(lower_bound, objective)
    elif sol.solution_status is SolutionStatus.OPTIMAL:
        termination = Termination.CONVERGED  # within the gap the caller accepts
    else:
        termination = sol.termination if sol.termination is not Termination.PROVEN else Termination.CONVERGED
    stats["offloads"] = int((schedule.kinds == OFFLOAD).sum())
    stats["reloads"] = int((schedule.kinds == RELOAD).sum())
    return MethodResult(SolutionStatus.OPTIMAL if closed else SolutionStatus.FEASIBLE, schedule, objective=objective,
                        lower_bound=lower_bound, solve_time_s=deadline.elapsed(), stats=stats,
                        termination=termination)
