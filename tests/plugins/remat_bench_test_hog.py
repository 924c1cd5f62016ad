"""``hog``: a method whose module cannot be loaded under a memory cap (a test-only method, `tests.plugins`).

Loaded under an address-space cap (``RLIMIT_AS``), as a sweep's worker loads the method once it has
set the run's ``memory_limit``, the module allocates twice the cap: the run fails outside the
method, as one whose solver library is too large to load under the cap does. Loaded without a cap
(the test's own process, reading the config), it allocates nothing, and is greedy.
"""

from __future__ import annotations

import resource
from typing import Any

from remat_bench.core.graph import Graph, Number
from remat_bench.methods.base import Method, MethodResult
from remat_bench.methods.greedy import Greedy

_CAP, _ = resource.getrlimit(resource.RLIMIT_AS)
if _CAP != resource.RLIM_INFINITY:
    _BALLAST = bytearray(2 * _CAP)


class Hog(Method):
    name = "hog"
    description = "greedy, whose module allocates twice the memory cap it is loaded under (tests only)"
    search_space = Greedy.search_space

    def solve(self, graph: Graph, budget: Number | None, time_limit: float | None,
              **params: Any) -> MethodResult:
        greedy = Greedy()
        greedy.context = self.context
        return greedy.solve(graph, budget, time_limit, **params)
