"""``torch-budget``: PyTorch's own memory-budget partitioner, run for real, scored by the simulator.

``torch.compile`` splits a training step's joint graph into a forward and a backward graph with
its min-cut partitioner (torch 2.13, `torch/_functorch/partitioners.py`,
``min_cut_rematerialization_partition``). Its knob ``activation_memory_budget`` b in [0, 1] is a
fraction of activation memory: b = 0 saves the inputs alone, b = 1 what the runtime-optimal min
cut saves (H. He, "Min-cut optimal recomputation (i.e. activation checkpointing) with
AOTAutograd", PyTorch dev-discuss, 2022: the cut of least saved memory, with recomputation limited
to cheap, fusible operators). In between, unless a more aggressive cut already saves less than b,
the operators its heuristics ban from recomputation become knapsack items
(`_activation_checkpointing/knapsack.py`)::

    max  sum_i runtime_i x_i   subject to   sum_i m_i x_i <= b,   x_i in {0, 1}

with m_i an item's size normalised by the gap between the two extremes' saved memory, runtime_i
from ``activation_memory_budget_runtime_estimator`` (FLOPs by default), and x_i = 1 keeping item i
banned; a last min cut, with the other items allowed to be recomputed, decides what is saved.

This method runs that partitioner on the model an imported graph came from
(`remat_bench.torch.partition`: the model rebuilt from the graph's spec with fake tensors, the
joint graph traced by AOTAutograd once, partitioned at each knob value), maps the values the
forward graph saves to the graph's nodes, and lowers that plan with the shared lowering
(`remat_bench.toolkit.lowering`): the saved values are kept, every other forward value a
backward node reads is recomputed, with what it needs, before its first backward use.
``lowering=hold`` keeps a recomputed value until its last use, as PyTorch's backward graph does
(it places each recomputation just before its first use: ``reordering_to_mimic_autograd_engine``);
``transient`` frees it after each use and computes it again later (not in PyTorch); ``best`` tries
both. On the zoo models the lowering recomputes what PyTorch's backward graph recomputes, and
nothing else, except around the loss: PyTorch's forward graph ends with the loss, remat-bench's
backward pass starts with it, so the values the loss reads stay resident (``stats`` records
``torch_recomputed_nodes``, ``schedule_recomputed_nodes`` and ``recomputed_beyond_torch``).

remat-bench's budget is a peak, PyTorch's knob is not (and the peak is not monotone in it:
pytorch/pytorch#197838): with ``fraction=0`` (the default) the knob is searched, on a grid of
`GRID` steps from 1 down to 0 (the inputs alone) first, then bisected above the best that fits,
for the fastest simulated schedule within the budget (with ``budget=min``, the lowest peak).
What it leaves out: inductor's fusion, and PyTorch's finer grain: where it saves some outputs of
a multi-output operator (batch norm's statistics and not its output), the imported graph's node
holds them all (``partial_nodes``, ``partial_bytes``).
"""

from __future__ import annotations

import importlib
import importlib.util
import time
from types import ModuleType
from typing import Any

import numpy as np

from remat_bench.core.budget import memory_text
from remat_bench.core.errors import MethodError, RematBenchError
from remat_bench.core.graph import Graph, Number
from remat_bench.core.schedule import Schedule
from remat_bench.core.simulate import simulate
from remat_bench.methods.base import (
    Deadline,
    Membership,
    Method,
    MethodResult,
    Param,
    Role,
    SolutionStatus,
    Termination,
    search_ended,
)
from remat_bench.toolkit.lowering import LOWERINGS, Found, Plan, found_key, lower_plan, search_knob

# What torch 2.13 accepts (torch/_functorch/config.py). PyTorch's third estimator, "profile", times
# each operator with inductor's GPU benchmarker: it needs CUDA tensors, and the joint graph here is
# traced for the CPU ("Torch not compiled with CUDA enabled" on a CPU build).
SOLVERS = ("dp", "greedy", "ilp", "dp_knapsack_sliding_hirschberg", "dynamic_memory_budget_dp")
ESTIMATORS = ("flops", "testing")
# Knob values tried first (GRID + 1 of them, 1 down to 0), and bisection steps after.
GRID = 20
BISECTION_STEPS = 8



def _check_solver(solver: str) -> None:
    if solver == "ilp" and importlib.util.find_spec("scipy") is None:
        raise MethodError("PyTorch's 'ilp' knapsack solver needs scipy: install it with `pip install scipy`, "
                          "or choose solver=dp")


class TorchBudget(Method):
    name = "torch-budget"
    production = True
    search_space = "PyTorch's partitions over its activation-memory budget, lowered by the shared lowering"
    description = ("PyTorch's own memory-budget partitioner (torch.compile's min cut and knapsack), run on the "
                   "model a graph was imported from")
    requires = ("torch",)
    install_hint = "pip install remat-bench[torch]"
    needs_backward = True
    # Inside auto it runs beside the others from the start, and only when the members have at least 30 s:
    # PyTorch's planner traces the model and searches its knob for tens of seconds on the real-scale models
    # (docs/benchmarks.md, "The frontier, fast"), and stopped before it ends it only takes a core from the others.
    member = Membership(Role.FAST, rank=8, beside_s=30.0, beside_why=(
        "PyTorch's planner is given at least (its trace and knob search take tens of seconds; a longer limit runs it)"))
    params = (
        Param("fraction", float, 0.0, "PyTorch's activation_memory_budget; 0: search it for the fastest schedule "
              "within the budget", minimum=0.0, maximum=1.0),
        Param("solver", str, "dp", "activation_memory_budget_solver: PyTorch's knapsack solver (dp, its default)",
              choices=SOLVERS, check=_check_solver),
        Param("estimator", str, "flops", "activation_memory_budget_runtime_estimator: flops (PyTorch's default) "
              "or testing (every operator 1); 'profile' needs CUDA", choices=ESTIMATORS),
        Param("lowering", str, "hold", "hold: a recomputed value stays until its last use, as in PyTorch's backward "
              "graph; transient: freed after each use; best: both, the fastest that fits",
              choices=tuple(LOWERINGS)),
    )

    @classmethod
    def skip(cls, graph: Graph, budget: Number | None) -> str | None:
        meta = graph.metadata.get("torch")
        if not isinstance(meta, dict) or "spec" not in meta:
            return (f"method '{cls.name}' runs PyTorch's partitioner on the model a graph was imported from, and "
                    f"graph '{graph.name}' was not imported from PyTorch (no 'torch' model spec in its metadata)")
        return super().skip(graph, budget)

    def solve(self, graph: Graph, budget: Number | None, time_limit: float | None,
              **params: Any) -> MethodResult:
        deadline = Deadline(time_limit)
        modes = LOWERINGS[params["lowering"]]
        try:
            partitions = _Partitions(graph, params["solver"], params["estimator"], modes)
            knob = params["fraction"]
            if knob > 0:  # the knob as given: its fastest schedule within the budget, else its least peak
                found = partitions.best(knob, budget) or partitions.best(knob, None)
            else:
                found = _search(partitions, budget, deadline)
            stats = partitions.stats(found)
        except RematBenchError as exc:  # the model cannot be re-traced, or PyTorch's trace cannot be aligned
            return MethodResult(SolutionStatus.NO_SOLUTION, solve_time_s=deadline.elapsed(), message=str(exc),
                                termination=Termination.ERROR)
        termination = search_ended(deadline)
        if found is None or (budget is not None and found[1] > budget):
            message = (partitions.nothing_fits(budget) if found is None else
                       f"at PyTorch's activation_memory_budget {knob:g} the simulated peak is "
                       f"{memory_text(found[1], graph)}, above the budget {memory_text(budget or 0, graph)}")
            return MethodResult(SolutionStatus.NO_SOLUTION, solve_time_s=deadline.elapsed(), stats=stats,
                                termination=termination, message=message)
        return MethodResult(SolutionStatus.FEASIBLE, found[2], objective=found[0], solve_time_s=deadline.elapsed(),
                            stats=stats, termination=termination)


class _Partitions:
    """PyTorch's partitions of one graph by knob value, each lowered (in each mode) and simulated once."""

    def __init__(self, graph: Graph, solver: str, estimator: str, modes: tuple[bool, ...]) -> None:
        # Imported here, not at the top: this module imports without torch, and `remat-bench methods`
        # lists the method on a machine without it.
        from remat_bench.torch import partition

        self.torch: ModuleType = partition
        start = time.perf_counter()
        self.joint = self.torch.joint_graph(graph)
        self.trace_s = time.perf_counter() - start
        self.graph, self.solver, self.estimator, self.modes = graph, solver, estimator, modes
        self.segments = tuple((v,) for v in graph.forward_indices)
        self.plans: dict[float, Any] = {}
        self.lowered: dict[tuple[frozenset[int], bool], tuple[Number, Number, Schedule]] = {}
        self.partition_s = 0.0

    def plan(self, knob: float) -> Any:
        """PyTorch's partition at ``knob`` (a `remat_bench.torch.partition.TorchPlan`)."""
        if knob not in self.plans:
            start = time.perf_counter()
            self.plans[knob] = self.torch.partition(self.joint, knob, self.solver, self.estimator)
            self.partition_s += time.perf_counter() - start
        return self.plans[knob]

    def at(self, knob: float) -> list[Found]:
        """The plan at ``knob`` lowered in each mode: (duration, peak, schedule, knob, transient)."""
        kept = frozenset(v for v in self.plan(knob).saved if self.graph.is_forward[v])
        found: list[Found] = []
        for transient in self.modes:
            key = (kept, transient)
            if key not in self.lowered:
                schedule = lower_plan(self.graph, Plan(kept, self.segments), transient)
                sim = simulate(self.graph, schedule)
                self.lowered[key] = (sim.duration, sim.peak, schedule)
            duration, peak, schedule = self.lowered[key]
            found.append((duration, peak, schedule, knob, transient))
        return found

    def nothing_fits(self, budget: Number | None) -> str:
        """Why no knob gave a schedule within ``budget``: the lowest peak any knob tried reached."""
        lowest = min((peak for _, peak, _ in self.lowered.values()), default=None)
        if lowest is None or budget is None:
            return "no value of PyTorch's activation_memory_budget gives a schedule within the budget"
        return (f"no value of PyTorch's activation_memory_budget gives a schedule within the budget "
                f"{memory_text(budget, self.graph)}: the lowest peak over the {len(self.plans)} values tried is "
                f"{memory_text(lowest, self.graph)}")

    def best(self, knob: float, budget: Number | None) -> Found | None:
        """The fastest mode at ``knob`` within ``budget`` (None: the least peak); None when none fits."""
        fits = [f for f in self.at(knob) if budget is None or f[1] <= budget]
        return min(fits, key=lambda f: found_key(f, budget)) if fits else None

    def stats(self, found: Found | None) -> dict[str, Any]:
        """What a run records: the knob, PyTorch's estimates beside the simulator's, the recomputations."""
        stats: dict[str, Any] = {"partitions": len(self.plans), "trace_s": round(self.trace_s, 3),
                                 "partition_s": round(self.partition_s, 3), "solver": self.solver,
                                 "estimator": self.estimator}
        if found is None:
            return stats
        duration, peak, schedule, knob, transient = found
        plan = self.plan(knob)
        saved_bytes, runtime = plan.estimates()
        counts = np.bincount(schedule.nodes[schedule.kinds == 0], minlength=self.graph.n)
        recomputed = {int(v) for v in np.flatnonzero(counts > 1)}
        stats.update({
            "fraction": knob, "lowering": "transient" if transient else "hold",
            "torch_saved_activation_bytes": saved_bytes, "torch_recompute_estimate": runtime,
            "simulated_peak": peak, "simulated_duration": duration,
            "saved_nodes": len(plan.saved), "saved_inputs": plan.saved_inputs,
            "torch_recomputed_nodes": len(plan.recomputed), "schedule_recomputed_nodes": len(recomputed),
            "recomputed_beyond_torch": len(recomputed - plan.recomputed),
            "partial_nodes": plan.partial, "partial_bytes": plan.partial_bytes,
        })
        return stats


def _search(partitions: _Partitions, budget: Number | None, deadline: Deadline) -> Found | None:
    """The knob whose schedule is fastest within ``budget`` (None: the least peak):
    `remat_bench.toolkit.lowering.search_knob` over `GRID` steps, then `BISECTION_STEPS` bisections."""
    return search_knob(partitions.at, budget, deadline, GRID, BISECTION_STEPS)
