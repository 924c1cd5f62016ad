"""What a method's run comes to: what it found, why it stopped, and the status users see
(docs/design.md section 6).

Kept apart, as Pyomo keeps SolutionStatus apart from TerminationCondition:
`SolutionStatus` says what a method found (optimal, feasible, infeasible, no_solution),
`Termination` why it stopped (proven, converged, time_limit, ...): a feasible schedule may
come from a search that converged on its own criteria or from one cut short by the time
limit. Every method sets both from what its solver says (CP-SAT's and HiGHS's statuses, a
heuristic's end). `Status`, what users see (`solve`'s status, the results table), is derived
from the two and the judge's verdict in one place, `Status.of`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from remat_bench.core.control import Deadline, interrupted
from remat_bench.core.graph import Number
from remat_bench.core.schedule import Schedule


class SolutionStatus(StrEnum):
    """What a method found, in its own schedule space (Pyomo's SolutionStatus)."""

    OPTIMAL = "optimal"  # proven best in the method's own schedule space
    FEASIBLE = "feasible"  # a schedule within budget, not proven best
    INFEASIBLE = "infeasible"  # proven: no schedule in the method's space fits
    NO_SOLUTION = "no_solution"  # no schedule within budget (a schedule above it may come with it)

    def __str__(self) -> str:
        return self.value

    @property
    def found_schedule(self) -> bool:
        return self in (SolutionStatus.OPTIMAL, SolutionStatus.FEASIBLE)


class Termination(StrEnum):
    """Why a method stopped, whatever it found: one vocabulary for methods, the any-order bound, the
    MILP layer, child processes and sweeps (Pyomo's TerminationCondition, in this project's words)."""

    PROVEN = "proven"  # its answer is proven: optimal or infeasible (in its space), or it met a goal
    CONVERGED = "converged"  # it ran to its end without a proof: a heuristic's or a DP's last step
    TIME_LIMIT = "time_limit"  # the time limit cut it short
    INTERRUPTED = "interrupted"  # Ctrl-C (or its caller) cut it short
    RESOURCE_LIMIT = "resource_limit"  # a model too large, memory, or a search-size cap
    NOT_APPLICABLE = "not_applicable"  # it does not apply to this graph or budget
    ERROR = "error"  # it failed
    UNKNOWN = "unknown"  # it did not say (a solver status this project does not know)

    def __str__(self) -> str:
        return self.value


class Status(StrEnum):
    """What users see of a run (`solve`'s status, the results table): the first four are a method's
    `SolutionStatus`; the rest come from its termination or from the judge (`Status.of`)."""

    OPTIMAL = "optimal"  # proven best in the method's own schedule space
    FEASIBLE = "feasible"  # a schedule within budget, not proven best
    INFEASIBLE = "infeasible"  # proven: no schedule in the method's space fits
    NO_SOLUTION = "no_solution"  # a limit was reached (or a heuristic gave up) with none found
    UNSUPPORTED = "unsupported"  # the method does not apply to this graph
    ERROR = "error"  # the method failed; the message says how
    OVER_BUDGET = "over_budget"  # the simulator measured a peak above the budget
    TIMEOUT = "timeout"  # killed past the hard time limit (sweeps)
    OOM = "oom"  # ran out of memory (a MemoryError, or killed past the sweep's memory cap)

    def __str__(self) -> str:
        return self.value

    @property
    def found_schedule(self) -> bool:
        return self in (Status.OPTIMAL, Status.FEASIBLE)

    @classmethod
    def of(cls, solution: SolutionStatus, termination: Termination, verdict: Status | None = None) -> Status:
        """The status users see, from what the method found, why it stopped, and the judge's verdict.

        ``verdict`` is what the run was judged to be whatever the method said (one of `VERDICTS`):
        ``over_budget`` (the simulator measured a peak above the budget), ``error`` (an invalid
        schedule, a contradicted bound, a child process stopped past its limit), ``unsupported`` (a
        model the method measured as too large), ``oom`` (a MemoryError, the sweep's memory cap),
        ``timeout`` (the sweep killed it). Without one: a method that found no schedule and failed is
        ``error``, one that does not apply ``unsupported``; otherwise what it found.

        Parameters
        ----------
        solution : SolutionStatus
            What the method found.
        termination : Termination
            Why it stopped.
        verdict : Status or None
            The judge's verdict, one of `VERDICTS`; None when the judge has none.

        Returns
        -------
        Status
        """
        if verdict is not None:
            if verdict not in VERDICTS:
                raise ValueError(f"{verdict!r} is not a verdict (one of {', '.join(VERDICTS)})")
            return verdict
        if solution is SolutionStatus.NO_SOLUTION:
            if termination is Termination.ERROR:
                return cls.ERROR
            if termination is Termination.NOT_APPLICABLE:
                return cls.UNSUPPORTED
        return cls(solution.value)


# The statuses a judge gives whatever the method said (`Status.of`).
VERDICTS = (Status.OVER_BUDGET, Status.ERROR, Status.UNSUPPORTED, Status.OOM, Status.TIMEOUT)


def cut_short() -> Termination:
    """Why a search stopped before its end: Ctrl-C (which also ends every `Deadline`), else its time limit.

    Returns
    -------
    Termination
        interrupted after Ctrl-C, time_limit otherwise.
    """
    return Termination.INTERRUPTED if interrupted() else Termination.TIME_LIMIT


def search_ended(deadline: Deadline) -> Termination:
    """Why a search that polls ``deadline`` stopped: cut short when a poll found the deadline passed
    (`Deadline.ran_out`: the poller stopped or skipped work there), else it ran to its end.

    Parameters
    ----------
    deadline : Deadline
        The deadline the search polled.

    Returns
    -------
    Termination
        `cut_short`'s answer when a poll found it passed, converged otherwise.
    """
    return cut_short() if deadline.ran_out else Termination.CONVERGED


@dataclass
class MethodResult:
    """What a method returns; the evaluation scores ``schedule`` with the simulator.

    ``termination`` has no default: every method says why it stopped.
    """

    solution_status: SolutionStatus
    schedule: Schedule | None = None
    objective: Number | None = None  # the method's own duration, before clean-up
    lower_bound: Number | None = None  # valid for the method's own schedule space
    solve_time_s: float = 0.0
    stats: dict[str, Any] = field(default_factory=dict)
    message: str = ""
    termination: Termination = field(kw_only=True)

    @property
    def status(self) -> Status:
        """The status users would see of this answer before it is judged (`Status.of`)."""
        return Status.of(self.solution_status, self.termination)
