"""`torch-budget`: PyTorch's own memory-budget partitioner on imported graphs, mapped, lowered and replayed.

These tests need PyTorch. They are not skipped without it: `make install`
installs torch, and a missing torch fails the module with how to install it.
"""

from __future__ import annotations

# isort: split

import subprocess
import sys

import numpy as np
import pytest
import torch
from torch import nn

from remat_bench.app.pipeline import run
from remat_bench.core.baseline import baseline
from remat_bench.core.graph import Graph
from remat_bench.core.graph_io import load_graph
from remat_bench.core.simulate import simulate
from remat_bench.methods import Status, get_method
from remat_bench.methods.torch_budget import GRID, TorchBudget
from remat_bench.toolkit.lowering import Plan, lower_plan
from remat_bench.torch import partition as torch_partition
from remat_bench.torch.importer import import_model
from remat_bench.torch.partition import PartitionError, joint_graph, partition
from remat_bench.torch.program import build_program
from remat_bench.torch.replay import replay
from remat_bench.torch.spec import model_spec
from tests.helpers import ROOT, SHIPPED

GPT_ARGS = {"batch": 4, "input_shape": (32,), "vocab": 64, "max_seq": 32, "width": 32, "layers": 2, "heads": 2}


@pytest.fixture(scope="module")
def gpt() -> Graph:
    return import_model("gpt", **GPT_ARGS, durations="flops", workspace="none")


@pytest.fixture(scope="module")
def resnet() -> Graph:
    return import_model("resnet18", batch=16, input_shape=(3, 32, 32), width=4, durations="flops", workspace="none")


def lowered(g: Graph, plan: torch_partition.TorchPlan, transient: bool = False) -> tuple[int, int, set[str]]:
    """(peak, duration, ids of the nodes recomputed) of PyTorch's plan through the shared lowering."""
    kept = frozenset(v for v in plan.saved if g.is_forward[v])
    schedule = lower_plan(g, Plan(kept, tuple((v,) for v in g.forward_indices)), transient)
    sim = simulate(g, schedule)
    assert sim.valid, sim.violation
    counts = np.bincount(schedule.nodes[schedule.kinds == 0], minlength=g.n)
    return sim.peak, sim.duration, {g.ids[v] for v in np.flatnonzero(counts > 1)}


def ids(g: Graph, nodes: frozenset[int]) -> set[str]:
    return {g.ids[v] for v in nodes}


# (model, nodes saved at 1.0, of which backward (the loss), inputs saved at 1.0, nodes held whole where
#  PyTorch saves some outputs at 1.0, inputs saved at 0.0, nodes PyTorch recomputes at 0.0, the loss's own)
EXPECTED = {
    "gpt": (21, 1, 21, 1, 31, 28, {"_log_softmax", "mm", "nll_loss_forward"}),
    "resnet": (61, 1, 43, 21, 104, 70, {"_log_softmax", "addmm", "nll_loss_forward"}),
}


@pytest.mark.parametrize("model", ["gpt", "resnet"])
def test_at_knob_one_pytorch_saves_what_the_min_cut_keeps_and_recomputes_nothing(model, request):
    g = request.getfixturevalue(model)
    saved, loss, inputs, partial, *_ = EXPECTED[model]
    plan = partition(joint_graph(g), 1.0)
    # The runtime-optimal min cut on these models recomputes nothing: every forward value a backward
    # operator reads is saved (relu's backward reads relu's output, batch norm's backward its input and
    # statistics, attention's backward its outputs), so the lowering recomputes nothing either.
    assert plan.recomputed == frozenset() and plan.recomputed_ops == ()
    assert (len(plan.saved), plan.saved_inputs) == (saved, inputs)
    # The loss is PyTorch's last forward value and remat-bench's first backward node: nll_loss_forward's
    # total weight is saved. Every other saved value is a forward node.
    assert [g.ids[v] for v in plan.saved if not g.is_forward[v]] == ["nll_loss_forward"]
    assert len(plan.saved) - sum(bool(g.is_forward[v]) for v in plan.saved) == loss
    read = {u for b in g.backward_indices for u in g.inputs[b] if g.is_forward[u]}
    assert read <= plan.saved
    # A node holds every output of its operator: where PyTorch saves batch norm's statistics and not its
    # output (its backward does not read it), the node is kept whole (and the loss's 4-byte total weight).
    assert plan.partial == partial
    peak, duration, recomputed = lowered(g, plan)
    assert recomputed == set()
    assert (peak, duration) == (baseline(g).peak, baseline(g).duration)
    saved_bytes, runtime = plan.estimates()
    assert saved_bytes > 0 and runtime == 0


@pytest.mark.parametrize("model", ["gpt", "resnet"])
def test_at_knob_zero_pytorch_saves_the_inputs_alone_and_recomputes_the_forward_pass(model, request):
    g = request.getfixturevalue(model)
    *_, inputs, recomputed_by_torch, around_the_loss = EXPECTED[model]
    one, zero = partition(joint_graph(g), 1.0), partition(joint_graph(g), 0.0)
    assert zero.saved == frozenset() and zero.saved_inputs == inputs
    assert len(zero.recomputed) == recomputed_by_torch
    peak, duration, recomputed = lowered(g, zero)
    # The lowering recomputes what PyTorch's backward graph recomputes, except the loss and what it
    # reads: PyTorch recomputes them in its backward graph, remat-bench computes the loss once, at
    # the start of the backward pass, with the values it reads still resident.
    assert ids(g, zero.recomputed) - recomputed == around_the_loss
    assert recomputed <= ids(g, zero.recomputed)
    one_peak, one_duration, _ = lowered(g, one)
    assert duration > one_duration
    # Held until its last use, as in PyTorch's backward graph, the forward pass recomputed at the first
    # backward operator is resident at once again: the peak barely falls (GPT) or not at all (ResNet).
    # Freed after each use (transient), it falls well below.
    assert peak <= one_peak
    assert (peak < one_peak) == (model == "gpt")
    transient_peak, _, _ = lowered(g, zero, transient=True)
    assert transient_peak < 0.75 * one_peak
    saved_bytes, runtime = zero.estimates()
    assert saved_bytes == 0 and runtime > one.estimates()[1]


def test_the_joint_graph_is_traced_once_and_partitions_leave_it_as_it_was(gpt):
    joint = joint_graph(gpt)
    names = [n.name for n in joint.module.graph.nodes]
    partition(joint, 0.5)
    assert joint_graph(gpt) is joint
    assert [n.name for n in joint.module.graph.nodes] == names


def test_forward_operators_align_by_name_on_gpt_and_by_operator_on_resnet(gpt, resnet):
    # Both are make_fx traces of the same forward pass: the FX names coincide, except where
    # AOTAutograd functionalises batch norm (_native_batch_norm_legit_functional, with the new running
    # statistics as outputs) and the importer's trace keeps native_batch_norm.
    for g, renamed in ((gpt, 0), (resnet, 20)):
        joint = joint_graph(g)
        aligned = {name: joint.owner[name] for name in joint.forward_ops}
        assert joint.unaligned == {} and None not in aligned.values()
        differ = {(name, g.ids[v]) for name, v in aligned.items() if name != g.ids[v]}
        assert len(differ) == renamed
        assert all(a.startswith("_native_batch_norm_legit_functional") and b.startswith("native_batch_norm")
                   for a, b in differ)


def test_a_trace_that_cannot_be_aligned_fails_in_one_sentence(gpt):
    joint = joint_graph(gpt)
    shorter = build_program(model_spec("gpt", batch=4, input_shape=(16,), kwargs={
        k: v for k, v in GPT_ARGS.items() if k not in ("batch", "input_shape")}))
    misaligned = torch_partition._aligned(gpt, shorter, joint.module, joint.inputs, joint.num_fwd_outputs,
                                          joint.static_inputs)
    assert misaligned.unaligned["addmm"] == ("the 1st aten.addmm.default has shape (128, 96) in PyTorch's "
                                             "trace and (64, 96) in the imported graph ('addmm')")
    with pytest.raises(PartitionError, match=r"^graph 'torch-gpt-b4': PyTorch saves the value '\w+', which cannot "
                                             r"be aligned with a node of the imported graph: the \d+\w\w "):
        partition(misaligned, 1.0)


@pytest.mark.parametrize("model", ["gpt", "resnet"])
def test_a_schedule_replays_on_the_cpu_and_matches_autograd(model, request):
    g = request.getfixturevalue(model)
    result = TorchBudget().solve(g, None, None, **TorchBudget.parse_params({"fraction": 0.5}))
    assert result.status is Status.FEASIBLE and result.stats["fraction"] == 0.5
    measured = replay(g, result.schedule, "cpu", timing_run=False)
    assert measured.outputs_match and measured.max_abs_diff == 0.0
    assert measured.recomputations == result.stats["schedule_recomputed_nodes"] > 0
    assert measured.simulated_peak == result.stats["simulated_peak"] < baseline(g).peak
    if model == "gpt":  # no operator allocates scratch; ResNet's convolutions do (workspaces not measured)
        assert measured.measured_peak == measured.simulated_peak


def test_the_knob_search_fits_a_budget_between_the_extremes_and_records_pytorchs_estimates(gpt):
    zero_peak, _, _ = lowered(gpt, partition(joint_graph(gpt), 0.0), transient=True)
    one_peak = baseline(gpt).peak
    budget = (zero_peak + one_peak) // 2
    result = run(gpt, "torch-budget", budget, None, {"lowering": "best"}, bound=False)
    assert result.status is Status.FEASIBLE and result.peak <= budget
    stats = result.stats
    assert 0.0 <= stats["fraction"] < 1.0 and stats["simulated_peak"] <= budget
    assert stats["torch_saved_activation_bytes"] > 0 and stats["torch_recompute_estimate"] > 0
    assert stats["partitions"] > GRID
    # The budget is below what saving everything (knob 1) holds, and saving nothing (knob 0) with
    # transient recomputation fits it: the fastest fit lies in between, and nothing faster fits on the grid.
    assert result.overhead_pct > 0
    for knob in np.linspace(1.0, 0.0, GRID + 1):
        plan = partition(joint_graph(gpt), float(knob))
        for transient in (False, True):
            peak, duration, _ = lowered(gpt, plan, transient)
            assert peak > budget or duration >= result.duration


def test_an_explicit_knob_that_does_not_fit_says_where_its_peak_is(gpt):
    result = TorchBudget().solve(gpt, baseline(gpt).peak // 2, None, **TorchBudget.parse_params({"fraction": 1.0}))
    assert result.status is Status.NO_SOLUTION
    # Amounts in the graph's memory unit (bytes: 787,208 and 393,604 here).
    assert result.message == ("at PyTorch's activation_memory_budget 1 the simulated peak is 768.76 KiB, above the "
                              "budget 384.38 KiB")


def test_a_graph_not_imported_from_pytorch_is_unsupported_in_one_sentence():
    g = load_graph(SHIPPED / "chain-16-train.json")
    reason = TorchBudget.skip(g, None)
    assert reason == ("method 'torch-budget' runs PyTorch's partitioner on the model a graph was imported from, "
                      f"and graph '{g.name}' was not imported from PyTorch (no 'torch' model spec in its metadata)")
    result = run(g, "torch-budget", "0.8", 10, bound=False)
    assert result.status is Status.UNSUPPORTED and result.message == reason


def test_a_failure_to_trace_or_align_is_an_error_in_one_sentence(gpt, monkeypatch):
    sentence = "graph 'x': PyTorch saves the value 'y', which cannot be aligned with a node of the imported graph"

    def refuse(graph: Graph) -> None:
        raise PartitionError(sentence)

    monkeypatch.setattr(torch_partition, "joint_graph", refuse)
    result = TorchBudget().solve(gpt, None, None, **TorchBudget.parse_params({}))
    assert result.status is Status.ERROR and result.message == sentence


def test_the_method_is_registered_and_imports_without_torch(monkeypatch):
    assert get_method("torch-budget") is TorchBudget
    code = ("import sys; sys.modules['torch'] = None; from remat_bench.methods import get_method; "
            "cls = get_method('torch-budget'); print([p.name for p in cls.params])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "['fraction', 'solver', 'estimator', 'lowering']"
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    assert TorchBudget.available() == (False, "method 'torch-budget' needs torch: install it with "
                                              "`pip install remat-bench[torch]`")


def test_no_knob_that_fits_says_the_lowest_peak_it_reached(gpt):
    """Issue 30 item 18: 'no value fits' without the lowest peak reached."""
    result = TorchBudget().solve(gpt, baseline(gpt).peak // 5, None, **TorchBudget.parse_params({}))
    assert result.status is Status.NO_SOLUTION
    assert result.message == ("no value of PyTorch's activation_memory_budget gives a schedule within the budget "
                              "153.75 KiB: the lowest peak over the 21 values tried is 501.13 KiB")


def hardswish_net() -> nn.Module:
    """Convolution, batch norm and an in-place hardswish, as torchvision's MobileNetV3 blocks have them."""
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.Hardswish(inplace=True),
                         nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.Hardswish(inplace=True),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))


@pytest.mark.parametrize("model, shape", [("tests.test_torch_random:transformer_encoder", (16, 32)),
                                          ("tests.test_torch_budget:hardswish_net", (3, 16, 16))])
def test_dropout_and_in_place_activations_align_and_replay(model, shape):
    # AOTAutograd turns dropout into native_dropout (the importer's trace: bernoulli, div, mul) unless its
    # Python kernels are set aside, and keeps an in-place hardswish's input for the backward in a clone
    # of it: both align with the imported graph's nodes, and PyTorch's plan replays as autograd runs.
    task = "regress" if "encoder" in model else None
    g = import_model(model, batch=8, input_shape=shape, task=task, durations="flops", workspace="none")
    joint = joint_graph(g)
    assert joint.unaligned == {}
    if "encoder" in model:
        assert sum(n.target is torch.ops.aten.bernoulli.p for n in joint.module.graph.nodes) == 8
    else:
        clones = [n.name for n in joint.module.graph.nodes if n.target is torch.ops.aten.clone.default]
        assert clones and all(joint.owner[c] is not None for c in clones)
    result = TorchBudget().solve(g, None, None, **TorchBudget.parse_params({"fraction": 0.0}))
    assert result.status is Status.FEASIBLE and result.stats["schedule_recomputed_nodes"] > 0
    measured = replay(g, result.schedule, "cpu", timing_run=False)
    assert measured.outputs_match and measured.max_abs_diff == 0.0
