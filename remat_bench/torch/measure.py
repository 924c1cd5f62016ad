"""Measuring on real tensors: the peak of the allocator while a function runs, its wall time, the
memory a device has free (and whether a run fits in it), where a measurement was taken (processor,
thread count, device), and two runs timed in turns and their paired overhead.

The importer measures operators' scratch memory and times them with it
(`remat_bench.torch.calibrate`), and replay the peak of a whole schedule; both
must measure alike for a graph's workspaces to predict a replay's peak.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from remat_bench.core.simulate import overhead_pct


def sync(device: torch.device) -> None:
    """Wait for the device's queued kernels to finish (CUDA runs them asynchronously; CPU needs no wait).

    Parameters
    ----------
    device : torch.device
        The device.
    """
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(device: torch.device, fn: Callable[[], None]) -> float:
    """Wall time of ``fn``, from an idle device to an idle device.

    Parameters
    ----------
    device : torch.device
        Where ``fn`` runs its kernels.
    fn : callable
        The work, called once without arguments.

    Returns
    -------
    float
        Seconds.
    """
    sync(device)
    start = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - start


def time_ns(device: torch.device, fn: Callable[[], None]) -> int:
    """Time ``fn`` takes on ``device``, in nanoseconds: CUDA events around it on CUDA (the kernels' own
    time, waited for), else the wall clock.

    Parameters
    ----------
    device : torch.device
        Where ``fn`` runs its kernels.
    fn : callable
        The work, called once without arguments.

    Returns
    -------
    int
        Nanoseconds, at least 1.
    """
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return max(1, round(start.elapsed_time(end) * 1e6))  # elapsed_time is in ms
    begin = time.perf_counter_ns()
    fn()
    return max(1, time.perf_counter_ns() - begin)


def free_memory_bytes(device: torch.device) -> int | None:
    """Memory ``device`` has free now: CUDA's free device memory, else the machine's available memory.

    Parameters
    ----------
    device : torch.device
        The device.

    Returns
    -------
    int or None
        Bytes; None when the system does not say (`remat_bench.core.machine.available_memory_bytes`).
    """
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    from remat_bench.core.machine import available_memory_bytes

    return available_memory_bytes()


def measure_peak(device: torch.device, fn: Callable[[], None]) -> int:
    """The most bytes allocated at once while ``fn`` runs, above what was allocated when it began.

    Parameters
    ----------
    device : torch.device
        The allocator measured: CUDA's peak statistics, else the CPU allocator's (`cpu_peak_bytes`).
    fn : callable
        The work, called once without arguments.

    Returns
    -------
    int
        Bytes.
    """
    if device.type == "cuda":
        sync(device)
        torch.cuda.reset_peak_memory_stats(device)
        start = torch.cuda.memory_allocated(device)
        fn()
        sync(device)
        return int(torch.cuda.max_memory_allocated(device) - start)
    return cpu_peak_bytes(fn)


def cpu_peak_bytes(fn: Callable[[], None]) -> int:
    """Peak of the CPU allocator's running total during ``fn``, from the profiler's memory events.

    Each allocation event carries the allocator's total at that moment (taken
    under its lock), so the order of events with equal timestamps does not
    matter. The total counts memory allocated while profiling; what was
    allocated before is the baseline, read off the first event.

    Parameters
    ----------
    fn : callable
        The work, called once without arguments under the profiler.

    Returns
    -------
    int
        Bytes above the baseline; 0 when ``fn`` allocated nothing on the CPU.
    """
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
    with _quiet_stderr():
        prof.__enter__()
    try:
        fn()
    finally:
        with _quiet_stderr():
            prof.__exit__(None, None, None)
    totals: list[tuple[int, int, int]] = []
    assert prof.profiler is not None and prof.profiler.kineto_results is not None  # set by __exit__
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        event = stack.pop()
        stack.extend(event.children)
        if event.typed[0] == _EventType.Allocation:
            fields = event.typed[1]
            if fields.device.type == "cpu":
                totals.append((event.start_time_ns, fields.total_allocated, fields.alloc_size))
    if not totals:
        return 0
    totals.sort()
    start = totals[0][1] - totals[0][2]
    return int(max(total for _, total, _ in totals) - start)


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Silence the two lines Kineto prints to stderr when the profiler starts and stops."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def measured_where(device: torch.device) -> dict[str, Any]:
    """Where workspaces were measured: they hold on that kind of processor and thread count.

    Parameters
    ----------
    device : torch.device
        The device measured on.

    Returns
    -------
    dict
        ``device``, ``machine``, ``cpu_capability``, ``threads`` and ``processor``, and ``gpu`` on CUDA.
    """
    import platform

    where: dict[str, Any] = {"device": str(device), "machine": platform.machine(),
                             "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                             "threads": torch.get_num_threads(), "processor": _processor_name()}
    if device.type == "cuda":
        where["gpu"] = torch.cuda.get_device_name(device)
    return where


def _processor_name() -> str:
    """The processor's model name (Linux /proc/cpuinfo), else what the platform module says."""
    import platform

    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith(("model name", "hardware")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def no_room(device: torch.device, need: int) -> str:
    """Why ``need`` more bytes do not fit on ``device`` (over 80% of its free memory); empty when they do.

    Parameters
    ----------
    device : torch.device
    need : int
        Bytes a run would allocate on it.

    Returns
    -------
    str
        ``"<need> bytes, more than 80% of the <free> bytes free on <device>"``, or empty.
    """
    available = free_memory_bytes(device)
    if available is not None and need > 0.8 * available:
        return f"{need:,} bytes, more than 80% of the {available:,} bytes free on {device}"
    return ""


@dataclass(frozen=True)
class PairedOverhead:
    """A schedule's measured overhead over the baseline, from pairs of runs timed one after the other."""

    median_pct: float  # the median of the paired overheads, in percent
    min_pct: float
    max_pct: float
    pairs: int

    @property
    def spread(self) -> float:
        """The range of the paired overheads, max - min, in percentage points."""
        return self.max_pct - self.min_pct


def paired_overhead(schedule_s: Sequence[float], baseline_s: Sequence[float]) -> PairedOverhead:
    """The median and range of the paired overheads ``100 * (schedule_s[i] / baseline_s[i] - 1)``.

    Each pair ran back to back (`interleaved_times`), so a slow spell of the
    machine inflates both of its times and largely cancels in their ratio; the
    median of the ratios resists the pair a burst of noise hit anyway, and
    their range, min to max, says how far the pairs disagree.

    Parameters
    ----------
    schedule_s : Sequence of float
        The schedule's times, in s.
    baseline_s : Sequence of float
        The baseline's, in s, as many, pair i timed just before ``schedule_s[i]``.

    Returns
    -------
    PairedOverhead
        In percent (a pair whose baseline took no time counts as `overhead_pct` has it).

    Raises
    ------
    ValueError
        No pairs, or lists of different lengths.
    """
    if not schedule_s or len(schedule_s) != len(baseline_s):
        raise ValueError(f"paired timings need as many baseline times as schedule times, at least one: "
                         f"got {len(schedule_s)} and {len(baseline_s)}")
    paired = [overhead_pct(s, b) for s, b in zip(schedule_s, baseline_s)]
    return PairedOverhead(statistics.median(paired), min(paired), max(paired), len(paired))


def interleaved_times(device: torch.device, run_schedule: Callable[[], Callable[[], None]],
                      run_baseline: Callable[[], Callable[[], None]] | None,
                      repeats: int, on_pair: Callable[[int, float], None] | None = None
                      ) -> tuple[list[float], list[float]]:
    """Time the schedule and the baseline in turns: a warm-up of each, then ``repeats`` pairs.

    The order is baseline, schedule, baseline, schedule, ...: the two see the
    same state of the machine (caches, clock, other load) as nearly as one
    process can give them. Each run is prepared (``run_schedule()`` gives the
    function to time) before its clock starts, and timed by
    `remat_bench.torch.measure.timed`: on CUDA from an idle device to an idle
    device.

    Parameters
    ----------
    device : torch.device
        Where the runs' kernels go.
    run_schedule : callable
        Prepares one run of the schedule and returns it (a function without arguments).
    run_baseline : callable or None
        The same for the baseline; None times the schedule alone.
    repeats : int
        Pairs timed, at least 1.
    on_pair : callable or None
        Told ``(pairs done, seconds the last pair took)`` after each pair.

    Returns
    -------
    tuple of (list of float, list of float)
        The schedule's times and the baseline's (empty without a baseline), in s, in the order run.
    """
    runs = [fn for fn in (run_baseline, run_schedule) if fn is not None]
    for prepare in runs:  # warm-up: allocator pools, kernel choices, caches
        timed(device, prepare())
    times: list[list[float]] = [[] for _ in runs]
    for done in range(1, repeats + 1):
        for i, prepare in enumerate(runs):
            run = prepare()
            times[i].append(timed(device, run))
        if on_pair is not None:
            on_pair(done, sum(t[-1] for t in times))
    return (times[-1], times[0] if run_baseline is not None else [])
