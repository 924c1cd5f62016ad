"""Operator implementations: what the generators emit, the fastest-fit post-pass, and `impl=` end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from remat_bench.app.cli import main
from remat_bench.core.baseline import baseline, baseline_schedule
from remat_bench.core.cleanup import place_frees
from remat_bench.core.errors import GraphError
from remat_bench.core.graph import Graph, Implementation, Node
from remat_bench.core.graph_io import save_graph
from remat_bench.core.simulate import simulate
from remat_bench.generators import (
    ForwardOp,
    add_implementations,
    first_implementations,
    generate,
    training_graph,
)
from remat_bench.toolkit.fastest_fit import fastest_fit


def impls_of(g: Graph, id: str) -> list[tuple]:
    node = g.nodes[g.index[id]]
    return [(i.name, i.duration, i.workspace, i.inputs) for i in node.implementations]


def test_vgg16_convolutions_get_three_algorithms_with_the_cited_ratios():
    g = generate("vgg16", batch=1, resolution=32, implementations=True)
    assert g.name.endswith("-impl") and g.metadata["nodes_with_implementations"] == 28
    # 3x3 at stride 1, output 64x32x32 float32 (262,144 bytes), 3,538,944 FLOPs:
    # default: the FLOPs, 8 MiB per 25,690,112 output bytes of workspace; implicit GEMM 1.59x slower
    # with none; FFT/Winograd 1.19/0.59 faster with 192 MiB per 25,690,112 output bytes.
    assert impls_of(g, "block1.conv1") == [
        ("default", 3538944, 85598, None),
        ("implicit-gemm", 5626921, 0, None),
        ("fft", 1754602, 2054353, None),
    ]
    node = g.nodes[g.index["block1.conv1"]]
    assert (node.duration, node.workspace) == (3538944, 85598)
    # Methods that ignore implementations see the graph they saw before, durations included.
    plain = generate("vgg16", batch=1, resolution=32)
    assert np.array_equal(first_implementations(g).duration, plain.duration)
    assert baseline(first_implementations(g)).duration == baseline(plain).duration


def test_strided_and_small_kernels_get_no_fft():
    g = generate("resnet50", batch=1, resolution=32, implementations=True)
    names = {tuple(i.name for i in n.implementations) for n in g.nodes if n.op == "conv2d"}
    assert names == {("default", "implicit-gemm"), ("default", "implicit-gemm", "fft")}
    for n in g.nodes:
        if n.op == "conv2d" and len(n.implementations) == 3:
            assert n.metadata["kernel"] >= 3 and n.metadata["stride"] == 1


def test_output_activated_gradients_drop_the_input_and_pay_for_batchnorm_inversion():
    fwd = [ForwardOp("c", "conv2d", [], 4, 10, metadata={"kernel": 1, "stride": 1}),
           ForwardOp("n", "batchnorm", ["c"], 4, 3),
           ForwardOp("r", "relu", ["n"], 4, 2),
           ForwardOp("o", "linear", ["r"], 1, 5)]
    g = add_implementations(training_graph(fwd, name="toy"))
    # c's only consumer is a BatchNorm: its gradient may read n instead of c, inverting n (3 more).
    c_grad = g.nodes[g.index["c_grad"]]
    assert c_grad.inputs == ("c", "n", "n_grad")
    assert impls_of(g, "c_grad") == [
        ("default", 20, 1, None),
        ("implicit-gemm", 32, 0, None),
        ("output-activated", 23, 1, ("n", "n_grad")),
        ("implicit-gemm+output-activated", 35, 0, ("n", "n_grad")),
    ]
    # n's only consumer is a ReLU: recovering its mask from r costs nothing.
    assert impls_of(g, "n_grad") == [("default", 6, 0, None), ("output-activated", 6, 0, ("r", "r_grad"))]
    # r feeds a linear layer: no choice; nor for the forward BatchNorm and ReLU.
    for id in ("r_grad", "n", "r", "o", "loss"):
        assert impls_of(g, id) == []


def test_graphs_with_nothing_to_choose_are_refused_with_one_sentence():
    with pytest.raises(GraphError, match="--implementations adds nothing to this graph"):
        generate("chain", implementations=True)


def choice_graph() -> Graph:
    """x (3) -> y (3) -> z (1). y: default 10 with no workspace, fast 2 with workspace 4, and
    'lean' 5 reading nothing."""
    return Graph([
        Node("x", (), 3, 1),
        Node("y", ("x",), 3, 10, implementations=(
            Implementation("default", 10, 0), Implementation("fast", 2, 4), Implementation("lean", 5, 0, ()))),
        Node("z", ("y",), 1, 1),
    ], name="choice")


@pytest.mark.parametrize("budget, chosen, duration", [(10, "fast", 4), (9, "lean", 7), (None, "lean", 7)])
def test_fastest_fit_picks_the_fastest_implementation_within_the_budget(budget, chosen, duration):
    g = choice_graph()
    s = fastest_fit(g, baseline_schedule(g), budget)
    y = int(np.flatnonzero(s.nodes == g.index["y"])[0])
    assert g.nodes[g.index["y"]].implementations[s.impls[y]].name == chosen
    sim = simulate(g, s)
    assert sim.valid and sim.duration == duration
    assert sim.peak <= (budget if budget is not None else baseline(g).peak)


def test_fastest_fit_needs_the_implementation_inputs_resident():
    # 'lean' first frees x before y: then only implementations reading nothing can run.
    g = choice_graph()
    nodes = np.array([0, 1, 2])
    s = place_frees(g, nodes, np.array([0, 2, 0]))
    assert simulate(g, s).valid
    # x is freed right after it is computed (lean reads nothing), so default and fast cannot be chosen.
    out = fastest_fit(g, s, 100)
    assert out.impls[list(out.nodes).index(1)] == 2


def test_solve_with_fastest_fit_is_faster_and_resimulates(tmp_path):
    g = generate("vgg16", batch=8, resolution=64, implementations=True)
    path = tmp_path / "g.json"
    save_graph(g, path)
    runner = CliRunner()
    answers = {}
    for impl in ("first", "fastest-fit"):
        out = tmp_path / f"{impl}.json"
        r = runner.invoke(main, ["solve", str(path), "-m", "chen", "-b", "0.9", "--param", f"impl={impl}",
                                 "--json", "-o", str(out)])
        assert r.exit_code == 0, r.output
        answers[impl] = json.loads(r.output)
        s = runner.invoke(main, ["simulate", str(path), str(out), "--json"])
        sim = json.loads(s.output)
        assert (sim["peak"], sim["duration"]) == (answers[impl]["peak"], answers[impl]["duration"])
        assert sim["peak"] <= answers[impl]["budget"]
    assert answers["fastest-fit"]["duration"] < answers["first"]["duration"]
    # The clean-up record describes the method's schedule before any clean-up, in both cases: the
    # same chen schedule, so the same "before", and fastest-fit's "after" is its faster result.
    first, fit = answers["first"]["cleanup"], answers["fastest-fit"]["cleanup"]
    assert fit["duration_before"] == first["duration_before"] == answers["first"]["objective"]
    assert (fit["peak_before"], fit["computes_before"]) == (first["peak_before"], first["computes_before"])
    assert fit["duration_after"] == answers["fastest-fit"]["duration"] < first["duration_after"]


def test_a_node_whose_own_duration_contradicts_its_first_implementation_is_refused(tmp_path):
    from remat_bench.core.errors import GraphError
    from remat_bench.core.graph_io import graph_from_dict

    doc = {"format": "remat-bench-graph", "version": 1, "nodes": [
        {"id": "a", "inputs": [], "memory": 1, "duration": 1,
         "implementations": [{"name": "fast", "duration": 5}, {"name": "slow", "duration": 9}]}]}
    with pytest.raises(GraphError, match="node 'a' has duration 1, but its first implementation 'fast' has 5"):
        graph_from_dict(doc)
    doc["nodes"][0]["duration"] = 5  # agreeing; the node's workspace, left out, is the implementation's
    doc["nodes"][0]["implementations"][0]["workspace"] = 3
    assert graph_from_dict(doc).workspace[0] == 3
    doc["nodes"][0]["workspace"] = 2
    with pytest.raises(GraphError, match="node 'a' has workspace 2, but its first implementation 'fast' has 3"):
        graph_from_dict(doc)
