"""shave: the input order with recomputations inserted where memory peaks (remat_bench.methods.shave)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from remat_bench.core.baseline import baseline
from remat_bench.core.simulate import simulate
from remat_bench.generators import generate
from remat_bench.methods import get_method
from remat_bench.methods.base import Status
from tests.bruteforce import any_order_optimum, staged_optimum
from tests.helpers import dags, needs_reordering


def shave(g, budget, time_limit=None, **params):
    method = get_method("shave")()
    return method.solve(g, budget, time_limit, **method.parse_params(params))


def test_x_is_dropped_for_y_s_chain_and_computed_again_for_c():
    # In input order x (4) and y (4) are both held at y: 4 + 1 + 4 = 9 > 7. Shaving frees x after a and
    # computes it again before c (5 s more): 14 s at a peak of 7, the staged optimum (holding x needs
    # y's chain first, outside the input-order stages).
    g = needs_reordering()
    r = shave(g, 7)
    s = simulate(g, r.schedule)
    assert r.status is Status.FEASIBLE
    assert s.valid and (s.peak, s.duration) == (7, 14) == (7, staged_optimum(g, 7))
    assert r.stats["recomputations"] == 1


def test_a_budget_shaving_cannot_reach_is_no_solution_with_the_peak_it_reached():
    g = needs_reordering()
    r = shave(g, 6)  # c alone holds x, b, c and a (an output): 4 + 1 + 1 + 1 = 7
    assert r.status is Status.NO_SOLUTION and r.schedule is None
    assert r.stats["shaved_peak"] == 7
    assert r.message == "shaving reached a peak of 7, above the budget 6"


@given(dags(min_nodes=2, max_nodes=8, workspace=True), st.floats(0.3, 1.0))
@settings(max_examples=150, deadline=None)
def test_a_shaved_schedule_fits_and_is_never_below_the_brute_force_optimum(g, fraction):
    budget = max(1, int(fraction * baseline(g).peak))
    r = shave(g, budget)
    best = any_order_optimum(g, budget)  # the clean-up may leave the input-order stages
    if r.status is Status.FEASIBLE:
        s = simulate(g, r.schedule)
        assert s.valid and s.peak <= budget
        assert best is not None and s.duration >= best
    else:
        assert r.status is Status.NO_SOLUTION and r.stats["shaved_peak"] > budget


def test_on_an_unrolled_recurrent_network_shaving_reaches_half_the_peak_where_eviction_thrashes():
    g = generate("recurrent")  # 32 steps of 2 layers, batch 32, 256 hidden units
    budget = baseline(g).peak // 2
    r = shave(g, budget)
    s = simulate(g, r.schedule)
    assert r.status is Status.FEASIBLE and s.valid and s.peak <= budget
    dtr = get_method("dtr")()
    assert dtr.solve(g, budget, None, **dtr.parse_params({})).status is Status.NO_SOLUTION
