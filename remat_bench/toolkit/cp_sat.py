"""CP-SAT's statuses in this project's words (`remat_bench.core.outcome.Termination`).

Shared by the methods that run CP-SAT (moccasin, and reorder through
`remat_bench.toolkit.order_search`), as `remat_bench.toolkit.milp` maps HiGHS's model
status: one place says what each of the solver's answers means.
"""

from __future__ import annotations

from typing import Any

from remat_bench.core.outcome import Termination, cut_short


def termination(status: Any) -> Termination:
    """Why CP-SAT stopped, from its status (a ``CpSolverStatus`` or its name).

    OPTIMAL and INFEASIBLE are proofs. FEASIBLE and UNKNOWN mean the search was stopped
    before a proof: at its time limit, or by Ctrl-C (`cut_short`); a search a caller stops
    at its goal says so itself. MODEL_INVALID is an error in the model.

    Parameters
    ----------
    status : Any
        A ``CpSolverStatus``, or its name as a str.

    Returns
    -------
    Termination
        unknown for any other status.
    """
    name = getattr(status, "name", status)
    if name in ("OPTIMAL", "INFEASIBLE"):
        return Termination.PROVEN
    if name in ("FEASIBLE", "UNKNOWN"):
        return cut_short()
    if name == "MODEL_INVALID":
        return Termination.ERROR
    return Termination.UNKNOWN
