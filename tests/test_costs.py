"""Costs of imported graphs: operators calibrated on this machine (cached by signature), workspaces measured,
the fallback when the step cannot run here, and where the costs came from (`remat_bench.core.provenance`).

These tests need PyTorch. They are not skipped without it: `make install`
installs torch, and a missing torch fails the module with how to install it.
"""

from __future__ import annotations

from tests.needs_torch import torch  # first: torch, or a failure saying how to install it

# isort: split

import json
import warnings

import pytest
from click.testing import CliRunner

from remat_bench.app.cli import main
from remat_bench.app.pipeline import run
from remat_bench.app.report.write import cost_sources, write_report
from remat_bench.app.sweep import load_config, load_table, run_sweep
from remat_bench.core.baseline import baseline
from remat_bench.core.graph_io import save_graph
from remat_bench.core.provenance import CostSource, CostWarning, cost_source, mixed_sources
from remat_bench.methods import Status
from remat_bench.torch import calibrate as calibrate_module
from remat_bench.torch import importer
from remat_bench.torch import measure as measure_module
from remat_bench.torch.calibrate import CostCache, calibrate, machine_key, op_signature, signature_key
from remat_bench.torch.importer import import_model
from remat_bench.torch.program import build_program
from remat_bench.torch.replay import replay
from remat_bench.torch.spec import model_spec
from remat_bench.torch.zoo import ModelSpecError

nn = torch.nn
F = torch.nn.functional
CNN = "tests.test_costs:residual_cnn"
CNN_ARGS = {"batch": 16, "input_shape": (3, 16, 16)}


class Block(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        return F.relu(x + self.bn2(self.conv2(h)))


def residual_cnn(channels: int = 8, blocks: int = 3) -> nn.Module:
    """A small residual CNN with batchnorm whose activations outweigh its parameters."""
    return nn.Sequential(nn.Conv2d(3, channels, 3, padding=1), *(Block(channels) for _ in range(blocks)),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, 5))


class Counting:
    """A stand-in for a measuring function that counts its calls and passes them on."""

    def __init__(self, real):
        self.real, self.calls = real, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.real(*args, **kwargs)


@pytest.fixture
def counted(monkeypatch):
    """The operator timer and the peak measurement the calibration uses, counted."""
    timer, peak = Counting(calibrate_module.op_ns), Counting(calibrate_module.measure_peak)
    monkeypatch.setattr(calibrate_module, "op_ns", timer)
    monkeypatch.setattr(calibrate_module, "measure_peak", peak)
    return timer, peak


def test_a_second_import_measures_nothing_and_gives_the_same_graph(tmp_path, counted):
    timer, peak = counted
    cache = CostCache(tmp_path / "costs.json")
    first = import_model(CNN, **CNN_ARGS, cost_cache=cache, repeats=3)
    costs = first.metadata["costs"]
    # Every node of a signature timed, in place, in each of the 3 passes; its samples pooled: identical
    # operators of the repeated blocks make one signature, so fewer signatures than nodes timed.
    assert timer.calls % 3 == 0 and 0 < costs["counts"]["timed"] < timer.calls // 3 <= first.n
    assert costs["counts"]["measured"] == peak.calls
    nodes_timed = timer.calls // 3
    timer.calls = peak.calls = 0
    again = import_model(CNN, **CNN_ARGS, cost_cache=CostCache(tmp_path / "costs.json"), repeats=3)
    assert (timer.calls, peak.calls) == (0, 0)
    assert again.metadata["costs"]["counts"]["from_cache"] == again.n
    assert again.sha256 == first.sha256  # a sweep resumes on the same graph
    # A cache timed with fewer runs than asked is timed again; one timed with more answers.
    import_model(CNN, **CNN_ARGS, cost_cache=CostCache(tmp_path / "costs.json"), repeats=2)
    assert timer.calls == 0
    import_model(CNN, **CNN_ARGS, cost_cache=CostCache(tmp_path / "costs.json"), repeats=4, workspace="none")
    assert timer.calls == 4 * nodes_timed and peak.calls == 0


def test_the_median_of_the_timed_runs_is_kept():
    program = build_program(model_spec("mlp", batch=4, kwargs={"depth": 1}))
    runs: dict[int, int] = {}

    def timer(device, fn):  # each node's runs, pass after pass, take 50, 10, 40, 20, 30
        fn()
        v = fn.args[0]
        runs[v] = runs.get(v, 0) + 1
        return [50, 10, 40, 20, 30][runs[v] - 1]

    cache = CostCache(None)
    measured = calibrate(program, torch.device("cpu"), workspace=False, repeats=5, cache=cache, timer=timer)
    assert measured is not None and measured.durations is not None
    assert set(measured.durations) == {30}  # the median of 50, 10, 40, 20, 30 (not the least, 10)
    entry = next(iter(cache.entries.values()))
    nodes = len(entry["samples"]) // 5  # the nodes of its signature, each timed in each pass
    assert sorted(entry["samples"]) == sorted([50, 10, 40, 20, 30] * nodes) and entry["ns"] == 30
    assert entry["statistic"] == "median" and entry["timed"] == "in place, in whole steps"


def test_the_signature_tells_shapes_and_machines_apart():
    def signatures(batch: int) -> dict[str, dict]:
        program = build_program(model_spec("mlp", batch=batch, kwargs={"depth": 2}))
        return {nd.id: op_signature(nd) for nd in program.nodes}

    small, large = signatures(4), signatures(8)
    assert small["addmm"]["op"] == "aten.addmm.default"
    assert small["addmm"] != large["addmm"]  # the batch is in the shapes read and written
    assert small["relu"] == small["relu_1"]  # the same operator on the same shapes: measured once
    here = machine_key(torch.device("cpu"))
    assert here["torch"] == torch.__version__ and here["threads"] == torch.get_num_threads()
    other = {**here, "threads": here["threads"] + 1}
    assert signature_key(small["addmm"], here) != signature_key(small["addmm"], other)
    assert signature_key(small["addmm"], here) == signature_key(dict(small["addmm"]), dict(here))
    assert signature_key(small["addmm"], here) != signature_key(large["addmm"], here)


@pytest.mark.parametrize("content", ["{not json", '{"format": "something-else", "entries": {}}', "\x00\xff"])
def test_a_corrupt_cache_is_ignored_with_a_warning_and_left_as_it_is(tmp_path, content):
    path = tmp_path / "costs.json"
    path.write_bytes(content.encode("latin-1"))
    with pytest.warns(CostWarning, match=r"operator cost cache .*costs.json was ignored and is left as it is"):
        g = import_model("mlp", batch=4, depth=1, cost_cache=CostCache(path), repeats=1)
    assert g.units["duration"] == "ns"
    assert path.read_bytes() == content.encode("latin-1")  # not a cost cache: perhaps someone's file


def test_a_corrupt_cache_on_the_command_line_is_one_warning_never_a_traceback(tmp_path, monkeypatch):
    from remat_bench.toolkit import child

    monkeypatch.setattr(child, "can_spawn", lambda: False)  # in this process: a child takes seconds to start
    path = tmp_path / "costs.json"
    path.write_text("[1, 2")
    monkeypatch.setenv("REMAT_BENCH_COST_CACHE", str(path))
    r = CliRunner().invoke(main, ["graphs", "import-torch", "mlp", "--batch", "4", "--kwarg", "depth=1",
                                  "--repeats", "1", "-o", str(tmp_path / "g.json")])
    assert r.exit_code == 0, r.output
    assert "Traceback" not in r.output and "warning: the operator cost cache" in r.output
    assert ("costs: durations calibrated (median of 1 pass of the step, each operator in place, ns); workspaces "
            "measured; on cpu") in r.output


def test_the_costs_are_recorded_and_shown(tmp_path, monkeypatch):
    g = import_model("mlp", batch=4, depth=1, repeats=3)
    costs = g.metadata["costs"]
    assert costs["durations"] == "calibrated" and costs["duration_unit"] == "ns" and g.units["duration"] == "ns"
    assert costs["workspace"] == "measured" and costs["statistic"] == "median" and costs["repeats"] == 3
    assert costs["requested"] == {"durations": "calibrated", "workspace": "auto"} and costs["notes"] == []
    where = costs["measured_on"]
    assert where["device"] == "cpu" and where["torch"] == torch.__version__
    assert where["threads"] == torch.get_num_threads() and where["processor"] is not None and costs["when"]
    path = tmp_path / "g.json"
    save_graph(g, path)
    shown = CliRunner().invoke(main, ["graphs", "show", str(path)])
    assert shown.exit_code == 0
    text = " ".join(shown.output.split())
    assert ("costs durations calibrated (median of 3 passes of the step, each operator in place, ns); workspaces "
            "measured; on cpu") in text
    assert f"{where['threads']} thread" in text and f"torch {torch.__version__}" in text
    data = json.loads(CliRunner().invoke(main, ["graphs", "show", str(path), "--json"]).stdout)
    assert data["costs"]["durations"] == "calibrated" and data["costs"]["warning"] is None
    solved = CliRunner().invoke(main, ["solve", str(path), "-m", "none", "-b", "1", "--no-bound"])
    assert "costs" in solved.stdout and "durations calibrated" in solved.stdout and "warning" not in solved.output
    # A FLOPs import without workspaces: shown as such, and solving it warns that real peaks can be higher.
    counted = import_model("mlp", batch=4, depth=1, durations="flops", workspace="none")
    assert counted.metadata["costs"]["workspace"] == "none" and counted.metadata["costs"]["measured_on"] is None
    save_graph(counted, path)
    solved = CliRunner().invoke(main, ["solve", str(path), "-m", "none", "-b", "1", "--no-bound"])
    assert solved.exit_code == 0
    assert "warning: graph 'torch-mlp-b4' was imported without measuring its operators' scratch memory" in \
        " ".join(solved.stderr.split())
    assert "durations counted (flops, not timed); workspaces 0 (not measured)" in " ".join(solved.stdout.split())


def test_profile_is_the_former_name_of_calibrated():
    g = import_model("mlp", batch=4, depth=1, durations="profile", repeats=1)
    assert g.metadata["costs"]["durations"] == "calibrated" and g.units["duration"] == "ns"
    assert g.metadata["costs"]["requested"]["durations"] == "calibrated"


def test_a_default_import_models_scratch_memory_so_a_replay_peaks_where_the_simulator_says():
    g = import_model(CNN, **CNN_ARGS)
    assert g.units["duration"] == "ns" and g.metadata["costs"]["workspace"] == "measured"
    # oneDNN's convolutions and batchnorm backward allocate scratch on CPU: measured, not left at 0.
    scratch = {g.nodes[v].op for v in range(g.n) if g.workspace[v] > 0}
    assert "aten.convolution_backward.default" in scratch or "aten.convolution.default" in scratch
    result = run(g, "dtr", "0.5", 10, {}, bound=False)  # DTR's online eviction: a schedule within 0.1 s
    assert result.status in (Status.OPTIMAL, Status.FEASIBLE), result.message
    measured = replay(g, result.schedule, "cpu", timing_run=False)
    assert measured.outputs_match and measured.recomputations > 0
    assert measured.simulated_peak <= 0.5 * baseline(g).peak
    assert abs(measured.measured_peak - measured.simulated_peak) <= 0.01 * measured.simulated_peak


def test_a_step_too_large_to_run_here_falls_back_to_flops_and_says_so(monkeypatch, counted, tmp_path):
    timer, peak = counted
    monkeypatch.setattr(importer, "free_memory_bytes", lambda device: 1000)
    said = (r"^the costs of model 'mlp' were not measured: running its step needs about .* on cpu \(its baseline "
            r"peak .* and a quarter more for scratch memory\), and 1,000 is free; its durations are FLOPs and "
            r"workspaces are 0, so a real run's peak can exceed the simulated one$")
    with pytest.warns(CostWarning, match=said):
        g = import_model("mlp", batch=4, depth=1, cost_cache=CostCache(tmp_path / "c.json"))
    assert (timer.calls, peak.calls) == (0, 0)
    costs = g.metadata["costs"]
    assert g.units["duration"] == "flops" and not g.workspace.any() and "workspace" not in g.metadata["torch"]
    assert costs["durations"] == "flops" and costs["workspace"] == "unmeasured" and costs["measured_on"] is None
    assert costs["requested"] == {"durations": "calibrated", "workspace": "auto"} and len(costs["notes"]) == 1
    assert "could not be measured here" in cost_source(g).describe()
    with pytest.raises(ModelSpecError, match="cannot run here to measure its workspaces"):
        import_model("mlp", batch=4, depth=1, workspace="measure", cost_cache=CostCache(tmp_path / "c.json"))
    # What the cache already knows needs no run, whatever the memory.
    monkeypatch.undo()
    import_model("mlp", batch=4, depth=1, repeats=1, cost_cache=CostCache(tmp_path / "c.json"))
    monkeypatch.setattr(importer, "free_memory_bytes", lambda device: 1000)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CostWarning)
        known = import_model("mlp", batch=4, depth=1, repeats=1, cost_cache=CostCache(tmp_path / "c.json"))
    assert known.metadata["costs"]["durations"] == "calibrated"


def test_a_step_not_measured_in_time_falls_back_and_keeps_what_it_measured(monkeypatch, counted, tmp_path):
    timer, peak = counted

    class Clock:  # the deadline passes at the 20th node of the pass
        calls = 0

        @classmethod
        def time(cls) -> float:
            cls.calls += 1
            return 0.0 if cls.calls < 20 else 100.0

    monkeypatch.setattr(calibrate_module, "time", Clock)
    with pytest.warns(CostWarning, match=r"^the costs of model 'mlp' were not measured: not every operator was "
                                         r"measured in the time allowed \(those measured are cached: importing it "
                                         r"again goes on from there\); its durations are FLOPs and workspaces are 0"):
        g = import_model("mlp", batch=4, depth=3, repeats=1, cost_cache=CostCache(tmp_path / "c.json"),
                         measure_deadline=50.0)
    assert g.units["duration"] == "flops" and g.metadata["costs"]["workspace"] == "unmeasured"
    first = timer.calls + peak.calls
    assert first > 0
    monkeypatch.undo()
    timer.calls = peak.calls = 0
    monkeypatch.setattr(calibrate_module, "op_ns", timer)
    monkeypatch.setattr(calibrate_module, "measure_peak", peak)
    again = import_model("mlp", batch=4, depth=3, repeats=1, cost_cache=CostCache(tmp_path / "c.json"))
    assert again.units["duration"] == "ns"
    resumed = again.metadata["costs"]["counts"]["measured"]
    full = import_model("mlp", batch=4, depth=3, repeats=1, cost_cache=CostCache(None))
    # The workspaces measured before the deadline (the warm-up pass measures them) are not measured again;
    # durations are timed in whole passes, so an interrupted calibration times them all again.
    assert 0 < resumed < full.metadata["costs"]["counts"]["measured"]


def test_the_command_line_warns_of_the_fallback_in_one_sentence(monkeypatch, tmp_path):
    from remat_bench.toolkit import child

    monkeypatch.setattr(child, "can_spawn", lambda: False)  # the import runs here, where the patch holds
    monkeypatch.setattr(importer, "free_memory_bytes", lambda device: 1000)
    out = tmp_path / "g.json"
    r = CliRunner().invoke(main, ["graphs", "import-torch", "mlp", "--batch", "4", "--kwarg", "depth=1",
                                  "-o", str(out)])
    assert r.exit_code == 0, r.output
    said = " ".join(r.stderr.split())
    assert said.startswith("warning: the costs of model 'mlp' were not measured: running its step needs about")
    assert said.count(". ") == 0 and r.stderr.strip().count("\n") == 0
    assert "costs: durations counted (flops, not timed); workspaces 0 (not measured: the step could not be measured " \
        "here)" in " ".join(r.stdout.split())
    r = CliRunner().invoke(main, ["graphs", "import-torch", "mlp", "--batch", "4", "--workspace", "measure",
                                  "-o", str(out)])
    assert r.exit_code == 2 and "cannot run here to measure its workspaces" in r.output and "Traceback" not in r.output


def test_cuda_timing_and_free_memory_with_cpu_stand_ins(monkeypatch):
    recorded: list[str] = []

    class Event:

        def __init__(self, enable_timing: bool = False) -> None:
            assert enable_timing

        def record(self) -> None:
            recorded.append("record")

        def synchronize(self) -> None:
            recorded.append("synchronize")

        def elapsed_time(self, end) -> float:
            return 2.5  # milliseconds, as CUDA events give it

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (3 * 2**30, 8 * 2**30))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Stand-in GPU")
    cuda = torch.device("cuda")
    ran = []
    assert measure_module.time_ns(cuda, lambda: ran.append(1)) == 2_500_000 and ran == [1]
    assert recorded == ["record", "record", "synchronize"]  # the end event waited for, once
    assert measure_module.free_memory_bytes(cuda) == 3 * 2**30
    gpu, cpu = machine_key(cuda), machine_key(torch.device("cpu"))
    assert gpu["gpu"] == "Stand-in GPU" and gpu["device"] == "cuda" and "gpu" not in cpu
    signature = {"op": "aten.mm.default"}
    assert signature_key(signature, gpu) != signature_key(signature, cpu)


def test_measuring_on_a_cuda_device_that_is_not_there_is_one_sentence(monkeypatch):
    from remat_bench.core.errors import GraphError

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(GraphError, match=r"^device 'cuda' is not available here to measure the costs on"):
        import_model("mlp", batch=4, depth=1, device="cuda")
    assert import_model("mlp", batch=4, depth=1, device="cuda", durations="flops", workspace="none").n > 0


def test_mixed_cost_sources_are_said_in_one_sentence(tmp_path):
    counted = CostSource("flops", "flops", "none", True)
    given = CostSource("file", "flops", "file", False)
    here = CostSource("calibrated", "ns", "measured", True, {"device": "cpu", "processor": "A", "threads": 2})
    there = CostSource("calibrated", "ns", "measured", True, {"device": "cpu", "processor": "B", "threads": 2})
    assert mixed_sources({"a": counted, "b": given}) is None
    assert mixed_sources({"a": here, "b": here, "c": None}) is None
    said = mixed_sources({"a": counted, "b": here})
    assert said == ("these graphs' durations come from different sources (counted or given (not timed) for a; "
                    "timed on cpu, A, 2 threads for b), so their overheads are not measured alike")
    assert "timed on cpu, B" in mixed_sources({"a": here, "b": there})
    # A report over a FLOPs import and a calibrated one says so, and gives each graph's costs.
    paths = []
    for name, durations in (("mlp-flops", "flops"), ("mlp-calibrated", "calibrated")):
        paths.append(tmp_path / f"{name}.json")
        save_graph(import_model("mlp", batch=4, depth=1, durations=durations, repeats=1, name=name), paths[-1])
    config = tmp_path / "sweep.yaml"
    config.write_text(f"name: mixed\ngraphs:\n  - {paths[0]}\n  - {paths[1]}\nmethods: [none]\nbudgets: [1.0]\n"
                      "time_limit: 10\n")
    run_sweep(load_config(config, output=tmp_path / "out"), workers=1)
    table = load_table(tmp_path / "out")
    assert {k: v.durations for k, v in cost_sources(tmp_path / "out", table).items()} == {
        "mlp-flops": "flops", "mlp-calibrated": "calibrated"}
    text = write_report(tmp_path / "out", tmp_path / "report.md").read_text()
    assert text.count("Note: these graphs' durations come from different sources") == 1
    assert ("Costs: durations calibrated (median of 1 pass of the step, each operator in place, ns); workspaces "
            "measured; on cpu") in text
    assert "Costs: durations counted (flops, not timed); workspaces measured; on cpu" in text


def test_a_sweeps_torch_entry_takes_the_same_cost_options(tmp_path):
    from remat_bench.core.errors import ConfigError

    config = tmp_path / "c.yaml"
    config.write_text("graphs:\n  - torch: {model: mlp, batch: 2, durations: flops, workspace: none, repeats: 3}\n"
                      "methods: [none]\nbudgets: [0.9]\n")
    (pending,) = load_config(config).pending
    assert pending.options["durations"] == "flops" and pending.options["workspace"] == "none"
    assert pending.options["repeats"] == 3
    config.write_text("graphs:\n  - torch: {model: mlp, workspace: sometimes}\nmethods: [none]\nbudgets: [0.9]\n")
    with pytest.raises(ConfigError, match=r"line 2: 'workspace' must be one of auto, measure, none, not 'sometimes'"):
        load_config(config)
