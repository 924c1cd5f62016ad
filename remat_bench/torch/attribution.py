"""Where the time goes: every step of a schedule timed in place, beside the node's modelled duration.

`attribute` runs a schedule of an imported graph and the baseline in turns
(after a warm-up of each), ``passes`` times, under the same timing settings as
a replay (`remat_bench.torch.measure.steady_timing`), timing every computation
where it stands in the schedule's own order (`remat_bench.torch.measure.op_ns`)
and the whole run (`remat_bench.torch.measure.run_ns`). A step's measured time
is the median of its passes. What it gives:

- for the schedule and the baseline: the modelled duration (the simulator's),
  the measured run, the sum of the steps' measured times, and what the run
  takes beyond them (the executor's own cost: its loop, the frees);
- for every node: its first computation and its recomputations, measured and
  modelled (the recomputations are what the overhead is made of: a
  recomputation the model prices wrong moves the overhead by its error);
- the operator kinds (the graph's ``op``) and nodes that account for most of
  the error of the modelled overhead, largest first.

The error of the overhead, in points, splits exactly into the baseline's part
and the schedule's part; and each of those into the steps and what lies
outside them (`Attribution.to_json` gives the terms).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch

from remat_bench.core.baseline import baseline_schedule
from remat_bench.core.graph import Graph
from remat_bench.core.provenance import measured_threads
from remat_bench.core.schedule import COMPUTE, Schedule
from remat_bench.core.simulate import overhead_pct, simulate
from remat_bench.torch.executor import Executor, State
from remat_bench.torch.importer import program_for_graph, spec_of
from remat_bench.torch.measure import op_ns, run_ns, steady_timing, sync, timing_threads

# Passes of the schedule and the baseline each, after a warm-up of each (`remat-bench replay --steps N`).
DEFAULT_PASSES = 5
# Rows of nodes and of operator kinds `Attribution.to_json` keeps, by their share of the error.
TOP = 12

Step = tuple[int, int, int]  # (COMPUTE or FREE, node index, implementation position): no copies (`attribute`)


@dataclass
class RunTimes:
    """One schedule's steps timed in place: per compute step its median time (ns), and the whole run's."""

    steps: list[Step]
    step_ns: list[float] = field(default_factory=list)  # per step of ``steps`` (frees: 0), the median
    run_ns: float = 0.0  # the median of the whole runs
    modelled_ns: float = 0.0  # the simulator's duration

    @property
    def steps_ns(self) -> float:
        """The sum of the steps' measured times."""
        return float(sum(self.step_ns))

    @property
    def outside_ns(self) -> float:
        """What a run takes beyond its timed steps: the executor's loop and frees."""
        return self.run_ns - self.steps_ns


@dataclass
class Attribution:
    """The schedule's and the baseline's steps timed in place, beside the model (`attribute`)."""

    graph: Graph
    schedule: RunTimes
    baseline: RunTimes
    passes: int
    clock: str
    threads: int | None
    device: str

    def node_rows(self) -> list[dict[str, Any]]:
        """Per node of the schedule: computations, first and recomputed time measured and modelled (ns).

        Returns
        -------
        list of dict
            ``id``, ``op``, ``computations``, ``measured_ns``, ``modelled_ns``, ``recomputed_measured_ns``,
            ``recomputed_modelled_ns``, ``error_ns`` (recomputations: measured - modelled), in node order
            for nodes the schedule computes.
        """
        g = self.graph
        seen: dict[int, dict[str, Any]] = {}
        for (kind, v, k), took in zip(self.schedule.steps, self.schedule.step_ns):
            if kind != COMPUTE:
                continue
            model = float(g.op_duration[int(g.op_start[v]) + k])
            row = seen.get(v)
            if row is None:
                row = seen[v] = {"id": g.ids[v], "op": g.nodes[v].op or "?", "computations": 0, "measured_ns": 0.0,
                                 "modelled_ns": 0.0, "recomputed_measured_ns": 0.0, "recomputed_modelled_ns": 0.0}
            else:
                row["recomputed_measured_ns"] += took
                row["recomputed_modelled_ns"] += model
            row["computations"] += 1
            row["measured_ns"] += took
            row["modelled_ns"] += model
        for row in seen.values():
            row["error_ns"] = row["recomputed_measured_ns"] - row["recomputed_modelled_ns"]
        return [seen[v] for v in sorted(seen)]

    def op_rows(self) -> list[dict[str, Any]]:
        """Per operator kind: recomputations, their measured and modelled time and error (ns), largest first.

        Returns
        -------
        list of dict
            ``op``, ``recomputations``, ``measured_ns``, ``modelled_ns`` and ``error_ns``, by |error|.
        """
        kinds: dict[str, dict[str, Any]] = defaultdict(lambda: {"recomputations": 0, "measured_ns": 0.0,
                                                                "modelled_ns": 0.0})
        for row in self.node_rows():
            if row["computations"] < 2:
                continue
            kind = kinds[row["op"]]
            kind["recomputations"] += row["computations"] - 1
            kind["measured_ns"] += row["recomputed_measured_ns"]
            kind["modelled_ns"] += row["recomputed_modelled_ns"]
        rows = [{"op": op, **v, "error_ns": v["measured_ns"] - v["modelled_ns"]} for op, v in kinds.items()]
        return sorted(rows, key=lambda r: -abs(r["error_ns"]))

    def to_json(self, top: int = TOP) -> dict[str, Any]:
        """The attribution as results keep it.

        The modelled overhead is ``100 (S_s / S_b - 1)`` over the simulated durations; the one measured here
        ``100 (M_s / M_b - 1)`` over the runs' medians. ``overhead_error_pts`` is their difference. Its terms:
        ``recomputations_error_pts`` is what the recomputations' errors alone move it (measured less modelled
        recomputation time over the baseline's modelled duration, in points); ``rest_error_pts`` is the
        remainder (the first computations' errors, as the baseline's and the schedule's differ, and the time
        outside the steps).

        Parameters
        ----------
        top : int
            Nodes and operator kinds kept, by |error|.

        Returns
        -------
        dict
        """
        s, b = self.schedule, self.baseline
        modelled = overhead_pct(s.modelled_ns, b.modelled_ns)
        measured = overhead_pct(s.run_ns, b.run_ns)
        nodes = [r for r in self.node_rows() if r["computations"] > 1]
        recomputed_error = sum(r["error_ns"] for r in nodes)
        recompute_pts = 100.0 * recomputed_error / b.modelled_ns if b.modelled_ns else 0.0
        return {
            "passes": self.passes, "clock": self.clock, "threads": self.threads, "device": self.device,
            "modelled_overhead_pct": modelled, "measured_overhead_pct": measured,
            "overhead_error_pts": measured - modelled,
            "recomputations_error_pts": recompute_pts,
            "rest_error_pts": (measured - modelled) - recompute_pts,
            "schedule": _run_json(s), "baseline": _run_json(b),
            "recomputations": {"count": sum(r["computations"] - 1 for r in nodes),
                               "measured_ns": sum(r["recomputed_measured_ns"] for r in nodes),
                               "modelled_ns": sum(r["recomputed_modelled_ns"] for r in nodes)},
            "ops": self.op_rows()[:top],
            "nodes": sorted(nodes, key=lambda r: -abs(r["error_ns"]))[:top],
        }


def _run_json(run: RunTimes) -> dict[str, float]:
    return {"modelled_ns": run.modelled_ns, "run_ns": run.run_ns, "steps_ns": run.steps_ns,
            "outside_ns": run.outside_ns}


def attribute(graph: Graph, schedule: Schedule, device: torch.device, *, passes: int = DEFAULT_PASSES,
              threads: int | None = None, on_pass: Callable[[int], None] | None = None) -> Attribution:
    """Time every step of ``schedule`` and of the baseline in place, ``passes`` times each, in turns.

    Parameters
    ----------
    graph : Graph
        A graph imported from PyTorch (its model's operators run).
    schedule : Schedule
        A schedule the simulator accepts for it.
    device : torch.device
        Where the operators run.
    passes : int
        Timed runs of each, after a warm-up of each; at least 1.
    threads : int or None
        CPU threads (`remat_bench.torch.measure.timing_threads`: None takes the graph's, else one).
    on_pass : callable or None
        Told the number of passes done after each.

    Returns
    -------
    Attribution

    Raises
    ------
    ValueError
        A graph not imported from PyTorch, ``passes`` below 1, or a schedule with offload or reload steps.
    ExecutionError
        An operator that fails on real tensors.
    """
    if spec_of(graph) is None:
        raise ValueError(f"graph '{graph.name}' was not imported from PyTorch: its steps have no operators to time")
    if passes < 1:
        raise ValueError(f"timing steps in place takes at least one pass, not {passes}")
    if schedule.moves:
        raise ValueError("timing steps in place covers computations only, and this schedule copies values to "
                         "the host and back; replay it without timing its steps")
    program = program_for_graph(graph)
    runs = [RunTimes(_steps(baseline_schedule(graph))), RunTimes(_steps(schedule))]
    runs[0].modelled_ns = float(simulate(graph, baseline_schedule(graph)).duration)
    runs[1].modelled_ns = float(simulate(graph, schedule).duration)
    with steady_timing(device, timing_threads(device, threads or measured_threads(graph.metadata))) as settings:
        state = State.create(program.spec, device)
        samples: list[list[list[int]]] = [[[] for _ in run.steps] for run in runs]
        totals: list[list[int]] = [[], []]
        for done in range(passes + 1):  # the first of each is the warm-up
            for r, run in enumerate(runs):
                timings: list[int] = [0] * len(run.steps)
                took = run_ns(device, partial(_run_timed, program, state, run.steps, device, timings))
                if done:
                    totals[r].append(took)
                    for i, t in enumerate(timings):
                        samples[r][i].append(t)
            if done and on_pass is not None:
                on_pass(done)
    for r, run in enumerate(runs):
        run.step_ns = [float(statistics.median(xs)) if xs and any(xs) else 0.0 for xs in samples[r]]
        run.run_ns = float(statistics.median(totals[r]))
    return Attribution(graph, runs[1], runs[0], passes, str(settings["clock"]),
                       None if device.type == "cuda" else int(settings["threads"]), str(device))


def _steps(schedule: Schedule) -> list[Step]:
    return list(zip(schedule.kinds.tolist(), schedule.nodes.tolist(), schedule.impls.tolist()))


def _run_timed(program: Any, state: State, steps: list[Step], device: torch.device, timings: list[int]) -> None:
    """One run of ``steps`` with every computation timed in place into ``timings``."""
    ex = Executor(program, state)
    for i, (kind, v, _) in enumerate(steps):
        if kind == COMPUTE:
            timings[i] = op_ns(device, partial(ex.compute, v))
        else:
            ex.free(v)
    ex.values.clear()
    sync(device)
