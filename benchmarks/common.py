"""Shared helpers for benchmarks: the machine description and table output."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from remat_bench.app import datasets

ROOT = Path(__file__).resolve().parents[1]
console = Console(highlight=False, soft_wrap=True)


def paper(name: str) -> Path:
    """A published graph's path (`remat_bench.app.datasets` finds it); one sentence and exit 2 when missing."""
    try:
        return datasets.locate(name)
    except datasets.DatasetError as exc:
        console.print(f"[bold red]error:[/] {exc}")
        sys.exit(2)


def machine() -> str:
    """One line: date, cores, CPU model, Python."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{_dt.date.today().isoformat()}, {os.cpu_count()} cores ({model}), "
            f"Python {platform.python_version()}")


def best_time(fn: Callable[[], Any], repeat: int = 5) -> tuple[float, Any]:
    """Least wall time over ``repeat`` runs (the least noisy figure on a shared machine)."""
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def show(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Print a table for the terminal and the same as Markdown, ready for docs/benchmarks.md."""
    table = Table(title=title)
    for col in columns:
        table.add_column(col)
    for row in rows:
        table.add_row(*[str(x) for x in row])
    console.print(table)
    console.print(f"\n### {title}\n\n{machine()}\n")
    console.print("| " + " | ".join(columns) + " |")
    console.print("|" + " --- |" * len(columns))
    for row in rows:
        console.print("| " + " | ".join(str(x) for x in row) + " |")
    console.print()


class Rows(list):
    """Table rows that are also printed as each one is done: long benchmarks show progress."""

    def append(self, row: Sequence[Any]) -> None:
        super().append(row)
        console.log(" | ".join(str(x) for x in row)[:240])
