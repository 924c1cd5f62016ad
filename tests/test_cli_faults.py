"""Faults a hostile tester found in `solve` and its neighbours: closed pipes, non-finite numbers, too many
jobs, bad budgets in schedule files, and time beyond the limit (docs/design.md section 7)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner
from rich.console import Console

from remat_bench.app.cli import main
from remat_bench.app.cli.helpers import STDOUT_CLOSED_STATUS
from remat_bench.app.cli.live import LiveProgress
from remat_bench.core.progress import ANY_ORDER, ProgressPoint
from remat_bench.methods.base import Membership, Method, Role
from tests.helpers import SHIPPED

CHAIN = str(SHIPPED / "chain-16-train.json")


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def run_with_closed(stream: str, *args: str) -> subprocess.CompletedProcess:
    """``remat-bench ARGS`` with ``stream`` (stdout or stderr) a pipe whose reader has already gone,
    the other one captured: every write to ``stream`` meets EPIPE."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    other = subprocess.PIPE
    try:
        return subprocess.run([sys.executable, "-m", "remat_bench.app.cli", *args],
                              stdout=write_end if stream == "stdout" else other,
                              stderr=write_end if stream == "stderr" else other,
                              text=True, timeout=120)
    finally:
        os.close(write_end)


# ---------------------------------------------------------------------- closed pipes


def test_a_closed_stderr_drops_the_progress_lines_and_the_solve_answers():
    # Before: rich's answer to the broken pipe (SystemExit(1), stdout sent to /dev/null) ended the solve
    # at its first --progress line with status 1, "no schedule", and no answer printed.
    proc = run_with_closed("stderr", "solve", CHAIN, "-m", "chen", "-b", "0.7", "--progress", "--json")
    assert proc.returncode == 0
    answer = json.loads(proc.stdout)
    assert answer["status"] == "feasible" and answer["peak"] <= answer["budget"]


def test_a_closed_stderr_keeps_the_no_schedule_status_for_no_schedule():
    proc = run_with_closed("stderr", "solve", CHAIN, "-m", "none", "-b", "0.5", "--progress", "--json")
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["status"] == "infeasible"


@pytest.mark.parametrize("as_json", [False, True])
def test_a_closed_stdout_ends_quietly_as_a_unix_tool_and_still_writes_the_schedule(tmp_path, as_json):
    # Before: status 1 ("no schedule") from rich's handler, or click's for JSON.
    target = tmp_path / "s.json"
    proc = run_with_closed("stdout", "solve", CHAIN, "-m", "chen", "-b", "0.7", "-o", str(target),
                           *(["--json"] if as_json else []))
    assert proc.returncode == STDOUT_CLOSED_STATUS == 141
    assert proc.stderr == ""  # no traceback, no "Exception ignored" at exit
    assert json.loads(target.read_text())["method"] == "chen"


def test_a_closed_stdout_is_141_for_other_commands_too():
    proc = run_with_closed("stdout", "graphs", "show", CHAIN, "--json")
    assert (proc.returncode, proc.stderr) == (STDOUT_CLOSED_STATUS, "")


class _Unwritable:
    """A console whose stream fails as a full disk does."""

    def __init__(self) -> None:
        self.calls = 0

    def print(self, *args, **kwargs) -> None:
        self.calls += 1
        raise OSError(28, "No space left on device")


def test_a_progress_line_that_cannot_be_written_ends_the_lines_not_the_watcher():
    lines = _Unwritable()
    live = LiveProgress("solving", 100, lines=lines)  # type: ignore[arg-type]
    live.take(ProgressPoint(0.1, None, None, None, ANY_ORDER, 110))
    live.take(ProgressPoint(0.2, 120, 5, 20.0, "chen", None))
    assert lines.calls == 1 and live.lines is None
    assert live.incumbents["chen"].duration == 120  # the point was still taken


def test_progress_lines_on_a_working_console_are_printed():
    console = Console(file=io.StringIO(), record=True, width=200)
    live = LiveProgress("solving", 100, lines=console)
    live.take(ProgressPoint(0.2, 120, 5, 20.0, "chen", None))
    assert "chen: overhead +20.000%" in console.export_text()



# ---------------------------------------------------------------------- non-finite numbers


NOT_FINITE = ["nan", "inf", "-inf", "1e400"]


@pytest.mark.parametrize("value", NOT_FINITE)
@pytest.mark.parametrize("args", [
    ["solve", CHAIN, "-m", "chen", "-b", "0.7", "--gap"],  # before: nan ignored, inf stopped at the first schedule
    ["solve", CHAIN, "-m", "chen", "-b", "0.7", "-t"],
    ["floor", CHAIN, "-m", "chen", "-t"],
    ["bound", CHAIN, "-b", "0.7", "-t"],
    ["graphs", "fetch", "paper", "--source", "/nonexistent", "--deadline"],
])
def test_every_float_option_refuses_a_non_finite_number_in_one_sentence(args, value):
    r = invoke(*args, value)
    assert r.exit_code == 2, r.output
    assert r.output.startswith("error: Invalid value for") and "finite" in r.output
    assert r.output.count("\n") == 1


@pytest.mark.parametrize("budget", ["nan", "inf", "-inf", "1e400", "nan%", "inf%", "1e400%", "1e400GiB"])
@pytest.mark.parametrize("command", [["solve", CHAIN, "-m", "chen"], ["bound", CHAIN]])
def test_a_non_finite_budget_is_refused_in_one_sentence(command, budget):
    r = invoke(*command, f"--budget={budget}")
    assert r.exit_code == 2, r.output
    assert r.output.startswith(f"error: budget '{budget}'") and r.output.count("\n") == 1


def test_a_finite_gap_is_taken():
    r = invoke("solve", CHAIN, "-m", "chen", "-b", "0.7", "--gap", "0.5", "--json")
    assert r.exit_code == 0 and json.loads(r.output)["status"] == "feasible"


# ---------------------------------------------------------------------- a schedule file's budget


@pytest.fixture(scope="module")
def schedule_text(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("schedule") / "s.json"
    assert invoke("solve", CHAIN, "-m", "chen", "-b", "0.7", "-o", str(path)).exit_code == 0
    text = path.read_text()
    assert '"budget": 12,' in text
    return text


@pytest.mark.parametrize("budget", ["-5", "0", "-0.0", "1e400", "NaN", "-Infinity", '"12"', "true", "[12]"])
def test_a_schedule_file_whose_budget_no_run_has_is_refused_when_read(tmp_path, schedule_text, budget):
    # Before: -5 and 0 were read, and the schedule then judged "over budget" against them (replay, train).
    path = tmp_path / "bad.json"
    path.write_text(schedule_text.replace('"budget": 12,', f'"budget": {budget},'))
    r = invoke("simulate", CHAIN, str(path))
    assert r.exit_code == 2, r.output
    assert r.output.startswith(f"error: {path}: ") and r.output.count("\n") == 1
    assert "budget" in r.output or "finite" in r.output  # the field, or JSON's own word for NaN and Infinity


@pytest.mark.parametrize("budget", ["12", "12.5", "null"])
def test_a_schedule_file_with_a_budget_is_read(tmp_path, schedule_text, budget):
    path = tmp_path / "ok.json"
    path.write_text(schedule_text.replace('"budget": 12,', f'"budget": {budget},'))
    assert invoke("simulate", CHAIN, str(path)).exit_code == 0


@pytest.mark.parametrize("budget", [-5, 0, float("nan"), float("inf")])
def test_a_schedule_document_with_a_bad_budget_names_the_source_and_the_field(schedule_text, budget):
    from remat_bench.core.errors import ScheduleError
    from remat_bench.core.graph_io import load_graph
    from remat_bench.core.schedule import schedule_from_dict

    data = {**json.loads(schedule_text), "budget": budget}
    with pytest.raises(ScheduleError, match=r"^s\.json: field budget is"):
        schedule_from_dict(data, load_graph(CHAIN), "s.json")


def test_the_schema_refuses_a_negative_budget():
    import jsonschema

    from remat_bench.core.json_files import schema

    validator = jsonschema.Draft202012Validator(schema("schedule"))
    head = {"format": "remat-bench-schedule", "version": 1, "steps": []}
    assert not validator.is_valid({**head, "budget": -5})
    assert validator.is_valid({**head, "budget": 12}) and validator.is_valid({**head, "budget": None})


def test_zero_is_a_budget_only_on_a_graph_whose_sizes_are_all_zero(tmp_path):
    # There a fraction of the baseline peak (0) resolves to 0, and `solve -o` writes it.
    graph = tmp_path / "zero.json"
    graph.write_text(json.dumps({"format": "remat-bench-graph", "version": 1, "name": "zero", "nodes": [
        {"id": "a", "inputs": [], "memory": 0, "duration": 0},
        {"id": "b", "inputs": ["a"], "memory": 0, "duration": 0}]}))
    path = tmp_path / "s.json"
    assert invoke("solve", str(graph), "-m", "none", "-b", "0.8", "-o", str(path)).exit_code == 0
    assert json.loads(path.read_text())["budget"] == 0
    assert invoke("simulate", str(graph), str(path)).exit_code == 0


# ---------------------------------------------------------------------- too many jobs


def test_jobs_are_cut_to_the_cores_with_one_sentence(monkeypatch):
    from remat_bench.app import pipeline

    monkeypatch.setattr(pipeline, "usable_cores", lambda: 2)
    assert pipeline.jobs_at_once(100000, 5) == (2, "--jobs 100000 is more than the 2 cores here; running 2 at a time")
    assert pipeline.jobs_at_once(2, 5) == (2, None)
    assert pipeline.jobs_at_once(4, 3) == (2, "--jobs 4 is more than the 2 cores here; running 2 at a time")
    assert pipeline.jobs_at_once(100000, 1) == (1, None)  # one method: nothing runs side by side
    monkeypatch.setattr(pipeline, "usable_cores", lambda: 1)
    assert pipeline.jobs_at_once(3, 3) == (1, "--jobs 3 is more than the 1 core here; running 1 at a time")


def test_run_many_starts_no_more_children_than_cores(monkeypatch):
    # Before: a thread pool of -j workers, one child per method at once.
    from remat_bench.app import pipeline
    from remat_bench.core.budget import parse_budget
    from remat_bench.core.graph_io import load_graph
    from remat_bench.toolkit.bound_cache import BoundCache

    pools: list[int] = []
    real_pool = pipeline.ThreadPoolExecutor

    def pool(max_workers: int):
        pools.append(max_workers)
        return real_pool(max_workers=max_workers)

    monkeypatch.setattr(pipeline, "usable_cores", lambda: 2)
    monkeypatch.setattr(pipeline, "ThreadPoolExecutor", pool)
    monkeypatch.setattr(pipeline, "evaluate_in_child", pipeline.evaluate)  # the count is what matters, not where
    g = load_graph(CHAIN)
    results = pipeline.run_many(g, ["none", "chen", "greedy"], parse_budget("0.8", g), 5, {}, jobs=100000,
                                bounds=BoundCache())
    assert pools == [2]
    assert [r.method for r in results] == ["none", "chen", "greedy"]


def test_solve_says_so_when_it_cuts_the_jobs(monkeypatch):
    from remat_bench.app import pipeline

    monkeypatch.setattr(pipeline, "usable_cores", lambda: 1)  # one core: the runs go one after another here
    r = invoke("solve", CHAIN, "-m", "none", "-m", "chen", "-b", "0.7", "-j", "100000", "--json")
    assert r.exit_code == 0, r.output
    warning, answer = r.output.split("\n", 1)
    assert warning == "warning: --jobs 100000 is more than the 1 core here; running 1 at a time"
    assert [run["method"] for run in json.loads(answer)] == ["none", "chen"]


# ---------------------------------------------------------------------- the time limit covers the whole command


def test_the_run_gets_the_limit_less_the_time_spent_before_it_and_a_reserve_for_after():
    import time

    from remat_bench.app.cli.solve import AFTER_RUN_S, left_for_run

    started = time.perf_counter() - 2.0  # the command started 2 s ago (reading a large graph, say)
    assert left_for_run(10.0, started) <= 10.0 - 2.0 - AFTER_RUN_S
    assert left_for_run(1.0, started) == pytest.approx(0.1)  # a limit already spent leaves a tenth
    assert left_for_run(3.0, time.perf_counter()) <= 3.0 - 0.05 * 3.0  # the reserve is a twentieth at most


@pytest.mark.parametrize("command", [["solve", CHAIN, "-m", "chen", "-b", "0.7"], ["floor", CHAIN, "-m", "chen"]])
def test_solve_and_floor_hand_the_run_what_is_left_of_their_limit(monkeypatch, command):
    from remat_bench.app import pipeline

    given: list[float] = []
    for name in ("run", "run_many"):
        real = getattr(pipeline, name)

        def spy(*args, _real=real, **kwargs):
            given.append(args[3])  # the time limit, in both
            return _real(*args, **kwargs)

        monkeypatch.setattr(pipeline, name, spy)
    assert invoke(*command, "-t", "7").exit_code == 0
    assert len(given) == 1 and 0.7 <= given[0] <= 7 - 0.25


def test_a_solve_ends_without_the_interpreter_teardown_yet_flushes_and_runs_the_exit_handlers(tmp_path):
    # The teardown freed CP-SAT's models after the answer: 0.3-2.8 s past the limit on random_layered_n1000.
    target = tmp_path / "s.json"
    script = ("import atexit, sys\n"
              "atexit.register(lambda: print('exit handlers ran', file=sys.stderr))\n"
              "from remat_bench.app.cli import main\n"
              "main()\n")
    proc = subprocess.run([sys.executable, "-c", script, "solve", CHAIN, "-m", "chen", "-b", "0.7", "--json",
                           "-o", str(target)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["status"] == "feasible"
    assert proc.stderr.endswith("exit handlers ran\n")
    assert json.loads(target.read_text())["method"] == "chen"
    failed = subprocess.run([sys.executable, "-c", script, "solve", CHAIN, "-m", "none", "-b", "0.5"],
                            capture_output=True, text=True, timeout=120)
    assert failed.returncode == 1 and "infeasible" in failed.stdout


class Sleepy(Method):
    """An exact member that overruns its limit in a step it cannot interrupt (as moccasin's model build does)."""

    name = "sleepy"
    description = "sleeps past its time limit"
    member = Membership(Role.EXACT)

    def solve(self, graph, budget, time_limit, **params):
        import time

        time.sleep(10)
        raise AssertionError("never reached: the child is stopped at auto's limit first")


def test_auto_stops_an_exact_member_at_its_own_limit(monkeypatch):
    # Before: one exact member ran in auto's process, and auto ended when the member did.
    from remat_bench import methods
    from remat_bench.app.portfolio import TIME_OUT, Auto
    from remat_bench.core.budget import parse_budget
    from remat_bench.core.graph_io import load_graph
    from remat_bench.toolkit.bound_cache import BoundCache

    monkeypatch.setitem(methods.BUILTIN, "sleepy", f"{__name__}:Sleepy")  # the child loads it by its place
    monkeypatch.setattr(Auto, "_goals", lambda self, graph, budget: self.context)
    g = load_graph(CHAIN)
    run = pipeline_run(g, "auto", parse_budget("0.8", g), 2.0, {"members": "greedy,sleepy"}, BoundCache())
    members = {m["method"]: m for m in run.stats["members"]}
    assert members["sleepy"]["message"] == TIME_OUT
    assert (members["sleepy"]["status"], members["sleepy"]["termination"]) == ("no_solution", "time_limit")
    assert run.status.found_schedule and run.stats["winner"] == "greedy"


def pipeline_run(g, method, budget, time_limit, params, bounds):
    from remat_bench.app import pipeline

    return pipeline.run(g, method, budget, time_limit, params, bound=False, bounds=bounds)  # no goal: sleepy runs


def test_auto_without_a_bound_from_its_caller_gives_its_own_a_tenth_of_its_limit(monkeypatch):
    # Before: 3 s whatever the limit (solve --no-bound -t 1 on random_layered_n1000 took 3.4 s).
    from remat_bench.core.budget import parse_budget
    from remat_bench.core.graph_io import load_graph
    from remat_bench.toolkit.bound_cache import BoundCache

    efforts: list[float] = []
    real = BoundCache.get

    def spy(self, graph, budget, effort, *args, **kwargs):
        efforts.append(effort)
        return real(self, graph, budget, effort, *args, **kwargs)

    monkeypatch.setattr(BoundCache, "get", spy)
    g = load_graph(CHAIN)
    pipeline_run(g, "auto", parse_budget("0.8", g), 1.0, {"members": "greedy", "jobs": 1}, BoundCache())
    assert efforts and max(efforts) <= 0.5
