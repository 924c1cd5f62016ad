"""Checkmate: the optimal rematerialization MILP of Jain et al., MLSys 2020.

Stages t = 0..n-1 follow the input order; stage t ends with the first
computation of node t. Binary variables (Jain et al. section 4):

- R[t,i], i <= t: node i is computed in stage t (R[t,t] = 1, R[t,i] = 0 for i > t);
- S[t,i], i < t: i is resident entering stage t (S[0,.] = 0);
- FREE[t,(i,k)], for each edge (i,k) with k <= t: i is freed right after k is
  computed in stage t;
- U[t,k] (continuous): memory right after k is computed in stage t.

Constraints (numbers as in the paper's section 4 and appendix):

- (1b) S[t+1,i] <= S[t,i] + R[t,i];  (1c) R[t,v] <= R[t,u] + S[t,u] for each edge (u,v);
- FREE[t,(i,k)] = R[t,k] (1 - S[t+1,i]) prod_{j in users(i), k < j <= t} (1 - R[t,j]),
  linearised with the hazard count h = (1 - R[t,k]) + S[t+1,i] + sum_j R[t,j]:
  1 - FREE <= h and h_max (1 - FREE) >= h;
- U[t,0] = fixed + sum_i mem_i S[t,i] + mem_0 R[t,0];
  U[t,k] = U[t,k-1] + mem_k R[t,k] - sum_{(i,k-1)} mem_i FREE[t,(i,k-1)];
  U[t,k] + ws_k R[t,k] <= budget;
- minimise sum_{t,i} R[t,i] duration_i.

What this implementation adds: R[t,i] + S[t,i] <= 1 (recomputing a resident
value never helps; it removes symmetric solutions and a double count of its
memory); R[t,i] + S[t,i] <= S[t+1,i] + sum_{(i,j), j <= t} R[t,j] (a value is
held or recomputed only to be read or kept); outputs other than the last node stay resident to the end (S at a
virtual stage n is 1 for outputs); workspace and fixed memory in U, so that
the model's memory is the simulator's; memory divided by its gcd and the
budget rounded down in that unit, durations divided by their mean, so the
solver sees small numbers with the same feasible set. The model is built as
numpy COO blocks and handed to HiGHS whole (`remat_bench.toolkit.milp`); a warm start
comes from the best `chen`/`greedy` schedule that the model accepts.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import reduce
from typing import Any

import numpy as np

from remat_bench.core.errors import ModelTooLargeError
from remat_bench.core.graph import Graph, Number
from remat_bench.core.schedule import COMPUTE, Schedule, ScheduleBuilder
from remat_bench.core.simulate import clean_up_simulated, overhead_pct, place_frees, simulate
from remat_bench.methods.base import (
    Deadline,
    Method,
    MethodResult,
    Param,
    Status,
    least_peak_by_bisection,
)
from remat_bench.toolkit.milp import (
    ModelBuilder,
    SparseModel,
    available_memory_bytes,
    parse_backend,
    solve_milp,
)


def _tri(t: np.ndarray, i: np.ndarray) -> np.ndarray:
    """Index of (t, i), i <= t, in a lower-triangular block (R and U)."""
    return t * (t + 1) // 2 + i


def _stri(t: np.ndarray, i: np.ndarray) -> np.ndarray:
    """Index of (t, i), i < t, in a strictly lower-triangular block (S)."""
    return t * (t - 1) // 2 + i


def memory_scale(graph: Graph) -> int:
    """The gcd of every memory quantity (1 when any is fractional)."""
    values = [graph.memory, graph.op_workspace, np.asarray([graph.fixed_memory])]
    if any(v.dtype.kind == "f" for v in values):
        return 1
    ints = [int(x) for v in values for x in np.unique(v) if x]
    return reduce(math.gcd, ints, 0) or 1


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
        g = memory_scale(graph)
        mem = np.asarray(graph.memory, dtype=np.float64) / g
        ws = np.asarray(graph.workspace, dtype=np.float64) / g
        fixed = float(graph.fixed_memory) / g
        cap = math.floor(budget / g) if g > 1 else float(budget)
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
        return cls(graph, model, n, edges, free_t, free_e, r0, s0, u0, f0, g, dur_scale,
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
        g = self.mem_scale
        mem = np.asarray(graph.memory, dtype=np.float64) / g
        U = np.zeros((n, n))
        freed_after = np.zeros((n, n))  # memory freed right after node k in stage t
        np.add.at(freed_after, (t[free], fk[free]), mem[fi[free]])
        for s in range(n):
            level = float(graph.fixed_memory) / g + mem[:s] @ S[s, :s] + mem[0] * R[s, 0]
            U[s, 0] = level
            for k in range(1, s + 1):
                level = level + mem[k] * R[s, k] - freed_after[s, k - 1]
                U[s, k] = level
        x[self.u0:self.u0 + len(tt)] = U[tt, ii]
        return x


class Checkmate(Method):
    name = "checkmate"
    search_space = "input-order stages (Checkmate's frontier-advancing schedules)"
    description = "Jain et al. 2020 MILP over input-order stages (HiGHS, or any PuLP solver)"
    params = (
        Param("backend", str, "highs", "highs, or pulp:NAME for any PuLP solver (pulp:PULP_CBC_CMD, pulp:GUROBI_CMD)",
              check=parse_backend),
        Param("threads", int, 0, "solver threads (0: the solver's default)", minimum=0),
        Param("mip_gap", float, 0.0, "relative gap at which to stop (HiGHS's own default, 1e-4, "
              "stops 0.01% of the duration short of optimal: overheads differ by less than that)",
              minimum=0, maximum=1),
        Param("seed", int, 0, "solver random seed", minimum=0, maximum=2**31 - 1),
        Param("warm_start", bool, True, "start from the best chen/greedy schedule the model accepts"),
        Param("heuristic_effort", float, 0.3, "HiGHS mip_heuristic_effort (HiGHS default 0.05; 0.3 measured "
              "better: random_layered_n100 at 0.8 reached 2.58% in 80 s rather than staying at its 5.25% start)",
              minimum=0, maximum=1),
    )
    requires = ("highspy", "pulp")

    def solve(self, graph: Graph, budget: Number | None, time_limit: float | None,
              **params: Any) -> MethodResult:
        deadline = Deadline(time_limit)
        parse_backend(params["backend"])
        if budget is None:
            # The least peak of the staged space, by bisection on the budget, then the least duration there.
            return least_peak_by_bisection(
                graph, lambda b, t: self.solve(graph, b, t, **params), deadline)
        stats = check_fits(graph.n, graph.num_edges, "Checkmate")
        if (short := too_short(stats, deadline)) is not None:
            return short
        cm = CheckmateModel.build(graph, budget)
        stats.update(model_stats(cm))
        start, start_from = (None, None)
        if params["warm_start"] and not deadline.expired():
            start, start_from = warm_start(cm, graph, budget, deadline)
        stats["warm_start"] = start_from
        remaining = deadline.remaining()
        if remaining is not None and remaining <= 0.05:
            # No time left to solve: the warm start is the answer, if there is one.
            from remat_bench.toolkit.milp import MilpSolution

            sol = MilpSolution("feasible" if start is not None else "no_solution", x=start,
                               objective=None if start is None else float(cm.model.cost @ start),
                               message="the time limit ran out before the MILP could start")
            return milp_result(cm, sol, stats, deadline)
        sol = solve_milp(
            cm.model, backend=params["backend"], time_limit=remaining,
            threads=params["threads"] or None, mip_gap=params["mip_gap"],
            seed=params["seed"], start=start, keep_incumbents=True,
            options={"mip_heuristic_effort": params["heuristic_effort"]} if params["backend"] == "highs" else None,
        )
        return milp_result(cm, sol, stats, deadline)


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


def warm_start(cm: CheckmateModel, graph: Graph, budget: Number,
               deadline: Deadline) -> tuple[np.ndarray | None, str | None]:
    """The cheapest schedule the model accepts as a point: greedy, chen, peak shaving, LP rounding.

    The MILP's bottleneck is its first incumbent (measured: none in 300 s on
    random_layered_n100 at 0.8 without one). Greedy and chen are tried first;
    LP rounding (`checkmate_lp`), given at most a quarter of the time left
    and a minute, when neither is accepted.
    """
    from remat_bench.methods.checkmate_lp import lp_rounding
    from remat_bench.methods.chen import Chen
    from remat_bench.methods.greedy import Greedy
    from remat_bench.toolkit.improve import drop_recomputations, shaved_order

    best: tuple[float, np.ndarray, str] | None = None

    def consider(schedule: Schedule, label: str) -> None:
        nonlocal best
        if deadline.expired():
            return
        # Compute order only: the model places its own frees (frees at last use are its rule
        # too). Unused computations stay: dropping one can move a first computation out of order.
        # Recomputations the budget does not need are undone first (`remat_bench.toolkit.improve`).
        nodes = drop_recomputations(graph, schedule.nodes[schedule.kinds == COMPUTE], budget, deadline)
        staged = place_frees(graph, nodes, np.zeros(len(nodes), dtype=np.int64), drop_unused=False)
        x = cm.encode(staged)
        if x is None or cm.model.violation(x) > 1e-6:
            return
        cost = float(cm.model.cost @ x)
        if best is None or cost < best[0]:
            best = (cost, x, label)

    for method in (Greedy(), Chen()):
        try:
            answer = method.solve(graph, budget, deadline.remaining(), **method.parse_params({}))
        except Exception:  # a failing heuristic only costs the warm start
            continue
        if answer.schedule is not None and answer.status.found_schedule:
            consider(answer.schedule, method.name)
    # Peak shaving from the input order (see `remat_bench.toolkit.improve.shave_peaks`).
    if deadline.expired():
        return (best[1], best[2]) if best else (None, None)
    shaved = shaved_order(graph, budget, deadline)
    shaved_schedule = place_frees(graph, shaved, np.zeros(len(shaved), dtype=np.int64), drop_unused=False)
    if simulate(graph, shaved_schedule).peak <= budget:
        consider(shaved_schedule, "shaved")
    if best is None and not deadline.expired():
        remaining = deadline.remaining()
        cap = Deadline(60.0 if remaining is None else min(60.0, remaining / 4))
        schedule, _, _, _ = lp_rounding(graph, budget, thresholds=19, samples=40, seed=0, backend="highs",
                                        deadline=cap, tighten=6, stats={})
        if schedule is not None:
            consider(schedule, "checkmate-lp")
    return (best[1], best[2]) if best else (None, None)


def milp_result(cm: CheckmateModel, sol: Any, stats: dict[str, Any], deadline: Deadline) -> MethodResult:
    """Decode a MILP answer into a MethodResult (shared by checkmate's backends)."""
    graph = cm.graph
    stats.update({
        "solver": sol.solver, "solver_status": sol.message, "solve_time_s": round(sol.solve_time_s, 3),
        "nodes": sol.nodes, "mip_gap": sol.gap,
    })
    base_duration = graph.total_duration
    incumbents = []
    for inc in sol.incumbents:
        row: dict[str, Any] = {"time_s": round(inc.time_s, 3),
                               "objective_overhead_pct": overhead_pct(inc.objective * cm.dur_scale, base_duration)}
        if inc.x is not None:
            decoded = cm.decode(inc.x)
            sim = simulate(graph, decoded)
            if sim.valid:
                cleaned_sim = clean_up_simulated(graph, decoded, sim)[2]
                row["cleaned_overhead_pct"] = cleaned_sim.overhead_pct(base_duration)
        incumbents.append(row)
    stats["incumbents"] = incumbents
    lower = None if sol.dual_bound is None else sol.dual_bound * cm.dur_scale
    if sol.status == "infeasible":
        return MethodResult(Status.INFEASIBLE, lower_bound=None, solve_time_s=deadline.elapsed(), stats=stats,
                            message="the solver proved that no staged schedule fits the budget")
    if sol.x is None:
        return MethodResult(Status.NO_SOLUTION, lower_bound=lower, solve_time_s=deadline.elapsed(), stats=stats,
                            message=f"no schedule found before the solver stopped ({sol.message})")
    schedule = cm.decode(sol.x)
    status = Status.OPTIMAL if sol.status == "optimal" else Status.FEASIBLE
    objective = cm.objective(sol.x)
    if status is Status.OPTIMAL and lower is not None:
        lower = min(lower, objective)
    return MethodResult(status, schedule, objective=objective, lower_bound=lower,
                        solve_time_s=deadline.elapsed(), stats=stats)
