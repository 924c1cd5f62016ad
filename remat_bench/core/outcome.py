"""What a method's run comes to: its status and its result (docs/design.md section 6).

`Status` is what users see (`solve`'s status, the results table). Kept apart from
it, as Pyomo keeps TerminationCondition apart from SolutionStatus, `Termination`
says why the solver stopped: a feasible schedule may come from a search that
converged on its own criteria or from one cut short by the time limit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from remat_bench.core.graph import Number
from remat_bench.core.schedule import Schedule


class Status(StrEnum):
    """How a run ended. The first six come from methods; the rest from the pipeline and sweeps."""

    OPTIMAL = "optimal"  # proven best in the method's own schedule space
    FEASIBLE = "feasible"  # a schedule within budget, not proven best
    INFEASIBLE = "infeasible"  # proven: no schedule in the method's space fits
    NO_SOLUTION = "no_solution"  # a limit was reached (or a heuristic gave up) with none found
    UNSUPPORTED = "unsupported"  # the method does not apply to this graph
    ERROR = "error"  # the method failed; the message says how
    OVER_BUDGET = "over_budget"  # the simulator measured a peak above the budget
    TIMEOUT = "timeout"  # killed past the hard time limit (sweeps)
    OOM = "oom"  # killed past the memory cap (sweeps)

    def __str__(self) -> str:
        return self.value

    @property
    def found_schedule(self) -> bool:
        return self in (Status.OPTIMAL, Status.FEASIBLE)


class Termination(StrEnum):
    """Why a method stopped, whatever it found: one vocabulary for methods, the any-order bound, the
    MILP layer, child processes and sweeps (Pyomo's TerminationCondition, in this project's words)."""

    PROVEN = "proven"  # its answer is proven: optimal or infeasible (in its space), or it met a goal
    CONVERGED = "converged"  # it ran to its end without a proof: a heuristic's or a DP's last step
    TIME_LIMIT = "time_limit"  # the time limit cut it short
    INTERRUPTED = "interrupted"  # Ctrl-C cut it short
    RESOURCE_LIMIT = "resource_limit"  # a model too large, memory, or a search-size cap
    NOT_APPLICABLE = "not_applicable"  # it does not apply to this graph or budget
    ERROR = "error"  # it failed
    UNKNOWN = "unknown"  # it did not say


@dataclass
class MethodResult:
    """What a method returns; the pipeline scores ``schedule`` with the simulator."""

    status: Status
    schedule: Schedule | None = None
    objective: Number | None = None  # the method's own duration, before clean-up
    lower_bound: Number | None = None  # valid for the method's own schedule space
    solve_time_s: float = 0.0
    stats: dict[str, Any] = field(default_factory=dict)
    message: str = ""
    termination: Termination = Termination.UNKNOWN
