"""benchmarks/gpu_check.py: the GPU check's CPU stand-in end to end, and its CUDA-only helpers with stand-ins.

The check runs once (``--device cpu --small``, the four fast methods) into a
temporary folder; the tests read its JSON and Markdown. On the CPU the replay
measures the allocator's peak from the profiler's memory events, which equal
the simulated peaks to the byte where the graph's workspaces were measured.
The CUDA helpers (reserved peaks, the device's description) run against
stand-ins for the ``torch.cuda`` calls they make.
"""

from __future__ import annotations

from tests.needs_torch import torch  # first: torch, or a failure saying how to install it

# isort: split

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from benchmarks import gpu_check
from remat_bench.core.baseline import baseline_schedule
from remat_bench.core.device_profile import load_device_profile
from remat_bench.core.errors import MethodError
from remat_bench.torch.importer import import_model
from remat_bench.torch.replay import replay

METHODS = ("knapsack", "dtr", "greedy", "chen")


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, Any], str]:
    out = tmp_path_factory.mktemp("gpu-check")
    status = gpu_check.main(["--device", "cpu", "--small", "--out", str(out), "--methods", ",".join(METHODS)])
    report = json.loads((out / gpu_check.JSON_NAME).read_text())
    return status, report, (out / gpu_check.MARKDOWN_NAME).read_text()


def _replayed(report: dict[str, Any], label: str) -> list[dict[str, Any]]:
    model = next(m for m in report["models"] if m["label"] == label)
    return [row for row in model["runs"] if row.get("replay")]


def test_every_model_method_and_budget_is_a_row(checked: tuple[int, dict[str, Any], str]) -> None:
    status, report, _ = checked
    assert status == 0
    assert report["environment"]["device"] == "cpu" and report["environment"]["gpu"] is None
    assert report["environment"]["torch"] == torch.__version__
    assert report["small"] is True and report["methods"] == list(METHODS)
    assert report["profile"] == "h100" and "no GPU" in report["profile_note"]
    assert [m["label"] for m in report["models"]] == ["resnet50", "llama"]
    for model in report["models"]:
        assert "error" not in model and model["skipped"] == []
        pairs = [(row["method"], row["budget"]) for row in model["runs"]]
        assert pairs == [(method, budget) for budget in (0.7, 0.5) for method in METHODS]
        assert model["durations"] == "calibrated" and model["duration_unit"] == "ns"
        assert model["workspace"] == "measured"


def test_every_schedule_found_is_replayed_and_trained(checked: tuple[int, dict[str, Any], str]) -> None:
    _, report, _ = checked
    for model in report["models"]:
        found = [row for row in model["runs"] if row["status"] in ("feasible", "optimal")]
        assert found, f"{model['label']}: no method found a schedule at 0.7 or 0.5"
        for row in found:
            assert row["simulated_peak"] <= row["budget_bytes"]
            rep, trained = row["replay"], row["train"]
            assert rep["simulated_peak"] == row["simulated_peak"] and rep["outputs_match"] is True
            # The replay and the training step measure the same schedule on the same allocator.
            assert trained["measured_peak"] == rep["measured_peak"]
            assert trained["simulated_peak"] == row["simulated_peak"] and trained["params_match"] in (True, None)
            assert len(trained["losses"]) == gpu_check.SMALL_TRAIN_STEPS
        for row in model["runs"]:
            if row["status"] not in ("feasible", "optimal"):
                assert "replay" not in row and row["message"]


def test_cpu_peaks_equal_the_simulated_ones(checked: tuple[int, dict[str, Any], str]) -> None:
    _, report, _ = checked
    for row in _replayed(report, "resnet50"):
        assert row["replay"]["measured_peak"] == row["simulated_peak"]
        assert row["replay"]["peak_error_bytes"] == 0 and row["replay"]["reserved_peak"] is None
    # transformers' eager attention traces a 4-byte constant (lift_fresh_copy) that the graph counts and the CPU
    # replay does not allocate: one offset, the baseline's too, the same for every schedule.
    offsets = {row["replay"]["peak_error_bytes"] for row in _replayed(report, "llama")}
    offsets |= {row["replay"]["baseline_measured_peak"] - row["replay"]["baseline_simulated_peak"]
                for row in _replayed(report, "llama")}
    assert len(offsets) == 1 and abs(offsets.pop()) <= 8


def test_overheads_and_errors_are_the_tools_own(checked: tuple[int, dict[str, Any], str]) -> None:
    _, report, _ = checked
    for model in report["models"]:
        base = model["baseline"]
        assert base["calibrated_duration"] > 0 and base["roofline_duration_ns"] > 0
        assert base["replays"] == len(_replayed(report, model["label"]))
        assert base["measured_replay_step_s"] > 0 and base["eager_train"]["median_step_time_s"] > 0
        for row in _replayed(report, model["label"]):
            rep = row["replay"]
            assert rep["pairs"] == gpu_check.PAIRS
            assert rep["modelled_overhead_pct"] == pytest.approx(row["modelled_overhead_pct"])
            assert rep["measured_overhead_low_pct"] <= rep["measured_overhead_pct"] <= rep["measured_overhead_high_pct"]
            measured = rep["measured_overhead_pct"]
            assert rep["overhead_error_pts"] == pytest.approx(measured - row["modelled_overhead_pct"])
            assert rep["profile_error_pts"] == pytest.approx(measured - row["profile_overhead_pct"])
            assert math.isfinite(row["profile_overhead_pct"]) and row["recomputations"] >= 0


def test_the_markdown_lists_the_same_rows(checked: tuple[int, dict[str, Any], str]) -> None:
    _, report, text = checked
    sections = re.split(r"^## ", text, flags=re.M)[1:]
    assert [s.split(":", 1)[0] for s in sections] == ["resnet50", "llama"]
    for model, section in zip(report["models"], sections):
        rows = [line.split(" | ") for line in section.splitlines() if line.startswith("| ")
                and line[2:].split(" | ")[0] in METHODS]
        assert [(r[0][2:], float(r[1]), r[2]) for r in rows] == [
            (row["method"], row["budget"], row["status"]) for row in model["runs"]]
        for cells, row in zip(rows, model["runs"]):
            if row.get("replay"):
                assert cells[4] == f"{row['replay']['measured_peak']:,}" and cells[7] == "yes"
    assert "CPU stand-in: no reserved peaks" in text


def test_a_budget_too_short_skips_and_says_so(tmp_path: Path) -> None:
    assert gpu_check.main(["--device", "cpu", "--out", str(tmp_path), "--time-budget", "5.5"]) == 0
    report = json.loads((tmp_path / gpu_check.JSON_NAME).read_text())
    assert [m["skipped"] for m in report["models"]] == [["resnet50, all of it: out of time"],
                                                         ["llama, all of it: out of time"]]
    assert "- skipped: llama, all of it: out of time" in (tmp_path / gpu_check.MARKDOWN_NAME).read_text()


@pytest.mark.parametrize("argv, says", [
    (["--device", "cuda"], "torch sees no CUDA device"),
    (["--methods", "fastest"], "unknown method 'fastest'"),
    (["--time-budget", "2"], "--time-budget must be"),
])
def test_bad_command_lines_are_one_sentence(argv: list[str], says: str, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_check.main([*argv, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1 and not (tmp_path / gpu_check.JSON_NAME).exists()


# ---------------------------------------------------------------------- choices


@pytest.mark.parametrize("name, profile, matched", [
    ("NVIDIA H200", "h200", True), ("NVIDIA H100 80GB HBM3", "h100", True), ("NVIDIA H100 PCIe", "h100-pcie", True),
    ("NVIDIA A100-SXM4-80GB", "a100", True), ("NVIDIA L4", "l4", True), ("NVIDIA L40S", "h100", False),
    ("Tesla T4", "h100", False),
])
def test_the_profile_follows_the_gpu_name(name: str, profile: str, matched: bool) -> None:
    chosen, note = gpu_check.profile_for(name)
    assert chosen == profile and (note == "") == matched
    assert matched or name in note
    assert load_device_profile(chosen).name in (chosen, f"{chosen}-sxm")


def test_models_follow_what_imports() -> None:
    full = gpu_check.model_cases(False, "0.26.0", "5.18.0")
    assert [(c.model, c.options["batch"]) for c in full] == [("torchvision:resnet50", 32), ("hf:llama", 8)]
    assert full[1].options["sequence"] == 1024 and full[1].options["attention"] == "eager" and not full[0].note
    bare = gpu_check.model_cases(False, None, None)
    assert bare[0].model == "resnet50" and bare[0].options["num_classes"] == 1000 and "torchvision" in bare[0].note
    assert bare[1].model == gpu_check.LLAMA_FACTORY and bare[1].options["input_range"] == 32000
    assert "transformers" in bare[1].note
    assert gpu_check.model_cases(True, "0.26.0", None)[0].model == "resnet50"


def test_the_fallback_decoder_replays_exactly() -> None:
    case = gpu_check.model_cases(True, None, None)[1]
    g = import_model(case.model, **case.options)
    assert g.metadata["torch"]["spec"]["task"] == "language"
    result = replay(g, baseline_schedule(g), "cpu", timing_run=False)
    assert result.outputs_match  # within replay's tolerance (the difference is rounding, about 1e-9)
    assert result.measured_peak == result.simulated_peak


def test_auto_runs_only_when_every_member_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    real = gpu_check.get_method

    def missing(name: str) -> Any:
        if name == "moccasin":
            raise MethodError("method 'moccasin' needs ortools: install it with `pip install ortools`")
        return real(name)

    assert gpu_check.auto_ready() == (True, "")
    assert gpu_check.chosen_methods(None) == ([*METHODS, "auto"], [])
    monkeypatch.setattr(gpu_check, "get_method", missing)
    ready, why = gpu_check.auto_ready()
    assert not ready and "needs ortools" in why
    assert gpu_check.chosen_methods(None) == (list(METHODS), [f"auto left out: {why}"])


# ---------------------------------------------------------------------- CUDA helpers, with stand-ins


class FakeCuda:
    """Stand-ins for the torch.cuda calls the helpers make, recording their order."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, reserved: int) -> None:
        self.calls: list[str] = []
        self.reserved = reserved
        for name in ("synchronize", "empty_cache", "reset_peak_memory_stats"):
            monkeypatch.setattr(torch.cuda, name, lambda *a, _n=name: self.calls.append(_n))
        monkeypatch.setattr(torch.cuda, "max_memory_reserved", self.max_memory_reserved)

    def max_memory_reserved(self, device: Any = None) -> int:
        self.calls.append("max_memory_reserved")
        return self.reserved


def test_reserved_peak_empties_the_cache_and_resets_before(monkeypatch: pytest.MonkeyPatch) -> None:
    cuda = FakeCuda(monkeypatch, 3 * 2**20)
    result, reserved = gpu_check.reserved_peak(torch.device("cuda"), lambda: cuda.calls.append("run") or 7)
    assert (result, reserved) == (7, 3 * 2**20)
    assert cuda.calls == ["synchronize", "empty_cache", "reset_peak_memory_stats", "run", "synchronize",
                          "max_memory_reserved"]
    assert gpu_check.reserved_peak(torch.device("cpu"), lambda: 5) == (5, None)


def test_the_profiled_training_step_reserved_peak(monkeypatch: pytest.MonkeyPatch) -> None:
    cuda = FakeCuda(monkeypatch, 123_456)
    events = gpu_check.ProfiledStepReserved(torch.device("cuda"))
    events({"kind": "configuration", "configuration": "schedule", "index": 1, "of": 1})
    events({"kind": "step", "configuration": "schedule", "step": 1, "steps": 3, "loss": 1.0, "time_s": 0.1})
    assert cuda.calls == ["synchronize", "empty_cache", "reset_peak_memory_stats"] and events.bytes is None
    events({"kind": "step", "configuration": "eager", "step": 2, "steps": 3, "loss": 1.0, "time_s": None})
    assert events.bytes is None
    events({"kind": "step", "configuration": "schedule", "step": 2, "steps": 3, "loss": 1.0, "time_s": None})
    assert events.bytes == 123_456 and cuda.calls[-1] == "max_memory_reserved"
    on_cpu = gpu_check.ProfiledStepReserved(torch.device("cpu"))
    on_cpu({"kind": "step", "configuration": "schedule", "step": 2})
    assert on_cpu.bytes is None


def test_the_gpu_is_described(monkeypatch: pytest.MonkeyPatch) -> None:
    class Props:
        total_memory, major, minor = 150_000_000_000, 9, 0

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: Props())
    env = gpu_check.environment(torch.device("cuda"))
    assert (env["gpu"], env["gpu_memory_bytes"], env["compute_capability"]) == ("NVIDIA H200", 150_000_000_000, "9.0")
    assert env["torch"] == torch.__version__ and env["cuda"] == torch.version.cuda
    assert gpu_check.profile_for(env["gpu"]) == ("h200", "")


def test_an_interrupt_keeps_what_was_done(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    done: list[str] = []

    def first_then_stop(case: gpu_check.Case, setting: Any, deadline: float) -> dict[str, Any]:
        if done:
            raise KeyboardInterrupt
        done.append(case.label)
        return {"label": case.label, "model": case.model, "options": case.options, "note": "", "runs": [],
                "skipped": ["stand-in"]}

    monkeypatch.setattr(gpu_check, "check_model", first_then_stop)
    assert gpu_check.main(["--device", "cpu", "--out", str(tmp_path), "--methods", "dtr"]) == 130
    report = json.loads((tmp_path / gpu_check.JSON_NAME).read_text())
    assert report["interrupted"] is True and [m["label"] for m in report["models"]] == ["resnet50"]
    assert "interrupted" in (tmp_path / gpu_check.MARKDOWN_NAME).read_text().splitlines()[2]


def test_the_offload_plan_is_replayed_with_the_simulated_peaks_and_autograds_gradients(
        checked: tuple[int, dict[str, Any], str]) -> None:
    _, report, text = checked
    for model in report["models"]:
        row = model["offload"]
        assert row["offloads"] == row["reloads"] > 0 and row["outputs_match"] is True
        assert row["measured_host_peak"] == row["simulated_host_peak"] == row["to_host"] > 0
        assert row["link"]["source"].startswith("device profile h100")  # the roofline profile's link, borrowed
        assert row["pairs"] == gpu_check.PAIRS and row["reserved_peak"] is None
        assert row["overhead_error_pts"] == pytest.approx(row["measured_overhead_pct"] - row["modelled_overhead_pct"])
    resnet, llama = report["models"]
    assert resnet["offload"]["peak_error_bytes"] == 0
    assert abs(llama["offload"]["peak_error_bytes"]) <= 8  # the 4-byte constant of test_cpu_peaks_equal_...
    assert text.count("Offload plan (`save_on_cpu_plan`") == 2
