"""`remat_bench.torch.families`: the unrolled GRU, diffusion U-Net, mixture of experts and ConvNeXt of the zoo.

These tests need PyTorch. They are not skipped without it: `make install`
installs torch, and a missing torch fails the module with how to install it.
"""

from __future__ import annotations

import tests.needs_torch  # noqa: F401 (first: torch, or a failure saying how to install it; one thread)

# isort: split

from collections import Counter

import pytest

from remat_bench.core.baseline import baseline, baseline_schedule
from remat_bench.core.graph import Graph
from remat_bench.core.graph_io import load_graph, save_graph
from remat_bench.torch.families import NAMES, UnrolledGRU
from remat_bench.torch.importer import import_model
from remat_bench.torch.replay import replay
from remat_bench.torch.zoo import ZOO

# Costs counted, nothing run: the structure is what these tests are about.
FAST = {"durations": "flops", "workspace": "none"}
# Each family at a size that imports in about a second.
TINY = {
    "gru": {"batch": 4, "input_shape": (3, 4), "features": 4, "hidden": 8, "steps": 3},
    "dunet": {"batch": 2, "input_shape": (3, 8, 8), "width": 8, "groups": 4},
    "moe": {"batch": 2, "input_shape": (8,), "vocab": 32, "width": 16, "layers": 2, "heads": 2},
    "convnext": {"batch": 2, "input_shape": (3, 16, 16), "dims": (8, 16), "depths": (1, 1)},
}


def forward_ops(g: Graph) -> Counter[str]:
    return Counter(nd.op for nd in g.nodes if nd.kind == "forward")


def test_the_families_are_zoo_models_with_their_tasks():
    assert {name: ZOO[name].task for name in NAMES} == {
        "gru": "classify", "dunet": "regress", "moe": "language", "convnext": "classify"}


@pytest.mark.parametrize("name", NAMES)
def test_each_family_imports_to_a_graph_the_loader_accepts(name, tmp_path):
    g = import_model(name, **TINY[name], **FAST)
    path = tmp_path / f"{name}.json"
    save_graph(g, path)  # the loader validates against the shipped JSON Schema
    loaded = load_graph(path)
    assert loaded.n == g.n > 50 and loaded.has_backward
    assert loaded.metadata["torch"]["spec"]["task"] == ZOO[name].task
    assert baseline(loaded).peak == baseline(g).peak > loaded.fixed_memory


@pytest.mark.parametrize("layers", [1, 2])
def test_an_unrolled_gru_has_14_forward_nodes_per_cell_and_step(layers):
    # One new_zeros per layer (the initial states), 14 operators per GRU cell and step, the head
    # and the log-softmax of the loss.
    for steps in (3, 5):
        kwargs = {**TINY["gru"], "input_shape": (steps, 4), "steps": steps, "layers": layers}
        g = import_model("gru", **kwargs, **FAST)
        assert sum(forward_ops(g).values()) == layers + 2 + 14 * layers * steps
        cells = Counter(nd.metadata["module"] for nd in g.nodes if nd.kind == "forward"
                        and nd.metadata and nd.metadata.get("module_type") == "GRUCell")
        assert cells == {f"model.cells.{i}": 14 * steps for i in range(layers)}


def test_the_default_gru_is_the_issues_instance():
    g = import_model("gru", batch=32, **FAST)
    assert (g.n, sum(forward_ops(g).values())) == (2302, 900)


def test_the_gru_cells_weights_are_one_set_whatever_the_steps():
    model = UnrolledGRU(features=4, hidden=8, layers=2, steps=3)
    names = {f"model.{name}" for name, _ in model.named_parameters()}
    one_set = sum(p.numel() * p.element_size() for p in model.parameters())
    for steps in (3, 5):
        g = import_model("gru", **{**TINY["gru"], "input_shape": (steps, 4), "steps": steps}, **FAST)
        torch_meta = g.metadata["torch"]
        # One gradient per parameter, not one per step: the steps' contributions are summed into it.
        assert set(torch_meta["gradients"]) == names and len(names) == 10
        assert torch_meta["fixed_memory"]["parameters"] == one_set


def test_a_diffusion_unet_concatenates_its_skips_and_predicts_noise_of_the_inputs_shape():
    g = import_model("dunet", **TINY["dunet"], **FAST)
    ops = forward_ops(g)
    # Three resolutions, two up-path residual blocks at each, each reading one skip.
    assert ops["aten.cat.default"] == 6
    # 11 residual blocks of 2 group norms, 4 attention blocks (16x16 down, twice up, 8x8 middle), the output's.
    assert ops["aten.native_group_norm.default"] == 11 * 2 + 4 + 1
    assert g.metadata["torch"]["spec"]["label_shape"] == [2, 3, 8, 8]


def test_a_mixture_of_experts_gates_each_block_with_topk_and_scatter():
    g = import_model("moe", **TINY["moe"], **FAST)
    ops = forward_ops(g)
    assert ops["aten.topk.default"] == ops["aten.scatter.src"] == 2  # one gate per block
    assert ops["aten.silu.default"] == 2 * 4  # dense dispatch: all 4 experts run in each block


def test_a_convnext_has_depthwise_convolutions_and_channels_last_norms():
    g = import_model("convnext", **TINY["convnext"], **FAST)
    ops = forward_ops(g)
    # Stem, one downsampling and one depthwise convolution per block.
    assert ops["aten.convolution.default"] == 1 + 1 + 2
    # The stem's, the downsampling's, one per block, the head's.
    assert ops["aten.native_layer_norm.default"] == 1 + 1 + 2 + 1


def test_the_gru_step_replayed_without_remat_peaks_where_the_simulator_says():
    g = import_model("gru", **TINY["gru"], **FAST)
    measured = replay(g, baseline_schedule(g), "cpu", timing_run=False)
    assert measured.outputs_match
    assert measured.measured_fixed == g.fixed_memory
    # No operator of a GRU cell allocates scratch: the allocator's peak is the simulator's, to the byte.
    assert measured.measured_peak == measured.simulated_peak == baseline(g).peak
    assert measured.note == ""
