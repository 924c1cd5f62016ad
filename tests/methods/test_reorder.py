"""`reorder`: the best topological order, against a brute force over all orders."""

from __future__ import annotations

import pytest

from remat_bench.methods.reorder import Reorder, list_schedule, order_peak
from remat_bench.simulate import baseline
from tests.bruteforce import best_order_peak, topological_orders
from tests.methods.test_checkmate import random_graph


def solve(g, budget):
    method = Reorder()
    return method.solve(g, budget, 30, **method.parse_params({"num_workers": 1}))


@pytest.mark.parametrize("seed", range(15))
def test_lowest_peak_equals_brute_force_over_all_orders(seed):
    g = random_graph(seed + 300, n=7)
    want = best_order_peak(g)
    r = solve(g, None)
    assert r.status.value == "optimal"
    assert r.stats["peak"] == want
    # At the lowest peak, and at no budget below it, an order fits.
    assert solve(g, want).status.value == "optimal"
    below = solve(g, want - 1)
    assert below.status.value == "infeasible"


def test_list_schedule_is_a_topological_order():
    g = random_graph(7, n=8)
    order = list_schedule(g)
    assert order in list(topological_orders(g))
    assert order_peak(g, order) >= best_order_peak(g)
    assert order_peak(g, list(range(g.n))) == baseline(g).peak
