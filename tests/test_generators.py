"""Tests for remat_bench.generators: exact shapes, sizes, FLOPs and the Checkmate gradient rule."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remat_bench.core.baseline import baseline
from remat_bench.core.errors import GraphError
from remat_bench.core.graph import Implementation
from remat_bench.core.graph_io import load_graph, save_graph
from remat_bench.generators import (
    GENERATORS,
    ForwardOp,
    chain,
    densenet121,
    estimated_size,
    generate,
    generated_size,
    random_layered,
    resnet50,
    training_graph,
    transformer,
    unet,
    vgg16,
)
from tests.helpers import paper_graph


def node(graph, id):
    return graph.nodes[graph.index[id]]


def forward_ops(graph, op):
    return [n.id for n in graph.nodes if n.kind == "forward" and n.op == op]


# ---------------------------------------------------------------------- training_graph


def test_training_graph_of_a_diamond_follows_checkmates_rule():
    fwd = [
        ForwardOp("a", "conv2d", [], memory=10, duration=3),
        ForwardOp("b", "relu", ["a"], memory=20, duration=5),
        ForwardOp("c", "relu", ["a"], memory=30, duration=7),
        ForwardOp("d", "add", ["b", "c"], memory=40, duration=11, workspace=2),
    ]
    g = training_graph(fwd, name="diamond", loss_memory=4, loss_duration=9)
    assert g.ids == ["a", "b", "c", "d", "loss", "d_grad", "c_grad", "b_grad", "a_grad"]
    assert {n.id: n.inputs for n in g.nodes} == {
        "a": (),
        "b": ("a",),
        "c": ("a",),
        "d": ("b", "c"),
        "loss": ("d",),
        "d_grad": ("d", "loss"),
        "c_grad": ("c", "d", "d_grad"),
        "b_grad": ("b", "d", "d_grad"),
        "a_grad": ("a", "b", "c", "c_grad", "b_grad"),
    }
    assert [n.kind for n in g.nodes] == ["forward"] * 4 + ["backward"] * 5
    assert [n.grad_of for n in g.nodes[5:]] == ["d", "c", "b", "a"]
    assert [n.op for n in g.nodes[4:]] == ["loss", "add_backward", "relu_backward", "relu_backward",
                                          "conv2d_backward"]
    assert g.memory.tolist() == [10, 20, 30, 40, 4, 40, 30, 20, 10]
    assert g.duration.tolist() == [3, 5, 7, 11, 9, 22, 14, 10, 6]
    assert node(g, "d_grad").workspace == 2
    assert g.outputs == ["a_grad"]
    assert g.units == {"memory": "bytes", "duration": "flops"}


def test_training_graph_loss_reads_every_forward_sink():
    fwd = [
        ForwardOp("x", "op", [], 1, 1),
        ForwardOp("y", "op", ["x"], 1, 1),
        ForwardOp("z", "op", ["x"], 1, 1),
    ]
    g = training_graph(fwd, name="two-sinks")
    assert node(g, "loss").inputs == ("y", "z")
    assert node(g, "z_grad").inputs == ("z", "loss")
    assert node(g, "x_grad").inputs == ("x", "y", "z", "z_grad", "y_grad")


def test_training_graph_grad_duration_override_and_implementations():
    fwd = [
        ForwardOp("a", "conv2d", [], 8, 100, implementations=[
            Implementation("direct", 50, 0), Implementation("fft", 30, 64)]),
        ForwardOp("b", "relu", ["a"], 8, 10, grad_duration=7),
    ]
    g = training_graph(fwd, name="impls", backward_factor=3)
    # The node's own duration and workspace are those of its first implementation.
    assert (node(g, "a").duration, node(g, "a").workspace) == (50, 0)
    assert g.has_implementations
    assert node(g, "a_grad").duration == 150
    assert node(g, "b_grad").duration == 7


@pytest.mark.parametrize(
    "name", ["checkmate_vgg16_train", "checkmate_resnet50_train", "checkmate_fcn8_vgg_train"]
)
def test_training_graph_reproduces_the_published_checkmate_graphs(name):
    path = paper_graph(name)
    published = load_graph(path)
    fwd = [
        ForwardOp(n.id, n.op, n.inputs, n.memory, n.duration)
        for n in published.nodes
        if n.kind == "forward"
    ]
    rebuilt = training_graph(fwd, name=name)

    def rename(id):
        if id == "Loss":
            return "loss"
        return id.removesuffix("_backward") + "_grad" if id.endswith("_backward") else id

    assert rebuilt.ids == [rename(i) for i in published.ids]
    for n in published.nodes:
        assert node(rebuilt, rename(n.id)).inputs == tuple(rename(i) for i in n.inputs), n.id
    assert rebuilt.outputs == [rename(i) for i in published.outputs]


def test_training_graph_refuses_bad_forward_graphs():
    with pytest.raises(GraphError, match="at least one forward operator"):
        training_graph([], name="empty")
    with pytest.raises(GraphError, match="collides"):
        training_graph([ForwardOp("loss", "op", [], 1, 1)], name="clash")
    with pytest.raises(GraphError, match="collides"):
        training_graph([ForwardOp("a", "op", [], 1, 1), ForwardOp("a_grad", "op", ["a"], 1, 1)],
                       name="clash")
    with pytest.raises(GraphError, match="'nope', which is not a node"):
        training_graph([ForwardOp("a", "op", ["nope"], 1, 1)], name="unknown")


@st.composite
def forward_dags(draw):
    n = draw(st.integers(1, 9))
    ops = []
    for v in range(n):
        ins = draw(st.lists(st.integers(0, v - 1), max_size=3, unique=True)) if v else []
        ops.append(ForwardOp(f"n{v}", "op", [f"n{u}" for u in sorted(ins)],
                             draw(st.integers(0, 50)), draw(st.integers(0, 50))))
    return ops


@settings(max_examples=60, deadline=None)
@given(forward_dags())
def test_training_graph_gradient_inputs_on_any_dag(fwd):
    g = training_graph(fwd, name="dag")
    n = len(fwd)
    assert g.n == 2 * n + 1
    consumers = {op.id: [c.id for c in fwd if op.id in c.inputs] for op in fwd}
    for op in fwd:
        expected = {op.id, *consumers[op.id], *(c + "_grad" for c in consumers[op.id])}
        if not consumers[op.id]:
            expected.add("loss")
        grad = node(g, op.id + "_grad")
        assert set(grad.inputs) == expected
        assert list(grad.inputs) == sorted(grad.inputs, key=g.index.__getitem__)
        assert (grad.memory, grad.duration) == (op.memory, 2 * op.duration)
    assert set(node(g, "loss").inputs) == {op.id for op in fwd if not consumers[op.id]}
    assert baseline(g).duration == sum(op.duration for op in fwd) * 3 + 1


# ---------------------------------------------------------------------- chain


def test_chain_of_three_layers_is_exact():
    g = chain(3)
    assert {n.id: n.inputs for n in g.nodes} == {
        "layer1": (),
        "layer2": ("layer1",),
        "layer3": ("layer2",),
        "loss": ("layer3",),
        "layer3_grad": ("layer3", "loss"),
        "layer2_grad": ("layer2", "layer3", "layer3_grad"),
        "layer1_grad": ("layer1", "layer2", "layer2_grad"),
    }
    assert g.ids == ["layer1", "layer2", "layer3", "loss", "layer3_grad", "layer2_grad", "layer1_grad"]
    assert g.memory.tolist() == [1] * 7
    assert g.duration.tolist() == [1, 1, 1, 1, 2, 2, 2]
    assert g.outputs == ["layer1_grad"]
    # Baseline by hand: at layer3_grad, layer1..3, loss and the new value are resident.
    assert (baseline(g).peak, baseline(g).duration) == (5, 10)


def test_chain_sizes_and_seeded_draws():
    g = chain(4, memory=3, duration=5)
    assert set(g.memory.tolist()) == {3}
    assert g.duration.tolist() == [5] * 5 + [10] * 4

    a, b, c = chain(50, memory=2, seed=1), chain(50, memory=2, seed=1), chain(50, memory=2, seed=2)
    assert a.to_dict()["nodes"] == b.to_dict()["nodes"]
    assert a.memory.tolist() != c.memory.tolist()
    fwd = a.memory[:50]
    assert set(np.unique(fwd % 2).tolist()) == {0} and fwd.min() >= 2 and fwd.max() <= 20
    assert len(np.unique(fwd)) > 5
    assert a.duration[50] == 1  # the loss keeps the scale


def test_chain_refuses_bad_arguments():
    with pytest.raises(GraphError, match="n_layers"):
        chain(0)
    with pytest.raises(GraphError, match="memory"):
        chain(2, memory=-1)


# ---------------------------------------------------------------------- random layered


def test_random_layered_resembles_the_published_n250():
    g = random_layered(250, seed=0)
    assert g.n == 250 and g.ids == [str(v) for v in range(250)]
    assert 944 / 1.5 <= g.num_edges <= 944 * 1.5
    assert [v for v in range(g.n) if not g.inputs[v]] == [0]
    assert [v for v in range(g.n) if not g.consumers[v]] == [249]
    assert g.outputs == ["249"]
    assert g.duration[0] == g.duration[249] == 0
    assert not g.has_backward
    assert g.units == {"memory": "units", "duration": "units"}
    assert g.duration.min() >= 0 and g.duration.max() < 1000
    assert np.all(g.memory % 10 == 0) and g.memory.min() >= 10 and g.memory.max() <= 8000
    assert 1000 <= np.median(g.memory) <= 2200 and 1500 <= g.memory.mean() <= 2500

    sizes = g.metadata["layer_sizes"]
    assert sum(sizes) == 250 and sizes[0] == sizes[-1] == 1
    layer = np.repeat(np.arange(len(sizes)), sizes)
    gaps = np.array([layer[v] - layer[u] for v, ins in enumerate(g.inputs) for u in ins])
    assert gaps.min() >= 1
    assert 0.8 <= np.mean(gaps == 1) <= 0.92
    skips = gaps[gaps > 1]
    # Fewer the longer the skip: short skips dominate, a few reach far.
    assert np.sum(skips <= 5) > np.sum((skips > 5) & (skips <= 10)) > np.sum(skips > 15)
    assert skips.max() >= len(sizes) // 2


def test_random_layered_is_deterministic_per_seed():
    a, b, c = random_layered(120, seed=7), random_layered(120, seed=7), random_layered(120, seed=8)
    assert a.to_dict() == b.to_dict()
    assert a.sha256 != c.sha256


def test_random_layered_smallest_graph_and_errors():
    g = random_layered(3, seed=0)
    assert [n.inputs for n in g.nodes] == [(), ("0",), ("1",)]
    with pytest.raises(GraphError, match="at least 3"):
        random_layered(2, seed=0)
    with pytest.raises(GraphError, match="skip_fraction"):
        random_layered(10, seed=0, skip_fraction=1.0)


# ---------------------------------------------------------------------- architectures


def test_vgg16_first_conv_sizes_and_parameters():
    g = vgg16(batch=1, resolution=224)
    first = g.nodes[0]
    assert first.id == "block1.conv1" and first.op == "conv2d" and first.inputs == ()
    assert first.memory == 1 * 64 * 224 * 224 * 4
    assert first.duration == 2 * 224 * 224 * 64 * 3 * 3 * 3
    assert node(g, "block1.conv1_grad").duration == 2 * first.duration
    assert node(g, "block5.pool").memory == 512 * 7 * 7 * 4
    assert node(g, "fc1").duration == 2 * 25088 * 4096
    assert node(g, "predictions").memory == 1000 * 4
    assert len(forward_ops(g, "conv2d")) == 13 and len(forward_ops(g, "maxpool")) == 5
    assert g.fixed_memory == 4 * 138_357_544  # the published VGG16 parameter count
    assert (g.n, len(g.forward_indices)) == (73, 36)
    assert node(g, "loss").memory == 4


def test_resnet50_structure_sizes_and_parameters():
    g = resnet50(batch=1)
    assert len(forward_ops(g, "conv2d")) == 53  # 49 in the blocks and stem, 4 projections
    assert len(forward_ops(g, "batchnorm")) == 53
    assert len(forward_ops(g, "add")) == 16
    assert (g.n, len(g.forward_indices)) == (349, 174)
    assert g.metadata["parameters"] == 25_557_032
    conv = node(g, "layer2.block1.conv2")  # the strided 3x3 (ResNet v1.5)
    assert conv.memory == 128 * 28 * 28 * 4
    assert conv.duration == 2 * 28 * 28 * 128 * 128 * 3 * 3
    add = node(g, "layer2.block1.add")
    assert add.inputs == ("layer2.block1.bn3", "layer2.block1.downsample.bn")
    assert node(g, "layer2.block2.add").inputs == ("layer2.block2.bn3", "layer2.block1.out")
    assert node(g, "layer4.block3.out").memory == 2048 * 7 * 7 * 4
    assert node(g, "fc").memory == 1000 * 4


@pytest.mark.parametrize(
    "depth,convs,params", [(18, 20, 11_689_512), (101, 104, 44_549_160), (152, 155, 60_192_808)]
)
def test_resnet_depths(depth, convs, params):
    g = resnet50(batch=1, resolution=64, depth=depth)
    assert len(forward_ops(g, "conv2d")) == convs
    assert g.metadata["parameters"] == params


def test_unet_shapes_and_skip_connections():
    g = unet(batch=2, resolution=64, depth=3, base_channels=8)
    assert node(g, "up1.concat").inputs == ("down1.relu2", "up1.upconv")
    assert node(g, "up1.concat").memory == 2 * 16 * 64 * 64 * 4
    assert node(g, "bottom.conv1").memory == 2 * 64 * 8 * 8 * 4
    up = node(g, "up3.upconv")
    assert up.op == "conv_transpose2d" and up.memory == 2 * 32 * 16 * 16 * 4
    assert up.duration == 2 * 2 * 8 * 8 * 64 * 32 * 2 * 2
    assert node(g, "head").memory == 2 * 2 * 64 * 64 * 4
    assert len(unet().forward_indices) == 49
    with pytest.raises(GraphError, match="divisible"):
        unet(resolution=100)


def test_densenet121_concatenates_every_earlier_feature():
    g = densenet121(batch=1)
    assert node(g, "block1.layer1.norm1").inputs == ("pool0",)
    assert node(g, "block1.layer3.concat").inputs == (
        "pool0", "block1.layer1.conv2", "block1.layer2.conv2")
    assert node(g, "block1.layer6.concat").memory == (64 + 5 * 32) * 56 * 56 * 4
    assert node(g, "block1.concat").memory == 256 * 56 * 56 * 4
    assert node(g, "transition1.conv").memory == 128 * 56 * 56 * 4
    assert node(g, "transition1.pool").memory == 128 * 28 * 28 * 4
    assert node(g, "block4.concat").memory == 1024 * 7 * 7 * 4
    assert g.metadata["parameters"] == 7_978_856
    assert (g.n, len(g.forward_indices)) == (853, 426)


def test_transformer_attention_sizes_and_gpt2_parameters():
    g = transformer(layers=2, width=64, seq=16, batch=3, heads=4, vocab=100)
    scores = node(g, "layer1.scores")
    assert scores.inputs == ("layer1.qkv",) and scores.op == "matmul"
    assert scores.memory == 3 * 4 * 16 * 16 * 4
    assert scores.duration == 2 * 3 * 4 * 16 * 16 * 16
    assert node(g, "layer1.attn").inputs == ("layer1.softmax", "layer1.qkv")
    assert node(g, "layer2.add2").inputs == ("layer2.add1", "layer2.mlp_down")
    assert node(g, "layer1.mlp_up").memory == 3 * 16 * 256 * 4
    assert node(g, "logits").duration == 2 * 3 * 16 * 64 * 100
    assert node(g, "loss").memory == 3 * 16 * 4
    assert len(g.forward_indices) == 1 + 12 * 2 + 2
    gpt2 = transformer(layers=12, width=768, seq=1024, batch=1, heads=12)
    assert gpt2.metadata["parameters"] == 124_439_808
    with pytest.raises(GraphError, match="divisible"):
        transformer(width=100, heads=12)


SMALL = {
    "chain": {"layers": 5},
    "random-layered": {"nodes": 40, "seed": 3},
    "vgg16": {"batch": 1, "resolution": 32},
    "resnet50": {"batch": 1, "resolution": 32},
    "unet": {"batch": 1, "resolution": 32, "layers": 2},
    "densenet121": {"batch": 1, "resolution": 32},
    "transformer": {"batch": 1, "layers": 2, "width": 32, "seq": 8},
    "recurrent": {"batch": 2, "layers": 2, "width": 8, "seq": 4},
}


@pytest.mark.parametrize("kind", sorted(GENERATORS))
def test_every_kind_generates_a_valid_graph_with_a_positive_baseline(kind, tmp_path):
    g = generate(kind, **SMALL[kind])
    peak = baseline(g).peak
    assert peak > 0
    assert peak >= g.fixed_memory + g.memory.max()
    assert len(set(g.ids)) == g.n
    assert g.metadata["generator"] == GENERATORS[kind].__name__.replace("_", "-")
    # The file round-trips through the schema-validating loader unchanged.
    save_graph(g, tmp_path / "g.json")
    assert load_graph(tmp_path / "g.json").sha256 == g.sha256


# ---------------------------------------------------------------------- generate


def test_generate_maps_cli_options():
    assert generate("chain", layers=3).to_dict() == chain(3).to_dict()
    assert generate("random-layered", nodes=30, seed=4).sha256 == random_layered(30, seed=4).sha256
    assert generate("chain").metadata["n_layers"] == 10
    assert generate("resnet50", layers=18, batch=1, resolution=32).metadata["depth"] == 18
    t = generate("transformer", layers=1, width=16, seq=4, batch=2)
    assert (t.metadata["layers"], t.metadata["width"], t.metadata["heads"]) == (1, 16, 1)
    # Heads are 64 wide, as in GPT, or the nearest divisor of the width below that.
    assert generate("transformer", width=1024, layers=1, seq=4, batch=1).metadata["heads"] == 16
    assert generate("transformer", width=1000, layers=1, seq=4, batch=1).metadata["heads"] == 10
    assert set(GENERATORS) == {"chain", "random-layered", "vgg16", "resnet50", "unet",
                               "densenet121", "transformer", "recurrent"}


def test_generate_refuses_options_a_kind_does_not_take():
    with pytest.raises(GraphError, match="vgg16 does not take --nodes"):
        generate("vgg16", nodes=5)
    with pytest.raises(GraphError, match="--batch"):
        generate("chain", batch=2)
    with pytest.raises(GraphError, match="--layers must be a whole number of at least 1"):
        generate("chain", layers=0)
    with pytest.raises(GraphError, match="depth 7 is not supported"):
        generate("resnet50", layers=7)
    with pytest.raises(GraphError, match="adds nothing to this graph"):
        generate("transformer", implementations=True)
    with pytest.raises(GraphError, match="unknown graph kind 'lenet'"):
        generate("lenet")


# ---------------------------------------------------------------------- sizes, counted before building


@pytest.mark.parametrize("kind, options", [
    ("chain", {"layers": 1}), ("chain", {"layers": 37}),
    ("random-layered", {"nodes": 3}), ("random-layered", {"nodes": 500, "seed": 2}),
    ("random-layered", {"nodes": 2000, "width": 3}), ("random-layered", {"nodes": 300, "width": 10_000}),
    ("transformer", {"layers": 1, "width": 16, "seq": 4, "batch": 1}), ("transformer", {"layers": 7}),
    ("unet", {"layers": 1, "resolution": 8}), ("unet", {"layers": 6}),
    ("vgg16", {}), ("densenet121", {}), ("resnet50", {"layers": 18}), ("resnet50", {"layers": 200}),
])
def test_the_size_counted_before_building_is_the_size_built(kind, options):
    nodes, edges = generated_size(kind, **options)
    g = generate(kind, **options)
    assert nodes == g.n
    assert g.num_edges <= edges <= 2 * g.num_edges + 8  # an estimate that errs high, never low


@pytest.mark.parametrize("kind, options, message", [
    ("random-layered", {"nodes": 100_000_000}, "random-layered: these options give a graph of 100,000,000 nodes, "
     "more than the 1,000,000 a generated graph may have; choose a smaller --nodes"),
    ("random-layered", {"nodes": 200_000}, "random-layered: these options give a graph of about 18,270,558 edges, "
     "more than the 10,000,000 a generated graph may have; choose fewer nodes or a smaller --width"),
    ("transformer", {"layers": 1_000_000}, "transformer: these options give a graph of 24,000,007 nodes, more than "
     "the 1,000,000 a generated graph may have; choose a smaller --layers"),
    ("chain", {"layers": 10**7}, "chain: these options give a graph of 20,000,001 nodes, more than the 1,000,000 a "
     "generated graph may have; choose a smaller --layers"),
    # Each of these raised a Python error before: 2**depth spelled out, a float overflow, a head search of
    # 15 million steps.
    ("unet", {"layers": 40}, "unet: depth 40 halves the resolution 40 times; give a resolution of at least 2**40 "
     "(and divisible by it), or a smaller depth"),
    ("unet", {"layers": 10**9}, "unet: these options give a graph of 22,000,000,011 nodes, more than the 1,000,000 a "
     "generated graph may have; choose a smaller --layers"),
    ("vgg16", {"batch": 10**400}, "vgg16: --batch must be at most 2**53 = 9,007,199,254,740,992, not a number of "
     "about 400 digits"),
    ("transformer", {"width": 2**40 + 1}, "transformer: --width must be at most 1,048,576, not 1,099,511,627,777"),
])
def test_a_graph_beyond_the_caps_is_one_sentence_before_anything_is_built(kind, options, message):
    with pytest.raises(GraphError) as refused:
        generate(kind, **options)
    assert str(refused.value) == message


def test_the_cli_refuses_a_graph_too_large_to_build_in_one_sentence(tmp_path):
    from click.testing import CliRunner

    from remat_bench.app.cli import main

    for args, message in (
        (["random-layered", "--nodes", "100000000"], "random-layered: these options give a graph of 100,000,000 "
         "nodes, more than the 1,000,000 a generated graph may have; choose a smaller --nodes"),
        (["transformer", "--layers", "1000000"], "transformer: these options give a graph of 24,000,007 nodes, "
         "more than the 1,000,000 a generated graph may have; choose a smaller --layers"),
    ):
        result = CliRunner().invoke(main, ["graphs", "generate", *args, "-o", str(tmp_path / "g.json")])
        assert (result.exit_code, result.output) == (2, f"error: {message}\n")
        assert not (tmp_path / "g.json").exists()


@pytest.mark.parametrize("steps,layers", [(1, 1), (4, 1), (3, 2), (32, 2)])
def test_the_recurrent_graph_has_one_slice_and_two_nodes_per_cell_at_each_step(steps, layers):
    g = generate("recurrent", seq=steps, layers=layers, batch=2, width=8)
    forward = [g.ids[v] for v in g.forward_indices]
    assert len(forward) == steps * (1 + 2 * layers) + 2
    assert (g.n, g.num_edges) == estimated_size("recurrent", steps=steps, layers=layers)
    # Step t's cell of layer l reads its input and the layer's hidden state of step t - 1.
    if steps > 1:
        assert set(g.inputs[g.index["g0_1"]]) == {g.index["x1"], g.index["h0_0"]}
        assert set(g.inputs[g.index[f"h{layers - 1}_1"]]) == {g.index[f"g{layers - 1}_1"], g.index[f"h{layers - 1}_0"]}
    # Every step's input slice reads the one input: no forward node but x separates the steps alone.
    assert [g.ids[c] for c in g.consumers[g.index["x"]]] == [f"x{t}" for t in range(steps)] + ["x_grad"]
