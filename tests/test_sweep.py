"""Sweeps (docs/design.md section 8): config checks, hard limits, crashes, the journal and resuming, executors.

Runs that must hang or run out of memory are runs of test-only methods,
registered as a user's plugin is (`tests.plugins.register`: an entry point on
the import path), so that they reach the worker processes the sweep starts (and
Dask's workers), where a monkeypatched registry would not. ``sleepy`` is greedy
after sleeping $SLEEPY_SECONDS, and with $SLEEPY_PIDS=DIR it creates DIR/<pid>
first, so a test knows which process to kill; ``hog``'s module cannot be loaded
under a memory cap.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from remat_bench.app.cli import main
from remat_bench.app.sweep import load_config, run_sweep
from remat_bench.app.sweep.executors import _outcome
from remat_bench.app.sweep.journal import Journal
from remat_bench.app.sweep.keys import row_key
from remat_bench.app.sweep.results import (
    build_table,
    load_table,
    shifted_geometric_mean,
    summarize,
)
from remat_bench.app.sweep.tracing import trace_torch_graphs
from remat_bench.core.errors import ConfigError
from tests.helpers import ROOT, SHIPPED
from tests.plugins import register

CHAIN = SHIPPED / "chain-16-train.json"
FOREST = SHIPPED / "random-layered-60.json"
KNOWN_STATUSES = {"optimal", "feasible", "infeasible", "no_solution", "unsupported"}


def write_config(tmp_path: Path, body: str, name: str = "sweep.yaml") -> Path:
    path = tmp_path / name
    path.write_text(body.replace("CHAIN", str(CHAIN)).replace("FOREST", str(FOREST)), encoding="utf-8")
    return path


def small_config(tmp_path: Path, methods: str = "[greedy, chen]", budgets: str = "[0.8, 0.7]",
                 extra: str = "") -> Path:
    return write_config(tmp_path, f"""
name: small
output: out
time_limit: 20
graphs: [CHAIN]
methods: {methods}
budgets: {budgets}
{extra}
""")


def pid_gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1].startswith("Z")  # a zombie has ended
    except FileNotFoundError:
        return True


def wait_for(predicate, what: str, seconds: float = 60.0) -> None:
    """Poll until ``predicate()`` holds; fail naming ``what`` (a liveness guard, not a timing assertion)."""
    end = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > end:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.05)


# ---------------------------------------------------------------------- config


def test_config_expands_graphs_methods_grids_seeds_and_budgets(tmp_path):
    path = write_config(tmp_path, """
output: out
time_limit: 5
seeds: [0, 1]
repeats: 2
graphs:
  - CHAIN
  - generate: {kind: chain, layers: [4, 6]}
methods:
  - none
  - name: chen
    params: {variant: [greedy, sqrt]}
  - name: checkmate-lp
    params: {samples: 5}
budgets: [0.9, "80%"]
""")
    cfg = load_config(path)
    assert [g.name for g in cfg.graphs] == ["chain-16", "chain-4", "chain-6"]
    assert cfg.graphs[1].path == tmp_path / "out" / "graphs" / f"chain-4-{cfg.graphs[1].sha256[:8]}.json"
    # per graph and budget: none 1 + chen 2 variants + checkmate-lp 2 seeds; times 2 repeats
    assert len(cfg.runs) == 3 * 2 * (1 + 2 + 2) * 2
    assert {r.budget_text for r in cfg.runs} == {"0.9", "80%"}
    lp = [r for r in cfg.runs if r.method == "checkmate-lp"]
    assert {(r.seed, r.params["seed"], r.params["samples"]) for r in lp} == {(0, 0, 5), (1, 1, 5)}
    assert all(r.seed is None for r in cfg.runs if r.method in ("none", "chen"))
    assert len({r.key for r in cfg.runs}) == len(cfg.runs)
    assert cfg.grace == pytest.approx(5 + 0.05 * 5)


BAD_CONFIGS = [
    # (what, config text, line of the fault, words the message must hold)
    ("unknown top-level key", "graphs: [CHAIN]\nmethods: [none]\nbudgets: [0.8]\ntime_limt: 5\n", 4,
     ["unknown key 'time_limt'", "did you mean 'time_limit'"]),
    ("unknown method key", "graphs: [CHAIN]\nmethods:\n  - name: chen\n    param: {}\nbudgets: [0.8]\n", 4,
     ["unknown key 'param'"]),
    ("missing graph file", "graphs:\n  - CHAIN\n  - nowhere/g.json\nmethods: [none]\nbudgets: [0.8]\n", 3,
     ["nowhere/g.json does not exist"]),
    ("unset variable", "graphs:\n  - ${REMAT_BENCH_TEST_UNSET}/g.json\nmethods: [none]\nbudgets: [0.8]\n", 2,
     ["environment variable REMAT_BENCH_TEST_UNSET is not set"]),
    ("glob matching nothing", "graphs:\n  - glob: nowhere/*.json\nmethods: [none]\nbudgets: [0.8]\n", 2,
     ["matches no graph file"]),
    ("unknown method", "graphs: [CHAIN]\nmethods:\n  - none\n  - chenn\nbudgets: [0.8]\n", 4,
     ["unknown method 'chenn'", "known methods"]),
    ("unknown parameter", "graphs: [CHAIN]\nmethods:\n  - name: chen\n    params:\n      variant: sqrt\n"
     "      grid_size: 4\nbudgets: [0.8]\n", 6, ["method 'chen' has no parameter 'grid_size'"]),
    ("mistyped parameter", "graphs: [CHAIN]\nmethods:\n  - name: chen\n    params:\n      grid: [4, many]\n"
     "budgets: [0.8]\n", 5, ["parameter 'grid' of method 'chen' must be int", "'many'"]),
    ("parameter outside its choices", "graphs: [CHAIN]\nmethods:\n  - name: chen\n    params: {variant: cube}\n"
     "budgets: [0.8]\n", 4, ["must be one of greedy, sqrt"]),
    ("bad budget", "graphs: [CHAIN]\nmethods: [none]\nbudgets:\n  - 0.8\n  - 12 parsecs\n", 5,
     ["budget '12 parsecs'", "graph 'chain-16'"]),
    ("zero budget", "graphs: [CHAIN]\nmethods: [none]\nbudgets: [0.9, 0]\n", 3, ["must be more than zero"]),
    ("bad generator option", "graphs:\n  - generate: {kind: chain, nodes: 5}\nmethods: [none]\nbudgets: [0.8]\n",
     2, ["chain does not take --nodes"]),
    ("seed twice", "graphs: [CHAIN]\nseeds: [1, 2]\nmethods:\n  - name: moccasin\n    params: {seed: 3}\n"
     "budgets: [0.8]\n", 5, ["both in its params and from 'seeds'"]),
    ("bad memory limit", "graphs: [CHAIN]\nmethods: [none]\nbudgets: [0.8]\nmemory_limit: lots\n", 4,
     ["memory_limit 'lots' is not a size"]),
    ("address without dask", "graphs: [CHAIN]\nmethods: [none]\nbudgets: [0.8]\nexecutor: local\n"
     "address: tcp://h:8786\n", 5, ["'address' names a Dask scheduler; it needs 'executor: dask'"]),
    ("negative time limit", "graphs: [CHAIN]\nmethods: [none]\nbudgets: [0.8]\ntime_limit: -3\n", 4,
     ["'time_limit' must be a number above 0"]),
    ("torch without a model", "graphs:\n  - torch: {batch: 4}\nmethods: [none]\nbudgets: [0.8]\n", 2,
     ["a torch spec needs a 'model'"]),
    ("torch with an unknown key", "graphs:\n  - torch: {model: mlp, batchsize: 4}\nmethods: [none]\nbudgets: [0.8]\n",
     2, ["unknown key 'batchsize' in a torch spec (did you mean 'batch'?)"]),
    ("torch with an unknown model", "graphs:\n  - torch: {model: resnet9000}\nmethods: [none]\nbudgets: [0.8]\n",
     2, ["'resnet9000' is neither a zoo model"]),
]


@pytest.mark.parametrize(("what", "text", "line", "words"), BAD_CONFIGS, ids=[c[0] for c in BAD_CONFIGS])
def test_a_bad_config_is_one_sentence_naming_the_file_and_line(tmp_path, monkeypatch, what, text, line, words):
    monkeypatch.delenv("REMAT_BENCH_TEST_UNSET", raising=False)
    path = write_config(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert message.startswith(f"{path}, line {line}: "), message
    for word in words:
        assert word in message, message
    assert "\n" not in message


def test_a_bad_config_fails_on_the_command_line_before_any_run(tmp_path):
    path = write_config(tmp_path, "output: out\ngraphs: [CHAIN]\nmethods: [none, greedy]\nbudgets: [0.8, nope]\n")
    result = CliRunner().invoke(main, ["sweep", str(path)])
    assert result.exit_code == 2
    assert f"{path}, line 4: budget 'nope' is not understood" in result.output
    assert not (tmp_path / "out").exists()


def test_yaml_syntax_errors_and_empty_configs_name_the_file(tmp_path):
    broken = write_config(tmp_path, "graphs: [CHAIN\nmethods: [none]\n", "broken.yaml")
    with pytest.raises(ConfigError, match=r"broken.yaml, line \d+: not valid YAML"):
        load_config(broken)
    empty = write_config(tmp_path, "", "empty.yaml")
    with pytest.raises(ConfigError, match="the config is empty"):
        load_config(empty)


def test_shipped_configs_validate_and_name_the_published_graphs():
    from tests.helpers import PAPER_NAMES, paper_graph

    paths = {paper_graph(name) for name in PAPER_NAMES}
    paper = load_config(ROOT / "configs" / "paper-moccasin.yaml")
    assert {g.path for g in paper.graphs} == paths
    assert len(paper.graphs) == 7
    assert {r.budget_text for r in paper.runs} == {"0.9", "0.8"}
    assert paper.time_limit == 300
    for name in ("smoke", "demo", "tradeoff", "scaling", "paper-orderfree"):
        cfg = load_config(ROOT / "configs" / f"{name}.yaml")
        assert cfg.runs, name
    for name in ("smoke", "demo", "paper-moccasin", "paper-auto"):  # the portfolio runs beside its members
        assert "auto" in load_config(ROOT / "configs" / f"{name}.yaml").methods, name
    auto = load_config(ROOT / "configs" / "paper-auto.yaml")
    assert {g.path for g in auto.graphs} == paths and len(auto.runs) == 7 * 2 * 13 and auto.time_limit == 120
    anyorder = load_config(ROOT / "configs" / "paper-anyorder.yaml")
    assert len(anyorder.runs) == 24  # 4 random layered graphs x 2 budgets x (reorder, moccasin x 2 orders)
    scaling = load_config(ROOT / "configs" / "scaling.yaml")
    assert min(g.nodes for g in scaling.graphs) == 50 and max(g.nodes for g in scaling.graphs) == 2000


# ---------------------------------------------------------------------- running


def test_local_pool_and_dask_local_cluster_give_the_same_rows(tmp_path):
    path = small_config(tmp_path)
    local = run_sweep(load_config(path, output=tmp_path / "local"), workers=2)
    dask = run_sweep(load_config(path, output=tmp_path / "dask"), workers=2, executor="dask")
    assert len(local.table) == len(dask.table) == 4
    columns = ["run_id", "method", "budget_text", "status", "peak", "duration", "overhead_pct", "schedule"]
    assert local.table[columns].equals(dask.table[columns])
    assert set(local.table["status"]) <= KNOWN_STATUSES
    assert (local.table["status"] == "feasible").sum() >= 3
    # The schedules were written by the worker processes, relative to the folder, and score the same.
    from remat_bench.core.graph_io import load_graph
    from remat_bench.core.schedule import load_schedule
    from remat_bench.core.simulate import simulate

    g = load_graph(CHAIN)
    for row in dask.table[dask.table["schedule"].notna()].itertuples():
        sim = simulate(g, load_schedule(tmp_path / "dask" / row.schedule, g))
        assert (sim.peak, sim.duration) == (row.peak, row.duration)


def test_rows_carry_the_design_columns_and_provenance(tmp_path):
    outcome = run_sweep(load_config(small_config(tmp_path, methods="[chen]", budgets="[0.8]"), output=tmp_path / "o"),
                        workers=1, csv=True)
    row = outcome.table.iloc[0]
    assert row["graph"] == "chain-16" and row["nodes"] == 33 and row["edges"] == 63
    assert row["status"] == "feasible" and row["budget"] == 14 and row["budget_fraction"] == 0.8
    assert row["peak"] <= 14 and row["baseline_peak"] == 18 and row["overhead_pct"] > 0
    assert json.loads(row["params"]) == {"grid": 48, "variant": "greedy"}
    assert row["peak_rss"] > 1 << 20 and row["wall_time_s"] >= row["solve_time_s"]
    assert row["remat_bench_version"] and row["python_version"] and row["host"] and row["ortools_version"]
    assert (tmp_path / "o" / "results.csv").exists() and (tmp_path / "o" / "config.yaml").exists()


def test_a_run_past_its_limit_is_killed_and_recorded_as_timeout(tmp_path, monkeypatch):
    register(tmp_path / "plugins", monkeypatch)
    pids = tmp_path / "pids"
    pids.mkdir()
    monkeypatch.setenv("SLEEPY_SECONDS", "600")
    monkeypatch.setenv("SLEEPY_PIDS", str(pids))
    path = write_config(tmp_path, """
output: out
time_limit: 1
grace: 0.5
graphs: [CHAIN]
methods: [sleepy, chen]
budgets: [0.8]
""")
    outcome = run_sweep(load_config(path), workers=2)
    rows = outcome.table.set_index("method")
    assert rows.loc["sleepy", "status"] == "timeout"
    assert "overstayed its time limit of 1 s (and 0.5 s of grace)" in rows.loc["sleepy", "message"]
    assert rows.loc["chen", "status"] == "feasible"  # the sweep went on
    (pid,) = [int(p.name) for p in pids.iterdir()]
    assert pid_gone(pid)  # killed, not left sleeping


def test_a_worker_killed_mid_run_is_recorded_and_resuming_adds_nothing(tmp_path, monkeypatch):
    register(tmp_path / "plugins", monkeypatch)
    pids = tmp_path / "pids"
    pids.mkdir()
    monkeypatch.setenv("SLEEPY_SECONDS", "600")
    monkeypatch.setenv("SLEEPY_PIDS", str(pids))
    cfg = load_config(small_config(tmp_path, methods="[sleepy, chen]"))
    done = {}
    sweep = threading.Thread(target=lambda: done.setdefault("outcome", run_sweep(cfg, workers=2)))
    sweep.start()
    wait_for(lambda: any(pids.iterdir()), "a sleeping sleepy worker")
    first = next(pids.iterdir())
    os.kill(int(first.name), signal.SIGKILL)
    # The second sleepy run (other budget) sleeps too: kill it the same way.
    wait_for(lambda: len(list(pids.iterdir())) == 2, "the second sleepy worker")
    for p in pids.iterdir():
        if p != first:
            os.kill(int(p.name), signal.SIGKILL)
    sweep.join(120)
    table = done["outcome"].table
    assert len(table) == 4
    killed = table[table["method"] == "sleepy"]
    assert list(killed["status"]) == ["error", "error"]
    assert all("killed by signal SIGKILL" in m for m in killed["message"])
    assert set(table.loc[table["method"] == "chen", "status"]) == {"feasible"}

    monkeypatch.delenv("SLEEPY_SECONDS")
    again = run_sweep(cfg, resume=True)
    assert again.finished == 0 and again.skipped == 4
    assert again.table.equals(table)
    assert len({row_key(r) for r in Journal(cfg.output / "journal.jsonl").rows()}) == 4


def test_killing_the_sweep_itself_and_resuming_loses_and_duplicates_nothing(tmp_path, monkeypatch):
    register(tmp_path / "plugins", monkeypatch)
    pids = tmp_path / "pids"
    pids.mkdir()
    path = small_config(tmp_path, methods="[none, sleepy, chen]", budgets="[0.8, 0.7]")
    env = dict(os.environ, SLEEPY_SECONDS="600", SLEEPY_PIDS=str(pids))
    parent = subprocess.Popen([sys.executable, "-m", "remat_bench.app.cli", "sweep", str(path), "--workers", "1"],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    journal = tmp_path / "out" / "journal.jsonl"
    wait_for(lambda: any(pids.iterdir()), "the sweep to reach the sleeping sleepy run")
    assert len(journal.read_text().splitlines()) == 1  # none at 0.8 is done; sleepy at 0.8 is running
    parent.kill()
    parent.wait()
    (pid,) = [int(p.name) for p in pids.iterdir()]
    wait_for(lambda: pid_gone(pid), "the orphaned worker to end itself")

    result = CliRunner().invoke(main, ["sweep", str(path), "--resume", "--workers", "2"])
    assert result.exit_code == 0, result.output
    assert "1 of 6 runs are in the journal already" in result.output
    table = load_table(tmp_path / "out")
    assert len(table) == 6
    assert sorted(table["method"]) == ["chen"] * 2 + ["none"] * 2 + ["sleepy"] * 2
    assert set(table["status"]) <= KNOWN_STATUSES
    lines = journal.read_text().splitlines()
    assert len(lines) == 6 and len({row_key(json.loads(x)) for x in lines}) == 6


def test_an_existing_sweep_is_not_overwritten_without_resume(tmp_path):
    path = small_config(tmp_path, methods="[chen]", budgets="[0.8]")
    assert CliRunner().invoke(main, ["sweep", str(path)]).exit_code == 0
    result = CliRunner().invoke(main, ["sweep", str(path)])
    assert result.exit_code == 2 and "pass --resume to continue it" in result.output
    dry = CliRunner().invoke(main, ["sweep", str(path), "--resume", "--dry-run"])
    assert dry.exit_code == 0 and "1 runs" in dry.output and "0 to run" in dry.output


def test_the_journal_survives_a_line_cut_short_by_a_kill(tmp_path):
    journal = Journal(tmp_path / "journal.jsonl")
    row = {"graph_sha256": "abc", "method": "chen", "params": "{}", "budget_text": "0.8", "seed": None,
           "repeat": 0, "time_limit": 5.0, "status": "feasible"}
    journal.append(row)
    with journal.path.open("a") as fh:
        fh.write('{"graph_sha256": "abc", "meth')  # the process died here
    journal.append(dict(row, budget_text="0.7"))
    assert [r["budget_text"] for r in journal.rows()] == ["0.8", "0.7"]
    assert journal.skipped_lines == 1
    table = build_table([*journal.rows(), dict(row, status="no_solution")])
    # de-duplicated by key, the last one winning
    assert dict(zip(table["budget_text"], table["status"])) == {"0.8": "no_solution", "0.7": "feasible"}


def test_a_crash_by_signal_names_the_signal_and_an_allocation_failure_is_oom():
    spec = {"time_limit": 5.0, "grace": 1.0, "memory_limit": None}
    crash = _outcome(spec, -signal.SIGSEGV, False, 1.0, "", "solver: starting\n")
    assert crash["status"] == "error"
    assert "killed by signal SIGSEGV (Segmentation fault)" in crash["message"]
    assert "solver: starting" in crash["message"]
    capped = dict(spec, memory_limit=1 << 30)
    oom = _outcome(capped, -signal.SIGABRT, False, 1.0, "", "terminate called after 'std::bad_alloc'\n")
    assert oom["status"] == "oom" and "under the cap of 1073741824 bytes" in oom["message"]


def test_running_out_of_the_memory_cap_is_recorded_as_oom(tmp_path, monkeypatch):
    # hog's module asks for 4 GiB under a 2 GiB cap as the worker loads it, before solving: MemoryError in the
    # worker, recorded with the cap, and the sweep goes on.
    register(tmp_path / "plugins", monkeypatch)
    path = write_config(tmp_path, """
output: out
time_limit: 20
memory_limit: 2GiB
graphs: [CHAIN]
methods: [hog, chen]
budgets: [0.8]
""")
    outcome = run_sweep(load_config(path), workers=1)
    rows = outcome.table.set_index("method")
    assert rows.loc["hog", "status"] == "oom"
    assert rows.loc["hog", "message"] == "the run ran out of memory under the cap of 2147483648 bytes"
    assert rows.loc["hog", "termination"] == "resource_limit"
    assert rows.loc["chen", "status"] == "feasible"
    assert rows.loc["chen", "termination"] == "converged"


def test_a_cap_too_small_to_load_the_solver_is_recorded_not_fatal(tmp_path):
    path = write_config(tmp_path, """
output: out
time_limit: 20
memory_limit: 64MiB
graphs: [CHAIN]
methods: [moccasin]
budgets: [0.8]
""")
    (row,) = run_sweep(load_config(path), workers=1).table.itertuples()
    assert row.status == "oom"
    # Where the allocation fails (numpy, the solver library, the interpreter) varies; the record does not.
    assert row.message.startswith("the run ran out of memory under the cap of 67108864 bytes")


def test_shifted_geometric_mean_and_summary():
    assert shifted_geometric_mean([0.0, 0.0], 1.0) == pytest.approx(0.0)
    assert shifted_geometric_mean([1.0, 3.0], 1.0) == pytest.approx((2 * 4) ** 0.5 - 1)
    assert shifted_geometric_mean([], 1.0) != shifted_geometric_mean([], 1.0)  # NaN
    rows = []
    for i, (method, status, overhead, t) in enumerate([
        ("chen", "feasible", 3.0, 0.5), ("chen", "no_solution", None, 0.1), ("chen", "unsupported", None, 0.0),
        ("moccasin", "optimal", 1.0, 2.0), ("moccasin", "timeout", None, None),
    ]):
        rows.append({"graph_sha256": "g", "graph": "g", "method": method, "params": "{}", "budget_text": str(i),
                     "seed": None, "repeat": 0, "time_limit": 10.0, "status": status, "overhead_pct": overhead,
                     "solve_time_s": t})
    by = {s.label: s for s in summarize(build_table(rows))}
    assert (by["chen"].runs, by["chen"].applicable, by["chen"].successes) == (3, 2, 1)
    assert by["chen"].overhead_sgm == pytest.approx(3.0)
    assert by["chen"].solve_time_sgm == pytest.approx(((0.5 + 1) * (10 + 1)) ** 0.5 - 1)
    assert by["moccasin"].timeouts == 1 and by["moccasin"].success_rate == 0.5


def test_smoke_config_runs_end_to_end(tmp_path):
    result = CliRunner().invoke(main, ["sweep", str(ROOT / "configs" / "smoke.yaml"), "--output",
                                       str(tmp_path / "smoke"), "--csv"])
    assert result.exit_code == 0, result.output
    table = load_table(tmp_path / "smoke")
    cfg = load_config(ROOT / "configs" / "smoke.yaml", output=tmp_path / "smoke")
    assert len(table) == len(cfg.runs)
    assert set(table["method"]) == set(cfg.methods)
    assert not table["status"].isin(["error", "oom", "over_budget"]).any(), table[["method", "message"]]
    # none, chen, greedy and dtr end on their own and answer every instance of this config (no budget of it is
    # below a graph's floor), whatever the machine's load.
    rules = table[table["method"].isin(["none", "chen", "greedy", "dtr"])]
    assert rules["status"].isin(["optimal", "feasible"]).sum() >= len(rules) // 2
    # auto, the portfolio, is as fast as the best of every method on each instance (within 0.01 point) where
    # it proved its answer against the any-order bound, which no schedule beats; where it ran out of time the
    # comparison is the machine's speed's, and auto found a schedule at least.
    found = table[table["status"].isin(["optimal", "feasible"])]
    for (graph, budget), runs in found.groupby(["graph", "budget_text"]):
        best = runs.loc[runs["method"] != "auto", "overhead_pct"].min()
        auto = runs[runs["method"] == "auto"]
        assert len(auto) == 1, (graph, budget)
        if auto["status"].iloc[0] == "optimal":
            assert auto["overhead_pct"].iloc[0] <= best + 0.01, (graph, budget, auto["overhead_pct"].tolist(), best)
    report = CliRunner().invoke(main, ["report", str(tmp_path / "smoke"), "-o", str(tmp_path / "r" / "smoke.md")])
    assert report.exit_code == 0, report.output
    text = (tmp_path / "r" / "smoke.md").read_text()
    assert "## Summary per method" in text
    assert text.count("; auto ") == len(found.groupby(["graph", "budget_text"])) and "(=)" in text


def test_a_torch_entry_traces_each_combination_and_names_it_by_its_arguments(tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "tiny.py").write_text(
        "from torch import nn\n\n\ndef make(width=8):\n"
        "    return nn.Sequential(nn.Linear(4, width), nn.ReLU(), nn.Linear(width, 3))\n")
    path = write_config(tmp_path, """
name: traced
graphs:
  - torch: {model: mlp, batch: [2, 4]}
  - torch: {model: "tiny:make", batch: 2, input_shape: [4], kwargs: {width: [8, 16]}}
methods: [none]
budgets: [0.9]
""")
    read = load_config(path)
    # Reading a config traces nothing (tracing runs the model's code): the graphs wait for the sweep.
    assert read.graphs == [] and read.runs == [] and read.planned_runs == 4
    assert [g.name for g in read.pending] == ["torch-mlp-b2", "torch-mlp-b4", "torch-tiny-make-b2-width8",
                                              "torch-tiny-make-b2-width16"]
    cfg = trace_torch_graphs(read)
    names = [g.name for g in cfg.graphs]
    assert names == ["torch-mlp-b2", "torch-mlp-b4", "torch-tiny-make-b2-width8", "torch-tiny-make-b2-width16"]
    assert len({g.sha256 for g in cfg.graphs}) == 4 and len(cfg.runs) == 4 and cfg.pending == []
    # Written under the results folder by the run, as generated graphs are; a resumed sweep traces again.
    assert all(str(g.path).startswith(str(cfg.output / "graphs")) for g in cfg.graphs)


def test_the_production_config_names_registered_methods_with_valid_parameters():
    import yaml

    from remat_bench.app.catalog import get_method

    config = yaml.safe_load((ROOT / "configs" / "production.yaml").read_text())
    names = set()
    for entry in config["methods"]:
        name = entry if isinstance(entry, str) else entry["name"]
        method = get_method(name)
        for key, values in ({} if isinstance(entry, str) else entry.get("params", {})).items():
            for value in values if isinstance(values, list) else [values]:
                method.parse_params({key: value})
        names.add(name)
    assert {"torch-budget", "knapsack", "dtr", "policy", "auto"} <= names


def test_progress_lines_name_the_variant_and_where_a_proof_holds():
    """Issue 30 item 15: the lines dropped '(in its space)' and the method's variant ('chen ... at 0.9' twice)."""
    from remat_bench.app.sweep.progress import describe

    row = {"method": "chen", "params": '{"variant":"greedy"}', "graph": "chain-16", "budget_text": "0.9",
           "status": "feasible", "overhead_pct": 16.3265, "solve_time_s": 0.02, "status_holds_for": None}
    assert describe(row) == "chen (variant=greedy) on chain-16 at 0.9: feasible, +16.33 %, 0.02 s"
    none = {**row, "method": "none", "params": "{}", "status": "infeasible", "overhead_pct": 0.0,
            "status_holds_for": "the method's space"}
    assert describe(none) == "none on chain-16 at 0.9: infeasible (in its space), 0.02 s"
    proven = {**row, "status": "feasible", "status_holds_for": "every schedule", "proven_optimal": True}
    assert describe(proven) == "chen (variant=greedy) on chain-16 at 0.9: feasible (proven), +16.33 %, 0.02 s"
