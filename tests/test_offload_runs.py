"""Runs of methods that may offload, on the evaluation path: refused only below the offload floor, judged by the
offload bound (not the any-order bound, which offloading beats), and auto with its offload members."""

from __future__ import annotations

from remat_bench.app.pipeline import run
from remat_bench.core.outcome import Status
from remat_bench.core.simulate import simulate
from remat_bench.toolkit.offload_bound import offload_bound, offload_floor
from tests.methods.test_offload_rules import FAST, SLOW, chain


def test_below_the_offload_floor_a_method_that_offloads_is_refused_in_one_sentence():
    g = chain()
    assert offload_floor(g) == 200  # computing f2 holds f1 and f2
    r = run(g, "offload-hide", 150)
    assert r.status is Status.INFEASIBLE and r.below_floor
    assert r.message == ("the budget 150 is below the offload floor 200: some computation needs its inputs, its "
                         "output and its workspace on the device at once, with everything else on the host")


def test_a_run_that_offloads_is_judged_by_the_offload_bound_and_may_beat_the_any_order_bound():
    g = chain()
    value, _ = offload_bound(g, 300)
    assert value == 80  # every copy can hide: the computations alone
    recompute = run(g, "knapsack", 300)
    assert recompute.lower_bound_any_order == 100 and recompute.lower_bound_offload is None
    r = run(g, "offload-hide", 300)
    assert (r.status, r.duration, r.peak) == (Status.FEASIBLE, 80, 300)  # below the any-order bound, 100
    assert (r.lower_bound_offload, r.lower_bound_any_order, r.gap_pct, r.proven_optimal) == (80, None, 0.0, True)
    assert r.status_holds_for == "every schedule"
    assert (r.to_host, r.to_device, r.wait, r.host_peak) == (200, 200, 0, 200)
    record = r.to_json()
    assert (record["lower_bound_offload"], record["to_host"], record["wait"]) == (80, 200, 0)


def test_auto_runs_its_offload_members_where_the_graph_has_a_link_and_is_judged_by_the_offload_bound():
    r = run(chain(FAST), "auto", 300, time_limit=30)
    assert r.status is Status.OPTIMAL and r.duration == 80 and r.lower_bound_offload == 80
    ran = {m["method"]: m["status"] for m in r.stats["members"]}
    # The members that offload run first (portfolio.OFFLOAD_SHARE): offload-all's plan meets the bound, and the
    # members after it are told so.
    assert ran["offload-all"] in ("optimal", "feasible") and r.stats["winner"] == "offload-all"
    skipped = {m["method"]: m.get("message", "") for m in r.stats["members"] if m["method"] != "offload-all"}
    assert skipped["offload-hide"] == skipped["greedy"] == "offload-all's schedule is proven optimal"
    assert simulate(chain(FAST), r.schedule).duration == 80
    # With copies too slow to hide, the offload bound is the link program's 90 and auto recomputes: 100.
    slow = run(chain(SLOW), "auto", 300, time_limit=30)
    assert (slow.duration, slow.lower_bound_offload) == (100, 90)
    assert round(slow.gap_pct, 6) == round(100 * (100 / 90 - 1), 6)
    # Without a link, the offload members are recorded as not applicable and auto is judged as before.
    plain = run(chain(None), "auto", 300, time_limit=30)
    notes = {m["method"]: m.get("message", "") for m in plain.stats["members"]}
    assert notes["offload-hide"].startswith("graph 'chain' has no host link")
    assert plain.lower_bound_offload is None and plain.lower_bound_any_order == 100
