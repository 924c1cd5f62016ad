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
