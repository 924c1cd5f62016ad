"""`remat_bench.torch.replay` and `remat-bench replay`: schedules run with real tensors.

These tests need PyTorch. They are not skipped without it: `make install`
installs torch, and a missing torch fails the module with how to install it.
"""

from __future__ import annotations

from tests.needs_torch import torch  # first: torch, or a failure saying how to install it

# isort: split

import json

import pytest
from click.testing import CliRunner

from remat_bench.app.cli import main
from remat_bench.app.pipeline import run
from remat_bench.core.errors import ScheduleError
from remat_bench.core.graph import load_graph, save_graph
from remat_bench.core.schedule import save_schedule
from remat_bench.core.simulate import baseline, baseline_schedule
from remat_bench.methods import Status
from remat_bench.torch.importer import import_model
from remat_bench.torch.replay import ATOL, RTOL, ReplayError, replay, replay_files, scratch_note
from tests.helpers import SHIPPED, graph_path

REPLAY_KEYS = {"device", "measured_peak", "simulated_peak", "outputs_match", "max_abs_diff", "wall_time_s"}


def solve(g, method: str, budget: str, time_limit: float):
    result = run(g, method, budget, time_limit, {})
    assert result.status in (Status.OPTIMAL, Status.FEASIBLE), result.message
    assert result.peak <= result.budget
    return result


def test_checkmate_schedules_match_autograd_and_their_measured_peak_falls_with_the_budget():
    # An MLP whose activations outweigh its parameters (else no budget below ~0.9 is feasible).
    g = import_model("mlp", batch=2048, input_shape=(32,), in_features=32, hidden=128, depth=3)
    runs = [replay(g, baseline_schedule(g), "cpu", timing_run=False)]
    for budget in ("0.85", "0.7"):
        result = solve(g, "checkmate", budget, 60)
        measured = replay(g, result.schedule, "cpu", timing_run=False)
        assert measured.recomputations > 0
        assert measured.simulated_peak == result.peak
        runs.append(measured)
    for measured in runs:
        # CPU kernels are deterministic: recomputation reproduces autograd bit for bit.
        assert measured.outputs_match and measured.max_abs_diff == 0.0 and measured.max_rel_diff == 0.0
        assert measured.measured_peak == measured.simulated_peak  # no operator of an MLP needs scratch
    peaks = [m.measured_peak for m in runs]
    assert peaks[0] > peaks[1] > peaks[2]
    assert peaks[2] <= 0.7 * baseline(g).peak


def test_a_moccasin_schedule_for_resnet18_matches_autograd_and_saves_memory():
    # Workspaces measured here: the scratch of oneDNN's convolutions differs by processor (on
    # an AVX2-only x86 one a 3x3 weight gradient runs as an im2col GEMM with four times the
    # weights in scratch), and a schedule is only as exact as the workspaces it was solved with.
    g = import_model("resnet18", batch=32, input_shape=(3, 64, 64), width=16, workspace="measure")
    result = solve(g, "moccasin", "0.7", 15)  # CP-SAT finds a schedule within a few seconds
    before = replay(g, baseline_schedule(g), "cpu", timing_run=False)
    after = replay(g, result.schedule, "cpu", timing_run=False)
    for measured in (before, after):
        assert measured.outputs_match and measured.max_abs_diff <= ATOL
        assert measured.measured_fixed == g.fixed_memory
        assert measured.measured_peak == measured.simulated_peak
    assert after.simulated_peak == result.peak
    assert after.measured_peak < 0.75 * before.measured_peak


def test_replay_says_when_operators_allocate_scratch_the_graph_does_not_model():
    g = import_model("resnet18", batch=2, input_shape=(3, 32, 32), width=8)
    r = replay(g, baseline_schedule(g), "cpu", timing_run=False)
    # Measured with 1 thread; a graph whose workspaces say 64 threads was measured elsewhere.
    g.metadata["torch"]["workspace"] = {"threads": 64}
    measured_elsewhere = scratch_note(g, torch.device("cpu"), r.measured_peak, 0.5 * r.measured_peak)
    assert "measured elsewhere (" in measured_elsewhere and "threads 64 there, 1 here" in measured_elsewhere
    del g.metadata["torch"]["workspace"]
    assert "--workspace measure" in scratch_note(g, torch.device("cpu"), 2 * r.simulated_peak, r.simulated_peak)
    assert scratch_note(g, torch.device("cpu"), r.simulated_peak, r.simulated_peak) == ""


def test_a_schedule_for_another_graph_is_refused(tmp_path):
    small = import_model("mlp", batch=16, depth=1)
    large = import_model("mlp", batch=32, depth=1)
    save_graph(small, tmp_path / "small.json")
    save_graph(large, tmp_path / "large.json")
    save_schedule(baseline_schedule(small).with_meta(method="none"), small, tmp_path / "s.json")
    assert replay_files(tmp_path / "small.json", tmp_path / "s.json", "cpu").outputs_match
    with pytest.raises(ScheduleError, match=r"was written for graph 'torch-mlp-b16'.*refusing to replay"):
        replay_files(tmp_path / "large.json", tmp_path / "s.json", "cpu")
    # Given as a Schedule object (no file, no hash), the simulator refuses it: the nodes differ.
    other = import_model("mlp", batch=16, depth=2)
    with pytest.raises(ScheduleError, match="not valid for graph"):
        replay(other, baseline_schedule(small), "cpu")
    r = CliRunner().invoke(main, ["replay", str(tmp_path / "large.json"), str(tmp_path / "s.json")])
    assert r.exit_code == 2 and "refusing to replay" in r.output


def test_cli_replay_json_prints_the_design_fields(tmp_path):
    g = import_model("mlp", batch=16, depth=1)
    save_graph(g, tmp_path / "g.json")
    save_schedule(baseline_schedule(g).with_meta(method="none"), g, tmp_path / "s.json")
    r = CliRunner().invoke(main, ["replay", str(tmp_path / "g.json"), str(tmp_path / "s.json"), "--json",
                                  "--device", "cpu"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert set(data) >= REPLAY_KEYS
    assert data["device"] == "cpu" and data["outputs_match"] is True
    assert data["measured_peak"] == data["simulated_peak"] == baseline(g).peak
    assert data["tolerance"] == {"rtol": RTOL, "atol": ATOL}
    r = CliRunner().invoke(main, ["replay", str(tmp_path / "g.json"), str(tmp_path / "s.json")])
    assert r.exit_code == 0 and "outputs match autograd" in r.output and "measured peak" in r.output


@pytest.mark.parametrize("graph, method", [
    ("paper:random_layered_n100", "none"),
    ("chain-16-train.json", "chen"),
    ("resnet18-b8-r64-train.json", "greedy"),
])
def test_synthetic_replay_of_other_graphs_measures_the_simulated_peak(graph, method):
    g = load_graph(graph_path(graph))
    result = solve(g, method, "1" if method == "none" else "0.9", 30)
    measured = replay(g, result.schedule, "cpu", timing_run=False)
    assert measured.mode == "synthetic" and measured.outputs_match is None
    assert measured.measured_fixed == g.fixed_memory
    # Each node is one uint8 tensor of its size; the reduction that reads the inputs allocates
    # a couple of bytes of its own.
    assert measured.simulated_peak <= measured.measured_peak <= measured.simulated_peak + 16


def test_device_resolution():
    g = load_graph(SHIPPED / "chain-16-train.json")
    if torch.cuda.is_available():
        assert replay(g, baseline_schedule(g), "cuda", timing_run=False).device.startswith("cuda")
    else:
        with pytest.raises(ReplayError, match="sees no CUDA device"):
            replay(g, baseline_schedule(g), "cuda")
        assert replay(g, baseline_schedule(g)).device == "cpu"
