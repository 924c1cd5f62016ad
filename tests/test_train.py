"""Training with the plan, exact mode (`remat_bench.torch.train`, `remat-bench train`).

A schedule run as a training step, step after step with new batches and an
optimizer, must train exactly as plain eager autograd does (same parameters,
same batches, same dropout masks): equal losses and equal parameters after the
last step, and a measured peak equal to the simulated one.
"""

from __future__ import annotations

# isort: split

import functools
import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from torch import nn

from remat_bench.app.cli import main
from remat_bench.app.pipeline import run
from remat_bench.core.graph_io import save_graph
from remat_bench.core.schedule import save_schedule
from remat_bench.torch.compiled import FUSION_ATOL, FUSION_RTOL
from remat_bench.torch.importer import import_model
from remat_bench.torch.train import ScheduledStep, TrainError, batch_for_step, train

STEPS = 20


def small_cnn() -> nn.Module:
    """A model of the user's own, given as ``package.module:factory``: conv, batch norm, dropout."""
    blocks = [nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU()]
    for _ in range(5):
        blocks += [nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU()]
    return nn.Sequential(*blocks, nn.Dropout(0.2), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))


# A torchvision ResNet small enough for CI holds parameters and gradients near its peak: nothing fits below
# 0.84 of it (`remat-bench floor`); docs/benchmarks.md trains ResNet-50 at 0.5 at a size where one does.
BUDGETS = {"gpt": 0.5, "factory": 0.5, "torchvision": 0.95}
MODELS = {
    "gpt": dict(model="gpt", batch=8, input_shape=(64,), vocab=64, max_seq=64, width=32, layers=2, heads=2),
    "factory": dict(model="tests.test_train:small_cnn", batch=8, input_shape=(3, 32, 32)),
    "torchvision": dict(model="torchvision:resnet18", batch=8, input_shape=(3, 64, 64), num_classes=10),
}


SCHEDULES = Path(__file__).resolve().parent / "data" / "schedules"
SHIPPED_SCHEDULES = {"factory": "small-cnn-checkmate-0.5.json"}  # checkmate's proven optimum at BUDGETS[key]


@functools.cache
def _imported(key: str):
    # Workspaces measured (the peak must hold), durations counted (they do not matter here).
    return import_model(**MODELS[key], durations="flops", workspace="measure")


@functools.cache
def _solved(key: str, method: str = "dtr"):
    """The graph of ``key`` and ``method``'s schedule at its budget: the same on any machine, however busy.

    dtr's pass ends on its own (no time limit). Checkmate's MILP takes minutes to prove its optimum on the
    small CNN, and stopped at a time limit on a busy machine it returned a schedule that recomputes a batch
    norm twice (which does not compile exactly): its optimum is shipped instead (tests/data/schedules, solved
    without a time limit), its steps read onto the graph imported here by node name.
    """
    g = _imported(key)
    if method == "checkmate":
        from remat_bench.core.budget import parse_budget
        from remat_bench.core.json_files import parse_json, read_text
        from remat_bench.core.schedule import schedule_from_dict

        path = SCHEDULES / f"{SHIPPED_SCHEDULES[key]}"
        data = parse_json(read_text(path), str(path))
        schedule = schedule_from_dict(data, g, str(path), force=True)
        budget = parse_budget(str(BUDGETS[key]), g).amount
        from remat_bench.core.simulate import simulate

        sim = simulate(g, schedule)
        assert sim.valid and sim.peak <= budget, f"{path} no longer fits the graph imported here: solve it again"
        return g, schedule.with_meta(budget=budget)
    result = run(g, method, BUDGETS[key], time_limit=None, bound=False)
    assert result.schedule is not None, result.message
    return g, result.schedule


@pytest.fixture(scope="module", params=sorted(MODELS))
def solved(request):
    return _solved(request.param)


def test_exact_mode_trains_as_eager_autograd_does(solved):
    g, schedule = solved
    report = train(g, schedule, STEPS, configurations=("schedule", "eager"))
    mine, eager = report.configurations
    assert len(mine.losses) == len(eager.losses) == STEPS
    assert mine.losses != [mine.losses[0]] * STEPS  # the model learns: the losses move
    assert report.max_loss_diff is not None and report.max_loss_diff <= 1e-5
    assert report.params_match, report.max_param_diff
    assert mine.measured_peak is not None and report.budget is not None
    assert mine.measured_peak <= report.budget
    assert abs(mine.measured_peak / report.simulated_peak - 1) <= 0.01
    assert eager.measured_peak is not None and report.budget_fraction is not None
    if report.budget_fraction <= 0.5:  # (autograd frees sooner than the baseline schedule: near 1, not below)
        assert eager.measured_peak > mine.measured_peak


def test_the_step_fills_grad_and_reuses_the_updated_parameters():
    g, schedule = _solved("gpt")
    step = ScheduledStep(g, schedule)
    params = dict(step.module.named_parameters())
    inputs, labels = batch_for_step(step.spec, 0, torch.device("cpu"))
    loss0 = step(inputs, labels, 0)
    assert all(p.grad is not None and p.grad.shape == p.shape for p in params.values())
    with torch.no_grad():
        for p in params.values():
            p -= 0.5 * p.grad
            p.grad = None
    assert float(step(inputs, labels, 0)) < float(loss0)  # the same batch after a descent step: lower loss


def test_batches_differ_by_step_and_repeat_by_seed():
    spec = ScheduledStep(*_solved("gpt")).spec
    cpu = torch.device("cpu")
    a, b = batch_for_step(spec, 1, cpu), batch_for_step(spec, 2, cpu)
    assert not torch.equal(a[0], b[0])
    assert torch.equal(a[0], batch_for_step(spec, 1, cpu)[0])


def test_bad_requests_are_one_sentence():
    g, schedule = _solved("gpt")
    with pytest.raises(TrainError, match="at least 2 steps"):
        train(g, schedule, 1)
    with pytest.raises(TrainError, match="mode must be one of"):
        train(g, schedule, 3, mode="fast")


def test_cli_trains_and_prints_json(tmp_path):
    g, schedule = _solved("gpt")
    save_graph(g, tmp_path / "g.json")
    save_schedule(schedule, g, tmp_path / "s.json")
    out = CliRunner().invoke(main, ["train", str(tmp_path / "g.json"), str(tmp_path / "s.json"), "--steps", "4",
                                    "-c", "schedule,eager", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert [c["name"] for c in data["configurations"]] == ["schedule", "eager"]
    assert data["params_match"] is True and data["max_loss_diff"] == 0.0
    assert data["configurations"][0]["measured_peak"] == data["simulated_peak"]
    bad = CliRunner().invoke(main, ["train", str(tmp_path / "g.json"), str(tmp_path / "s.json"), "-c", "nope"])
    assert bad.exit_code == 2 and "is not one of" in bad.output


def test_compiled_mode_runs_the_plan_and_trains_as_eager_within_fusion_tolerance():
    # aot_eager: the plan's partition with the graphs run uncompiled (tests/test_compiled.py runs inductor);
    # decomposed operators sum in another order than eager's, hence a tolerance instead of equality.
    g, schedule = _solved("gpt")
    report = train(g, schedule, 3, mode="compiled", configurations=("schedule", "eager", "compile"),
                   backend="aot_eager")
    mine, eager, _ = report.configurations
    assert mine.name == "schedule-compiled" and mine.note.startswith("the schedule's plan under torch.compile")
    # PyTorch's own torch.compile (inductor) against eager: the scale of what fusions do, reported beside.
    assert report.compile_max_loss_diff is not None and report.compile_max_param_diff is not None
    assert report.compile_max_loss_diff <= FUSION_RTOL * abs(eager.losses[0])
    assert report.max_loss_diff is not None and report.max_loss_diff <= FUSION_RTOL * abs(eager.losses[0])
    assert report.params_match and report.tolerance == (FUSION_RTOL, FUSION_ATOL)
    assert mine.measured_peak is not None and mine.measured_peak < eager.measured_peak
    assert report.as_compiled_peak is not None


def test_compiled_mode_with_inductor_draws_eagers_dropout_masks_and_holds_the_budget():
    # The factory CNN has dropout and batch norm. Compiled by inductor, its plan's draws are eager's seeded
    # masks (else the losses would differ at the first step), and its buffers are released at their last
    # use: the measured peak stays within the budget and below the plan as compiled (inductor saves batch
    # norm's statistics alone, where the graph's node holds its output with them).
    g, schedule = _solved("factory", "checkmate")
    report = train(g, schedule, 4, mode="compiled", configurations=("schedule", "eager", "compile"))
    mine, eager, compiled = report.configurations
    assert mine.note == "the schedule's plan under torch.compile, exactly"
    assert report.max_loss_diff is not None and report.max_loss_diff <= FUSION_RTOL * abs(eager.losses[0])
    assert report.params_match, report.max_param_diff
    assert mine.partition == [] and mine.saved_bytes is not None and 0 < mine.saved_bytes < report.budget
    assert compiled.saved_bytes is not None and compiled.saved_bytes > mine.saved_bytes
    assert eager.saved_bytes is None
    assert compiled.losses[0] != eager.losses[0]  # torch.compile's own masks: other losses
    assert report.compile_max_loss_diff is None  # so they are no measure of what fusions do
    assert "inductor's generator" in compiled.note
    assert mine.measured_peak is not None and report.budget is not None and report.as_compiled_peak is not None
    assert mine.measured_peak <= report.budget
    assert mine.measured_peak <= report.as_compiled_peak <= report.budget


def test_a_plan_over_budget_as_compiled_is_said_before_it_runs():
    # dtr recomputes the CNN's convolutions several times; compiled, each is recomputed once and held.
    g, schedule = _solved("factory", "dtr")
    report = train(g, schedule, 2, mode="compiled", configurations=("schedule",), backend="aot_eager")
    note = report.configurations[0].note
    assert report.as_compiled_peak is not None and report.budget is not None
    assert report.as_compiled_peak > report.budget
    assert note.startswith(f"as compiled, the plan's simulated peak {report.as_compiled_peak:,} is above the budget "
                           f"{report.budget:,}")
    assert "is recomputed 3 times in the backward" in note


def test_steps_are_timed_and_peaks_measured_by_the_device_measures(monkeypatch):
    # The CUDA path is these two functions' (CUDA events, the allocator's peak statistics; tests/test_costs.py
    # runs them with CPU stand-ins); here stand-ins record that every step goes through them, on the device.
    import remat_bench.torch.train as train_module

    seen: list[tuple[str, str]] = []

    def fake_run_ns(device, fn):
        seen.append(("time", device.type))
        fn()
        return 2_000_000

    def fake_peak(device, fn):
        seen.append(("peak", device.type))
        fn()
        return 1000

    monkeypatch.setattr(train_module, "run_ns", fake_run_ns)
    monkeypatch.setattr(train_module, "measure_peak", fake_peak)
    g, schedule = _solved("gpt")
    report = train(g, schedule, 4, configurations=("schedule",))
    mine = report.configurations[0]
    assert seen == [("time", "cpu"), ("peak", "cpu"), ("time", "cpu"), ("time", "cpu")]
    assert mine.measured_peak == report.fixed_bytes + 1000
    assert mine.step_times_s == [0.002, None, 0.002, 0.002] and mine.median_step_time_s == 0.002


def test_a_torchvision_resnet_compiles_its_plan_exactly():
    # aot_eager: inductor's decomposed graph and the plan's partition, run uncompiled. In-place ReLUs and
    # batch norm align, the partition saves and recomputes what the plan says. Past the first step the
    # losses part by rounding that ReLUs amplify (docs/pytorch.md, compiled mode, "Tolerance"): the first
    # loss, before any update, is compared.
    g, schedule = _solved("torchvision")
    report = train(g, schedule, 2, mode="compiled", configurations=("schedule", "eager"), backend="aot_eager")
    mine, eager = report.configurations
    assert mine.note == "the schedule's plan under torch.compile, exactly" and mine.partition == []
    assert mine.saved_bytes is not None and mine.saved_bytes > 0
    assert abs(mine.losses[0] - eager.losses[0]) <= FUSION_RTOL * abs(eager.losses[0])
    assert report.as_compiled_peak is not None and report.budget is not None
    assert report.as_compiled_peak <= report.budget
