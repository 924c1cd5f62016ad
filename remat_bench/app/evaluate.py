"""The one path that runs a method and judges its answer (docs/design.md section 6).

A number a method reports about itself is never trusted. `evaluate` is the only code
that decides whether a method applies (its requirements, its declared applicability,
the memory floor), computes the any-order bound the run is judged by, calls the method,
turns whatever it raises into a result, applies the shared clean-up, simulates the
cleaned schedule and judges it: over budget whatever the method believed, optimal only
where the schedule meets the any-order bound, and that bound checked against the
schedule (a contradiction discards a cached bound; a bound from the cache is also held
against a quick greedy schedule before the method runs, `checked_any_order`). `evaluate_in_child` runs the same
in a child process stopped `remat_bench.core.control.grace_s` past its limit. `solve`,
`solve` side by side, sweeps, the portfolio (`remat_bench.app.portfolio`) and candidate
schedules (through `SolveContext.runner` = `run_source`) all go through them.
"""

from __future__ import annotations

import dataclasses
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from remat_bench.core.baseline import baseline
from remat_bench.core.budget import Budget, budget_of
from remat_bench.core.cleanup import clean_up_simulated
from remat_bench.core.control import grace_s, interrupted
from remat_bench.core.errors import MethodError, ModelTooLargeError
from remat_bench.core.graph import Graph, Number
from remat_bench.core.outcome import MethodResult, SolutionStatus, Status, Termination
from remat_bench.core.progress import ProgressPoint, ProgressRecorder, Watcher
from remat_bench.core.schedule import Schedule
from remat_bench.core.simulate import Simulation, simulate
from remat_bench.methods import Method, get_method
from remat_bench.methods.base import SolveContext
from remat_bench.methods.greedy import GreedyPass
from remat_bench.toolkit.bound import Bound, BoundSource
from remat_bench.toolkit.eviction import Stuck  # what `GreedyPass.run` raises when it gives up

# A bound from the cache is held against greedy's schedule (`checked_any_order`), its pass stopped after
# this many computations per node (and 100 more): a schedule found within it is one of the cheap ones, and
# a pass that thrashes stops in a fraction of a second on a graph of thousands of nodes (greedy itself
# allows 20 per node).
CHECK_COMPUTES_PER_NODE = 2


@dataclass
class RunResult:
    """One judged run: what ``solve --json`` prints and what a sweep row is built from."""

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
    # For a schedule that copies values to the host and back (docs/design.md section 3, "Offload"): the most
    # host memory held at once, the memory units copied each way, and the time compute waited for copies.
    host_peak: Number | None = None
    to_host: Number | None = None
    to_device: Number | None = None
    wait: Number | None = None
    # For a method that may offload: the offload lower bound (`remat_bench.toolkit.offload_bound`), by
    # which its gap and optimality are judged instead of the any-order bound, and why it holds.
    lower_bound_offload: Number | None = None
    may_offload: bool = False  # the method's schedules may move values here (`Method.may_offload`)
    schedule: Schedule | None = None  # after the shared clean-up
    method_schedule: Schedule | None = None  # as the method returned it (a warm start for another method)
    simulation: Simulation | None = None
    # Its improving schedules over time, scored by the simulator (`remat_bench.core.progress`).
    progress: list[ProgressPoint] = field(default_factory=list)

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
        """The run as ``solve --json`` prints it.

        Returns
        -------
        dict
            JSON-ready fields: enums as their values, progress points as dicts; the schedules, the
            simulation, the `Bound` object (``stats`` holds its record) and ``below_floor`` are left out.
        """
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
            "lower_bound_offload": self.lower_bound_offload,
            "host_peak": self.host_peak,
            "to_host": self.to_host,
            "to_device": self.to_device,
            "wait": self.wait,
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
            "progress": [p.as_dict() for p in self.progress],
        }


# ---------------------------------------------------------------------- parameters

PIPELINE_PARAMS = {
    "impl": "operator implementations after solving: 'first' (as the method chose) or 'fastest-fit' "
            "(each compute gets the fastest implementation whose workspace still fits; MONeT's Checkmate-O)",
}


def parse_method_params(cls: type[Method], params: Mapping[str, Any]) -> dict[str, Any]:
    """The method's declared parameters (typed, defaults filled) plus the evaluation's own (``impl``),
    if given; raises MethodError for an unknown or mistyped one.

    Parameters
    ----------
    cls : type[Method]
        The method whose declared parameters are parsed.
    params : Mapping[str, Any]
        The parameters as given (text or values), ``impl`` among them or not.

    Returns
    -------
    dict
        Every declared parameter by its name, typed, and ``impl`` when it was given.

    Raises
    ------
    MethodError
        An undeclared parameter, a value its type refuses, or an ``impl`` mode that does not exist.
    """
    from remat_bench.toolkit.fastest_fit import MODES

    own = {k: v for k, v in params.items() if k not in PIPELINE_PARAMS}
    parsed = cls.parse_params(own)
    if "impl" in params:
        mode = str(params["impl"])
        if mode not in MODES:
            raise MethodError(f"parameter 'impl' must be one of {', '.join(MODES)}, got {mode!r}")
        parsed["impl"] = mode
    return parsed


def bound_effort(time_limit: float | None) -> float:
    """Seconds the any-order bound may take: a tenth of the limit, between 0.5 and 30 s (30 s with no limit).

    Parameters
    ----------
    time_limit : float or None
        The run's time limit in s; None for no limit.

    Returns
    -------
    float
        The bound's effort in s.
    """
    return 30.0 if time_limit is None else max(0.5, min(30.0, time_limit / 10))


def gap_pct(duration: Number, bound: Number | None) -> float | None:
    """How far ``duration`` is above ``bound``, in percent of the bound.

    Parameters
    ----------
    duration : Number
        A schedule's simulated duration.
    bound : Number or None
        A lower bound on the duration, in the same units; None when there is none.

    Returns
    -------
    float or None
        The gap, never below 0; None without a bound, or with a bound of 0 and a duration above it.
    """
    if bound is None:
        return None
    if bound == 0:
        return 0.0 if duration == 0 else None
    return max(0.0, 100.0 * (duration - bound) / bound)


# ---------------------------------------------------------------------- the evaluation

def evaluate(graph: Graph, method: type[Method], budget: Budget, time_limit: float | None,
             params: Mapping[str, Any] | None = None, *, bound: bool = True, context: SolveContext | None = None,
             peak_only: bool = False, gap: float | None = None) -> RunResult:
    """Run ``method`` on ``graph`` at ``budget`` and judge its answer with the simulator.

    Parameters
    ----------
    graph, method, budget, time_limit
        What to solve, with which method class (a registered method, or the portfolio), within
        which budget (parsed: `remat_bench.core.budget.parse_budget`), in how many seconds.
    params
        The method's parameters as given (text or values); ``impl`` is the evaluation's own.
    bound
        Compute the any-order lower bound (a tenth of the limit at most, or from the cache in
        ``context.bounds``) and judge the run by it; False: no gap, nothing proven optimal.
    context
        The run's shared objects: its bound cache, schedules offered as hints, and who watches
        its progress (``progress``: each improving schedule, scored, is passed on as it is found).
        The goals (`SolveContext.duration_goal`, ``peak_goal``, ``gap``), the runner for candidate
        schedules and the run's own progress recorder are set here.
    peak_only
        At ``budget=min``, the caller wants the lowest peak only (`remat-bench floor`): the
        method may stop once its peak meets the peak no schedule goes below.
    gap
        Stop once the schedule held is within this many points (percent of the baseline duration)
        of a valid lower bound: the any-order bound, or the method's own solver's bound in its
        space. None or 0: stop only where the answer is proven.

    Returns
    -------
    RunResult
        Every outcome, a failing method included, with a status and a message.

    Raises
    ------
    MethodError
        A parameter the method does not declare, or a value it refuses (exit status 2).
    """
    began = time.perf_counter()
    parsed = parse_method_params(method, params or {})
    context = context if context is not None else SolveContext()
    result = _new_result(graph, method, parsed, budget)
    why = _refusal(graph, method, budget, result)
    if why is not None:
        return why
    recorder = _recorder(graph, method, budget, parsed, result, context.watch, began)
    # Offloading can beat the any-order bound (a bound on schedules that only keep or recompute):
    # a method that may offload is judged by the offload bound instead, after it ran (`_judge`).
    if method.may_offload(graph):
        bound, result.may_offload = False, True
    if bound:
        time_limit = _any_order(graph, budget, time_limit, context.bounds, result)
        recorder.any_order(result.lower_bound_any_order)
    # The goals: this run's bound, else the caller's (a portfolio's member is judged by its portfolio).
    context = dataclasses.replace(
        context, runner=run_source, progress=recorder, watch=None,
        gap=context.gap if gap is None else gap / 100 * result.baseline_duration,
        duration_goal=(result.lower_bound_any_order if bound else context.duration_goal)
        if budget.amount is not None else None,
        peak_goal=result.peak_lower_bound if peak_only else context.peak_goal)
    recorder.goal = lambda peak, duration: context.reached(budget.amount, peak, duration)
    start = time.perf_counter()
    answer, verdict = _call(graph, method, parsed, budget, time_limit, context)
    wall = time.perf_counter() - start
    result.termination = answer.termination
    if interrupted() and answer.termination is Termination.TIME_LIMIT:
        result.termination = Termination.INTERRUPTED  # Ctrl-C ends every deadline: the method saw its limit
    result.solve_time_s = answer.solve_time_s or wall
    result.objective, result.lower_bound = answer.objective, answer.lower_bound
    result.stats = {**answer.stats, "bound_any_order": result.stats_bound}
    result.message = answer.message
    raised = verdict is not None
    if answer.schedule is not None and not raised:
        verdict = _judge(graph, budget, answer, result, context.bounds, bound_effort(time_limit))
    if not raised and _answer_with_best_held(answer, result, recorder):
        verdict = _judge(graph, budget, answer, result, context.bounds, bound_effort(time_limit))
    if verdict is None and result.proven_optimal and recorder.goal_reached and \
            answer.termination is Termination.CONVERGED:
        # It stopped because its schedule, as scored here, met the goal: the any-order bound, so
        # nothing is faster (a solver stopped from its callback cannot say so itself).
        answer.solution_status, result.termination = SolutionStatus.OPTIMAL, Termination.PROVEN
    # The one place a run's status is decided: what the method found, why it stopped, and the verdict.
    result.status = Status.of(answer.solution_status, result.termination, verdict)
    fits = result.status.found_schedule
    recorder.final(result.peak if fits else None, result.duration if fits else None, answer.lower_bound)
    result.progress = recorder.points()
    result.stats["progress_recording"] = {"offered": recorder.offered, "skipped": recorder.skipped,
                                          "scoring_s": round(recorder.scoring_s, 4)}
    return result


def _answer_with_best_held(answer: MethodResult, result: RunResult, recorder: ProgressRecorder) -> bool:
    """Make the best schedule the method held its answer when the simulator scored it better than the one
    the method returned (judged into ``result``: a solver's objective can prefer a schedule the clean-up
    makes slower), or when the method returned none within the budget after holding one. True when the
    answer changed (it is then judged again)."""
    if answer.solution_status is SolutionStatus.INFEASIBLE:
        return False  # a proof in the method's space: what it held was not of that space
    held = recorder.better_than(result.peak, result.duration)
    if held is None:
        return False
    schedule, point = held
    answer.schedule = schedule
    if not answer.status.found_schedule:
        answer.solution_status = SolutionStatus.FEASIBLE
    result.stats["answer_held_at"] = {"time_s": point.time_s, "source": point.source}
    answer.message = ((answer.message + "; ") if answer.message else "") + (
        f"the answer is the schedule held at {point.time_s:.2f} s ({point.source}), faster after the clean-up "
        "than the one the method ended with")
    result.message = answer.message
    return True


def _recorder(graph: Graph, method: type[Method], budget: Budget, parsed: dict[str, Any], result: RunResult,
              watcher: Watcher | None, began: float) -> ProgressRecorder:
    """The run's progress recorder: it scores what the method offers as the answer will be scored
    (`judge_schedule`, with the run's ``impl``), and passes the points it keeps on to ``watcher``."""
    impl = parsed.get("impl", "first")

    def score(schedule: Schedule) -> tuple[Number, Number] | None:
        judged = judge_schedule(graph, schedule, impl, budget.amount)
        return None if isinstance(judged, str) else (judged.simulation.peak, judged.simulation.duration)

    return ProgressRecorder(score, budget.amount, result.baseline_duration, method.name, forward=watcher,
                            start=began)


def evaluate_in_child(graph: Graph, method: type[Method], budget: Budget, time_limit: float | None,
                      params: Mapping[str, Any] | None = None, *, bound: bool = True,
                      context: SolveContext | None = None, peak_only: bool = False,
                      stop: Callable[[], str] | None = None, gap: float | None = None) -> RunResult:
    """`evaluate` in a spawned child process, stopped `remat_bench.core.control.grace_s` seconds
    past its limit, on Ctrl-C, or when ``stop()`` gives a reason; a stopped or failed child is an
    ``error`` result saying so. ``method`` crosses to the child by its place (a module-level
    class). Where no child can start, the evaluation runs here. The child's progress points
    stream back to ``context.watch`` as they are kept.

    Parameters
    ----------
    graph, method, budget, time_limit, params, bound, context, peak_only, gap
        As for `evaluate`; the child gets only this graph's bounds from ``context.bounds``.
    stop : Callable[[], str] or None
        Asked while the child runs: a non-empty reason it returns stops the child, and becomes
        the result's message. None: stopped only past its limit or on Ctrl-C.

    Returns
    -------
    RunResult
        The child's result; an ``error`` result saying why when the child was stopped or failed.

    Raises
    ------
    MethodError
        A parameter the method does not declare, or a value it refuses (exit status 2).
    """
    from remat_bench.toolkit.child import run_in_child

    parsed = parse_method_params(method, params or {})  # a bad parameter is refused before a child starts
    context = context if context is not None else SolveContext()
    watcher = context.watch
    # The child gets this graph's bounds only: the rest of a shared cache stays here; its progress
    # comes back through the pipe.
    context = dataclasses.replace(context, bounds=context.bounds.for_graph(graph), runner=None, watch=None)
    stop_at = None if time_limit is None else time.perf_counter() + time_limit + grace_s(time_limit)
    reason = ""
    why = Termination.INTERRUPTED

    def stopping() -> bool:
        nonlocal reason, why
        if interrupted():
            reason = "interrupted"
        elif stop is not None and (told := stop()):
            reason = told
        elif stop_at is not None and time.perf_counter() > stop_at:
            reason = f"still running {grace_s(time_limit):g} s past its time limit; stopped"
            why = Termination.TIME_LIMIT
        return bool(reason)

    outcome = run_in_child(_child_evaluate, (graph, method, budget, time_limit, dict(params or {}), bound, context,
                                             peak_only, gap), stop=stopping, daemon=False,
                           stream_to=None if watcher is None else "on_point",
                           on_message=None if watcher is None else watcher.take)
    if outcome.returned:
        done: RunResult = outcome.value
        return done
    if outcome.termination is Termination.NOT_APPLICABLE:  # no child could start: here, then
        return evaluate(graph, method, budget, time_limit, params, bound=bound,
                        context=dataclasses.replace(context, watch=watcher), peak_only=peak_only, gap=gap)
    result = _new_result(graph, method, parsed, budget)
    if outcome.termination is Termination.ERROR:
        result.message, result.termination = f"method '{method.name}' failed in its process: {outcome.message}", \
            Termination.ERROR
    else:
        result.message, result.termination = reason, why
    # Stopped (past its limit, on Ctrl-C, or told to) or failed: no answer came back, which is an error.
    result.status = Status.of(SolutionStatus.NO_SOLUTION, result.termination, Status.ERROR)
    return result


def _child_evaluate(graph: Graph, method: type[Method], budget: Budget, time_limit: float | None,
                    params: dict[str, Any], bound: bool, context: SolveContext, peak_only: bool,
                    gap: float | None, on_point: Callable[[ProgressPoint], None] | None = None) -> RunResult:
    """`evaluate_in_child`'s child (module level, so that a spawned process can import it); ``on_point``
    sends a progress point to the parent."""
    if on_point is not None:
        context = dataclasses.replace(context, watch=_Sent(on_point))
    return evaluate(graph, method, budget, time_limit, params, bound=bound, context=context, peak_only=peak_only,
                    gap=gap)


@dataclass
class _Sent:
    """A child's watcher: the points its run keeps go to the parent."""

    send: Callable[[ProgressPoint], None]

    def take(self, point: ProgressPoint) -> None:
        self.send(point)


def run_source(name: str, graph: Graph, budget: Number | None, time_limit: float | None,
               params: Mapping[str, Any]) -> RunResult:
    """The runner `SolveContext` hands to methods for candidate schedules: a registered method by
    name, evaluated without the any-order bound (a warm start is not judged by it).

    Parameters
    ----------
    name : str
        A registered method's name.
    graph : Graph
    budget : Number or None
        Already resolved, in ``graph``'s memory units; None for ``min``.
    time_limit : float or None
        In s; None for no limit.
    params : Mapping[str, Any]
        The method's parameters as given (text or values).

    Returns
    -------
    RunResult

    Raises
    ------
    MethodError
        An unknown method name, or a parameter the method refuses.
    """
    return evaluate(graph, get_method(name), budget_of(budget, graph), time_limit, params, bound=False)


@dataclass
class Judged:
    """A schedule after the shared clean-up, as every run is scored: the cleaned schedule, its
    simulation, and what the clean-up did."""

    schedule: Schedule
    simulation: Simulation
    cleanup: dict[str, Any]


def judge_schedule(graph: Graph, schedule: Schedule, impl: str = "first",
                   budget: Number | None = None) -> Judged | str:
    """``schedule`` after the shared clean-up (and, with ``impl`` fastest-fit, MONeT's Checkmate-O
    pass at ``budget``), simulated; or why it is invalid (one sentence).

    Parameters
    ----------
    graph : Graph
    schedule : Schedule
        As a method returned it.
    impl : str
        ``first`` (the implementations as the schedule chose them) or ``fastest-fit``.
    budget : Number or None
        The budget the fastest-fit pass keeps to, in ``graph``'s memory units; None for ``min``.

    Returns
    -------
    Judged or str
        The cleaned schedule, its simulation and the clean-up's record; or the sentence saying why
        ``schedule`` is invalid.
    """
    raw = simulate(graph, schedule)
    if not raw.valid:
        return f"an invalid schedule: {raw.violation}"
    cleaned, report, sim = clean_up_simulated(graph, schedule, raw)
    if impl == "fastest-fit":
        from remat_bench.toolkit.fastest_fit import fastest_fit

        first = report
        cleaned, report, sim = clean_up_simulated(graph, fastest_fit(graph, cleaned, budget))
        # What the record describes: the method's schedule before any clean-up, and the end result.
        report = dataclasses.replace(report, duration_before=first.duration_before, peak_before=first.peak_before,
                                     computes_before=first.computes_before, dropped=first.dropped + report.dropped)
    return Judged(cleaned, sim, report.as_dict())


# ---------------------------------------------------------------------- its steps

def _new_result(graph: Graph, method: type[Method], parsed: dict[str, Any], budget: Budget) -> RunResult:
    """The run's record before anything is decided: status error until something better is known."""
    base = baseline(graph)
    return RunResult(graph=graph.name, graph_sha256=graph.sha256, method=method.name, params=parsed,
                     status=Status.ERROR, message="", budget=budget.amount, budget_fraction=budget.fraction,
                     baseline_peak=base.peak, baseline_duration=base.duration, space=method.space(parsed))


def _refusal(graph: Graph, method: type[Method], budget: Budget, result: RunResult) -> RunResult | None:
    """``result``, final, when the method does not run: its requirements are missing, it does not apply
    (`Method.skip`), or the budget is below the memory floor; None when it runs."""
    if budget.peak_bound is not None:
        result.peak_lower_bound, result.peak_lower_bound_reason = budget.peak_bound.amount, budget.peak_bound.reason
    refusal = budget.refusal
    if method.may_offload(graph) and budget.amount is not None:
        # The memory floor of budget.refusal holds for schedules that keep or recompute; offloading
        # lowers it (a value held over a gap can wait on the host): the offload floor decides.
        refusal = _below_offload_floor(graph, budget.amount)
    if refusal is not None:
        result.message, result.below_floor = refusal, True
        result.termination = Termination.PROVEN  # at once, by the memory floor
        result.status = Status.of(SolutionStatus.INFEASIBLE, result.termination)
        return result
    reason = applicable(graph, method, budget.amount)
    if reason is not None:
        result.message, result.termination = reason, Termination.NOT_APPLICABLE
        result.status = Status.of(SolutionStatus.NO_SOLUTION, result.termination)
        return result
    return None


def _below_offload_floor(graph: Graph, amount: Number) -> str | None:
    """Why no schedule that offloads fits ``amount`` (the offload floor is above it), or None."""
    from remat_bench.toolkit.offload_bound import offload_floor

    floor = offload_floor(graph)
    if amount >= floor:
        return None
    return (f"the budget {amount} is below the offload floor {floor}: some computation needs its inputs, "
            "its output and its workspace on the device at once, with everything else on the host")


def applicable(graph: Graph, method: type[Method], budget: Number | None) -> str | None:
    """Why ``method`` does not run on ``graph`` at ``budget`` (its requirements are missing here, or
    its declared applicability, `Method.skip`, excludes it), or None when it runs.

    Parameters
    ----------
    graph : Graph
    method : type[Method]
    budget : Number or None
        In ``graph``'s memory units; None for ``min``.

    Returns
    -------
    str or None
        One sentence, or None when the method runs.
    """
    ok, why = method.available()
    return why if not ok else method.skip(graph, budget)


def _any_order(graph: Graph, budget: Budget, time_limit: float | None, bounds: BoundSource,
               result: RunResult) -> float | None:
    """The any-order lower bound, recorded in ``result``; returns the time limit left for the method.

    The bound is part of the run's time: at most a tenth of the limit, and the method gets the rest.
    """
    start = time.perf_counter()
    any_order, from_cache, discarded = checked_any_order(graph, budget.amount, bound_effort(time_limit), bounds)
    result.bound_time_s = time.perf_counter() - start
    result.any_order = any_order
    result.lower_bound_any_order = any_order.value
    result.stats_bound = {**any_order.as_dict(), "from_cache": from_cache,
                          **({"discarded": discarded} if discarded else {})}
    if time_limit is not None:
        time_limit = max(time_limit - result.bound_time_s, 0.1 * time_limit)
    return time_limit


def checked_any_order(graph: Graph, budget: Number | None, effort: float,
                      bounds: BoundSource) -> tuple[Bound, bool, str | None]:
    """The any-order bound of ``graph`` at ``budget`` from ``bounds``; one that came from the cache is first
    held against greedy's schedule, and computed again when that schedule contradicts it.

    A cached bound is a claim anyone could have edited: the cache checks what needs no schedule
    (`remat_bench.toolkit.bound_cache.checked_bound`), and here a schedule within the budget shorter
    than the bound, or one at all where the bound says none fits, refutes it. Greedy's pass, capped at
    `CHECK_COMPUTES_PER_NODE` computations per node, costs little beside the bound.

    Parameters
    ----------
    graph : Graph
    budget : Number or None
        In the graph's memory units; None for ``min`` (the trivial bound: nothing to check).
    effort : float
        Seconds the bound may take when it is computed (`bound_effort`).
    bounds : BoundSource
        Where bounds are cached.

    Returns
    -------
    bound : Bound
    from_cache : bool
        Whether the bound is the cache's (checked), rather than computed now.
    discarded : str or None
        Why the cached bound was discarded and computed again: greedy's schedule contradicted it.
    """
    bound, from_cache = bounds.get(graph, budget, effort)
    if not from_cache or budget is None or bound.value is None:
        return bound, from_cache, None  # None: believed only below a proven peak bound (the cache checks)
    run = GreedyPass(graph, budget)
    run.max_computes = CHECK_COMPUTES_PER_NODE * graph.n + 100
    try:
        sim = simulate(graph, run.run())
    except Stuck:
        return bound, True, None  # greedy finds nothing here quickly: nothing contradicts the bound
    why = contradiction(bound, sim.duration, sim.peak, budget, "a greedy schedule") if sim.valid else None
    if why is None:
        return bound, True, None
    return bounds.recompute(graph, budget, effort), False, f"{why}; recomputed"


def _call(graph: Graph, method: type[Method], parsed: dict[str, Any], budget: Budget, time_limit: float | None,
          context: SolveContext) -> tuple[MethodResult, Status | None]:
    """The method's answer, and the verdict on what it raised (None when it returned); its failures (out
    of memory, a model too large, a bug) are answers too.

    The only place a method's exceptions are caught (`tests/test_architecture.py`).
    """
    verdict = None
    try:
        instance = method()
        instance.context = context
        answer = instance.solve(graph, budget.amount, time_limit, **{k: v for k, v in parsed.items()
                                                                   if k not in PIPELINE_PARAMS})
    except KeyboardInterrupt:
        raise
    except ModelTooLargeError as exc:
        # The method measured its model before building it and declined: a clean answer.
        answer = MethodResult(SolutionStatus.NO_SOLUTION, message=str(exc), termination=Termination.RESOURCE_LIMIT)
        verdict = Status.UNSUPPORTED
    except MemoryError:
        # The sweep worker recognises this status (and sentence) to record the run as 'oom'.
        answer = MethodResult(SolutionStatus.NO_SOLUTION, message=f"method '{method.name}' ran out of memory",
                              termination=Termination.RESOURCE_LIMIT)
        verdict = Status.OOM
    except Exception as exc:  # a method's bug is recorded, never lost
        answer = MethodResult(SolutionStatus.NO_SOLUTION,
                              message=f"method '{method.name}' failed: {type(exc).__name__}: {exc}",
                              stats={"traceback": traceback.format_exc(limit=8)}, termination=Termination.ERROR)
    if interrupted():
        answer.message = ("interrupted: the best schedule found before Ctrl-C" if answer.schedule is not None
                          else "interrupted before a schedule was found") + (
                              f"; {answer.message}" if answer.message else "")
    return answer, verdict


def _judge(graph: Graph, budget: Budget, answer: MethodResult, result: RunResult, bounds: BoundSource,
           effort: float) -> Status | None:
    """Score the method's schedule as every run is scored, and judge it: valid, over budget whatever the
    method believed, optimal only where it meets the any-order bound, and that bound checked. Returns
    the verdict (`Status.of`): error, over_budget, or None where the method's word stands."""
    assert answer.schedule is not None
    judged = judge_schedule(graph, answer.schedule, result.params.get("impl", "first"), budget.amount)
    if isinstance(judged, str):
        result.message = f"method '{result.method}' returned {judged}"
        return Status.ERROR
    sim = judged.simulation
    result.method_schedule = answer.schedule
    result.schedule = judged.schedule.with_meta(  # the same steps: ``sim`` stays theirs
        method=result.method, params=result.params, budget=budget.amount,
        solver={"status": answer.status.value, "objective": answer.objective, "lower_bound": answer.lower_bound,
                "solve_time_s": result.solve_time_s,
                "stats": {k: v for k, v in answer.stats.items() if k != "traceback"}})
    result.simulation, result.cleanup = sim, judged.cleanup
    result.peak, result.duration = sim.peak, sim.duration
    if sim.offloads or sim.reloads:
        result.host_peak, result.to_host, result.to_device, result.wait = (
            sim.host_peak, sim.to_host, sim.to_device, sim.wait)
    result.overhead_pct = sim.overhead_pct(result.baseline_duration)
    result.schedule_steps = len(judged.schedule)
    verdict = None
    found = answer.status.found_schedule  # what the method claimed, before any verdict
    if budget.amount is not None and sim.peak > budget.amount and found:
        verdict = Status.OVER_BUDGET
        result.message = (f"the simulated peak {sim.peak} is above the budget {budget.amount}"
                          + (f" ({answer.message})" if answer.message else ""))
    if result.any_order is not None and not _hold_to_bound(graph, budget, result, bounds, effort,
                                                           found and verdict is None):
        verdict = Status.ERROR
    if result.may_offload and budget.amount is not None and not _hold_to_offload_bound(
            graph, budget.amount, result, found and verdict is None, bounds):
        verdict = Status.ERROR
    return verdict


def _hold_to_offload_bound(graph: Graph, amount: Number, result: RunResult, found: bool,
                           bounds: BoundSource) -> bool:
    """Judge a run of a method that may offload by the offload bound: its gap, proven optimal where its
    schedule within the budget meets the bound, and an error (False) where a schedule beats the bound."""
    from remat_bench.toolkit.offload_bound import offload_bound

    assert result.peak is not None and result.duration is not None
    value, why = offload_bound(graph, amount, any_order=bounds.peek(graph, amount))  # the cached one, where known
    result.lower_bound_offload = value
    result.stats["bound_offload"] = {"value": value, "why": why}
    if value is None:
        return True
    result.gap_pct = gap_pct(result.duration, value)
    fits = result.peak <= amount
    slack = 0 if isinstance(value, int) and isinstance(result.duration, int) else 1e-9 * max(1.0, abs(value))
    if fits and result.duration < value - slack:
        result.termination = Termination.ERROR
        result.message = (f"the offload bound is wrong: a schedule within the budget takes {result.duration}, below "
                          f"the bound {value} ({why}); this is a bug in remat-bench, please report it")
        return False
    result.proven_optimal = bool(fits and found and result.duration <= value + slack)
    return True


def _hold_to_bound(graph: Graph, budget: Budget, result: RunResult, bounds: BoundSource, effort: float,
                   found: bool) -> bool:
    """Hold the run's schedule against the any-order bound it reports: a schedule within the budget
    shorter than the bound (or where the bound says none fits) contradicts it. Returns False when the
    bound is wrong (the run is then an error); sets ``proven_optimal`` where a schedule ``found``
    within the budget meets the bound.

    The bound may have come from the disk cache, which anyone can edit: a contradicted bound is
    discarded and computed again. If the fresh bound is contradicted too, the bound is wrong and the
    run is an error (never "proven optimal"); otherwise the fresh bound is the run's.
    """
    assert result.any_order is not None and result.peak is not None and result.duration is not None
    bound = result.any_order
    why = contradiction(bound, result.duration, result.peak, budget.amount)
    if why is not None:
        start = time.perf_counter()
        bound = bounds.recompute(graph, budget.amount, effort)
        result.bound_time_s += time.perf_counter() - start
        result.any_order, result.lower_bound_any_order = bound, bound.value
        result.stats_bound = {**bound.as_dict(), "from_cache": False, "discarded": why}
        result.stats["bound_any_order"] = result.stats_bound
    result.gap_pct = gap_pct(result.duration, bound.value)
    again = contradiction(bound, result.duration, result.peak, budget.amount) if why is not None else None
    fits = budget.amount is None or result.peak <= budget.amount
    result.proven_optimal = bool(fits and found and again is None and bound.value is not None
                                 and result.duration <= bound.value)
    if again is not None:
        result.termination = Termination.ERROR
        result.message = (f"the any-order bound is wrong: {again} (recomputed after the cached bound failed "
                          "the same check); this is a bug in remat-bench, please report it")
        return False
    return True


def contradiction(bound: Bound, duration: Number, peak: Number, budget: Number | None,
                  schedule: str = "a schedule") -> str | None:
    """Why a simulated schedule contradicts ``bound``, or None when it does not.

    A schedule whose peak is within ``budget`` cannot be shorter than a valid lower bound at
    that budget, and cannot exist at all where the bound says no schedule fits. Durations are
    compared exactly when both are integers, else to a relative 1e-9 (rounding in sums of floats).

    Parameters
    ----------
    bound : Bound
        The any-order bound at ``budget``.
    duration, peak : Number
        The schedule's simulated duration and peak.
    budget : Number or None
        In the graph's memory units; None for ``min``.
    schedule : str
        How the sentence names the schedule ("a greedy schedule").

    Returns
    -------
    str or None
        One sentence saying what contradicts the bound, or None.
    """
    if budget is not None and peak > budget:
        return None
    if bound.termination is Termination.PROVEN and bound.value is None:
        return f"the bound says no schedule fits the budget, yet {schedule} with peak {peak} does"
    if bound.value is None:
        return None
    slack = 0 if isinstance(bound.value, int) and isinstance(duration, int) else 1e-9 * max(1.0, abs(bound.value))
    if duration < bound.value - slack:
        return f"{schedule} within the budget takes {duration}, below the bound {bound.value}"
    return None
