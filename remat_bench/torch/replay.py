"""Replay: run a schedule with real tensors and measure the real peak (docs/design.md section 9).

`replay(graph, schedule)` walks the schedule step by step:

- for a graph imported from PyTorch (`remat_bench.torch.importer`), it
  re-traces the model from the spec in the graph's metadata (refusing if that
  no longer gives the same nodes), builds the parameters and the batch from
  the spec's seed, and runs each ``compute v`` as v's real aten operator on
  the resident values of its inputs; ``free v`` drops the only reference to
  v's value, so the allocator gets its memory back. At the end it checks the
  loss and every parameter gradient against a plain autograd step of the same
  model, parameters and batch: ``outputs_match`` holds when every element
  satisfies ``|replay - autograd| <= ATOL + RTOL * |autograd|``
  (``RTOL = 1e-5``, ``ATOL = 1e-6``); the largest absolute and relative
  differences are reported. On CPU the replay runs the same kernels as
  autograd, and the differences are zero;
- for any other graph, ``compute v`` allocates a uint8 tensor of v's memory
  (the graph's memory units read as bytes) and fills it with the largest byte
  of its inputs, a kernel that reads every input in full; a workspace is
  allocated, touched and dropped around it;
- a schedule that moves values (``offload v``, ``reload v``, docs/design.md
  section 3) runs its copies beside the computations
  (`remat_bench.torch.moves`): on CUDA on a device-to-host and a
  host-to-device stream with pinned host buffers and events, on the CPU at
  once into CPU tensors standing for host memory. A copy's device memory is
  let go at the step the model ends the copy by, so that the device memory
  follows the simulator's account step by step; the host bytes held are
  counted beside the simulator's host peak.

Measurement. The measured peak counts, on the footing of the simulator, the
fixed memory (for an imported graph: the parameters, buffers and batch that
the replay holds, measured as the bytes of their storages; for other graphs a
tensor of ``fixed_memory`` bytes) plus the largest amount allocated at once
during the schedule, above what was allocated when it started:

- on CPU, from the PyTorch profiler's memory events
  (``profile(profile_memory=True)``): every allocation and free of the CPU
  allocator, each with the allocator's running total at that moment; the peak
  is the largest running total. This is exact at the allocator level, and
  includes the scratch memory that operators allocate and free inside
  themselves (which the graph, whose workspaces are 0, does not model);
- on CUDA, from the caching allocator's statistics: ``max_memory_allocated``
  after ``reset_peak_memory_stats``, less ``memory_allocated`` at the start
  (allocations are rounded up to 512 bytes there).

Time. The schedule is timed against the baseline (every node once in file
order, `remat_bench.core.baseline.baseline_schedule`: the reference of
``overhead_pct``) in the same process, on the same parameters and batch,
under `remat_bench.torch.measure.steady_timing` as the graph's durations were
calibrated: on the CPU the threads the graph was measured with (one by
default), the thread's CPU time as the clock with one thread, freed memory
kept for reuse, no garbage collection inside a timed run. After one
unprofiled warm-up run of each, pairs run interleaved, baseline then schedule
(`remat_bench.torch.measure.interleaved_times`), so that machine noise falls
on both alike: ``repeats`` pairs at least, then more until the 95% interval
of the measured overhead is within +-``precision`` points or ``max_pairs``
have run; on CUDA each run is timed from an idle device to an idle device.
The measured overhead is the median of the paired overheads
``100 * (t_schedule_i / t_baseline_i - 1)``, with its distribution-free 95%
interval and the pairs' range, min to max
(`remat_bench.torch.measure.paired_overhead`); the modelled overhead is the
simulated duration over the baseline's simulated duration, less 1. The
baseline's peak is measured too, beside its simulated one.

Budget. The schedule file's budget (in the graph's memory units) is reported
beside the measured peak: ``within_budget`` says whether the measured peak is
at most the budget, and ``budget_note`` gives the likely cause when it is not
(unmodelled scratch memory, for an imported graph: `scratch_note`).
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from remat_bench.core.baseline import baseline, baseline_schedule
from remat_bench.core.errors import RematBenchError, ScheduleError
from remat_bench.core.graph import Graph, Number
from remat_bench.core.graph_io import load_graph
from remat_bench.core.json_files import parse_json, read_text
from remat_bench.core.provenance import measured_threads
from remat_bench.core.schedule import COMPUTE, FREE, OFFLOAD, Schedule, schedule_from_dict
from remat_bench.core.simulate import Simulation, overhead_pct, simulate
from remat_bench.torch import DEFAULT_MAX_PAIRS, DEFAULT_PRECISION, DEFAULT_REPEATS
from remat_bench.torch.build import first_line
from remat_bench.torch.executor import ExecutionError, Executor, State, reference_step
from remat_bench.torch.importer import program_for_graph, spec_of
from remat_bench.torch.measure import (
    PairedOverhead,
    interleaved_times,
    measure_peak,
    measured_where,
    no_room,
    paired_overhead,
    precise_enough,
    steady_timing,
    sync,
    timing_threads,
)
from remat_bench.torch.moves import Copies, MovePlan, Mover, copies_for, move_plan

RTOL = 1e-5
ATOL = 1e-6


class ReplayError(RematBenchError):
    """A replay that cannot run here: no such device, or not enough memory."""


@dataclass
class ReplayResult:
    """What a replay measured; ``to_json`` is what ``remat-bench replay --json`` prints."""

    graph: str
    device: str
    mode: str  # "model" (imported graph, real operators) or "synthetic"
    measured_peak: int
    simulated_peak: Number
    measured_fixed: int
    fixed_memory: Number
    wall_time_s: float
    simulated_duration: Number
    duration_unit: str
    steps: int
    computes: int
    recomputations: int
    outputs_match: bool | None = None
    max_abs_diff: float | None = None
    max_rel_diff: float | None = None
    measurement: str = ""
    note: str = ""
    diffs: dict[str, float] = field(default_factory=dict)
    budget: Number | None = None  # the schedule file's, in the graph's memory units
    budget_note: str = ""  # why the measured peak is above the budget, when it is
    # Against the baseline: each timed run's wall time in s, pair i being (baseline_step_times_s[i],
    # step_times_s[i]); empty when not timed (the baseline's empty when it did not run).
    step_times_s: list[float] = field(default_factory=list)
    baseline_step_times_s: list[float] = field(default_factory=list)
    modelled_overhead_pct: float | None = None  # simulated duration / baseline's simulated duration - 1
    baseline_simulated_peak: Number | None = None
    baseline_measured_peak: int | None = None  # None when the baseline did not run
    baseline_note: str = ""  # why the baseline did not run, when it did not
    clock: str = ""  # what the step times were read off (`remat_bench.torch.measure.clock_name`)
    threads: int | None = None  # CPU threads the operators ran on (None: left as they were, on CUDA)
    timing: dict[str, Any] = field(default_factory=dict)  # `steady_timing`'s settings, as they were
    attribution: dict[str, Any] | None = None  # every step timed in place (`replay(step_passes=...)`), as to_json gives
    # A schedule that moves values (None, 0 otherwise): the most host bytes its profiled run held at once
    # (`remat_bench.torch.moves.Mover.host_peak`) beside the simulator's host peak, and its copies.
    measured_host_peak: int | None = None
    simulated_host_peak: Number | None = None
    offloads: int = 0
    reloads: int = 0

    @property
    def repeats(self) -> int:
        """The schedule's timed runs (pairs, with a baseline); 0 when not timed."""
        return len(self.step_times_s)

    @property
    def step_time_s(self) -> float | None:
        """The median of the schedule's timed runs, in s; None when not timed."""
        return statistics.median(self.step_times_s) if self.step_times_s else None

    @property
    def baseline_step_time_s(self) -> float | None:
        """The median of the baseline's timed runs, in s; None when not timed."""
        return statistics.median(self.baseline_step_times_s) if self.baseline_step_times_s else None

    @property
    def measured_overhead(self) -> PairedOverhead | None:
        """The overhead measured against the baseline (`paired_overhead`); None without both timed."""
        if not self.step_times_s or len(self.baseline_step_times_s) != len(self.step_times_s):
            return None
        return paired_overhead(self.step_times_s, self.baseline_step_times_s)

    @property
    def overhead_error_pts(self) -> float | None:
        """Measured overhead less modelled overhead, in percentage points; None without both."""
        measured = self.measured_overhead
        if measured is None or self.modelled_overhead_pct is None:
            return None
        return measured.median_pct - self.modelled_overhead_pct

    @property
    def baseline_peak_error_pct(self) -> float | None:
        """How far the baseline's measured peak is above (+) its simulated one, in percent; None if not run."""
        if self.baseline_measured_peak is None or not self.baseline_simulated_peak:
            return None
        return 100.0 * (self.baseline_measured_peak / self.baseline_simulated_peak - 1.0)

    @property
    def within_budget(self) -> bool | None:
        """Whether the measured peak is at most the schedule's budget; None when it has none."""
        if self.budget is None:
            return None
        return self.measured_peak <= self.budget

    @property
    def peak_error_pct(self) -> float:
        """How far the measured peak is above (+) or below (-) the simulated one, in percent."""
        if not self.simulated_peak:
            return 0.0
        return 100.0 * (self.measured_peak / self.simulated_peak - 1.0)

    def to_json(self) -> dict[str, Any]:
        """The result as ``remat-bench replay --json`` prints it.

        Returns
        -------
        dict
            The fields, ``peak_error_pct``, ``within_budget`` and the tolerance (None for a synthetic replay);
            the times against the baseline with the measured overhead (median of the paired overheads, with
            their range: ``measured_overhead_min_pct`` to ``measured_overhead_max_pct``, ``spread`` = max -
            min in points; None where not timed); for a schedule that moves values, its host peaks
            (measured and simulated) and its copies; ``diffs`` and ``budget_note`` are left out.
        """
        measured = self.measured_overhead
        return {
            "device": self.device,
            "measured_peak": self.measured_peak,
            "simulated_peak": self.simulated_peak,
            "outputs_match": self.outputs_match,
            "max_abs_diff": self.max_abs_diff,
            "wall_time_s": self.wall_time_s,
            "graph": self.graph,
            "mode": self.mode,
            "peak_error_pct": self.peak_error_pct,
            "measured_fixed": self.measured_fixed,
            "fixed_memory": self.fixed_memory,
            "max_rel_diff": self.max_rel_diff,
            "tolerance": {"rtol": RTOL, "atol": ATOL} if self.mode == "model" else None,
            "simulated_duration": self.simulated_duration,
            "duration_unit": self.duration_unit,
            "steps": self.steps,
            "computes": self.computes,
            "recomputations": self.recomputations,
            "measurement": self.measurement,
            "note": self.note,
            "budget": self.budget,
            "within_budget": self.within_budget,
            "repeats": self.repeats,
            "step_time_s": self.step_time_s,
            "baseline_step_time_s": self.baseline_step_time_s,
            "measured_overhead_pct": None if measured is None else measured.median_pct,
            "measured_overhead_min_pct": None if measured is None else measured.min_pct,
            "measured_overhead_max_pct": None if measured is None else measured.max_pct,
            "measured_overhead_spread": None if measured is None else measured.spread,
            "measured_overhead_low_pct": None if measured is None else measured.low_pct,
            "measured_overhead_high_pct": None if measured is None else measured.high_pct,
            "pairs": 0 if measured is None else measured.pairs,
            "timing_clock": self.clock,
            "threads": self.threads,
            "timing": dict(self.timing),
            "attribution": self.attribution,
            "modelled_overhead_pct": self.modelled_overhead_pct,
            "overhead_error_pts": self.overhead_error_pts,
            "baseline_measured_peak": self.baseline_measured_peak,
            "baseline_simulated_peak": self.baseline_simulated_peak,
            "baseline_peak_error_pct": self.baseline_peak_error_pct,
            "baseline_note": self.baseline_note,
            "step_times_s": list(self.step_times_s),
            "baseline_step_times_s": list(self.baseline_step_times_s),
            "measured_host_peak": self.measured_host_peak,
            "simulated_host_peak": self.simulated_host_peak,
            "offloads": self.offloads,
            "reloads": self.reloads,
        }


def resolve_device(device: str | None) -> torch.device:
    """``None``: CUDA when present, else CPU. A device that is not there is refused.

    Parameters
    ----------
    device : str or None
        A torch device name (``cpu``, ``cuda``, ``cuda:1``), or None.

    Returns
    -------
    torch.device

    Raises
    ------
    ReplayError
        CUDA asked for where there is none, or a device other than CUDA and CPU.
    """
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ReplayError("--device cuda was asked for, but this PyTorch sees no CUDA device; use --device cpu")
    if dev.type not in ("cuda", "cpu"):
        raise ReplayError(f"replay runs on cuda or cpu, not {device!r}")
    return dev


def load_schedule_for(graph: Graph, path: str | Path, use: str = "replay") -> Schedule:
    """Read a schedule file for ``graph``; refuse one written for another graph (by its sha256).

    Parameters
    ----------
    graph : Graph
        The graph the schedule is for.
    path : str or Path
        The schedule file.
    use : str
        What is to be done with it, as the refusal says it (``replay``, ``train with``).

    Returns
    -------
    Schedule

    Raises
    ------
    ScheduleError
        A file that cannot be read or parsed, or that was written for another graph.
    """
    data = parse_json(read_text(path, ScheduleError), str(path), ScheduleError)
    written = data.get("graph") if isinstance(data, dict) else None
    want = written.get("sha256") if isinstance(written, dict) else None
    if want and want != graph.sha256 and isinstance(written, dict):
        raise ScheduleError(
            f"{path} was written for graph '{written.get('name') or '?'}' (sha256 {want[:12]}), not for "
            f"'{graph.name}' (sha256 {graph.sha256[:12]}); refusing to {use} it: {use} a schedule "
            "on the graph it was solved for"
        )
    return schedule_from_dict(data, graph, str(path))


def replay_files(graph_path: str | Path, schedule_path: str | Path, device: str | None = None, *,
                 repeats: int = DEFAULT_REPEATS, with_baseline: bool = True, **timing: Any) -> ReplayResult:
    """Load a graph and a schedule file (refusing one written for another graph) and replay it.

    Parameters
    ----------
    graph_path : str or Path
        The graph file.
    schedule_path : str or Path
        The schedule file.
    device : str or None
        As `resolve_device` takes it.
    repeats : int
        Timed pairs, as `replay` takes them.
    with_baseline : bool
        Run the baseline beside the schedule, as `replay` does.

    Returns
    -------
    ReplayResult

    Raises
    ------
    GraphError
        A graph file that cannot be read.
    ScheduleError
        A schedule file that cannot be read, or one for another graph or not valid for this one.
    ReplayError
        No such device, not enough memory, or an operator that fails.
    """
    graph = load_graph(graph_path)
    return replay(graph, load_schedule_for(graph, schedule_path), device, repeats=repeats,
                  with_baseline=with_baseline, **timing)


def replay(graph: Graph, schedule: Schedule, device: str | None = None, timing_run: bool = True, *,
           repeats: int = DEFAULT_REPEATS, with_baseline: bool = True,
           on_event: Callable[[dict[str, Any]], None] | None = None, max_pairs: int = DEFAULT_MAX_PAIRS,
           precision: float = DEFAULT_PRECISION, threads: int | None = None, step_passes: int = 0) -> ReplayResult:
    """Execute ``schedule`` on ``graph`` with real tensors; measure the peak and check the outputs.

    First a profiled run of the schedule measures its peak, and its loss and
    gradients are checked; then (``with_baseline``) a profiled run of the
    baseline measures the baseline's peak; then one unprofiled warm-up run of
    each, and ``repeats`` timed pairs, baseline then schedule
    (`interleaved_times`). ``timing_run=False`` measures the schedule's peak
    and outputs only: nothing is timed (the wall time is the profiled run's,
    slower by the profiler's overhead) and the baseline does not run. A
    baseline that does not fit in the device's free memory (over 80% of it) or
    fails there is left out, and ``baseline_note`` says why; the schedule is
    then timed alone.

    The schedule must be valid for the graph (the simulator decides): one that
    is not, including one written for another graph, is refused with a
    ScheduleError before anything runs.

    Parameters
    ----------
    graph : Graph
        The graph; one imported from PyTorch runs its model's operators, any other synthetic ones.
    schedule : Schedule
        The schedule to run.
    device : str or None
        As `resolve_device` takes it (None: CUDA when present, else CPU).
    timing_run : bool
        Whether to time the schedule (and run the baseline) after its profiled run.
    repeats : int
        Timed runs of the schedule at least, each paired with one of the baseline; at least 1.
    with_baseline : bool
        Run the baseline beside the schedule: its peak, and the pairs that give the measured overhead.
    on_event : callable or None
        Told ``{"kind": "measured"}`` once the peak is measured, then ``{"kind": "pair", "pair": i, "of":
        max_pairs, "time_s": s}`` after each timed pair.
    max_pairs : int
        Timed pairs at most: past ``repeats``, pairs go on until the measured overhead's 95% interval is
        within +-``precision`` points.
    precision : float
        That half-width, in points; 0 times exactly ``repeats`` pairs.
    threads : int or None
        CPU threads for the operators (None: those the graph's costs were measured with, else
        `remat_bench.torch.measure.CPU_TIMING_THREADS`); ignored on CUDA.
    step_passes : int
        Passes of `remat_bench.torch.attribution.attribute` after the pairs: every step of the schedule and of
        the baseline timed in place, beside its modelled duration (0: none; an imported graph's only, and a
        schedule that moves nothing: for one that does, ``note`` says its steps were not timed).

    Returns
    -------
    ReplayResult
        Peaks in bytes, times in s; ``wall_time_s`` is the median of the timed runs.

    Raises
    ------
    ScheduleError
        A schedule the simulator finds not valid for the graph.
    ReplayError
        ``repeats`` below 1, no such device, a replay that would not fit in the device's free memory (checked
        before anything is built), or an operator that fails on real tensors.
    GraphError
        An imported graph whose model now traces to other nodes.
    """
    if repeats < 1:
        raise ReplayError(f"a replay times the schedule at least once; --repeats {repeats} is below 1")
    sim = simulate(graph, schedule)
    if not sim.valid:
        raise ScheduleError(f"refusing to replay a schedule that is not valid for graph '{graph.name}': "
                            f"{sim.violation}")
    plan = move_plan(graph, schedule, sim) if schedule.moves else None
    dev = resolve_device(device)
    steps = _steps(schedule)
    base = baseline(graph)
    base_steps: list[Step] | None = None
    base_note = "" if timing_run else "the replay measured the peak only"
    if timing_run and with_baseline:
        base_steps = _steps(baseline_schedule(graph))
    elif timing_run:
        base_note = "left out with --no-baseline"
    spec = spec_of(graph)
    tell = on_event if on_event is not None else (lambda event: None)
    if spec is not None:  # before the model is built and its parameters allocated (the baseline is checked later)
        short = no_room(dev, _as_bytes(sim.peak))
        if short:
            raise ReplayError(f"replaying '{graph.name}' needs {short} at the schedule's simulated peak; replay it "
                              "on a larger machine")
    most = max(repeats, max_pairs) if precision > 0 else repeats
    run = _model_run(graph, dev) if spec is not None else _synthetic_run(graph, dev, sim.peak)
    with steady_timing(dev, timing_threads(dev, threads or measured_threads(graph.metadata))) as settings, \
            run as (prepare, fixed_bytes, finish):
        profiled = prepare(steps, True, plan)
        start = time.perf_counter()
        delta = measure_peak(dev, profiled)
        wall = time.perf_counter() - start  # profiled: used only without timed runs
        measured = _Measured(fixed_bytes, delta, wall, finish(), base_note=base_note)
        if base_steps is not None:
            base_steps = _measure_baseline(graph, dev, prepare, base_steps, base.peak, measured)
        tell({"kind": "measured"})
        if timing_run:
            measured.times = interleaved_times(
                dev, lambda: prepare(steps, False, plan),
                None if base_steps is None else (lambda: prepare(base_steps, False, None)), repeats,
                lambda done, took: tell({"kind": "pair", "pair": done, "of": most, "time_s": took}),
                max_repeats=most, enough=precise_enough(precision) if precision > 0 else None)
    result = _result(graph, schedule, dev, spec is not None, sim, base, measured)
    result.clock, result.threads, result.timing = settings["clock"], settings["threads"], dict(settings)
    if dev.type == "cuda":
        result.threads = None
    if step_passes and spec is not None and timing_run and plan is not None:
        result.note = "; ".join(filter(None, [result.note, _UNTIMED_STEPS]))
    elif step_passes and spec is not None and timing_run:
        from remat_bench.torch.attribution import attribute

        try:
            found = attribute(graph, schedule, dev, passes=step_passes, threads=threads,
                              on_pass=lambda done: tell({"kind": "steps", "pass": done, "of": step_passes}))
        except ExecutionError as exc:
            raise ReplayError(f"replaying '{graph.name}': {exc}") from None
        result.attribution = found.to_json()
    return result


Step = tuple[int, int, int]  # (kind, node index, implementation position)
# prepare(steps, keep, plan) builds what a run of ``steps`` needs (with ``plan``, the schedule's copies: their
# host buffers) and returns the run itself (timed apart from its preparation); with ``keep`` the run's outputs
# stay alive until finish() compares them, and its host peak is read.
Prepare = Callable[[list[Step], bool, MovePlan | None], Callable[[], None]]


def _steps(schedule: Schedule) -> list[Step]:
    return list(zip(schedule.kinds.tolist(), schedule.nodes.tolist(), schedule.impls.tolist()))


@dataclass
class _Measured:
    """What a replay measured, in bytes and s."""

    fixed_bytes: int  # the fixed memory the replay holds
    delta: int  # the schedule's peak above what was allocated when it began
    wall_s: float  # its profiled run's wall time
    check: dict[str, Any]  # its outputs against autograd's (`compare`); empty for a synthetic graph
    base_delta: int | None = None  # the baseline's, as ``delta``; None when it did not run
    base_note: str = ""  # why the baseline did not run, when it did not
    times: tuple[list[float], list[float]] = ([], [])  # `interleaved_times`' (schedule, baseline)


def _measure_baseline(graph: Graph, device: torch.device, prepare: Prepare, steps: list[Step], peak: Number,
                      measured: _Measured) -> list[Step] | None:
    """The baseline's peak into ``measured`` (``peak``: its simulated one); its steps, or None, with
    ``measured.base_note`` saying why, when it does not fit in the free memory or fails on the device."""
    short = no_room(device, _as_bytes(peak - graph.fixed_memory))
    if short:
        measured.base_note = f"it needs {short}, beyond the fixed memory"
        return None
    try:
        measured.base_delta = measure_peak(device, prepare(steps, False, None))
    except (ReplayError, torch.OutOfMemoryError) as exc:
        measured.base_note = f"it failed on {device}: {exc}"
        return None
    return steps


def _result(graph: Graph, schedule: Schedule, device: torch.device, model: bool, sim: Simulation,
            base: Any, measured: _Measured) -> ReplayResult:
    """The `ReplayResult` of what a replay of ``schedule`` measured (``model``: it ran an imported graph's
    model), beside the simulator's account of it (``sim``) and of the baseline (``base``)."""
    step_times, base_times = measured.times
    measured_peak = measured.fixed_bytes + measured.delta
    check = measured.check
    moves = sim.offloads + sim.reloads > 0
    result = ReplayResult(
        graph=graph.name,
        device=str(device),
        mode="model" if model else "synthetic",
        measured_peak=measured_peak,
        simulated_peak=sim.peak,
        measured_fixed=measured.fixed_bytes,
        fixed_memory=graph.fixed_memory,
        wall_time_s=statistics.median(step_times) if step_times else measured.wall_s,
        simulated_duration=sim.duration,
        duration_unit=graph.units.get("duration", ""),
        steps=sim.num_steps,
        computes=sim.computes,
        recomputations=sim.recomputations,
        outputs_match=check.get("match"),
        max_abs_diff=check.get("max_abs"),
        max_rel_diff=check.get("max_rel"),
        diffs=check.get("diffs", {}),
        measurement=("torch.profiler memory events (CPU allocator)" if device.type == "cpu"
                     else "torch.cuda.max_memory_allocated") + (_COPIES_NOTE if moves else ""),
        note=scratch_note(graph, device, measured_peak, sim.peak) if model else "",
        budget=schedule.budget,
        step_times_s=step_times,
        baseline_step_times_s=base_times,
        modelled_overhead_pct=overhead_pct(sim.duration, base.duration),
        baseline_simulated_peak=base.peak,
        baseline_measured_peak=None if measured.base_delta is None else measured.fixed_bytes + measured.base_delta,
        baseline_note=measured.base_note,
        measured_host_peak=check.get("host_peak") if moves else None,
        simulated_host_peak=sim.host_peak if moves else None,
        offloads=sim.offloads,
        reloads=sim.reloads,
    )
    if result.within_budget is False:
        result.budget_note = over_budget_cause(graph, device, result)
    return result


# Why a replay of a schedule that moves values has no attribution (`remat_bench.torch.attribution`).
_UNTIMED_STEPS = ("its steps were not timed in place: that covers computations only, and this schedule copies "
                  "values to the host and back")
# How a replay of a schedule that moves values measures (`remat_bench.torch.moves`).
_COPIES_NOTE = ("; host copies in buffers allocated before the run, device memory of a copy let go at the step "
                "the model ends the copy by")


def over_budget_cause(graph: Graph, device: torch.device, result: ReplayResult) -> str:
    """The likely reason a replay's measured peak is above its schedule's budget.

    Parameters
    ----------
    graph : Graph
        The graph replayed.
    device : torch.device
        Where it was replayed.
    result : ReplayResult
        The replay's result.

    Returns
    -------
    str
        One clause; empty when the peak is within the budget or there is no budget.
    """
    if result.budget is None or result.within_budget:
        return ""
    if result.simulated_peak > result.budget:
        return (f"the schedule itself peaks at {result.simulated_peak:,} in the simulator, above its budget "
                "(it was not solved within this budget)")
    if result.mode == "model":
        return scratch_note(graph, device, result.measured_peak, result.simulated_peak, slack=0.0)
    if device.type == "cuda":
        return "the CUDA caching allocator rounds every block up to a multiple of 512 bytes"
    return "the replay allocated more than the graph's memory and workspaces"


def scratch_note(graph: Graph, device: torch.device, measured_peak: int, simulated_peak: Number,
                 slack: float = 0.01) -> str:
    """Why an imported graph's measured peak is above its simulated one, when it is by over ``slack``.

    The usual cause is the scratch memory kernels allocate inside themselves,
    which a graph models only when its workspaces were measured, and only for
    the processor and thread count they were measured with.

    Parameters
    ----------
    graph : Graph
        An imported graph; its metadata says where its workspaces were measured, if they were.
    device : torch.device
        Where the replay ran.
    measured_peak : int
        Bytes.
    simulated_peak : Number
        Bytes.
    slack : float
        The fraction above the simulated peak that needs no note.

    Returns
    -------
    str
        One clause; empty when the measured peak is within the slack.
    """
    if measured_peak <= (1.0 + slack) * simulated_peak:
        return ""
    where = graph.metadata.get("torch", {}).get("workspace")
    if not where:
        return ("operators allocated scratch memory the graph does not model (its workspaces are 0); "
                "import it with `--workspace measure` on this machine to model it")

    here = measured_where(device)
    differs = [f"{key} {where.get(key)} there, {value} here" for key, value in here.items()
               if where.get(key) != value]
    if differs:
        return ("the graph's workspaces were measured elsewhere (" + "; ".join(differs) + "): "
                "import it again with `--workspace measure` on this machine")
    return "operators allocated more scratch memory than the graph's measured workspaces"


# ---------------------------------------------------------------------- imported graphs


@contextlib.contextmanager
def _model_run(graph: Graph, device: torch.device) -> Iterator[tuple[Prepare, int, Callable[[], dict]]]:
    program = program_for_graph(graph)
    # The reference run comes first and is kept outside the measured region.
    try:
        ref_loss, ref_grads = reference_step(program.spec, device)
    except RematBenchError:
        raise
    except Exception as exc:  # traced with fake tensors, the model can still fail on real ones
        raise ReplayError(f"replaying '{graph.name}': the model's autograd step fails on real tensors on "
                          f"{device}: {type(exc).__name__}: {first_line(exc)}") from None
    state = State.create(program.spec, device)
    executors: list[Executor] = []
    engines = _Engines(device)

    def prepare(steps: list[Step], keep: bool, plan: MovePlan | None) -> Callable[[], None]:
        moves = None if plan is None else Mover(plan, engines.get(), device, state.tensors())
        ex = Executor(program, state, moves=moves)

        def execute() -> None:
            try:
                ex.run((kind, v) for kind, v, _ in steps)
            except ExecutionError as exc:
                raise ReplayError(f"replaying '{graph.name}': {exc}") from None
            sync(device)
            if keep:
                executors.append(ex)  # its outputs (loss, gradients) stay alive until finish()
            else:
                ex.values.clear()  # the outputs go at the end of the run, as those of a training step

        return execute

    def finish() -> dict[str, Any]:
        loss, grads = executors[0].results()
        result = compare({"loss": loss, **grads}, {"loss": ref_loss, **ref_grads})
        moved = executors[0].moves
        if moved is not None:
            result["host_peak"] = moved.host_peak
        executors.clear()
        return result

    try:
        yield prepare, state.nbytes, finish
    finally:
        executors.clear()


def compare(got: dict[str, torch.Tensor | None], want: dict[str, torch.Tensor], rtol: float = RTOL,
            atol: float = ATOL) -> dict[str, Any]:
    """Largest absolute and relative differences, and whether all are within ``rtol``/``atol`` (RTOL/ATOL).

    Parameters
    ----------
    got : dict
        Name -> tensor of the replay (None: a gradient it did not produce, compared as zeros).
    want : dict
        Name -> tensor of the reference; every name here is compared.
    rtol, atol : float
        The tolerance of ``torch.allclose``.

    Returns
    -------
    dict
        ``match`` (bool), ``max_abs`` and ``max_rel`` (float; ``max_rel`` is inf where a reference tensor is
        all zeros and the replay's is not), and ``diffs``: each name's largest absolute difference.
    """
    diffs: dict[str, float] = {}
    max_abs = max_rel = 0.0
    match = True
    for name, ref in want.items():
        value = got.get(name)
        value = torch.zeros_like(ref) if value is None else value.to(ref.device)
        diff = (value.double() - ref.double()).abs()
        worst = float(diff.max()) if diff.numel() else 0.0
        scale = float(ref.double().abs().max()) if ref.numel() else 0.0
        diffs[name] = worst
        max_abs = max(max_abs, worst)
        max_rel = max(max_rel, worst / scale if scale else (0.0 if worst == 0 else math.inf))
        match = match and bool(torch.allclose(value.double(), ref.double(), rtol=rtol, atol=atol))
    return {"match": match, "max_abs": max_abs, "max_rel": max_rel, "diffs": diffs}


# ---------------------------------------------------------------------- other graphs


def _as_bytes(amount: Number) -> int:
    return math.ceil(amount)


class _Engines:
    """The device's copy engines (`remat_bench.torch.moves.copies_for`), made when a run first copies and kept
    with their host buffers for the replay's later runs."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._copies: Copies | None = None

    def get(self) -> Copies:
        if self._copies is None:
            self._copies = copies_for(self.device)
        return self._copies


@contextlib.contextmanager
def _synthetic_run(graph: Graph, device: torch.device,
                   simulated_peak: Number) -> Iterator[tuple[Prepare, int, Callable[[], dict]]]:
    short = no_room(device, _as_bytes(simulated_peak))
    if short:
        raise ReplayError(f"graph '{graph.name}' needs {short} at its simulated peak; replay it on a larger "
                          "machine")
    memory = [_as_bytes(m) for m in graph.memory.tolist()]
    op_inputs = graph.op_inputs
    op_start = graph.op_start.tolist()
    workspace = [_as_bytes(w) for w in graph.op_workspace.tolist()]
    fixed = torch.zeros(_as_bytes(graph.fixed_memory), dtype=torch.uint8, device=device)
    reduced = torch.zeros((), dtype=torch.uint8, device=device)
    # amax into a buffer held from the start: the reduction allocates nothing, so the measured
    # peak is the simulated one to the byte, and a schedule at its budget is within it.
    largest = torch.zeros((), dtype=torch.uint8, device=device)

    engines = _Engines(device)
    movers: list[Mover] = []

    def prepare(steps: list[Step], keep: bool, plan: MovePlan | None) -> Callable[[], None]:
        moves = None if plan is None else Mover(plan, engines.get(), device)
        if keep and moves is not None:
            movers.append(moves)  # its host peak is read by finish(); there is nothing else to compare
        return lambda: execute(steps, moves)

    def finish() -> dict[str, Any]:
        return {"host_peak": movers.pop().host_peak} if movers else {}

    def execute(steps: list[Step], moves: Mover | None) -> None:
        values: dict[int, torch.Tensor] = {}
        for s, (kind, v, k) in enumerate(steps):
            if moves is not None:
                moves.before(s)
            if kind != COMPUTE:
                if moves is None:
                    del values[v]
                elif kind == FREE:
                    moves.free(s, v, values)
                elif kind == OFFLOAD:
                    moves.offload(s, v, values)
                else:
                    moves.reload(s, v, values)
                continue
            op = op_start[v] + k
            if moves is not None:
                moves.wait_for(op_inputs[op])
            out = torch.empty(memory[v], dtype=torch.uint8, device=device)
            if workspace[op]:
                scratch = torch.empty(workspace[op], dtype=torch.uint8, device=device)
                scratch.fill_(1)
                del scratch
            reduced.zero_()
            for u in op_inputs[op]:
                if values[u].numel():
                    torch.amax(values[u], dim=0, out=largest)
                    torch.maximum(reduced, largest, out=reduced)
            out.fill_(reduced)
            values[v] = out
            del out  # the value's only reference is in ``values``: a later free or offload lets it go
        if moves is not None:
            moves.finish()
        values.clear()
        sync(device)

    try:
        yield prepare, int(fixed.numel()), finish
    finally:
        del fixed
