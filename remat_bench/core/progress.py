"""A run's progress: its improving schedules over time, each scored by the shared simulator.

A method offers every schedule it improves to (CP-SAT's and HiGHS's incumbents, the
candidates it starts from) through `remat_bench.methods.base.SolveContext.report`, with its
own lower bound where its solver has one. The evaluation path (`remat_bench.app.evaluate`)
gives each run a `ProgressRecorder`: it scores each offered schedule as the run's answer
will be scored (the shared clean-up, then the simulator), keeps those within the budget that
improve on what the run held, and passes them on to whoever watches the run (the terminal's
status line, the portfolio that runs this run as a member). A method that reports nothing
(a DP, a heuristic) gets one point, its answer, when it finishes.

Times are seconds since the run started (the any-order bound's time included: it is part of
the run). The points kept are thinned evenly when there are many (`MAX_POINTS`), the last
always kept, never below `MIN_POINTS`.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any, Protocol

import numpy as np

from remat_bench.core.graph import Number
from remat_bench.core.schedule import Schedule
from remat_bench.core.simulate import overhead_pct

# Thinning: at most this many points per run are stored, evenly spread, the last kept.
MAX_POINTS = 100
MIN_POINTS = 50
# Scoring a schedule costs a simulation; when scoring has taken more than this share of the run's
# time, offers are skipped until it is below again (the run's last answer is always scored).
SCORING_SHARE = 0.05


@dataclass(frozen=True)
class ProgressPoint:
    """One improving schedule (or one new bound) of a run, as the simulator scored it.

    ``time_s`` is seconds since the run started; ``duration`` and ``peak`` the simulated
    duration and peak of the schedule after the shared clean-up (None on a point that only
    records a bound); ``overhead_pct`` its overhead over the baseline; ``source`` who found it
    (the method, a member of the portfolio, a candidate); ``bound`` the method's own lower
    bound on duration then, in its own space (None when its solver has none).
    """

    time_s: float
    duration: Number | None
    peak: Number | None
    overhead_pct: float | None
    source: str
    bound: Number | None = None

    def as_dict(self) -> dict[str, Any]:
        """The point as one row of a progress table (`remat_bench.app.sweep.profiles.PROGRESS_COLUMNS`).

        Returns
        -------
        dict
            ``time_s``, ``duration``, ``peak``, ``overhead_pct``, ``source`` and ``bound``.
        """
        return asdict(self)


# The source of a point that carries the any-order bound (valid for every schedule) to a watcher.
ANY_ORDER = "any-order bound"


class ProgressSink(Protocol):
    """What a method reports its progress to (`SolveContext.progress`: the run's `ProgressRecorder`)."""

    def offer(self, schedule: Schedule | Callable[[], Schedule], bound: Number | None = None,
              source: str = "") -> bool:
        """A schedule found now (or a function building it, called only if it is scored), and the
        method's own lower bound now; True when the run's best now meets its goal (it may stop).

        Parameters
        ----------
        schedule : Schedule or callable
            The schedule, or a function that builds it.
        bound : int or float or None
            The method's own lower bound on duration now (in its space), if its solver has one.
        source : str
            Who found it, when not the method itself.

        Returns
        -------
        bool
            True when the search may stop.
        """


class Watcher(Protocol):
    """Who watches a run (`SolveContext.watch`): the scored points its recorder keeps are passed on.

    ``take`` also receives bound-only points (``duration`` None): the method's own bound as it rises
    (``source`` the method), and once the any-order bound (``source`` `ANY_ORDER`).
    """

    def take(self, point: ProgressPoint) -> None:
        """A point another run already scored (a portfolio member's), timed by this run's clock.

        Parameters
        ----------
        point : ProgressPoint
        """


Scorer = Callable[[Schedule], "tuple[Number, Number] | None"]


class ProgressRecorder:
    """The progress of one run: scores what its method offers and keeps the improving points.

    Parameters
    ----------
    score : callable
        ``score(schedule)`` gives the (peak, duration) of a schedule after the shared clean-up, or
        None for an invalid one (`remat_bench.app.evaluate.judge_schedule`).
    budget : int or float or None
        The run's budget: a schedule above it is not progress. None (the lowest peak): a lower
        peak is progress, then a shorter duration at the same peak.
    baseline_duration : int or float
        The duration overheads are measured against.
    source : str
        Who a point comes from when the method names nobody (the method's name).
    forward : Watcher or None
        Who watches the run: every point kept is passed on (`Watcher.take`).
    start : float or None
        The run's start, in `time.perf_counter` seconds (now, when None).
    """

    def __init__(self, score: Scorer, budget: Number | None, baseline_duration: Number, source: str,
                 forward: Watcher | None = None, start: float | None = None) -> None:
        self.score = score
        self.budget = budget
        self.baseline_duration = baseline_duration
        self.source = source
        self.forward = forward
        self.start = time.perf_counter() if start is None else start
        self._points: list[ProgressPoint] = []
        self._best: tuple[Number, Number] | None = None  # (duration, peak), or (peak, duration) at min
        # The schedule behind the best point, when the method offered it (not a point taken from another run).
        self._held: tuple[Schedule, ProgressPoint] | None = None
        self._bound: Number | None = None
        self._scoring_s = 0.0
        self.offered = 0
        self.skipped = 0
        # Whether a (peak, duration) ends the search (`SolveContext.reached`); set by the evaluation path.
        self.goal: Callable[[Number, Number], bool] | None = None
        self.goal_reached = False  # an offer was answered True: the method was told it may stop
        # CP-SAT calls back from its own threads, and a portfolio's members report side by side.
        self._lock = threading.Lock()

    def elapsed(self) -> float:
        """Seconds since the run started.

        Returns
        -------
        float
        """
        return time.perf_counter() - self.start

    # ------------------------------------------------------------------ what comes in

    def offer(self, schedule: Schedule | Callable[[], Schedule], bound: Number | None = None,
              source: str = "") -> bool:
        """Score a schedule the method holds now, and keep it when it improves on the run's best.

        Parameters
        ----------
        schedule : Schedule or callable
            The schedule, or a function that builds it (decoding a solver's solution): called only
            when the schedule is scored.
        bound : int or float or None
            The method's own lower bound on duration now (in its space), if its solver has one.
        source : str
            Who found it, when not the method itself (a candidate's source).

        Returns
        -------
        bool
            True when the run's best schedule, as scored, meets the run's goal (`goal`): the
            search may stop.
        """
        now = self.elapsed()
        with self._lock:
            self.offered += 1
            self._note_bound(bound)
            if self._scoring_s > SCORING_SHARE * max(now, 1.0):
                self.skipped += 1  # scoring would slow the search down: this one goes unrecorded
                return False
            began = time.perf_counter()
            built = schedule() if callable(schedule) else schedule
            scored = self.score(built)
            self._scoring_s += time.perf_counter() - began
            if scored is not None and self._keep(now, scored[0], scored[1], source or self.source):
                self._held = (built, self._points[-1])
            if self._goal_met():
                self.goal_reached = True
                return True
            return False

    def _goal_met(self) -> bool:
        if self.goal is None or self._best is None:
            return False
        peak, duration = (self._best[1], self._best[0]) if self.budget is not None else self._best
        return self.goal(peak, duration)

    def offer_bound(self, bound: Number) -> None:
        """Record the method's own lower bound now, without a schedule.

        Parameters
        ----------
        bound : int or float
            A lower bound on duration in the method's space.
        """
        with self._lock:
            if self._note_bound(bound):
                self._append(ProgressPoint(round(self.elapsed(), 4), None, None, None, self.source, self._bound))

    def any_order(self, bound: Number | None) -> None:
        """Tell the watcher the any-order bound the run is judged by (not stored: the run's result has it).

        Parameters
        ----------
        bound : int or float or None
            The bound (None: none was found, nothing is sent).
        """
        if bound is not None and self.forward is not None:
            self.forward.take(ProgressPoint(round(self.elapsed(), 4), None, None, None, ANY_ORDER, bound))

    def take(self, point: ProgressPoint) -> None:
        """Keep a point another run scored (a member's), timed now by this run's clock, if it improves.

        Parameters
        ----------
        point : ProgressPoint
            The other run's point; its bound (in that run's space) is not this run's and is dropped.
        """
        if point.duration is None or point.peak is None:
            return
        with self._lock:
            if self._keep(self.elapsed(), point.peak, point.duration, point.source):
                self._held = None

    def final(self, peak: Number | None, duration: Number | None, bound: Number | None = None) -> None:
        """The run's answer as judged (after the shared clean-up), recorded at the run's end.

        It closes the curve: a run that reported nothing has this one point, and one that did has
        its curve drawn to its end. Its time is now, unless it is no better than the last point.

        Parameters
        ----------
        peak, duration : int or float or None
            The answer's simulated peak and duration (None: no schedule within the budget).
        bound : int or float or None
            The method's final lower bound, if any.
        """
        with self._lock:
            self._note_bound(bound)
            now = round(self.elapsed(), 4)
            if peak is not None and duration is not None and self._fits(peak) and self._improves(peak, duration):
                self._keep(now, peak, duration, self.source)
                return
            last = self._points[-1] if self._points else None
            if last is not None and last.duration is not None:
                # Held to the end: the same schedule, at the end.
                self._points.append(ProgressPoint(now, last.duration, last.peak, last.overhead_pct, last.source,
                                                  self._bound))

    # ------------------------------------------------------------------ what goes out

    def points(self) -> list[ProgressPoint]:
        """The run's points in time order, thinned evenly to at most `MAX_POINTS` (the last kept).

        Returns
        -------
        list of ProgressPoint
        """
        with self._lock:
            return thin(self._points)

    def better_than(self, peak: Number | None, duration: Number | None) -> tuple[Schedule, ProgressPoint] | None:
        """The schedule the method offered that scored better than an answer of ``peak`` and ``duration``.

        A method may end on a schedule that its own objective prefers and the simulator does not (a
        CP-SAT objective counts computations the clean-up drops): the evaluation path then answers
        with the best schedule the method held.

        Parameters
        ----------
        peak, duration : int or float or None
            The answer as scored (None: no answer within the budget).

        Returns
        -------
        tuple of (Schedule, ProgressPoint) or None
            The schedule as the method offered it and its point, or None when the answer is as good.
        """
        with self._lock:
            if self._held is None or peak is None or duration is None or not self._fits(peak):
                return self._held
            answer = (duration, peak) if self.budget is not None else (peak, duration)
            return self._held if self._best is not None and self._best < answer else None

    @property
    def scoring_s(self) -> float:
        """Seconds spent scoring offered schedules."""
        return self._scoring_s

    # ------------------------------------------------------------------ its steps

    def _note_bound(self, bound: Number | None) -> bool:
        if bound is None or (isinstance(bound, float) and not math.isfinite(bound)):
            return False
        if self._bound is None or bound > self._bound:
            self._bound = bound
            if self.forward is not None:
                self.forward.take(ProgressPoint(round(self.elapsed(), 4), None, None, None, self.source, bound))
            return True
        return False

    def _fits(self, peak: Number) -> bool:
        return self.budget is None or peak <= self.budget

    def _improves(self, peak: Number, duration: Number) -> bool:
        key = (duration, peak) if self.budget is not None else (peak, duration)
        return self._best is None or key < self._best

    def _keep(self, now: float, peak: Number, duration: Number, source: str) -> bool:
        """Keep a point when it fits and improves on the best; True when it was kept."""
        if not self._fits(peak) or not self._improves(peak, duration):
            return False
        self._best = (duration, peak) if self.budget is not None else (peak, duration)
        overhead = overhead_pct(duration, self.baseline_duration)
        point = ProgressPoint(round(now, 4), duration, peak, overhead, source, self._bound)
        self._append(point)
        if self.forward is not None:
            self.forward.take(point)
        return True

    def _append(self, point: ProgressPoint) -> None:
        self._points.append(point)
        if len(self._points) > 4 * MAX_POINTS:  # a long search: thin as it goes, memory stays bounded
            self._points = thin(self._points, 2 * MAX_POINTS)


def thin(points: list[ProgressPoint], keep: int = MAX_POINTS) -> list[ProgressPoint]:
    """``points`` thinned evenly (by position) to ``keep``, the first and the last kept.

    Parameters
    ----------
    points : list of ProgressPoint
        In time order.
    keep : int
        How many to keep, at least `MIN_POINTS`.

    Returns
    -------
    list of ProgressPoint
    """
    keep = max(keep, MIN_POINTS)
    if len(points) <= keep:
        return list(points)
    last = len(points) - 1
    chosen = sorted({round(k * last / (keep - 1)) for k in range(keep)})
    return [points[k] for k in chosen]


class Relabelled:
    """A watcher passing scored points on under another source name (a portfolio member's).

    Parameters
    ----------
    sink : Watcher
        Where the points go.
    label : str
        The source name given to every point (e.g. the member's method), prefixed to a source
        of the member's own that is not the member itself (``moccasin/greedy``).
    """

    def __init__(self, sink: Watcher, label: str) -> None:
        self.sink = sink
        self.label = label

    def take(self, point: ProgressPoint) -> None:
        """Pass ``point`` on under this sink's label.

        Parameters
        ----------
        point : ProgressPoint
        """
        if point.duration is None:  # a bound: the any-order bound as it is, a method's under its name
            source = point.source if point.source == ANY_ORDER else self._name(point.source)
            self.sink.take(ProgressPoint(point.time_s, None, None, None, source, point.bound))
            return
        # A schedule: its bound held in the other run's space, not in the receiver's.
        self.sink.take(ProgressPoint(point.time_s, point.duration, point.peak, point.overhead_pct,
                                     self._name(point.source), None))

    def _name(self, source: str) -> str:
        return self.label if not source or source == self.label else f"{self.label}/{source}"


class Renumbered:
    """A sink for a search on a renumbered copy of the graph: its schedules are mapped back first.

    Parameters
    ----------
    sink : ProgressSink
        Where the mapped schedules go.
    order : sequence of int
        Node ``i`` of the copy is node ``order[i]`` of the graph the sink scores on.
    """

    def __init__(self, sink: ProgressSink, order: Any) -> None:
        self.sink = sink
        self.order = np.asarray(order, dtype=np.int64)

    def offer(self, schedule: Schedule | Callable[[], Schedule], bound: Number | None = None,
              source: str = "") -> bool:
        """Offer ``schedule``, its nodes numbered as the original graph numbers them.

        Parameters
        ----------
        schedule : Schedule or callable
            A schedule of the renumbered copy (or a function building one).
        bound : int or float or None
            The method's own lower bound now.
        source : str
            Who found it.

        Returns
        -------
        bool
            What the sink answers: whether the run may stop.
        """
        def mapped() -> Schedule:
            built = schedule() if callable(schedule) else schedule
            return replace(built, nodes=self.order[built.nodes])

        return self.sink.offer(mapped, bound, source)
