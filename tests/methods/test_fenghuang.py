"""Feng-Huang division-tree checkpoint search against brute forces over checkpoint sets."""

from __future__ import annotations

import itertools
import random

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remat_bench.app.pipeline import run
from remat_bench.core.baseline import baseline
from remat_bench.core.budget import memory_floor
from remat_bench.core.graph import Graph, Node
from remat_bench.core.graph_io import load_graph
from remat_bench.core.simulate import simulate
from remat_bench.generators import ForwardOp, chain, resnet50, training_graph, transformer
from remat_bench.methods.fenghuang import (
    VIRTUAL,
    ACGSolver,
    FengHuang,
    SegmentKind,
    build_division_tree,
    canonical_tree,
    forward_dag,
    lcg_optimum,
    pair_table,
    plan_of,
)
from remat_bench.toolkit.lowering import lower_plan
from tests.helpers import dags, paper_graph

# ---------------------------------------------------------------------- brute forces


def lcg_brute_force(vertex_cost: list[int], edge_cost: list[int]) -> int:
    """Eq. 1 over every subset of the inner vertices of a linear graph (both ends always kept)."""
    n = len(vertex_cost) - 1
    best = None
    for r in range(n):
        for inner in itertools.combinations(range(1, n), r):
            kept = [0, *inner, n]
            gaps = [sum(edge_cost[a:b]) + sum(vertex_cost[a + 1:b]) for a, b in itertools.pairwise(kept)]
            value = sum(vertex_cost[k] for k in kept) + max(gaps)
            best = value if best is None else min(best, value)
    return best


def segments_brute_force(dag) -> int:
    """Eq. 2 over every checkpoint set whose segments are all independent.

    Removing the checkpoints K (source and sink always in K) leaves connected
    parts; K is valid when each part is entered from exactly one checkpoint
    and left to exactly one other (a segment of Definition 1). The value is
    the memory of K plus the largest part.
    """
    m, mem, adj = dag.m, dag.memory.tolist(), dag.adjacency
    undirected = nx.Graph(adj | adj.T)
    best = None
    inner = range(1, m - 1)
    for r in range(m - 1):
        for chosen in itertools.combinations(inner, r):
            kept = {0, m - 1, *chosen}
            largest = 0
            for part in nx.connected_components(undirected.subgraph(set(range(m)) - kept)):
                enter = {u for q in part for u in np.nonzero(adj[:, q])[0].tolist() if u in kept}
                leave = {w for q in part for w in np.nonzero(adj[q])[0].tolist() if w in kept}
                if len(enter) != 1 or len(leave) != 1 or enter == leave:
                    break
                largest = max(largest, sum(mem[q] for q in part))
            else:
                value = sum(mem[k] for k in kept) + largest
                best = value if best is None else min(best, value)
    return best


def solutions(graph: Graph, **kw):
    dag = forward_dag(graph, **kw)
    tree = build_division_tree(dag)
    return dag, tree, list(ACGSolver(tree).search())


def model_optimum(graph: Graph, **kw) -> int:
    return min(s.model_memory for s in solutions(graph, **kw)[2])


def training(forward: dict[str, list[str]], memory: dict[str, int] | int = 1) -> Graph:
    """A Checkmate-shaped training graph of ``{id: inputs}`` forward ops."""
    ops = [ForwardOp(v, "op", ins, memory[v] if isinstance(memory, dict) else memory, 1)
           for v, ins in forward.items()]
    return training_graph(ops, name="test")


def names(dag, graph: Graph) -> list[str]:
    return [graph.ids[v] if v != VIRTUAL else ("<source>" if i == 0 else "<sink>")
            for i, v in enumerate(dag.node.tolist())]


# ---------------------------------------------------------------------- LCG solver (Algorithm 1)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=2, max_size=10), st.randoms(use_true_random=False))
def test_lcg_solver_equals_brute_force(vertex_cost, rnd):
    edge_cost = [rnd.randint(0, 9) for _ in range(len(vertex_cost) - 1)]
    path, value = lcg_optimum(vertex_cost, edge_cost)
    assert value == lcg_brute_force(vertex_cost, edge_cost)
    assert path[0] == 0 and path[-1] == len(vertex_cost) - 1


def test_lcg_identical_costs_is_about_two_sqrt_n():
    # Case (1) of section 4: N unit vertices between two free ends; k evenly spread checkpoints
    # leave segments of ceil((N - k) / (k + 1)), about the paper's k + N / k, at best 2 sqrt(N).
    n = 100
    path, value = lcg_optimum([0] + [1] * n + [0], [0] * (n + 1))
    assert value == min(k + -(-(n - k) // (k + 1)) for k in range(n + 1)) == 19
    assert value <= 2 * n ** 0.5
    inner = path[1:-1]
    assert value == len(inner) + max(b - a - 1 for a, b in itertools.pairwise(path))


@pytest.mark.parametrize("seed", range(12))
def test_chain_optimum_equals_brute_force_over_all_checkpoint_subsets(seed):
    g = chain(9 + seed % 4, seed=seed)
    dag = forward_dag(g)
    # The chain's own costs: the virtual source (memory 0) and the forward nodes in order.
    vertex_cost = dag.memory.tolist()
    assert model_optimum(g) == lcg_brute_force(vertex_cost, [0] * (len(vertex_cost) - 1))


def test_chain_without_virtual_source_keeps_the_first_layer():
    g = chain(8, seed=3)
    dag, _, found = solutions(g, virtual_source=False)
    assert dag.node[0] == g.index["layer1"]
    assert all(0 in s.checkpoints for s in found)
    vertex_cost = dag.memory.tolist()
    assert model_optimum(g, virtual_source=False) == lcg_brute_force(vertex_cost, [0] * (len(vertex_cost) - 1))


# ---------------------------------------------------------------------- division tree (Algorithms 2-4)


def test_pair_table_marks_independent_pairs():
    # Fig. 3: i -> k -> t and i -> t, t -> j: (i, t) is a segment, (k, j) is not (t reads i).
    g = training({"i": [], "k": ["i"], "t": ["k", "i"], "j": ["t"]})
    dag = forward_dag(g)
    table = pair_table(dag)
    at = {g.ids[v]: p for p, v in enumerate(dag.node.tolist()) if v != VIRTUAL}
    assert table.is_pair[at["i"], at["t"]]
    assert not table.is_pair[at["k"], at["j"]]
    assert table.between[at["i"], at["j"]] == 2 and table.clean[at["k"], at["j"]] == 0


def test_pair_table_in_blocks_equals_the_whole_products_and_stops_at_its_deadline(monkeypatch):
    from remat_bench.core.control import Deadline
    from remat_bench.methods import fenghuang

    dag = forward_dag(transformer(layers=3))
    whole = pair_table(dag)
    blocked = pair_table(dag, Deadline(None))
    monkeypatch.setattr(fenghuang, "PRODUCT_ROWS", 7)
    small = pair_table(dag, Deadline(60.0))
    for table in (blocked, small):
        assert np.array_equal(table.is_pair, whole.is_pair) and np.array_equal(table.between, whole.between)
        assert np.array_equal(table.clean, whole.clean)
    with pytest.raises(fenghuang.PairTableTimedOut):
        pair_table(dag, Deadline(0.0))


def test_a_time_limit_shorter_than_the_pair_table_is_no_solution_saying_so():
    # A 5,000-vertex forward graph: its m x m products took 9 s at -t 0.5 before they looked at the deadline.
    g = transformer(layers=150, width=64, seq=64, batch=8, heads=2, vocab=100)
    result = run(g, "fenghuang", "0.5", time_limit=0.2)
    assert result.status == "no_solution" and result.termination == "time_limit"
    assert "the time limit ran out while pairing the forward graph's" in result.message
    assert result.stats["vertices"] > 1800


def test_division_of_linear_branch_and_complicate_segments():
    # Fig. 4, third column: a complicate segment i..j whose members are s_ik, s_it, s_kt, s_kj, s_tj.
    forward = {"i": [], "a": ["i"], "k": ["a"], "b": ["i"], "c": ["k"], "t": ["b", "c"],
               "d": ["k"], "e": ["t"], "j": ["d", "e"]}
    g = training(forward, memory={v: 1 for v in forward})
    dag, tree, _ = solutions(g)
    name = names(dag, g)
    root = tree.root
    assert root.kind is SegmentKind.LINEAR
    complicate = [s for s in tree.segments if s.kind is SegmentKind.COMPLICATE]
    assert len(complicate) == 1
    members = {(name[tree.segments[c].source], name[tree.segments[c].target],
                tuple(name[v] for v in tree.segments[c].interior)) for c in complicate[0].children}
    assert members == {("i", "k", ("a",)), ("i", "t", ("b",)), ("k", "t", ("c",)),
                       ("k", "j", ("d",)), ("t", "j", ("e",))}
    # A residual block: a branch segment of two branches, the shortcut being a single edge.
    g = training({"x": [], "c1": ["x"], "c2": ["c1"], "add": ["c2", "x"], "y": ["add"]})
    dag, tree, _ = solutions(g)
    name = names(dag, g)
    branch = [s for s in tree.segments if s.kind is SegmentKind.BRANCH]
    assert [(name[s.source], name[s.target], len(s.children)) for s in branch] == [("x", "add", 2)]


def test_complicate_division_is_a_partition_where_pairs_along_a_chain_cross():
    # v1 -> v2 -> v3 -> v7 is a chain inside a complicate segment: the pairs (v1, v3) and
    # (v2, v7) are both independent, and cross; the division holds the chain v1..v7 instead.
    forward = {"v0": [], "v1": ["v0"], "v2": ["v1"], "v3": ["v2"], "v4": ["v0", "v1"],
               "v5": ["v1", "v4"], "v7": ["v3", "v4"], "out": ["v5", "v7"]}
    g = training(forward, memory={"v0": 1, "v1": 6, "v2": 5, "v3": 2, "v4": 9, "v5": 4, "v7": 1, "out": 1})
    dag, tree, found = solutions(g)
    name = names(dag, g)
    complicate = [s for s in tree.segments if s.kind is SegmentKind.COMPLICATE]
    members = {(name[tree.segments[c].source], name[tree.segments[c].target],
                tuple(name[v] for v in tree.segments[c].interior)) for c in complicate[0].children}
    assert ("v1", "v7", ("v2", "v3")) in members
    assert ("v1", "v3", ("v2",)) not in members
    assert min(s.model_memory for s in found) == segments_brute_force(dag)


def reordered(g: Graph, seed: int) -> Graph:
    """The same graph with the forward nodes in another topological order and inputs shuffled."""
    rng = random.Random(seed)
    forward = set(g.forward_indices)
    left = {v: sum(1 for u in g.inputs[v] if u in forward) for v in forward}
    ready = [v for v in forward if left[v] == 0]
    order = []
    while ready:
        v = ready.pop(rng.randrange(len(ready)))
        order.append(v)
        for w in g.consumers[v]:
            if w in forward:
                left[w] -= 1
                if left[w] == 0:
                    ready.append(w)
    order += g.backward_indices
    nodes = []
    for v in order:
        node = g.nodes[v]
        inputs = list(node.inputs)
        rng.shuffle(inputs)
        nodes.append(Node(node.id, tuple(inputs), node.memory, node.duration, kind=node.kind))
    return Graph(nodes, name=g.name, outputs=g.outputs)


@settings(max_examples=120, deadline=None)
@given(dags(min_nodes=3, max_nodes=12, training=True), st.integers(0, 2**16))
def test_division_tree_and_solutions_do_not_depend_on_the_node_order(g, seed):
    other = reordered(g, seed)
    first_dag, first_tree, first = solutions(g)
    other_dag, other_tree, second = solutions(other)
    first_names, other_names = names(first_dag, g), names(other_dag, other)
    assert canonical_tree(first_tree, first_names) == canonical_tree(other_tree, other_names)
    as_names = [[(s.model_memory, frozenset(n[v] for v in s.checkpoints)) for s in found]
                for found, n in ((first, first_names), (second, other_names))]
    assert as_names[0] == as_names[1]


@settings(max_examples=150, deadline=None)
@given(dags(min_nodes=2, max_nodes=10, training=True))
def test_search_reaches_the_optimum_over_every_independent_checkpoint_set(g):
    # Theorem 1 (completeness), checked by brute force on small graphs.
    dag, _, found = solutions(g)
    assert min(s.model_memory for s in found) == segments_brute_force(dag)


@settings(max_examples=150, deadline=None)
@given(dags(min_nodes=2, max_nodes=12, training=True))
def test_every_solution_partitions_the_forward_graph_and_lowers_to_a_valid_schedule(g):
    dag, tree, found = solutions(g)
    for seg in tree.segments:  # every division is a partition of its segment
        count = np.zeros(dag.m, dtype=int)
        ends = set()
        for c in seg.children:
            count[tree.segments[c].interior] += 1
            ends |= {tree.segments[c].source, tree.segments[c].target}
        assert all((count[v] == 1) != (v in ends) for v in seg.interior.tolist())
        assert seg.cost == dag.memory[seg.interior].sum()
    for s in found:
        count = np.zeros(dag.m, dtype=int)
        for interior in s.segments:
            count[interior] += 1
        count[list(s.checkpoints)] += 1
        assert (count == 1).all()
        assert s.model_memory == dag.memory[list(s.checkpoints)].sum() + max(
            (dag.memory[f].sum() for f in s.segments), default=0)
        plan = plan_of(g, dag, s)
        assert sorted(v for seg in plan.segments for v in seg) == g.forward_indices
        sim = simulate(g, lower_plan(g, plan))
        assert sim.valid, sim.violation


# ---------------------------------------------------------------------- the method


def test_budget_min_picks_the_lowest_simulated_peak_and_reports_the_model():
    g = resnet50(batch=2, resolution=64, depth=18)
    r = run(g, "fenghuang", "min")
    assert r.status.value == "feasible", r.message
    assert r.simulation.valid
    dag, _, found = solutions(g)
    peaks = [simulate(g, lower_plan(g, plan_of(g, dag, s))).peak for s in found]
    assert r.peak == min(peaks) < baseline(g).peak
    assert r.stats["model_optimum"] == min(s.model_memory for s in found)
    assert r.stats["model_memory"] >= r.stats["model_optimum"]
    assert r.stats["tree_branch"] == 8  # one per residual block


def test_budget_picks_the_least_overhead_that_fits():
    g = resnet50(batch=2, resolution=64, depth=18)
    dag, _, found = solutions(g)
    sims = [simulate(g, lower_plan(g, plan_of(g, dag, s))) for s in found]
    budget = (min(s.peak for s in sims) + baseline(g).peak) // 2
    r = run(g, "fenghuang", str(budget))
    assert r.status.value == "feasible", r.message
    assert r.peak <= budget
    fitting = [s.duration for s in sims if s.peak <= budget]
    assert r.objective == min(fitting) < max(fitting)


def test_select_model_returns_the_eq2_optimum():
    g = chain(30, seed=1)
    r = run(g, "fenghuang", "min", params={"select": "model"})
    assert r.status.value == "feasible"
    assert r.stats["model_memory"] == r.stats["model_optimum"] == model_optimum(g)
    assert r.stats["plans_simulated"] == 1


def test_budget_below_every_solution_is_no_solution_with_the_reason():
    g = chain(12)
    lowest = run(g, "fenghuang", "min").peak
    assert lowest - 1 >= memory_floor(g).amount  # above the floor, so the method runs
    r = run(g, "fenghuang", str(lowest - 1))
    assert r.status.value == "no_solution"
    assert f"is {lowest}, above the budget {lowest - 1}" in r.message


def test_graph_without_backward_nodes_is_unsupported():
    g = load_graph(paper_graph("random_layered_n100"))
    assert "no backward nodes" in FengHuang.skip(g, None)
    r = run(g, "fenghuang", "min", time_limit=10)
    assert r.status.value == "unsupported" and "no backward nodes" in r.message


@pytest.mark.parametrize("name", ["checkmate_fcn8_vgg_train", "checkmate_resnet50_train", "checkmate_vgg16_train"])
def test_published_training_graphs(name):
    g = load_graph(paper_graph(name))
    for budget in ("0.9", "min"):
        r = run(g, "fenghuang", budget, time_limit=60)
        assert r.status.value in ("feasible", "no_solution"), r.message
        assert r.simulation.valid
        if r.status.found_schedule:
            assert r.budget is None or r.peak <= r.budget


def test_the_division_tree_stops_at_the_deadline_and_the_method_says_where():
    # An unrolled recurrent network's forward graph is one complicate segment (every step reads the input):
    # its pairs are looked at in turns, the deadline between them.
    import time

    from remat_bench.core.control import Deadline
    from remat_bench.generators import generate
    from remat_bench.methods.fenghuang import DivisionTreeTimedOut, FengHuang, pair_table

    g = generate("recurrent", seq=4, layers=2, batch=2, width=8)
    dag = forward_dag(g, True)
    passed = Deadline(0.0)
    time.sleep(0.001)
    with pytest.raises(DivisionTreeTimedOut):
        build_division_tree(dag, pair_table(dag), passed)
    assert len(build_division_tree(dag, pair_table(dag), Deadline(None)).segments) == 41
    method = FengHuang()
    r = method.solve(g, 10**9, 0.0, **method.parse_params({}))
    assert r.status.value == "no_solution" and r.termination.value == "time_limit"
    assert r.message.startswith("the time limit ran out while")
