"""Solve progress (issue: how fast each method gets there): every method's improving schedules over
time, scored by the simulator, stored with the result, shown live, and a gap that stops a run."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from click.testing import CliRunner

from remat_bench.app import pipeline
from remat_bench.app.cli.main import main
from remat_bench.core.baseline import baseline, baseline_schedule
from remat_bench.core.budget import parse_budget
from remat_bench.core.graph_io import save_graph
from remat_bench.core.progress import (
    ANY_ORDER,
    MAX_POINTS,
    MIN_POINTS,
    ProgressPoint,
    ProgressRecorder,
    Relabelled,
    Renumbered,
    thin,
)
from remat_bench.core.schedule import Schedule, ScheduleBuilder
from remat_bench.core.simulate import simulate
from remat_bench.generators.random_layered import random_layered
from remat_bench.toolkit.bound_cache import BoundCache


class Watcher:
    """A sink that keeps what it is given."""

    def __init__(self) -> None:
        self.points: list[ProgressPoint] = []

    def take(self, point: ProgressPoint) -> None:
        self.points.append(point)


def _scorer(values: dict[int, tuple[int, int]]):
    """A scorer reading (peak, duration) from a schedule's first node (a stand-in for the simulator)."""
    return lambda schedule: values.get(int(schedule.nodes[0]))


def _schedule(node: int) -> Schedule:
    b = ScheduleBuilder()
    b.compute(node)
    return b.build()


# ---------------------------------------------------------------------- the recorder


def test_only_improving_schedules_within_the_budget_are_kept_and_passed_on():
    values = {0: (90, 120), 1: (110, 100), 2: (95, 125), 3: (80, 110), 4: (100, 110)}
    watcher = Watcher()
    rec = ProgressRecorder(_scorer(values), budget=100, baseline_duration=100, source="m", forward=watcher)
    for node in (0, 1, 2, 3, 4, 9):  # 9: an invalid schedule (the scorer gives None)
        rec.offer(_schedule(node))
    kept = rec.points()
    # 1 is over the budget, 2 is slower than 0, 4 is no faster than 3, 9 is invalid.
    assert [(p.peak, p.duration) for p in kept] == [(90, 120), (80, 110)]
    assert [p.overhead_pct for p in kept] == pytest.approx([20.0, 10.0])
    assert all(p.source == "m" for p in kept)
    assert [(p.peak, p.duration) for p in watcher.points] == [(90, 120), (80, 110)]
    assert rec.offered == 6


def test_at_min_a_lower_peak_is_progress_then_a_shorter_duration():
    values = {0: (90, 120), 1: (85, 150), 2: (85, 140), 3: (86, 100)}
    rec = ProgressRecorder(_scorer(values), budget=None, baseline_duration=100, source="m")
    for node in range(4):
        rec.offer(_schedule(node))
    assert [(p.peak, p.duration) for p in rec.points()] == [(90, 120), (85, 150), (85, 140)]


def test_the_methods_bound_rides_on_its_points_and_is_passed_on_as_it_rises():
    watcher = Watcher()
    rec = ProgressRecorder(_scorer({0: (50, 130), 1: (50, 120)}), 100, 100, "m", forward=watcher)
    rec.offer(_schedule(0), bound=101)
    rec.offer(_schedule(1), bound=99)  # a lower bound than one already known changes nothing
    rec.offer_bound(105)
    assert [p.bound for p in rec.points()] == [101, 101, 105]
    assert rec.points()[-1].duration is None
    assert [(p.duration, p.bound) for p in watcher.points if p.duration is None] == [(None, 101), (None, 105)]
    rec.any_order(97)
    assert watcher.points[-1].source == ANY_ORDER and watcher.points[-1].bound == 97


def test_the_answer_closes_the_curve():
    rec = ProgressRecorder(_scorer({0: (50, 130)}), 100, 100, "m")
    rec.offer(_schedule(0))
    rec.final(50, 130)  # the same schedule: held to the end
    assert [(p.duration, p.time_s >= q.time_s) for p, q in zip(rec.points()[1:], rec.points(), strict=False)] \
        == [(130, True)]
    rec.final(45, 110)  # a better answer than anything reported (a heuristic that reports nothing)
    assert rec.points()[-1].duration == 110
    rec.final(120, 90)  # an answer over the budget is no progress
    assert rec.points()[-1].duration == 110


def test_a_method_that_reports_nothing_gets_its_answer_as_one_point():
    rec = ProgressRecorder(_scorer({}), 100, 100, "greedy")
    rec.final(60, 140)
    assert [(p.peak, p.duration, p.source) for p in rec.points()] == [(60, 140, "greedy")]
    nothing = ProgressRecorder(_scorer({}), 100, 100, "greedy")
    nothing.final(None, None)
    assert nothing.points() == []


def test_thinning_keeps_the_first_and_the_last_and_never_fewer_than_the_minimum():
    points = [ProgressPoint(float(k), 1000 - k, 1, 0.0, "m") for k in range(1000)]
    kept = thin(points)
    assert len(kept) == MAX_POINTS
    assert kept[0] is points[0] and kept[-1] is points[-1]
    steps = np.diff([p.time_s for p in kept])
    assert steps.max() - steps.min() <= 1  # evenly spread
    assert len(thin(points, keep=10)) == MIN_POINTS
    assert thin(points[:30]) == points[:30]


def test_the_recorder_stays_bounded_in_a_long_search():
    values = {k: (1, 10_000 - k) for k in range(2_000)}
    rec = ProgressRecorder(_scorer(values), 10, 1, "m")
    rec.start -= 1e6  # scoring never looks expensive against a long run
    for k in range(2_000):
        rec.offer(_schedule(k))
    assert len(rec._points) <= 4 * MAX_POINTS
    kept = rec.points()
    assert len(kept) == MAX_POINTS and kept[-1].duration == 10_000 - 1_999


def test_the_goal_says_when_the_search_may_stop():
    rec = ProgressRecorder(_scorer({0: (50, 130), 1: (50, 105)}), 100, 100, "m")
    rec.goal = lambda peak, duration: duration <= 110
    assert rec.offer(_schedule(0)) is False
    assert rec.offer(_schedule(1)) is True


def test_relabelled_points_carry_the_members_name_and_drop_its_bound():
    watcher = Watcher()
    sink = Relabelled(watcher, "moccasin")
    sink.take(ProgressPoint(1.0, 10, 5, 1.0, "moccasin", bound=9))
    sink.take(ProgressPoint(2.0, 9, 5, 0.5, "greedy", bound=8))
    sink.take(ProgressPoint(3.0, None, None, None, "moccasin", bound=8.5))
    sink.take(ProgressPoint(3.0, None, None, None, ANY_ORDER, bound=8))
    assert [(p.source, p.bound) for p in watcher.points] == [
        ("moccasin", None), ("moccasin/greedy", None), ("moccasin", 8.5), (ANY_ORDER, 8)]


def test_renumbered_schedules_are_mapped_back_before_they_are_scored():
    seen = []
    rec = ProgressRecorder(lambda s: seen.append(s.nodes.tolist()) or (1, 1), 10, 1, "m")
    Renumbered(rec, [2, 0, 1]).offer(lambda: _schedule(0))
    assert seen == [[2]]


# ---------------------------------------------------------------------- methods, through the evaluation path

@pytest.fixture(scope="module")
def layered():
    return random_layered(100, seed=3)


def _check_curve(result, budget_amount):
    """Points in time order, durations falling, peaks within the budget, overheads the simulator's,
    and the last point the run's answer."""
    points = [p for p in result.progress if p.duration is not None]
    assert points, "no progress recorded"
    times = [p.time_s for p in result.progress]
    assert times == sorted(times)
    assert 0 <= times[0] and times[-1] <= result.bound_time_s + result.solve_time_s + 2.0
    durations = [p.duration for p in points]
    assert all(b <= a for a, b in itertools.pairwise(durations))
    assert all(p.peak <= budget_amount for p in points)
    for p in points:
        assert p.overhead_pct == pytest.approx(100 * (p.duration - result.baseline_duration)
                                               / result.baseline_duration)
    assert (points[-1].duration, points[-1].peak) == (result.duration, result.peak)
    assert points[-1].overhead_pct == result.overhead_pct


@pytest.mark.parametrize(("method", "fraction"), [("moccasin", "0.8"), ("checkmate", "0.8"), ("checkmate-lp", "0.8"),
                                                  ("reorder", "0.8"), ("greedy", "0.9"), ("dtr", "0.9")])
def test_each_methods_progress_is_a_falling_curve_ending_at_its_answer(layered, method, fraction):
    budget = parse_budget(fraction, layered)
    # The methods that end on their own run without a limit: what they find is the same on a busy machine (at
    # 10 s checkmate-lp's relaxation did not solve there). The exact searches start from candidate schedules,
    # so they hold one from their first second.
    limit = 10 if method in ("moccasin", "checkmate") else None
    result = pipeline.run(layered, method, budget, limit, bounds=BoundCache())
    assert result.status.found_schedule, result.message
    _check_curve(result, budget.amount)
    assert result.to_json()["progress"][-1]["duration"] == result.duration


def test_moccasin_reports_its_search_with_cp_sats_bound(layered):
    budget = parse_budget("0.8", layered)
    result = pipeline.run(layered, "moccasin", budget, 10, bounds=BoundCache())
    sources = {p.source for p in result.progress}
    assert "moccasin" in sources  # CP-SAT's own solutions, not only the candidates it started from
    bounds = [p.bound for p in result.progress if p.source == "moccasin" and p.bound is not None]
    # CP-SAT's bound is on its own objective (durations before the clean-up): below its last objective, rising.
    assert bounds and all(b <= result.objective for b in bounds)
    assert bounds == sorted(bounds)
    assert result.stats["progress_recording"]["offered"] >= len(result.progress) - 1


def test_auto_merges_its_members_points_under_their_names(layered):
    budget = parse_budget("0.8", layered)
    result = pipeline.run(layered, "auto", budget, 20, bounds=BoundCache())
    _check_curve(result, budget.amount)
    members = {m["method"] for m in result.stats["members"]} | {"polish"}
    for p in result.progress:
        assert p.source.split("/")[0] in members, p.source
        assert p.bound is None  # a member's bound holds in its space, not auto's


def test_the_order_free_search_maps_its_staged_step_back(layered):
    budget = parse_budget("0.8", layered)
    result = pipeline.run(layered, "moccasin", budget, 15, {"order": "free"}, bounds=BoundCache())
    _check_curve(result, budget.amount)


def test_a_run_in_a_child_streams_its_points_to_the_watcher(layered):
    budget = parse_budget("0.8", layered)
    watcher = Watcher()
    # Two methods that end on their own (no limit: the same points on a busy machine, where checkmate-lp's
    # relaxation at 8 s found nothing), each in a child process.
    results = pipeline.run_many(layered, ["checkmate-lp", "reorder"], budget, None, {}, jobs=2,
                                bounds=BoundCache(), watch=watcher)
    by_source = {p.source.split("/")[0] for p in watcher.points if p.duration is not None}
    assert by_source == {"checkmate-lp", "reorder"}
    assert any(p.source == ANY_ORDER for p in watcher.points)
    for method, result in zip(("checkmate-lp", "reorder"), results):
        best = min(p.duration for p in watcher.points if p.source.startswith(method) and p.duration is not None)
        assert best == result.duration


# ---------------------------------------------------------------------- the gap, and the command line


def test_a_gap_stops_a_run_once_within_it_and_says_it_converged(layered):
    budget = parse_budget("0.8", layered)
    full = pipeline.run(layered, "moccasin", budget, 10, bounds=BoundCache())
    stopped = pipeline.run(layered, "moccasin", budget, 10, bounds=BoundCache(), gap=100.0)
    bound_pct = 100 * (stopped.lower_bound_any_order - stopped.baseline_duration) / stopped.baseline_duration
    assert stopped.overhead_pct - bound_pct <= 100.0
    # Without a gap moccasin does not prove its answer here (its input order keeps it above the bound of 0%):
    assert not full.proven_optimal
    # it stopped at the first schedule CP-SAT held (within 100 points of the bound), unproven.
    assert (stopped.status.value, stopped.termination.value) == ("feasible", "converged")
    assert stopped.proven_optimal is False
    assert stopped.duration >= full.duration
    assert stopped.solve_time_s < 10 / 2  # it did not run to its limit


def test_solve_json_carries_the_progress_and_progress_prints_a_line_per_improvement(tmp_path, layered):
    path = tmp_path / "g.json"
    save_graph(layered, path)
    runner = CliRunner()
    done = runner.invoke(main, ["solve", str(path), "-m", "moccasin", "-b", "0.8", "-t", "5", "--json",
                                "--progress"], env={"REMAT_BENCH_BOUND_CACHE": str(tmp_path / "cache")})
    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout)
    points = data["progress"]
    assert points and set(points[0]) == {"time_s", "duration", "peak", "overhead_pct", "source", "bound"}
    assert points[-1]["duration"] == data["duration"]
    lines = [line for line in done.stderr.splitlines() if "overhead" in line]
    assert len(lines) == len({(p["duration"], p["peak"]) for p in points})
    assert "bound, any order" in done.stderr


def test_gap_must_be_a_number_of_points_at_least_zero(tmp_path, layered):
    path = tmp_path / "g.json"
    save_graph(layered, path)
    done = CliRunner().invoke(main, ["solve", str(path), "-m", "greedy", "-b", "0.8", "--gap", "-1"])
    assert done.exit_code == 2
    assert "--gap" in done.output


def test_a_schedule_scored_in_progress_is_scored_as_the_answer_is(layered):
    """The recorder's scorer is the evaluation's: the clean-up, then the simulator."""
    from remat_bench.app.evaluate import judge_schedule

    schedule = baseline_schedule(layered)
    judged = judge_schedule(layered, schedule)
    assert not isinstance(judged, str)
    raw = simulate(layered, schedule)
    assert (judged.simulation.peak, judged.simulation.duration) == (raw.peak, raw.duration) == (
        baseline(layered).peak, baseline(layered).duration)


def test_the_status_line_shows_time_best_bound_and_gap_and_lines_per_improvement():
    import io

    from rich.console import Console

    from remat_bench.app.cli.live import LiveProgress

    log = io.StringIO()
    live = LiveProgress("solving g with moccasin", 200, Console(file=log, width=200, highlight=False))
    assert "no schedule yet" in live.__rich__().plain
    live.take(ProgressPoint(0.1, None, None, None, ANY_ORDER, 201))
    live.take(ProgressPoint(0.2, 210, 50, 5.0, "moccasin/greedy"))
    live.take(ProgressPoint(0.3, None, None, None, "moccasin", 205))  # its own bound: not shown as the bound
    live.take(ProgressPoint(0.9, 206, 60, 3.0, "moccasin"))
    line = live.__rich__().plain
    assert line.startswith("solving g with moccasin")
    assert "best +3.000% (moccasin)" in line and "bound +0.500%" in line and "gap 2.500 pts" in line
    printed = log.getvalue().splitlines()
    assert [p.split("  ", 1)[1] for p in (q.strip() for q in printed)] == [
        "bound, any order: +0.500%",
        "moccasin/greedy: overhead +5.000%, peak 50, 4.500 pts above the any-order bound",
        "moccasin: overhead +3.000%, peak 60, 2.500 pts above the any-order bound"]


class _EndsWorse:
    """A method that holds the baseline schedule, reports it, then returns a slower one (as a solver whose own
    objective prefers a schedule the clean-up makes slower)."""

    name = "ends-worse"
    returned: Schedule | None = None

    @classmethod
    def parse_params(cls, given):
        return {}

    @classmethod
    def space(cls, params):
        return "test"

    @classmethod
    def available(cls):
        return True, ""

    @classmethod
    def skip(cls, graph, budget):
        return None

    @classmethod
    def may_offload(cls, graph):
        return False

    def solve(self, graph, budget, time_limit, **params):
        from remat_bench.core.outcome import MethodResult, SolutionStatus, Termination

        self.context.report(baseline_schedule(graph))
        return MethodResult(SolutionStatus.FEASIBLE, type(self).returned, termination=Termination.CONVERGED)


def test_a_run_answers_with_the_best_schedule_it_held_and_says_so():
    from remat_bench.app.evaluate import evaluate
    from remat_bench.core.graph_io import load_graph
    from remat_bench.methods.base import SolveContext
    from tests.helpers import SHIPPED

    g = load_graph(SHIPPED / "chain-16-train.json")
    slower = pipeline.run(g, "checkmate", "0.7", 10, bounds=BoundCache())  # recomputes: slower than the baseline
    assert slower.duration > baseline(g).duration
    _EndsWorse.returned = slower.schedule
    r = evaluate(g, _EndsWorse, parse_budget("1.0", g), 10, context=SolveContext(bounds=BoundCache()))
    assert (r.duration, r.peak) == (baseline(g).duration, baseline(g).peak)
    assert r.stats["answer_held_at"]["source"] == "ends-worse"
    assert r.message.endswith("faster after the clean-up than the one the method ended with")
    assert r.progress[-1].duration == r.duration
