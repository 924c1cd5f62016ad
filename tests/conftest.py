"""Published graphs: tests that need them are skipped when they are not here, except under CI.

`tests.helpers.paper_graph` skips a test whose published graph is missing,
with one reason (`PAPER_MISSING`). Under ``CI=true`` a missing graph is a
failure of the whole run before any test starts, so CI cannot pass by
skipping; everywhere else the summary says how many tests were skipped and
how to fetch the graphs.
"""

from __future__ import annotations

import os
import tempfile

# Bounds are cached on disk (remat_bench.toolkit.bound_cache.BoundCache); the suite keeps its own, empty at
# the start, so that no run depends on what an earlier one left in the user's cache. Set before
# the package is imported: the process's cache reads it then, and child processes inherit it.
os.environ["REMAT_BENCH_BOUND_CACHE"] = tempfile.mkdtemp(prefix="remat-bench-test-bounds-")
# Operator costs measured by PyTorch imports likewise (remat_bench.torch.calibrate.CostCache): one file for the
# session, so that the imports of one test run share what they measured, and no user's cache is read or written.
os.environ["REMAT_BENCH_COST_CACHE"] = os.path.join(tempfile.mkdtemp(prefix="remat-bench-test-costs-"), "op-costs.json")

# Tables are as wide on every machine: rich takes the width from COLUMNS, else from the terminal the tests run in
# (80 columns cut the table cells the tests read), and pytest-xdist's workers inherit COLUMNS=80.
os.environ["COLUMNS"] = "120"

import pytest

from remat_bench.app import datasets
from tests.helpers import PAPER_MISSING


def _on_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def pytest_sessionstart(session: pytest.Session) -> None:
    missing = datasets.missing()
    if missing and _on_ci():
        raise pytest.UsageError(
            f"CI=true, and the published graphs {', '.join(missing)} are not on this machine (looked in "
            f"{', '.join(str(p) for p in datasets.search_path())}): {datasets.FETCH_HINT}, or set PAPER_GRAPHS"
        )


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    skipped = terminalreporter.stats.get("skipped", [])
    for_paper = [r for r in skipped if PAPER_MISSING in str(r.longrepr)]
    if for_paper:
        terminalreporter.write_line(
            f"{len(for_paper)} tests skipped: {PAPER_MISSING} (or set PAPER_GRAPHS to a folder holding them)",
            yellow=True, bold=True,
        )
    from tests import test_bad_input

    tried = test_bad_input.TRIED["inputs"]
    if tried:
        failed = [r for r in terminalreporter.stats.get("failed", []) if "test_bad_input" in r.nodeid]
        verdict = "none gave a traceback, a hang (60 s each) or more than one sentence" if not failed else \
            f"{len(failed)} failed (see above)"
        terminalreporter.write_line(f"bad-input corpus: {tried} inputs tried, {verdict}")
    others = [r for r in skipped if r not in for_paper]
    if others:
        terminalreporter.write_line(f"{len(others)} tests skipped for other reasons (see above)", red=True)
