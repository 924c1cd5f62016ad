"""What hostile testers found in `remat-bench train` and `replay` (issues 43 and 48), each pinned by a test.

- learning rates that are not a positive number the parameters can hold, and a training that diverges;
- ``--configurations`` empty, or naming a configuration twice;
- model options given beside a graph file, and a schedule of another import of the same model;
- the model's code run in a child process: a factory that exits (status 0 included) or hangs there;
- a run too large for the machine refused before anything is built;
- a run whose pace would outlast its time limit stopped at once, with the losses it had.

These tests need PyTorch, and fail without it (as tests/test_torch_import.py).
"""

from __future__ import annotations

from tests.needs_torch import torch  # first: torch, or a failure saying how to install it

# isort: split

import functools
import json
import os
import sys
import time

import pytest
from click.testing import CliRunner

from remat_bench.app.cli import main
from remat_bench.app.pipeline import run
from remat_bench.core.graph_io import save_graph
from remat_bench.core.schedule import save_schedule
from remat_bench.torch.importer import import_model
from remat_bench.torch.train import TrainError, train

nn = torch.nn

MOOD = "REMAT_BENCH_TEST_MOOD"  # read by `moody` in the child process, which inherits the environment


def moody() -> nn.Module:
    """A small MLP of the user's own whose factory exits or hangs when the environment says so."""
    mood = os.environ.get(MOOD)
    if mood == "exit":
        sys.exit(0)
    if mood == "hang":
        time.sleep(3600)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))


MODEL = "tests.test_train_faults:moody"


@functools.cache
def _solved(batch: int = 4):
    # Counted costs, no workspace run: the graph is the same on every machine; chen's schedule is a rule.
    g = import_model(MODEL, batch=batch, input_shape=(8,), durations="flops", workspace="none")
    result = run(g, "chen", "0.9", time_limit=None, bound=False)
    assert result.schedule is not None, result.message
    return g, result.schedule


@pytest.fixture
def files(tmp_path):
    g, schedule = _solved()
    save_graph(g, tmp_path / "g.json")
    save_schedule(schedule, g, tmp_path / "s.json")
    return tmp_path / "g.json", tmp_path / "s.json"


def _invoke(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args], prog_name="remat-bench")


def _one_error(result) -> str:
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.output
    assert "Traceback" not in result.output, result.output
    return lines[0]


# ---------------------------------------------------------------------- the learning rate


@pytest.mark.parametrize("lr", ["-1e30", "nan", "inf", "-inf", "-1e308", "0"])
def test_a_learning_rate_that_is_not_positive_and_finite_is_refused_up_front(files, lr):
    graph, schedule = files
    result = _invoke("train", graph, schedule, "--steps", "2", f"--lr={lr}")
    assert result.exit_code == 2
    assert _one_error(result).startswith("error: Invalid value for --lr: the learning rate must be a positive number")


def test_a_learning_rate_the_parameters_cannot_hold_or_that_diverges_is_one_sentence():
    g, schedule = _solved()
    with pytest.raises(TrainError, match=r"positive number below 3.4e\+38, not 1e\+308"):
        train(g, schedule, 2, lr=1e308)
    with pytest.raises(TrainError, match=r"training diverged: schedule's loss is (nan|inf) at step \d+ with the "
                                         r"learning rate 1e\+30; give a smaller --lr"):
        train(g, schedule, 6, lr=1e30, configurations=("schedule",))


# ---------------------------------------------------------------------- configurations and options


@pytest.mark.parametrize("given, message", [
    ("", "name at least one of schedule, eager, compile, compile-budget"),
    (",,,", "name at least one of schedule, eager, compile, compile-budget"),
    ("schedule,schedule,eager,eager", "'schedule' is named twice; name each configuration once"),
    ("eager,compile,eager", "'eager' is named twice; name each configuration once"),
])
def test_configurations_empty_or_named_twice_are_refused(files, given, message):
    graph, schedule = files
    result = _invoke("train", graph, schedule, "-c", given)
    assert result.exit_code == 2
    assert _one_error(result) == f"error: Invalid value for --configurations: {message} (see `remat-bench train -h`)"


def test_train_refuses_a_configuration_named_twice_in_the_library_too():
    g, schedule = _solved()
    with pytest.raises(TrainError, match="configuration 'eager' is named twice"):
        train(g, schedule, 2, configurations=("eager", "eager"))


@pytest.mark.parametrize("option", [["--batch", "3"], ["--input-shape", "8"], ["--task", "regress"],
                                    ["--kwarg", "width=4"]])
def test_model_options_beside_a_graph_file_are_refused_not_ignored(files, option):
    graph, schedule = files
    result = _invoke("train", graph, schedule, *option)
    assert result.exit_code == 2
    assert _one_error(result).startswith(f"error: Invalid value for {option[0]}: {graph} is a graph file, whose "
                                         f"model, batch and shapes are fixed; {option[0]} applies only when MODEL "
                                         "names a model to import")


def test_a_schedule_of_another_graph_file_is_refused_without_offering_a_force_train_lacks(files, tmp_path):
    graph, _ = files
    g8, schedule8 = _solved(8)
    save_schedule(schedule8, g8, tmp_path / "s8.json")
    result = _invoke("train", graph, tmp_path / "s8.json", "--steps", "2")
    assert result.exit_code == 2
    line = _one_error(result)
    assert "--force" not in line and line.endswith("refusing to train with it: train with a schedule on the graph "
                                                   "it was solved for")


def test_a_schedule_of_another_import_of_the_model_trains_when_its_steps_fit(tmp_path):
    # The model imported here with calibrated costs has another hash than the graph of counted costs the
    # schedule was solved on; its nodes are the same, so the schedule's steps run on it (the fallback the help
    # promises: it read the file again without --force, and refused).
    g, _ = _solved()
    roomy = run(g, "chen", "1MiB", time_limit=None, bound=False).schedule  # within budget whatever the workspaces
    assert roomy is not None
    save_schedule(roomy, g, tmp_path / "roomy.json")
    result = _invoke("train", MODEL, tmp_path / "roomy.json", "--batch", "4", "--input-shape", "8", "--steps", "2",
                     "-c", "schedule,eager", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output[result.output.index("{"):])
    assert [c["name"] for c in data["configurations"]] == ["schedule", "eager"]
    assert data["params_match"] is True


# ---------------------------------------------------------------------- the model's code, in a child


@pytest.mark.parametrize("command", ["train", "replay"])
def test_a_factory_that_exits_with_status_zero_while_the_run_builds_it_is_one_sentence(files, monkeypatch,
                                                                                       command):
    graph, schedule = files
    monkeypatch.setenv(MOOD, "exit")
    extra = ["--steps", "2", "-c", "schedule"] if command == "train" else ["--repeats", "1"]
    result = _invoke(command, graph, schedule, *extra)
    assert result.exit_code == 2, result.output
    assert _one_error(result) == "error: the model's code called sys.exit(0) while it was built or run"


@pytest.mark.parametrize("command", ["train", "replay"])
def test_a_factory_that_hangs_while_the_run_builds_it_is_stopped_at_the_time_limit(files, monkeypatch, command):
    graph, schedule = files
    monkeypatch.setenv(MOOD, "hang")
    extra = ["--steps", "2", "-c", "schedule"] if command == "train" else ["--repeats", "1"]
    result = _invoke(command, graph, schedule, *extra, "-t", "2")
    assert result.exit_code == 1, result.output
    what = "training" if command == "train" else "the replay"
    assert _one_error(result) == (f"error: {what} stopped: the model was not built within 2 s (does its factory or "
                                  "forward pass ever return?)")


@pytest.mark.parametrize("command", ["train", "replay"])
def test_a_run_far_too_large_for_the_machine_is_refused_before_anything_is_built(tmp_path, command):
    # A billion samples: terabytes of activations, traced with fake tensors and counted costs (nothing runs).
    g = import_model(MODEL, batch=10**9, input_shape=(8,), durations="flops", workspace="none")
    result = run(g, "chen", "0.9", time_limit=None, bound=False)
    assert result.schedule is not None
    save_graph(g, tmp_path / "big.json")
    save_schedule(result.schedule, g, tmp_path / "s.json")
    extra = ["--steps", "2"] if command == "train" else ["--repeats", "1"]
    out = _invoke(command, tmp_path / "big.json", tmp_path / "s.json", *extra)
    assert out.exit_code == 2, out.output
    line = _one_error(out)
    subject = f"{'training' if command == 'train' else 'replaying'} '{g.name}'"
    assert line.startswith(f"error: {subject} needs ")
    assert "bytes, more than 80% of the " in line and " bytes free on cpu" in line


# ---------------------------------------------------------------------- runs that would not end


def _stopped(line: str, what: str, limit: int, units: str, fewer: str) -> bool:
    """Whether ``line`` is one of the sentences of a run stopped before its end (`remat_bench.torch.isolated`):
    by its pace (the usual case), or, on a machine slow enough, at its time limit or before its model was built."""
    paced = (line.startswith(f"error: {what} stopped: at ") and f" s per {units[:-1]}, its " in line
             and line.endswith(f"beyond its time limit of {limit} s; {fewer}, or give it more time with --time-limit"))
    at_limit = line.startswith(f"error: {what} did not end within its time limit of {limit} s and was stopped after ")
    unbuilt = line == (f"error: {what} stopped: the model was not built within {limit} s (does its factory or "
                       "forward pass ever return?)")
    return paced or at_limit or unbuilt


def test_a_million_steps_are_stopped_by_their_pace_with_the_losses_they_had(files):
    graph, schedule = files
    result = _invoke("train", graph, schedule, "--steps", "1000000", "-c", "schedule,eager", "-t", "60", "--json")
    assert result.exit_code == 1, result.output
    line = _one_error(result)
    assert _stopped(line, "training", 60, "steps", "give fewer --steps or --configurations"), line
    data = json.loads(result.output[result.output.index("{"):result.output.rindex("}") + 1])
    assert data["stopped"] == line.removeprefix("error: ")
    if " s per step, its 2,000,000 steps would take about " in line:  # a step was timed: its loss is kept
        assert data["configurations"][0]["name"] == "schedule" and data["configurations"][0]["losses"]


def test_a_replay_of_ten_thousand_pairs_is_stopped_before_its_end(files):
    graph, schedule = files
    result = _invoke("replay", graph, schedule, "--repeats", "10000", "-t", "3")
    assert result.exit_code == 1, result.output
    line = _one_error(result)
    assert _stopped(line, "the replay", 3, "pairs", "give fewer --repeats"), line


def test_counts_past_their_caps_are_refused(files):
    graph, schedule = files
    assert _invoke("train", graph, schedule, "--steps", "1000000000").exit_code == 2
    assert _invoke("replay", graph, schedule, "--repeats", "1000000").exit_code == 2
