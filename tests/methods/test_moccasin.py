"""Moccasin (staged retention intervals on CP-SAT) against the staged brute force."""

from __future__ import annotations

import pytest

from remat_bench.core.baseline import baseline, baseline_schedule
from remat_bench.core.simulate import simulate
from remat_bench.generators import chain
from remat_bench.methods.moccasin import Moccasin, build_staged
from tests.bruteforce import staged_optimum
from tests.helpers import with_runner
from tests.methods.test_checkmate import budgets, random_graph

CASES = [(seed, b) for seed in range(12) for b in budgets(random_graph(seed))]


def solve(g, budget, **params):
    """The formulation's own answer (keep_best off): these tests hold it to the brute force of its space."""
    method = with_runner(Moccasin())
    return method.solve(g, budget, 60, **method.parse_params({"threads": 1, "keep_best": False, **params}))


@pytest.mark.parametrize("seed, budget", CASES)
def test_moccasin_with_enough_intervals_equals_staged_brute_force(seed, budget):
    g = random_graph(seed, zero_durations=seed % 5 == 4)
    want = staged_optimum(g, budget)
    # Each node can be computed at most once per stage from its own on: n intervals always suffice.
    r = solve(g, budget, max_intervals=g.n)
    if want is None:
        assert r.status.value in ("infeasible",), r.message
        return
    assert r.status.value == "optimal", r.message
    assert r.objective == want
    sim = simulate(g, r.schedule)
    assert sim.valid, sim.violation
    assert sim.peak <= budget
    assert sim.duration == r.objective


@pytest.mark.parametrize("seed", range(8))
def test_fewer_intervals_never_beat_the_brute_force(seed):
    g = random_graph(seed + 50, n=8)
    for b in budgets(g):
        want = staged_optimum(g, b)
        r = solve(g, b, max_intervals=2)
        if want is None:
            assert r.status.value in ("infeasible", "no_solution")
        elif r.status.found_schedule:
            assert r.objective >= want
            assert simulate(g, r.schedule).peak <= b


def test_hint_of_the_baseline_is_expressible_and_decodes_back():
    g = chain(5)
    sm = build_staged(g, baseline(g).peak, 2)
    intervals = sm.intervals_of(baseline_schedule(g))
    assert intervals is not None
    assert all(len(row) == 1 for row in intervals)
    # A node's first interval starts at its own event, stage v, position v.
    assert [row[0][0] for row in intervals] == [v * g.n + v for v in range(g.n)]


def test_lowest_peak_with_budget_min():
    g = chain(8)
    r = solve(g, None, max_intervals=3)
    assert r.status.found_schedule
    assert simulate(g, r.schedule).peak < baseline(g).peak


FREE_CASES = [(seed, b) for seed in range(6) for b in budgets(random_graph(seed + 400, n=6))]


@pytest.mark.parametrize("seed, budget", FREE_CASES)
def test_order_free_model_equals_brute_force_over_all_schedules(seed, budget):
    from tests.bruteforce import any_order_optimum

    g = random_graph(seed + 400, n=6)
    want = any_order_optimum(g, budget)
    # C = 3 and T = 2n matched the brute force on every tiny instance measured.
    r = solve(g, budget, order="free", max_intervals=3)
    if want is None:
        assert r.status.value in ("infeasible", "no_solution"), r.message
        return
    assert r.status.found_schedule, r.message
    sim = simulate(g, r.schedule)
    assert sim.valid and sim.peak <= budget
    assert sim.duration == want
