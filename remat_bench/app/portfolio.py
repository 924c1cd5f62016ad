"""``auto``: the fastest schedule any method finds within one time limit, never worse than a fast heuristic.

No method is best everywhere: on a deep transformer at half its peak a fast heuristic
(kusumoto's lower-set DP) can be far ahead of an exact method still searching at its time
limit, while on the published random layered graphs CP-SAT proves optima that no heuristic
reaches (docs/benchmarks.md, "auto: the portfolio beside its members"). A user should not
have to run them all and pick.

``auto`` runs them as a portfolio, in three steps. Its members are the registered methods that
declare a role (`remat_bench.methods.base.Membership`, on the method's class: ``Method.member``),
each in its place in the run order; what they declare, and the hooks they override
(``member_params``, ``member_skip``, ``member_covered``), are read here, never a list of names.

1. **Fast members**, one after another: the heuristics (greedy, dtr, chen, fenghuang, twremat,
   knapsack's simulator-guided search, kusumoto, and reorder, the best order without
   recomputation, skipped when the any-order bound already proves that no order fits). Together
   they take at most ``fast_share`` of the time (by default a share that grows with the graph:
   `fast_share_of`); each gets its weighted share of what is left of it (`Membership.weight`; at
   most its ``share``), so the ones that end in milliseconds hand their time on. Those the
   shares cut short run again from the start (`Auto._run_again`), on a weighted share of a part of
   the time left (``AGAIN_SHARE``; more, ``AGAIN_SHARE_NONE_FOUND``, while no member has found a
   schedule; all of it where no exact member runs): the time a fast member needs grows with the
   graph, and auto should not be behind a member run alone. A member
   with ``beside_s`` runs beside them from the start, in a child process, for the members' whole
   time when that is at least ``beside_s`` (`_Beside`: torch-budget, PyTorch's own partitioner, on
   a graph imported from a model it can trace).
2. **Exact members**: moccasin, checkmate, and monet on graphs with operator
   implementations (none when a fast member's schedule already meets the any-order
   bound: no schedule is faster). Each is offered every schedule of step 1 (`SolveContext.hints`): it
   starts from the fastest that fits its space (or the lowest-peak one, for Moccasin's
   phase 1) and answers with nothing slower than what it was offered
   (`remat_bench.methods.candidates.best_of`). They run in child processes, ``jobs`` side
   by side (the cores split between them), each stopped at auto's own time limit at the latest;
   with ``jobs=1`` one after another in this process, each on an equal share of the time left.
3. **Polish**: for the share of the time kept for it (``polish``, a tenth by default), the
   fastest schedule so far, unless proven optimal, has its recomputations undone one at a
   time, the most expensive first, with the rest reordered to fit the budget again
   (`remat_bench.toolkit.improve.drop_with_reorder`); then the next fastest, while time
   is left. It is what takes auto below its best member where CP-SAT is cut short by the
   limit (docs/benchmarks.md, "auto on the published graphs").
4. **The answer**: the fastest schedule within the budget after the shared clean-up (the
   least peak first for ``min``).

``stats["members"]`` holds each member's result (status, overhead and peak after clean-up,
seconds, its own lower bound and the space that bound holds in, or its error; ``runs``: 2 for
a fast member run again); ``stats["cut_short"]`` names the members whose time ran out (the
answer's message says so too: more time could change it);
``stats["winner"]`` names the member whose schedule is the answer (and, when an exact member
returned an offered schedule or the polish improved a member's, whose it was);
``stats["bounds"]`` lists every lower bound proved, each with where it holds. Only the
any-order bound holds for every schedule: the answer is ``optimal`` when it meets that
bound, ``feasible`` otherwise. A member that fails, or overruns its time and is stopped,
is recorded with its error, and the others' best stands.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from remat_bench.app.evaluate import (
    RunResult,
    applicable,
    bound_effort,
    evaluate,
    evaluate_in_child,
    judge_schedule,
)
from remat_bench.core.budget import budget_of, parse_size
from remat_bench.core.cleanup import place_frees
from remat_bench.core.control import Deadline, interrupted
from remat_bench.core.errors import MethodError
from remat_bench.core.graph import Graph, Number
from remat_bench.core.machine import usable_cores
from remat_bench.core.outcome import MethodResult, SolutionStatus, Status, Termination, cut_short, search_ended
from remat_bench.core.progress import ProgressRecorder, Relabelled
from remat_bench.core.schedule import COMPUTE, Schedule
from remat_bench.methods import get_method, method_names
from remat_bench.methods.base import Membership, Method, Param, Role, SolveContext
from remat_bench.toolkit.improve import drop_with_reorder

# Why an exact member's child was stopped at auto's own time limit.
TIME_OUT = "stopped: auto's time limit ran out"
# The second round of the fast members (`Auto._run_again`): the share of what is left of the members' time it
# may take when a member has found a schedule already, and when none has (the exact members then start from
# nothing: a fast member's answer matters more); and the least time worth starting it with (s).
AGAIN_SHARE = 0.3
AGAIN_SHARE_NONE_FOUND = 0.6
MIN_AGAIN_S = 0.5


def _roster() -> list[tuple[str, Membership]]:
    """Every registered method whose class declares itself a member (`Method.member`): the fast ones,
    then the exact ones, each in its run order (its ``rank``, then the registry's order)."""
    found = []
    for position, name in enumerate(method_names()):
        try:
            member = get_method(name).member
        except MethodError:
            continue  # a plugin that cannot be loaded here is no member (`remat-bench methods` says why)
        if member is not None:
            found.append((member.role is Role.EXACT, member.rank, position, name, member))
    return [(name, member) for *_, name, member in sorted(found)]


def _role(method: type[Method]) -> Role:
    """A member's role: its class's; fast for a method that declares none (run where ``members`` names it)."""
    return Role.FAST if method.member is None else method.member.role


def _members(text: str) -> tuple[str, ...]:
    """The members named in ``text`` ('all': the roster, in its order; or names separated by commas, in theirs)."""
    if text.strip() == "all":
        return tuple(name for name, _ in _roster())
    names = tuple(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))
    if not names:
        # The example: the first and the last fast member that runs in its turn, and the first exact one.
        roster = _roster()
        in_turn = [n for n, m in roster if m.role is Role.FAST and m.share is None and m.beside_s is None]
        exact = [n for n, m in roster if m.role is Role.EXACT]
        raise MethodError("parameter 'members' of method 'auto' names no method; give 'all' or names like "
                          f"{in_turn[0]},{in_turn[-1]},{exact[0]}")
    if "auto" in names:
        raise MethodError("parameter 'members' of method 'auto' cannot name 'auto' itself")
    for name in names:
        get_method(name)  # an unknown name: one sentence, with a suggestion
    return names


def _model_memory(text: str) -> int | None:
    """auto's ``model_memory``: bytes, or None for ``none`` (the machine's limit alone)."""
    if text.strip().lower() == "none":
        return None
    try:
        return parse_size(text)
    except ValueError:
        raise MethodError(f"parameter 'model_memory' of method 'auto' must be a size such as 2GiB or 500MB, or "
                          f"none, got {text!r}") from None


@dataclass
class Member:
    """One member's run, as ``stats["members"]`` records it."""

    method: str
    role: str  # a `Role`'s value ("fast", "exact"), or "polish"
    status: Status | None = None  # None: not run (recorded as "not_run")
    seconds: float = 0.0
    overhead_pct: float | None = None
    peak: Number | None = None
    duration: Number | None = None  # after the shared clean-up
    lower_bound: Number | None = None
    space: str = ""
    returned: str | None = None  # an exact member's: its own search, or whose offered schedule
    message: str = ""
    termination: Termination | None = None  # why its run stopped (None: not run)
    runs: int | None = None  # 2: run again in the fast members' second round (`Auto._run_again`)
    schedule: Schedule | None = field(default=None, repr=False)
    # Its schedule meets the run's goal (`SolveContext.reached`): nothing is faster, or lower at ``min``.
    reached: bool = field(default=False, repr=False)

    @classmethod
    def of_run(cls, run: RunResult, role: str, seconds: float) -> Member:
        """A member from its evaluated run: its status, its cleaned schedule when it found one within
        the budget (`remat_bench.app.evaluate` judged it), and what its search proved, where.

        Parameters
        ----------
        run : RunResult
            The member's judged run.
        role : str
            ``fast``, ``exact`` or ``polish``.
        seconds : float
            The time the member took, in s (kept to the millisecond).

        Returns
        -------
        Member
        """
        member = cls(run.method, role, run.status, round(seconds, 3), run.overhead_pct, run.peak, run.duration,
                     run.lower_bound, run.space, run.stats.get("returned"), run.message, run.termination)
        if run.status.found_schedule:
            member.schedule = run.schedule
        return member

    def as_dict(self) -> dict[str, Any]:
        """The member as ``stats["members"]`` records it.

        Returns
        -------
        dict
            Its fields without the schedule, whether it reached the goal, or empty ones; ``status`` as its value,
            ``not_run`` when it did not run.
        """
        record = {**self.__dict__, "status": "not_run" if self.status is None else self.status.value}
        return {k: v for k, v in record.items() if k not in ("schedule", "reached") and v not in (None, "")}


@functools.cache
def _params() -> tuple[Param, ...]:
    """auto's parameters (`Auto.params`)."""
    return (
        Param("members", str, "all", f"methods to run, separated by commas (all: {', '.join(_members('all'))})",
              check=_members),
        Param("jobs", int, 0, "exact members run side by side in child processes, each with every core (0: one "
              "per core, at most one per member; 1: one after another in this process)", minimum=0, maximum=64),
        Param("fast_share", float, 0.0, "largest share of the time limit the fast members take together in their "
              "first round (0: by the graph's size, 0.2 up to 500 nodes, growing to 0.5 at 1,250 and above)",
              minimum=0, maximum=1),
        Param("polish", float, 0.1, "share of the time limit kept for undoing recomputations of the best "
              "schedules and reordering to fit (0: none)", minimum=0, maximum=0.9),
        Param("model_memory", str, "2GiB", "largest solver model an exact member may build, by its estimate "
              "(checkmate's and monet's MILPs grow with the square of the nodes); none: the machine's limit",
              check=_model_memory),
    )


class _Params:
    """auto's parameters, built when first read: the help of ``members`` names the roster, which loads
    every registered method, and `remat-bench` starts without loading them."""

    def __get__(self, instance: Any, owner: type) -> tuple[Param, ...]:
        return _params()


class Auto(Method):
    name = "auto"
    search_space = "every schedule a member finds (its optimal holds where the any-order bound proves it)"
    description = ("portfolio: the fast heuristics, then the exact methods started from their schedules; "
                   "the fastest of all")
    params = _Params()

    # Seconds auto may spend on the any-order bound when its caller computed none (`solve --no-bound`):
    # 3 s took a 1 s solve past 3.4 s.
    bound_effort_s = 3.0

    @classmethod
    def may_offload(cls, graph: Graph) -> bool:
        """On a graph with a host link, where a member may offload (`Method.offloads`), auto's schedules may
        too: it is then judged by the offload bound, and aims at it, rather than at the any-order bound.

        Parameters
        ----------
        graph : Graph

        Returns
        -------
        bool
        """
        if graph.transfer is None:
            return False
        return any(get_method(name).offloads for name, _ in _roster())

    def solve(self, graph: Graph, budget: Number | None, time_limit: float | None,
              **params: Any) -> MethodResult:
        clock = _Clock(time_limit, params["polish"])
        self.bound_effort_s = min(3.0, bound_effort(time_limit))
        self.goals = dataclasses.replace(self._goals(graph, budget), model_memory=_model_memory(params["model_memory"]))
        members: list[Member] = []
        hints: list[tuple[str, Schedule]] = []
        chosen = [get_method(name) for name in _members(params["members"])]
        fast, exact = self._plan(graph, budget, chosen, members)
        in_turn = [m for m in fast if m.member is None or m.member.beside_s is None]
        beside = self._start_beside(graph, budget, [m for m in fast if m not in in_turn], clock.members, members)
        fast_share = params["fast_share"] or fast_share_of(graph)
        movers = [m for m in in_turn if m.offloads] if self.may_offload(graph) else []
        if movers:  # on a graph with a host link, the members that offload first, on a share of their own
            self._run_fast(graph, budget, movers, clock.members, OFFLOAD_SHARE, members, hints)
        self._run_fast(graph, budget, [m for m in in_turn if m not in movers], clock.members,
                       fast_share if exact else 1.0, members, hints)
        self._run_again(graph, budget, in_turn, clock.members, 1.0 if not exact else
                        AGAIN_SHARE_NONE_FOUND if not hints else AGAIN_SHARE, members, hints)
        for started in beside:
            started.collect(members, hints)  # in time for the exact members when it has ended
        if exact and not any(m.schedule is not None for m in members):
            # Nothing to polish yet: the exact members take the polish's share too (what they find
            # first matters more than a polish that may get no time).
            clock.give_polish_time_to_members()
        if exact and (reached := self._reached(members)) is not None:
            for method in exact:  # a fast member's schedule meets the goal: nothing is faster (or lower)
                members.append(Member(method.name, Role.EXACT.value, message=f"{reached}'s schedule is proven optimal"))
        elif exact and not clock.members.expired():
            jobs = params["jobs"] or min(usable_cores(), len(exact))
            self._run_exact(graph, budget, exact, clock.members, min(jobs, len(exact)), members, hints,
                            here=params["jobs"] == 1, stop_at=clock.whole)
        for started in beside:
            started.collect(members, hints, wait=True)
        if clock.keep > 0:
            self._polish(graph, budget, members, clock.polish())
        return self._answer(graph, budget, members, clock.whole)

    def _plan(self, graph: Graph, budget: Number | None, chosen: list[type[Method]],
              members: list[Member]) -> tuple[list[type[Method]], list[type[Method]]]:
        """The fast and the exact members that run here, in their order; the others are recorded with why
        (`Method.skip`, `Method.member_skip`, `Method.member_covered`)."""
        runnable = [m for m in chosen if self._applies(graph, budget, m, members)]
        exact = [m for m in runnable if _role(m) is Role.EXACT]
        names = [m.name for m in exact]
        for method in tuple(exact):
            if (covered := method.member_covered(graph, names)) is not None:
                exact.remove(method)
                members.append(Member(method.name, Role.EXACT.value, message=covered))
        return [m for m in runnable if _role(m) is Role.FAST], exact

    # ------------------------------------------------------------------ the members

    def _applies(self, graph: Graph, budget: Number | None, method: type[Method], members: list[Member]) -> bool:
        """Whether ``method`` can run here as a member; if not, it is recorded with the reason."""
        reason = applicable(graph, method, budget)
        if reason is None:
            reason = method.member_skip(graph, budget, self.context.bounds)
        if reason is not None:
            members.append(Member(method.name, _role(method).value, Status.UNSUPPORTED, message=reason,
                                  termination=Termination.NOT_APPLICABLE))
            return False
        return True

    def _start_beside(self, graph: Graph, budget: Number | None, methods: list[type[Method]], deadline: Deadline,
                      members: list[Member]) -> list[_Beside]:
        """Step 1's members that run beside the others (`_Beside`), each started when the members' time is
        at least what it needs (`Membership.beside_s`), else recorded as not run, with why."""
        started = []
        left = deadline.remaining()
        for method in methods:
            member = method.member
            assert member is not None and member.beside_s is not None
            if left is None or left >= member.beside_s:
                started.append(_Beside(self, graph, budget, method, deadline, members))
            else:
                members.append(Member(method.name, Role.FAST.value, message=(
                    f"not run: the members' {left:.1f} s are less than the {member.beside_s:g} s {member.beside_why}")))
        return started

    def _run_fast(self, graph: Graph, budget: Number | None, methods: list[type[Method]], deadline: Deadline,
                  share: float, members: list[Member], hints: list[tuple[str, Schedule]]) -> None:
        """Step 1: each fast member in this process, on its weighted share of what is left of their time (at
        most its own ``share`` of it, `Membership.share`)."""
        remaining = deadline.remaining()
        stage = Deadline(None if remaining is None else share * remaining)
        for k, method in enumerate(methods):
            if deadline.expired() or interrupted():
                members.append(Member(method.name, Role.FAST.value, message="no time left", termination=cut_short()))
                continue
            if (reached := self._reached(members)) is not None:
                members.append(Member(method.name, Role.FAST.value,
                                      message=f"{reached}'s schedule is proven optimal"))
                continue
            left = stage.remaining()
            weights = sum(_weight(m) for m in methods[k:])
            limit = None if left is None else max(0.05, left * _weight(method) / weights)
            cap = None if method.member is None else method.member.share
            if cap is not None and limit is not None and remaining is not None:
                limit = min(limit, cap * remaining)
            own = method.member_params(graph, _any_order_peak(members))
            member = self._evaluated(graph, budget, method, Role.FAST.value, own, limit)
            members.append(member)
            if member.schedule is not None:
                hints.append((method.name, member.schedule))

    def _run_again(self, graph: Graph, budget: Number | None, methods: list[type[Method]], deadline: Deadline,
                   share: float, members: list[Member], hints: list[tuple[str, Schedule]]) -> None:
        """Step 1, second round: the fast members that the first round's shares cut short (their limit ran out,
        or the round's time was gone before their turn) run again, each from the start, the heaviest first, on its
        weighted share of ``share`` of what is left of the members' time. A member that needs more than its
        share of the first round (a large graph: fenghuang's division tree, twremat's search of k, knapsack's
        capacities) thus still runs to an answer before the exact members start, and auto's answer is never
        behind what it reaches alone in the time the others leave. Its record is the better of its two runs
        (``runs``: 2)."""
        if self._reached(members) is not None:
            return
        # A member with a share of its own (`Membership.share`: reorder's tenth) had it in the first round.
        wanted = {m.name for m in methods if getattr(m.member, "share", None) is None}
        again = [k for k, m in enumerate(members) if m.role == Role.FAST.value and m.method in wanted
                 and m.termination in (Termination.TIME_LIMIT, Termination.INTERRUPTED) and not interrupted()]
        remaining = deadline.remaining()
        if not again or (remaining is not None and remaining < MIN_AGAIN_S):
            return
        stage = Deadline(None if remaining is None else share * remaining)
        by_name = {m.name: m for m in methods}
        # The heaviest first, each on its weighted share (`Membership.weight`), as in the first round.
        again.sort(key=lambda index: -_weight(by_name[members[index].method]))
        for k, index in enumerate(again):
            left = stage.remaining()
            if (left is not None and left < MIN_AGAIN_S / 2) or deadline.expired() or interrupted():
                break
            if self._reached(members) is not None:
                break
            first = members[index]
            method = by_name[first.method]
            weights = sum(_weight(by_name[members[i].method]) for i in again[k:])
            limit = None if left is None else left * _weight(method) / weights
            own = method.member_params(graph, _any_order_peak(members))
            second = self._evaluated(graph, budget, method, Role.FAST.value, own, limit)
            second.runs, second.seconds = 2, round(first.seconds + second.seconds, 3)
            if second.schedule is None and first.schedule is not None:
                # The first run's schedule stands (a search cut short may still have found one).
                first.runs, first.seconds = 2, second.seconds
                first.message = f"{first.message}; run again for {limit or 0:.1f} s: {second.message}".strip("; ")
                continue
            if first.schedule is not None and second.duration is not None and first.duration is not None \
                    and (second.duration, second.peak or 0) >= (first.duration, first.peak or 0):
                first.runs, first.seconds = 2, second.seconds
                continue
            members[index] = second
            if second.schedule is not None:
                hints[:] = [h for h in hints if h[0] != method.name] + [(method.name, second.schedule)]

    def _run_exact(self, graph: Graph, budget: Number | None, methods: list[type[Method]], deadline: Deadline,
                   jobs: int, members: list[Member], hints: list[tuple[str, Schedule]], here: bool = False,
                   stop_at: Deadline | None = None) -> None:
        """Step 2: the exact members, offered the fast members' schedules; ``jobs`` at a time in child
        processes, each stopped once ``stop_at`` (auto's own limit) has passed, or one after another here
        (``here``, or where no child can start)."""
        from remat_bench.toolkit.child import can_spawn

        if here or not can_spawn():
            for k, method in enumerate(methods):
                if (reached := self._reached(members)) is not None:
                    members.append(Member(method.name, Role.EXACT.value,
                                          message=f"{reached}'s schedule is proven optimal"))
                    continue
                left = deadline.remaining()
                limit = None if left is None else left / (len(methods) - k)
                own = method.member_params(graph, _any_order_peak(members))
                members.append(self._evaluated(graph, budget, method, Role.EXACT.value, own, limit, hints))
            return
        # Every member gets every core, though they share them: CP-SAT's portfolio needs two workers
        # or more (one worker did worse even with the cores to itself: docs/benchmarks.md, "auto: the
        # portfolio beside its members"), and HiGHS's branch and bound runs on one thread whatever it is given.
        threads = usable_cores()
        left = deadline.remaining()
        # Members beyond ``jobs`` wait for a slot: each gets the share of the time its wave has.
        waves = -(-len(methods) // jobs)
        limit = None if left is None else max(0.5, left / waves - 1.0)
        # Set when a member's schedule meets the goal: the others are stopped (nothing they find is better).
        proven = _Proven()

        def stop() -> str:
            if proven.by:
                return f"stopped: {proven.by}'s schedule is proven optimal"
            # A member past its limit in a step it cannot interrupt (moccasin's model build started with
            # little time left: 3.3 s past it beside two busy processes) would hold auto past its own.
            return TIME_OUT if stop_at is not None and stop_at.expired() else ""

        def one(method: type[Method]) -> Member:
            if proven.by:
                return Member(method.name, Role.EXACT.value, message=f"{proven.by}'s schedule is proven optimal")
            params = {"threads": threads, **method.member_params(graph, _any_order_peak(members))}
            member = self._evaluated(graph, budget, method, Role.EXACT.value, params, limit, hints, stop=stop)
            if member.status is Status.ERROR and member.message == TIME_OUT:
                member.status, member.termination = Status.NO_SOLUTION, Termination.TIME_LIMIT
            if member.reached:
                proven.found(method.name)
            elif proven.by and proven.by != method.name and member.status is Status.ERROR:
                member.status = None  # stopped for the proven member's schedule: not run to its end
            return member

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            members.extend(pool.map(one, methods))

    def _goals(self, graph: Graph, budget: Number | None) -> SolveContext:
        """The run's context with its goals: the caller's, and at a budget at least the any-order bound
        (auto computes it when called without one; `SolveContext.reached`)."""
        goals = self.context
        if budget is not None and goals.duration_goal is None:
            bound = self._bound(graph, budget)
            if bound is not None and bound.value is not None:
                goals = dataclasses.replace(goals, duration_goal=bound.value)
        return goals

    def _member_context(self, name: str, hints: list[tuple[str, Schedule]] | None = None) -> SolveContext:
        """A member's context: the run's bound cache and goals, the schedules offered to it, and the run's
        progress, to which the member's own points go under its name."""
        # Auto's own run's recorder (set by the evaluation path) takes its members' scored points.
        recorder = self.goals.progress if isinstance(self.goals.progress, ProgressRecorder) else None
        # A schedule that moves values is offered only to a member that may offload: the others read hints
        # as sequences of computations and frees.
        moves_ok = _offloads(name)
        hints = [h for h in hints or [] if moves_ok or not h[1].moves]
        return dataclasses.replace(self.goals, hints=hints, progress=None,
                                   watch=None if recorder is None else Relabelled(recorder, name))

    def _evaluated(self, graph: Graph, budget: Number | None, method: type[Method], role: str,
                   params: dict[str, Any], limit: float | None, hints: list[tuple[str, Schedule]] | None = None,
                   stop: Callable[[], str] | None = None) -> Member:
        """Member ``method`` run through the evaluation path (`remat_bench.app.evaluate`), in a child process
        when ``stop`` is given (side by side), else here; judged as any run is, and its schedule held against
        the run's goal once (`Member.reached`)."""
        start = time.perf_counter()
        context = self._member_context(method.name, hints)
        run_budget = budget_of(budget, graph)
        own = _declared(method, params)
        if stop is None:
            run = evaluate(graph, method, run_budget, limit, own, bound=False, context=context)
        else:
            run = evaluate_in_child(graph, method, run_budget, limit, own, bound=False, context=context, stop=stop)
        member = Member.of_run(run, role, time.perf_counter() - start)
        member.reached = member.schedule is not None and member.peak is not None and member.duration is not None \
            and self.goals.reached(budget, member.peak, member.duration)
        return member

    @staticmethod
    def _reached(members: list[Member]) -> str | None:
        """The first member whose schedule meets the run's goal (`Member.reached`), if any."""
        return next((m.method for m in members if m.reached), None)

    def _polish(self, graph: Graph, budget: Number | None, members: list[Member], deadline: Deadline) -> None:
        """Step 3: the members' schedules, fastest first, with recomputations undone and reordered to fit
        (`Polish`, run and judged as any member is). One `Member` ("polish", whose schedule it started
        from in ``returned``) holds the result when it is faster than every member's. At ``min`` the
        lowest peak any member reached is the budget: the polish shortens schedules at that peak."""
        found = [m for m in members if m.schedule is not None and m.duration is not None and m.peak is not None]
        if not found or self._reached(members) is not None:
            return
        at = budget if budget is not None else min(m.peak for m in found if m.peak is not None)
        found = sorted((m for m in found if m.peak is not None and m.peak <= at), key=lambda m: (m.duration, m.peak))
        hints = [(m.method, m.schedule) for m in found if m.schedule is not None]
        start = time.perf_counter()
        run = evaluate(graph, Polish, budget_of(at, graph), deadline.remaining(), bound=False,
                       context=self._member_context(Polish.name, hints))
        polish = Member.of_run(run, Polish.name, time.perf_counter() - start)
        if run.status is Status.NO_SOLUTION:
            polish.message = run.message
        members.append(polish)

    # ------------------------------------------------------------------ the answer

    def _answer(self, graph: Graph, budget: Number | None, members: list[Member], deadline: Deadline) -> MethodResult:
        """Step 4: the fastest schedule within the budget (least peak first for ``min``), with the record."""
        order = {name: k for k, name in enumerate((*_members("all"), Polish.name))}
        members.sort(key=lambda m: order.get(m.method, -1))  # in the order they ran (unknown ones: fast, first)
        found = [m for m in members if m.schedule is not None]
        key: Callable[[Member], tuple[Any, Any]] = ((lambda m: (m.duration, m.peak)) if budget is not None
                                                    else (lambda m: (m.peak, m.duration)))
        winner = min(found, key=key) if found else None
        any_order = self._bound(graph, budget)
        cut = [m.method for m in members if m.termination in (Termination.TIME_LIMIT, Termination.INTERRUPTED)]
        said = f"; cut short by their time: {', '.join(cut)}" if cut else ""
        stats: dict[str, Any] = {
            "members": [m.as_dict() for m in members],
            "cut_short": cut,
            "winner": None if winner is None else (
                winner.method if winner.returned in (None, "search") else f"{winner.method} ({winner.returned})"),
            "bounds": _bounds(members, any_order),
        }
        if winner is None:
            proven = any_order is not None and any_order.value is None  # no schedule fits at all
            return MethodResult(
                SolutionStatus.INFEASIBLE if proven else SolutionStatus.NO_SOLUTION, solve_time_s=deadline.elapsed(),
                stats=stats,
                termination=Termination.PROVEN if proven else self._stopped(deadline, members),
                message=f"no schedule fits the budget (the {getattr(any_order, 'source', 'any-order bound')})"
                if proven else
                f"no member found a schedule within the budget{said}")
        bound = None if any_order is None else any_order.value
        optimal = budget is not None and bound is not None and winner.duration is not None and winner.duration <= bound
        # No lower bound of its own: the any-order bound is the run's (the pipeline reports it), and the
        # members' bounds, each valid in its own space, are in stats["bounds"].
        return MethodResult(
            SolutionStatus.OPTIMAL if optimal else SolutionStatus.FEASIBLE, winner.schedule, objective=winner.duration,
            solve_time_s=deadline.elapsed(), stats=stats, message=f"the fastest schedule is {stats['winner']}'s{said}",
            termination=Termination.PROVEN if optimal else self._stopped(deadline, members))

    @staticmethod
    def _stopped(deadline: Deadline, members: list[Member]) -> Termination:
        """Why auto ended without a proof: its time ran out (or Ctrl-C), or a member's share of it did
        (more time could still change the answer), or every member ran to its end."""
        cut = any(m.termination in (Termination.TIME_LIMIT, Termination.INTERRUPTED) for m in members)
        return cut_short() if interrupted() or deadline.expired() or cut else Termination.CONVERGED

    def _bound(self, graph: Graph, budget: Number | None) -> Any:
        """The bound auto aims at and is judged by: the any-order bound (`_any_order`), or where its schedules
        may offload (`may_offload`), the offload bound (`remat_bench.toolkit.offload_bound`)."""
        if budget is None or not self.may_offload(graph):
            return self._any_order(graph, budget)
        from remat_bench.toolkit.offload_bound import offload_bound

        value, why = offload_bound(graph, budget)
        return _OffloadBound(value, why)

    def _any_order(self, graph: Graph, budget: Number | None) -> Any:
        """The any-order bound the pipeline computed (from the cache), or one computed now with the effort a
        run gives it (`remat_bench.app.evaluate.bound_effort`: a tenth of auto's limit, 3 s at most)."""
        if budget is None:
            return None
        known = self.context.bounds.peek(graph, budget)
        if known is not None:
            return known
        return self.context.bounds.get(graph, budget, effort=self.bound_effort_s)[0]


@dataclasses.dataclass(frozen=True)
class _OffloadBound:
    """The offload bound as auto reads a bound: its value (None: no schedule fits, proven) and why it holds."""

    value: Number | None
    why: str
    source: str = "offload bound"


# On a graph with a host link, the share of the members' time the members that offload run on first (each on
# its weighted part): where the copies hide, their plans beat every recompute-only member's, and at the fast
# members' usual share (a fifth to a half, split among a dozen) they were cut short before finding them
# (docs/benchmarks.md, "Keep, recompute or offload").
OFFLOAD_SHARE = 0.4


def fast_share_of(graph: Graph) -> float:
    """The fast members' share of the limit in their first round, by the graph's size: 0.2 up to 500 nodes,
    n / 2,500 above, 0.5 at most. A fast member's time grows with the graph (on 1,000 nodes without a backward
    pass, shaving alone needs about a tenth of a 10 s limit) while the exact members' models outgrow their limit.

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    float
    """
    return min(0.5, max(0.2, graph.n / 2500))


def _offloads(name: str) -> bool:
    """Whether the member ``name`` may offload (`Method.offloads`; auto's own polish, not registered, does not)."""
    try:
        return get_method(name).offloads
    except MethodError:
        return False


def _weight(method: type[Method]) -> float:
    """A fast member's weight in the first round's shares (`Membership.weight`; 1 for a method without a role)."""
    return 1.0 if method.member is None else method.member.weight


def _declared(method: type[Method], params: dict[str, Any]) -> dict[str, Any]:
    """The parameters of ``params`` that ``method`` declares (`threads` is offered to every exact member)."""
    declared = {p.name for p in method.params}
    return {k: v for k, v in params.items() if k in declared}


def _bounds(members: list[Member], any_order: Any) -> list[dict[str, Any]]:
    """Every lower bound on duration proved, each with where it holds."""
    out = []
    if any_order is not None and any_order.value is not None:
        out.append({"source": getattr(any_order, "source", "any-order bound"), "value": any_order.value,
                    "holds_for": "every schedule"})
    for m in members:
        if m.lower_bound is not None:
            out.append({"source": m.method, "value": m.lower_bound, "holds_for": m.space})
    return out


def _any_order_peak(members: list[Member]) -> Number | None:
    """The lowest peak (after clean-up) of the schedules found so far by members that may leave the input
    order (`Method.input_order`, at their defaults): what `Method.member_params` reads; None when none found one."""
    peaks = [m.peak for m in members if m.schedule is not None and m.peak is not None
             and get_method(m.method).input_order({}) == "free"]
    return min(peaks, default=None)


class _Beside:
    """A fast member run beside the others from the start of the run (`Membership.beside_s`): torch-budget,
    whose PyTorch partitioner traces the model and searches its knob for seconds to minutes, which in the
    fast stage's turn would take the time the other members need (on a 10 s limit it took 7 s and ended
    with nothing). It runs in a child process (a trace cannot be interrupted) on the members' whole time,
    stopped when their time is up or another member's schedule meets the run's goal; its schedule joins
    the hints when it has ended before the exact members start, and the answer in any case."""

    def __init__(self, auto: Auto, graph: Graph, budget: Number | None, method: type[Method], deadline: Deadline,
                 members: list[Member]) -> None:
        self.name = method.name
        self.member: Member | None = None
        self.taken = False
        params = method.member_params(graph, _any_order_peak(members))

        def stop() -> str:
            if deadline.expired():
                return "stopped: the members' time ran out"
            reached = auto._reached(members)
            return f"stopped: {reached}'s schedule is proven optimal" if reached else ""

        def run() -> None:
            member = auto._evaluated(graph, budget, method, Role.FAST.value, params, deadline.remaining(), stop=stop)
            if member.status is Status.ERROR and member.message == "stopped: the members' time ran out":
                # Stopped at the time it was given, as a member cut short by its own limit is.
                member.status, member.termination = Status.NO_SOLUTION, Termination.TIME_LIMIT
            elif member.status is Status.ERROR and member.message.startswith("stopped: "):
                member.status = None  # stopped for another member's proven schedule: not run to its end
            self.member = member

        self.thread = threading.Thread(target=run, name=f"auto-{method.name}", daemon=True)
        self.thread.start()

    def collect(self, members: list[Member], hints: list[tuple[str, Schedule]], wait: bool = False) -> None:
        """Add the member's result to ``members`` (and its schedule to ``hints``) once it has ended.

        Parameters
        ----------
        members : list of Member
        hints : list of (str, Schedule)
        wait : bool
            Wait for it to end (it is stopped at the members' time limit at the latest).
        """
        if wait:
            self.thread.join()
        if self.taken or self.thread.is_alive() or self.member is None:
            return
        self.taken = True
        members.append(self.member)
        if self.member.schedule is not None:
            hints.append((self.name, self.member.schedule))


class _Proven:
    """Which exact member's schedule met the run's goal first (empty: none yet); shared by their threads."""

    def __init__(self) -> None:
        self.by = ""
        self._lock = threading.Lock()

    def found(self, name: str) -> None:
        with self._lock:
            self.by = self.by or name


class _Clock:
    """auto's time: the whole limit, the members' share of it (``members``: the limit less the polish's
    share, ``keep``), and the polish's, which is never more than its share (auto ends early when the
    members do)."""

    def __init__(self, time_limit: float | None, polish_share: float) -> None:
        limit = time_limit if time_limit is not None else 3600.0
        self.whole = Deadline(limit)
        self.keep = polish_share * limit
        self.members = Deadline(limit - self.keep)

    def give_polish_time_to_members(self) -> None:
        """The members take what is left of the whole limit; no polish."""
        self.members, self.keep = Deadline(self.whole.remaining()), 0.0

    def polish(self) -> Deadline:
        left = self.whole.remaining()
        return Deadline(self.keep if left is None else min(self.keep, left))


class Polish(Method):
    """auto's polish (step 3): the offered schedules (``context.hints``, fastest first), each with its
    recomputations undone one at a time, the most expensive first, and the rest reordered to fit the
    budget again (`remat_bench.toolkit.improve.drop_with_reorder`); the fastest result when it is faster
    than every offered schedule. Schedules with operator implementations other than the default are
    left as they are (the reordering knows one implementation). Not registered: auto runs it.
    """

    name = "polish"
    search_space = "the offered schedules with recomputations undone and reordered"
    description = "undo recomputations of the offered schedules, reordering to fit"

    def solve(self, graph: Graph, budget: Number | None, time_limit: float | None, **params: Any) -> MethodResult:
        assert budget is not None
        deadline = Deadline(time_limit)
        offered = self.context.hints
        best: tuple[Number, str, Schedule, int] | None = None
        fastest = None
        done: set[tuple[int, ...]] = set()
        attempts = 0
        for label, schedule in offered:
            judged = judge_schedule(graph, schedule)
            if isinstance(judged, str):
                continue
            fastest = judged.simulation.duration if fastest is None else min(fastest, judged.simulation.duration)
            if deadline.expired() or interrupted():
                break
            computes = schedule.kinds == COMPUTE
            if schedule.impls[computes].any():
                continue
            nodes = schedule.nodes[computes]
            if tuple(nodes.tolist()) in done:
                continue
            done.add(tuple(nodes.tolist()))
            stats: dict[str, Any] = {}
            improved = drop_with_reorder(graph, nodes, budget, deadline, attempt_s=max(1.0, graph.n / 500),
                                         stats=stats)
            attempts += stats.get("attempts", 0)
            candidate = judge_schedule(graph, place_frees(graph, improved, np.zeros(len(improved), dtype=np.int64)))
            if isinstance(candidate, str):
                continue
            sim = candidate.simulation
            if sim.peak <= budget and sim.duration < (best[0] if best is not None else fastest):
                best = (sim.duration, label, candidate.schedule, stats.get("undone", 0))
        termination = search_ended(deadline)
        if best is None:
            return MethodResult(SolutionStatus.NO_SOLUTION, solve_time_s=deadline.elapsed(), termination=termination,
                                message=f"no member's schedule was improved ({attempts} attempts)")
        duration, label, schedule, undone = best
        return MethodResult(SolutionStatus.FEASIBLE, schedule, objective=duration, solve_time_s=deadline.elapsed(),
                            stats={"returned": label}, termination=termination,
                            message=f"{undone} recomputation{'' if undone == 1 else 's'} undone ({attempts} attempts)")

