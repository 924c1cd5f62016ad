"""`remat_bench.torch.importer` and `graphs import-torch`: graphs traced from PyTorch models.

These tests need PyTorch. They are not skipped without it: `make install`
installs torch, and a missing torch fails the module with how to install it.
"""

from __future__ import annotations

from tests.needs_torch import torch  # first: torch, or a failure saying how to install it

# isort: split

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from remat_bench.app.cli import main
from remat_bench.core.baseline import baseline, baseline_schedule
from remat_bench.core.errors import GraphError
from remat_bench.core.graph import Graph
from remat_bench.core.graph_io import graph_from_dict, load_graph, save_graph
from remat_bench.torch.families import NAMES as FAMILIES
from remat_bench.torch.importer import import_model, program_for_graph
from remat_bench.torch.replay import replay
from remat_bench.torch.zoo import ZOO, ModelSpecError
from tests.helpers import ROOT, SHIPPED

nn = torch.nn

# Costs counted, nothing run: for the tests about the graph's structure (tests/test_costs.py: measured costs).
FAST = {"durations": "flops", "workspace": "none"}
VIEW_OPS = ("aten.view", "aten.t.", "aten.detach", "aten._unsafe_view", "aten.expand", "aten.permute",
            "aten.transpose", "aten.unsqueeze", "aten.squeeze", "aten.alias", "getitem")


# Models for the `package.module:factory` path.
def small_convnet() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 8 * 8, 5))


def with_dropout() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 16), nn.Dropout(0.1), nn.Linear(16, 4))


def in_place_relu() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(inplace=True), nn.Linear(32, 4))


def round_trip(g: Graph, tmp_path) -> Graph:
    """Write and read back: the loader validates against the shipped JSON Schema."""
    path = tmp_path / f"{g.name}.json"
    save_graph(g, path)
    return load_graph(path)


@pytest.mark.parametrize("model, kwargs", [
    ("mlp", {"batch": 64}),
    ("resnet18", {"batch": 2, "input_shape": (3, 64, 64)}),
])
def test_zoo_graphs_validate_and_their_baseline_peak_is_what_replay_measures(model, kwargs, tmp_path):
    g = round_trip(import_model(model, **kwargs, **FAST), tmp_path)
    assert g.has_backward and g.units == {"memory": "bytes", "duration": "flops"}
    assert not g.op_workspace.any() and "workspace" not in g.metadata["torch"]
    # With the scratch memory of every operator measured on this machine, the simulator's
    # baseline peak is the allocator's, to the byte, whatever the processor's kernels allocate.
    measured_g = round_trip(import_model(model, durations="flops", workspace="measure", **kwargs), tmp_path)
    assert measured_g.metadata["torch"]["workspace"]["threads"] == torch.get_num_threads()
    base = baseline(measured_g)
    measured = replay(measured_g, baseline_schedule(measured_g), "cpu", timing_run=False)
    assert measured.outputs_match and measured.max_abs_diff == 0.0
    assert measured.measured_fixed == measured_g.fixed_memory
    assert measured.simulated_peak == base.peak
    assert measured.measured_peak == base.peak and measured.note == ""
    # The graph without workspaces runs the same operators, so the same peak is measured; what
    # it leaves out can only raise the real peak above the simulated one.
    plain = replay(g, baseline_schedule(g), "cpu", timing_run=False)
    assert plain.measured_peak == measured.measured_peak
    assert baseline(g).peak <= plain.measured_peak
    if model == "mlp":  # no operator of an MLP allocates scratch
        assert not measured_g.op_workspace.any() and plain.simulated_peak == plain.measured_peak


def test_mlp_graph_counts_each_storage_once_in_bytes():
    g = import_model("mlp", batch=64, depth=2, **FAST)
    ops = [nd.op for nd in g.nodes]
    assert not any(op.startswith(VIEW_OPS) for op in ops), ops
    # Forward: addmm, relu per hidden layer, then the head and log-softmax; the loss is backward.
    assert [nd.id for nd in g.nodes if nd.kind == "forward"] == [
        "addmm", "relu", "addmm_1", "relu_1", "addmm_2", "_log_softmax"]
    assert g.nodes[g.index["nll_loss_forward"]].kind == "backward"
    assert g.memory[g.index["addmm"]] == 64 * 512 * 4
    assert g.memory[g.index["nll_loss_forward"]] == 2 * 4  # loss and total weight, one float each
    params = 784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10
    assert g.fixed_memory == 4 * params + 4 * 64 * 784 + 8 * 64  # parameters, inputs, int64 labels
    meta = g.metadata["torch"]
    assert meta["fixed_memory"] == {"parameters": 4 * params, "buffers": 0, "inputs": 4 * 64 * 784 + 8 * 64,
                                    "constants": 0}
    # The flattening view (x.flatten(1)) and the transposed weights (t) are folded away:
    assert g.nodes[g.index["addmm"]].inputs == ()
    assert g.duration[g.index["addmm"]] == 2 * 64 * 784 * 512  # FlopCounterMode's formula
    assert g.duration[g.index["relu"]] == 64 * 512  # one per element touched


def test_gradients_are_outputs_held_by_their_node_or_copied_out_of_a_tuple():
    g = import_model("resnet18", batch=2, input_shape=(3, 32, 32), width=8, **FAST)
    grads = g.metadata["torch"]["gradients"]
    step = nn.Module()
    step.model = ZOO["resnet18"].build(width=8)
    names = [k for k, _ in step.named_parameters()]
    assert sorted(grads) == sorted(names)
    outputs = set(g.outputs)
    assert set(grads.values()) <= outputs
    # The stem's input needs no gradient: its convolution_backward computes the weight gradient
    # alone, and keeps it. A block's convolution_backward also computes the input gradient, so
    # the weight gradient is copied out and the tuple can be freed.
    stem = g.nodes[g.index[grads["model.stem.0.weight"]]]
    assert stem.op == "aten.convolution_backward.default" and stem.memory == 8 * 3 * 7 * 7 * 4
    block = g.nodes[g.index[grads["model.stages.0.conv1.weight"]]]
    assert block.op == "aten.clone (gradient copy)" and block.memory == 8 * 8 * 3 * 3 * 4
    tuple_node = g.nodes[g.index[block.inputs[0]]]
    assert tuple_node.op == "aten.convolution_backward.default" and tuple_node.id not in outputs
    assert tuple_node.memory == 2 * 8 * 8 * 8 * 4 + 8 * 8 * 3 * 3 * 4  # input gradient + weight gradient
    head = g.nodes[g.index[grads["model.head.weight"]]]
    assert head.op == "aten.mm.default" and head.metadata["gradient_of_parameter"] == "model.head.weight"


def test_kinds_and_grad_of_follow_autograd():
    g = import_model("resnet18", batch=2, input_shape=(3, 32, 32), width=8, **FAST)
    loss = g.index[g.metadata["torch"]["loss"]]
    assert all(g.is_forward[:loss]) and not any(
        g.is_forward[v] for v in range(loss, g.n) if g.nodes[v].op != "aten.copy_.default")
    pairs = {("aten.convolution_backward.default", "aten.convolution.default"),
             ("aten.native_batch_norm_backward.default", "aten.native_batch_norm.default"),
             ("aten.threshold_backward.default", "aten.relu.default"),
             ("aten.max_pool2d_with_indices_backward.default", "aten.max_pool2d_with_indices.default")}
    for backward_op, forward_op in pairs:
        nodes = [nd for nd in g.nodes if nd.op == backward_op]
        assert nodes
        for nd in nodes:
            assert nd.grad_of is not None and g.nodes[g.index[nd.grad_of]].op == forward_op, nd.id
    # Each batchnorm's step counter is updated once, as an output of zero memory.
    updates = [nd for nd in g.nodes if nd.op == "aten.copy_.default"]
    assert len(updates) == 20 and all(nd.memory == 0 and nd.id in g.outputs for nd in updates)


def test_every_zoo_model_imports_with_fake_tensors_at_a_batch_that_would_not_fit():
    g = import_model("resnet50", batch=4096, **FAST)  # only shapes are traced: nothing of this is allocated
    assert baseline(g).peak > 5 * 10**11
    for name in ZOO:
        g = import_model(name, batch=2, **FAST)
        assert g.n > 10 and g.has_backward


def test_shipped_torch_graphs_retrace_to_the_same_nodes():
    shipped = sorted(SHIPPED.glob("torch-*.json"))
    assert {p.stem.split("-")[1] for p in shipped} == set(ZOO) - set(FAMILIES)  # the families are not shipped
    for path in shipped:
        g = load_graph(path)
        program = program_for_graph(g)
        assert len(program.nodes) == g.n


def test_a_graph_that_no_longer_matches_its_model_is_refused():
    data = import_model("mlp", batch=8, depth=1, **FAST).to_dict()
    data["nodes"][2]["memory"] += 4
    with pytest.raises(GraphError, match=r"first difference at node 2 \('addmm_1'\)"):
        program_for_graph(graph_from_dict(data, "edited.json"))


def test_user_factory_and_its_errors():
    g = import_model("tests.test_torch_import:small_convnet", batch=4, input_shape=(3, 8, 8), **FAST)
    assert g.metadata["torch"]["spec"]["task"] == "classify"
    assert g.metadata["torch"]["spec"]["label_range"] == 5
    g = import_model("tests.test_torch_import:in_place_relu", batch=4, input_shape=(16,), **FAST)
    assert replay(g, baseline_schedule(g), "cpu", timing_run=False).outputs_match
    g = import_model("tests.test_torch_import:with_dropout", batch=4, input_shape=(16,), **FAST)  # test_torch_random
    assert replay(g, baseline_schedule(g), "cpu", timing_run=False).outputs_match
    with pytest.raises(ModelSpecError, match="give its per-sample input shape"):
        import_model("tests.test_torch_import:small_convnet", batch=4)
    with pytest.raises(ModelSpecError, match="fails on an input of shape"):
        import_model("tests.test_torch_import:small_convnet", batch=4, input_shape=(5,))
    with pytest.raises(ModelSpecError, match="neither a zoo model"):
        import_model("resnet1000")


def test_profiled_durations_are_nanoseconds_and_measure_workspace():
    g = import_model("resnet18", batch=2, input_shape=(3, 32, 32), width=8, durations="profile", repeats=1)
    assert g.units["duration"] == "ns"
    assert all(isinstance(d, int) and d >= 1 for d in g.duration.tolist())
    conv_ws = [int(g.workspace[v]) for v in range(g.n) if g.nodes[v].op == "aten.convolution.default"]
    assert all(w >= 0 for w in conv_ws)
    measured = replay(g, baseline_schedule(g), "cpu", timing_run=False)
    # With the workspaces measured, the simulator sees what the allocator sees.
    assert measured.measured_peak == measured.simulated_peak
    assert g.metadata["torch"]["workspace"]["device"] == "cpu"


def test_cli_import_torch(tmp_path):
    out = tmp_path / "mlp.json"
    r = CliRunner().invoke(main, ["graphs", "import-torch", "mlp", "--batch", "16", "--durations", "flops",
                                  "--workspace", "none", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "wrote" in r.output and load_graph(out).metadata["torch"]["spec"]["batch"] == 16
    assert "workspace" not in load_graph(out).metadata["torch"]
    r = CliRunner().invoke(main, ["graphs", "import-torch", "tests.test_torch_import:small_convnet", "--batch", "4",
                                  "--input-shape", "3x8x8", "--durations", "flops", "--workspace", "measure",
                                  "-o", str(out)])
    assert r.exit_code == 0, r.output
    measured = load_graph(out)
    assert measured.metadata["torch"]["workspace"]["machine"] and measured.units["duration"] == "flops"
    assert replay(measured, baseline_schedule(measured), "cpu", timing_run=False).measured_peak == \
        baseline(measured).peak
    r = CliRunner().invoke(main, ["graphs", "import-torch", "mlp", "--input-shape", "3xq", "-o", str(out)])
    assert r.exit_code == 2 and "is not a shape" in r.output
    r = CliRunner().invoke(main, ["graphs", "import-torch", "nosuch", "-o", str(tmp_path / "x.json")])
    assert r.exit_code == 2 and "neither a zoo model" in r.output


def test_without_torch_the_commands_say_how_to_install_it(tmp_path):
    """torch is optional: hide it and the package still imports; the torch commands exit 2."""
    graph = str(SHIPPED / "chain-16-train.json")
    script = (
        "import sys; sys.modules['torch'] = None\n"
        "import remat_bench, remat_bench.torch, remat_bench.app.cli\n"
        "from click.testing import CliRunner\n"
        "runner = CliRunner()\n"
        f"r = runner.invoke(remat_bench.app.cli.main, ['replay', {graph!r}, 'x.json'])\n"
        "print(r.exit_code); print(r.output.strip())\n"
        "r = runner.invoke(remat_bench.app.cli.main, "
        f"['graphs', 'import-torch', 'mlp', '-o', {str(tmp_path / 'g.json')!r}])\n"
        "print(r.exit_code); print(r.output.strip())\n"
        f"r = runner.invoke(remat_bench.app.cli.main, ['solve', {graph!r}, '-m', 'none', '-b', '1', '--json'])\n"
        "print(r.exit_code)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120)
    lines = done.stdout.strip().splitlines()
    assert lines[0] == "2" and "pip install remat-bench[torch]" in lines[1], done.stdout + done.stderr
    assert lines[2] == "2" and "needs PyTorch" in lines[3]
    assert lines[4] == "0"


def test_graph_file_keeps_the_spec_and_node_names(tmp_path):
    g = round_trip(import_model("gpt", batch=2, input_shape=(16,), layers=1, width=32, vocab=64, **FAST), tmp_path)
    data = json.loads((tmp_path / f"{g.name}.json").read_text())
    spec = data["metadata"]["torch"]["spec"]
    assert spec == {"model": "gpt", "batch": 2, "input_shape": [16], "task": "language",
                    "kwargs": {"layers": 1, "width": 32, "vocab": 64}, "input_dtype": "int64",
                    "input_range": 64, "label_shape": [2, 16], "label_range": 64, "seed": 0}
    assert all(nd["metadata"]["fx"] for nd in data["nodes"])
    assert any(nd["op"].startswith("aten._scaled_dot_product") for nd in data["nodes"])
    assert replay(g, baseline_schedule(g), "cpu", timing_run=False).outputs_match


def test_torch_logging_stays_at_warnings_unless_asked():
    import logging

    import_model("mlp", batch=4, depth=1, **FAST)
    trace = logging.getLogger("torch.__trace")
    assert not trace.isEnabledFor(logging.DEBUG) and trace.level == logging.WARNING
    # A user who asks torch for its logs (TORCH_LOGS, TORCH_TRACE) gets them untouched.
    code = ("import logging, remat_bench.torch.zoo; "
            "print(logging.getLogger('torch.__trace').isEnabledFor(logging.DEBUG))")
    for env, expected in (({}, "False"), ({"TORCH_LOGS": "+dynamo"}, "True")):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={**os.environ, **env}, cwd=ROOT)
        assert out.stdout.strip() == expected, out.stderr


def test_the_cpu_attention_kernel_is_counted_by_the_attention_formula():
    g = import_model("gpt", batch=2, input_shape=(64,), vocab=256, max_seq=64, width=64, layers=2, heads=2, **FAST)
    b, h, s, d = 2, 2, 64, 32
    forward = [g.duration[v] for v, nd in enumerate(g.nodes) if nd.op.endswith("flash_attention_for_cpu.default")]
    backward = [g.duration[v] for v, nd in enumerate(g.nodes)
                if nd.op.endswith("flash_attention_for_cpu_backward.default")]
    assert forward == [4 * b * h * s * s * d] * 2  # QK^T and PV: 2 matmuls of 2 b h s s d each
    assert backward == [10 * b * h * s * s * d] * 2  # torch's formula: 5 matmuls
