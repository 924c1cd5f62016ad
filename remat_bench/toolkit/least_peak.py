"""``budget=min`` for a method that solves under a budget: bisection on the budget."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from remat_bench.core.control import Deadline, interrupted
from remat_bench.core.graph import Graph, Number
from remat_bench.core.outcome import MethodResult, SolutionStatus, Status, Termination, cut_short
from remat_bench.core.schedule import Schedule


def least_peak_by_bisection(graph: Graph, solve_at: Callable[[Number, float | None], MethodResult],
                            deadline: Deadline, search_share: float = 0.5,
                            peak_goal: Number | None = None) -> MethodResult:
    """``budget=min`` for a method that solves under a budget: bisect on the budget, then solve at the least.

    The budget is bisected between the memory floor (below it nothing fits) and the
    baseline peak (the baseline schedule fits there) with ``search_share`` of the time:
    a budget where the method finds a schedule lowers the upper end to that schedule's
    simulated peak, one it proves infeasible raises the lower end, and one where it
    finds nothing in its time slice also raises it, without proof. The search stops
    within half a percent of the baseline peak; the method then minimises duration at
    the least budget found, with the time left. The answer is optimal only when the
    least peak was proven (the two ends met on proofs) and the last solve proved its
    duration optimal. Its termination: the last solve's proof then; else the time limit
    where it cut the bisection short; else how the last solve ended (a proof there, which
    does not cover the least peak, reads ``converged``). stats: ``least_peak``,
    ``least_peak_lower`` (no schedule of the method's space peaks below it, when
    ``least_peak_proven``), ``probes``. A caller that wants
    the peak only gives ``peak_goal``, a peak no schedule goes below (`SolveContext.peak_goal`):
    once a schedule reaches it, the search ends there, its duration not minimised.

    Parameters
    ----------
    graph : Graph
    solve_at : Callable[[Number, float or None], MethodResult]
        The method at a budget (memory units) with a time limit (s; None: none).
    deadline : Deadline
        The whole search's.
    search_share : float
        The share of the time left that the bisection may take.
    peak_goal : Number or None
        As above; None: the search runs to its tolerance.

    Returns
    -------
    MethodResult
        The last solve's answer, or the bisection's best when it found none, with the stats above; no
        solution when neither found a schedule.
    """
    from remat_bench.core.baseline import baseline
    from remat_bench.core.budget import memory_floor
    from remat_bench.core.simulate import simulate

    lo, hi = memory_floor(graph).amount, baseline(graph).peak
    whole = isinstance(hi, int) and isinstance(lo, int)
    # Half a percent of the baseline peak; on graphs of a few units, to the unit.
    tolerance = 0.005 * hi if not whole or 0.005 * hi >= 1 else 0
    remaining = deadline.remaining()
    search = Deadline(None if remaining is None else search_share * remaining)
    best: MethodResult | None = None
    proven = True
    probes: list[dict[str, Any]] = []
    while hi - lo > tolerance and not search.expired() and not interrupted():
        if best is not None and peak_goal is not None and hi <= peak_goal:
            break
        mid = (lo + hi) // 2 if whole else (lo + hi) / 2
        left = search.remaining()
        # Each probe gets the time of the probes still needed, at most: about log2 of the gap.
        steps = max(1.0, math.log2(max(2.0, (hi - lo) / max(tolerance, 1e-9 * hi, 0.5))))
        answer = solve_at(mid, None if left is None else max(0.5, left / steps))
        peak = simulate(graph, answer.schedule).peak if answer.schedule is not None else None
        if answer.status.found_schedule and peak is not None and peak <= mid:
            hi, best = peak, answer
            probes.append({"budget": mid, "found_peak": peak})
        else:
            lo = mid + 1 if whole else mid
            proven = proven and answer.status is Status.INFEASIBLE
            probes.append({"budget": mid, "status": answer.status.value})
    if best is not None and peak_goal is not None and hi <= peak_goal:
        best.stats = {**best.stats, "least_peak": hi, "least_peak_lower": hi, "least_peak_proven": True,
                      "probes": probes}
        best.solution_status, best.termination = SolutionStatus.FEASIBLE, Termination.PROVEN  # the goal is met
        best.message = "the lowest peak is proven; its duration was not minimised"
        best.solve_time_s = deadline.elapsed()
        return best
    final = solve_at(hi, deadline.remaining())
    result = final if final.status.found_schedule else best
    ended: Termination = final.termination if final.termination is not Termination.PROVEN else Termination.CONVERGED
    if search.ran_out:
        ended = cut_short()
    if result is None:
        return MethodResult(SolutionStatus.NO_SOLUTION, solve_time_s=deadline.elapsed(), stats={"probes": probes},
                            message="no schedule found while searching for the least peak", termination=ended)
    exact = proven and hi <= lo
    result.stats = {**result.stats, "least_peak": hi, "least_peak_lower": lo, "least_peak_proven": exact,
                    "probes": probes}
    if result.solution_status is SolutionStatus.OPTIMAL and not (exact and result is final):
        result.solution_status = SolutionStatus.FEASIBLE
    if result.solution_status is not SolutionStatus.OPTIMAL:
        result.termination = ended
    if not exact:
        result.message = (f"least peak searched to within {tolerance:,g} of the baseline peak: between {lo:,} "
                          f"and {hi:,}" + ("" if proven else " (the lower end unproven: probes ran out of time)"))
    result.solve_time_s = deadline.elapsed()
    return result


def least_peak_of_pass(graph: Graph, schedule_at: Callable[[Number], Schedule], deadline: Deadline,
                       stuck: tuple[type[BaseException], ...],
                       stop: tuple[type[BaseException], ...] = ()) -> tuple[Schedule, int, bool]:
    """``budget=min`` for an eviction pass (greedy, dtr): bisect the budget for the lowest simulated peak.

    ``schedule_at(budget)`` runs the pass, raising one of ``stuck`` where it cannot make room and
    one of ``stop`` when its time runs out. The pass need not be monotone in the budget, so the
    lowest peak seen is kept. Returns (that schedule, bisection rounds, whether the search ended
    by converging rather than on the deadline or a stop).

    Parameters
    ----------
    graph : Graph
    schedule_at : Callable[[Number], Schedule]
        The pass at a budget (memory units).
    deadline : Deadline
        Ends the bisection.
    stuck : tuple of exception types
        What the pass raises where it cannot make room.
    stop : tuple of exception types
        What the pass raises when its time runs out.

    Returns
    -------
    tuple of (Schedule, int, bool)
        As above.
    """
    from remat_bench.core.baseline import baseline, baseline_schedule
    from remat_bench.core.budget import memory_floor
    from remat_bench.core.simulate import simulate

    low, high = memory_floor(graph).amount, baseline(graph).peak
    try:
        best = schedule_at(high)
    except stuck + stop:
        # Fractional sizes summed in another order can overshoot the baseline peak by an ulp; the
        # baseline schedule, the pass's own at that budget (nothing evicted), reaches it.
        best = baseline_schedule(graph)
    best_peak = simulate(graph, best).peak
    integral = isinstance(high, int) and isinstance(low, int)
    rounds = 0
    while low < high and not deadline.expired():
        mid = (low + high) // 2 if integral else (low + high) / 2
        rounds += 1
        try:
            schedule = schedule_at(mid)
        except stuck:
            low = mid + 1 if integral else mid
        except stop:
            return best, rounds, False
        else:
            peak = simulate(graph, schedule).peak
            if peak < best_peak:
                best, best_peak = schedule, peak
            high = min(mid, peak)
        if not integral and high - low <= 1e-9 * max(1.0, float(high)):
            break
    return best, rounds, not (deadline.expired() and low < high)
