"""The Checkmate MILP (Jain et al., MLSys 2020): its variables R, S, U, FREE over input-order
stages, built once for a graph and budget, with the maps that encode schedules into it and decode
its solutions. `checkmate` solves it as a MILP, `checkmate-lp` its LP relaxation with rounding;
the formulation and what this implementation changes are in `remat_bench.methods.checkmate`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from remat_bench.core.graph import Graph, Number
from remat_bench.core.schedule import COMPUTE, Schedule, ScheduleBuilder
from remat_bench.methods.base import (
    Deadline,
    MethodResult,
    SolutionStatus,
    cut_short,
)
from remat_bench.toolkit.milp import (
    ModelBuilder,
    SparseModel,
    memory_scale,
    refuse_too_large,
)


def _tri(t: np.ndarray, i: np.ndarray) -> np.ndarray:
    """Index of (t, i), i <= t, in a lower-triangular block (R and U)."""
    return t * (t + 1) // 2 + i


def _stri(t: np.ndarray, i: np.ndarray) -> np.ndarray:
    """Index of (t, i), i < t, in a strictly lower-triangular block (S)."""
    return t * (t - 1) // 2 + i


def estimate_size(n: int, edges: int, consumers_total: int) -> tuple[int, int, int]:
    """(columns, rows, nonzeros) of the Checkmate model, before building it.

    Parameters
    ----------
    n : int
        Nodes (and stages).
    edges : int
        Edges of the graph.
    consumers_total : int
        The consumers of every node, summed: the FREE rows' length grows with their mean.

    Returns
    -------
    tuple of (int, int, int)
        Estimates of the model's columns, rows and nonzeros.
    """
    tri = n * (n + 1) // 2
    free = edges * n // 2 + edges  # sum over edges (i,k) of n - k, about half n per edge
    cols = 2 * tri + tri - n + free
    rows = 2 * tri + edges * n // 2 + 2 * free + tri
    nnz = 3 * tri + 3 * edges * n // 2 + 2 * free * (3 + max(1, consumers_total // max(n, 1))) + 3 * tri
    return cols, rows, nnz


def check_fits(n: int, edges: int, what: str, cap: int | None = None) -> dict[str, Any]:
    """Refuse a model that would not fit in memory, naming the estimate.

    Parameters
    ----------
    n : int
        Nodes of the graph.
    edges : int
        Edges of the graph.
    what : str
        The model's name in the error ("Checkmate", "Checkmate LP").
    cap : int or None
        The most memory the run lets a model take, in bytes (None: the machine's limit alone).

    Returns
    -------
    dict
        The estimate for a run's stats: ``est_columns``, ``est_rows``, ``est_nonzeros`` and ``est_bytes``.

    Raises
    ------
    ModelTooLargeError
        The model would need more than 60% of the memory available now, or more than ``cap``.
    """
    cols, rows, nnz = estimate_size(n, edges, edges)
    # numpy COO blocks, the CSR copy, and HiGHS's own row- and column-wise copies.
    need = nnz * 60 + cols * 80 + rows * 40
    refuse_too_large(need, f"the {what} model of this graph ({n} nodes, {edges} edges) would have about "
                           f"{cols:,} variables and {nnz:,} nonzeros",
                     "; use a method that scales (moccasin, twremat, greedy)", cap)
    return {"est_columns": cols, "est_rows": rows, "est_nonzeros": nnz, "est_bytes": need}


@dataclass(frozen=True)
class _Columns:
    """Where the variables sit: the first column of R, S, U and FREE, and the (stage, edge) of each FREE."""

    n: int
    edges: np.ndarray  # (E, 2): (i, k) per edge
    free_t: np.ndarray
    free_e: np.ndarray
    r0: int
    s0: int
    u0: int
    f0: int

    def r(self, t: Any, i: Any) -> Any:
        return self.r0 + _tri(t, i)

    def s(self, t: Any, i: Any) -> Any:
        return self.s0 + _stri(t, i)

    def u(self, t: Any, i: Any) -> Any:
        return self.u0 + _tri(t, i)


def _add_variables(b: ModelBuilder, graph: Graph, cap: float) -> _Columns:
    """R[t,i] and U[t,i] for i <= t, S[t,i] for i < t, FREE[t,(i,k)] for each edge (i,k) and t >= k
    (Jain et al. section 4). R[t,t] = 1 and U <= budget are bounds; costs are set by `_set_objective`."""
    n = graph.n
    edges = np.array([(u, v) for v in range(n) for u in graph.inputs[v]], dtype=np.int64).reshape(-1, 2)
    tri = n * (n + 1) // 2
    tt, ii = np.tril_indices(n)  # all (t, i) with i <= t, in _tri order
    r0 = b.num_cols
    b.add_vars(tri, lower=(tt == ii).astype(np.float64), upper=1.0)
    s0 = b.num_cols
    b.add_vars(n * (n - 1) // 2, lower=0.0, upper=1.0)
    u0 = b.num_cols
    b.add_vars(tri, lower=0.0, upper=cap, integer=False)
    counts = n - edges[:, 1]
    free_e = np.repeat(np.arange(len(edges)), counts)
    offsets = np.arange(len(free_e)) - np.repeat(np.cumsum(counts) - counts, counts)
    free_t = edges[free_e, 1] + offsets
    f0 = b.num_cols
    b.add_vars(len(free_e), lower=0.0, upper=1.0)
    return _Columns(n, edges, free_t, free_e, r0, s0, u0, f0)


def _add_1b(b: ModelBuilder, c: _Columns) -> None:
    """(1b) a value is resident only if it was resident or computed in the stage before:
    S[t+1,i] - S[t,i] - R[t,i] <= 0 for i < t <= n-2."""
    st, si = np.tril_indices(c.n, -1)
    inner = st <= c.n - 2
    t, i = st[inner], si[inner]
    k = np.arange(len(t))
    b.add_rows(np.concatenate([k, k, k]), np.concatenate([c.s(t + 1, i), c.s(t, i), c.r(t, i)]),
               np.concatenate([np.ones(len(k)), -np.ones(len(k)), -np.ones(len(k))]), -np.inf, 0.0, count=len(k))


def _add_1c(b: ModelBuilder, c: _Columns) -> None:
    """(1c) a computation reads resident inputs: R[t,v] - R[t,u] - S[t,u] <= 0 for each edge (u, v), t >= v."""
    u, v, t = c.edges[c.free_e, 0], c.edges[c.free_e, 1], c.free_t
    k = np.arange(len(t))
    b.add_rows(np.concatenate([k, k, k]), np.concatenate([c.r(t, v), c.r(t, u), c.s(t, u)]),
               np.concatenate([np.ones(len(k)), -np.ones(len(k)), -np.ones(len(k))]), -np.inf, 0.0, count=len(k))


def _add_tightening(b: ModelBuilder, c: _Columns, graph: Graph) -> None:
    """What this implementation adds (`remat_bench.methods.checkmate`): R + S <= 1, a value held
    or recomputed only to be read or kept, and the outputs resident to the end."""
    n = c.n
    st, si = np.tril_indices(n, -1)
    k = np.arange(len(st))
    # R[t,i] + S[t,i] <= 1 for i < t.
    b.add_rows(np.concatenate([k, k]), np.concatenate([c.r(st, si), c.s(st, si)]),
               np.ones(2 * len(k)), -np.inf, 1.0, count=len(k))

    # A value held or recomputed in stage t is read in stage t or held into t+1:
    # R[t,i] + S[t,i] - S[t+1,i] - sum_{(i,j), j <= t} R[t,j] <= 0 for i < t. Dropping
    # a value nobody reads only lowers memory, so no optimum is cut off; the LP bound
    # tightens and the symmetric "compute, then drop unused" solutions go.
    pu, pv, pt = c.edges[c.free_e, 0], c.edges[c.free_e, 1], c.free_t
    inner_rows = st <= n - 2
    e_rows = _stri(pt, pu)  # (stage t, input u) of every (edge, stage >= head) pair
    out_const = np.where(inner_rows, 0.0, graph.is_output[si].astype(np.float64))
    b.add_rows(np.concatenate([k, k, k[inner_rows], e_rows]),
               np.concatenate([c.r(st, si), c.s(st, si), c.s(st[inner_rows] + 1, si[inner_rows]), c.r(pt, pv)]),
               np.concatenate([np.ones(2 * len(k)), -np.ones(int(inner_rows.sum())), -np.ones(len(pt))]),
               -np.inf, out_const, count=len(k))

    # Outputs before the last node stay resident: S[n-1,o] + R[n-1,o] >= 1.
    outs = np.array([o for o in graph.output_indices if o < n - 1], dtype=np.int64)
    if len(outs):
        k = np.arange(len(outs))
        last = np.full(len(outs), n - 1)
        b.add_rows(np.concatenate([k, k]), np.concatenate([c.s(last, outs), c.r(last, outs)]),
                   np.ones(2 * len(k)), 1.0, np.inf, count=len(k))


def _add_free_linearisation(b: ModelBuilder, c: _Columns, graph: Graph) -> None:
    """FREE[t,(i,k)] = R[t,k] (1 - S[t+1,i]) prod_{j in users(i), k < j <= t} (1 - R[t,j]), linearised
    (section 4) with the hazard count h = (1 - R[t,k]) + S[t+1,i] + sum_j R[t,j]:
    1 - FREE <= h and h_max (1 - FREE) >= h. One row of each per FREE column."""
    n, edges = c.n, c.edges
    # Later users j of i (k < j <= t) enter each (t, e) row with R[t,j].
    pair_e, pair_j = [], []
    for e, (i, kk) in enumerate(edges.tolist()):
        for j in graph.consumers[i]:
            if j > kk:
                pair_e.append(e)
                pair_j.append(j)
    pair_e_arr = np.asarray(pair_e, dtype=np.int64)
    pair_j_arr = np.asarray(pair_j, dtype=np.int64)
    # Row of (t, e) = position of the FREE column (first column of edge e is at stage k).
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
    const = np.where(inner, 0.0, graph.is_output[fi].astype(np.float64))  # S at virtual stage n
    # (e1) FREE - R[t,k] + S[t+1,i] + sum R[t,j] >= 0 (constant S moved to the bound).
    rr = [rows_f, rows_f, rows_f[inner], trip_row]
    cc = [c.f0 + rows_f, c.r(free_t, fk), c.s(free_t[inner] + 1, fi[inner]), trip_col]
    vv = [np.ones(len(rows_f)), -np.ones(len(rows_f)), np.ones(int(inner.sum())), np.ones(len(trip_row))]
    b.add_rows(np.concatenate(rr), np.concatenate(cc), np.concatenate(vv), -const, np.inf, count=len(rows_f))
    # (e2) -h_max FREE + R[t,k] - S[t+1,i] - sum R[t,j] >= 1 - h_max (+ constant S).
    vv = [-h_max, np.ones(len(rows_f)), -np.ones(int(inner.sum())), -np.ones(len(trip_row))]
    b.add_rows(np.concatenate(rr), np.concatenate(cc), np.concatenate(vv), 1.0 - h_max + const, np.inf,
               count=len(rows_f))


def _add_memory(b: ModelBuilder, c: _Columns, mem: np.ndarray, fixed: float) -> None:
    """U, the memory right after each computation (section 4), with the fixed memory:
    U[t,0] = fixed + sum_i mem_i S[t,i] + mem_0 R[t,0];
    U[t,k] = U[t,k-1] + mem_k R[t,k] - sum_{(i,k-1)} mem_i FREE[t,(i,k-1)]."""
    n = c.n
    tt, ii = np.tril_indices(n)
    st, si = np.tril_indices(n, -1)
    t_all = np.arange(n)
    zero = np.zeros(n, dtype=np.int64)
    k = np.arange(n)
    b.add_rows(np.concatenate([k, k, st]), np.concatenate([c.u(t_all, zero), c.r(t_all, zero), c.s(st, si)]),
               np.concatenate([np.ones(n), -np.full(n, mem[0]), -mem[si]]), fixed, fixed, count=n)
    # U[t,k] - U[t,k-1] - mem_k R[t,k] + sum_{(i,k-1)} mem_i FREE[t,(i,k-1)] = 0, 1 <= k <= t.
    mt, mk = tt[ii >= 1], ii[ii >= 1]
    k = np.arange(len(mt))
    row_of = np.full((n, n), -1, dtype=np.int64)  # (t, k) -> local row, for the FREE terms
    row_of[mt, mk] = k
    fi, fk, free_t = c.edges[c.free_e, 0], c.edges[c.free_e, 1], c.free_t
    has = fk + 1 <= free_t
    fr = row_of[free_t[has], fk[has] + 1]
    b.add_rows(np.concatenate([k, k, k, fr]),
               np.concatenate([c.u(mt, mk), c.u(mt, mk - 1), c.r(mt, mk), c.f0 + np.flatnonzero(has)]),
               np.concatenate([np.ones(len(k)), -np.ones(len(k)), -mem[mk], mem[fi[has]]]), 0.0, 0.0, count=len(k))


def _add_budget(b: ModelBuilder, c: _Columns, ws: np.ndarray, cap: float) -> None:
    """U[t,k] + ws_k R[t,k] <= budget where ws_k > 0 (section 4; U <= budget is U's bound)."""
    tt, ii = np.tril_indices(c.n)
    wm = ws[ii] > 0
    if wm.any():
        k = np.arange(int(wm.sum()))
        b.add_rows(np.concatenate([k, k]), np.concatenate([c.u(tt[wm], ii[wm]), c.r(tt[wm], ii[wm])]),
                   np.concatenate([np.ones(len(k)), ws[ii[wm]]]), -np.inf, cap, count=len(k))


def _set_objective(model: SparseModel, c: _Columns, graph: Graph) -> float:
    """Minimise sum_{t,i} R[t,i] duration_i (section 4), durations divided by their mean; returns that mean."""
    dur = np.asarray(graph.duration, dtype=np.float64)
    # Costs of order one: with durations divided by their total, the costs are so small that
    # HiGHS's dual tolerances let the LP stop above its true optimum (measured on fcn8).
    positive = dur[dur > 0]
    dur_scale = float(positive.mean()) if len(positive) else 1.0
    tt, ii = np.tril_indices(c.n)
    model.cost[c.r(tt, ii)] = dur[ii] / dur_scale
    return dur_scale


@dataclass
class CheckmateModel:
    """The Checkmate MILP of one graph and budget, with the maps to decode its solutions."""

    graph: Graph
    model: SparseModel
    n: int
    edges: np.ndarray  # (E, 2): (i, k) per edge
    free_t: np.ndarray  # stage of each FREE column
    free_e: np.ndarray  # edge of each FREE column
    r0: int
    s0: int
    u0: int
    f0: int
    mem_scale: int
    dur_scale: float
    build_time_s: float

    # ------------------------------------------------------------------ build

    @classmethod
    def build(cls, graph: Graph, budget: Number) -> CheckmateModel:
        """The model of ``graph`` within ``budget``: variables, constraints family by family, objective.

        Parameters
        ----------
        graph : Graph
        budget : Number
            The peak allowed, in memory units (rounded down to whole units of the memory's gcd).

        Returns
        -------
        CheckmateModel
        """
        start = time.perf_counter()
        # Memory in units of its gcd, the budget rounded down to whole units: the same feasible set in
        # smaller numbers.
        scale = memory_scale(graph)
        mem = np.asarray(graph.memory, dtype=np.float64) / scale
        ws = np.asarray(graph.workspace, dtype=np.float64) / scale
        fixed = float(graph.fixed_memory) / scale
        cap = math.floor(budget / scale) if scale > 1 else float(budget)
        b = ModelBuilder()
        c = _add_variables(b, graph, cap)
        _add_1b(b, c)
        _add_1c(b, c)
        _add_tightening(b, c, graph)
        _add_free_linearisation(b, c, graph)
        _add_memory(b, c, mem, fixed)
        _add_budget(b, c, ws, cap)
        model = b.build()
        dur_scale = _set_objective(model, c, graph)
        return cls(graph, model, c.n, c.edges, c.free_t, c.free_e, c.r0, c.s0, c.u0, c.f0, scale, dur_scale,
                   time.perf_counter() - start)

    # ------------------------------------------------------------------ decode / encode

    def split(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Rounded (R, S, FREE) as dense n x n matrices and a FREE vector.

        Parameters
        ----------
        x : np.ndarray
            A point of the model (a solution, or a relaxation's values).

        Returns
        -------
        tuple of (np.ndarray, np.ndarray, np.ndarray)
            R (n x n, bool), S ((n + 1) x n, bool: its last row keeps the outputs past the last stage), and
            FREE (bool, one per FREE column).
        """
        n = self.n
        tt, ii = np.tril_indices(n)
        R = np.zeros((n, n), dtype=bool)
        R[tt, ii] = np.round(x[self.r0:self.r0 + len(tt)]) > 0.5
        st, si = np.tril_indices(n, -1)
        S = np.zeros((n + 1, n), dtype=bool)
        S[st, si] = np.round(x[self.s0:self.s0 + len(st)]) > 0.5
        S[n, list(self.graph.output_indices)] = True
        free = np.round(x[self.f0:self.f0 + len(self.free_t)]) > 0.5
        return R, S, free

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
        R, _, _ = self.split(x)
        dur = self.graph.duration
        return (dur[np.nonzero(R)[1]]).sum().item()

    def decode(self, x: np.ndarray) -> Schedule:
        """Steps from (R, S, FREE): stage by stage, frees where FREE says, drops at stage ends.

        Parameters
        ----------
        x : np.ndarray
            A point of the model, rounded here (`split`).

        Returns
        -------
        Schedule
        """
        R, S, free = self.split(x)
        n = self.n
        frees_after: dict[tuple[int, int], list[int]] = {}
        for c in np.flatnonzero(free).tolist():
            t, e = int(self.free_t[c]), int(self.free_e[c])
            frees_after.setdefault((t, int(self.edges[e, 1])), []).append(int(self.edges[e, 0]))
        out = ScheduleBuilder()
        resident = np.zeros(n, dtype=bool)
        for t in range(n):
            for i in np.flatnonzero(R[t, : t + 1]).tolist():
                if resident[i]:
                    continue  # cannot happen with R + S <= 1; numerics aside
                out.compute(i)
                resident[i] = True
                for u in frees_after.get((t, i), ()):
                    if resident[u]:
                        out.free(u)
                        resident[u] = False
            for v in np.flatnonzero(resident & ~S[t + 1]).tolist():
                out.free(v)
                resident[v] = False
        return out.build()

    def encode(self, schedule: Schedule) -> np.ndarray | None:
        """The model's point for a schedule in the staged space, or None if it is not in it.

        Parameters
        ----------
        schedule : Schedule
            A schedule of the model's graph, to start the solver from (a warm start).

        Returns
        -------
        np.ndarray or None
            Values for every column (R, S, FREE and U); None when the schedule leaves a node uncomputed,
            computes nodes for the first time out of input order, or recomputes in a stage a node that comes
            after the stage's own.
        """
        n, graph = self.n, self.graph
        computes = schedule.nodes[schedule.kinds == COMPUTE]
        seen = np.zeros(n, dtype=bool)
        first = np.full(n, -1, dtype=np.int64)
        for p, v in enumerate(computes.tolist()):
            if not seen[v]:
                seen[v] = True
                first[v] = p
        if not seen.all() or np.any(np.diff(first) < 0):
            return None  # first computations out of input order: outside the staged space
        stage = np.searchsorted(first, np.arange(len(computes)), side="left")
        if stage.max() >= n:
            return None
        R = np.zeros((n, n), dtype=bool)
        R[stage, computes] = True
        if np.any(np.triu(R, 1)):
            return None
        # Minimal S: keep i into stage t when a consumer reads it there (without recomputing
        # it) or it must be kept further; outputs are kept past the last stage. Then drop
        # recomputations nothing reads or keeps (the model forbids them), until stable.
        while True:
            S = np.zeros((n + 1, n), dtype=bool)
            S[n] = graph.is_output
            used = np.zeros((n, n), dtype=bool)  # used[t, i]: some consumer of i computed in stage t
            for k in range(n):
                for i in graph.inputs[k]:
                    used[R[:, k], i] = True
            for t in range(n - 1, 0, -1):
                S[t, :t] = ~R[t, :t] & (used[t, :t] | S[t + 1, :t])
            idle = np.tril(R, -1) & ~used & ~S[1:]
            if not idle.any():
                break
            R &= ~idle
        x = np.zeros(self.model.num_cols)
        tt, ii = np.tril_indices(n)
        x[self.r0:self.r0 + len(tt)] = R[tt, ii]
        st, si = np.tril_indices(n, -1)
        x[self.s0:self.s0 + len(st)] = S[st, si]
        # FREE by its definition, then U by its recursion.
        fi, fk = self.edges[self.free_e, 0], self.edges[self.free_e, 1]
        ft = self.free_t
        later = np.zeros(len(ft), dtype=bool)
        consumers = graph.consumers
        for c in range(len(ft)):
            i, k, tc = fi[c], fk[c], ft[c]
            later[c] = any(k < j <= tc and R[tc, j] for j in consumers[i])
        free = R[ft, fk] & ~S[ft + 1, fi] & ~later
        x[self.f0:self.f0 + len(ft)] = free
        scale = self.mem_scale
        mem = np.asarray(graph.memory, dtype=np.float64) / scale
        U = np.zeros((n, n))
        freed_after = np.zeros((n, n))  # memory freed right after node k in stage t
        np.add.at(freed_after, (ft[free], fk[free]), mem[fi[free]])
        for s in range(n):
            level = float(graph.fixed_memory) / scale + mem[:s] @ S[s, :s] + mem[0] * R[s, 0]
            U[s, 0] = level
            for k in range(1, s + 1):
                level = level + mem[k] * R[s, k] - freed_after[s, k - 1]
                U[s, k] = level
        x[self.u0:self.u0 + len(tt)] = U[tt, ii]
        return x


# The time building the model takes per column, measured (docs/benchmarks.md, "Figures that used to
# live in the code"): a deadline too short to build the model is refused before building it.
BUILD_SECONDS_PER_COLUMN = 3e-6


def too_short(estimate: dict[str, Any], deadline: Deadline) -> MethodResult | None:
    """A no_solution answer when the time limit cannot even cover building the model.

    Parameters
    ----------
    estimate : dict
        `check_fits`'s estimate (``est_columns`` is read).
    deadline : Deadline
        The run's deadline.

    Returns
    -------
    MethodResult or None
        The answer to return at once; None when there is no time limit, or time enough to build.
    """
    remaining = deadline.remaining()
    build = estimate["est_columns"] * BUILD_SECONDS_PER_COLUMN
    if remaining is None or build < remaining:
        return None
    # The time limit stops it before it starts.
    return MethodResult(SolutionStatus.NO_SOLUTION, solve_time_s=deadline.elapsed(), stats=estimate,
                        termination=cut_short(), message=(
        f"the time limit ({remaining:.1f} s left) is too short to build the model of about "
        f"{estimate['est_columns']:,} variables (about {build:.1f} s); give more time"))


