"""``auto``: the fastest schedule any method finds within one time limit, never worse than a fast heuristic.

No method is best everywhere (docs/benchmarks.md, "auto"): on a 48-layer GPT at half its
peak, kusumoto's lower-set DP finds +7.3% in 8 s where Moccasin's CP-SAT, started from
chen's schedule, stayed at +19% after 120 s; on the published random layered graphs CP-SAT
proves optima that no heuristic reaches. A user should not have to run them all and pick.
``auto`` runs them as a portfolio, in three steps:

1. **Fast members**, one after another: greedy, dtr, chen, fenghuang, twremat, knapsack (its
   simulator-guided search), kusumoto, and reorder (the best order without recomputation;
   skipped when the any-order bound already proves that no order fits). Together they take
   at most ``fast_share`` of the time; each gets an equal share of what is left of it, so
   the ones that end in milliseconds hand their time on.
2. **Exact members**: moccasin, checkmate, and monet on graphs with operator
   implementations (none when a fast member's schedule already meets the any-order
   bound: no schedule is faster). Each is offered every schedule of step 1 (`SolveContext.hints`): it
   starts from the fastest that fits its space (or the lowest-peak one, for Moccasin's
   phase 1) and answers with nothing slower than what it was offered
   (`remat_bench.methods.candidates.best_of`). With ``jobs`` above 1 they run side by
   side in child processes, the cores split between them; else one after another, each on
   an equal share of the time left.
3. **Polish**: for the share of the time kept for it (``polish``, a tenth by default), the
   fastest schedule so far, unless proven optimal, has its recomputations undone one at a
   time, the most expensive first, with the rest reordered to fit the budget again
   (`remat_bench.toolkit.improve.drop_with_reorder`); then the next fastest, while time
   is left. Measured (120 s, 2 cores, docs/benchmarks.md "auto on the published graphs"): on
   random_layered_n500 at 0.8 it took moccasin's +1.942% to +1.148% in 12 s, where moccasin
   order=free alone gave +1.886% (+1.591% at best over six runs); on n1000 at 0.8 +2.039% to
   +1.715% (alone: +1.984%).
4. **The answer**: the fastest schedule within the budget after the shared clean-up (the
   least peak first for ``min``).

``stats["members"]`` holds each member's result (status, overhead and peak after clean-up,
seconds, its own lower bound and the space that bound holds in, or its error);
``stats["winner"]`` names the member whose schedule is the answer (and, when an exact member
returned an offered schedule or the polish improved a member's, whose it was);
``stats["bounds"]`` lists every lower bound proved, each with where it holds. Only the
any-order bound holds for every schedule: the answer is ``optimal`` when it meets that
bound, ``feasible`` otherwise. A member that fails, or overruns its time and is stopped,
is recorded with its error, and the others' best stands.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from remat_bench.core.control import Deadline, interrupted
from remat_bench.core.errors import MethodError
from remat_bench.core.graph import Graph, Number
from remat_bench.core.outcome import MethodResult, Status, Termination
from remat_bench.core.schedule import COMPUTE, Schedule
from remat_bench.core.simulate import Simulation, baseline, clean_up_simulated, place_frees, simulate
from remat_bench.methods.base import Method, Param, SolveContext
from remat_bench.methods.candidates import run_method
from remat_bench.toolkit.improve import drop_with_reorder

# In the order they run: the ones that end in milliseconds first, so that their time passes on.
FAST = ("greedy", "dtr", "chen", "fenghuang", "twremat", "knapsack", "kusumoto", "reorder")
# Members run with other parameters than their defaults: knapsack's simulator-guided search (its
# default is PyTorch's plain knapsack, the production answer) reaches far tighter budgets.
MEMBER_PARAMS: dict[str, dict[str, Any]] = {"knapsack": {"solver": "search"}}
EXACT = ("moccasin", "checkmate", "monet")
# The share of the time limit reorder may take at most: its answer only matters when an order fits.
REORDER_SHARE = 0.1
# Seconds a child process gets past its member's time limit before it is stopped (a spawned
# interpreter imports numpy, OR-Tools and HiGHS in about a second; methods end near their limit).
CHILD_GRACE = 5.0


def _members(text: str) -> tuple[str, ...]:
    """The members named in ``text`` ('all', or names separated by commas), in portfolio order."""
    if text.strip() == "all":
        return FAST + EXACT
    names = tuple(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))
    if not names:
        raise MethodError("parameter 'members' of method 'auto' names no method; give 'all' or names like "
                          "greedy,kusumoto,moccasin")
    if "auto" in names:
        raise MethodError("parameter 'members' of method 'auto' cannot name 'auto' itself")
    from remat_bench.methods import get_method

    for name in names:
        get_method(name)  # an unknown name: one sentence, with a suggestion
    return names


@dataclass
class Member:
    """One member's run, as ``stats["members"]`` records it."""

    method: str
    role: str  # "fast", "exact" or "polish"
    status: str = "not_run"
    seconds: float = 0.0
    overhead_pct: float | None = None
    peak: Number | None = None
    duration: Number | None = None  # after the shared clean-up
    lower_bound: Number | None = None
    space: str = ""
    returned: str | None = None  # an exact member's: its own search, or whose offered schedule
    message: str = ""
    schedule: Schedule | None = field(default=None, repr=False)

    def simulated(self, graph: Graph, sim: Simulation) -> None:
        """Peak, duration and overhead from the simulation of its schedule (after clean-up)."""
        self.peak, self.duration = sim.peak, sim.duration
        self.overhead_pct = sim.overhead_pct(baseline(graph).duration)

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "schedule" and v not in (None, "")}


class Auto(Method):
    name = "auto"
    search_space = "every schedule a member finds (its optimal holds where the any-order bound proves it)"
    description = ("portfolio: the fast heuristics, then the exact methods started from their schedules; "
                   "the fastest of all")
    params = (
        Param("members", str, "all", "methods to run, separated by commas (all: greedy, dtr, chen, fenghuang, "
              "twremat, knapsack, kusumoto, reorder, moccasin, checkmate, monet)", check=_members),
        Param("jobs", int, 0, "exact members run side by side in child processes, each with every core (0: one "
              "per core, at most one per member; 1: one after another in this process)", minimum=0, maximum=64),
        Param("fast_share", float, 0.2, "largest share of the time limit the fast members take together",
              minimum=0.01, maximum=1),
        Param("polish", float, 0.1, "share of the time limit kept for undoing recomputations of the best "
              "schedules and reordering to fit (0: none)", minimum=0, maximum=0.9),
    )

    def solve(self, graph: Graph, budget: Number | None, time_limit: float | None,
              **params: Any) -> MethodResult:
        limit = time_limit if time_limit is not None else 3600.0
        whole = Deadline(limit)
        # The members' deadline ends the polish's share early (step 3; no polish for ``min``).
        keep = params["polish"] * limit if budget is not None else 0.0
        deadline = Deadline(limit - keep)
        names = _members(params["members"])
        self.goals = self._goals(graph, budget, deadline)
        members: list[Member] = []
        hints: list[tuple[str, Schedule]] = []
        fast = [n for n in names if n not in EXACT]
        exact = [n for n in names if n in EXACT]
        self._run_fast(graph, budget, fast, deadline, params["fast_share"] if exact else 1.0, members, hints)
        if keep > 0 and exact and not any(m.schedule is not None for m in members):
            # Nothing to polish yet: the exact members take the polish's share too (what they find
            # first matters more than a polish that may get no time).
            left = whole.remaining()
            deadline = Deadline(None if left is None else left)
            keep = 0.0
        runnable = [n for n in exact if self._applies(graph, budget, n, members)]
        if not len(graph.backward_indices) and {"moccasin", "checkmate"} <= set(runnable):
            # No backward nodes: moccasin runs its order-free path (`_exact_params`), whose space holds
            # checkmate's input-order stages, and gets every core. Measured (paper-auto sweep, 120 s,
            # random layered n500/n1000 at 0.9 and 0.8): checkmate alone never beat moccasin order=free
            # alone (e.g. +2.915% against +1.734%), and sharing the cores with it left auto 0.04-0.18
            # points above moccasin alone on the three instances neither proved.
            runnable.remove("checkmate")
            members.append(Member("checkmate", "exact", "not_run", message="no backward nodes: moccasin's "
                                  "order-free search holds checkmate's space and takes every core"))
        if runnable and (reached := self._reached(budget, members)) is not None:
            for name in runnable:  # a fast member's schedule meets the goal: nothing is faster (or lower)
                members.append(Member(name, "exact", "not_run", message=f"{reached}'s schedule is proven optimal"))
        elif runnable and not deadline.expired():
            jobs = params["jobs"] or min(os.cpu_count() or 1, len(runnable))
            self._run_exact(graph, budget, runnable, deadline, min(jobs, len(runnable)), members, hints)
        if keep > 0:
            assert budget is not None
            # At most its share, even when the members end early: auto then ends early too.
            left = whole.remaining()
            self._polish(graph, budget, members, Deadline(keep if left is None else min(keep, left)))
        return self._answer(graph, budget, members, whole)

    # ------------------------------------------------------------------ the members

    def _applies(self, graph: Graph, budget: Number | None, name: str, members: list[Member]) -> bool:
        """Whether member ``name`` can run here; if not, it is recorded with the reason."""
        from remat_bench.methods import get_method

        cls = get_method(name)
        ok, why = cls.available()
        reason = why if not ok else cls.skip(graph, budget)
        if reason is None and name == "monet" and not any(len(node.implementations) > 1 for node in graph.nodes):
            reason = "no node has operator implementations to choose from (checkmate covers the rest)"
        if reason is None and name == "reorder" and budget is not None:
            known = self.context.bounds.peek(graph, budget)
            if known is not None and known.no_order_fits:
                reason = "the any-order bound proves that no order fits without recomputation"
        if reason is not None:
            role = "exact" if name in EXACT else "fast"
            members.append(Member(name, role, Status.UNSUPPORTED.value, message=reason))
            return False
        return True

    def _run_fast(self, graph: Graph, budget: Number | None, names: list[str], deadline: Deadline,
                  share: float, members: list[Member], hints: list[tuple[str, Schedule]]) -> None:
        """Step 1: each fast member in this process, on an equal share of what is left of their time."""
        remaining = deadline.remaining()
        stage = Deadline(None if remaining is None else share * remaining)
        runnable = [n for n in names if self._applies(graph, budget, n, members)]
        for k, name in enumerate(runnable):
            if deadline.expired() or interrupted():
                members.append(Member(name, "fast", message="no time left"))
                continue
            if (reached := self._reached(budget, members)) is not None:
                members.append(Member(name, "fast", message=f"{reached}'s schedule is proven optimal"))
                continue
            left = stage.remaining()
            limit = None if left is None else max(0.05, left / (len(runnable) - k))
            if name == "reorder" and limit is not None and remaining is not None:
                limit = min(limit, REORDER_SHARE * remaining)
            context = self._member_context()
            run = partial(run_method, graph, budget, name, MEMBER_PARAMS.get(name, {}), limit, context)
            member = _record(graph, budget, name, "fast", run, MEMBER_PARAMS.get(name, {}))
            members.append(member)
            if member.schedule is not None:
                hints.append((name, member.schedule))

    def _run_exact(self, graph: Graph, budget: Number | None, names: list[str], deadline: Deadline, jobs: int,
                   members: list[Member], hints: list[tuple[str, Schedule]]) -> None:
        """Step 2: the exact members, offered the fast members' schedules; side by side when ``jobs`` > 1."""
        from remat_bench.toolkit.child import can_spawn

        if jobs <= 1 or not can_spawn():
            for k, name in enumerate(names):
                if (reached := self._reached(budget, members)) is not None:
                    members.append(Member(name, "exact", "not_run", message=f"{reached}'s schedule is proven optimal"))
                    continue
                left = deadline.remaining()
                limit = None if left is None else left / (len(names) - k)
                context = self._member_context(hints)
                params = _exact_params(graph, name, members)
                members.append(_record(graph, budget, name, "exact",
                                       partial(run_method, graph, budget, name, params, limit, context), params))
            return
        # Every member gets every core, though they share them: CP-SAT's portfolio needs two workers
        # or more (measured, GPT-12 at 0.5 in 120 s beside checkmate: moccasin +9.274% with 2 workers,
        # +9.490% with 1), and HiGHS's branch and bound runs on one thread whatever it is given.
        threads = os.cpu_count() or 1
        left = deadline.remaining()
        # Members beyond ``jobs`` wait for a slot: each gets the share of the time its wave has.
        waves = -(-len(names) // jobs)
        limit = None if left is None else max(0.5, left / waves - 1.0)
        context = dataclasses.replace(self._member_context(hints), bounds=self.context.bounds.for_graph(graph))
        # Set when a member's schedule meets the goal: the others are stopped (nothing they find is better).
        proven = _Proven()

        def one(name: str) -> Member:
            if proven.by:
                return Member(name, "exact", "not_run", message=f"{proven.by}'s schedule is proven optimal")
            params = {"threads": threads, **_exact_params(graph, name, members)}
            member = _record(graph, budget, name, "exact",
                             lambda: _in_child(graph, budget, name, params, limit, context, deadline, proven), params)
            if self._reached(budget, [member]) is not None:
                proven.found(name)
            elif proven.by and proven.by != name and member.status == Status.ERROR.value:
                member.status, member.message = "not_run", f"stopped: {proven.by}'s schedule is proven optimal"
            return member

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            members.extend(pool.map(one, names))

    def _goals(self, graph: Graph, budget: Number | None, deadline: Deadline) -> SolveContext:
        """The run's context with its goals: the caller's, and at a budget at least the any-order bound
        (auto computes it when called without one; `SolveContext.reached`)."""
        goals = self.context
        if budget is not None and goals.duration_goal is None:
            bound = self._any_order(graph, budget, deadline)
            if bound is not None and bound.value is not None:
                goals = dataclasses.replace(goals, duration_goal=bound.value)
        return goals

    def _member_context(self, hints: list[tuple[str, Schedule]] | None = None) -> SolveContext:
        """A member's context: the run's bound cache and goals, and the schedules offered to it."""
        return dataclasses.replace(self.goals, hints=list(hints or []))

    def _reached(self, budget: Number | None, members: list[Member]) -> str | None:
        """The member whose schedule meets the run's goal (nothing is faster, or lower at ``min``), if any."""
        for m in members:
            if m.schedule is not None and m.peak is not None and m.duration is not None \
                    and self.goals.reached(budget, m.peak, m.duration):
                return m.method
        return None

    def _polish(self, graph: Graph, budget: Number, members: list[Member], deadline: Deadline) -> None:
        """Step 3: the members' schedules, fastest first, with recomputations undone and reordered to fit.

        One `Member` ("polish", whose schedule it started from in ``returned``) holds the fastest
        result when it is faster than every member's; schedules with operator implementations
        other than the default are left as they are (the reordering knows one implementation).
        """
        if self._reached(budget, members) is not None:
            return
        found = sorted((m for m in members if m.schedule is not None and m.duration is not None),
                       key=lambda m: (m.duration, m.peak))
        best = found[0].duration if found else None
        done: set[tuple[int, ...]] = set()
        polish = Member("polish", "polish", Status.NO_SOLUTION.value, message="no member's schedule was improved")
        start = time.perf_counter()
        attempts = 0
        for m in found:
            if deadline.expired() or interrupted():
                break
            assert m.schedule is not None
            computes = m.schedule.kinds == COMPUTE
            if m.schedule.impls[computes].any():
                continue
            nodes = m.schedule.nodes[computes]
            if tuple(nodes.tolist()) in done:
                continue
            done.add(tuple(nodes.tolist()))
            stats: dict[str, Any] = {}
            try:
                improved = drop_with_reorder(graph, nodes, budget, deadline, attempt_s=max(1.0, graph.n / 500),
                                             stats=stats)
            except Exception as exc:  # the polish only adds: a failure leaves the members' answers standing
                polish.status, polish.message = Status.ERROR.value, f"{type(exc).__name__}: {exc}"
                break
            attempts += stats.get("attempts", 0)
            scored = _scored(graph, place_frees(graph, improved, np.zeros(len(improved), dtype=np.int64)))
            if isinstance(scored, str):
                continue
            cleaned, sim = scored
            if best is not None and sim.duration < best and sim.peak <= budget:
                best = sim.duration
                undone = stats.get("undone", 0)
                polish.status = Status.FEASIBLE.value
                polish.message = f"{undone} recomputation{'' if undone == 1 else 's'} undone"
                polish.returned, polish.schedule = m.method, cleaned
                polish.simulated(graph, sim)
        polish.seconds = round(time.perf_counter() - start, 3)
        polish.message += f" ({attempts} attempts)"
        members.append(polish)

    # ------------------------------------------------------------------ the answer

    def _answer(self, graph: Graph, budget: Number | None, members: list[Member], deadline: Deadline) -> MethodResult:
        """Step 4: the fastest schedule within the budget (least peak first for ``min``), with the record."""
        order = {name: k for k, name in enumerate(FAST + EXACT + ("polish",))}
        members.sort(key=lambda m: order.get(m.method, -1))  # in the order they ran (unknown ones: fast, first)
        found = [m for m in members if m.schedule is not None]
        key: Callable[[Member], tuple[Any, Any]] = ((lambda m: (m.duration, m.peak)) if budget is not None
                                                    else (lambda m: (m.peak, m.duration)))
        winner = min(found, key=key) if found else None
        any_order = self._any_order(graph, budget, deadline)
        stats: dict[str, Any] = {
            "members": [m.as_dict() for m in members],
            "winner": None if winner is None else (
                winner.method if winner.returned in (None, "search") else f"{winner.method} ({winner.returned})"),
            "bounds": _bounds(members, any_order),
        }
        if winner is None:
            proven = any_order is not None and any_order.value is None  # no schedule fits at all
            return MethodResult(
                Status.INFEASIBLE if proven else Status.NO_SOLUTION, solve_time_s=deadline.elapsed(), stats=stats,
                termination=Termination.CONVERGED if proven else Termination.UNKNOWN,
                message="no schedule fits the budget (the any-order bound)" if proven else
                "no member found a schedule within the budget")
        bound = None if any_order is None else any_order.value
        optimal = budget is not None and bound is not None and winner.duration is not None and winner.duration <= bound
        # No lower bound of its own: the any-order bound is the run's (the pipeline reports it), and the
        # members' bounds, each valid in its own space, are in stats["bounds"].
        return MethodResult(
            Status.OPTIMAL if optimal else Status.FEASIBLE, winner.schedule, objective=winner.duration,
            solve_time_s=deadline.elapsed(), stats=stats, message=f"the fastest schedule is {stats['winner']}'s")

    def _any_order(self, graph: Graph, budget: Number | None, deadline: Deadline) -> Any:
        """The any-order bound the pipeline computed (from the cache), or one computed now in a few seconds."""
        if budget is None:
            return None
        known = self.context.bounds.peek(graph, budget)
        if known is not None:
            return known
        return self.context.bounds.get(graph, budget, effort=3.0)[0]


def _scored(graph: Graph, schedule: Schedule) -> tuple[Schedule, Simulation] | str:
    """``schedule`` after the shared clean-up, with its simulation (as the pipeline scores it), or
    why it is invalid."""
    raw = simulate(graph, schedule)
    if not raw.valid:
        return f"an invalid schedule: {raw.violation}"
    cleaned, _, sim = clean_up_simulated(graph, schedule, raw)
    return cleaned, sim


def _declared(name: str, params: dict[str, Any]) -> dict[str, Any]:
    """The parameters of ``params`` that method ``name`` declares (`threads` is offered to every exact member)."""
    from remat_bench.methods import get_method

    declared = {p.name for p in get_method(name).params}
    return {k: v for k, v in params.items() if k in declared}


def _record(graph: Graph, budget: Number | None, name: str, role: str,
            call: Callable[[], MethodResult | None], params: dict[str, Any] | None = None) -> Member:
    """Run one member through ``call`` and score its schedule as the pipeline would (after clean-up)."""
    member = Member(name, role)
    start = time.perf_counter()
    try:
        answer = call()
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # a member's failure is recorded; the others' best stands
        member.seconds = round(time.perf_counter() - start, 3)
        member.status, member.message = Status.ERROR.value, f"{type(exc).__name__}: {exc}"
        return member
    member.seconds = round(time.perf_counter() - start, 3)
    if answer is None:
        member.status, member.message = Status.UNSUPPORTED.value, "it does not apply here"
        return member
    from remat_bench.methods import get_method

    member.status, member.message = answer.status.value, answer.message
    member.lower_bound = answer.lower_bound
    cls = get_method(name)
    member.space = cls.space(cls.parse_params(_declared(name, params or {})))  # the space it ran in
    member.returned = answer.stats.get("returned")
    if answer.schedule is None:
        return member
    scored = _scored(graph, answer.schedule)
    if isinstance(scored, str):
        member.status, member.message = Status.ERROR.value, scored
        return member
    cleaned, sim = scored
    member.simulated(graph, sim)
    if budget is not None and sim.peak > budget:
        if answer.status.found_schedule:
            member.status = Status.OVER_BUDGET.value
        return member  # a lowest-peak answer above the budget is no answer here
    if answer.status.found_schedule:
        member.schedule = cleaned
    return member


def _bounds(members: list[Member], any_order: Any) -> list[dict[str, Any]]:
    """Every lower bound on duration proved, each with where it holds."""
    out = []
    if any_order is not None and any_order.value is not None:
        out.append({"source": "any-order bound", "value": any_order.value, "holds_for": "every schedule"})
    for m in members:
        if m.lower_bound is not None:
            out.append({"source": m.method, "value": m.lower_bound, "holds_for": m.space})
    return out


def _exact_params(graph: Graph, name: str, members: list[Member]) -> dict[str, Any]:
    """An exact member's parameters beyond its defaults, from what the fast members found.

    Moccasin runs its order-free path (stages in the best order, then the free model) on a
    graph without backward nodes, whose input order is one topological order among many, and
    where reorder found an order of lower peak than the input order (it then starts from that
    order instead of searching for one again). On a training graph the input order (forward,
    then backward) is the one its stages are built for. Measured on the published random
    layered graphs at 120 s (paper-auto sweep): the order-free path at or below the staged
    model on all eight instances, e.g. n500 at 0.8 +1.734% against +2.568%, n1000 at 0.9
    +0.142% against +0.608%.
    """
    if name != "moccasin":
        return {}
    if not len(graph.backward_indices):
        return {"order": "free"}
    reorder = next((m for m in members if m.method == "reorder" and m.schedule is not None), None)
    if reorder is None or reorder.peak is None or reorder.peak >= baseline(graph).peak:
        return {}
    return {"order": "free"}


class _Proven:
    """Which exact member's schedule met the run's goal first (empty: none yet); shared by their threads."""

    def __init__(self) -> None:
        self.by = ""
        self._lock = threading.Lock()

    def found(self, name: str) -> None:
        with self._lock:
            self.by = self.by or name


def _in_child(graph: Graph, budget: Number | None, name: str, params: dict[str, Any], limit: float | None,
              context: SolveContext, deadline: Deadline, proven: _Proven) -> MethodResult | None:
    """One exact member in a spawned child process, stopped ``CHILD_GRACE`` seconds past its limit, or
    as soon as another member's schedule is proven optimal (``proven``)."""
    from remat_bench.methods import method_target
    from remat_bench.toolkit.child import run_in_child

    params = _declared(name, params)
    stop_at = None if limit is None else time.perf_counter() + limit + CHILD_GRACE
    target = method_target(name)
    outcome = run_in_child(_member_main, (graph, budget, name, target, params, limit, context),
                           stop=lambda: interrupted() or bool(proven.by) or (
                               stop_at is not None and time.perf_counter() > stop_at),
                           daemon=False)
    if outcome.status == "done":
        answer: MethodResult | None = outcome.value
        return answer
    if outcome.status == "start_failed":  # no child could start: run it here
        return run_method(graph, budget, name, params, deadline.remaining(), context)
    if outcome.status == "stopped":
        why = ("interrupted" if interrupted() else f"stopped: {proven.by}'s schedule is proven optimal"
               if proven.by else f"still running {CHILD_GRACE:g} s past its time limit; stopped")
        raise RuntimeError(why)
    raise RuntimeError(outcome.message)


def _member_main(graph: Graph, budget: Number | None, name: str, target: str, params: dict[str, Any],
                 limit: float | None, context: SolveContext) -> MethodResult | None:
    """The child's side of `_in_child` (module level, so that a spawned process can import it); the
    class comes by its place, as the parent's registry has it."""
    return run_method(graph, budget, name, params, limit, context, target)
