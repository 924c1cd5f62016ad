"""Candidate schedules: how one method uses others' answers (warm starts, hints, fallbacks).

An exact method's bottleneck is often its first incumbent: a schedule from a fast
heuristic, accepted by its model, starts it (without one Checkmate's MILP stays far from
the published overheads: docs/benchmarks.md, "Checkmate"). A method asks for
candidates here, by name, with the share of its time each may take; it never
imports another method. Names:

- ``baseline``: every node once in file order (`remat_bench.core.baseline`);
- ``shaved``: the input order with its memory peaks shaved to the budget
  (`remat_bench.toolkit.improve.shaved_order`; params ``max_copies``, ``cap_s``);
- any registered method (``greedy``, ``chen``, ``kusumoto``, ``checkmate-lp``...),
  run through the registry with the given parameters.

Each source gets ``share`` of the time left when it starts (at least ``floor``
seconds). A schedule is kept when it is valid, within the budget, and accepted
by the caller's ``accept`` (a check of the caller's own space: MONeT's shape,
Checkmate's stages). What each source gave, and whether it was used, is recorded
in the caller's stats under ``candidates``, so a run's record says where its
warm start came from.

Schedules can also be *offered*: `SolveContext.hints` carries schedules the
caller already has (``auto`` hands its fast members' answers to its exact
ones); `offered_candidates` checks them like any source's. And an exact method
never returns worse than what it was given or found on the way: `best_of`
compares its answer with every candidate, after the shared clean-up the
pipeline applies, and returns the fastest (a candidate outside the method's
space included, with its status ``feasible`` and a message saying whose it is).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from remat_bench.core.baseline import baseline_schedule
from remat_bench.core.cleanup import clean_up_simulated, place_frees
from remat_bench.core.control import Deadline
from remat_bench.core.graph import Graph, Number
from remat_bench.core.outcome import MethodResult, SolutionStatus, Status
from remat_bench.core.schedule import Schedule
from remat_bench.core.simulate import simulate
from remat_bench.methods.base import Param, SolveContext


@dataclass(frozen=True)
class Source:
    """One named source of candidates, with its parameters and its share of the time left."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)
    share: float = 1.0
    floor: float = 0.0  # seconds it gets however little time is left (the answer of last resort)


@dataclass
class Candidate:
    source: str
    schedule: Schedule
    peak: Number
    duration: Number


def candidate_schedules(graph: Graph, budget: Number | None, deadline: Deadline, sources: Sequence[Source], *,
                        context: SolveContext, accept: Callable[[Schedule], bool] | None = None,
                        stats: dict[str, Any] | None = None, over_budget: bool = False) -> list[Candidate]:
    """The schedules ``sources`` give within ``budget``, and those the caller was offered
    (``context.hints``), fastest first (least peak first for ``min``).

    A registered method runs through ``context.runner`` (the evaluation path the caller's caller
    set, `SolveContext`); without one, method sources are skipped and say so. ``over_budget``
    keeps valid schedules above the budget too (hints for a search that minimises
    max(peak, budget) first, as Moccasin's phase 1 does). A source whose name an offered
    schedule bears is not run again (``auto`` offers its fast members' answers by name).

    Parameters
    ----------
    graph : Graph
    budget : Number or None
        In the graph's memory units; None for ``min`` (every valid schedule is within it).
    deadline : Deadline
        The caller's; each source gets its ``share`` of the time left when it starts.
    sources : Sequence of Source
        Tried in this order.
    context : SolveContext
        The caller's: its ``hints``, its ``runner``, and its ``report`` (told of each kept candidate).
    accept : callable or None
        The caller's check of its own space; None accepts every schedule.
    stats : dict or None
        The caller's stats: what each source gave is appended under ``candidates``.
    over_budget : bool
        Keep valid schedules above the budget too.

    Returns
    -------
    list of Candidate
        Fastest first (least peak first when ``budget`` is None).
    """
    offered = context.hints
    found = offered_candidates(graph, budget, offered, accept=accept, stats=stats, over_budget=over_budget)
    for candidate in found:
        context.report(candidate.schedule, source=candidate.source)
    record = stats.setdefault("candidates", []) if stats is not None else []
    have = {label for label, _ in offered}
    for source in sources:
        if source.name in have:
            record.append({"source": source.name, "skipped": "offered by the caller"})
            continue
        remaining = deadline.remaining()
        limit = None if remaining is None else max(source.share * remaining, source.floor)
        if limit is not None and limit <= 0.01:
            record.append({"source": source.name, "skipped": "no time left"})
            continue
        start = time.perf_counter()
        entry: dict[str, Any] = {"source": source.name}
        schedule = _run(graph, budget, source, limit, context, entry)
        entry["seconds"] = round(time.perf_counter() - start, 3)
        if schedule is not None:
            sim = simulate(graph, schedule)
            entry["within_budget"] = bool(sim.valid and (budget is None or sim.peak <= budget))
            usable = entry["within_budget"] or (over_budget and sim.valid)
            entry["accepted"] = usable and (accept is None or bool(accept(schedule)))
            if entry["accepted"]:
                found.append(Candidate(source.name, schedule, sim.peak, sim.duration))
                context.report(schedule, source=source.name)  # the caller holds it from now on
        else:
            entry.setdefault("found", False)
        record.append(entry)
    return _sorted(found, budget)


def _sorted(found: list[Candidate], budget: Number | None) -> list[Candidate]:
    key = (lambda c: (c.duration, c.peak)) if budget is not None else (lambda c: (c.peak, c.duration))
    return sorted(found, key=key)


def offered_candidates(graph: Graph, budget: Number | None, hints: Sequence[tuple[str, Schedule]], *,
                       accept: Callable[[Schedule], bool] | None = None, stats: dict[str, Any] | None = None,
                       over_budget: bool = False) -> list[Candidate]:
    """The schedules a caller offered (`SolveContext.hints`), checked as `candidate_schedules` checks its
    sources' (valid, within the budget unless ``over_budget``, accepted), recorded as ``hint:<label>``.

    Parameters
    ----------
    graph : Graph
    budget : Number or None
        In the graph's memory units; None for ``min``.
    hints : Sequence of tuple of (str, Schedule)
        The offered schedules and their labels.
    accept : callable or None
        The caller's check of its own space; None accepts every schedule.
    stats : dict or None
        The caller's stats: each hint's check is appended under ``candidates``.
    over_budget : bool
        Keep valid schedules above the budget too.

    Returns
    -------
    list of Candidate
        Fastest first (least peak first when ``budget`` is None), each named ``hint:<label>``.
    """
    found: list[Candidate] = []
    record = stats.setdefault("candidates", []) if stats is not None else []
    for label, schedule in hints:
        sim = simulate(graph, schedule)
        entry: dict[str, Any] = {"source": f"hint:{label}", "seconds": 0.0, "valid": bool(sim.valid)}
        if sim.valid:
            entry["within_budget"] = bool(budget is None or sim.peak <= budget)
            entry["accepted"] = (entry["within_budget"] or over_budget) and (accept is None or bool(accept(schedule)))
            if entry["accepted"]:
                found.append(Candidate(f"hint:{label}", schedule, sim.peak, sim.duration))
        record.append(entry)
    return _sorted(found, budget)


# The parameter of every method that uses `best_of`: off, the method answers with its own search's
# schedule only (to compare formulations, or test one against a brute force of its space).
KEEP_BEST = Param("keep_best", bool, True, "return the fastest schedule seen, its candidates and hints included "
                  "(false: the search's own only, to compare formulations)")


def best_of(graph: Graph, budget: Number | None, answer: MethodResult, pool: Sequence[Candidate],
            stats: dict[str, Any] | None = None) -> MethodResult:
    """``answer``, or the fastest schedule of ``pool`` within ``budget`` when that is faster.

    Durations are compared after the shared clean-up (`remat_bench.core.cleanup.clean_up`), as the
    pipeline will score them. A candidate that wins is returned as ``feasible``: the method's own
    proof (optimal or infeasible in its space) does not cover a schedule it did not find, and the
    message says so. With ``budget`` None (the lowest peak), the answer stands.

    Parameters
    ----------
    graph : Graph
    budget : Number or None
        In the graph's memory units; None for ``min``.
    answer : MethodResult
        The method's own search's answer.
    pool : Sequence of Candidate
        The candidates it was given or found on the way.
    stats : dict or None
        Where ``returned`` (and ``search_status`` when a candidate wins) is recorded; None:
        ``answer.stats``.

    Returns
    -------
    MethodResult
        ``answer`` itself, or a ``feasible`` result with the winning candidate's schedule.
    """
    if budget is None or not pool:
        return answer
    record = stats if stats is not None else answer.stats
    mine = _cleaned(graph, answer.schedule, budget) if answer.status.found_schedule else None
    best: tuple[Number, Number, Candidate] | None = None
    for c in pool:
        scored = _cleaned(graph, c.schedule, budget)
        if scored is not None and (best is None or scored < best[:2]):
            best = (*scored, c)
    if best is None or (mine is not None and mine <= best[:2]):
        if mine is not None:
            record.setdefault("returned", "search")  # the method's own search (or its own fallback, named)
        return answer
    duration, _, winner = best
    record["returned"] = winner.source
    record["search_status"] = answer.status.value  # what the search itself proved or found, in its space
    if answer.status is Status.INFEASIBLE:
        why = f"{answer.message or 'no schedule of its space fits'}; returning {winner.source}'s schedule"
    elif mine is None:
        why = f"{answer.message or 'the search found no schedule'}; returning {winner.source}'s schedule"
    else:
        why = (f"{winner.source}'s schedule ({duration}) is faster than the search's own "
               f"({mine[0]}); returning it")
    # Its search ended as it did (``termination``): the schedule returned is another's.
    return MethodResult(SolutionStatus.FEASIBLE, winner.schedule, objective=winner.duration,
                        lower_bound=answer.lower_bound if answer.status is not Status.INFEASIBLE else None,
                        solve_time_s=answer.solve_time_s, stats=answer.stats, message=why,
                        termination=answer.termination)


def _cleaned(graph: Graph, schedule: Schedule | None, budget: Number) -> tuple[Number, Number] | None:
    """(duration, peak) of ``schedule`` after the shared clean-up; None when invalid or over ``budget``."""
    if schedule is None:
        return None
    before = simulate(graph, schedule)
    if not before.valid:
        return None
    sim = clean_up_simulated(graph, schedule, before)[2]
    return (sim.duration, sim.peak) if sim.peak <= budget else None


def mark_used(stats: dict[str, Any], source: str | None) -> None:
    """Record which candidate the caller started from (None: none of them).

    Parameters
    ----------
    stats : dict
        The caller's stats; its ``warm_start`` is set.
    source : str or None
        The candidate's source.
    """
    stats["warm_start"] = source


def _run(graph: Graph, budget: Number | None, source: Source, limit: float | None, context: SolveContext,
         entry: dict[str, Any]) -> Schedule | None:
    """The schedule ``source`` gives (the method's own, before the shared clean-up), or None; a failing
    source only costs a candidate, and ``entry`` says why."""
    if source.name == "baseline":
        return baseline_schedule(graph)
    if source.name == "shaved":
        if budget is None:
            return None
        from remat_bench.toolkit.improve import shaved_order

        shaved = shaved_order(graph, budget, Deadline(limit), **source.params)
        return place_frees(graph, shaved, np.zeros(len(shaved), dtype=np.int64), drop_unused=False)
    if context.runner is None:
        entry["skipped"] = "no runner to run other methods (run this method through remat_bench.app.evaluate)"
        return None
    result = context.runner(source.name, graph, budget, limit, source.params)
    if result.status is Status.ERROR:
        entry["error"] = result.message
    # The method's schedule as it returned it, when it called it found (a peak the simulator puts over the
    # budget is kept too: a search that starts above the budget may use it).
    return result.method_schedule if result.status.found_schedule or result.status is Status.OVER_BUDGET else None
