"""A sweep's replays (`remat_bench.app.sweep.replays`): every schedule of a PyTorch graph replayed after the runs.

The graphs are imported once, before the sweeps (a file in the config, not a ``torch:`` entry that each
sweep would trace again), and the runs solved once: each test resumes a copy of that folder with replays.
"""

from __future__ import annotations

from tests.needs_torch import torch  # noqa: F401  # first: torch, or a failure saying how to install it

# isort: split

import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from remat_bench.app.cli import main
from remat_bench.app.report.write import write_report
from remat_bench.app.sweep import load_config, run_sweep
from remat_bench.app.sweep.journal import JOURNAL
from remat_bench.app.sweep.progress import describe_replay
from remat_bench.app.sweep.replays import REPLAY_FIELDS
from remat_bench.app.sweep.results import load_table
from remat_bench.app.sweep.runs import ReplaySettings
from remat_bench.core.errors import ConfigError
from remat_bench.core.graph_io import save_graph
from remat_bench.torch.importer import import_model
from tests.helpers import SHIPPED

CONFIG = """
name: replayed
output: out
time_limit: 20
graphs: [{mlp}, {chain}]
methods: [greedy, chen]
budgets: [0.9]
"""


def config_text(mlp: str = "torch-mlp-b64") -> str:
    return CONFIG.format(mlp=mlp, chain=SHIPPED / "chain-16-train.json")


@pytest.fixture(scope="module")
def solved(tmp_path_factory) -> Path:
    """A results folder of greedy and chen at 0.9 on a small MLP imported from PyTorch and on chain-16."""
    folder = tmp_path_factory.mktemp("solved")
    g = import_model("mlp", batch=256, input_shape=(16,), in_features=16, hidden=32, depth=2, durations="flops",
                     workspace="none")
    save_graph(g, folder / "mlp.json")
    (folder / "sweep.yaml").write_text(config_text("mlp.json"), encoding="utf-8")
    outcome = run_sweep(load_config(folder / "sweep.yaml"))
    assert outcome.finished == 4 and not outcome.faults and outcome.replayed == 0
    return folder


def resume_with_replays(solved: Path, tmp_path: Path, **settings) -> tuple[Path, object]:
    """A copy of the solved folder, resumed with ``replay:`` (one timed pair on the CPU unless told)."""
    shutil.copytree(solved, tmp_path / "copy")
    config = load_config(tmp_path / "copy" / "sweep.yaml")
    config = replace(config, replay=ReplaySettings(**{"repeats": 1, "precision": 0, "device": "cpu", **settings}))
    return tmp_path / "copy" / "out", run_sweep(config, resume=True)


def test_a_sweep_replays_the_schedules_of_pytorch_graphs_only_and_resuming_does_not_replay_again(
        solved, tmp_path, monkeypatch):
    out, outcome = resume_with_replays(solved, tmp_path)
    assert outcome.finished == 0 and outcome.replayed == 2 and outcome.replay_failures == 0
    table = load_table(out)
    mlp, chain = table[table["graph"] == "torch-mlp-b256"], table[table["graph"] == "chain-16"]
    assert len(mlp) == len(chain) == 2
    assert (mlp["replay_status"] == "measured").all() and (mlp["replay_device"] == "cpu").all()
    # No operator of an MLP needs scratch memory: the measured peak is the simulated one to the byte.
    assert (mlp["measured_peak"] == mlp["peak"]).all() and (mlp["peak_error_pct"] == 0).all()
    assert mlp["outputs_match"].all() and (mlp["replay_repeats"] == 1).all()
    # chen's plans peak above 0.9 (no_solution, its schedule kept): measured above the budget, as simulated.
    assert list(mlp["measured_within_budget"]) == list(mlp["peak"] <= mlp["budget"]) == [False, True]
    assert (mlp["modelled_overhead_pct"] == mlp["overhead_pct"]).all()
    assert mlp["measured_overhead_pct"].notna().all() and (mlp["step_time_s"] > 0).all()
    assert (mlp["measured_overhead_spread"] == 0).all()  # one pair: min = median = max
    assert (mlp["baseline_measured_peak"] == mlp["baseline_peak"]).all()
    assert chain[list(REPLAY_FIELDS)].isna().all().all()  # not imported from PyTorch: nothing to replay
    lines = (out / JOURNAL).read_text().splitlines()
    assert len(lines) == 6  # four runs, then two rows again with their replays
    text = write_report(out, tmp_path / "report.md").read_text()
    section = text.split("## Prediction against measurement", 1)[1].split("\n## ", 1)[0]
    assert section.count("| torch-mlp-b256 | 0.9 |") == 3 and "chain-16" not in section  # two methods, one rank

    # Resumed again: every replay is done, none runs.
    def must_not_run(*args, **kwargs):
        raise AssertionError("a replay already recorded ran again")

    monkeypatch.setattr("remat_bench.app.sweep.replays.replay_row", must_not_run)
    settings = ReplaySettings(repeats=1, precision=0)
    again = run_sweep(replace(load_config(out.parent / "sweep.yaml"), replay=settings), resume=True)
    assert again.replayed == 0 and (out / JOURNAL).read_text().splitlines() == lines
    assert load_table(out)["replay_status"].count() == 2


def test_a_replay_that_fails_is_recorded_in_one_sentence_and_the_others_go_on(solved, tmp_path):
    shutil.copytree(solved, tmp_path / "copy")
    out = tmp_path / "copy" / "out"
    table = load_table(out)
    greedy = table[(table["graph"] == "torch-mlp-b256") & (table["method"] == "greedy")].iloc[0]
    (out / greedy["schedule"]).write_text("{not json", encoding="utf-8")
    settings = ReplaySettings(repeats=1, precision=0, device="cpu")
    outcome = run_sweep(replace(load_config(out.parent / "sweep.yaml"), replay=settings), resume=True)
    assert outcome.replayed == 2 and outcome.replay_failures == 1
    table = load_table(out).set_index("method")
    failed = table.loc["greedy"][table.loc["greedy"]["graph"] == "torch-mlp-b256"].iloc[0]
    assert failed["replay_status"] == "failed" and pd.isna(failed["measured_peak"])
    message = failed["replay_message"]
    assert str(greedy["schedule"]) in message and "\n" not in message and "Traceback" not in message
    chen = table.loc["chen"][table.loc["chen"]["graph"] == "torch-mlp-b256"].iloc[0]
    assert chen["replay_status"] == "measured"


def test_a_replay_past_its_time_limit_is_stopped_and_recorded(solved, tmp_path):
    out, outcome = resume_with_replays(solved, tmp_path, time_limit=0.05)  # a child cannot even start in time
    assert outcome.replayed == 2 and outcome.replay_failures == 2
    rows = load_table(out)
    messages = set(rows["replay_message"].dropna())
    assert messages == {"the replay did not end within 0.05 s and was stopped; give it more time with time_limit "
                        "under replay in the config"}


def test_replays_record_the_interval_the_clock_and_where_the_time_goes(solved, tmp_path):
    out, outcome = resume_with_replays(solved, tmp_path, repeats=6, steps=1)
    assert outcome.replayed == 2 and outcome.replay_failures == 0
    table = load_table(out)
    done = table[table["replay_status"] == "measured"]
    assert len(done) == 2 and (done["replay_pairs"] == 6).all() and (done["replay_threads"] == 1).all()
    assert (done["timing_clock"] == "thread CPU time").all()
    assert (done["measured_overhead_low_pct"] <= done["measured_overhead_pct"]).all()
    assert (done["measured_overhead_pct"] <= done["measured_overhead_high_pct"]).all()
    for text, modelled in zip(done["attribution"], done["modelled_overhead_pct"]):
        a = json.loads(text)
        assert a["passes"] == 1 and a["modelled_overhead_pct"] == pytest.approx(modelled)


@pytest.mark.parametrize("body, message", [
    ("replay: {repeats: 0}", "'repeats' must be a whole number at least 1, not '0'"),
    ("replay: {device: tpu}", "replay device 'tpu' is not known; use cpu or cuda"),
    ("replay: {repeat: 3}", "unknown key 'repeat' in replay (did you mean 'repeats'?)"),
    ("replay: 3", "'replay' must be true, false, or a mapping of repeats, precision, max_pairs, steps, device and "
                  "time_limit"),
])
def test_bad_replay_settings_are_one_sentence_naming_the_line(tmp_path, body, message):
    path = tmp_path / "sweep.yaml"
    path.write_text(config_text() + body + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="line 8: " + re.escape(message)):
        load_config(path)
    r = CliRunner().invoke(main, ["sweep", str(path), "--dry-run"])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1 and "Traceback" not in r.output


def test_replay_settings_and_the_command_line_flag(tmp_path):
    path = tmp_path / "sweep.yaml"
    path.write_text(config_text(), encoding="utf-8")
    assert load_config(path).replay is None
    r = CliRunner().invoke(main, ["sweep", str(path), "--dry-run", "--replay"])
    assert r.exit_code == 0, r.output
    assert ("then the schedules of PyTorch graphs are replayed one at a time (6 to 40 timed pairs against the "
            "baseline, until the measured overhead's 95% interval is within +-1 point, at most 600 s each)"
            in " ".join(r.output.split()))
    path.write_text(path.read_text() + "replay: {repeats: 3, device: cpu, time_limit: 60}\n", encoding="utf-8")
    assert load_config(path).replay == ReplaySettings(repeats=3, device="cpu", time_limit=60.0)
    path.write_text(path.read_text().replace("replay: {repeats: 3, device: cpu, time_limit: 60}", "replay: true"))
    assert load_config(path).replay == ReplaySettings()


def test_a_replay_line_says_measured_against_modelled_or_why_it_failed():
    row = {"method": "greedy", "params": "{}", "graph": "torch-mlp-b256", "budget_text": "0.9",
           "replay_status": "measured", "measured_overhead_pct": 3.1, "measured_overhead_min_pct": 1.0,
           "measured_overhead_max_pct": 5.25, "modelled_overhead_pct": 2.95, "peak_error_pct": 0.0,
           "measured_within_budget": True, "outputs_match": True}
    assert describe_replay(row) == ("greedy on torch-mlp-b256 at 0.9: overhead measured +3.10% (+1.00% to +5.25%), "
                                    "modelled +2.95%; peak +0.000% against the simulator")
    with_interval = {**row, "measured_overhead_low_pct": 2.5, "measured_overhead_high_pct": 3.75, "replay_pairs": 12}
    assert describe_replay(with_interval) == ("greedy on torch-mlp-b256 at 0.9: overhead measured +3.10% (95% "
                                              "interval +2.50% to +3.75%, 12 pairs), modelled +2.95%; peak +0.000% "
                                              "against the simulator")
    over = {**row, "peak_error_pct": 7.5, "measured_within_budget": False, "outputs_match": False}
    assert describe_replay(over).endswith("peak +7.500% against the simulator, above the budget; outputs differ "
                                          "from autograd")
    failed = {**row, "replay_status": "failed", "replay_message": "the replay ran out of memory"}
    assert describe_replay(failed) == "replay of greedy on torch-mlp-b256 at 0.9 failed: the replay ran out of memory"
    assert json.dumps(row)  # rows are plain data


def test_the_replay_progress_counts_the_replays_and_prints_a_line_each():
    import io

    from rich.console import Console

    from remat_bench.app.sweep.progress import SweepProgress

    text = io.StringIO()
    progress = SweepProgress(Console(file=text, width=200))  # not a terminal: a line each
    progress.replaying(2)
    row = {"method": "greedy", "params": "{}", "graph": "g", "budget_text": "0.9", "replay_status": "failed",
           "replay_message": "the replay ran out of memory"}
    progress.replayed(row)
    progress.close()
    assert text.getvalue().splitlines() == [
        "replaying 2 schedules of PyTorch graphs with real tensors, one at a time, each timed against the baseline",
        "[1/2] replay of greedy on g at 0.9 failed: the replay ran out of memory"]
