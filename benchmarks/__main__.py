"""`python -m benchmarks [name ...]`: run the named benchmarks (default: all), printing tables."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path

from benchmarks.common import console, machine


def main(argv: list[str]) -> None:
    here = Path(__file__).parent
    available = sorted(m.name[len("bench_"):] for m in pkgutil.iter_modules([str(here)])
                       if m.name.startswith("bench_"))
    wanted = argv or available
    unknown = [w for w in wanted if w not in available]
    if unknown:
        console.print(f"unknown benchmark(s): {', '.join(unknown)}; available: {', '.join(available)}")
        sys.exit(2)
    console.print(f"[bold]remat-bench benchmarks[/] on {machine()}")
    for name in wanted:
        console.rule(name)
        importlib.import_module(f"benchmarks.bench_{name}").main()


if __name__ == "__main__":
    main(sys.argv[1:])
