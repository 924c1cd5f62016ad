"""dtr: Dynamic Tensor Rematerialization's eviction heuristics, hand-checked, and its schedules against brute force."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remat_bench.app.cli import main
from remat_bench.core.baseline import baseline
from remat_bench.core.budget import memory_floor
from remat_bench.core.errors import MethodError
from remat_bench.core.graph import Graph, Implementation, Node
from remat_bench.core.graph_io import load_graph
from remat_bench.core.simulate import simulate
from remat_bench.methods import get_method
from remat_bench.methods.dtr import DTR, HEURISTICS, DTRPass, dtr_schedule
from remat_bench.toolkit.eviction import Stuck
from tests.bruteforce import any_order_optimum
from tests.helpers import SHIPPED
from tests.methods.test_checkmate import budgets, random_graph
from tests.test_fuzz import graphs


def steps(graph: Graph, heuristic: str, budget: int) -> list[str]:
    """The schedule DTR gives, as "compute x" / "free x" words."""
    return [f"{kind} {node}" for kind, node, *_ in dtr_schedule(graph, budget, heuristic).steps(graph)]


def source(name: str, memory: int, duration: int) -> Node:
    return Node(name, (), memory, duration)


def reader(name: str, of: str) -> Node:
    """A node of no memory that reads ``of``: it holds ``of`` in memory until it runs."""
    return Node(name, (of,), 0, 1)


# Four sources a, b, c, d, then one reader each, in the order xd, xc, xb, xa (each value freed after its
# reader). Budget 10: before d (computation 4), a + b + c = 9 are resident and d needs 2: 11 > 10, so one
# value is evicted (any of them makes room). Staleness s = 4 - last computation that touched the value:
#
#   value  memory m  duration c  last  s   c / (m s)
#   a      2         3           1     3   3 / 6 = 0.50
#   b      4         8           2     2   8 / 8 = 1.00
#   c      3         1           3     1   1 / 3 = 0.33   <- h_dtr (nothing is evicted yet: e* is empty)
#                                                          lru: a (s = 3); size: b (m = 4)
#
# The evicted value is computed again before its reader, once the values read before it are freed: every
# heuristic evicts once and recomputes once, so the duration is the baseline's 3+8+1+1 + 4 readers = 17 plus
# the evicted value's duration: h_dtr 17 + 1 = 18, lru 17 + 3 = 20, size 17 + 8 = 25. Peaks: the step
# computing c holds a + b + c = 9; d's step holds 9 - m + 2 (h_dtr 8, lru 9, size 7); the recomputation
# holds a + b + c = 9 (h_dtr: d freed), a = 2 (lru: the rest freed), a + b = 6 (size): 9 in every case.
FOUR_SOURCES = Graph([source("a", 2, 3), source("b", 4, 8), source("c", 3, 1), source("d", 2, 1),
                      reader("xd", "d"), reader("xc", "c"), reader("xb", "b"), reader("xa", "a")],
                     name="four-sources")
FOUR_SOURCES_SCHEDULES = {
    "h_dtr": (["compute a", "compute b", "compute c", "free c", "compute d", "compute xd", "free d",
               "compute c", "compute xc", "free c", "compute xb", "free b", "compute xa", "free a"], 9, 18),
    "lru": (["compute a", "compute b", "compute c", "free a", "compute d", "compute xd", "free d",
             "compute xc", "free c", "compute xb", "free b", "compute a", "compute xa", "free a"], 9, 20),
    "size": (["compute a", "compute b", "compute c", "free b", "compute d", "compute xd", "free d",
              "compute xc", "free c", "compute b", "compute xb", "free b", "compute xa", "free a"], 9, 25),
}


@pytest.mark.parametrize("heuristic", sorted(FOUR_SOURCES_SCHEDULES))
def test_a_hand_worked_example_each_heuristic_evicts_its_own_choice(heuristic):
    want, peak, duration = FOUR_SOURCES_SCHEDULES[heuristic]
    assert steps(FOUR_SOURCES, heuristic, 10) == want
    r = DTR().solve(FOUR_SOURCES, 10, None, heuristic=heuristic)
    sim = simulate(FOUR_SOURCES, r.schedule)
    assert r.status.value == "feasible" and sim.valid
    assert (sim.peak, sim.duration, r.objective) == (peak, duration, duration)
    assert r.stats["evictions"] == 1 and sim.recomputations == 1


def test_with_nothing_evicted_yet_the_paper_variants_agree_with_h_dtr():
    # e*(t) is empty for every candidate in FOUR_SOURCES: h_dtr, h_dtr_eq and h_dtr_local score alike.
    assert steps(FOUR_SOURCES, "h_dtr_eq", 10) == steps(FOUR_SOURCES, "h_dtr_local", 10) == \
        FOUR_SOURCES_SCHEDULES["h_dtr"][0]


# p (expensive) feeds t and is freed right after it; u and q are sources; then readers xq, xu, xt.
# Budget 5: before q (computation 4) t + u = 4 are resident and q needs 2, so one is evicted.
#
#   value  m  c  last  s   h_dtr_local = c / (m s)   e*                   h_dtr = (c + e*) / (m s)
#   t      2  1  2     2   1 / 4 = 0.25  <- local    {p}: t's freed input  (1 + 10) / 4 = 2.75
#   u      2  2  3     1   2 / 2 = 1.00              {}                    2 / 2 = 1.00   <- h_dtr
#
# Evicting t means computing p and t again before xt (11 more), evicting u only u again (2 more):
# baseline 10+1+2+1 + 3 readers = 17, so h_dtr 19 and h_dtr_local 28. h_dtr_eq looks only at evicted
# neighbours' classes, and p, freed because nothing needs it, is in none: it scores t as h_dtr_local does.
FREED_INPUT = Graph([source("p", 1, 10), Node("t", ("p",), 2, 1), source("u", 2, 2), source("q", 2, 1),
                     reader("xq", "q"), reader("xu", "u"), reader("xt", "t")], name="freed-input")


def test_the_evicted_neighbourhood_changes_the_choice():
    assert steps(FREED_INPUT, "h_dtr", 5) == [
        "compute p", "compute t", "free p", "compute u", "free u", "compute q", "compute xq", "free q",
        "compute u", "compute xu", "free u", "compute xt", "free t"]
    local = ["compute p", "compute t", "free p", "compute u", "free t", "compute q", "compute xq", "free q",
             "compute xu", "free u", "compute p", "compute t", "free p", "compute xt", "free t"]
    assert steps(FREED_INPUT, "h_dtr_local", 5) == local
    assert steps(FREED_INPUT, "h_dtr_eq", 5) == local
    durations = {h: simulate(FREED_INPUT, dtr_schedule(FREED_INPUT, 5, h)).duration for h in HEURISTICS}
    assert durations["h_dtr"] == 19 and durations["h_dtr_local"] == 28


def test_the_neighbourhood_is_directed_and_the_classes_are_not():
    # r -> t -> e1 -> e2, s -> e1, and z reads t, e1, e2 (so they stay needed). After e2 and e1 are evicted:
    # e*(t) = {r} (recomputing t recomputes its freed input) + {e1, e2} (evicted, they need t): 1 + 5 + 7.
    # s, an input of e1 but neither above nor below t, is not in e*(t); it is in e1's class, merged
    # when e1's eviction made s (freed, now needed to recompute e1) evicted: 5 + 7 + 100.
    g = Graph([source("r", 1, 1), source("s", 1, 100), Node("t", ("r",), 1, 2), Node("e1", ("t", "s"), 1, 5),
               Node("e2", ("e1",), 1, 7), Node("z", ("t", "e1", "e2"), 1, 1)], name="neighbourhood")
    r, s, t, e1, e2 = range(5)
    run = DTRPass(g, 100, "h_dtr_eq")
    for v in range(5):
        run.step(v)
    assert run.pool == {t, e1, e2} and not run.evicted[r]  # r and s freed after their last use
    run.free(e2)
    run.free(e1)
    assert [v for v in range(g.n) if run.evicted[v]] == [s, e1, e2]
    assert run.neighbourhood(t) == 1 + 5 + 7
    assert run.adjacent_classes(t) == 5 + 7 + 100
    # Recomputing e1 (and s for it) takes their durations out of the class, which does not split.
    run.materialise(e1)
    assert [v for v in range(g.n) if run.evicted[v]] == [e2]
    assert run.neighbourhood(t) == 1
    assert run.classes.cost[run.classes.find(run.uf_node[e2])] == 7


def test_the_first_implementation_says_what_a_node_reads():
    # v2's first implementation reads v0 only: v1 is read by nothing DTR computes, and is freed at once.
    g = Graph([source("v0", 2, 1), source("v1", 3, 1),
               Node("v2", ("v0", "v1"), 1, 9, implementations=(Implementation("narrow", 4, 0, ("v0",)),
                                                              Implementation("wide", 2, 0)))], name="impl")
    assert steps(g, "h_dtr", 100) == ["compute v0", "compute v1", "free v1", "compute v2", "free v0"]
    sim = simulate(g, dtr_schedule(g, 100))
    assert sim.valid and sim.duration == 1 + 1 + 4


def test_pruned_choice_is_the_exhaustive_choice():
    """The bound-and-prune search of `DTRPass.choose` finds the same value as scoring every candidate."""

    class Exhaustive(DTRPass):
        def choose(self) -> int | None:
            candidates = [v for v in self.pool if not self.pinned[v] and self.mem[v] > 0]
            return min(candidates, key=lambda v: (self.cost(v) / (self.mem[v] * self.staleness(v)), v),
                       default=None)

    for seed in range(30):
        g = random_graph(seed, n=8)
        for budget in budgets(g):
            for heuristic in ("h_dtr", "h_dtr_eq", "h_dtr_local"):
                outcomes = []
                for cls in (DTRPass, Exhaustive):
                    try:
                        outcomes.append(cls(g, budget, heuristic).run().nodes.tolist())
                    except Stuck as stuck:
                        outcomes.append(("stuck", stuck.node))
                assert outcomes[0] == outcomes[1], (seed, budget, heuristic)


CASES = [(seed, b) for seed in range(14) for b in budgets(random_graph(seed))]


@pytest.mark.parametrize("seed, budget", CASES)
def test_schedules_are_valid_and_never_beat_the_any_order_optimum(seed, budget):
    g = random_graph(seed, zero_durations=seed % 5 == 4)
    best = any_order_optimum(g, budget)
    for heuristic in HEURISTICS:
        r = DTR().solve(g, budget, None, heuristic=heuristic)
        if r.status.value != "feasible":
            assert budget < baseline(g).peak  # at the baseline peak nothing needs evicting
            assert r.status.value == "no_solution" and r.message and r.schedule is None
            continue
        sim = simulate(g, r.schedule)
        assert sim.valid, sim.violation
        assert sim.peak <= budget
        assert best is not None and sim.duration >= best
        assert r.objective == sim.duration


@pytest.mark.parametrize("seed", range(14))
def test_at_the_baseline_peak_nothing_is_recomputed(seed):
    g = random_graph(seed)
    for heuristic in HEURISTICS:
        sim = simulate(g, dtr_schedule(g, baseline(g).peak, heuristic))
        assert sim.valid and sim.recomputations == 0 and sim.duration == g.total_duration


def test_below_what_one_computation_needs_there_is_no_solution():
    floor = memory_floor(FOUR_SOURCES).amount  # 4: the largest source (b) alone
    r = DTR().solve(FOUR_SOURCES, floor - 1, None)
    assert r.status.value == "no_solution" and r.schedule is None
    assert r.message == ("DTR could not make room for node 'b': it needs 4 with everything evictable evicted, "
                         "above the budget 3")


def test_thrashing_past_the_cap_gives_up():
    run = DTRPass(FOUR_SOURCES, 10)
    run.max_computes = 3
    with pytest.raises(Stuck) as stuck:
        run.run()
    assert stuck.value.thrashing and FOUR_SOURCES.ids[stuck.value.node] == "d"


def test_a_spent_time_limit_stops_the_pass():
    r = DTR().solve(FOUR_SOURCES, 10, 0)
    assert (r.status.value, r.termination.value) == ("no_solution", "time_limit")
    # With 'min' the answer is DTR's own at the baseline peak, which evicts nothing: the baseline schedule.
    r = DTR().solve(FOUR_SOURCES, None, 0)
    assert r.status.value == "feasible" and simulate(FOUR_SOURCES, r.schedule).recomputations == 0


@pytest.mark.parametrize("heuristic", HEURISTICS)
def test_min_lies_between_the_memory_floor_and_the_baseline_peak(heuristic):
    for g in [random_graph(seed) for seed in range(10)] + [load_graph(SHIPPED / "chain-16-train.json")]:
        r = DTR().solve(g, None, 30, heuristic=heuristic)
        assert r.status.value == "feasible", r.message
        sim = simulate(g, r.schedule)
        assert sim.valid
        assert memory_floor(g).amount <= sim.peak <= baseline(g).peak
        assert r.objective == sim.duration
    # On FOUR_SOURCES DTR reaches the memory floor, 4 (b alone), where the baseline peaks at 11: each source
    # is evicted when the next one needs room, and computed again before its reader (17 + 3 + 8 + 1).
    r = DTR().solve(FOUR_SOURCES, None, 30, heuristic=heuristic)
    sim = simulate(FOUR_SOURCES, r.schedule)
    assert (sim.peak, sim.duration, baseline(FOUR_SOURCES).peak) == (4, 29, 11)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(g=graphs(), choice=st.one_of(st.just("min"), st.floats(-0.1, 1.0)), heuristic=st.sampled_from(HEURISTICS))
def test_whatever_dtr_returns_is_valid_and_within_budget(g, choice, heuristic):
    floor, peak = memory_floor(g).amount, baseline(g).peak
    budget = None if choice == "min" else floor + choice * (peak - floor)
    r = DTR().solve(g, budget, 10, heuristic=heuristic)
    if r.status.value == "feasible":
        sim = simulate(g, r.schedule)
        assert sim.valid, sim.violation
        assert sim.peak <= (peak if budget is None else budget)
        assert r.objective == sim.duration
    else:
        assert r.status.value == "no_solution" and r.message
        assert budget is not None


def test_dtr_is_registered_with_its_heuristics():
    assert get_method("dtr") is DTR
    r = CliRunner().invoke(main, ["methods", "--json"])
    assert r.exit_code == 0, r.output
    rows = {m["name"]: m for m in json.loads(r.output)}
    assert rows["dtr"]["available"] is True
    assert [p["name"] for p in rows["dtr"]["params"]] == ["heuristic"]
    assert DTR.parse_params({}) == {"heuristic": "h_dtr"}
    with pytest.raises(MethodError) as error:
        DTR.parse_params({"heuristic": "nope"})
    assert str(error.value) == ("parameter 'heuristic' of method 'dtr' must be one of h_dtr, h_dtr_eq, "
                                "h_dtr_local, lru, size, got 'nope'")
