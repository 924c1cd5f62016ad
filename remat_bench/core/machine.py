"""What this machine has: the memory a solver's model or a replay may still take, the cores this process may use."""

from __future__ import annotations

import math
import os


def available_memory_bytes() -> int | None:
    """Physical memory available now: Linux's MemAvailable, else the free pages the OS reports; None if
    neither is known (callers then do not refuse work on a guess).

    psutil would answer this too, but it is not among the project's dependencies for one number.

    Returns
    -------
    int or None
        Bytes; None when the system reports neither.
    """
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity (``taskset``, a batch scheduler's cpuset), lowered to
    a cgroup v2 CPU quota when one is set (a container given 2 CPUs of a 64-core host), else ``os.cpu_count``.

    ``os.cpu_count`` alone counts the host's cores, so work sized by it on a container or a pinned job starts
    more processes than can run at once, and each one's timings suffer.

    Returns
    -------
    int
        At least 1.
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        cores = os.cpu_count() or 1
    try:
        with open("/sys/fs/cgroup/cpu.max") as fh:
            quota, period = fh.read().split()[:2]
        if quota != "max":
            cores = min(cores, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError, ZeroDivisionError):
        pass
    return max(1, cores)
