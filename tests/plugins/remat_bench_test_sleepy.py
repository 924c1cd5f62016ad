"""``sleepy``: greedy, after a sleep a test asks for (a test-only method, `tests.plugins`).

$SLEEPY_SECONDS, read when the method runs in the sweep's worker, makes it sleep that long before
solving: a run that overstays its time limit, or one to kill mid-way. A test sets it for the sweep
that must hang and leaves it out for the one that resumes it (then ``sleepy`` is greedy). With
$SLEEPY_PIDS=DIR as well, the run first creates DIR/<its pid>, so that the test knows which
process to kill.
"""

from __future__ import annotations

import os
import time
from typing import Any

from remat_bench.core.graph import Graph, Number
from remat_bench.methods.base import Method, MethodResult
from remat_bench.methods.greedy import Greedy

SECONDS = "SLEEPY_SECONDS"
PIDS = "SLEEPY_PIDS"


class Sleepy(Method):
    name = "sleepy"
    description = "greedy, after sleeping $SLEEPY_SECONDS (tests only)"
    search_space = Greedy.search_space

    def solve(self, graph: Graph, budget: Number | None, time_limit: float | None,
              **params: Any) -> MethodResult:
        seconds = os.environ.get(SECONDS)
        if seconds is not None:
            # On stdout, as a solver logs its progress: what a run printed before it was killed must be in
            # its log (tests look for this line). Printed before the pid is written: once a test sees the
            # pid, the line is out.
            print(f"test hook: sleeping {seconds} s before solving")
            if os.environ.get(PIDS):
                with open(os.path.join(os.environ[PIDS], str(os.getpid())), "w"):
                    pass
            time.sleep(float(seconds))
        greedy = Greedy()
        greedy.context = self.context
        return greedy.solve(graph, budget, time_limit, **params)
