"""The shared simulator, baseline and clean-up (docs/design.md section 3)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remat_bench.core.baseline import baseline, baseline_schedule
from remat_bench.core.cleanup import clean_up, place_frees
from remat_bench.core.graph_io import load_graph
from remat_bench.core.schedule import COMPUTE, FREE, Schedule
from remat_bench.core.simulate import simulate
from tests.helpers import dags, make_graph, naive_simulate, paper_graph

# docs/design.md section 3: baseline peaks of the published graphs, to the unit.
PAPER_BASELINES = {
    "random_layered_n100": (100, 236, 46319, 41687, 37055),
    "random_layered_n250": (250, 944, 146840, 132156, 117472),
    "random_layered_n500": (500, 2461, 284439, 255995, 227551),
    "random_layered_n1000": (1000, 5875, 608619, 547757, 486895),
    "checkmate_fcn8_vgg_train": (73, 149, 13484795520, 12136315968, 10787836416),
    "checkmate_resnet50_train": (353, 751, 38059356160, 34253420544, 30447484928),
    "checkmate_vgg16_train": (45, 87, 15825108992, 14242598092, 12660087193),
}


@pytest.mark.parametrize("name", sorted(PAPER_BASELINES))
def test_paper_baseline_peaks_match_design_table(name):
    from remat_bench.core.budget import parse_budget

    nodes, edges, peak, b90, b80 = PAPER_BASELINES[name]
    g = load_graph(paper_graph(name))
    assert (g.n, g.num_edges) == (nodes, edges)
    assert baseline(g).peak == peak
    assert parse_budget("0.9", g).amount == b90
    assert parse_budget("0.8", g).amount == b80
    assert simulate(g, baseline_schedule(g)).valid


def kumar_figure_1():
    # Kumar et al. 2019, Figure 1: A->B, B->C, B->D, C->D, A->E, D->E, unit sizes.
    return make_graph({"A": [], "B": ["A"], "C": ["B"], "D": ["B", "C"], "E": ["A", "D"]})


def steps(g, *words):
    out = []
    for w in words:
        kind, _, node = w.partition(" ")
        out.append(("compute" if kind == "c" else "free", g.index[node]))
    return Schedule.from_steps(out)


def test_kumar_figure_1_peaks():
    g = kumar_figure_1()
    plain = steps(g, "c A", "c B", "c C", "c D", "f B", "f C", "c E", "f A", "f D")
    remat = steps(g, "c A", "c B", "f A", "c C", "c D", "f B", "f C", "c A", "c E", "f A", "f D")
    s1, s2 = simulate(g, plain), simulate(g, remat)
    assert (s1.valid, s1.peak, s1.duration) == (True, 4, 5)
    assert (s2.valid, s2.peak, s2.duration) == (True, 3, 6)
    assert s2.recomputations == 1
    assert baseline(g).peak == 4


def test_step_memory_includes_workspace_and_fixed_memory():
    g = make_graph({"a": [], "b": ["a"]}, memory={"a": 5, "b": 7}, fixed_memory=100)
    g2 = make_graph({"a": [], "b": ["a"]}, memory={"a": 5, "b": 7}, fixed_memory=100)
    s = steps(g, "c a", "c b", "f a")
    sim = simulate(g, s)
    assert sim.step_memory.tolist() == [105, 112, 107]
    assert sim.peak == 112
    assert g.sha256 == g2.sha256


@pytest.mark.parametrize(
    "words, step, node, fragment",
    [
        (["c B"], 0, "B", "input 'A' is not resident"),
        (["c A", "c A"], 1, "A", "already resident"),
        (["c A", "f A", "f A"], 2, "A", "'A' is not resident"),
        (["f C"], 0, "C", "'C' is not resident"),
        (["c A", "c B", "c C", "c D", "c E", "f E"], 6, "E", "output 'E' is not resident"),
        (["c A", "c B", "c C"], 3, "D", "never computed"),
        (["c A", "c B", "c C", "f B", "c D"], 4, "D", "input 'B' is not resident"),
    ],
)
def test_first_violation_names_step_and_node(words, step, node, fragment):
    g = kumar_figure_1()
    sim = simulate(g, steps(g, *words))
    assert not sim.valid
    assert (sim.violation.step, sim.violation.node) == (step, node)
    assert fragment in sim.violation.message
    if step < len(words):
        assert f"step {step}" in sim.violation.message


def test_earliest_of_several_violations_wins():
    g = kumar_figure_1()
    sim = simulate(g, steps(g, "c A", "f B", "c A"))
    assert sim.violation.step == 1


def random_schedule(g, data):
    """A random (often invalid) schedule: steps drawn freely over the graph's nodes."""
    k = data.draw(st.integers(0, 3 * g.n))
    words = data.draw(st.lists(st.tuples(st.sampled_from(["compute", "free"]),
                                         st.integers(0, g.n - 1)), min_size=k, max_size=k))
    return Schedule.from_steps(words)


def valid_random_schedule(g, data):
    """A valid schedule with random recomputations: computes in a random feasible order, then frees."""
    seq = []
    computed = set()
    for _ in range(data.draw(st.integers(g.n, 3 * g.n))):
        ready = [v for v in range(g.n) if all(u in computed for u in g.inputs[v])]
        v = data.draw(st.sampled_from(ready))
        seq.append(v)
        computed.add(v)
    seq += [v for v in range(g.n) if v not in computed or g.is_output[v]]
    # Fill gaps in topological order so every node is computed and every input available.
    nodes = np.array(list(range(g.n)) + seq, dtype=np.int64)
    return place_frees(g, nodes, np.zeros(len(nodes), dtype=np.int64))


@settings(max_examples=300, deadline=None)
@given(dags(), st.data())
def test_simulator_agrees_with_naive_reference(g, data):
    for schedule in (random_schedule(g, data), valid_random_schedule(g, data)):
        sim = simulate(g, schedule)
        valid, peak, duration = naive_simulate(g, schedule)
        assert sim.valid == valid
        if valid:
            assert (sim.peak, sim.duration) == (peak, duration)


@settings(max_examples=300, deadline=None)
@given(dags(workspace=True))
def test_baseline_is_valid_and_computes_each_node_once(g):
    sim = simulate(g, baseline_schedule(g))
    assert sim.valid
    assert sim.computes == g.n
    assert sim.duration == g.total_duration
    assert sim.peak == naive_simulate(g, baseline_schedule(g))[1]


@settings(max_examples=300, deadline=None)
@given(dags(workspace=True), st.data())
def test_clean_up_never_raises_peak_or_duration(g, data):
    schedule = valid_random_schedule(g, data)
    # Add a wasteful recomputation just before the end to give clean-up work.
    before = simulate(g, schedule)
    cleaned, report = clean_up(g, schedule)
    after = simulate(g, cleaned)
    assert after.valid
    assert after.peak <= before.peak
    assert after.duration <= before.duration
    assert report.dropped == before.computes - after.computes
    # Idempotent: cleaning a clean schedule changes nothing.
    again, _ = clean_up(g, cleaned)
    assert again.nodes.tolist() == cleaned.nodes.tolist()
    assert again.kinds.tolist() == cleaned.kinds.tolist()


def test_clean_up_drops_first_computation_made_redundant_by_a_later_one():
    # A staged schedule computes b at its position, never uses it, then recomputes it for c.
    g = make_graph({"a": [], "b": ["a"], "x": [], "c": ["b", "x"]},
                   memory={"a": 1, "b": 10, "x": 10, "c": 1}, duration={"a": 1, "b": 5, "x": 1, "c": 1})
    s = steps(g, "c a", "c b", "f b", "c x", "c b", "f a", "c c", "f b", "f x")
    before = simulate(g, s)
    cleaned, report = clean_up(g, s)
    after = simulate(g, cleaned)
    assert (before.duration, after.duration) == (13, 8)
    assert report.dropped == 1
    assert after.peak == before.peak == 21


def test_clean_up_keeps_one_computation_of_an_unused_node():
    g = make_graph({"a": [], "b": []}, outputs=["b"])
    s = steps(g, "c a", "f a", "c a", "f a", "c b")
    cleaned, report = clean_up(g, s)
    assert simulate(g, cleaned).computes == 2
    assert report.dropped == 1


def test_clean_up_refuses_invalid_schedule():
    g = kumar_figure_1()
    with pytest.raises(ValueError, match="invalid"):
        clean_up(g, steps(g, "c B"))


def test_simulates_a_million_steps():
    # Correctness at scale (speed is measured by `make bench`, not here).
    from remat_bench.generators import chain

    g = chain(1000)
    base = baseline_schedule(g)
    reps = 1_000_000 // len(base) + 1
    nodes = np.concatenate([np.arange(g.n)] * reps)
    big = place_frees(g, nodes, np.zeros(len(nodes), dtype=np.int64))
    sim = simulate(g, big)
    assert sim.valid
    assert sim.computes == g.n


def loop_place_frees(graph, nodes, impls, drop_unused=True):
    """The step-by-step `place_frees` that the vectorised one replaced (kept as its reference)."""
    nodes_l = nodes.tolist()
    ops_l = (graph.op_start[nodes] + impls).tolist()
    m = len(nodes_l)
    needed = graph.is_output.tolist()
    kept_later = [False] * graph.n
    remaining = np.bincount(nodes, minlength=graph.n).tolist()
    keep = [False] * m
    for i in range(m - 1, -1, -1):
        v = nodes_l[i]
        remaining[v] -= 1
        if needed[v] or not drop_unused or (not kept_later[v] and remaining[v] == 0):
            keep[i] = True
            needed[v] = False
            kept_later[v] = True
            for u in graph.op_inputs[ops_l[i]]:
                needed[u] = True
    kept = [(nodes_l[i], ops_l[i]) for i in range(m) if keep[i]]
    current = [-1] * graph.n
    free_at = list(range(len(kept)))
    for j, (v, op) in enumerate(kept):
        for u in graph.op_inputs[op]:
            free_at[current[u]] = j
        current[v] = j
    final = {current[v] for v in graph.output_indices if current[v] >= 0}
    frees_after = [[] for _ in kept]
    for j, (v, _) in enumerate(kept):
        if j not in final:
            frees_after[free_at[j]].append(v)
    steps = []
    for j, (v, op) in enumerate(kept):
        steps.append(("compute", v, op - int(graph.op_start[v])))
        steps.extend(("free", u, 0) for u in frees_after[j])
    return steps


@settings(max_examples=300, deadline=None)
@given(dags(), st.data(), st.booleans())
def test_place_frees_equals_the_step_by_step_reference(g, data, drop_unused):
    """Step for step, on sequences with recomputations and unused computations."""
    extra = data.draw(st.lists(st.integers(0, g.n - 1), max_size=2 * g.n))
    nodes = np.array(list(range(g.n)) + extra, dtype=np.int64)  # file order first: every input available
    impls = np.zeros(len(nodes), dtype=np.int64)
    got = place_frees(g, nodes, impls, drop_unused=drop_unused)
    want = loop_place_frees(g, nodes, impls, drop_unused)
    kinds = {COMPUTE: "compute", FREE: "free"}
    assert [(kinds[int(k)], int(v), int(i)) for k, v, i in zip(got.kinds, got.nodes, got.impls)] == want
