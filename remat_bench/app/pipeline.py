"""The shared pipeline every run goes through: solve, clean up, simulate, judge.

A number a method reports about itself is never trusted. `run` checks the
budget against the memory floor (answering ``infeasible`` at once below it),
runs the method, checks its schedule with the simulator, applies the shared
clean-up, simulates the cleaned schedule, and marks the run ``over_budget``
if the simulated peak exceeds the budget, whatever the method believed.
"""

from __future__ import annotations

import dataclasses
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from remat_bench.core.budget import Budget, memory_floor, parse_budget, peak_lower_bound
from remat_bench.core.control import interrupted
from remat_bench.core.errors import MethodError, ModelTooLargeError
from remat_bench.core.graph import Graph, Number
from remat_bench.core.schedule import Schedule
from remat_bench.core.simulate import Simulation, baseline, clean_up_simulated, simulate
from remat_bench.methods import Method, MethodResult, Status, get_method
from remat_bench.methods.base import SolveContext, Termination
from remat_bench.toolkit.bound import Bound, BoundCache, contradiction, default_cache_folder


@dataclass
class RunResult:
    """One scored run: what ``solve --json`` prints and what a sweep row is built from."""

    graph: str
    graph_sha256: str
    method: str
    params: dict[str, Any]
    status: Status
    message: str
    budget: Number | None
    budget_fraction: float | None
    baseline_peak: Number
    baseline_duration: Number
    peak: Number | None = None
    duration: Number | None = None
    overhead_pct: float | None = None
    objective: Number | None = None
    lower_bound: Number | None = None
    lower_bound_any_order: Number | None = None
    # With budget min: a peak no schedule goes below (`core.budget.peak_lower_bound`), and why.
    peak_lower_bound: Number | None = None
    peak_lower_bound_reason: str = ""
    gap_pct: float | None = None
    proven_optimal: bool = False
    solve_time_s: float = 0.0
    bound_time_s: float = 0.0  # spent on the any-order bound before the method (0 when cached or off)
    termination: Termination = Termination.UNKNOWN  # why the method stopped, apart from what it found
    space: str = ""  # where the method's own proofs (optimal, infeasible) hold
    below_floor: bool = False  # infeasible before the method ran: the budget is below the memory floor
    schedule_steps: int | None = None
    stats: dict[str, Any] = field(default_factory=dict)
    stats_bound: dict[str, Any] = field(default_factory=dict)
    any_order: Bound | None = None  # the any-order bound the run is judged by (stats_bound describes it)
    cleanup: dict[str, Any] | None = None
    schedule: Schedule | None = None
    simulation: Simulation | None = None

    @property
    def status_holds_for(self) -> str | None:
        """Where the status is proven: "every schedule", "the method's space", or None (nothing proven).

        Only a schedule that meets the any-order bound is optimal among every schedule, and
        only a budget below the memory floor is infeasible for every schedule; a method's own
        optimal or infeasible holds in its space (`space`), which may miss better schedules.
        """
        if self.proven_optimal or (self.status is Status.INFEASIBLE and self.below_floor):
            return "every schedule"
        if self.status in (Status.OPTIMAL, Status.INFEASIBLE):
            return "the method's space"
        return None

    @property
    def exit_code(self) -> int:
        """0 when a schedule within budget was found, 1 otherwise (docs/design.md section 7)."""
        return 0 if self.status.found_schedule else 1

    def to_json(self) -> dict[str, Any]:
        return {
            "graph": self.graph,
            "method": self.method,
            "params": self.params,
            "status": self.status.value,
            "message": self.message,
            "budget": self.budget,
            "budget_fraction": self.budget_fraction,
            "peak": self.peak,
            "duration": self.duration,
            "baseline_peak": self.baseline_peak,
            "baseline_duration": self.baseline_duration,
            "overhead_pct": self.overhead_pct,
            "objective": self.objective,
            "lower_bound": self.lower_bound,
            "lower_bound_any_order": self.lower_bound_any_order,
            "peak_lower_bound": self.peak_lower_bound,
            "peak_lower_bound_reason": self.peak_lower_bound_reason or None,
            "gap_pct": self.gap_pct,
            "proven_optimal": self.proven_optimal,
            "solve_time_s": self.solve_time_s,
            "bound_time_s": self.bound_time_s,
            "space": self.space,
            "status_holds_for": self.status_holds_for,
            "termination": self.termination.value,
            "schedule_steps": self.schedule_steps,
            "graph_sha256": self.graph_sha256,
            "cleanup": self.cleanup,
            "stats": self.stats,
        }


def termination_of(answer: MethodResult, wall: float, time_limit: float | None) -> Termination:
    """Why the method stopped: its own word when it gave one, else read off how it ended.

    A method that used (nearly) all of its time without a proof was cut short by the
    limit; one that ended earlier ran its search to the end.
    """
    if interrupted():
        return Termination.INTERRUPTED
    if answer.termination is not Termination.UNKNOWN:
        return answer.termination
    if answer.status is Status.ERROR:
        return Termination.ERROR
    if answer.status is Status.UNSUPPORTED:
        return Termination.NOT_APPLICABLE
    if answer.status in (Status.OPTIMAL, Status.INFEASIBLE):
        return Termination.CONVERGED
    if time_limit is not None and wall >= 0.95 * time_limit:
        return Termination.TIME_LIMIT
    return Termination.CONVERGED


def gap_pct(duration: Number, bound: Number | None) -> float | None:
    """How far ``duration`` is above ``bound``, in percent of the bound."""
    if bound is None:
        return None
    if bound == 0:
        return 0.0 if duration == 0 else None
    return max(0.0, 100.0 * (duration - bound) / bound)


PIPELINE_PARAMS = {
    "impl": "operator implementations after solving: 'first' (as the method chose) or 'fastest-fit' "
            "(each compute gets the fastest implementation whose workspace still fits; MONeT's Checkmate-O)",
}


def split_params(name: str, params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(method parameters, pipeline parameters): ``impl`` is the pipeline's, for every method."""
    from remat_bench.toolkit.fastest_fit import MODES

    own = {k: v for k, v in params.items() if k not in PIPELINE_PARAMS}
    mode = str(params.get("impl", "first"))
    if mode not in MODES:
        raise MethodError(f"parameter 'impl' must be one of {', '.join(MODES)}, got {mode!r}")
    return own, ({"impl": mode} if "impl" in params else {})


def parse_method_params(cls: type[Method], params: dict[str, Any]) -> dict[str, Any]:
    """The method's declared parameters (typed, defaults filled) plus the pipeline's own, if given."""
    own, pipeline_params = split_params(cls.name, params)
    return {**cls.parse_params(own), **pipeline_params}


def resolve_method(name: str, params: dict[str, Any]) -> tuple[type[Method], dict[str, Any]]:
    """The method class and its full parameter set; raises MethodError for anything unknown or missing."""
    cls = get_method(name)
    parsed = parse_method_params(cls, params)
    ok, why = cls.available()
    if not ok:
        raise MethodError(why)
    return cls, parsed


def run(
    graph: Graph,
    method: str,
    budget: str | float | Budget,
    time_limit: float | None = None,
    params: dict[str, Any] | None = None,
    bound: bool = True,
    bounds: BoundCache | None = None,
    peak_only: bool = False,
) -> RunResult:
    """Solve ``graph`` with ``method`` at ``budget`` and score the result with the simulator.

    Raises MethodError / BudgetError for bad requests (exit status 2 on the
    command line); every other outcome, a failing method included, is a
    RunResult with a status and a message. ``bound=False`` skips the any-order
    lower bound (no gap, and nothing can be proven optimal). The method may stop as soon
    as its schedule meets the any-order bound (`SolveContext.duration_goal`); with
    ``peak_only`` at ``budget=min`` (`remat-bench floor`), as soon as its peak meets the
    peak no schedule goes below (`SolveContext.peak_goal`), leaving the duration there unpolished.
    """
    cls, parsed = resolve_method(method, params or {})
    # One bound cache per run unless the caller shares one: on disk it outlives the run anyway.
    bounds = bounds if bounds is not None else BoundCache(default_cache_folder())
    if not isinstance(budget, Budget):
        budget = parse_budget(str(budget), graph)
    result = _new_result(graph, method, cls, parsed, budget)
    if budget.amount is None:
        floor = peak_lower_bound(graph)
        result.peak_lower_bound, result.peak_lower_bound_reason = floor.amount, floor.reason
    if _refused(graph, cls, budget, result):
        return result
    effort = bound_effort(time_limit)
    if bound:
        time_limit = _bound(graph, budget, time_limit, bounds, result)
    context = SolveContext(bounds=bounds, duration_goal=result.lower_bound_any_order if budget.amount is not None
                           else None, peak_goal=result.peak_lower_bound if peak_only else None)
    start = time.perf_counter()
    answer = _solve(graph, method, cls, parsed, budget, time_limit, context)
    wall = time.perf_counter() - start
    result.termination = termination_of(answer, wall, time_limit)
    result.solve_time_s = answer.solve_time_s or wall
    result.objective = answer.objective
    result.lower_bound = answer.lower_bound
    result.stats = {**answer.stats, "bound_any_order": result.stats_bound}
    result.status = answer.status
    result.message = answer.message
    result = _score(graph, budget, answer, result)
    return _check_bound(graph, budget, bounds, effort, result)


def bound_effort(time_limit: float | None) -> float:
    """Seconds the any-order bound may take: a tenth of the limit, between 0.5 and 30 s (30 s with no limit)."""
    return 30.0 if time_limit is None else max(0.5, min(30.0, time_limit / 10))


def _new_result(graph: Graph, method: str, cls: type[Method], parsed: dict[str, Any], budget: Budget) -> RunResult:
    """The run's record before anything is decided: status error until something better is known."""
    base = baseline(graph)
    return RunResult(
        graph=graph.name,
        graph_sha256=graph.sha256,
        method=method,
        params=parsed,
        status=Status.ERROR,
        message="",
        budget=budget.amount,
        budget_fraction=budget.fraction,
        baseline_peak=base.peak,
        baseline_duration=base.duration,
        space=cls.space(parsed),
    )


def _refused(graph: Graph, cls: type[Method], budget: Budget, result: RunResult) -> bool:
    """Answer without running the method, when the budget is below the memory floor or the method
    does not apply (`Method.skip`); True when ``result`` is then final."""
    floor = memory_floor(graph)
    if budget.amount is not None and budget.amount < floor.amount:
        result.status = Status.INFEASIBLE
        result.message = floor.message(budget.amount, graph)
        result.below_floor = True
        result.termination = Termination.CONVERGED  # proven at once by the memory floor
        return True
    reason = cls.skip(graph, budget.amount)
    if reason is not None:
        result.status, result.message = Status.UNSUPPORTED, reason
        result.termination = Termination.NOT_APPLICABLE
        return True
    return False


def _bound(graph: Graph, budget: Budget, time_limit: float | None, bounds: BoundCache,
           result: RunResult) -> float | None:
    """The any-order lower bound, recorded in ``result``; returns the time limit left for the method.

    The bound is part of the run's time: at most a tenth of the limit, and the method gets the rest.
    """
    bound_start = time.perf_counter()
    any_order, from_cache = bounds.get(graph, budget.amount, bound_effort(time_limit))
    result.bound_time_s = time.perf_counter() - bound_start
    result.any_order = any_order
    result.lower_bound_any_order = any_order.value
    result.stats_bound = {**any_order.as_dict(), "from_cache": from_cache}
    if time_limit is not None:
        time_limit = max(time_limit - result.bound_time_s, 0.1 * time_limit)
    return time_limit


def _solve(graph: Graph, method: str, cls: type[Method], parsed: dict[str, Any], budget: Budget,
           time_limit: float | None, context: SolveContext) -> MethodResult:
    """The method's answer; its failures (out of memory, a model too large, a bug) are answers too."""
    try:
        method_params = {k: v for k, v in parsed.items() if k not in PIPELINE_PARAMS}
        solver = cls()
        solver.context = context
        answer: MethodResult = solver.solve(graph, budget.amount, time_limit, **method_params)
    except KeyboardInterrupt:
        raise
    except ModelTooLargeError as exc:
        # The method measured its model before building it and declined: a clean answer.
        answer = MethodResult(Status.UNSUPPORTED, message=str(exc), termination=Termination.RESOURCE_LIMIT)
    except MemoryError:
        # The sweep worker recognises this status (and sentence) to record the run as 'oom'.
        answer = MethodResult(Status.OOM, message=f"method '{method}' ran out of memory",
                              termination=Termination.RESOURCE_LIMIT)
    except Exception as exc:  # a method's bug is recorded, never lost
        answer = MethodResult(
            Status.ERROR,
            message=f"method '{method}' failed: {type(exc).__name__}: {exc}",
            stats={"traceback": traceback.format_exc(limit=8)},
            termination=Termination.ERROR,
        )
    if interrupted():
        answer.message = ("interrupted: the best schedule found before Ctrl-C" if answer.schedule is not None
                          else "interrupted before a schedule was found") + (
                              f"; {answer.message}" if answer.message else "")
    return answer


def _score(graph: Graph, budget: Budget, answer: MethodResult, result: RunResult) -> RunResult:
    if answer.schedule is None:
        return result
    raw = simulate(graph, answer.schedule)
    if not raw.valid:
        result.status = Status.ERROR
        result.message = f"method '{result.method}' returned an invalid schedule: {raw.violation}"
        return result
    cleaned, report, sim = clean_up_simulated(graph, answer.schedule, raw)
    if result.params.get("impl") == "fastest-fit":
        from remat_bench.toolkit.fastest_fit import fastest_fit

        first_report = report
        cleaned, report, sim = clean_up_simulated(graph, fastest_fit(graph, cleaned, budget.amount))
        # What the record describes: the method's schedule before any clean-up, and the end result.
        report = dataclasses.replace(report, duration_before=first_report.duration_before,
                                     peak_before=first_report.peak_before,
                                     computes_before=first_report.computes_before,
                                     dropped=first_report.dropped + report.dropped)
    cleaned = cleaned.with_meta(  # the same steps: ``sim`` stays theirs
        method=result.method,
        params=result.params,
        budget=budget.amount,
        solver={
            "status": answer.status.value,
            "objective": answer.objective,
            "lower_bound": answer.lower_bound,
            "solve_time_s": result.solve_time_s,
            "stats": {k: v for k, v in answer.stats.items() if k != "traceback"},
        },
    )
    result.schedule = cleaned
    result.simulation = sim
    result.cleanup = report.as_dict()
    result.peak = sim.peak
    result.duration = sim.duration
    result.overhead_pct = sim.overhead_pct(result.baseline_duration)
    result.schedule_steps = len(cleaned)
    result.gap_pct = gap_pct(sim.duration, result.lower_bound_any_order)
    if budget.amount is not None and sim.peak > budget.amount and answer.status.found_schedule:
        result.status = Status.OVER_BUDGET
        result.message = (
            f"the simulated peak {sim.peak} is above the budget {budget.amount}"
            + (f" ({answer.message})" if answer.message else "")
        )
    fits = budget.amount is None or sim.peak <= budget.amount
    result.proven_optimal = bool(
        fits
        and result.status.found_schedule
        and result.lower_bound_any_order is not None
        and sim.duration <= result.lower_bound_any_order
    )
    return result


def _check_bound(graph: Graph, budget: Budget, bounds: BoundCache, effort: float, result: RunResult) -> RunResult:
    """Hold the run's schedule against the any-order bound it reports: a schedule within the budget
    shorter than the bound (or where the bound says none fits) contradicts it.

    The bound may have come from the disk cache, which anyone can edit: a contradicted bound is
    discarded and computed again. If the fresh bound is contradicted too, the bound is wrong and the
    run is an error (never "proven optimal"); otherwise the fresh bound is the run's.
    """
    if result.any_order is None or result.peak is None or result.duration is None:
        return result
    why = contradiction(result.any_order, result.duration, result.peak, budget.amount)
    if why is None:
        return result
    bounds.discard(graph, budget.amount)
    start = time.perf_counter()
    fresh, _ = bounds.get(graph, budget.amount, effort)
    result.bound_time_s += time.perf_counter() - start
    result.any_order = fresh
    result.stats_bound = {**fresh.as_dict(), "from_cache": False, "discarded": why}
    result.stats["bound_any_order"] = result.stats_bound
    result.lower_bound_any_order = fresh.value
    result.gap_pct = gap_pct(result.duration, fresh.value)
    again = contradiction(fresh, result.duration, result.peak, budget.amount)
    fits = budget.amount is None or result.peak <= budget.amount
    result.proven_optimal = bool(fits and result.status.found_schedule and fresh.value is not None
                                 and again is None and result.duration <= fresh.value)
    if again is not None:
        result.status = Status.ERROR
        result.termination = Termination.ERROR
        result.proven_optimal = False
        result.message = (f"the any-order bound is wrong: {again} (recomputed after the cached bound failed "
                          "the same check); this is a bug in remat-bench, please report it")
    return result


def run_side_by_side(graph: Graph, methods: list[str], budget: Budget, time_limit: float | None,
                     params: dict[str, dict[str, Any]], *, bound: bool = True, jobs: int = 2,
                     bounds: BoundCache | None = None) -> list[RunResult]:
    """`run` for each of ``methods``, ``jobs`` at a time, each in a child process (results in ``methods``' order).

    The any-order bound is computed once, here, before the methods start (each run then reads it
    from the cache, and its bound time is this one's). A run that fails in its child, or is still
    running well past its limit (a tenth of it and 10 s), is an ``error`` result saying so; Ctrl-C
    stops every child.
    """
    from concurrent.futures import ThreadPoolExecutor

    from remat_bench.toolkit.child import run_in_child

    bounds = bounds if bounds is not None else BoundCache(default_cache_folder())
    bound_time = 0.0
    if bound:
        start = time.perf_counter()
        bounds.get(graph, budget.amount, bound_effort(time_limit))
        bound_time = time.perf_counter() - start
        # Each run's share of the limit is what is left after the bound, as when it computes the bound itself.
        if time_limit is not None:
            time_limit = max(time_limit - bound_time, 0.1 * time_limit)
    cache = bounds.for_graph(graph)

    def one(method: str) -> RunResult:
        grace = 10.0 + 0.1 * (time_limit or 0.0)
        stop_at = None if time_limit is None else time.perf_counter() + time_limit + grace
        outcome = run_in_child(_run_child, (graph, method, budget, time_limit, params.get(method, {}), bound, cache),
                               stop=lambda: interrupted() or (stop_at is not None and time.perf_counter() > stop_at),
                               daemon=False)
        if outcome.status == "done":
            result: RunResult = outcome.value
            result.bound_time_s = bound_time if bound else 0.0
            return result
        if outcome.status == "start_failed":
            return run(graph, method, budget, time_limit, params.get(method, {}), bound=bound, bounds=cache)
        cls, parsed = resolve_method(method, params.get(method, {}))
        result = _new_result(graph, method, cls, parsed, budget)
        result.message = ("interrupted" if interrupted() else
                          "still running well past its time limit; stopped" if outcome.status == "stopped"
                          else f"method '{method}' failed in its process: {outcome.message}")
        result.termination = Termination.INTERRUPTED if interrupted() else Termination.ERROR
        return result

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(one, methods))


def _run_child(graph: Graph, method: str, budget: Budget, time_limit: float | None, params: dict[str, Any],
               bound: bool, bounds: BoundCache) -> RunResult:
    """`run_side_by_side`'s child (module level, so that a spawned process can import it)."""
    return run(graph, method, budget, time_limit, params, bound=bound, bounds=bounds)
