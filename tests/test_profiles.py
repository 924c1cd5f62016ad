"""How fast each method gets there (remat_bench.app.sweep.profiles), against values computed by hand."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from remat_bench.app.sweep.profiles import (
    performance_profile,
    primal_gap,
    primal_integral,
    scaled_shifted_geometric_means,
    time_to_target,
)

# Three instances, two methods: A is fastest twice and fails once; B is never fastest alone but always finishes.
TIMES = pd.DataFrame({"A": [1.0, 2.0, math.inf], "B": [2.0, 2.0, 4.0]})


def test_performance_profile_by_hand():
    # Fastest per instance 1, 2, 4; ratios A 1, 1, inf; B 2, 1, 1.
    profile = performance_profile(TIMES, [1.0, 1.5, 2.0, 100.0])
    assert profile["A"].tolist() == pytest.approx([2 / 3, 2 / 3, 2 / 3, 2 / 3])
    assert profile["B"].tolist() == pytest.approx([2 / 3, 2 / 3, 1.0, 1.0])


def test_an_instance_no_method_solved_counts_for_none_and_zero_times_tie():
    times = pd.DataFrame({"A": [math.inf, 0.0], "B": [math.inf, 0.0]})
    assert performance_profile(times, [1.0])["A"].tolist() == [0.5]


def test_shifted_geometric_means_charge_failures_the_limit_and_scale_the_best_to_one():
    means = scaled_shifted_geometric_means(TIMES, limit=10.0, shift=10.0)
    a = (11 * 12 * 20) ** (1 / 3) - 10  # 1, 2 and the failure at 10, each plus 10
    b = (12 * 12 * 14) ** (1 / 3) - 10
    assert means["B"] == pytest.approx(1.0)
    assert means["A"] == pytest.approx(a / b)
    assert a / b == pytest.approx(1.45131, abs=1e-4)


def test_primal_integral_by_hand():
    points = [(2.0, 120.0), (5.0, 100.0)]
    # Gap 1 until 2 s, then (120 - 100) / 120 until 5 s, then 0: 2 + 0.5 + 0.
    assert primal_integral(points, best=100.0, limit=10.0) == pytest.approx(2.5)
    assert primal_integral([], best=100.0, limit=10.0) == 10.0
    assert primal_gap(None, 5.0) == 1.0 and primal_gap(0.0, 0.0) == 0.0 and primal_gap(80.0, 60.0) == 0.25


def test_time_to_target():
    points = [(2.0, 120.0), (5.0, 100.0)]
    assert time_to_target(points, 110.0) == 5.0
    assert time_to_target(points, 120.0) == 2.0
    assert time_to_target(points, 90.0) == math.inf


def hand_made_sweep():
    """Two instances (g at 0.8 and 0.9), methods A and B; B finds nothing at 0.9."""
    results = pd.DataFrame([
        ("r1", "g", "0.8", "A", "feasible", 110.0, 5.0),
        ("r2", "g", "0.8", "B", "feasible", 100.0, 8.0),
        ("r3", "g", "0.9", "A", "feasible", 100.0, 3.0),
        ("r4", "g", "0.9", "B", "no_solution", math.nan, 10.0),
    ], columns=["run_id", "graph", "budget_text", "method", "status", "duration", "solve_time_s"])
    results = results.assign(params="{}", time_limit=10.0, nodes=50, baseline_duration=90.0)
    progress = pd.DataFrame([("r1", 1.0, 130.0), ("r1", 5.0, 110.0), ("r2", 2.0, 120.0), ("r2", 8.0, 100.0),
                             ("r3", 3.0, 100.0)], columns=["run_id", "time_s", "duration"])
    return results, progress


def test_times_to_target_over_a_sweep_by_hand():
    from remat_bench.app.sweep.profiles import times_to_target

    results, progress = hand_made_sweep()
    within_1 = times_to_target(results, progress, 1.0)  # the best is 100 on both: the target is 101
    assert within_1.loc[("g", "0.8")].to_dict() == {"A": math.inf, "B": 8.0}
    assert within_1.loc[("g", "0.9")].to_dict() == {"A": 3.0, "B": math.inf}
    within_10 = times_to_target(results, progress, 10.0)  # 110
    assert within_10.loc[("g", "0.8")].to_dict() == {"A": 5.0, "B": 8.0}


def test_speed_summary_by_hand():
    from remat_bench.app.sweep.profiles import speed_summary

    results, progress = hand_made_sweep()
    table = speed_summary(results, progress, within_pct=1.0, shift_s=10.0)
    a = (20 * 13) ** 0.5 - 10  # A: the failure at 0.8 charged 10 s, 3 s at 0.9
    b = (18 * 20) ** 0.5 - 10  # B: 8 s, and the failure charged 10 s
    assert table.loc["A", "time_to_target_sgm"] == pytest.approx(1.0)
    assert table.loc["B", "time_to_target_sgm"] == pytest.approx(b / a)
    assert table.loc["A", "success_rate"] == 1.0 and table.loc["B", "success_rate"] == 0.5
    # Primal integrals over 10 s: r1 1 + 4 x 30/130 + 5 x 10/110, r3 3; r2 2 + 6 x 20/120, r4 10 (nothing).
    r1 = (1 + 4 * 30 / 130 + 5 * 10 / 110) / 10
    assert table.loc["A", "primal_integral"] == pytest.approx((r1 + 0.3) / 2)
    assert table.loc["B", "primal_integral"] == pytest.approx((0.3 + 1.0) / 2)
    assert table.loc["A", "first_schedule_s"] == 2.0 and table.loc["B", "first_schedule_s"] == 2.0
