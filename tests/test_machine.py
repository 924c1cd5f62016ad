"""What the machine has: the memory available, read as Linux reports it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from remat_bench.core.machine import available_memory_bytes


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MemAvailable is Linux's")
def test_available_memory_is_linuxs_mem_available():
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            reported = int(line.split()[1]) * 1024
    # The two reads are moments apart on a shared machine: within 256 MiB of each other.
    assert abs(available_memory_bytes() - reported) < 256 * 2**20


def test_without_proc_the_os_free_pages_answer(monkeypatch):
    import builtins
    import os

    real_open = builtins.open

    def no_proc(path, *args, **kwargs):
        if str(path) == "/proc/meminfo":
            raise FileNotFoundError(path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", no_proc)
    monkeypatch.setattr(os, "sysconf", lambda name: {"SC_AVPHYS_PAGES": 1000, "SC_PAGE_SIZE": 4096}[name])
    assert available_memory_bytes() == 4_096_000

    def unknown(name):
        raise ValueError(name)

    monkeypatch.setattr(os, "sysconf", unknown)
    assert available_memory_bytes() is None
