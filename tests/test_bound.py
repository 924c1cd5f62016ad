"""The any-order cut lower bound (remat_bench.bound) against the brute force over all schedules."""

from __future__ import annotations

import pytest

from remat_bench.bound import any_order_bound
from remat_bench.budget import memory_floor, parse_budget
from remat_bench.graph import load_graph
from remat_bench.simulate import baseline
from tests.bruteforce import any_order_optimum
from tests.helpers import PAPER
from tests.methods.test_checkmate import random_graph


def all_budgets(g):
    low, high = memory_floor(g).amount, baseline(g).peak
    return list(range(max(1, low - 1), high + 1))


CASES = [(seed, b) for seed in range(12) for b in all_budgets(random_graph(seed, n=6))]


@pytest.mark.parametrize("seed, budget", CASES)
def test_bound_never_exceeds_the_optimum_and_infeasible_only_when_nothing_fits(seed, budget):
    g = random_graph(seed, n=6)
    want = any_order_optimum(g, budget)
    bound = any_order_bound(g, budget)
    if bound.value is None:
        assert want is None
    elif want is not None:
        assert bound.value <= want


@pytest.mark.parametrize(
    "name, budget, overhead",
    [
        # ../shared/notes/solver-measurements.md: the cut bound is exact on these.
        ("checkmate_fcn8_vgg_train", "0.9", 0.02936),
        ("checkmate_fcn8_vgg_train", "0.8", 0.13611),
        ("checkmate_resnet50_train", "0.8", 0.27855),
        ("checkmate_resnet50_train", "0.5", 1.49876),
        ("checkmate_vgg16_train", "0.9", 1.96774),
        ("random_layered_n100", "0.8", 0.0),
        ("random_layered_n100", "0.6", 0.51917),
    ],
)
def test_published_graph_bounds(name, budget, overhead):
    g = load_graph(PAPER / f"{name}.json")
    bound = any_order_bound(g, parse_budget(budget, g).amount)
    assert bound.status == "optimal"
    assert round(100 * (bound.value / g.total_duration - 1), 5) == overhead


def test_bound_below_the_floor_is_infeasible():
    g = load_graph(PAPER / "checkmate_vgg16_train.json")
    assert any_order_bound(g, parse_budget("0.8", g).amount).value is None
