"""Random operators (dropout): imported, solved and replayed with autograd's gradients
(`remat_bench.torch.randomness`).

These tests need PyTorch, and fail without it (as tests/test_torch_import.py).
"""

from __future__ import annotations

from tests.needs_torch import torch  # first: torch, or a failure saying how to install it

# isort: split

from collections import Counter

import pytest
from click.testing import CliRunner

from remat_bench.app.cli import main
from remat_bench.app.pipeline import run
from remat_bench.core.baseline import baseline_schedule
from remat_bench.core.graph_io import save_graph
from remat_bench.core.schedule import COMPUTE
from remat_bench.methods import Status
from remat_bench.torch import randomness
from remat_bench.torch.executor import Executor, State, reference_step
from remat_bench.torch.importer import import_model, program_for_graph
from remat_bench.torch.randomness import (
    cuda_indices,
    dropout_as_traced,
    fused_dropout_device,
    random_key,
    seeded_generators,
    seeded_random_ops,
)
from remat_bench.torch.replay import replay
from remat_bench.torch.spec import ModelSpec, build_step, make_batch

nn = torch.nn
F = torch.nn.functional
aten = torch.ops.aten

ENCODER = "tests.test_torch_random:transformer_encoder"
SHAPE = (16, 32)  # 16 positions of width 32; at batch 8 the activations outweigh the parameters
COUNTED = {"durations": "flops", "workspace": "none"}  # costs counted from the trace, nothing run


# Models for the `package.module:factory` path.
def transformer_encoder(dropout: float = 0.1) -> nn.Module:
    """A stock encoder: two layers of width 32, 4 heads, feed-forward 64, dropout 0.1 by default."""
    return nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, 64, dropout=dropout, batch_first=True), 2)


def transposed_dropouts() -> nn.Module:
    """Random operators on non-contiguous values, in place and not: each must draw what the trace draws."""

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(16, 16)
            self.b = nn.Linear(16, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = F.dropout(self.a(x).t(), 0.3).t()  # eager bernoulli_ fills the transposed mask in memory order
            h = F.dropout1d(h.unsqueeze(1), 0.3).squeeze(1)  # a mask per channel
            h = F.rrelu(h, training=True)  # random slopes, read again by its backward
            noise = torch.empty_like(h.t()).uniform_(-0.1, 0.1).t() + torch.randn_like(h)
            return self.b(h + 0.01 * noise)

    return Net()


@pytest.fixture(scope="module")
def encoder():
    return import_model(ENCODER, batch=8, input_shape=SHAPE, **COUNTED)


def random_nodes(g) -> list[int]:
    return [i for i, nd in enumerate(g.nodes) if "random" in nd.metadata]


def test_a_stock_transformer_encoder_imports_with_its_dropouts_numbered(encoder, tmp_path):
    g = encoder
    # Four dropouts per layer: the attention weights' (inside scaled_dot_product_attention), after
    # attention, inside the feed-forward block and after it; numbered in the order they run.
    random = random_nodes(g)
    assert [g.nodes[i].op for i in random] == ["aten.bernoulli.p"] * 8
    assert [g.nodes[i].metadata["random"] for i in random] == list(range(8))
    assert all(g.nodes[i].kind == "forward" for i in random)
    meta = g.metadata["torch"]["random"]
    assert meta["nodes"] == [g.nodes[i].id for i in random]
    assert "random_key(seed, step, k)" in meta["seeding"]
    path = tmp_path / "encoder.json"
    save_graph(g, path)
    shown = CliRunner().invoke(main, ["graphs", "show", str(path)])
    assert shown.exit_code == 0 and "random operators" in shown.output and "8, each seeded" in shown.output
    deterministic = import_model(ENCODER, batch=8, input_shape=SHAPE, dropout=0.0, **COUNTED)
    assert not random_nodes(deterministic) and "random" not in deterministic.metadata["torch"]


@pytest.mark.parametrize("method, time_limit", [("greedy", 10), ("moccasin", 3)])
def test_schedules_at_half_the_peak_recompute_dropouts_and_match_autograd(encoder, method, time_limit):
    g = encoder
    result = run(g, method, "0.5", time_limit, {})
    assert result.status in (Status.OPTIMAL, Status.FEASIBLE), result.message
    computes = Counter(int(v) for k, v in zip(result.schedule.kinds, result.schedule.nodes) if k == COMPUTE)
    assert any(computes[i] > 1 for i in random_nodes(g))  # a dropout mask is drawn twice
    measured = replay(g, result.schedule, "cpu", timing_run=False)
    assert measured.recomputations > 0
    # The same kernels on the same masks: recomputation reproduces autograd bit for bit.
    assert measured.outputs_match and measured.max_abs_diff == 0.0 and measured.max_rel_diff == 0.0


def test_a_recomputed_dropout_draws_its_first_mask(encoder):
    program = program_for_graph(encoder)
    ex = Executor(program, State.create(program.spec, torch.device("cpu")))
    for i, node in enumerate(program.nodes):
        ex.compute(i)
        if node.random is not None:
            first = ex.values[i].clone()
            ex.free(i)
            ex.compute(i)
            assert torch.equal(ex.values[i], first)
            kept = float(first.mean())
            assert 0.75 < kept < 0.97 and set(first.unique().tolist()) == {0.0, 1.0}  # p = 0.1: a real mask
    # Another training step draws other masks.
    step1 = Executor(program, ex.state, step=1)
    for i, node in enumerate(program.nodes):
        step1.compute(i)
        if node.random is not None:
            assert not torch.equal(step1.values[i], ex.values[i])
            break


def test_the_masks_matter_and_the_reference_draws_them(encoder):
    spec = ModelSpec.from_dict(encoder.metadata["torch"]["spec"])
    cpu = torch.device("cpu")
    state = torch.get_rng_state()
    loss, grads = reference_step(spec, cpu)
    assert torch.equal(torch.get_rng_state(), state)  # the global random state is left as it was
    again, again_grads = reference_step(spec, cpu)
    assert torch.equal(loss, again) and all(torch.equal(grads[k], again_grads[k]) for k in grads)
    # Without dropout (the same parameters: dropout has none) the loss is another.
    plain = ModelSpec.from_dict({**spec.as_dict(), "kwargs": {"dropout": 0.0}})
    assert not torch.equal(reference_step(plain, cpu)[0], loss)
    # Other masks (another step, or eager autograd's unseeded draws) give another loss.
    assert not torch.equal(reference_step(spec, cpu, step=1)[0], loss)
    torch.manual_seed(0)
    assert not torch.equal(build_step(spec)(*make_batch(spec)).detach(), loss)


def test_random_operators_on_transposed_values_replay_exactly():
    # Eager ``empty_like(x).bernoulli_(q)`` on a transposed x draws in memory order, the traced
    # ``bernoulli.p`` into a contiguous tensor: the eager step runs it as the trace does.
    g = import_model("tests.test_torch_random:transposed_dropouts", batch=8, input_shape=(16,), **COUNTED)
    ops = {g.nodes[i].op for i in random_nodes(g)}
    assert {"aten.bernoulli.p", "aten.rrelu_with_noise_functional.default", "aten.uniform.default",
            "aten.randn_like.default"} <= ops
    measured = replay(g, baseline_schedule(g), "cpu", timing_run=False)
    assert measured.outputs_match and measured.max_abs_diff == 0.0


def test_keys_differ_by_seed_step_and_operator():
    keys = {random_key(seed, step, k) for seed in range(3) for step in range(3) for k in range(3)}
    assert len(keys) == 27 and all(0 <= key < 2**63 for key in keys)
    assert random_key(0, 0, 1) == random_key(0, 0, 1)


def test_the_devices_a_random_operator_seeds():
    # CUDA cannot run here: the choices are plain functions of the device.
    assert cuda_indices(torch.device("cpu")) == []
    assert cuda_indices(torch.device("cuda", 1)) == [1]
    assert not fused_dropout_device(torch.device("cpu")) and fused_dropout_device(torch.device("cuda", 0))
    cpu = torch.device("cpu")
    before = torch.get_rng_state()
    with seeded_generators(cpu, 7):
        first = torch.rand(4)
    with seeded_generators(cpu, 7):
        assert torch.equal(torch.rand(4), first)
    assert torch.equal(torch.get_rng_state(), before)


def test_fused_dropout_is_run_as_the_cpu_trace_runs_dropout(monkeypatch):
    # On CUDA eager dropout is the fused native_dropout; the mode runs it as the CPU composite the
    # graph holds (bernoulli, div, mul). Stand-in: native_dropout called on the CPU, the device
    # treated as CUDA is.
    x = torch.randn(6, 5).t().requires_grad_()
    with seeded_generators(torch.device("cpu"), random_key(3, 0, 0)):
        noise = aten.bernoulli.p(torch.empty_like(x), 0.75).div(0.75)
    with seeded_generators(torch.device("cpu"), random_key(3, 0, 0)):
        out, mask = dropout_as_traced(x.detach(), 0.25)
    monkeypatch.setattr(randomness, "fused_dropout_device", lambda device: True)
    with seeded_random_ops(3):
        y, kept = torch.native_dropout(x, 0.25, True)
        (grad,) = torch.autograd.grad(y.sum(), x)
    assert torch.equal(y.detach(), x.detach() * noise) and torch.equal(kept, noise != 0)
    assert torch.equal(grad, noise)  # native_dropout's backward: the mask times 1 / (1 - p)
    assert torch.equal(out, y.detach()) and torch.equal(mask, kept)
