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
