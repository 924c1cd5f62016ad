"""Measuring on real tensors: the peak of the allocator while a function runs, its time, the
memory a device has free (and whether a run fits in it), where a measurement was taken (processor,
thread count, device), and two runs timed in turns with their paired overhead and its 95% interval.

Time on a shared machine. Calibration (`remat_bench.torch.calibrate`), replay and
`train` time alike, under `steady_timing`: on the CPU a fixed number of
threads (`CPU_TIMING_THREADS` unless a graph was calibrated with another), the
clock the calling thread's CPU time when that number is 1 (a run the scheduler
sets aside for another process does not count the time it waited; with more
threads, the wall clock), freed memory kept by the C allocator for reuse
(`keep_freed_memory`), and Python's garbage collector held off while a run is
timed. On CUDA, CUDA events or the wall clock from an idle device to an idle
device, as before.

The importer measures operators' scratch memory and times them with it
(`remat_bench.torch.calibrate`), and replay the peak of a whole schedule; both
must measure alike for a graph's workspaces to predict a replay's peak.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
import math
import os
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from remat_bench.core.graph import Link, Transfer
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


# Threads torch runs CPU operators on while timing, unless a graph was calibrated with another number: one
# thread is the count a shared machine cannot spoil (with two, every parallel region waits for the slower
# thread, and a thread the scheduler sets aside stalls the step), and its time is the thread's CPU time.
CPU_TIMING_THREADS = 1
# The C allocator's thresholds while timing (glibc's mallopt): blocks up to MMAP_THRESHOLD bytes come from the
# heap rather than their own mapping, and the heap is never given back to the system. Otherwise a freed block
# of more than 128 KiB is unmapped and the next one mapped afresh, and every page of it faults on first write:
# on a virtual machine that is about 2 us a page, a third of a small model's CPU step, and its noisiest part
# (docs/benchmarks.md, "Time you can trust"). PyTorch's CUDA caching allocator keeps freed blocks the same way.
MMAP_THRESHOLD = 32 * 2**20  # glibc's largest allowed value on 64-bit (HEAP_MAX_SIZE / 2)
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3  # mallopt's parameter numbers (malloc.h)
_kept: bool | None = None


def keep_freed_memory() -> bool:
    """Have the C allocator keep freed memory for reuse, once per process (glibc's mallopt; elsewhere nothing).

    Returns
    -------
    bool
        Whether the allocator was set (False off glibc: macOS, musl, Windows), as `timing_settings` records it.
    """
    global _kept
    if _kept is None:
        _kept = False
        name = ctypes.util.find_library("c")
        try:
            libc = ctypes.CDLL(name) if name else None
            mallopt = getattr(libc, "mallopt", None) if libc is not None else None
            # gnu_get_libc_version exists on glibc only: musl's mallopt accepts the calls and ignores them.
            if mallopt is not None and hasattr(libc, "gnu_get_libc_version"):
                _kept = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) and mallopt(_M_TRIM_THRESHOLD, 2**31 - 1)
                             and mallopt(_M_TOP_PAD, 64 * 2**20))
        except OSError:
            _kept = False
    return _kept


def timing_threads(device: torch.device, calibrated: int | None = None) -> int | None:
    """The thread count CPU operators are timed with: ``calibrated`` (a graph's) or `CPU_TIMING_THREADS`.

    Parameters
    ----------
    device : torch.device
        The device; on CUDA the host threads are left as they are (None).
    calibrated : int or None
        The threads a graph's costs were measured with (`graph_threads`), None when it records none.

    Returns
    -------
    int or None
        Threads to set, None on CUDA.
    """
    if device.type == "cuda":
        return None
    return calibrated if calibrated is not None and calibrated >= 1 else CPU_TIMING_THREADS


def clock_name(device: torch.device) -> str:
    """The clock `run_ns` reads on ``device`` with the threads now set: what the measurements say they used.

    Parameters
    ----------
    device : torch.device
        The device.

    Returns
    -------
    str
        ``"CUDA events"``, ``"thread CPU time"`` (CPU, one thread) or ``"wall clock"``.
    """
    if device.type == "cuda":
        return "wall clock, idle device to idle device"
    return "thread CPU time" if torch.get_num_threads() == 1 else "wall clock"


def run_ns(device: torch.device, fn: Callable[[], None]) -> int:
    """Nanoseconds a whole run of ``fn`` takes by `clock_name`'s clock (on CUDA: from an idle device to an idle
    device).

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
        return max(1, round(timed(device, fn) * 1e9))
    clock = time.thread_time_ns if torch.get_num_threads() == 1 else time.perf_counter_ns
    begin = clock()
    fn()
    return max(1, clock() - begin)


def op_ns(device: torch.device, fn: Callable[[], None]) -> int:
    """Nanoseconds one operator takes in place: CUDA events on CUDA (`time_ns`), else `run_ns`'s clock.

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
    return time_ns(device, fn) if device.type == "cuda" else run_ns(device, fn)


@contextlib.contextmanager
def steady_timing(device: torch.device, threads: int | None) -> Iterator[dict[str, Any]]:
    """Time the same way everywhere: ``threads`` CPU threads, freed memory kept, no garbage collection inside.

    Parameters
    ----------
    device : torch.device
        The device timed on.
    threads : int or None
        CPU threads for torch's operators (`timing_threads`); None leaves them as they are.

    Yields
    ------
    dict
        The settings, as results record them: ``threads``, ``clock`` (`clock_name`), ``freed_memory_kept``.
    """
    before = torch.get_num_threads()
    collecting = gc.isenabled()
    if threads is not None and threads != before:
        torch.set_num_threads(threads)
    try:
        gc.collect()
        gc.disable()  # a collection inside a timed run costs milliseconds to whichever run it falls in
        gc.freeze()  # what lives now (models, graphs, traces) is never scanned again: collections between runs
        yield {"threads": torch.get_num_threads(), "clock": clock_name(device),
               "freed_memory_kept": keep_freed_memory()}
    finally:
        gc.unfreeze()
        if collecting:
            gc.enable()
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


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


# The confidence of a measured overhead's interval.
CONFIDENCE = 0.95


@dataclass(frozen=True)
class PairedOverhead:
    """A schedule's measured overhead over the baseline, from pairs of runs timed one after the other."""

    median_pct: float  # the median of the paired overheads, in percent
    min_pct: float
    max_pct: float
    pairs: int
    low_pct: float | None = None  # the 95% interval of the median (`median_interval`); None under 6 pairs
    high_pct: float | None = None

    @property
    def spread(self) -> float:
        """The range of the paired overheads, max - min, in percentage points."""
        return self.max_pct - self.min_pct

    @property
    def half_width(self) -> float | None:
        """Half the width of the 95% interval, in points; None without one."""
        if self.low_pct is None or self.high_pct is None:
            return None
        return (self.high_pct - self.low_pct) / 2


def median_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """A distribution-free interval for the median of the population ``values`` were drawn from.

    The order statistics ``x_(k)`` and ``x_(n+1-k)`` of n values bracket the
    median with probability ``1 - 2 P(B <= k - 1)``, B binomial (n, 1/2),
    whatever the distribution (the sign-test interval); k is the largest with
    that probability at least ``confidence``. It asks nothing of the noise's
    shape, which on a shared machine has long tails.

    Parameters
    ----------
    values : Sequence of float
        Independent draws (one per timed pair).
    confidence : float
        In (0, 1).

    Returns
    -------
    tuple of (float, float) or None
        (low, high); None when there are too few values for that confidence (under 6 for 95%).
    """
    n = len(values)
    alpha = (1.0 - confidence) / 2
    # The largest k with P(B <= k) <= alpha, from the exact binomial sums (integers: no rounding).
    k, below = -1, 0
    while k + 1 < n and (below + math.comb(n, k + 1)) <= alpha * 2**n:
        k += 1
        below += math.comb(n, k)
    # the interval is [x_(k+1), x_(n-k)] (1-based)
    if k < 0:
        return None
    ordered = sorted(values)
    return ordered[k], ordered[n - 1 - k]


def paired_overhead(schedule_s: Sequence[float], baseline_s: Sequence[float]) -> PairedOverhead:
    """The median and range of the paired overheads ``100 * (schedule_s[i] / baseline_s[i] - 1)``, with the
    median's 95% interval.

    Each pair ran back to back (`interleaved_times`), so a slow spell of the
    machine inflates both of its times and largely cancels in their ratio; the
    median of the ratios resists the pair a burst of noise hit anyway, and
    `median_interval` says how well the pairs pin it down.

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
    interval = median_interval(paired) if all(math.isfinite(p) for p in paired) else None
    return PairedOverhead(statistics.median(paired), min(paired), max(paired), len(paired),
                          *(interval if interval is not None else (None, None)))


def precise_enough(precision_pts: float) -> Callable[[list[float], list[float]], bool]:
    """A stopping rule for `interleaved_times`: the 95% interval of the paired overhead is within
    +-``precision_pts`` points.

    Parameters
    ----------
    precision_pts : float
        Half the interval's width, in percentage points, at which timing stops.

    Returns
    -------
    callable
        ``enough(schedule_s, baseline_s)``.
    """
    def enough(schedule_s: list[float], baseline_s: list[float]) -> bool:
        if len(schedule_s) != len(baseline_s) or not schedule_s:
            return False
        half = paired_overhead(schedule_s, baseline_s).half_width
        return half is not None and half <= precision_pts

    return enough


def interleaved_times(device: torch.device, run_schedule: Callable[[], Callable[[], None]],
                      run_baseline: Callable[[], Callable[[], None]] | None,
                      repeats: int, on_pair: Callable[[int, float], None] | None = None, *,
                      max_repeats: int | None = None,
                      enough: Callable[[list[float], list[float]], bool] | None = None,
                      ) -> tuple[list[float], list[float]]:
    """Time the schedule and the baseline in turns: a warm-up of each, then ``repeats`` pairs or more.

    The order is baseline, schedule, baseline, schedule, ...: the two see the
    same state of the machine (caches, clock, other load) as nearly as one
    process can give them. Each run is prepared (``run_schedule()`` gives the
    function to time) before its clock starts, and timed by `run_ns` (the
    thread's CPU time on a one-thread CPU, else the wall clock; on CUDA from an
    idle device to an idle device); the garbage collector runs between runs,
    never inside one. After ``repeats`` pairs, pairs go on while ``enough``
    says no, up to ``max_repeats``.

    Parameters
    ----------
    device : torch.device
        Where the runs' kernels go.
    run_schedule : callable
        Prepares one run of the schedule and returns it (a function without arguments).
    run_baseline : callable or None
        The same for the baseline; None times the schedule alone.
    repeats : int
        Pairs timed at least, at least 1.
    on_pair : callable or None
        Told ``(pairs done, seconds the last pair took)`` after each pair.
    max_repeats : int or None
        Pairs timed at most (None: ``repeats``).
    enough : callable or None
        ``enough(schedule_s, baseline_s)``: whether the pairs so far suffice (`precise_enough`).

    Returns
    -------
    tuple of (list of float, list of float)
        The schedule's times and the baseline's (empty without a baseline), in s, in the order run.
    """
    runs = [fn for fn in (run_baseline, run_schedule) if fn is not None]
    for prepare in runs:  # warm-up: allocator pools, kernel choices, caches
        run_ns(device, prepare())
    times: list[list[float]] = [[] for _ in runs]
    # Alone, the schedule has no overhead to pin down: exactly ``repeats`` runs.
    most = max(repeats, max_repeats or repeats) if run_baseline is not None else repeats
    done = 0
    while done < most:
        for i, prepare in enumerate(runs):
            run = prepare()
            gc.collect()
            times[i].append(run_ns(device, run) / 1e9)
        done += 1
        if on_pair is not None:
            on_pair(done, sum(t[-1] for t in times))
        if done >= repeats and (enough is None or enough(times[-1], times[0] if run_baseline is not None else [])):
            break
    return (times[-1], times[0] if run_baseline is not None else [])


# The copies `measure_link` times: a large one for the bandwidth (torchtitan measures with 512 MB pinned
# copies; 256 MiB reaches the link's rate on PCIe and NVLink-C2C alike) and a small one for the latency.
LINK_BYTES = 256 * 2**20
LINK_SMALL_BYTES = 4096
LINK_REPEATS = 5


def measure_link(device: torch.device, nbytes: int = LINK_BYTES, repeats: int = LINK_REPEATS) -> Transfer:
    """The host link of a CUDA device, measured: pinned host memory copied each way on a side stream.

    Each direction's latency is the median time of a `LINK_SMALL_BYTES` copy, and its bandwidth the bytes
    of an ``nbytes`` copy over its median time less that latency; each direction is timed alone (a copy in
    beside a copy out can be much slower on some links, which the simulator's independent engines do not
    model).

    Parameters
    ----------
    device : torch.device
        A CUDA device.
    nbytes : int
        The large copy's size.
    repeats : int
        Copies timed each way (after one untimed).

    Returns
    -------
    Transfer
        In bytes per ns and ns, as a graph timed in ns records it.
    """
    stream = torch.cuda.Stream(device=device)

    def copy_ns(src: torch.Tensor, dst: torch.Tensor) -> float:
        times = []
        for _ in range(repeats + 1):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with torch.cuda.stream(stream):
                start.record(stream)
                dst.copy_(src, non_blocking=True)
                end.record(stream)
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e6)
        return statistics.median(times[1:])

    links = []
    for direction in ("device_to_host", "host_to_device"):
        sizes = {}
        for size in (LINK_SMALL_BYTES, nbytes):
            host = torch.empty(size, dtype=torch.uint8, pin_memory=True)
            dev = torch.empty(size, dtype=torch.uint8, device=device)
            sizes[size] = copy_ns(dev, host) if direction == "device_to_host" else copy_ns(host, dev)
            del host, dev
        latency = sizes[LINK_SMALL_BYTES]
        links.append(Link(nbytes / max(sizes[nbytes] - latency, 1.0), latency))
    name = torch.cuda.get_device_name(device)
    return Transfer(links[0], links[1], f"measured on {name}: pinned copies of {nbytes} bytes, median of {repeats}")
