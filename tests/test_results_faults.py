"""Bad input to what reads a results folder and to the options of plot and sweep (docs/sweeps.md): a corrupt
table, a journal naming a device or a pipe, a non-finite --within, more workers than cores, a replay with
nothing to replay. Each is one sentence and an exit status, never a traceback or a hang; each test here
failed before the fix it covers.

The results folder is one tiny sweep (none, chen and greedy on the shipped chain at two budgets), copied
and spoiled by each test.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from remat_bench.app.cli import main
from remat_bench.app.sweep import load_table
from tests.helpers import SHIPPED

CHAIN = SHIPPED / "chain-16-train.json"


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    folder = tmp_path_factory.mktemp("results")
    config = folder / "sweep.yaml"
    config.write_text(f"graphs: [{CHAIN}]\nmethods: [none, chen, greedy]\nbudgets: [0.9, 0.8]\ntime_limit: 20\n")
    result = CliRunner().invoke(main, ["sweep", str(config), "--output", str(folder / "out"), "--workers", "2"])
    assert result.exit_code == 0, result.output
    return folder / "out"


def refused(result, *words: str) -> str:
    """The one line a refused command printed, checked: no traceback, exit status 1 or 2, ``words`` in it."""
    assert result.exit_code in (1, 2), result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


# ---------------------------------------------------------------------- results folders that cannot be read


def spoiled(results, tmp_path, journal: bool = True):
    """A copy of the results folder, with or without its journal."""
    copy = tmp_path / "copy"
    shutil.copytree(results, copy)
    if not journal:
        (copy / "journal.jsonl").unlink()
    return copy


def run_cli(*args: str | Path) -> subprocess.CompletedProcess:
    """The command in a process of its own, capped at 4 GiB of address space and stopped after 120 s: a file
    read whole from /dev/zero ends in a MemoryError there, not in this test's process, and a pipe that
    blocks fails the test instead of hanging it (the bound is a guard, far above the seconds these take)."""
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (4 * 2**30, 4 * 2**30))

    try:
        return subprocess.run([sys.executable, "-m", "remat_bench.app.cli", *map(str, args)], capture_output=True,
                              text=True, timeout=120, preexec_fn=cap, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail(f"remat-bench {' '.join(map(str, args))} did not end (reading a pipe?)")


def refused_in_process(result: subprocess.CompletedProcess, *words: str) -> str:
    assert result.returncode in (1, 2), result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    assert len(lines) == 1, lines
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


OVER_TIME = ["progress", "profile", "time-to-best"]


def corrupt(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:100])  # cut short: no Parquet footer


def other_columns(path: Path) -> None:
    pd.DataFrame({"a": [1]}).to_parquet(path)


@pytest.mark.parametrize("spoil, words", [(corrupt, "is not a Parquet table that can be read"),
                                          (other_columns, "lacks the columns run_id, time_s, duration")])
def test_a_progress_table_that_does_not_read_is_one_sentence_naming_it_for_charts_and_report(
        results, tmp_path, spoil, words):
    folder = spoiled(results, tmp_path, journal=False)
    spoil(folder / "progress.parquet")
    remedy = "remove this file to go without the runs' progress, or run the sweep again"
    for kind in OVER_TIME:
        result = CliRunner().invoke(main, ["plot", str(folder), "--kind", kind, "-o", str(tmp_path / "p.png")])
        refused(result, f"{folder / 'progress.parquet'}: ", words, remedy)
    result = CliRunner().invoke(main, ["report", str(folder), "-o", str(tmp_path / "r.md")])
    refused(result, f"{folder / 'progress.parquet'}: ", words, remedy)
    (folder / "progress.parquet").unlink()  # as the sentence says: the report goes without progress
    result = CliRunner().invoke(main, ["report", str(folder), "-o", str(tmp_path / "r.md")])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("spoil, words", [(corrupt, "is not a Parquet table that can be read"),
                                          (other_columns, "lacks the columns graph, graph_sha256, method")])
def test_a_results_table_that_does_not_read_is_one_sentence_naming_it(results, tmp_path, spoil, words):
    folder = spoiled(results, tmp_path, journal=False)
    spoil(folder / "results.parquet")
    for command in (["plot", str(folder), "--kind", "tradeoff", "-o", str(tmp_path / "p.png")],
                    ["report", str(folder), "-o", str(tmp_path / "r.md")]):
        refused(CliRunner().invoke(main, command), f"{folder / 'results.parquet'}: ", words,
                "restore either file, or run the sweep again")


def point_rows_at(folder: Path, column: str, target: str) -> None:
    """Every row of the journal that saved a schedule names ``target`` in ``column``, as a hand edit would."""
    journal = folder / "journal.jsonl"
    rows = [json.loads(line) for line in journal.read_text().splitlines()]
    for row in rows:
        if row.get("schedule"):
            row[column] = target
    journal.write_text("".join(json.dumps(row) + "\n" for row in rows))


@pytest.mark.parametrize("column, what", [("schedule", "it is the schedule of run"),
                                          ("graph_path", "it is the file of graph 'chain-16'")])
@pytest.mark.parametrize("target", ["/dev/zero", "fifo"])  # /dev/urandom takes the path /dev/zero does
def test_a_journal_naming_a_device_or_a_pipe_is_refused_without_reading_it(results, tmp_path, column, what,
                                                                           target):
    folder = spoiled(results, tmp_path)
    if target == "fifo":
        target = str(tmp_path / "fifo")
        os.mkfifo(target)
    point_rows_at(folder, column, target)
    for command in (["plot", folder, "--kind", "timeline", "-o", tmp_path / "t.png"],
                    ["report", folder, "-o", tmp_path / "r.md"]):
        refused_in_process(run_cli(*command), f"{target}: is a device, pipe or socket, not a regular file", what,
                           "restore that file, or run the sweep again")


@pytest.mark.parametrize("name, make", [("journal.jsonl", lambda p: os.symlink("/dev/zero", p)),
                                        ("journal.jsonl", os.mkfifo),
                                        ("results.parquet", os.mkfifo), ("progress.parquet", os.mkfifo)])
def test_a_results_file_that_is_a_device_or_a_pipe_is_refused(results, tmp_path, name, make):
    folder = spoiled(results, tmp_path, journal=name == "progress.parquet")
    if name != "progress.parquet":
        (folder / "journal.jsonl").unlink(missing_ok=True)
    (folder / name).unlink(missing_ok=True)
    make(folder / name)
    kind = "progress" if name == "progress.parquet" else "tradeoff"
    if name == "progress.parquet":
        (folder / "journal.jsonl").unlink()
    refused_in_process(run_cli("plot", folder, "--kind", kind, "-o", tmp_path / "p.png"),
                       f"{folder / name}: is a device, pipe or socket, not a regular file")


@pytest.mark.parametrize("make", [os.mkfifo, lambda p: os.symlink("/dev/zero", p)], ids=["pipe", "device"])
def test_resuming_into_a_folder_whose_journal_is_a_pipe_or_a_device_is_refused(results, tmp_path, make):
    folder = spoiled(results, tmp_path)
    (folder / "journal.jsonl").unlink()
    make(folder / "journal.jsonl")
    config = tmp_path / "again.yaml"
    config.write_text((folder / "config.yaml").read_text())
    refused_in_process(run_cli("sweep", config, "--output", folder, "--resume"),
                       f"the results folder {folder} holds journal.jsonl, which is not a regular file",
                       "move it away or choose another --output")


def test_a_config_copy_that_is_a_pipe_does_not_hold_the_report(results, tmp_path):
    folder = spoiled(results, tmp_path)
    (folder / "config.yaml").unlink()
    os.mkfifo(folder / "config.yaml")
    result = run_cli("report", folder, "-o", tmp_path / "r.md")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "r.md").read_text().startswith(f"# Sweep report: {folder.name}\n")


def test_schedule_files_and_a_graph_that_are_devices_are_refused(results, tmp_path):
    schedule = next((results / "schedules").rglob("*.json"))
    refused_in_process(run_cli("plot", "/dev/zero", "--graph", CHAIN, "--kind", "timeline", "-o", tmp_path / "t.png"),
                       "/dev/zero: is a device, pipe or socket", "give schedule files")
    refused_in_process(run_cli("plot", schedule, "--graph", "/dev/zero", "--kind", "timeline", "-o",
                               tmp_path / "t.png"), "/dev/zero: is a device, pipe or socket", "give a graph file")
    refused_in_process(run_cli("plot", results, "--graph", "/dev/zero", "--kind", "timeline", "-o",
                               tmp_path / "t.png"), "no graph named '/dev/zero' in the results")


def test_journal_lines_that_are_not_utf8_or_too_long_are_left_out_with_a_count(results, tmp_path, monkeypatch):
    from remat_bench.app.sweep import journal

    folder = spoiled(results, tmp_path)
    longest = max(map(len, (folder / "journal.jsonl").read_bytes().splitlines(keepends=True)))
    monkeypatch.setattr(journal, "MAX_ROW_BYTES", longest)  # as if a row could be no longer than these
    with open(folder / "journal.jsonl", "ab") as fh:
        fh.write(b'{"graph": "\xff\xfe"}\n' + b"x" * (3 * longest) + b"\n")
    result = CliRunner().invoke(main, ["plot", str(folder), "--kind", "tradeoff", "-o", str(tmp_path / "p.png")])
    assert result.exit_code == 0, result.output
    assert f"note: 2 rows of {folder / 'journal.jsonl'} could not be read" in result.output
    assert len(load_table(folder)) == 6


# ---------------------------------------------------------------------- plot --within


@pytest.mark.parametrize("within", ["nan", "inf", "-inf", "1e400", "-1", "many"])
def test_within_refuses_what_is_not_a_finite_number_of_at_least_0(results, tmp_path, within):
    result = CliRunner().invoke(main, ["plot", str(results), "--kind", "profile", "--within", within,
                                       "-o", str(tmp_path / "p.png")])
    line = refused(result, "--within", within, "give a finite number of at least 0")
    assert result.exit_code == 2, line
    assert not (tmp_path / "p.png").exists()


def test_within_takes_a_finite_percentage(results, tmp_path):
    result = CliRunner().invoke(main, ["plot", str(results), "--kind", "profile", "--within", "0.5",
                                       "-o", str(tmp_path / "p.png")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "p.png").is_file()


# ---------------------------------------------------------------------- workers: at most one run per core


def many_workers(tmp_path, workers: int = 100000):
    config = tmp_path / "many.yaml"
    config.write_text(f"output: out\nworkers: {workers}\ngraphs: [{CHAIN}]\nmethods: [none, greedy]\n"
                      "budgets: [0.9, 0.8]\ntime_limit: 20\n")
    return config


@pytest.fixture
def two_cores(monkeypatch):
    """This machine has 2 cores, whatever it has (the cap is what is tested, not the host)."""
    from remat_bench.app.sweep import executors

    monkeypatch.setattr(executors, "usable_cores", lambda: 2, raising=False)


@pytest.fixture
def pools(monkeypatch):
    """The ``max_workers`` of every local pool the sweep opens."""
    from concurrent.futures import ThreadPoolExecutor

    from remat_bench.app.sweep import executors

    sizes: list[int] = []

    def recording(max_workers=None, **kwargs):
        sizes.append(max_workers)
        return ThreadPoolExecutor(max_workers=max_workers, **kwargs)

    monkeypatch.setattr(executors, "ThreadPoolExecutor", recording)
    return sizes


def test_a_config_asking_for_more_workers_than_cores_runs_one_per_core_and_says_so(tmp_path, two_cores, pools):
    result = CliRunner().invoke(main, ["sweep", str(many_workers(tmp_path))])
    assert result.exit_code == 0, result.output
    assert "warning: workers: 100000 is more than the 2 cores here; running 2 at a time" in result.output
    assert pools == [2]
    assert len(load_table(tmp_path / "out")) == 4


def test_workers_option_above_the_cores_is_cut_and_said_and_a_dry_run_says_it_too(tmp_path, two_cores, pools):
    dry = CliRunner().invoke(main, ["sweep", str(many_workers(tmp_path, 1)), "--workers", "7", "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "warning: --workers 7 is more than the 2 cores here; running 2 at a time" in dry.output
    assert pools == []  # nothing ran
    result = CliRunner().invoke(main, ["sweep", str(many_workers(tmp_path, 1)), "--workers", "7"])
    assert result.exit_code == 0, result.output
    assert "warning: --workers 7 is more than the 2 cores here; running 2 at a time" in result.output
    assert pools == [2]


def test_workers_within_the_cores_are_taken_as_asked_without_a_warning(tmp_path, two_cores, pools):
    result = CliRunner().invoke(main, ["sweep", str(many_workers(tmp_path, 1))])
    assert result.exit_code == 0, result.output
    assert "warning" not in result.output
    assert pools == [1]


def test_a_local_dask_cluster_starts_at_most_one_worker_per_core(two_cores, monkeypatch):
    distributed = pytest.importorskip("distributed")
    from remat_bench.app.sweep.executors import open_executor

    asked: list[int] = []

    class Started(Exception):
        pass

    def cluster(n_workers=None, **kwargs):
        asked.append(n_workers)
        raise Started  # no processes started: the count asked for is what is tested

    monkeypatch.setattr(distributed, "LocalCluster", cluster)
    with pytest.raises(Started), open_executor("dask", 100000):
        pass
    assert asked == [2]


def test_usable_cores_are_the_affinity_lowered_to_a_cgroup_quota(monkeypatch, tmp_path):
    import builtins
    import os

    from remat_bench.core import machine

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5}, raising=False)
    quota = tmp_path / "cpu.max"
    real_open = builtins.open

    def cgroup(path, *args, **kwargs):
        if str(path) == "/sys/fs/cgroup/cpu.max":
            return real_open(quota, *args, **kwargs)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", cgroup)
    quota.write_text("max 100000\n")
    assert machine.usable_cores() == 6
    quota.write_text("250000 100000\n")  # 2.5 CPUs of time: 3 runs keep them busy
    assert machine.usable_cores() == 3
    quota.unlink()
    assert machine.usable_cores() == 6


# ---------------------------------------------------------------------- --replay with nothing to replay

NO_TORCH = ("nothing to replay: no graph of this sweep is imported from PyTorch (a `torch:` entry in the config, "
            "or a file `remat-bench graphs import-torch` wrote), and only those can be replayed")


@pytest.fixture
def torch_there(monkeypatch):
    """--replay checks that PyTorch is installed; with no PyTorch graph it is never imported."""
    import remat_bench.torch

    monkeypatch.setattr(remat_bench.torch, "torch_available", lambda: True)


def test_replay_without_a_pytorch_graph_says_there_was_nothing_to_replay_and_why(tmp_path, torch_there):
    config = many_workers(tmp_path, 1)
    dry = CliRunner().invoke(main, ["sweep", str(config), "--replay", "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert NO_TORCH.replace("nothing to replay", "nothing will be replayed") in dry.output
    result = CliRunner().invoke(main, ["sweep", str(config), "--replay"])
    assert result.exit_code == 0, result.output
    assert result.output.count(NO_TORCH) == 1
    again = CliRunner().invoke(main, ["sweep", str(config), "--replay", "--resume"])
    assert again.exit_code == 0, again.output
    assert again.output.count(NO_TORCH) == 1


def test_nothing_to_replay_on_pytorch_graphs_says_whether_no_schedule_was_saved_or_all_were_replayed(tmp_path):
    from remat_bench.app.sweep.replays import nothing_to_replay

    mlp = SHIPPED / "torch-mlp-b64.json"

    def row(budget: str, **extra):
        return {"graph_sha256": "x", "method": "chen", "params": "{}", "budget_text": budget, "repeat": 0,
                "time_limit": 20.0, "graph_path": str(mlp), **extra}

    unsaved = [row("0.5", status="no_solution", schedule=None), row("0.4", status="timeout", schedule=None)]
    assert nothing_to_replay(unsaved, tmp_path) == ("nothing to replay: none of the 2 runs on graphs imported from "
                                                     "PyTorch saved a schedule (see their status and message)")
    replayed = [row("0.8", schedule="s.json"), row("0.8", schedule="s.json", replay_status="measured")]
    assert nothing_to_replay(replayed, tmp_path) == ("nothing to replay: the 1 schedule of PyTorch graphs was "
                                                      "replayed already")
    assert nothing_to_replay([row("0.8", graph_path=str(CHAIN))], tmp_path) == NO_TORCH
