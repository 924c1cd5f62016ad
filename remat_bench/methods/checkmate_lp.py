"""Checkmate's LP relaxation with two-phase rounding (Jain et al., MLSys 2020, section 5).

Solve the relaxation of the Checkmate MILP (`remat_bench.methods.checkmate`):
its optimum is a lower bound on the staged optimum. Then round:

1. Round the checkpoint matrix S*: deterministically at each threshold of a
   sweep (S = S* >= theta), and randomly, S[t,i] ~ Bernoulli(S*[t,i]) with a
   seeded generator.
2. Complete each rounded S into a schedule by recomputing what it leaves
   missing: in stage t, compute t, every i that S keeps into stage t+1 but
   does not hold entering t, and, closing over inputs in reverse order, every
   input that is not held entering t. This is the least R that S allows.

Every candidate is scored with the simulator (values freed at last use) and
the fastest one within budget is kept. Rounding ignores memory, so at tight
budgets every candidate may overshoot; then the LP is solved again at a
tightened budget (``tighten`` steps down to 70% of it), and its roundings are
scored against the real budget. Only the LP at the real budget gives the lower
bound.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from remat_bench.core.cleanup import place_frees
from remat_bench.core.graph import Graph, Number
from remat_bench.core.schedule import Schedule
from remat_bench.core.simulate import simulate
from remat_bench.methods.base import (
    Deadline,
    Method,
    MethodResult,
    Param,
    SolutionStatus,
    Termination,
    search_ended,
)
from remat_bench.methods.checkmate_model import CheckmateModel, check_fits, too_short
from remat_bench.toolkit.least_peak import least_peak_by_bisection
from remat_bench.toolkit.milp import model_stats, parse_backend, solve_milp


def lp_checkpoints(cm: CheckmateModel, x: np.ndarray) -> np.ndarray:
    """The fractional S* of an LP point as an (n+1) x n matrix (row n: outputs, kept to the end).

    Parameters
    ----------
    cm : CheckmateModel
        The model the point is of.
    x : np.ndarray
        A point of its LP relaxation.

    Returns
    -------
    np.ndarray
        float64, values clipped to [0, 1]: S*[t, i] for i < t, zero elsewhere, and row n one at outputs.
    """
    n = cm.n
    st, si = np.tril_indices(n, -1)
    S = np.zeros((n + 1, n))
    S[st, si] = np.clip(x[cm.s0:cm.s0 + len(st)], 0.0, 1.0)
    S[n, list(cm.graph.output_indices)] = 1.0
    return S


def complete(graph: Graph, S: np.ndarray) -> list[int]:
    """The compute sequence of the least R that a 0/1 checkpoint matrix S allows.

    Parameters
    ----------
    graph : Graph
    S : np.ndarray
        A 0/1 checkpoint matrix of (n+1) x n, as `lp_checkpoints` shapes it.

    Returns
    -------
    list of int
        The nodes computed, stage by stage, each stage's in ascending order.
    """
    n = graph.n
    inputs = graph.inputs
    sequence: list[int] = []
    for t in range(n):
        held = S[t]
        need = np.zeros(t + 1, dtype=bool)
        need[t] = True
        need[:t] |= S[t + 1, :t].astype(bool) & ~held[:t].astype(bool)
        for v in range(t, -1, -1):
            if need[v]:
                for u in inputs[v]:
                    if not held[u]:
                        need[u] = True
        sequence.extend(np.flatnonzero(need).tolist())
    return sequence


def round_candidates(cm: CheckmateModel, x: np.ndarray, thresholds: int, samples: int,
                     seed: int, deadline: Deadline) -> list[tuple[list[int], str]]:
    """Compute sequences from the threshold sweep and the randomised roundings of S*.

    Parameters
    ----------
    cm : CheckmateModel
        The model the point is of.
    x : np.ndarray
        A point of its LP relaxation.
    thresholds : int
        How many thresholds, evenly spread in (0, 1).
    samples : int
        How many randomised roundings.
    seed : int
        Seed of the randomised roundings.
    deadline : Deadline
        Checked after each rounding: what was rounded by then is returned.

    Returns
    -------
    list of tuple of (list of int, str)
        Each distinct rounding's compute sequence (`complete`) and its label.
    """
    graph = cm.graph
    S = lp_checkpoints(cm, x)
    st, si = np.tril_indices(cm.n, -1)
    out: list[tuple[list[int], str]] = []
    seen: set[bytes] = set()

    def add(rounded: np.ndarray, label: str) -> None:
        rounded[cm.n] = S[cm.n]
        key = np.packbits(rounded[st, si].astype(bool)).tobytes()
        if key not in seen:
            seen.add(key)
            out.append((complete(graph, rounded), label))

    for theta in np.linspace(0.0, 1.0, thresholds + 2)[1:-1]:
        add((S >= theta).astype(np.float64), f"threshold {theta:.3f}")
        if deadline.expired():
            return out
    rng = np.random.default_rng(seed)
    for k in range(samples):
        add((rng.random(S.shape) < S).astype(np.float64), f"random #{k}")
        if deadline.expired():
            break
    return out


def best_rounding(cm: CheckmateModel, x: np.ndarray, budget: Number, thresholds: int, samples: int,
                  seed: int, deadline: Deadline) -> tuple[Schedule | None, Number | None, str, int]:
    """The fastest rounded schedule within budget: (schedule, its pre-clean-up duration, label, tried).

    Parameters
    ----------
    cm : CheckmateModel
        The model the point is of.
    x : np.ndarray
        A point of its LP relaxation.
    budget : Number
        In the graph's memory units: the rounded schedule itself, every computation kept, must fit it.
    thresholds, samples, seed : int
        As in `round_candidates`.
    deadline : Deadline

    Returns
    -------
    schedule : Schedule or None
        The rounding (every computation kept) fastest once its unused computations are dropped; None
        when no rounding fits.
    duration : Number or None
        Its simulated duration before that clean-up.
    label : str
        Which rounding it is (empty when none).
    tried : int
        How many roundings were scored.
    """
    graph = cm.graph
    best: tuple[tuple, Schedule, Number, str] | None = None
    candidates = round_candidates(cm, x, thresholds, samples, seed, deadline)
    for sequence, label in candidates:
        nodes = np.asarray(sequence, dtype=np.int64)
        # The rounded schedule itself (every computation kept) must fit: it is the method's own.
        schedule = place_frees(graph, nodes, np.zeros(len(nodes), dtype=np.int64), drop_unused=False)
        sim = simulate(graph, schedule)
        if not sim.valid or sim.peak > budget:
            continue
        raw = sim.duration
        key = (simulate(graph, place_frees(graph, nodes, np.zeros(len(nodes), dtype=np.int64))).duration, raw)
        if best is None or key < best[0]:
            best = (key, schedule, raw, label)
    if best is None:
        return None, None, "", len(candidates)
    return best[1], best[2], best[3], len(candidates)


def lp_rounding(graph: Graph, budget: Number, *, thresholds: int, samples: int, seed: int,
                backend: str, deadline: Deadline, tighten: int,
                stats: dict[str, Any]) -> tuple[Schedule | None, Number | None, float | None, str, Termination]:
    """Solve the LP (tightening the budget if its roundings overshoot) and round it.

    Returns (schedule, its pre-clean-up duration, the LP bound at ``budget``, a
    sentence on why nothing came out, why it stopped: proven where the LP proves that
    nothing fits, the LP solver's termination where it did not solve, else how the
    roundings ended). Fills ``stats``.

    Parameters
    ----------
    graph : Graph
    budget : Number
        In the graph's memory units.
    thresholds, samples, seed : int
        As in `round_candidates`.
    backend : str
        The LP solver (`remat_bench.toolkit.milp.parse_backend`).
    deadline : Deadline
    tighten : int
        How many re-solves at budgets stepping down to 70% of ``budget``; 0 for none.
    stats : dict
        The run's stats: the model's size, the LP time, the solver and the roundings are added.

    Returns
    -------
    schedule : Schedule or None
    duration : Number or None
        The schedule's simulated duration before the shared clean-up.
    lower : float or None
        The LP bound at ``budget``, in duration units.
    why : str
        Why no schedule came out (empty when one did).
    termination : Termination
    """
    from remat_bench.core.budget import memory_floor

    floor = memory_floor(graph).amount
    factors = [1.0, *np.linspace(1.0, 0.7, tighten + 1)[1:]] if tighten else [1.0]
    lower = None
    tried = 0
    why = ""
    for factor in factors:
        internal = budget * factor if factor < 1 else budget
        if isinstance(budget, int):
            internal = int(internal)
        if internal < floor or (factor < 1 and deadline.expired()):
            break
        cm = CheckmateModel.build(graph, internal)
        if factor == 1.0:
            stats.update(model_stats(cm))
        sol = solve_milp(cm.model, backend=backend, time_limit=deadline.remaining(), relax=True)
        stats["lp_time_s"] = round(stats.get("lp_time_s", 0.0) + sol.solve_time_s, 3)
        stats["solver"] = sol.solver
        if sol.solution_status is SolutionStatus.INFEASIBLE:
            if factor == 1.0:
                stats["roundings_tried"] = tried
                return None, None, lower, "the LP relaxation is infeasible, so no staged schedule fits the budget", \
                    Termination.PROVEN
            break  # a tightened budget below what fits: the tightening is over
        if sol.solution_status is not SolutionStatus.OPTIMAL or sol.x is None:
            stats["roundings_tried"] = tried
            return None, None, lower, f"the LP relaxation did not solve within the time limit ({sol.message})", \
                sol.termination
        if factor == 1.0 and sol.objective is not None:
            lower = float(sol.objective) * cm.dur_scale
        schedule, raw, label, count = best_rounding(cm, sol.x, budget, thresholds, samples, seed, deadline)
        tried += count
        if schedule is not None:
            stats.update({"roundings_tried": tried, "best_rounding": label, "lp_budget_factor": round(factor, 3)})
            return schedule, raw, lower, "", search_ended(deadline)
        why = f"none of the {tried} rounded schedules fits the budget"
    stats["roundings_tried"] = tried
    return None, None, lower, why, search_ended(deadline)


class CheckmateLP(Method):
    name = "checkmate-lp"

    @classmethod
    def input_order(cls, params: dict[str, Any]) -> str | None:
        return "kept"
    search_space = "input-order stages (Checkmate's LP relaxation, rounded)"
    description = "Checkmate's LP relaxation (a lower bound) with two-phase deterministic and randomised rounding"
    params = (
        Param("thresholds", int, 19, "deterministic rounding thresholds, evenly spread in (0, 1)", minimum=1,
              maximum=10_000),
        Param("samples", int, 40, "randomised roundings per LP solution", minimum=0, maximum=100_000),
        Param("seed", int, 0, "seed of the randomised rounding", minimum=0, maximum=2**32 - 1),
        Param("tighten", int, 6, "LP re-solves at budgets down to 70% when no rounding fits (0: none)", minimum=0,
              maximum=100),
        Param("backend", str, "highs", "LP solver: highs, or pulp:NAME", check=parse_backend),
    )
    requires = ("highspy", "pulp")

    def solve(self, graph: Graph, budget: Number | None, time_limit: float | None,
              **params: Any) -> MethodResult:
        deadline = Deadline(time_limit)
        parse_backend(params["backend"])
        if budget is None:
            # The least budget at which the rounding finds a schedule, by bisection on the budget.
            return least_peak_by_bisection(
                graph, lambda b, t: self.solve(graph, b, t, **params), deadline, peak_goal=self.context.peak_goal)
        stats = check_fits(graph.n, graph.num_edges, "Checkmate LP", self.context.model_memory)
        if (short := too_short(stats, deadline)) is not None:
            return short
        schedule, raw, lower, why, termination = lp_rounding(
            graph, budget, thresholds=params["thresholds"], samples=params["samples"], seed=params["seed"],
            backend=params["backend"], deadline=deadline, tighten=params["tighten"], stats=stats)
        if lower is not None and graph.total_duration:
            stats["lp_overhead_pct"] = 100 * (lower / graph.total_duration - 1)
        if schedule is None:
            proven = termination is Termination.PROVEN  # the LP proves that nothing in the staged space fits
            return MethodResult(SolutionStatus.INFEASIBLE if proven else SolutionStatus.NO_SOLUTION, lower_bound=lower,
                                solve_time_s=deadline.elapsed(), stats=stats, message=why, termination=termination)
        return MethodResult(SolutionStatus.FEASIBLE, schedule, objective=raw, lower_bound=lower,
                            solve_time_s=deadline.elapsed(), stats=stats, termination=termination)
