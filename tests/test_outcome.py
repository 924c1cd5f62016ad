"""What a run comes to: a solution status and a termination kept apart, and the status users see
derived from them in one place (`Status.of`, docs/design.md section 6)."""

from __future__ import annotations

import time

import pytest

from remat_bench.app.evaluate import evaluate
from remat_bench.core.baseline import baseline_schedule
from remat_bench.core.budget import budget_of
from remat_bench.core.control import Deadline, request_interrupt, reset_interrupt
from remat_bench.core.errors import ModelTooLargeError
from remat_bench.core.graph_io import load_graph
from remat_bench.core.outcome import (
    VERDICTS,
    MethodResult,
    SolutionStatus,
    Status,
    Termination,
    cut_short,
    search_ended,
)
from remat_bench.core.schedule import ScheduleBuilder
from remat_bench.methods.base import Method
from tests.helpers import SHIPPED

S, T = SolutionStatus, Termination


@pytest.mark.parametrize("solution, termination, expected", [
    (S.OPTIMAL, T.PROVEN, "optimal"),
    (S.FEASIBLE, T.TIME_LIMIT, "feasible"),
    (S.FEASIBLE, T.ERROR, "feasible"),  # a schedule found before the solver failed still counts
    (S.INFEASIBLE, T.PROVEN, "infeasible"),
    (S.NO_SOLUTION, T.TIME_LIMIT, "no_solution"),
    (S.NO_SOLUTION, T.CONVERGED, "no_solution"),  # a heuristic that gave up
    (S.NO_SOLUTION, T.RESOURCE_LIMIT, "no_solution"),  # a refusal for size
    (S.NO_SOLUTION, T.ERROR, "error"),
    (S.NO_SOLUTION, T.NOT_APPLICABLE, "unsupported"),
])
def test_the_status_users_see_from_what_was_found_and_why_it_stopped(solution, termination, expected):
    assert Status.of(solution, termination) == expected


def test_a_verdict_wins_whatever_the_method_said_and_only_verdicts_are_accepted():
    assert [Status.of(S.OPTIMAL, T.PROVEN, v).value for v in VERDICTS] == \
        ["over_budget", "error", "unsupported", "oom", "timeout"]
    with pytest.raises(ValueError, match="not a verdict"):
        Status.of(S.NO_SOLUTION, T.ERROR, Status.FEASIBLE)


def test_every_method_result_says_why_it_stopped():
    with pytest.raises(TypeError, match="termination"):
        MethodResult(SolutionStatus.FEASIBLE)  # type: ignore[call-arg]
    answer = MethodResult(SolutionStatus.NO_SOLUTION, termination=Termination.NOT_APPLICABLE)
    assert answer.status is Status.UNSUPPORTED


def test_a_search_is_cut_short_only_where_a_poll_found_its_deadline_passed():
    deadline = Deadline(0.0)
    time.sleep(0.01)
    assert search_ended(deadline) is Termination.CONVERGED  # passed, but nobody stopped for it
    assert deadline.expired() and deadline.ran_out
    assert search_ended(deadline) is Termination.TIME_LIMIT
    request_interrupt()
    try:
        assert cut_short() is Termination.INTERRUPTED and search_ended(deadline) is Termination.INTERRUPTED
    finally:
        reset_interrupt()
    assert search_ended(Deadline(None)) is Termination.CONVERGED


# ---------------------------------------------------------------------- the evaluation's verdicts

class TooLarge(Method):
    name = "too-large"

    def solve(self, graph, budget, time_limit, **params):
        raise ModelTooLargeError("a model of 10 GiB, more than the 1 GiB available")


class OutOfMemory(Method):
    name = "out-of-memory"

    def solve(self, graph, budget, time_limit, **params):
        raise MemoryError


class Broken(Method):
    name = "broken"

    def solve(self, graph, budget, time_limit, **params):
        raise RuntimeError("boom")


class Invalid(Method):
    name = "invalid"

    def solve(self, graph, budget, time_limit, **params):
        steps = ScheduleBuilder()
        steps.compute(graph.n - 1)  # the last node before its inputs
        return MethodResult(SolutionStatus.FEASIBLE, steps.build(), termination=Termination.CONVERGED)


class Baseline(Method):
    """Claims the baseline schedule fits, whatever the budget."""

    name = "claims-baseline"

    def solve(self, graph, budget, time_limit, **params):
        return MethodResult(SolutionStatus.FEASIBLE, baseline_schedule(graph), termination=Termination.CONVERGED)


@pytest.mark.parametrize("solver, status, termination", [
    (TooLarge, "unsupported", "resource_limit"),
    (OutOfMemory, "oom", "resource_limit"),
    (Broken, "error", "error"),
    (Invalid, "error", "converged"),  # the method's word on why it stopped; the judge's on what it returned
    (Baseline, "over_budget", "converged"),
])
def test_the_evaluation_judges_what_a_method_raises_or_returns(solver, status, termination):
    g = load_graph(SHIPPED / "chain-16-train.json")
    r = evaluate(g, solver, budget_of(14, g), 10, bound=False)
    assert (r.status.value, r.termination.value) == (status, termination), r.message
