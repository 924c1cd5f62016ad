"""Baselines none, chen and greedy, and the shared lowering."""

from __future__ import annotations

import glob

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remat_bench.app.pipeline import run
from remat_bench.core.baseline import baseline
from remat_bench.core.budget import memory_floor
from remat_bench.core.graph_io import load_graph
from remat_bench.core.simulate import simulate
from remat_bench.generators import chain
from remat_bench.methods.chen import separators
from remat_bench.methods.greedy import greedy_schedule
from remat_bench.toolkit.lowering import lower_plan, plan_from_checkpoints
from tests.helpers import PAPER_NAMES, SHIPPED, dags, graph_path, paper_graph

GRAPHS = [p.rsplit("/", 1)[-1] for p in sorted(glob.glob(str(SHIPPED / "*.json")))] + [
    f"paper:{name}" for name in sorted(PAPER_NAMES)]


@pytest.mark.parametrize("graph", GRAPHS)
@pytest.mark.parametrize("method", ["none", "chen", "greedy"])
def test_every_shipped_graph_gets_a_valid_schedule_or_a_clear_answer(graph, method):
    g = load_graph(graph_path(graph))
    for budget in ("0.9", "0.8", "min"):
        r = run(g, method, budget, time_limit=60, bound=False)  # the any-order bound is not what is checked
        assert r.status.value in ("optimal", "feasible", "infeasible", "no_solution", "unsupported"), r.message
        if r.status.found_schedule:
            assert r.simulation.valid
            assert r.budget is None or r.peak <= r.budget
        else:
            assert r.message
        if r.status.value == "unsupported":
            assert not g.has_backward and "no backward nodes" in r.message


def test_separators_of_a_chain_are_every_forward_node_but_the_last():
    g = chain(6)
    assert separators(g) == list(range(5))


def test_lowering_keep_everything_is_the_baseline_and_keep_nothing_recomputes():
    g = chain(6)
    everything = lower_plan(g, plan_from_checkpoints(g, range(6)))
    nothing = lower_plan(g, plan_from_checkpoints(g, []))
    base = baseline(g)
    s_all, s_none = simulate(g, everything), simulate(g, nothing)
    assert s_all.valid and s_none.valid
    assert (s_all.peak, s_all.duration) == (base.peak, base.duration)
    # With nothing kept, the five values below the sink are recomputed once, as a segment.
    assert s_none.duration == base.duration + 5
    assert s_none.peak == base.peak  # one segment: recomputed all at once


def test_chen_sqrt_on_a_chain_of_16():
    g = chain(16)
    r = run(g, "chen", "min", params={"variant": "sqrt"})
    assert r.status.value == "feasible"
    assert r.stats["checkpoints"] == 3  # ceil(sqrt(16)) = 4 segments
    assert r.peak < r.baseline_peak


def test_greedy_at_the_baseline_peak_recomputes_nothing():
    g = load_graph(paper_graph("checkmate_fcn8_vgg_train"))
    sim = simulate(g, greedy_schedule(g, baseline(g).peak))
    assert sim.valid and sim.recomputations == 0


@settings(max_examples=200, deadline=None)
@given(dags(min_nodes=2, max_nodes=9), st.floats(0, 1))
def test_greedy_is_valid_and_within_budget_whenever_it_answers(g, t):
    floor, peak = memory_floor(g).amount, baseline(g).peak
    budget = int(floor + t * (peak - floor))
    # Greedy's schedule, not the any-order bound (tests/test_bound.py and the fuzz tests check it).
    r = run(g, "greedy", str(budget) if budget > 1 else "1", bound=False)
    if r.status.found_schedule:
        assert r.simulation.valid
        assert r.peak <= max(budget, 1) or budget <= 1


@settings(max_examples=150, deadline=None)
@given(dags(min_nodes=3, max_nodes=9, training=True), st.sampled_from(["chen", "greedy"]))
def test_training_graph_methods_at_min_give_valid_schedules(g, method):
    r = run(g, method, "min")
    assert r.status.value in ("feasible", "optimal", "unsupported"), r.message
    if r.status.found_schedule:
        assert r.simulation.valid
        assert r.peak <= baseline(g).peak
