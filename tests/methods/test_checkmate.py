"""Checkmate MILP and LP rounding against the staged brute force."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

from remat_bench.core.baseline import baseline
from remat_bench.core.budget import memory_floor
from remat_bench.core.graph import Graph, Node
from remat_bench.core.simulate import simulate
from remat_bench.methods.checkmate import Checkmate
from remat_bench.methods.checkmate_lp import CheckmateLP
from remat_bench.methods.checkmate_model import CheckmateModel
from remat_bench.toolkit.orders import backward_need, deferred_gradients
from tests.bruteforce import any_order_optimum, staged_optimum
from tests.helpers import dags, with_runner


def random_graph(seed: int, n: int = 7, zero_durations: bool = False) -> Graph:
    rng = np.random.default_rng(seed)
    nodes = []
    for v in range(n):
        k = int(rng.integers(0, min(v, 3) + 1))
        ins = sorted(set(rng.choice(v, size=k, replace=False).tolist())) if v and k else []
        dur = int(rng.integers(0 if zero_durations else 1, 6))
        nodes.append(Node(id=f"v{v}", inputs=tuple(f"v{u}" for u in ins),
                          memory=int(rng.integers(1, 6)), duration=dur,
                          workspace=int(rng.integers(0, 3)) if seed % 3 == 0 else 0))
    return Graph(nodes, name=f"random-{seed}", fixed_memory=int(seed % 4 == 0))


def budgets(g: Graph) -> list[int]:
    """Every budget from just below the floor up to the baseline peak, at most 6 of them."""
    low, high = memory_floor(g).amount, baseline(g).peak
    values = sorted({low - 1, low, *np.linspace(low, high, 4).astype(int).tolist(), high})
    return [b for b in values if b > 0]


CASES = [(seed, b) for seed in range(14) for b in budgets(random_graph(seed))]


@pytest.mark.parametrize("seed, budget", CASES)
def test_checkmate_equals_staged_brute_force(seed, budget):
    g = random_graph(seed, zero_durations=seed % 5 == 4)
    want = staged_optimum(g, budget)
    method = with_runner(Checkmate())
    r = method.solve(g, budget, 60, **method.parse_params({"warm_start": "false"}))
    if want is None:
        assert r.status.value == "infeasible"
        return
    assert r.status.value == "optimal", r.message
    assert r.objective == want
    # The decoded schedule, before clean-up, is what the model believed: same memory, same duration.
    sim = simulate(g, r.schedule)
    assert sim.valid, sim.violation
    assert sim.peak <= budget
    assert sim.duration == r.objective


@pytest.mark.parametrize("seed", range(6))
def test_warm_start_and_pulp_cbc_agree_with_highs(seed):
    g = random_graph(seed + 100, n=8)
    b = budgets(g)[len(budgets(g)) // 2]
    want = staged_optimum(g, b)
    method = with_runner(Checkmate())
    answers = [method.solve(g, b, 60, **method.parse_params(p))
               for p in ({"keep_best": "false"}, {"backend": "pulp:PULP_CBC_CMD", "warm_start": "false"})]
    for r in answers:
        if want is None:
            assert r.status.value == "infeasible"
        else:
            assert r.status.value == "optimal", r.message
            assert r.objective == want


@pytest.mark.parametrize("seed", range(10))
def test_lp_bound_never_exceeds_the_optimum_and_roundings_are_valid(seed):
    g = random_graph(seed + 200)
    method = with_runner(CheckmateLP())
    for b in budgets(g):
        want = staged_optimum(g, b)
        r = method.solve(g, b, 60, **method.parse_params({}))
        if want is None:
            assert r.status.value in ("infeasible", "no_solution")
            continue
        assert r.lower_bound is not None and r.lower_bound <= want + 1e-6
        if r.schedule is not None:
            sim = simulate(g, r.schedule)
            assert sim.valid and sim.peak <= b
            # The rounding's own schedule lies in the staged space; clean-up (inside the
            # method's scoring) may then go below the staged optimum (docs/design.md section 3).
            assert r.objective >= want


def test_model_size_is_quadratic_and_encoded_baseline_is_feasible():
    g = random_graph(3, n=8)
    cm = CheckmateModel.build(g, baseline(g).peak)
    from remat_bench.core.baseline import baseline_schedule

    x = cm.encode(baseline_schedule(g))
    assert x is not None
    assert cm.model.violation(x) < 1e-9
    assert cm.objective(x) == g.total_duration
    assert cm.model.integer.sum() == 8 * 9 // 2 + 8 * 7 // 2 + (cm.model.num_cols - 8 * 9 - 8 * 7 // 2)


def test_refuses_a_model_that_would_not_fit():
    from remat_bench.core.errors import ModelTooLargeError
    from remat_bench.methods.checkmate_model import check_fits

    with pytest.raises(ModelTooLargeError, match="variables"):
        check_fits(100_000, 250_000, "Checkmate")


@pytest.mark.parametrize("seed", range(6))
def test_budget_min_finds_the_least_staged_peak_and_the_least_duration_there(seed):
    g = random_graph(seed)
    low, high = memory_floor(g).amount, baseline(g).peak
    least = next(b for b in range(low, high + 1) if staged_optimum(g, b) is not None)
    method = with_runner(Checkmate())
    r = method.solve(g, None, 60, **method.parse_params({}))
    assert r.stats["least_peak"] == r.stats["least_peak_lower"] == least and r.stats["least_peak_proven"]
    assert r.status.value == "optimal" and r.objective == staged_optimum(g, least)
    assert simulate(g, r.schedule).peak <= least
    lp = with_runner(CheckmateLP())
    rounded = lp.solve(g, None, 60, **lp.parse_params({}))
    assert rounded.status.found_schedule and simulate(g, rounded.schedule).peak == rounded.stats["least_peak"]
    assert rounded.stats["least_peak"] >= least


def test_large_models_stop_at_the_time_limit_and_keep_the_incumbent():
    import time

    from remat_bench.core.budget import parse_budget
    from remat_bench.core.cleanup import place_frees
    from remat_bench.core.graph_io import load_graph
    from remat_bench.toolkit.improve import shave_peaks
    from remat_bench.toolkit.milp import ISOLATE_COLUMNS, solve_milp
    from tests.helpers import SHIPPED

    g = load_graph(SHIPPED / "unet-d3-b2-r64-train.json")
    budget = parse_budget("0.7", g).amount
    cm = CheckmateModel.build(g, budget)
    assert cm.model.num_cols >= ISOLATE_COLUMNS  # solved in a child process
    order = shave_peaks(g, np.arange(g.n), budget)
    start = cm.encode(place_frees(g, order, np.zeros(len(order), dtype=np.int64), drop_unused=False))
    assert start is not None and cm.model.violation(start) < 1e-6
    t0 = time.perf_counter()
    sol = solve_milp(cm.model, time_limit=3.0, start=start, mip_gap=0.0)
    # It ended (HiGHS alone ran far past its limit on such models); generous, so load does not decide it.
    assert time.perf_counter() - t0 < 60
    # Stopped or not, the warm start came back as an incumbent, no worse than it went in.
    assert sol.solution_status in ("feasible", "optimal") and sol.x is not None
    assert sol.termination in ("time_limit", "proven")  # killed at its limit, or solved within it
    assert sol.objective <= float(cm.model.cost @ start) + 1e-6


def test_the_refusal_names_the_need_and_what_is_available_and_unknown_memory_refuses_nothing(monkeypatch):
    from remat_bench.core.errors import ModelTooLargeError
    from remat_bench.toolkit import milp

    monkeypatch.setattr(milp, "available_memory_bytes", lambda: 10 * 2**30)
    milp.refuse_too_large(6 * 2**30, "a model")  # 60% of 10 GiB: still allowed
    with pytest.raises(ModelTooLargeError) as exc:
        milp.refuse_too_large(6 * 2**30 + 1, "a model", "; try another")
    assert str(exc.value) == "a model, needing about 6.0 GiB, more than the 10.0 GiB available; try another"
    monkeypatch.setattr(milp, "available_memory_bytes", lambda: None)
    milp.refuse_too_large(10**18, "a model")


def test_a_model_whose_memory_spans_eleven_orders_of_magnitude_is_not_handed_to_highs():
    """Found by tests/test_fuzz.py: HiGHS 1.14 crashed the process (SIGSEGV in presolve) on this
    Checkmate model (sizes from 6.107 to 1.2e12). Such a model is not handed to HiGHS: the answer is
    the warm start if any (none here: v1's default implementation reads v0, and the two exceed the
    budget), with the reason."""
    from remat_bench.app.pipeline import run
    from remat_bench.core.graph import Implementation

    four = ("v0", "v0", "v0", "v0")
    g = Graph([
        Node("v0", (), 1200000000000, 0, 1),
        Node("v1", four, 6.107, 1.02, 0, implementations=(
            Implementation("impl0", 1.02, 0), Implementation("impl1", 2, 3, four), Implementation("impl2", 0, 4, ()))),
        Node("v2", (), 0, 5.05, 2),
        Node("v3", ("v2", "v1", "v1", "v1"), 10.304, 3.71, 5, implementations=(
            Implementation("impl0", 3.71, 5), Implementation("impl1", 6.08, 4, ("v2",)))),
        Node("v4", ("v2", "v3", "v2", "v1"), 11, 3.99, 2, implementations=(
            Implementation("impl0", 3.99, 2), Implementation("impl1", 0, 5, ("v2", "v3", "v2")),
            Implementation("impl2", 5.26, 2, ()))),
        Node("v5", (), 500000000000, 9, 3, implementations=(Implementation("impl0", 9, 3),)),
        Node("v6", ("v3",), 1, 8.38, 0),
    ], name="fuzz", outputs=["v4", "v5", "v6"])
    r = run(g, "checkmate", "1200000000003.935", time_limit=10)
    assert r.status.value == "no_solution" and "the MILP was not run" in r.message, r.message
    assert "span 1 to 1.2e+12" in r.message


def test_a_least_peak_model_spanning_eleven_orders_of_magnitude_answers_from_the_warm_start():
    """Found by tests/test_fuzz.py: SIGFPE in HiGHS's branch and bound (presolve off) at 'min'."""
    from remat_bench.app.pipeline import run
    from remat_bench.core.graph import Implementation

    g = Graph([
        Node("v0", (), 3.613, 9, 2, kind="forward"),
        Node("v1", ("v0",), 2, 9, 2, kind="forward"),
        Node("v2", ("v0", "v0", "v1", "v0"), 800000000000, 7, 1, kind="forward"),
        Node("v3", ("v1", "v0", "v0", "v1"), 1200000000000, 6.69, 1, kind="backward"),
        Node("v4", ("v2", "v3", "v2", "v2"), 0, 0.99, 3, kind="backward"),
        Node("v5", ("v4", "v1", "v1", "v2"), 1000000000000, 9, 4, kind="backward", grad_of="v2", implementations=(
            Implementation("impl0", 9, 4), Implementation("impl1", 6.58, 0, ("v4",)),
            Implementation("impl2", 7.95, 2, ("v4", "v1")))),
        Node("v6", ("v3", "v0", "v4", "v2"), 7.692, 0.33, 1, kind="backward", grad_of="v1", implementations=(
            Implementation("impl0", 0.33, 1), Implementation("impl1", 2, 0, ("v3", "v0", "v4")),
            Implementation("impl2", 3.44, 1, ("v3",)))),
        Node("v7", (), 100000000000, 7, 2, kind="backward", grad_of="v1"),
    ], name="fuzz", outputs=["v5", "v6", "v7"], fixed_memory=1)
    for method in ("checkmate", "monet"):
        r = run(g, method, "min", time_limit=10)
        assert r.status.value == "feasible" and r.simulation is not None and r.simulation.valid, r.message


# ---------------------------------------------------------------------- stages in the deferred order


def late_weight() -> Graph:
    """a (4) -> b (1) -> c (1) -> loss; c's weight gradient wc reads gc and b (1 each) and is 5 units, an output;
    gb, then ga (4, an output) reads gb and a."""
    return Graph([Node("a", (), 4, 1), Node("b", ("a",), 1, 1), Node("c", ("b",), 1, 1),
                  Node("loss", ("c",), 1, 1, kind="backward"), Node("gc", ("loss",), 1, 1, kind="backward"),
                  Node("wc", ("gc", "b"), 5, 1, kind="backward"), Node("gb", ("gc",), 1, 1, kind="backward"),
                  Node("ga", ("gb", "a"), 4, 1, kind="backward")], name="late-weight", outputs=["wc", "ga"])


def test_the_late_weight_gradient_moves_last_and_the_backward_pass_needs_less():
    g = late_weight()
    order = deferred_gradients(g)
    assert [g.ids[v] for v in order] == ["a", "b", "c", "loss", "gc", "gb", "ga", "wc"]
    # In file order ga holds wc (5, an output), gb (1), a (4) and itself (4): 14. Deferred, ga holds gc (wc
    # reads it later), gb, a and itself: 10; wc then holds gc, ga, itself (b is forward): 11.
    assert backward_need(g) == 14 and backward_need(g.in_order(order)) == 11
    assert deferred_gradients(random_graph(1)) is None  # no backward nodes: nothing moves


@pytest.mark.parametrize("budget", [11, 12, 13, 14])
def test_where_the_input_order_cannot_fit_checkmate_solves_in_the_deferred_order(budget):
    g = late_weight()
    fits_input = budget >= 14
    assert (staged_optimum(g, budget) is not None) == fits_input
    plain = Checkmate().solve(g, budget, 60, **Checkmate.parse_params({}))
    assert plain.status.value == ("optimal" if fits_input else "infeasible")
    method = with_runner(Checkmate())
    r = method.solve(g, budget, 60, **method.parse_params({"order": "auto"}))
    assert r.status.value == "optimal" and r.stats["order"] == ("input" if fits_input else "deferred")
    # The schedule is over the graph's own nodes, and reaches the any-order optimum (the brute force): 8.
    sim = simulate(g, r.schedule)
    assert sim.valid and sim.peak <= budget and sim.duration == r.objective == any_order_optimum(g, budget) == 8


@settings(max_examples=40, deadline=None)
@given(g=dags(training=True, max_nodes=10))
def test_the_backward_need_is_a_floor_of_the_file_order_and_the_deferred_order_is_topological(g):
    # The baseline computes every backward node once, in file order: it holds at least the need.
    assert backward_need(g) <= baseline(g).peak
    order = deferred_gradients(g)
    if order is not None:
        moved = g.in_order(order)  # raises when a node comes before one of its inputs
        assert sorted(order) == list(range(g.n)) and backward_need(moved) <= baseline(moved).peak
