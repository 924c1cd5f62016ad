"""`remat_bench.torch.compiled`: a schedule's plan under torch.compile (inductor on the CPU, C++ through gcc).

A tiny GPT (2 blocks of width 32, 64 tokens, batch 8: activations weigh 20 times the parameters) at
half its peak, compiled once with a checkmate schedule's plan; PyTorch's own memory budget compiles a
small MLP (compiling costs seconds, most of them gcc's on a cold inductor cache); a ResNet-18 checks
batch norm without inductor (backend aot_eager: the same decomposed graph and partition, no C++). The models have no
dropout: compiled random operators draw from inductor's generator, so only dropout-free losses can be
compared with eager ones.

These tests need PyTorch. They are not skipped without it: `make install` installs torch, and a missing
torch fails the module with how to install it.
"""

from __future__ import annotations

# isort: split

import re

import numpy as np
import pytest
import torch

from remat_bench.app.pipeline import run
from remat_bench.core.cleanup import place_frees
from remat_bench.core.errors import GraphError, ScheduleError
from remat_bench.core.graph import Graph
from remat_bench.core.schedule import COMPUTE, Schedule
from remat_bench.core.simulate import simulate
from remat_bench.generators.chain import chain
from remat_bench.torch.compiled import (
    CompiledPlan,
    CompiledStep,
    compile_training_step,
    compile_with_memory_budget,
    compiled_plan,
)
from remat_bench.torch.importer import import_model, spec_of
from remat_bench.torch.spec import build_step, make_batch

GPT = {"layers": 2, "width": 32, "heads": 2, "vocab": 64, "max_seq": 64}
MLP = {"hidden": 64, "depth": 2}
STEPS = 3
LR = 0.5
# Inductor fuses pointwise operators and reductions into loops that add in another order than eager's
# kernels: float32 reassociation, measured at 1.1e-7 relative on these losses after 3 steps (2026-11-27).
# 1e-4 leaves room for another processor's vector width; a wrong gradient moves the loss by far more at
# this learning rate.
RTOL = 1e-4


@pytest.fixture(scope="module", autouse=True)
def fresh_dynamo():
    """Dynamo's compiled versions of the training step's forward from other test modules, cleared: past its
    recompile limit it would run eager PyTorch (refused here by `CompileError`)."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture(scope="module")
def gpt() -> Graph:
    return import_model("gpt", batch=8, input_shape=(64,), durations="flops", workspace="none", model_kwargs=GPT)


def schedule_of(g: Graph, method: str, time_limit: float, budget: str = "0.5") -> Schedule:
    result = run(g, method, budget, time_limit, {})
    assert result.schedule is not None and result.status.value in ("feasible", "optimal"), result.message
    return result.schedule


@pytest.fixture(scope="module")
def checkmate(gpt: Graph) -> CompiledPlan:
    return compiled_plan(gpt, schedule_of(gpt, "checkmate", 3))


@pytest.fixture(scope="module")
def greedy(gpt: Graph) -> tuple[Schedule, CompiledPlan]:
    schedule = schedule_of(gpt, "greedy", 10)
    return schedule, compiled_plan(gpt, schedule)


def train(g: Graph, make_step) -> tuple[list[float], list[torch.Tensor]]:
    """STEPS steps of SGD from the graph's initial parameters: the losses and the final parameters."""
    spec = spec_of(g)
    assert spec is not None
    module = build_step(spec)
    step = make_step(module)
    inputs, labels = make_batch(spec)
    optimizer = torch.optim.SGD(module.parameters(), lr=LR)
    losses = []
    for _ in range(STEPS):
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(step(inputs, labels)))
        optimizer.step()
    return losses, [p.detach().clone() for p in module.parameters()]


def eager_step(module: torch.nn.Module):
    def step(inputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        loss = module(inputs, labels)
        loss.backward()
        return loss.detach()
    return step


@pytest.fixture(scope="module")
def eager(gpt: Graph) -> tuple[list[float], list[torch.Tensor]]:
    return train(gpt, eager_step)


@pytest.fixture(scope="module")
def compiled(gpt: Graph, checkmate: CompiledPlan) -> tuple[CompiledStep, list[float], list[torch.Tensor]]:
    steps: list[CompiledStep] = []

    def make(module: torch.nn.Module) -> CompiledStep:
        steps.append(compile_training_step(module, checkmate))
        return steps[0]

    losses, params = train(gpt, make)
    return steps[0], losses, params


def computations(schedule: Schedule, n: int) -> np.ndarray:
    return np.bincount(schedule.nodes[schedule.kinds == COMPUTE], minlength=n)


def test_the_compiled_forward_saves_the_plans_saved_set(gpt: Graph, checkmate: CompiledPlan, compiled) -> None:
    step = compiled[0]
    check = step.check
    assert check is not None
    assert checkmate.recomputed and checkmate.saved  # the plan trades: some values saved, some recomputed
    assert {gpt.ids[v] for v in check.saved} == {gpt.ids[v] for v in checkmate.saved}
    assert {gpt.ids[v] for v in check.recomputed} == {gpt.ids[v] for v in checkmate.recomputed}
    assert check.mismatches == []
    # The bytes of the values it saves are the memory of the plan's saved nodes (the loss's total weight,
    # a 4-byte scalar, aside).
    assert check.saved_bytes == pytest.approx(check.plan_saved_bytes, rel=0.001)
    assert step.differences == checkmate.differences
    assert step.exact == checkmate.exact


def test_three_compiled_steps_give_eager_losses(eager, compiled) -> None:
    eager_losses, eager_params = eager
    _, losses, params = compiled
    assert losses == pytest.approx(eager_losses, rel=RTOL)
    assert losses[-1] < losses[0]  # it trains
    for ours, theirs in zip(params, eager_params):
        torch.testing.assert_close(ours, theirs, rtol=RTOL, atol=1e-6)


def test_as_compiled_is_a_valid_schedule_with_the_plans_decisions(gpt: Graph, checkmate: CompiledPlan) -> None:
    sim = simulate(gpt, checkmate.as_compiled)
    assert sim.valid, sim.violation
    counts = computations(checkmate.as_compiled, gpt.n)
    assert {v for v in gpt.forward_indices if counts[v] == 2} == set(checkmate.recomputed)
    assert counts.max() == 2 and (counts[gpt.backward_indices] == 1).all()
    assert not checkmate.saved & checkmate.recomputed


def test_the_plan_as_compiled_is_exact_and_its_own_plan(gpt: Graph, checkmate: CompiledPlan) -> None:
    again = compiled_plan(gpt, checkmate.as_compiled)
    assert again.exact and again.differences == []
    assert again.saved == checkmate.saved and again.recomputed == checkmate.recomputed
    assert np.array_equal(again.as_compiled.nodes, checkmate.as_compiled.nodes)
    assert np.array_equal(again.as_compiled.kinds, checkmate.as_compiled.kinds)
    if checkmate.exact:  # then the simulator's numbers are the schedule's
        assert simulate(gpt, checkmate.as_compiled).peak <= checkmate.as_compiled.budget


def test_a_double_recomputation_is_reported_inexact(gpt: Graph, greedy) -> None:
    schedule, plan = greedy
    counts = computations(schedule, gpt.n)
    twice = [v for v in gpt.forward_indices if counts[v] > 2]
    assert twice  # greedy at 0.5 recomputes values several times
    assert not plan.exact
    v = twice[0]
    assert any(re.fullmatch(rf"'{re.escape(gpt.ids[v])}' is recomputed \d+ times in the backward; compiled, it is "
                            r"recomputed once, before its first backward use, and held until its last", d)
               for d in plan.differences), plan.differences
    assert any("inside the forward" in d for d in plan.differences)
    sim = simulate(gpt, plan.as_compiled)
    assert sim.valid, sim.violation
    once = computations(plan.as_compiled, gpt.n)
    assert once.max() <= 2 and (once[gpt.backward_indices] == 1).all()
    # What runs is not what the schedule promised: the simulator says so.
    assert sim.peak > simulate(gpt, schedule).peak


def test_another_order_is_one_sentence(gpt: Graph, checkmate: CompiledPlan) -> None:
    order = checkmate.as_compiled.nodes[checkmate.as_compiled.kinds == COMPUTE].tolist()
    start = next(k for k, v in enumerate(order) if not gpt.is_forward[v])
    # Two neighbouring backward computations that do not read each other, swapped.
    k = next(k for k in range(start, len(order) - 1)
             if not gpt.is_forward[order[k + 1]] and order[k] not in gpt.inputs[order[k + 1]])
    order[k], order[k + 1] = order[k + 1], order[k]
    swapped = place_frees(gpt, np.array(order), np.zeros(len(order), dtype=np.int64))
    assert simulate(gpt, swapped).valid
    plan = compiled_plan(gpt, swapped)
    assert not plan.exact and len(plan.differences) == 1
    assert re.match(rf"the schedule runs its computations in another order: its {k + 1}(st|nd|rd|th) computes "
                    rf"'{gpt.ids[order[k]]}' where the plan as compiled computes '{gpt.ids[order[k + 1]]}'",
                    plan.differences[0]), plan.differences
    assert plan.saved == checkmate.saved and plan.recomputed == checkmate.recomputed


def test_pytorchs_memory_budget_compiles_and_trains() -> None:
    mlp = import_model("mlp", batch=64, durations="flops", workspace="none", model_kwargs=MLP)
    steps: list[CompiledStep] = []

    def make(module: torch.nn.Module) -> CompiledStep:
        steps.append(compile_with_memory_budget(module, 0.0))
        return steps[0]

    losses, _ = train(mlp, make)
    assert losses == pytest.approx(train(mlp, eager_step)[0], rel=RTOL)
    # The knob took effect: at 0 the forward saves the parameters and the batch alone, no activation
    # (torch.compile's own min cut saves every ReLU's output on this model).
    assert steps[0].saved_bytes == 0
    assert steps[0].check is None and steps[0].plan is None


def test_batch_norm_is_saved_and_recomputed_as_planned() -> None:
    # aot_eager: inductor's decompositions and the same partition, no C++ (seconds). Batch norm returns
    # its saved statistics as views (squeezes) of inner values: those must be saved, not recomputed.
    resnet = import_model("resnet18", batch=16, input_shape=(3, 32, 32), width=4, durations="flops",
                          workspace="none")
    plan = compiled_plan(resnet, schedule_of(resnet, "greedy", 10, "0.7"))
    assert any(resnet.nodes[v].op == "aten.native_batch_norm.default" for v in plan.saved)
    assert any(resnet.nodes[v].op == "aten.native_batch_norm.default" for v in plan.recomputed)
    spec = spec_of(resnet)
    assert spec is not None
    module = build_step(spec)
    step = compile_training_step(module, plan, backend="aot_eager")
    inputs, labels = make_batch(spec)
    loss = step(inputs, labels)
    check = step.check
    assert check is not None and check.mismatches == []
    assert check.saved == plan.saved and check.recomputed == plan.recomputed
    with torch.no_grad():
        eager_loss = float(build_step(spec)(inputs, labels))
    assert float(loss) == pytest.approx(eager_loss, rel=RTOL)


def test_a_fraction_outside_zero_to_one_is_refused() -> None:
    with pytest.raises(ValueError, match="from 0 to 1"):
        compile_with_memory_budget(torch.nn.Linear(2, 2), 1.5)
    with pytest.raises(ValueError, match="not one of inductor, aot_eager"):
        compile_with_memory_budget(torch.nn.Linear(2, 2), 0.5, backend="eager")


def test_only_imported_graphs_and_valid_schedules_have_a_plan(gpt: Graph, checkmate: CompiledPlan) -> None:
    line = chain(4)
    with pytest.raises(GraphError, match="not imported from PyTorch"):
        compiled_plan(line, Schedule.from_steps([("compute", 0)]))
    broken = Schedule(checkmate.as_compiled.kinds[1:], checkmate.as_compiled.nodes[1:],
                      checkmate.as_compiled.impls[1:])
    with pytest.raises(ScheduleError, match="not valid"):
        compiled_plan(gpt, broken)


def test_the_measured_compiled_peak_is_the_plans_as_compiled(gpt: Graph, checkmate: CompiledPlan) -> None:
    # Inductor's buffer reuse off (compiled.py, "Memory"): its buffers are released at their last use, and
    # the measured peak of the compiled step is the simulated one of the plan as compiled, within the
    # budget (with the reuse on it was above: docs/pytorch.md, compiled mode, "Memory as planned").
    from remat_bench.torch.train import train as train_with

    report = train_with(gpt, checkmate.as_compiled, 2, mode="compiled", configurations=("schedule",))
    measured, simulated = report.configurations[0].measured_peak, report.as_compiled_peak
    assert measured is not None and simulated is not None and report.budget is not None
    assert measured <= report.budget
    assert abs(measured / simulated - 1) <= 0.03, (measured, simulated)


def test_a_step_dynamo_leaves_uncompiled_is_refused_not_measured(gpt: Graph, checkmate: CompiledPlan) -> None:
    # Past its recompile limit dynamo runs eager PyTorch without a word; a step that never reached its
    # partitioner would then be measured as eager's. One compiled version allowed: the second module is
    # refused in a sentence.
    from torch._dynamo import config as dynamo_config

    from remat_bench.torch.compiled import CompileError

    spec = spec_of(gpt)
    assert spec is not None
    inputs, labels = make_batch(spec)
    torch._dynamo.reset()
    with dynamo_config.patch(recompile_limit=1):
        compile_training_step(build_step(spec), checkmate, backend="aot_eager")(inputs, labels)
        with pytest.raises(CompileError, match="without compiling it"):
            compile_training_step(build_step(spec), checkmate, backend="aot_eager")(inputs, labels)
    torch._dynamo.reset()
