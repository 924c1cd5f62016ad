"""Bad input to what reads a results folder and to the options of plot and sweep (docs/sweeps.md): a corrupt
table, a journal naming a device or a pipe, a non-finite --within, more workers than cores, a replay with
nothing to replay. Each is one sentence and an exit status, never a traceback or a hang; each test here
failed before the fix it covers.

The results folder is one tiny sweep (none, chen and greedy on the shipped chain at two budgets), copied
and spoiled by each test.
"""

from __future__ import annotations

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
