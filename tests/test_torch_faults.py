"""Faults found by testers in the PyTorch import and the replay, each pinned by a test.

- a ``nn.TransformerEncoder`` (its layer deep-copied under the fake mode) and
  a regression loss whose real kernel keeps a larger buffer than the graph counts;
- lazy modules (``nn.LazyLinear`` ...), materialized on the input shape;
- a wrong ``--input-shape`` answered in one sentence, without torch's logging;
- a token-id language model from ``package.module:factory`` through the CLI
  (``--task``, ``--input-dtype``, ``--vocab``, ``--kwarg``) and its replay;
- ``replay`` against the budget the schedule file holds;
- a factory or ``forward`` that never returns, exits or raises a ``BaseException``,
  in ``graphs import-torch`` and in a sweep's ``torch:`` entry (issue 30, item 8).

These tests need PyTorch, and fail without it (as tests/test_torch_import.py).
"""

from __future__ import annotations

from tests.needs_torch import torch  # first: torch, or a failure saying how to install it

# isort: split

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from remat_bench.app.cli import main
from remat_bench.app.pipeline import run
from remat_bench.core.baseline import baseline, baseline_schedule
from remat_bench.core.graph_io import load_graph, save_graph
from remat_bench.core.schedule import save_schedule
from remat_bench.torch import TORCH_LOG_SWITCHES
from remat_bench.torch.importer import import_model
from remat_bench.torch.replay import replay
from remat_bench.torch.zoo import ModelSpecError
from tests.helpers import ROOT, SHIPPED

nn = torch.nn


FLOAT = 4  # bytes of a float32


# ---------------------------------------------------------------------- factories (package.module:factory)


def transformer_encoder() -> nn.Module:
    return nn.TransformerEncoder(nn.TransformerEncoderLayer(d_model=32, nhead=4, batch_first=True, dropout=0.0), 2)


def regressor() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 64))


def lazy_convnet() -> nn.Module:
    return nn.Sequential(nn.LazyConv2d(4, 3), nn.LazyBatchNorm2d(), nn.ReLU(), nn.Flatten(), nn.LazyLinear(3))


class WithUnusedLazy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.used = nn.Linear(8, 2)
        self.unused = nn.LazyLinear(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.used(x)


def lazy_unused() -> nn.Module:
    return WithUnusedLazy()


class TokenLM(nn.Module):
    """Token ids (N, T) in, next-token logits (N, T, V) out."""

    def __init__(self, vocab: int, width: int, act: str, bias: bool) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.mix = nn.Linear(width, width, bias=bias)
        self.act = {"relu": nn.ReLU(), "gelu": nn.GELU()}[act]
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.act(self.mix(self.tok(tokens))))


def token_lm(vocab: int = 50, width: int = 16, act: str = "relu", bias: bool = False) -> nn.Module:
    return TokenLM(vocab, width, act, bias)


class RealOnlyFailure(nn.Module):
    """Picks a column that is not there: fake tensors do not check the index, real ones do."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 4)
        self.register_buffer("pick", torch.tensor([0, 99]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x)[:, self.pick]


def real_only_failure() -> nn.Module:
    return RealOnlyFailure()


def never_returns() -> nn.Module:
    while True:
        time.sleep(1)


class ForwardNeverReturns(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        while True:
            time.sleep(1)


def exits() -> nn.Module:
    sys.exit(3)


class Abandon(BaseException):
    """Not an Exception: `except Exception` lets it through."""


def abandons() -> nn.Module:
    raise Abandon("gave up")


def _cli(*args: str) -> subprocess.CompletedProcess:
    """The installed console script in a fresh process (torch's logging set up as a user gets it)."""
    script = Path(sys.executable).with_name("remat-bench")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "remat_bench.app.cli"]
    env = {k: v for k, v in os.environ.items() if k not in TORCH_LOG_SWITCHES}
    return subprocess.run([*command, *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)


# ---------------------------------------------------------------------- 12a: deep copies, regression losses


def test_a_transformer_encoder_imports_and_replays_to_the_byte():
    # TransformerEncoder deep-copies its layer; under a plain FakeTensorMode the copies belonged to a
    # copy of the mode ("Mixing fake modes NYI" at the first operator).
    g = import_model("tests.test_torch_faults:transformer_encoder", batch=2, input_shape=(8, 32),
                     durations="flops", workspace="measure")
    spec = g.metadata["torch"]["spec"]
    assert spec["task"] == "regress" and spec["label_shape"] == [2, 8, 32]
    per_layer = (3 * 32 * 32 + 3 * 32) + (32 * 32 + 32) + (32 * 2048 + 2048) + (2048 * 32 + 32) + 2 * 2 * 32
    assert g.metadata["torch"]["fixed_memory"] == {"parameters": FLOAT * 2 * per_layer, "buffers": 0,
                                                   "inputs": 2 * FLOAT * 2 * 8 * 32, "constants": 0}
    measured = replay(g, baseline_schedule(g), "cpu", timing_run=False)
    assert measured.outputs_match and measured.max_abs_diff == 0.0
    assert measured.measured_fixed == g.fixed_memory
    assert measured.measured_peak == measured.simulated_peak == baseline(g).peak
    # The layer's default dropout is imported and replayed too: tests/test_torch_random.py.


def test_a_regression_loss_is_held_in_the_bytes_the_graph_counts():
    # mse_loss returns its scalar inside the 64x64 buffer of squares; held as the loss, that buffer
    # stayed resident to the end, 16,380 bytes the graph does not count.
    g = import_model("tests.test_torch_faults:regressor", batch=64, input_shape=(16,), task="regress",
                     durations="flops", workspace="measure")
    loss = g.nodes[g.index[g.metadata["torch"]["loss"]]]
    assert loss.op == "aten.mse_loss.default" and loss.memory == FLOAT and loss.workspace >= 64 * 64 * FLOAT
    measured = replay(g, baseline_schedule(g), "cpu", timing_run=False)
    assert measured.outputs_match and measured.max_abs_diff == 0.0
    assert measured.measured_peak == measured.simulated_peak == baseline(g).peak


# ---------------------------------------------------------------------- 12b: lazy modules


def test_lazy_modules_are_materialized_on_the_input_shape():
    g = import_model("tests.test_torch_faults:lazy_convnet", batch=4, input_shape=(2, 6, 6), durations="flops",
                     workspace="measure")
    conv, bn, head = 4 * 2 * 3 * 3 + 4, 2 * 4, 4 * 4 * 4 * 3 + 3
    assert g.metadata["torch"]["fixed_memory"] == {
        "parameters": FLOAT * (conv + bn + head),
        "buffers": FLOAT * 2 * 4 + 8,  # running mean and variance, the int64 step counter
        "inputs": FLOAT * 4 * 2 * 6 * 6 + 8 * 4, "constants": 0}
    assert g.metadata["torch"]["spec"]["label_range"] == 3
    measured = replay(g, baseline_schedule(g), "cpu", timing_run=False)
    assert measured.outputs_match and measured.max_abs_diff == 0.0
    assert measured.measured_peak == measured.simulated_peak == baseline(g).peak
    with pytest.raises(ModelSpecError, match="lazy modules that its forward pass does not reach"):
        import_model("tests.test_torch_faults:lazy_unused", batch=2, input_shape=(8,))
    with pytest.raises(ModelSpecError, match=r"lazy modules, and the forward pass .* fails on an input of shape "
                                             r"\(1, 5\)"):
        import_model("tests.test_torch_faults:lazy_convnet", batch=2, input_shape=(5,))


# ---------------------------------------------------------------------- 12c: one sentence for a wrong shape


def test_a_wrong_input_shape_is_one_sentence_on_stderr(tmp_path):
    done = _cli("graphs", "import-torch", "tests.test_torch_faults:regressor", "--input-shape", "5",
                "-o", str(tmp_path / "x.json"))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "error: model 'tests.test_torch_faults:regressor' fails on an input of shape (8, 5) (float32): "
        "RuntimeError: a and b must have same reduction dim, but got [8, 5] X [16, 32]."
    ]
    assert not (tmp_path / "x.json").exists()


# ---------------------------------------------------------------------- 12d: a language model through the CLI


def test_a_token_id_language_model_imports_and_replays_through_the_cli(tmp_path):
    runner = CliRunner()
    path = tmp_path / "lm.json"
    r = runner.invoke(main, ["graphs", "import-torch", "tests.test_torch_faults:token_lm", "--batch", "2",
                             "--input-shape", "6", "--task", "language", "--vocab", "40", "--kwarg", "vocab=40",
                             "--kwarg", "width=12", "--kwarg", "act=gelu", "--kwarg", "bias=true",
                             "--durations", "flops", "--workspace", "measure", "-o", str(path)])
    assert r.exit_code == 0, r.output
    g = load_graph(path)
    assert g.metadata["torch"]["spec"] == {
        "model": "tests.test_torch_faults:token_lm", "batch": 2, "input_shape": [6], "task": "language",
        "kwargs": {"vocab": 40, "width": 12, "act": "gelu", "bias": True}, "input_dtype": "int64",
        "input_range": 40, "label_shape": [2, 6], "label_range": 40, "seed": 0}
    params = 40 * 12 + (12 * 12 + 12) + 12 * 40
    assert g.fixed_memory == FLOAT * params + 8 * 2 * 6 * 2  # int64 ids and int64 next-token labels
    # The Python API takes the same options and gives the same graph.
    same = import_model("tests.test_torch_faults:token_lm", batch=2, input_shape=(6,), task="language",
                        input_range=40, model_kwargs={"vocab": 40, "width": 12, "act": "gelu"}, bias=True,
                        durations="flops", workspace="none")
    assert same.metadata["torch"]["spec"] == g.metadata["torch"]["spec"]
    assert [nd.id for nd in same.nodes] == [nd.id for nd in g.nodes]
    # Replay re-creates the step from the spec in the file: ids in [0, 40), the factory's arguments.
    save_schedule(baseline_schedule(g).with_meta(method="none"), g, tmp_path / "s.json")
    r = runner.invoke(main, ["replay", str(path), str(tmp_path / "s.json"), "--json", "--device", "cpu"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["outputs_match"] is True and data["max_abs_diff"] == 0.0
    assert data["measured_peak"] == data["simulated_peak"] == baseline(g).peak
    # Without --vocab a language model reads the ids of the vocabulary its logits cover.
    r = runner.invoke(main, ["graphs", "import-torch", "tests.test_torch_faults:token_lm", "--input-shape", "6",
                             "--task", "language", "--durations", "flops", "--workspace", "none",
                             "-o", str(tmp_path / "lm50.json")])
    assert r.exit_code == 0, r.output
    assert load_graph(tmp_path / "lm50.json").metadata["torch"]["spec"]["input_range"] == 50


@pytest.mark.parametrize("options, message", [
    ([], "fails on an input of shape (8, 6) (float32): RuntimeError: Expected tensor for argument #1 'indices'"),
    (["--input-dtype", "int64"], "takes integer inputs (int64): give the range of their values with --vocab N"),
    (["--task", "classify", "--input-dtype", "int64", "--vocab", "50"],
     "task 'classify' needs an output of shape (N, C), but model 'tests.test_torch_faults:token_lm' returns one "
     "of shape (8, 6, 50)"),
    (["--vocab", "10"], "a range of input ids (--vocab 10) needs integer inputs (--input-dtype int64), not float32"),
    (["--task", "language", "--kwarg", "widht=8"], "cannot be built with {'widht': 8}: "),
    (["--task", "language", "--kwarg", "8"], "'8' is not of the form key=value"),
    (["--task", "language", "--vocab", "60"], "its input ids lie in [0, 60) (--vocab), but the embedding that reads "
                                              "them ('embedding') has 50 rows; give --vocab 50 or less"),
])
def test_the_language_options_refuse_bad_input_in_one_sentence(tmp_path, options, message):
    r = CliRunner().invoke(main, ["graphs", "import-torch", "tests.test_torch_faults:token_lm", "--input-shape", "6",
                                  *options, "-o", str(tmp_path / "x.json")])
    assert r.exit_code == 2 and message in r.output, r.output
    assert "Traceback" not in r.output and not (tmp_path / "x.json").exists()


def test_a_model_that_fails_only_on_real_tensors_is_one_sentence(tmp_path):
    runner = CliRunner()
    r = runner.invoke(main, ["graphs", "import-torch", "tests.test_torch_faults:real_only_failure", "--input-shape",
                             "8", "--durations", "flops", "--workspace", "measure", "-o", str(tmp_path / "x.json")])
    assert r.exit_code == 2 and r.output.splitlines() == [
        "error: model 'tests.test_torch_faults:real_only_failure' traces, but running it on real tensors fails: "
        "node 'index' (aten.index.Tensor) failed on cpu: index 99 is out of bounds for dimension 0 with size 4"]
    r = runner.invoke(main, ["graphs", "import-torch", "tests.test_torch_faults:real_only_failure", "--input-shape",
                             "8", "--durations", "flops", "--workspace", "none", "-o", str(tmp_path / "g.json")])
    assert r.exit_code == 0, r.output
    g = load_graph(tmp_path / "g.json")
    save_schedule(baseline_schedule(g), g, tmp_path / "s.json")
    r = runner.invoke(main, ["replay", str(tmp_path / "g.json"), str(tmp_path / "s.json"), "--device", "cpu"])
    assert r.exit_code == 2 and r.output.splitlines() == [
        f"error: replaying '{g.name}': the model's autograd step fails on real tensors on cpu: IndexError: "
        "index 99 is out of bounds for dimension 0 with size 4"]


# ---------------------------------------------------------------------- 13: replay and the schedule's budget


def test_replay_reports_the_budget_and_fails_when_the_measured_peak_is_above_it(tmp_path, monkeypatch):
    from remat_bench.app.cli.torch import RunProgress

    # Standard error holds the verdict alone: no progress line, which a replay slowed past 10 s by a busy
    # machine would print (tests/test_train_faults.py checks those lines).
    monkeypatch.setattr(RunProgress, "LINE_EVERY_S", float("inf"))
    # Without measured workspaces the graph does not count mse_loss's buffer of squares, where this
    # model peaks: a schedule at its simulated peak measures that buffer above its budget.
    g = import_model("tests.test_torch_faults:regressor", batch=64, input_shape=(16,), task="regress",
                     durations="flops", workspace="none")
    real = import_model("tests.test_torch_faults:regressor", batch=64, input_shape=(16,), task="regress",
                        durations="flops", workspace="measure")
    simulated, measured_peak = baseline(g).peak, baseline(real).peak
    assert measured_peak > simulated
    save_graph(g, tmp_path / "g.json")
    at_peak = baseline_schedule(g).with_meta(method="none", budget=simulated)
    save_schedule(at_peak, g, tmp_path / "at-peak.json")
    result = replay(g, at_peak, "cpu", timing_run=False)
    assert result.budget == simulated and result.within_budget is False
    assert result.measured_peak == measured_peak
    assert "import it with `--workspace measure` on this machine" in result.budget_note

    runner = CliRunner()  # click 8.2: stdout and stderr apart
    r = runner.invoke(main, ["replay", str(tmp_path / "g.json"), str(tmp_path / "at-peak.json"), "--json",
                             "--device", "cpu"])
    assert r.exit_code == 1, r.output
    data = json.loads(r.stdout)
    assert data["budget"] == simulated and data["within_budget"] is False
    assert data["measured_peak"] == measured_peak and data["outputs_match"] is True
    over = measured_peak - simulated
    assert r.stderr.splitlines() == [
        f"over budget: the measured peak {measured_peak:,} ({measured_peak / 1024:.2f} KiB) is above the "
        f"schedule's budget {simulated:,} ({simulated / 1024:.2f} KiB) by {over:,} ({over / 1024:.2f} KiB): "
        "operators allocated scratch memory the graph does not model (its workspaces are 0); import it with "
        "`--workspace measure` on this machine to model it"]
    r = runner.invoke(main, ["replay", str(tmp_path / "g.json"), str(tmp_path / "at-peak.json"), "--device", "cpu"])
    assert r.exit_code == 1 and "budget" in r.stdout and "measured peak above it" in r.stdout

    # A budget the measured peak fits: the verdict, exit 0.
    roomy = baseline_schedule(g).with_meta(method="none", budget=measured_peak)
    save_schedule(roomy, g, tmp_path / "roomy.json")
    r = runner.invoke(main, ["replay", str(tmp_path / "g.json"), str(tmp_path / "roomy.json"), "--json",
                             "--device", "cpu"])
    assert r.exit_code == 0 and r.stderr == ""
    data = json.loads(r.stdout)
    assert data["budget"] == measured_peak and data["within_budget"] is True
    # No budget in the file: no verdict, exit as before.
    save_schedule(baseline_schedule(g).with_meta(method="none"), g, tmp_path / "none.json")
    r = runner.invoke(main, ["replay", str(tmp_path / "g.json"), str(tmp_path / "none.json"), "--json",
                             "--device", "cpu"])
    assert r.exit_code == 0 and r.stderr == ""
    data = json.loads(r.stdout)
    assert data["budget"] is None and data["within_budget"] is None
    r = runner.invoke(main, ["replay", str(tmp_path / "g.json"), str(tmp_path / "none.json"), "--device", "cpu"])
    assert r.exit_code == 0 and "budget" not in r.stdout


def test_a_schedule_over_its_own_budget_says_so():
    g = import_model("tests.test_torch_faults:regressor", batch=8, input_shape=(16,), task="regress",
                     durations="flops", workspace="measure")
    peak = baseline(g).peak
    result = replay(g, baseline_schedule(g).with_meta(budget=peak - 1), "cpu", timing_run=False)
    assert result.measured_peak == peak and result.within_budget is False
    assert result.budget_note == (f"the schedule itself peaks at {peak:,} in the simulator, above its budget "
                                  "(it was not solved within this budget)")


def test_a_synthetic_replay_at_its_budget_is_within_it():
    # The synthetic kernel's reduction allocated a byte of its own, which put a schedule solved at
    # exactly its budget one byte above it.
    g = load_graph(SHIPPED / "chain-16-train.json")
    result = run(g, "chen", "0.9", 30, {})
    measured = replay(g, result.schedule, "cpu", timing_run=False)
    assert measured.mode == "synthetic" and measured.budget == result.budget
    assert measured.measured_peak == measured.simulated_peak == result.peak
    exact = replay(g, result.schedule.with_meta(budget=result.peak), "cpu", timing_run=False)
    assert exact.within_budget is True


# ---------------------------------------------------------------------- issue 30, item 8: the user's code


@pytest.mark.parametrize("model", ["never_returns", "ForwardNeverReturns"])
def test_a_factory_or_forward_that_never_returns_is_stopped_at_the_time_limit(tmp_path, model):
    started = time.monotonic()
    done = _cli("graphs", "import-torch", f"tests.test_torch_faults:{model}", "--input-shape", "4", "-t", "3",
                "-o", str(tmp_path / "x.json"))
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines() == [
        f"error: model 'tests.test_torch_faults:{model}' was not built and traced within 3 s, so it was stopped "
        "(does its factory or forward pass ever return?); give it more time with --time-limit, or time_limit in a "
        "torch entry"]
    assert time.monotonic() - started < 120  # it ended (it ran forever before); start-up included
    assert not (tmp_path / "x.json").exists()


@pytest.mark.parametrize("model, raised", [("exits", "SystemExit: 3"), ("abandons", "Abandon: gave up")])
def test_a_factory_that_exits_or_raises_a_base_exception_is_one_sentence(tmp_path, model, raised):
    done = _cli("graphs", "import-torch", f"tests.test_torch_faults:{model}", "--input-shape", "4",
                "-o", str(tmp_path / "x.json"))
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines() == [
        f"error: model 'tests.test_torch_faults:{model}' stopped with {raised} while it was built or traced"]


def test_a_sweeps_torch_entry_gets_the_same_protection(tmp_path):
    config = tmp_path / "c.yaml"
    for entry, sentence in (
        ('{model: "tests.test_torch_faults:never_returns", input_shape: [4], time_limit: 2}',
         "model 'tests.test_torch_faults:never_returns' was not built and traced within 2 s, so it was stopped "
         "(does its factory or forward pass ever return?); give it more time with --time-limit, or time_limit in a "
         "torch entry"),
        ('{model: "tests.test_torch_faults:exits", input_shape: [4]}',
         "model 'tests.test_torch_faults:exits' stopped with SystemExit: 3 while it was built or traced"),
    ):
        config.write_text(f"output: out\ngraphs:\n  - {SHIPPED / 'chain-16-train.json'}\n  - torch: {entry}\n"
                          "methods: [none]\nbudgets: [0.9]\n")
        r = CliRunner().invoke(main, ["sweep", str(config)])
        assert r.exit_code == 2 and "Traceback" not in r.output
        assert r.output.splitlines()[-1] == f"error: {config}, line 4: {sentence}"
        assert not (tmp_path / "out").exists()  # refused before the results folder was made
