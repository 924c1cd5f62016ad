"""What the MILP methods (checkmate, monet) declare alike, and how it reaches the solver.

Both take the same solver parameters (`solver_params`: ``backend``, ``threads``, ``mip_gap``,
``seed``) and hand them to `remat_bench.toolkit.milp.solve_milp` the same way (`solve`): one
place maps them onto the solver's own names, as qpbenchmark's solver settings do. A solver's
answer that holds no point is the same result for both (`unsolved`): infeasible where the
solver proved it, else no solution, saying why the solver stopped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from remat_bench.core.control import Deadline
from remat_bench.core.graph import Number
from remat_bench.core.outcome import MethodResult, SolutionStatus, Termination
from remat_bench.methods.base import Param
from remat_bench.toolkit.milp import Incumbent, MilpSolution, SparseModel, parse_backend, solve_milp


def solver_params(gap_note: str = "") -> tuple[Param, ...]:
    """The solver parameters a MILP method declares, in the order `remat-bench methods` lists them.

    Parameters
    ----------
    gap_note : str
        Why the method's ``mip_gap`` defaults to 0, added to its help.

    Returns
    -------
    tuple of Param
        ``backend``, ``threads``, ``mip_gap`` and ``seed``.
    """
    note = f": {gap_note}" if gap_note else ""
    return (
        Param("backend", str, "highs", "highs, or pulp:NAME for any PuLP solver (pulp:PULP_CBC_CMD, pulp:GUROBI_CMD)",
              check=parse_backend),
        Param("threads", int, 0, "solver threads (0: the solver's default)", minimum=0, maximum=1024),
        Param("mip_gap", float, 0.0, "relative gap at which to stop (HiGHS's own default, 1e-4, stops 0.01% "
              f"of the duration short of optimal{note})", minimum=0, maximum=1),
        Param("seed", int, 0, "solver random seed", minimum=0, maximum=2**31 - 1),
    )


def solve(model: SparseModel, params: Mapping[str, Any], time_limit: float | None, start: np.ndarray | None,
          keep_incumbents: bool, on_incumbent: Callable[[Incumbent], bool | None],
          options: dict[str, Any] | None = None) -> MilpSolution:
    """`solve_milp` with the solver parameters of `solver_params`, as the method parsed them.

    Parameters
    ----------
    model : SparseModel
    params : Mapping
        The method's parsed parameters (those of `solver_params` among them).
    time_limit : float or None
        Seconds; None for no limit.
    start : np.ndarray or None
        A feasible point to begin from.
    keep_incumbents : bool
        Keep each incumbent's point.
    on_incumbent : callable
        Called with each improving incumbent (`remat_bench.toolkit.milp.incumbent_reporter`).
    options : dict or None
        HiGHS options passed as they are.

    Returns
    -------
    MilpSolution
    """
    return solve_milp(model, backend=params["backend"], time_limit=time_limit, threads=params["threads"] or None,
                      mip_gap=params["mip_gap"], seed=params["seed"], start=start, keep_incumbents=keep_incumbents,
                      options=options, on_incumbent=on_incumbent)


def unsolved(sol: MilpSolution, lower: Number | None, stats: dict[str, Any], deadline: Deadline,
             space: str) -> MethodResult | None:
    """The result of a solver's answer that holds no point, or None when it holds one.

    Parameters
    ----------
    sol : MilpSolution
    lower : Number or None
        The solver's dual bound in duration units.
    stats : dict
        The run's stats.
    deadline : Deadline
        The run's, whose elapsed time is the result's solve time.
    space : str
        The schedules the model holds, as the sentence names them ("staged schedule").

    Returns
    -------
    MethodResult or None
        Infeasible (proven) where the solver proved that no schedule of ``space`` fits; no solution,
        with ``lower``, where it stopped without a point; None otherwise.
    """
    if sol.solution_status is SolutionStatus.INFEASIBLE:
        return MethodResult(SolutionStatus.INFEASIBLE, solve_time_s=deadline.elapsed(), stats=stats,
                            termination=Termination.PROVEN,
                            message=f"the solver proved that no {space} fits the budget")
    if sol.x is None:
        return MethodResult(SolutionStatus.NO_SOLUTION, lower_bound=lower, solve_time_s=deadline.elapsed(),
                            stats=stats, termination=sol.termination,
                            message=f"no schedule found before the solver stopped ({sol.message})")
    return None
