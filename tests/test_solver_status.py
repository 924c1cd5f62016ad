"""What the solvers' own statuses mean here: HiGHS's model status (`toolkit/milp.py`) and CP-SAT's
(`toolkit/cp_sat.py`), each mapped once to a solution status and a termination."""

from __future__ import annotations

import highspy
import numpy as np
import pytest
import scipy.sparse as sp
from ortools.sat.python import cp_model

from remat_bench.core.control import request_interrupt, reset_interrupt
from remat_bench.core.outcome import SolutionStatus, Termination
from remat_bench.toolkit import cp_sat
from remat_bench.toolkit.milp import SparseModel, highs_status, solve_milp

H = highspy.HighsModelStatus


@pytest.mark.parametrize("status, has_x, expected", [
    (H.kOptimal, True, ("optimal", "proven")),
    (H.kInfeasible, False, ("infeasible", "proven")),
    (H.kObjectiveTarget, True, ("feasible", "proven")),  # the goal it was given is met
    (H.kTimeLimit, True, ("feasible", "time_limit")),
    (H.kTimeLimit, False, ("no_solution", "time_limit")),
    (H.kInterrupt, True, ("feasible", "interrupted")),
    (H.kIterationLimit, False, ("no_solution", "resource_limit")),
    (H.kSolveError, False, ("no_solution", "error")),
    (H.kUnknown, False, ("no_solution", "unknown")),
])
def test_highs_model_statuses(status, has_x, expected):
    assert highs_status(status, has_x) == expected


def knapsack_model() -> SparseModel:
    """max 5a + 4b + 3c subject to 2a + 3b + c <= 4 (as a minimisation): optimum -8 at a = c = 1, b = 0."""
    return SparseModel(cost=np.array([-5.0, -4.0, -3.0]), lower=np.zeros(3), upper=np.ones(3),
                       integer=np.ones(3, dtype=bool), A=sp.csr_matrix(np.array([[2.0, 3.0, 1.0]])),
                       row_lower=np.array([-np.inf]), row_upper=np.array([4.0]))


def test_highs_says_proven_for_an_optimum_and_for_a_target_met():
    sol = solve_milp(knapsack_model())
    assert (sol.solution_status, sol.termination, sol.objective) == (SolutionStatus.OPTIMAL, Termination.PROVEN, -8)
    # A 300-item knapsack with a target any one item meets: HiGHS stops at its first solution, the goal met.
    rng = np.random.default_rng(0)
    weight, value = rng.integers(10, 100, 300).astype(float), rng.integers(10, 100, 300).astype(float)
    larger = SparseModel(cost=-value, lower=np.zeros(300), upper=np.ones(300), integer=np.ones(300, dtype=bool),
                         A=sp.csr_matrix(weight[None, :]), row_lower=np.array([-np.inf]),
                         row_upper=np.array([weight.sum() / 3]))
    met = solve_milp(larger, options={"objective_target": -1.0})
    assert met.message == "Target for objective reached"
    assert (met.solution_status, met.termination) == (SolutionStatus.FEASIBLE, Termination.PROVEN)


def test_a_model_highs_would_crash_on_is_not_run_and_says_so():
    model = knapsack_model()
    model.A = sp.csr_matrix(np.array([[1.0, 3e11, 1.0]]))
    sol = solve_milp(model)
    assert (sol.solution_status, sol.termination) == (SolutionStatus.NO_SOLUTION, Termination.RESOURCE_LIMIT)
    assert sol.message.startswith("the MILP was not run")


def test_cp_sat_statuses():
    assert cp_sat.termination(cp_model.OPTIMAL) is Termination.PROVEN
    assert cp_sat.termination(cp_model.INFEASIBLE) is Termination.PROVEN
    assert cp_sat.termination(cp_model.FEASIBLE) is Termination.TIME_LIMIT
    assert cp_sat.termination("UNKNOWN") is Termination.TIME_LIMIT
    assert cp_sat.termination(cp_model.MODEL_INVALID) is Termination.ERROR
    request_interrupt()
    try:
        assert cp_sat.termination(cp_model.FEASIBLE) is Termination.INTERRUPTED
    finally:
        reset_interrupt()
