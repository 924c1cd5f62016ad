"""Peak shaving: the input order with a recomputation inserted wherever memory peaks.

A heuristic of this project (the warm start `checkmate`, `moccasin` and `monet` compute for
themselves as the candidate ``shaved``, `remat_bench.methods.candidates`), run on its own so that
its schedule can be set beside the others' and offered by ``auto`` to every exact member.

1. **Shave** (`remat_bench.toolkit.improve.shave_peaks`): start from the input order, every value
   freed after its last use. At the first computation where memory peaks, a value x resident there
   but not read there is dropped after its last use before the peak and computed again just before
   its next reader, at its own place among that reader's recomputations (the schedule keeps the input
   order's first computations: Checkmate's staged space). The candidates are tried the most memory per
   unit of duration first; the first whose sequence lowers the peak (or the number of computations at
   it) is kept. Repeat until the peak is within the budget or nothing helps.
2. **Undo** (`remat_bench.toolkit.improve.drop_recomputations`): the early recomputations can become
   needless once later ones are in; each is undone, the most expensive first, where keeping the value
   still fits the budget.

Each sequence is scored by `remat_bench.toolkit.orders.sequence_memory`, the simulator's memory
at each computation without building the schedule (docs/benchmarks.md, "auto on families it was
never tuned on", gives the time it saves). Statuses: ``feasible`` when the peak reaches the budget, else ``no_solution``
with the lowest peak shaving reached; never ``optimal`` (no bound of its own); no ``min``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from remat_bench.core.budget import memory_text
from remat_bench.core.cleanup import place_frees
from remat_bench.core.graph import Graph, Number
from remat_bench.core.simulate import simulate
from remat_bench.methods.base import (
    Deadline,
    Membership,
    Method,
    MethodResult,
    Param,
    Role,
    SolutionStatus,
    search_ended,
)
from remat_bench.toolkit.improve import drop_recomputations, shave_peaks

# The undo step's share of the time shaving leaves: it only shortens a schedule that already fits.
UNDO_SHARE = 0.5


class Shave(Method):
    name = "shave"
    search_space = "input-order stages with recomputations inserted where memory peaks"
    description = ("peak shaving: the input order with a recomputation inserted wherever memory peaks, "
                   "then the ones the budget does not need undone")
    supports_min = False
    params = (
        Param("max_copies", int, 0, "the most computations of one value (0: no cap)", minimum=0, maximum=1_000_000),
    )
    # Early among the fast members, with three times an equal share of their time: on graphs without a
    # backward pass, where the checkpoint planners do not apply, its schedule is the start the exact members
    # lack (moccasin's order-free model finds nothing without one within a short limit).
    member = Membership(Role.FAST, rank=3, weight=3.0)

    @classmethod
    def input_order(cls, params: dict[str, Any]) -> str | None:
        return "kept"

    def solve(self, graph: Graph, budget: Number | None, time_limit: float | None,
              **params: Any) -> MethodResult:
        assert budget is not None  # supports_min is False: the pipeline never asks for min
        deadline = Deadline(time_limit)
        max_copies = params.get("max_copies") or None
        shaved = shave_peaks(graph, np.arange(graph.n, dtype=np.int64), budget, deadline, max_copies=max_copies)
        shaved_sim = simulate(graph, place_frees(graph, shaved, np.zeros(len(shaved), dtype=np.int64)))
        stats: dict[str, Any] = {"shaved_peak": shaved_sim.peak, "recomputations_shaved": shaved_sim.recomputations}
        if shaved_sim.peak > budget:
            return MethodResult(
                SolutionStatus.NO_SOLUTION, solve_time_s=deadline.elapsed(), stats=stats,
                termination=search_ended(deadline),
                message=(f"shaving reached a peak of {memory_text(shaved_sim.peak, graph)}, above the budget "
                         f"{memory_text(budget, graph)}"))
        left = deadline.remaining()
        undone = drop_recomputations(graph, shaved, budget, Deadline(None if left is None else UNDO_SHARE * left))
        schedule = place_frees(graph, undone, np.zeros(len(undone), dtype=np.int64))
        sim = simulate(graph, schedule)
        if not sim.valid or sim.peak > budget or sim.duration > shaved_sim.duration:
            schedule, sim = place_frees(graph, shaved, np.zeros(len(shaved), dtype=np.int64)), shaved_sim
        stats["recomputations"] = sim.recomputations
        return MethodResult(SolutionStatus.FEASIBLE, schedule, objective=sim.duration, solve_time_s=deadline.elapsed(),
                            stats=stats, termination=search_ended(deadline))
