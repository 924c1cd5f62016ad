"""TWRemat (Kumar et al. 2019): Lemma 1, Lemma 3 and Algorithm 1 on small and deep graphs."""

from __future__ import annotations

import glob
import math
import sys

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remat_bench.app.pipeline import run
from remat_bench.core.baseline import baseline, baseline_schedule
from remat_bench.core.cleanup import place_frees
from remat_bench.core.graph import Graph, Implementation, Node
from remat_bench.core.graph_io import load_graph
from remat_bench.core.schedule import COMPUTE
from remat_bench.core.simulate import simulate
from remat_bench.generators import chain
from remat_bench.methods import twremat
from remat_bench.methods.twremat import (
    TWRemat,
    dependencies,
    k_grid,
    separator_tree,
    tree_decomposition,
    twremat_schedule,
)
from tests.helpers import SHIPPED, dags, make_graph, naive_simulate

HEURISTICS = ["min_degree", "min_fill_in"]


@st.composite
def dags_with_outputs(draw, max_nodes: int = 12) -> Graph:
    """Random DAGs, half of them with an explicit output set, so some nodes feed no output."""
    g = draw(dags(min_nodes=1, max_nodes=max_nodes, training=draw(st.booleans()),
                  workspace=draw(st.booleans())))
    if draw(st.booleans()):
        outputs = draw(st.lists(st.sampled_from(g.ids), min_size=1, unique=True))
        g = Graph(g.nodes, name=g.name, outputs=outputs)
    return g


def computes(graph: Graph, schedule) -> list[str]:
    return [graph.ids[v] for kind, v in zip(schedule.kinds.tolist(), schedule.nodes.tolist())
            if kind == COMPUTE]


# ---------------------------------------------------------------------- Kumar et al. Figure 1


def test_figure1_at_budget_3_is_the_papers_schedule():
    g = load_graph(SHIPPED / "kumar-figure1.json")
    assert baseline(g).peak == 4  # <A, B, C, D, E> needs four units (Figure 1's caption)
    r = run(g, "twremat", "3")
    assert r.status.value == "feasible", r.message
    assert r.simulation.valid
    assert (r.peak, r.duration) == (3, 6)
    assert computes(g, r.schedule) == ["A", "B", "C", "D", "A", "E"]  # A rematerialized
    # Algorithm 1 itself holds the separator {B, D, E} to the end of the call: 4 units.
    assert r.stats["algorithm1_peak"] == 4
    assert r.stats["width"] == 2


def test_figure1_algorithm1_frees_where_the_paper_frees():
    g = load_graph(SHIPPED / "kumar-figure1.json")
    schedule = twremat_schedule(g, separator_tree(tree_decomposition(g), g.n), 1)
    steps = [(kind, g.ids[v]) for kind, v in zip(schedule.kinds.tolist(), schedule.nodes.tolist())]
    compute, free = 0, 1
    assert steps == [
        (compute, "A"), (compute, "B"), (free, "A"),  # B's input A lies in a component
        (compute, "C"), (compute, "D"), (free, "C"),  # D's input C likewise; B stays (separator)
        (compute, "A"), (compute, "E"), (free, "A"),
        (free, "B"), (free, "D"),  # X* \ S at the end of the call; E is the output
    ]


# ---------------------------------------------------------------------- Lemma 1 and Lemma 3


@settings(max_examples=150, deadline=None)
@given(dags_with_outputs(max_nodes=14), st.sampled_from(HEURISTICS))
def test_merged_decomposition_is_a_tree_decomposition_of_at_most_n_bags(g, heuristic):
    d = tree_decomposition(g, heuristic)
    bags, n = d.bags, g.n
    tree = nx.Graph()
    tree.add_nodes_from(range(len(bags)))
    tree.add_edges_from(d.edges)
    assert nx.is_tree(tree)
    assert len(bags) <= n
    assert set().union(*bags) == set(range(n))
    for v, ins in enumerate(dependencies(g)):
        for u in ins:
            assert any(u in b and v in b for b in bags)
    for v in range(n):
        holding = [i for i, b in enumerate(bags) if v in b]
        assert nx.is_connected(tree.subgraph(holding))
    for a, b in d.edges:  # Lemma 1 leaves no adjacent pair where one bag contains the other
        assert not bags[a] <= bags[b] and not bags[b] <= bags[a]


@settings(max_examples=150, deadline=None)
@given(dags_with_outputs(max_nodes=14), st.sampled_from(HEURISTICS))
def test_separators_are_balanced_and_split_the_graph(g, heuristic):
    d = tree_decomposition(g, heuristic)
    t = separator_tree(d, g.n)
    for r, kids in enumerate(t.children):
        assert all(2 * t.size[c] <= t.size[r] for c in kids)  # Lemma 3
    assert t.levels <= math.floor(math.log2(len(d.bags))) + 1
    # Every node has one home; an edge never joins two different components of a region.
    def ancestors(r):
        out = set()
        while r >= 0:
            out.add(r)
            r = t.parent[r]
        return out

    assert sorted(v for sep in t.separator for v in sep) == list(range(g.n))
    for v, ins in enumerate(dependencies(g)):
        for u in ins:
            assert t.home[u] in ancestors(t.home[v]) or t.home[v] in ancestors(t.home[u])


# ---------------------------------------------------------------------- Algorithm 1


@settings(max_examples=200, deadline=None)
@given(dags_with_outputs(), st.sampled_from(HEURISTICS))
def test_every_twremat_k_schedule_is_valid(g, heuristic):
    t = separator_tree(tree_decomposition(g, heuristic), g.n)
    for k in [*t.cutoffs(), g.n + 1]:
        schedule = twremat_schedule(g, t, k)
        sim = simulate(g, schedule)
        assert sim.valid, f"k={k}: {sim.violation}"
        valid, peak, duration = naive_simulate(g, schedule)
        assert valid and (peak, duration) == (sim.peak, sim.duration)
        c = schedule.kinds == COMPUTE
        cleaned = simulate(g, place_frees(g, schedule.nodes[c], schedule.impls[c]))
        assert cleaned.valid and cleaned.peak <= sim.peak


@settings(max_examples=150, deadline=None)
@given(dags_with_outputs(), st.sampled_from(HEURISTICS))
def test_durations_never_fall_as_k_falls(g, heuristic):
    """What the budget search relies on: a deeper recursion recomputes, never saves."""
    t = separator_tree(tree_decomposition(g, heuristic), g.n)
    durations = [simulate(g, twremat_schedule(g, t, k)).duration for k in t.cutoffs()]
    assert durations == sorted(durations, reverse=True)


@settings(max_examples=150, deadline=None)
@given(dags(min_nodes=1, max_nodes=12), st.sampled_from(HEURISTICS))
def test_twremat_n_is_the_baseline(g, heuristic):
    t = separator_tree(tree_decomposition(g, heuristic), g.n)
    schedule = twremat_schedule(g, t, g.n)
    sim, base = simulate(g, schedule), baseline(g)
    assert (sim.peak, sim.duration) == (base.peak, base.duration)
    if t.size[0] < g.n:  # fewer than n bags: no recursion at all, the baseline step for step
        b = baseline_schedule(g)
        assert np.array_equal(schedule.kinds, b.kinds) and np.array_equal(schedule.nodes, b.nodes)
    r = run(g, "twremat", "min", params={"k": g.n, "heuristic": heuristic})
    assert (r.peak, r.duration) == (base.peak, base.duration)


@pytest.mark.parametrize("layers", [16, 32, 64, 128])
def test_peak_on_a_training_chain_grows_with_log_n(layers):
    """Theorem 5 on Chen's chain: one unit per level of recursion, where the baseline keeps n."""
    g = chain(layers)
    t = separator_tree(tree_decomposition(g), g.n)
    own = simulate(g, twremat_schedule(g, t, 1))
    r = run(g, "twremat", "min")
    assert baseline(g).peak == layers + 2
    assert r.peak == int(math.log2(layers)) + 2
    assert own.peak == 3 * int(math.log2(layers))  # Algorithm 1's frees: three per level
    assert r.stats["width"] == 2


def test_nodes_no_output_needs_are_still_computed_once():
    g = make_graph({"a": [], "b": ["a"], "c": ["b"], "d": ["a"], "e": ["d"]}, outputs=["c"])
    r = run(g, "twremat", "min", params={"k": 1})
    assert r.status.value == "feasible" and r.simulation.valid
    assert sorted(set(computes(g, r.schedule))) == ["a", "b", "c", "d", "e"]


def test_nodes_are_computed_with_their_first_implementation():
    nodes = [
        Node("a", (), memory=4, duration=1),
        Node("b", (), memory=1, duration=1),
        # The first implementation reads only b: a is needed by nothing TWRemat computes.
        Node("c", ("a", "b"), memory=1, duration=3,
             implementations=(Implementation("b-only", 3, 0, inputs=("b",)), Implementation("both", 1))),
    ]
    g = Graph(nodes, name="implementations")
    r = run(g, "twremat", "min", params={"k": 1})
    assert r.status.value == "feasible" and r.simulation.valid
    assert computes(g, r.schedule) == ["a", "b", "c"]
    assert r.peak == 4  # a alone, freed at once; then b and c


def test_deep_graphs_do_not_use_the_python_stack():
    g = chain(1024)  # 2049 nodes, 11 levels of recursion
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(200)
    try:
        answer = TWRemat().solve(g, None, None, **TWRemat.parse_params({"k": 1}))
    finally:
        sys.setrecursionlimit(limit)
    sim = simulate(g, answer.schedule)
    assert answer.stats["levels"] == 11
    assert sim.valid and (sim.peak, answer.stats["algorithm1_peak"]) == (12, 30)


# ---------------------------------------------------------------------- budgets


def test_budget_search_keeps_the_shortest_schedule_that_fits():
    g = chain(32)
    budget = 12
    r = run(g, "twremat", str(budget))
    assert r.status.value == "feasible" and r.peak <= budget
    fitting = [duration for _, _, peak, duration in r.stats["tried"] if peak <= budget]
    assert r.duration == min(fitting)
    assert r.stats["k"] > 1  # a shallower recursion than Algorithm 1 is enough here


@pytest.mark.parametrize("g", [chain(50), load_graph(SHIPPED / "resnet18-b8-r64-train.json")],
                         ids=lambda g: g.name)
def test_budget_search_equals_trying_every_k(g):
    t = separator_tree(tree_decomposition(g), g.n)
    every_k = [run(g, "twremat", "min", params={"k": k}) for k in t.cutoffs()]
    for budget in sorted({r.peak for r in every_k}):
        want = min(r.duration for r in every_k if r.peak <= budget)
        got = run(g, "twremat", str(budget))
        assert got.status.value == "feasible" and got.peak <= budget
        assert got.duration == want


def test_a_budget_below_twremats_reach_is_no_solution():
    g = chain(32)  # the floor is 4 (a gradient reads three values); TWRemat reaches 7
    r = run(g, "twremat", "5")
    assert r.status.value == "no_solution"
    assert "lowest peak" in r.message and "7" in r.message
    assert r.peak == 7


def test_builds_past_the_step_cap_are_abandoned_and_the_shallow_ones_kept(monkeypatch):
    g = chain(32)
    t = separator_tree(tree_decomposition(g), g.n)
    assert len(twremat_schedule(g, t, 1)) == 343
    assert len(twremat_schedule(g, t, 1, max_steps=343)) == 343
    assert twremat_schedule(g, t, 1, max_steps=342) is None
    monkeypatch.setattr(twremat, "MAX_STEPS", 200)
    r = run(g, "twremat", "min")
    assert r.status.value == "feasible" and r.simulation.valid
    assert [k for _, k in r.stats["abandoned"]] == [1, 4, 8, 16]
    assert (r.stats["k"], r.peak) == (32, 18)  # the best of k = 64 (the baseline, 34) and k = 32


def test_out_of_time_the_shallowest_recursion_is_still_returned():
    g = chain(32)
    r = run(g, "twremat", "min", time_limit=0)
    assert r.status.value == "feasible" and r.simulation.valid
    assert (r.stats["schedules_tried"], r.stats["k"]) == (1, 64)
    assert (r.peak, r.duration) == (baseline(g).peak, baseline(g).duration)


def test_k_grid_spans_algorithm1_to_no_recursion():
    g = chain(256)
    t = separator_tree(tree_decomposition(g), g.n)
    ks = k_grid(t, 6)
    assert ks[0] == 1 and ks[-1] == len(tree_decomposition(g).bags) + 1
    assert len(ks) <= 6 + 2 and ks == sorted(set(ks))
    assert set(ks) <= set(t.cutoffs())


@pytest.mark.parametrize("path", sorted(glob.glob(str(SHIPPED / "*.json"))), ids=lambda p: p.rsplit("/", 1)[-1])
def test_shipped_graphs_get_valid_schedules_within_budget(path):
    g = load_graph(path)
    for budget in ("0.9", "min"):
        r = run(g, "twremat", budget, time_limit=60, params={"heuristic": "both"})
        assert r.status.value in ("feasible", "no_solution", "infeasible"), r.message
        if r.status.found_schedule:
            assert r.simulation.valid
            assert r.budget is None or r.peak <= r.budget
        if budget == "min":
            assert r.status.value == "feasible" and r.peak <= r.baseline_peak


def test_large_graphs_decompose_in_a_child_process_with_the_same_answer(monkeypatch):
    """networkx's minimum fill-in cannot be interrupted: past CHILD_PROCESS_NODES it runs in a child."""
    import remat_bench.methods.twremat as twremat
    from remat_bench.app.pipeline import run

    g = chain(60)
    fill_in = {"heuristic": "min_fill_in"}
    here = run(g, "twremat", "min", time_limit=60, params=fill_in)
    monkeypatch.setattr(twremat, "CHILD_PROCESS_NODES", 100)  # chain(60) has 121 nodes
    there = run(g, "twremat", "min", time_limit=60, params=fill_in)
    assert there.status.value == here.status.value == "feasible"
    assert (there.peak, there.duration) == (here.peak, here.duration)
    assert there.stats["bags"] == here.stats["bags"]


@settings(max_examples=200, deadline=None)
@given(dags(min_nodes=1, max_nodes=16))
def test_min_degree_elimination_is_a_tree_decomposition(g):
    """Every edge in some bag, each node's bags connected, the bags joined by a tree."""
    import networkx as nx

    from remat_bench.methods.twremat import min_degree_decomposition

    edges = [(u, v) for v, ins in enumerate(dependencies(g)) for u in ins]
    bags, tree_edges = min_degree_decomposition(g.n, edges)
    assert len(bags) == g.n and len(tree_edges) == g.n - 1
    tree = nx.Graph()
    tree.add_nodes_from(range(len(bags)))
    tree.add_edges_from(tree_edges)
    assert nx.is_tree(tree)
    assert all(any({u, v} <= b for b in bags) for u, v in edges)
    for v in range(g.n):
        holding = [i for i, b in enumerate(bags) if v in b]
        assert holding and nx.is_connected(tree.subgraph(holding))


def test_min_degree_elimination_of_a_long_chain_has_width_two():
    from remat_bench.methods.twremat import tree_decomposition

    d = tree_decomposition(chain(2000))
    assert d.width == 2 and d.raw_bags == 4001
