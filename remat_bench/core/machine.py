"""What this machine has: the memory a solver's model or a replay may still take."""

from __future__ import annotations

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
