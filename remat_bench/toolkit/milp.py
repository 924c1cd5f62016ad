"""Sparse mixed-integer models, handed to HiGHS (highspy) or to any solver PuLP knows.

Formulations (checkmate, checkmate-lp, monet) build their models as numpy
arrays in blocks, never term by term in Python objects: a `ModelBuilder`
collects variable blocks and COO constraint blocks (`add_affine_rows` also
takes constant terms, for a formulation whose variables exist only for some
indices, as MONeT's), and `build` turns them into one CSR matrix. `solve_milp`
passes it to HiGHS in one call (``Highs.passModel``), or, with
``backend="pulp:NAME"``, writes the same model through PuLP for CBC, Gurobi,
CPLEX or any other solver PuLP finds.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import reduce
from typing import Any, Protocol

import numpy as np
import scipy.sparse as sp

from remat_bench.core.control import interrupted, run_interruptibly
from remat_bench.core.errors import MethodError, ModelTooLargeError
from remat_bench.core.graph import Graph
from remat_bench.core.machine import available_memory_bytes
from remat_bench.core.outcome import SolutionStatus, Termination, cut_short
from remat_bench.toolkit.child import can_spawn, run_in_child


@dataclass
class SparseModel:
    """min cost @ x  s.t.  row_lower <= A x <= row_upper,  lower <= x <= upper,  x[integer] integral."""

    cost: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    integer: np.ndarray  # bool per column
    A: sp.csr_matrix
    row_lower: np.ndarray
    row_upper: np.ndarray

    @property
    def num_cols(self) -> int:
        return len(self.cost)

    @property
    def num_rows(self) -> int:
        return self.A.shape[0]

    def violation(self, x: np.ndarray) -> float:
        """Largest bound or row violation of ``x`` (0 for a feasible point).

        Parameters
        ----------
        x : np.ndarray
            A value per column.

        Returns
        -------
        float
            The largest amount by which ``x`` breaks a column bound, a row bound or integrality.
        """
        act = self.A @ x
        return float(max(
            np.max(self.lower - x, initial=0.0), np.max(x - self.upper, initial=0.0),
            np.max(self.row_lower - act, initial=0.0), np.max(act - self.row_upper, initial=0.0),
            np.max(np.abs(x[self.integer] - np.round(x[self.integer])), initial=0.0),
        ))


CONSTANT = -1
"""The column of a constant term in `ModelBuilder.add_affine_rows`."""


class ModelBuilder:
    """Collects variable blocks and constraint blocks, then builds one `SparseModel`."""

    def __init__(self) -> None:
        self._cost: list[np.ndarray] = []
        self._lower: list[np.ndarray] = []
        self._upper: list[np.ndarray] = []
        self._integer: list[np.ndarray] = []
        self.num_cols = 0
        self._rows: list[np.ndarray] = []
        self._cols: list[np.ndarray] = []
        self._vals: list[np.ndarray] = []
        self._row_lower: list[np.ndarray] = []
        self._row_upper: list[np.ndarray] = []
        self.num_rows = 0

    def add_vars(self, count: int, lower: Any = 0.0, upper: Any = 1.0, cost: Any = 0.0,
                 integer: bool = True) -> np.ndarray:
        """Add ``count`` columns; returns their indices.

        Parameters
        ----------
        count : int
            How many columns.
        lower, upper : Any
            Their bounds: a number for all, or an array of ``count``.
        cost : Any
            Their objective coefficients: a number for all, or an array of ``count``.
        integer : bool
            Whether they are integral.

        Returns
        -------
        np.ndarray
            int64: the indices of the new columns, consecutive.
        """
        self._cost.append(np.broadcast_to(np.asarray(cost, dtype=np.float64), (count,)).copy())
        self._lower.append(np.broadcast_to(np.asarray(lower, dtype=np.float64), (count,)).copy())
        self._upper.append(np.broadcast_to(np.asarray(upper, dtype=np.float64), (count,)).copy())
        self._integer.append(np.full(count, integer, dtype=bool))
        idx = np.arange(self.num_cols, self.num_cols + count, dtype=np.int64)
        self.num_cols += count
        return idx

    def add_rows(self, rows: np.ndarray, cols: np.ndarray, vals: np.ndarray,
                 lower: Any, upper: Any, count: int | None = None) -> None:
        """Add a block of rows from COO triplets whose row ids are local (0..count-1).

        Parameters
        ----------
        rows : np.ndarray
            Local row id of each entry.
        cols : np.ndarray
            Column of each entry.
        vals : np.ndarray
            Coefficient of each entry (entries at the same row and column are summed by `build`).
        lower, upper : Any
            The rows' bounds: a number for all, or an array of ``count``.
        count : int or None
            How many rows; None: one past the largest of ``rows``.
        """
        rows = np.asarray(rows, dtype=np.int64)
        if count is None:
            count = int(rows.max()) + 1 if len(rows) else 0
        if count == 0:
            return
        self._rows.append(rows + self.num_rows)
        self._cols.append(np.asarray(cols, dtype=np.int64))
        self._vals.append(np.asarray(vals, dtype=np.float64))
        self._row_lower.append(np.broadcast_to(np.asarray(lower, dtype=np.float64), (count,)).copy())
        self._row_upper.append(np.broadcast_to(np.asarray(upper, dtype=np.float64), (count,)).copy())
        self.num_rows += count

    def add_affine_rows(self, parts: Sequence[tuple[Any, Any, Any]], lower: Any, upper: Any,
                        count: int) -> np.ndarray:
        """Add ``count`` rows ``lower <= sum of terms <= upper`` whose terms may be constants.

        ``parts`` are blocks of COO triplets (local row ids, columns, values), in the order their
        terms are summed. An entry whose column is `CONSTANT` is a constant term: a formulation whose
        variables exist only for some indices (and are constants elsewhere) writes each term the same
        way. Constants are moved into the bounds. A row left with no column is not added, since no
        variable can change it: returns the local ids of those whose constant lies outside their
        bounds, for the caller to report.

        Parameters
        ----------
        parts : Sequence of tuple
            Blocks of (local row ids, columns, values), each an array or a number broadcast alike.
        lower, upper : Any
            The rows' bounds: a number for all, or an array of ``count``.
        count : int
            How many rows.

        Returns
        -------
        np.ndarray
            int64: the local ids of the rows with no column whose constant lies outside their bounds.
        """
        def cat(k: int, dtype: Any) -> np.ndarray:
            arrays = [np.asarray(part[k], dtype=dtype).reshape(-1) for part in parts]
            return np.concatenate(arrays) if arrays else np.zeros(0, dtype=dtype)

        rows, cols, vals = cat(0, np.int64), cat(1, np.int64), cat(2, np.float64)
        lower = np.broadcast_to(np.asarray(lower, dtype=np.float64), (count,))
        upper = np.broadcast_to(np.asarray(upper, dtype=np.float64), (count,))
        constant = cols == CONSTANT
        offset = np.bincount(rows[constant], weights=vals[constant], minlength=count)  # summed in order
        has_column = np.zeros(count, dtype=bool)
        has_column[rows[~constant]] = True
        empty = ~has_column
        violated = np.flatnonzero(empty & ((offset < lower - 1e-9) | (offset > upper + 1e-9)))
        renumbered = np.cumsum(has_column) - 1
        self.add_rows(renumbered[rows[~constant]], cols[~constant], vals[~constant],
                      (lower - offset)[has_column], (upper - offset)[has_column], count=int(has_column.sum()))
        return violated

    def build(self) -> SparseModel:
        """The model of every block added so far, its matrix in CSR with duplicate entries summed.

        Returns
        -------
        SparseModel
        """
        def cat(parts: list[np.ndarray], dtype: Any) -> np.ndarray:
            return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)

        A = sp.csr_matrix(
            (cat(self._vals, np.float64), (cat(self._rows, np.int64), cat(self._cols, np.int64))),
            shape=(self.num_rows, self.num_cols),
        )
        A.sum_duplicates()
        return SparseModel(
            cost=cat(self._cost, np.float64), lower=cat(self._lower, np.float64),
            upper=cat(self._upper, np.float64), integer=cat(self._integer, bool), A=A,
            row_lower=cat(self._row_lower, np.float64), row_upper=cat(self._row_upper, np.float64),
        )


@dataclass
class Incumbent:
    time_s: float
    objective: float
    x: np.ndarray | None = None
    dual_bound: float | None = None


def incumbent_reporter(report: Callable[..., bool], decode: Callable[[np.ndarray], Any], dur_scale: float,
                       offset: float = 0.0) -> Callable[[Incumbent], bool]:
    """An ``on_incumbent`` for `solve_milp` that offers each incumbent to a run's progress.

    Checkmate's and MONeT's models share it: the incumbent's point is decoded into a schedule only
    when the progress scores it, and HiGHS's dual bound is turned into a duration.

    Parameters
    ----------
    report : callable
        `remat_bench.methods.base.SolveContext.report`: ``report(schedule_or_function, bound=...)``,
        True when the run's goal is met.
    decode : callable
        The model's point to schedule.
    dur_scale : float
        Durations per unit of the model's objective.
    offset : float
        A constant the model's objective leaves out (MONeT's), in objective units.

    Returns
    -------
    callable
        Called with each `Incumbent`; True when HiGHS may stop.
    """
    def on_incumbent(incumbent: Incumbent) -> bool:
        if incumbent.x is None:
            return False
        point = incumbent.x
        bound = None if incumbent.dual_bound is None else (incumbent.dual_bound + offset) * dur_scale
        return bool(report(lambda: decode(point), bound=bound))

    return on_incumbent


@dataclass
class MilpSolution:
    """A solver's answer: what it found (``solution_status``: a point ``x`` when optimal or feasible)
    and why it stopped (``termination``: proven when optimal or infeasible, or when it met the
    objective target it was given; time_limit, interrupted, resource_limit, error otherwise)."""

    solution_status: SolutionStatus
    termination: Termination
    x: np.ndarray | None = None
    objective: float | None = None
    dual_bound: float | None = None
    gap: float | None = None
    nodes: int | None = None
    solve_time_s: float = 0.0
    solver: str = ""
    message: str = ""
    incumbents: list[Incumbent] = field(default_factory=list)


class BuiltModel(Protocol):
    """A formulation's model as built (Checkmate's, MONeT's): what `model_stats` reports of it."""

    model: SparseModel
    build_time_s: float
    mem_scale: int


def model_stats(built: BuiltModel) -> dict[str, Any]:
    """A built model's size and build time, as runs record them in their stats.

    Parameters
    ----------
    built : BuiltModel

    Returns
    -------
    dict
        ``variables``, ``integer_variables``, ``constraints``, ``nonzeros``, ``build_time_s`` (s, to the
        ms) and ``memory_scale``.
    """
    return {
        "variables": built.model.num_cols,
        "integer_variables": int(built.model.integer.sum()),
        "constraints": built.model.num_rows,
        "nonzeros": int(built.model.A.nnz),
        "build_time_s": round(built.build_time_s, 3),
        "memory_scale": built.mem_scale,
    }


def refuse_too_large(need: int, describe: str, advice: str = "", cap: int | None = None) -> None:
    """Raise `ModelTooLargeError` when a model needing about ``need`` bytes would take more than 60% of
    the memory available now (unknown memory refuses nothing), or more than ``cap``. ``describe`` says
    what the model is.

    Parameters
    ----------
    need : int
        The model's estimated size in bytes.
    describe : str
        What the model is, the start of the error's sentence.
    advice : str
        Appended to the sentence (e.g. what to do instead); empty for none.
    cap : int or None
        The most the caller lets a model take, in bytes (`remat_bench.methods.base.SolveContext.model_memory`).

    Raises
    ------
    ModelTooLargeError
        ``need`` is more than 60% of the available memory, or more than ``cap``.
    """
    if cap is not None and need > cap:
        raise ModelTooLargeError(f"{describe}, needing about {need / 2**30:.1f} GiB, more than the "
                                 f"{cap / 2**30:.1f} GiB a model may take in this run{advice}")
    avail = available_memory_bytes()
    if avail is not None and need > 0.6 * avail:
        raise ModelTooLargeError(f"{describe}, needing about {need / 2**30:.1f} GiB, more than the "
                                 f"{avail / 2**30:.1f} GiB available{advice}")


def parse_backend(backend: str) -> tuple[str, str | None]:
    """``highs`` or ``pulp:NAME``; raises MethodError naming the installed PuLP solvers otherwise.

    Parameters
    ----------
    backend : str
        ``highs``, or ``pulp:`` followed by a solver name PuLP lists (e.g. ``pulp:PULP_CBC_CMD``).

    Returns
    -------
    kind : str
        ``highs`` or ``pulp``.
    name : str or None
        The PuLP solver's name; None for HiGHS.

    Raises
    ------
    MethodError
        Neither form, a solver PuLP does not know, or one not installed and licensed here.
    """
    if backend == "highs":
        return "highs", None
    if backend.startswith("pulp:"):
        import pulp

        name = backend[5:]
        if name not in pulp.listSolvers():
            raise MethodError(f"PuLP has no solver '{name}'; it knows: {', '.join(pulp.listSolvers())}")
        if name not in pulp.listSolvers(onlyAvailable=True):
            raise MethodError(
                f"PuLP solver '{name}' is not available here (installed and licensed: "
                f"{', '.join(pulp.listSolvers(onlyAvailable=True))})"
            )
        return "pulp", name
    raise MethodError(f"backend '{backend}' is not understood; use 'highs' or 'pulp:NAME' (e.g. pulp:PULP_CBC_CMD)")


def solve_milp(
    model: SparseModel,
    *,
    backend: str = "highs",
    time_limit: float | None = None,
    threads: int | None = None,
    mip_gap: float | None = None,
    seed: int | None = None,
    start: np.ndarray | None = None,
    relax: bool = False,
    keep_incumbents: bool = False,
    options: dict[str, Any] | None = None,
    on_incumbent: Callable[[Incumbent], bool | None] | None = None,
) -> MilpSolution:
    """Solve ``model`` (its LP relaxation when ``relax``); ``start`` is a feasible point to begin from.

    ``options`` are passed to HiGHS as they are (``setOptionValue``), e.g. ``mip_heuristic_effort``.
    ``on_incumbent`` is called with each improving incumbent of HiGHS (its point, objective and dual
    bound), as it is found, in this process (from HiGHS's thread, or as a child process streams it);
    when it answers True the search stops there (the caller's goal is met: termination converged).

    Parameters
    ----------
    model : SparseModel
    backend : str
        ``highs`` or ``pulp:NAME`` (`parse_backend`).
    time_limit : float or None
        Seconds; None for no limit.
    threads : int or None
        Threads the solver may use; None (or 0) leaves the solver's default.
    mip_gap : float or None
        Relative gap at which the solver may stop; None leaves the solver's default.
    seed : int or None
        HiGHS's random seed; None leaves HiGHS's default (PuLP's solvers are not given it).
    start : np.ndarray or None
        A feasible point to begin from (ignored when ``relax``).
    relax : bool
        Solve the LP relaxation (integrality dropped) instead of the MIP.
    keep_incumbents : bool
        Keep each HiGHS incumbent's point in ``incumbents`` (only their times and objectives otherwise).
    options : dict or None
        HiGHS options by HiGHS's names, set last (they win over the above); ignored by PuLP.
    on_incumbent : callable or None
        Called with each improving HiGHS incumbent; answering True stops the search. Ignored by PuLP.

    Returns
    -------
    MilpSolution
        With ``termination`` resource_limit and ``start`` as the answer (if any) when `extreme_range`
        keeps the MIP from HiGHS.

    Raises
    ------
    MethodError
        ``backend`` is not understood or its solver is not available (`parse_backend`).
    """
    kind, name = parse_backend(backend)
    if kind == "highs":
        why = None if relax else extreme_range(model)
        if why is not None:  # a model HiGHS crashed on: ``start`` is the answer, if any
            # Beyond what the solver handles, as a model too large is beyond memory.
            return MilpSolution(SolutionStatus.FEASIBLE if start is not None else SolutionStatus.NO_SOLUTION,
                                Termination.RESOURCE_LIMIT, x=start,
                                objective=None if start is None else float(model.cost @ start),
                                message=f"the MILP was not run: {why}")
        args = (model, time_limit, threads, mip_gap, seed, start, relax, keep_incumbents, options or {})
        if time_limit is not None and model.num_cols >= ISOLATE_COLUMNS and can_spawn():
            return _solve_highs_isolated(*args, watch=on_incumbent)
        return _solve_highs(*args, on_incumbent=on_incumbent)
    return _solve_pulp(model, name or "", time_limit, threads, mip_gap, start, relax)


# HiGHS checks its time limit (and interrupts) only between phases, so on a large model it overruns
# its limit and answers Ctrl-C late (docs/benchmarks.md, "Figures that used to live in the code").
# Models this large are solved in a child process, killed at the limit; the incumbents it streams
# back are kept. Smaller ones overshoot by little and are not worth a process.
ISOLATE_COLUMNS = 2000
KILL_GRACE_S = 0.5


def _solve_highs_isolated(model: SparseModel, time_limit: float | None, *rest: Any,
                          watch: Callable[[Incumbent], bool | None] | None = None) -> MilpSolution:
    """`_solve_highs` in a spawned process that is killed past ``time_limit`` (or on Ctrl-C); ``watch``
    sees each incumbent as the child streams it, and stops the child when it answers True."""
    t0 = time.perf_counter()
    kill_at = t0 + (time_limit or 0.0) + KILL_GRACE_S
    incumbents: list[Incumbent] = []
    enough = threading.Event()

    def received(incumbent: Incumbent) -> None:
        incumbents.append(incumbent)
        if watch is not None and watch(incumbent):
            enough.set()

    outcome = run_in_child(_solve_highs, (model, time_limit, *rest),
                           stop=lambda: time.perf_counter() > kill_at or interrupted() or enough.is_set(),
                           stream_to="on_incumbent", on_message=received)
    elapsed = time.perf_counter() - t0
    if outcome.returned:
        outcome.value.solve_time_s = elapsed
        return outcome.value
    if outcome.termination is Termination.NOT_APPLICABLE:  # no child could start: here, then
        left = None if time_limit is None else max(0.0, time_limit - elapsed)
        here: Callable[..., MilpSolution] = _solve_highs  # ``rest`` fills its positional parameters
        return here(model, left, *rest, on_incumbent=watch)
    if outcome.termination is Termination.ERROR and not outcome.died:  # HiGHS raised
        return MilpSolution(SolutionStatus.NO_SOLUTION, Termination.ERROR, solve_time_s=elapsed,
                            message=outcome.message, incumbents=incumbents)

    import highspy

    best = incumbents[-1] if incumbents else None
    _threads, _gap, _seed, start, relax = rest[:5]  # the start is a feasible point the caller checked
    if start is not None and not relax:
        start_objective = float(model.cost @ start)
        if best is None or start_objective < best.objective:
            best = Incumbent(0.0, start_objective, np.asarray(start, dtype=np.float64))
    found = best is not None and best.x is not None
    return MilpSolution(
        SolutionStatus.FEASIBLE if found else SolutionStatus.NO_SOLUTION,
        # Stopped (the caller's goal met, the time limit, Ctrl-C), or the child died (a crash in HiGHS): the
        # incumbents it sent stand.
        Termination.CONVERGED if enough.is_set() and found else outcome.termination,
        x=None if best is None else best.x,
        objective=None if best is None else best.objective,
        dual_bound=None if best is None else best.dual_bound,
        solve_time_s=elapsed,
        solver=f"HiGHS {highspy.Highs().version()}",
        message=outcome.message or ("stopped at the time limit" if not interrupted() else "interrupted"),
        incumbents=incumbents,
    )


def _solve_highs(model: SparseModel, time_limit: float | None, threads: int | None,
                 mip_gap: float | None, seed: int | None, start: np.ndarray | None,
                 relax: bool, keep_incumbents: bool, options: dict[str, Any],
                 on_incumbent: Any = None) -> MilpSolution:
    import highspy

    h = highspy.Highs()
    h.silent()
    h.passModel(_highs_lp(model, relax))
    _set_highs_options(h, time_limit, threads, mip_gap, seed, relax, options)
    if start is not None and not relax:
        sol = highspy.HighsSolution()
        sol.col_value = np.asarray(start, dtype=np.float64)
        sol.value_valid = True
        h.setSolution(sol)
    t0 = time.perf_counter()
    enough = threading.Event()
    incumbents = _run_highs(h, t0, relax, keep_incumbents, on_incumbent, enough)
    answer = _highs_answer(h, model, relax, time.perf_counter() - t0, incumbents)
    if enough.is_set() and answer.termination is Termination.INTERRUPTED and answer.x is not None:
        answer.termination = Termination.CONVERGED  # stopped at the caller's goal, not by Ctrl-C
        answer.message = "stopped: the caller's goal is met"
    return answer


# Largest ratio between the magnitudes of two nonzero constraint coefficients of a MIP given to HiGHS.
# HiGHS 1.14 crashed the whole process on Checkmate models past it, found by tests/test_fuzz.py
# (fractional sizes from 3.6 or 6.1 up to 1.2e12): SIGSEGV in presolve, and SIGFPE in branch and
# bound with presolve off. Real graphs stay far below it (bytes over their gcd).
EXTREME_RANGE = 1e10


def extreme_range(model: SparseModel) -> str | None:
    """Why HiGHS should not get the MIP ``model`` (`solve_milp` then answers with its start, if any):
    its constraint coefficients span more than `EXTREME_RANGE`; None when it may.

    Parameters
    ----------
    model : SparseModel

    Returns
    -------
    str or None
        The reason, as a clause of a sentence; None when HiGHS may get it.
    """
    values = np.abs(model.A.data)
    values = values[values > 0]
    if not len(values) or float(values.max()) <= EXTREME_RANGE * float(values.min()):
        return None
    return (f"the model's memory coefficients span {float(values.min()):.4g} to {float(values.max()):.4g}, "
            f"beyond what HiGHS solves without crashing (a ratio of {EXTREME_RANGE:.0e})")


def _highs_lp(model: SparseModel, relax: bool) -> Any:
    """``model`` as a ``highspy.HighsLp`` (rowwise matrix; infinite row bounds as HiGHS's own infinity)."""
    import highspy

    lp = highspy.HighsLp()
    lp.num_col_ = model.num_cols
    lp.num_row_ = model.num_rows
    lp.col_cost_ = model.cost
    lp.col_lower_ = model.lower
    lp.col_upper_ = model.upper
    lp.row_lower_ = np.where(np.isfinite(model.row_lower), model.row_lower, -highspy.kHighsInf)
    lp.row_upper_ = np.where(np.isfinite(model.row_upper), model.row_upper, highspy.kHighsInf)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.start_ = model.A.indptr.astype(np.int32)
    lp.a_matrix_.index_ = model.A.indices.astype(np.int32)
    lp.a_matrix_.value_ = model.A.data
    if not relax and model.integer.any():
        kinds = np.where(model.integer, int(highspy.HighsVarType.kInteger), int(highspy.HighsVarType.kContinuous))
        lp.integrality_ = [highspy.HighsVarType(int(k)) for k in kinds]
    return lp


def _set_highs_options(h: Any, time_limit: float | None, threads: int | None, mip_gap: float | None,
                       seed: int | None, relax: bool, options: dict[str, Any]) -> None:
    """The shared settings in HiGHS's names, then the caller's ``options`` as they are (they win)."""
    if time_limit is not None:
        h.setOptionValue("time_limit", max(float(time_limit), 0.01))
    if threads:
        h.setOptionValue("threads", int(threads))
    if mip_gap is not None:
        h.setOptionValue("mip_rel_gap", float(mip_gap))
    if seed is not None:
        h.setOptionValue("random_seed", int(seed))
    if relax:
        # HiGHS 1.14's presolve stalls on some Checkmate relaxations (fcn8's), and the others were as
        # fast or faster without it (docs/benchmarks.md, "Checkmate" and "Figures that used to live in
        # the code").
        h.setOptionValue("presolve", "off")
    for key, value in options.items():
        h.setOptionValue(key, value)


def _run_highs(h: Any, t0: float, relax: bool, keep_incumbents: bool, on_incumbent: Any,
               enough: threading.Event | None = None) -> list[Incumbent]:
    """Run the solver; returns the incumbents of a MIP as they improved (times from ``t0``). When
    ``on_incumbent`` answers True, ``enough`` is set and the search is interrupted at HiGHS's next check."""
    incumbents: list[Incumbent] = []
    lock = threading.Lock()

    def on_improving(event: Any) -> None:
        data = event.data_out
        dual = float(data.mip_dual_bound)
        incumbent = Incumbent(
            time.perf_counter() - t0, float(data.objective_function_value),
            # Kept when asked for, and always when streamed out of a child process (the
            # parent may need the last one if it has to stop the child).
            np.array(data.mip_solution, dtype=np.float64) if keep_incumbents or on_incumbent else None,
            dual if np.isfinite(dual) else None,
        )
        with lock:
            incumbents.append(incumbent)
        if on_incumbent is not None and on_incumbent(incumbent) and enough is not None:
            enough.set()

    def on_interrupt(event: Any) -> None:
        if enough is not None and enough.is_set():
            event.data_in.user_interrupt = True

    if not relax:
        h.cbMipImprovingSolution.subscribe(on_improving)
        if on_incumbent is not None:
            h.cbMipInterrupt.subscribe(on_interrupt)
    # Ctrl-C cancels the search and keeps the incumbent (see `run_interruptibly`).
    h.HandleUserInterrupt = True
    run_interruptibly(h.run, h.cancelSolve)
    return incumbents


def _highs_answer(h: Any, model: SparseModel, relax: bool, elapsed: float,
                  incumbents: list[Incumbent]) -> MilpSolution:
    """What HiGHS found, after `_run_highs`: status, solution, objective and bound."""
    import highspy

    status = h.getModelStatus()
    info = h.getInfo()
    solution = h.getSolution()
    has_x = bool(solution.value_valid) and info.primal_solution_status >= 2
    x = np.array(solution.col_value, dtype=np.float64) if has_x else None
    out, termination = highs_status(status, x is not None)
    mip = not relax and model.integer.any()
    if mip:
        dual = getattr(info, "mip_dual_bound", None)
    else:
        dual = info.objective_function_value if out is SolutionStatus.OPTIMAL else None
    if dual is not None and not np.isfinite(dual):
        dual = None
    return MilpSolution(
        out,
        termination,
        x=x,
        objective=float(info.objective_function_value) if x is not None else None,
        dual_bound=None if dual is None else float(dual),
        gap=float(info.mip_gap) if mip and x is not None and np.isfinite(info.mip_gap) else None,
        nodes=int(info.mip_node_count) if mip else None,
        solve_time_s=elapsed,
        solver=f"HiGHS {highspy.Highs().version()}",
        message=h.modelStatusToString(status),
        incumbents=incumbents,
    )


def highs_status(status: Any, has_x: bool) -> tuple[SolutionStatus, Termination]:
    """What HiGHS found and why it stopped, from its model status (``highspy.HighsModelStatus``).

    kOptimal and kInfeasible are proofs; kObjectiveTarget and kObjectiveBound are too: the goal it
    was given is met (a caller's target is a duration no schedule goes below), or no solution beats
    the bound. kTimeLimit and kInterrupt (Ctrl-C, `run_interruptibly`) cut it short; its iteration,
    solution and memory limits are resource limits. Any other status is an error, except kUnknown
    (HiGHS does not know either).

    Parameters
    ----------
    status : Any
        A ``highspy.HighsModelStatus``.
    has_x : bool
        Whether HiGHS holds a point (then a status short of a proof is feasible, not no_solution).

    Returns
    -------
    solution_status : SolutionStatus
    termination : Termination
    """
    import highspy

    S = highspy.HighsModelStatus
    if status == S.kOptimal:
        return SolutionStatus.OPTIMAL, Termination.PROVEN
    if status == S.kInfeasible:
        return SolutionStatus.INFEASIBLE, Termination.PROVEN
    reasons = {S.kObjectiveTarget: Termination.PROVEN, S.kObjectiveBound: Termination.PROVEN,
               S.kTimeLimit: Termination.TIME_LIMIT, S.kInterrupt: Termination.INTERRUPTED,
               S.kIterationLimit: Termination.RESOURCE_LIMIT, S.kSolutionLimit: Termination.RESOURCE_LIMIT,
               S.kMemoryLimit: Termination.RESOURCE_LIMIT, S.kUnknown: Termination.UNKNOWN}
    return (SolutionStatus.FEASIBLE if has_x else SolutionStatus.NO_SOLUTION,
            reasons.get(status, Termination.ERROR))


def _solve_pulp(model: SparseModel, name: str, time_limit: float | None, threads: int | None,
                mip_gap: float | None, start: np.ndarray | None, relax: bool) -> MilpSolution:
    import pulp

    # PuLP's own API is term by term; that is the price of reaching every solver it knows.
    prob = pulp.LpProblem("remat_bench", pulp.LpMinimize)
    xs = []
    for j in range(model.num_cols):
        cat = pulp.LpInteger if (model.integer[j] and not relax) else pulp.LpContinuous
        lo = None if not np.isfinite(model.lower[j]) else float(model.lower[j])
        hi = None if not np.isfinite(model.upper[j]) else float(model.upper[j])
        var = prob.add_variable(f"x{j}", lowBound=lo, upBound=hi, cat=cat)
        if start is not None:
            var.setInitialValue(float(round(start[j]) if model.integer[j] else start[j]))
        xs.append(var)
    prob += pulp.LpAffineExpression([(xs[j], float(c)) for j, c in enumerate(model.cost) if c != 0])
    A = model.A
    for r in range(model.num_rows):
        lo_idx, hi_idx = A.indptr[r], A.indptr[r + 1]
        row = zip(A.indices[lo_idx:hi_idx], A.data[lo_idx:hi_idx])
        expr = pulp.LpAffineExpression([(xs[j], float(v)) for j, v in row])
        lo, hi = model.row_lower[r], model.row_upper[r]
        if np.isfinite(lo) and np.isfinite(hi) and lo == hi:
            prob += expr == float(lo)
        else:
            if np.isfinite(lo):
                prob += expr >= float(lo)
            if np.isfinite(hi):
                prob += expr <= float(hi)
    options: dict[str, Any] = {"msg": False}
    if time_limit is not None:
        options["timeLimit"] = max(1, int(time_limit))
    if mip_gap is not None:
        options["gapRel"] = mip_gap
    if threads:
        options["threads"] = threads
    if start is not None:
        options["warmStart"] = True
    solver = pulp.getSolver(name, **options)
    t0 = time.perf_counter()
    prob.solve(solver)
    elapsed = time.perf_counter() - t0
    values = [v.varValue for v in xs]
    has_x = all(v is not None for v in values) and prob.sol_status in (
        pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible)
    x = np.array(values, dtype=np.float64) if has_x else None
    if prob.sol_status == pulp.LpSolutionOptimal and prob.status == pulp.LpStatusOptimal:
        out, termination = SolutionStatus.OPTIMAL, Termination.PROVEN
    elif prob.status == pulp.LpStatusInfeasible or prob.sol_status == pulp.LpSolutionInfeasible:
        out, termination = SolutionStatus.INFEASIBLE, Termination.PROVEN
    else:
        out = SolutionStatus.FEASIBLE if x is not None else SolutionStatus.NO_SOLUTION
        # PuLP does not say why a solver stopped short of a proof; a solver given a time limit (and no
        # gap: stopping at one is converging) stops there, and one without either says nothing we know.
        termination = (Termination.CONVERGED if mip_gap else cut_short() if time_limit is not None
                       else Termination.UNKNOWN)
        if prob.status == pulp.LpStatusUndefined and x is None:
            termination = Termination.ERROR
    objective = float(model.cost @ x) if x is not None else None
    return MilpSolution(
        out, termination, x=x, objective=objective,
        dual_bound=objective if out is SolutionStatus.OPTIMAL else None,
        gap=0.0 if out is SolutionStatus.OPTIMAL else None,
        solve_time_s=elapsed, solver=f"PuLP {pulp.__version__} {name}",
        message=pulp.LpStatus.get(prob.status, str(prob.status)),
    )


def memory_scale(graph: Graph) -> int:
    """The gcd of every memory quantity (1 when any is fractional).

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    int
        The gcd of the nonzero node sizes, implementation workspaces and fixed memory; 1 when none is.
    """
    values = [graph.memory, graph.op_workspace, np.asarray([graph.fixed_memory])]
    if any(v.dtype.kind == "f" for v in values):
        return 1
    ints = [int(x) for v in values for x in np.unique(v) if x]
    return reduce(math.gcd, ints, 0) or 1
