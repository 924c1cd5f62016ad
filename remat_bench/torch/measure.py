"""Measuring on real tensors: the peak of the allocator while a function runs, its wall time, the
memory a device has free, and where a measurement was taken (processor, thread count, device).

The importer measures operators' scratch memory and times them with it
(`remat_bench.torch.calibrate`), and replay the peak of a whole schedule; both
must measure alike for a graph's workspaces to predict a replay's peak.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch


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
