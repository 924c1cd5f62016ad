"""`remat_bench.torch.replay` and `remat-bench replay`: schedules run with real tensors.

These tests need PyTorch. They are not skipped without it: `make install`
installs torch, and a missing torch fails the module with how to install it.
"""

from __future__ import annotations

from tests.needs_torch import torch  # first: torch, or a failure saying how to install it

# isort: split

import json
import math

import pytest
from click.testing import CliRunner

from remat_bench.app.cli import main
from remat_bench.app.pipeline import run
from remat_bench.core.baseline import baseline, baseline_schedule
from remat_bench.core.errors import ScheduleError
from remat_bench.core.graph_io import load_graph, save_graph
from remat_bench.core.provenance import measured_threads
from remat_bench.core.schedule import save_schedule
from remat_bench.core.simulate import overhead_pct, simulate
from remat_bench.methods import Status
from remat_bench.torch import measure as measure_module
from remat_bench.torch.importer import import_model
from remat_bench.torch.measure import (
    interleaved_times,
    measure_peak,
    median_interval,
    paired_overhead,
    precise_enough,
)
from remat_bench.torch.replay import (
    ATOL,
    RTOL,
    ReplayError,
    replay,
    replay_files,
    scratch_note,
)
from tests.helpers import SHIPPED, graph_path

# Costs counted, no workspace measured (import_model measures both by default: tests/test_costs.py).
FLOPS = {"durations": "flops", "workspace": "none"}
REPLAY_KEYS = {"device", "measured_peak", "simulated_peak", "outputs_match", "max_abs_diff", "wall_time_s"}


def solve(g, method: str, budget: str, time_limit: float):
    result = run(g, method, budget, time_limit, {})
    assert result.status in (Status.OPTIMAL, Status.FEASIBLE), result.message
    assert result.peak <= result.budget
    return result


def test_checkmate_schedules_match_autograd_and_their_measured_peak_falls_with_the_budget():
    # An MLP whose activations outweigh its parameters (else no budget below ~0.9 is feasible).
    g = import_model("mlp", batch=2048, input_shape=(32,), in_features=32, hidden=128, depth=3, **FLOPS)
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
    g = import_model("resnet18", batch=32, input_shape=(3, 64, 64), width=16, durations="flops", workspace="measure")
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
    g = import_model("resnet18", batch=2, input_shape=(3, 32, 32), width=8, **FLOPS)
    r = replay(g, baseline_schedule(g), "cpu", timing_run=False)
    # Measured with 1 thread; a graph whose workspaces say 64 threads was measured elsewhere.
    g.metadata["torch"]["workspace"] = {"threads": 64}
    measured_elsewhere = scratch_note(g, torch.device("cpu"), r.measured_peak, 0.5 * r.measured_peak)
    assert "measured elsewhere (" in measured_elsewhere and "threads 64 there, 1 here" in measured_elsewhere
    del g.metadata["torch"]["workspace"]
    assert "--workspace measure" in scratch_note(g, torch.device("cpu"), 2 * r.simulated_peak, r.simulated_peak)
    assert scratch_note(g, torch.device("cpu"), r.simulated_peak, r.simulated_peak) == ""


def test_a_schedule_for_another_graph_is_refused(tmp_path):
    small = import_model("mlp", batch=16, depth=1, **FLOPS)
    large = import_model("mlp", batch=32, depth=1, **FLOPS)
    save_graph(small, tmp_path / "small.json")
    save_graph(large, tmp_path / "large.json")
    save_schedule(baseline_schedule(small).with_meta(method="none"), small, tmp_path / "s.json")
    assert replay_files(tmp_path / "small.json", tmp_path / "s.json", "cpu").outputs_match
    with pytest.raises(ScheduleError, match=r"was written for graph 'torch-mlp-b16'.*refusing to replay"):
        replay_files(tmp_path / "large.json", tmp_path / "s.json", "cpu")
    # Given as a Schedule object (no file, no hash), the simulator refuses it: the nodes differ.
    other = import_model("mlp", batch=16, depth=2, **FLOPS)
    with pytest.raises(ScheduleError, match="not valid for graph"):
        replay(other, baseline_schedule(small), "cpu")
    r = CliRunner().invoke(main, ["replay", str(tmp_path / "large.json"), str(tmp_path / "s.json")])
    assert r.exit_code == 2 and "refusing to replay" in r.output


def test_cli_replay_json_prints_the_design_fields(tmp_path):
    g = import_model("mlp", batch=16, depth=1, **FLOPS)
    save_graph(g, tmp_path / "g.json")
    save_schedule(baseline_schedule(g).with_meta(method="none"), g, tmp_path / "s.json")
    r = CliRunner().invoke(main, ["replay", str(tmp_path / "g.json"), str(tmp_path / "s.json"), "--json",
                                  "--device", "cpu"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert set(data) >= REPLAY_KEYS
    assert data["device"] == "cpu" and data["outputs_match"] is True
    assert data["measured_peak"] == data["simulated_peak"] == baseline(g).peak
    assert data["tolerance"] == {"rtol": RTOL, "atol": ATOL}
    r = CliRunner().invoke(main, ["replay", str(tmp_path / "g.json"), str(tmp_path / "s.json"), "--precision", "0"])
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
        assert replay(g, baseline_schedule(g), timing_run=False).device == "cpu"


# ---------------------------------------------------------------------- the overhead against the baseline

OVERHEAD_KEYS = {"repeats", "step_time_s", "baseline_step_time_s", "measured_overhead_pct",
                 "measured_overhead_min_pct", "measured_overhead_max_pct", "measured_overhead_spread",
                 "modelled_overhead_pct", "overhead_error_pts", "baseline_measured_peak", "baseline_simulated_peak",
                 "baseline_peak_error_pct", "baseline_note", "step_times_s", "baseline_step_times_s"}


@pytest.fixture(scope="module")
def mlp_files(tmp_path_factory):
    """A small MLP (FLOPs durations) whose activations outweigh its parameters, and a greedy schedule with
    recomputations at 0.8 of its baseline peak."""
    folder = tmp_path_factory.mktemp("mlp")
    g = import_model("mlp", batch=512, input_shape=(32,), in_features=32, hidden=64, depth=3, durations="flops",
                     workspace="none")
    result = solve(g, "greedy", "0.8", 30)
    assert simulate(g, result.schedule).recomputations > 0
    save_graph(g, folder / "g.json")
    save_schedule(result.schedule, g, folder / "s.json")
    return g, result.schedule, folder


def test_paired_overhead_is_the_median_and_range_of_the_paired_ratios():
    measured = paired_overhead([1.5, 1.25, 1.0, 3.0, 1.125], [1.0] * 5)  # +50, +25, 0, +200, +12.5
    assert (measured.median_pct, measured.min_pct, measured.max_pct, measured.pairs) == (25.0, 0.0, 200.0, 5)
    assert measured.spread == 200.0
    # Ratios of pairs, not a ratio of medians: median(3, 5) / median(2, 4) - 1 would be 33.3%.
    assert paired_overhead([3.0, 5.0], [2.0, 4.0]).median_pct == 37.5
    with pytest.raises(ValueError, match="as many baseline times"):
        paired_overhead([1.0, 2.0], [1.0])


def test_interleaved_times_warm_up_each_then_alternate_and_on_cuda_wait_for_the_device(monkeypatch):
    events: list[str] = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: events.append("sync"))

    def runs(name: str):
        def prepare():
            events.append(f"prepare {name}")
            return lambda: events.append(name)
        return prepare

    schedule, base = interleaved_times(torch.device("cuda"), runs("schedule"), runs("baseline"), 2)
    assert len(schedule) == len(base) == 2 and all(t >= 0 for t in schedule + base)
    expect = []
    for name in ("baseline", "schedule") * 3:  # a warm-up of each, then two pairs
        expect += [f"prepare {name}", "sync", name, "sync"]
    assert events == expect  # each run prepared before its clock starts, timed from idle to idle
    events.clear()
    schedule, base = interleaved_times(torch.device("cpu"), runs("schedule"), None, 3)
    assert len(schedule) == 3 and base == []
    assert events == ["prepare schedule", "schedule"] * 4  # no device to wait for on the CPU


def test_the_median_interval_is_the_sign_test_order_statistics():
    # n = 9: P(B <= 1) = 10/512 <= 0.025 < P(B <= 2) = 46/512, so the 2nd and 8th smallest bracket the median.
    assert median_interval([9.0, 1.0, 8.0, 2.0, 7.0, 3.0, 6.0, 4.0, 5.0]) == (2.0, 8.0)
    assert median_interval(list(range(6))) == (0, 5)  # 6 values: min and max cover 1 - 2/64 of it
    assert median_interval(list(range(5))) is None  # 5: even min..max covers only 1 - 2/32 < 95%
    assert median_interval(list(range(60))) == (21, 38)  # the 22nd and 39th of 60, as the tables give
    measured = paired_overhead([1.1] * 6, [1.0] * 6)
    assert measured.low_pct == measured.high_pct == pytest.approx(10.0) and measured.half_width == 0.0
    assert paired_overhead([1.1] * 5, [1.0] * 5).half_width is None


def test_pairs_go_on_until_the_interval_is_narrow_enough_or_the_cap(monkeypatch):
    def runs(seconds):
        return lambda: (lambda: seconds)

    def fake_run_ns(device, fn):
        return round(fn() * 1e9)

    monkeypatch.setattr(measure_module, "run_ns", fake_run_ns)
    cpu = torch.device("cpu")
    # Every pair +10%: after 2 pairs the interval does not exist yet; at 6 it is [+10, +10].
    schedule, base = interleaved_times(cpu, runs(1.1), runs(1.0), 2, max_repeats=20, enough=precise_enough(1.0))
    assert len(schedule) == len(base) == 6
    # Pairs that alternate +0% and +20% never pin the median within +-1 point: the cap ends them.
    flip = iter([1.0, 1.0, 1.0, 1.0] + [1.0, 1.0, 1.0, 1.2] * 30)
    schedule, base = interleaved_times(cpu, lambda: (lambda: next(flip)), lambda: (lambda: next(flip)), 2,
                                       max_repeats=11, enough=precise_enough(1.0))
    assert len(schedule) == 11
    # Without a rule, exactly ``repeats`` pairs.
    schedule, _ = interleaved_times(cpu, runs(1.1), runs(1.0), 3, max_repeats=20)
    assert len(schedule) == 3


def test_a_replay_times_on_the_graph_threads_with_the_thread_clock(mlp_files):
    g, schedule, _ = mlp_files
    assert measured_threads(g.metadata) is None  # FLOPs, workspaces none: nothing measured
    before = torch.get_num_threads()
    r = replay(g, schedule, "cpu", repeats=6, precision=0, threads=1)
    assert r.threads == 1 and r.clock == "thread CPU time" and r.repeats == 6
    assert r.to_json()["measured_overhead_low_pct"] <= r.to_json()["measured_overhead_pct"]
    assert r.to_json()["measured_overhead_pct"] <= r.to_json()["measured_overhead_high_pct"]
    assert torch.get_num_threads() == before  # left as it was
    recorded = {"costs": {"measured_on": {"device": "cpu", "threads": 3}}}
    assert measured_threads(recorded) == 3  # read off the costs' record
    assert measured_threads({}) is None


def test_the_baseline_peak_on_cuda_comes_from_the_allocator_statistics(monkeypatch):
    stats = {"allocated": 1000, "max": 0}
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: stats.update(max=1000))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: stats["allocated"])
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: stats["max"])
    assert measure_peak(torch.device("cuda"), lambda: stats.update(max=5096)) == 4096


def test_the_measured_overhead_is_computed_from_the_timings_exactly(mlp_files, monkeypatch):
    g, schedule, _ = mlp_files
    clock = iter([9.0, 9.0, 2.0, 3.0, 4.0, 5.0, 2.0, 2.5])  # warm-ups, then (baseline, schedule) x 3

    def fake_run_ns(device, fn):
        fn()
        return round(next(clock) * 1e9)

    monkeypatch.setattr(measure_module, "run_ns", fake_run_ns)
    r = replay(g, schedule, "cpu", repeats=3, precision=0)
    assert r.baseline_step_times_s == [2.0, 4.0, 2.0] and r.step_times_s == [3.0, 5.0, 2.5]
    measured = r.measured_overhead
    assert (measured.median_pct, measured.min_pct, measured.max_pct) == (25.0, 25.0, 50.0)
    assert r.step_time_s == r.wall_time_s == 3.0 and r.baseline_step_time_s == 2.0
    base = baseline(g)
    sim = simulate(g, schedule)
    assert r.modelled_overhead_pct == overhead_pct(sim.duration, base.duration) > 0
    assert r.overhead_error_pts == 25.0 - r.modelled_overhead_pct
    # No operator of an MLP needs scratch: both peaks are the simulator's to the byte.
    assert r.measured_peak == sim.peak and r.baseline_measured_peak == r.baseline_simulated_peak == base.peak
    assert r.baseline_peak_error_pct == 0.0 and r.outputs_match


def test_cli_replay_json_measures_the_overhead_against_the_baseline(mlp_files):
    g, schedule, folder = mlp_files
    r = CliRunner().invoke(main, ["replay", str(folder / "g.json"), str(folder / "s.json"), "--json",
                                  "--device", "cpu", "--repeats", "3", "--precision", "0"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert set(data) >= REPLAY_KEYS | OVERHEAD_KEYS
    assert data["repeats"] == data["pairs"] == 3
    assert len(data["step_times_s"]) == len(data["baseline_step_times_s"]) == 3
    assert data["measured_overhead_low_pct"] is None  # no 95% interval from 3 pairs
    assert all(t > 0 for t in data["step_times_s"] + data["baseline_step_times_s"])
    low, mid, high = (data[f"measured_overhead_{k}"] for k in ("min_pct", "pct", "max_pct"))
    assert low <= mid <= high and data["measured_overhead_spread"] == pytest.approx(high - low)
    assert data["modelled_overhead_pct"] == overhead_pct(simulate(g, schedule).duration, baseline(g).duration)
    assert data["overhead_error_pts"] == pytest.approx(mid - data["modelled_overhead_pct"])
    assert data["baseline_measured_peak"] == data["baseline_simulated_peak"] == baseline(g).peak
    assert data["measured_peak"] < data["baseline_measured_peak"] and data["baseline_note"] == ""
    r = CliRunner().invoke(main, ["replay", str(folder / "g.json"), str(folder / "s.json"), "--repeats", "2",
                                  "--precision", "0"])
    assert r.exit_code == 0, r.output
    assert "median of 2; baseline" in r.output and "paired runs: min" in r.output and "baseline peak" in r.output
    # By default pairs go on past --repeats until the interval is narrow enough, up to --max-pairs.
    r = CliRunner().invoke(main, ["replay", str(folder / "g.json"), str(folder / "s.json"), "--json",
                                  "--repeats", "6", "--max-pairs", "9"])
    data = json.loads(r.stdout)
    assert 6 <= data["pairs"] <= 9 and data["timing_clock"] == "thread CPU time" and data["threads"] == 1
    low, mid, high = (data[f"measured_overhead_{k}"] for k in ("low_pct", "pct", "high_pct"))
    assert low <= mid <= high


def test_no_baseline_skips_it(mlp_files):
    _, _, folder = mlp_files
    r = CliRunner().invoke(main, ["replay", str(folder / "g.json"), str(folder / "s.json"), "--json",
                                  "--device", "cpu", "--repeats", "2", "--no-baseline", "--precision", "0"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert len(data["step_times_s"]) == 2 and data["baseline_step_times_s"] == []
    assert data["measured_overhead_pct"] is None and data["baseline_measured_peak"] is None
    assert data["modelled_overhead_pct"] > 0 and "--no-baseline" in data["baseline_note"]


def test_a_baseline_that_does_not_fit_is_left_out_and_the_schedule_timed_alone(mlp_files, monkeypatch):
    g, schedule, _ = mlp_files
    need = baseline(g).peak - g.fixed_memory
    # Room for the schedule's peak (checked before anything is built), not for the baseline's beyond it.
    free = math.ceil(simulate(g, schedule).peak / 0.8)
    assert need > 0.8 * free
    monkeypatch.setattr(measure_module, "free_memory_bytes", lambda device: free)
    r = replay(g, schedule, "cpu", repeats=1)
    assert r.baseline_measured_peak is None and r.measured_overhead is None and r.baseline_step_times_s == []
    assert r.baseline_note.startswith(f"it needs {need:,} bytes, more than 80% of the {free:,} bytes free on cpu")
    assert len(r.step_times_s) == 1 and r.outputs_match


def test_repeats_below_one_are_refused_in_one_sentence(mlp_files):
    g, schedule, folder = mlp_files
    r = CliRunner().invoke(main, ["replay", str(folder / "g.json"), str(folder / "s.json"), "--repeats", "0"])
    assert r.exit_code == 2 and "Traceback" not in r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: Invalid value for '--repeats': 0 is not in the range "
                                                   "1<=x<=10000.")
    with pytest.raises(ReplayError, match="at least once"):
        replay(g, schedule, "cpu", repeats=0)
