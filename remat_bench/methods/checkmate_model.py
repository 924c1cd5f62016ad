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

from remat_bench.core.errors import ModelTooLargeError
from remat_bench.core.graph import Graph, Number
from remat_bench.core.schedule import COMPUTE, Schedule, ScheduleBuilder
from remat_bench.methods.base import (
    Deadline,
    MethodResult,
    Status,
)
from remat_bench.toolkit.milp import (
    ModelBuilder,
    SparseModel,
    available_memory_bytes,
    memory_scale,
)


def _tri(t: np.ndarray, i: np.ndarray) -> np.ndarray:
    """Index of (t, i), i <= t, in a lower-triangular block (R and U)."""
    return t * (t + 1) // 2 + i


def _stri(t: np.ndarray, i: np.ndarray) -> np.ndarray:
    """Index of (t, i), i < t, in a strictly lower-triangular block (S)."""
    return t * (t - 1) // 2 + i


def estimate_size(n: int, edges: int, consumers_total: int) -> tuple[int, int, int]:
    """(columns, rows, nonzeros) of the Checkmate model, before building it."""
    tri = n * (n + 1) // 2
    free = edges * n // 2 + edges  # sum over edges (i,k) of n - k, about half n per edge
    cols = 2 * tri + tri - n + free
    rows = 2 * tri + edges * n // 2 + 2 * free + tri
    nnz = 3 * tri + 3 * edges * n // 2 + 2 * free * (3 + max(1, consumers_total // max(n, 1))) + 3 * tri
    return cols, rows, nnz


def check_fits(n: int, edges: int, what: str) -> dict[str, int]:
    """Refuse a model that would not fit in memory, naming the estimate."""
    cols, rows, nnz = estimate_size(n, edges, edges)
    # numpy COO blocks, the CSR copy, and HiGHS's own row- and column-wise copies.
    need = nnz * 60 + cols * 80 + rows * 40
    avail = available_memory_bytes()
    if need > 0.6 * avail:
        raise ModelTooLargeError(
            f"the {what} model of this graph ({n} nodes, {edges} edges) would have about {cols:,} "
            f"variables and {nnz:,} nonzeros, needing about {need / 2**30:.1f} GiB, more than the "
            f"{avail / 2**30:.1f} GiB available; use a method that scales (moccasin, twremat, greedy)"
        )
    return {"est_columns": cols, "est_rows": rows, "est_nonzeros": nnz, "est_bytes": need}


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
        start = time.perf_counter()
        n = graph.n
        scale = memory_scale(graph)
        mem = np.asarray(graph.memory, dtype=np.float64) / scale
        ws = np.asarray(graph.workspace, dtype=np.float64) / scale
        fixed = float(graph.fixed_memory) / scale
        cap = math.floor(budget / scale) if scale > 1 else float(budget)
        dur = np.asarray(graph.duration, dtype=np.float64)
        # Costs of order one: with durations divided by their total, the costs are so small that
        # HiGHS's dual tolerances let the LP stop above its true optimum (measured on fcn8).
        positive = dur[dur > 0]
        dur_scale = float(positive.mean()) if len(positive) else 1.0
        is_output = graph.is_output

        edges = np.array([(u, v) for v in range(n) for u in graph.inputs[v]], dtype=np.int64).reshape(-1, 2)
        E = len(edges)
        tri = n * (n + 1) // 2
        b = ModelBuilder()

        # Variables. R[t,t] = 1 by bounds.
        tt, ii = np.tril_indices(n)  # all (t, i) with i <= t, in _tri order
        r_lower = (tt == ii).astype(np.float64)
        r0 = b.num_cols
        b.add_vars(tri, lower=r_lower, upper=1.0, cost=dur[ii] / dur_scale)
        st, si = np.tril_indices(n, -1)  # (t, i) with i < t, in _stri order
        s0 = b.num_cols
        b.add_vars(len(st), lower=0.0, upper=1.0)
        u0 = b.num_cols
        b.add_vars(tri, lower=0.0, upper=cap, integer=False)
        # FREE[t, e] for every edge e = (i, k) and every stage t >= k.
        counts = n - edges[:, 1]
        free_e = np.repeat(np.arange(E), counts)
        offsets = np.arange(len(free_e)) - np.repeat(np.cumsum(counts) - counts, counts)
        free_t = edges[free_e, 1] + offsets
        f0 = b.num_cols
        b.add_vars(len(free_e), lower=0.0, upper=1.0)
        r_idx = lambda t, i: r0 + _tri(t, i)  # noqa: E731
        s_idx = lambda t, i: s0 + _stri(t, i)  # noqa: E731
        u_idx = lambda t, i: u0 + _tri(t, i)  # noqa: E731

        # (1b) S[t+1,i] - S[t,i] - R[t,i] <= 0 for i < t <= n-2.
        m = (st <= n - 2)
        t1, i1 = st[m], si[m]
        k = np.arange(len(t1))
        b.add_rows(np.concatenate([k, k, k]),
                   np.concatenate([s_idx(t1 + 1, i1), s_idx(t1, i1), r_idx(t1, i1)]),
                   np.concatenate([np.ones(len(k)), -np.ones(len(k)), -np.ones(len(k))]),
                   -np.inf, 0.0, count=len(k))

        # (1c) R[t,v] - R[t,u] - S[t,u] <= 0 for each edge (u, v) and t >= v.
        pu, pv, pt = edges[free_e, 0], edges[free_e, 1], free_t
        k = np.arange(len(pt))
        b.add_rows(np.concatenate([k, k, k]),
                   np.concatenate([r_idx(pt, pv), r_idx(pt, pu), s_idx(pt, pu)]),
                   np.concatenate([np.ones(len(k)), -np.ones(len(k)), -np.ones(len(k))]),
                   -np.inf, 0.0, count=len(k))

        # R[t,i] + S[t,i] <= 1 for i < t.
        k = np.arange(len(st))
        b.add_rows(np.concatenate([k, k]), np.concatenate([r_idx(st, si), s_idx(st, si)]),
                   np.ones(2 * len(k)), -np.inf, 1.0, count=len(k))

        # A value held or recomputed in stage t is read in stage t or held into t+1:
        # R[t,i] + S[t,i] - S[t+1,i] - sum_{(i,j), j <= t} R[t,j] <= 0 for i < t. Dropping
        # a value nobody reads only lowers memory, so no optimum is cut off; the LP bound
        # tightens and the symmetric "compute, then drop unused" solutions go.
        k = np.arange(len(st))
        inner_rows = st <= n - 2
        e_rows = _stri(pt, pu)  # (stage t, input u) of every (edge, stage >= head) pair
        out_const = np.where(inner_rows, 0.0, graph.is_output[si].astype(np.float64))
        b.add_rows(np.concatenate([k, k, k[inner_rows], e_rows]),
                   np.concatenate([r_idx(st, si), s_idx(st, si), s_idx(st[inner_rows] + 1, si[inner_rows]),
                                   r_idx(pt, pv)]),
                   np.concatenate([np.ones(2 * len(k)), -np.ones(int(inner_rows.sum())), -np.ones(len(pt))]),
                   -np.inf, out_const, count=len(k))

        # Outputs before the last node stay resident: S[n-1,o] + R[n-1,o] >= 1.
        outs = np.array([o for o in graph.output_indices if o < n - 1], dtype=np.int64)
        if len(outs):
            k = np.arange(len(outs))
            last = np.full(len(outs), n - 1)
            b.add_rows(np.concatenate([k, k]), np.concatenate([s_idx(last, outs), r_idx(last, outs)]),
                       np.ones(2 * len(k)), 1.0, np.inf, count=len(k))

        # FREE linearisation. Later users j of i (k < j <= t) enter each (t, e) row with R[t,j].
        users = graph.consumers
        pair_e, pair_j = [], []
        for e, (i, kk) in enumerate(edges.tolist()):
            for j in users[i]:
                if j > kk:
                    pair_e.append(e)
                    pair_j.append(j)
        pair_e_arr = np.asarray(pair_e, dtype=np.int64)
        pair_j_arr = np.asarray(pair_j, dtype=np.int64)
        # Row of (t, e) = position of the FREE column (first column of edge e is at stage k).
        first_col = np.cumsum(counts) - counts
        tcounts = n - pair_j_arr
        trip_pair = np.repeat(np.arange(len(pair_e_arr)), tcounts)
        trip_t = pair_j_arr[trip_pair] + (np.arange(len(trip_pair)) - np.repeat(np.cumsum(tcounts) - tcounts, tcounts))
        trip_e = pair_e_arr[trip_pair]
        trip_row = first_col[trip_e] + (trip_t - edges[trip_e, 1])
        trip_col = r_idx(trip_t, pair_j_arr[trip_pair])
        later = np.bincount(trip_row, minlength=len(free_e)).astype(np.float64)
        h_max = 2.0 + later
        fi, fk = edges[free_e, 0], edges[free_e, 1]
        rows_f = np.arange(len(free_e))
        inner = free_t < n - 1
        const = np.where(inner, 0.0, is_output[fi].astype(np.float64))  # S at virtual stage n
        # (e1) FREE - R[t,k] + S[t+1,i] + sum R[t,j] >= 0 (constant S moved to the bound).
        rr = [rows_f, rows_f, rows_f[inner], trip_row]
        cc = [f0 + rows_f, r_idx(free_t, fk), s_idx(free_t[inner] + 1, fi[inner]), trip_col]
        vv = [np.ones(len(rows_f)), -np.ones(len(rows_f)), np.ones(int(inner.sum())), np.ones(len(trip_row))]
        b.add_rows(np.concatenate(rr), np.concatenate(cc), np.concatenate(vv), -const, np.inf, count=len(rows_f))
        # (e2) -h_max FREE + R[t,k] - S[t+1,i] - sum R[t,j] >= 1 - h_max (+ constant S).
        vv = [-h_max, np.ones(len(rows_f)), -np.ones(int(inner.sum())), -np.ones(len(trip_row))]
        b.add_rows(np.concatenate(rr), np.concatenate(cc), np.concatenate(vv), 1.0 - h_max + const, np.inf,
                   count=len(rows_f))

        # Memory. U[t,0] - sum_i mem_i S[t,i] - mem_0 R[t,0] = fixed.
        t_all = np.arange(n)
        k = np.arange(n)
        b.add_rows(np.concatenate([k, k, st]),
                   np.concatenate([u_idx(t_all, np.zeros(n, dtype=np.int64)), r_idx(t_all, np.zeros(n, dtype=np.int64)),
                                   s_idx(st, si)]),
                   np.concatenate([np.ones(n), -np.full(n, mem[0]), -mem[si]]),
                   fixed, fixed, count=n)
        # U[t,k] - U[t,k-1] - mem_k R[t,k] + sum_{(i,k-1)} mem_i FREE[t,(i,k-1)] = 0, 1 <= k <= t.
        mt, mk = tt[ii >= 1], ii[ii >= 1]
        k = np.arange(len(mt))
        row_of = np.full((n, n), -1, dtype=np.int64)  # (t, k) -> local row, for the FREE terms
        row_of[mt, mk] = k
        has = fk + 1 <= free_t
        fr = row_of[free_t[has], fk[has] + 1]
        b.add_rows(np.concatenate([k, k, k, fr]),
                   np.concatenate([u_idx(mt, mk), u_idx(mt, mk - 1), r_idx(mt, mk), f0 + rows_f[has]]),
                   np.concatenate([np.ones(len(k)), -np.ones(len(k)), -mem[mk], mem[fi[has]]]),
                   0.0, 0.0, count=len(k))
        # Workspace: U[t,k] + ws_k R[t,k] <= budget where ws_k > 0.
        wm = ws[ii] > 0
        if wm.any():
            k = np.arange(int(wm.sum()))
            b.add_rows(np.concatenate([k, k]), np.concatenate([u_idx(tt[wm], ii[wm]), r_idx(tt[wm], ii[wm])]),
                       np.concatenate([np.ones(len(k)), ws[ii[wm]]]), -np.inf, cap, count=len(k))

        model = b.build()
        return cls(graph, model, n, edges, free_t, free_e, r0, s0, u0, f0, scale, dur_scale,
                   time.perf_counter() - start)

    # ------------------------------------------------------------------ decode / encode

    def split(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Rounded (R, S, FREE) as dense n x n matrices and a FREE vector."""
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
        R, _, _ = self.split(x)
        dur = self.graph.duration
        return (dur[np.nonzero(R)[1]]).sum().item()

    def decode(self, x: np.ndarray) -> Schedule:
        """Steps from (R, S, FREE): stage by stage, frees where FREE says, drops at stage ends."""
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
        """The model's point for a schedule in the staged space, or None if it is not in it."""
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
        t = self.free_t
        later = np.zeros(len(t), dtype=bool)
        consumers = graph.consumers
        for c in range(len(t)):
            i, k, tc = fi[c], fk[c], t[c]
            later[c] = any(k < j <= tc and R[tc, j] for j in consumers[i])
        free = R[t, fk] & ~S[t + 1, fi] & ~later
        x[self.f0:self.f0 + len(t)] = free
        scale = self.mem_scale
        mem = np.asarray(graph.memory, dtype=np.float64) / scale
        U = np.zeros((n, n))
        freed_after = np.zeros((n, n))  # memory freed right after node k in stage t
        np.add.at(freed_after, (t[free], fk[free]), mem[fi[free]])
        for s in range(n):
            level = float(graph.fixed_memory) / scale + mem[:s] @ S[s, :s] + mem[0] * R[s, 0]
            U[s, 0] = level
            for k in range(1, s + 1):
                level = level + mem[k] * R[s, k] - freed_after[s, k - 1]
                U[s, k] = level
        x[self.u0:self.u0 + len(tt)] = U[tt, ii]
        return x


# Measured: building the model takes about 3 microseconds per column (787,000 columns in 2.4 s).
BUILD_SECONDS_PER_COLUMN = 3e-6


def too_short(estimate: dict[str, Any], deadline: Deadline) -> MethodResult | None:
    """A no_solution answer when the time limit cannot even cover building the model."""
    remaining = deadline.remaining()
    build = estimate["est_columns"] * BUILD_SECONDS_PER_COLUMN
    if remaining is None or build < remaining:
        return None
    return MethodResult(Status.NO_SOLUTION, solve_time_s=deadline.elapsed(), stats=estimate, message=(
        f"the time limit ({remaining:.1f} s left) is too short to build the model of about "
        f"{estimate['est_columns']:,} variables (about {build:.1f} s); give more time"))


def model_stats(cm: CheckmateModel) -> dict[str, Any]:
    return {
        "variables": cm.model.num_cols,
        "integer_variables": int(cm.model.integer.sum()),
        "constraints": cm.model.num_rows,
        "nonzeros": int(cm.model.A.nnz),
        "build_time_s": round(cm.build_time_s, 3),
        "memory_scale": cm.mem_scale,
    }


