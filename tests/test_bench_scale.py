"""benchmarks/bench_scale.py: the process-tree memory of a real child, its time-out, its table row and its settings."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from benchmarks import bench_scale
from benchmarks.bench_scale import Instance, Measured, row, run_measured
from remat_bench.generators import chain

MiB = 2**20

# Run with a depth (and seconds to hold): below depth 2 it holds 150 MiB (touched, so resident); at depth > 0 it
# starts itself one level deeper and waits for it; the deepest sleeps (2 s by default) and ends.
HOLD = """
import subprocess, sys, time
depth = int(sys.argv[1])
block = b"x" * (150 * 2**20) if depth < 2 else b""
if depth > 0:
    kid = subprocess.Popen([sys.executable, __file__, str(depth - 1), *sys.argv[2:]])
    print(kid.pid, flush=True)
    kid.wait()
else:
    time.sleep(float(sys.argv[2]) if len(sys.argv) > 2 else 2)
"""


def test_the_peak_is_summed_over_the_whole_tree_while_the_largest_process_is_one_of_them(tmp_path: Path) -> None:
    script = tmp_path / "hold.py"
    script.write_text(HOLD)
    # The child holds nothing; its child and grandchild hold 150 MiB each at the same time.
    measured = run_measured([sys.executable, str(script), "2"], timeout=120, every=0.05)
    assert measured.exit_code == 0 and not measured.timed_out
    assert measured.tree_peak >= 300 * MiB
    # One process's: the sum above came from the whole tree. Not the kernel's ru_maxrss, which counts the
    # forking process's memory up to exec (this test failed under the full suite, pytest at 700 MiB).
    assert 150 * MiB <= measured.largest < 300 * MiB


def test_the_largest_process_is_not_the_forking_parents_memory(tmp_path: Path) -> None:
    script = tmp_path / "hold.py"
    script.write_text(HOLD)
    ballast = bytearray(400 * MiB)  # this process holds 400 MiB (touched) when it starts the child
    ballast[:: 4096] = b"x" * len(ballast[:: 4096])
    measured = run_measured([sys.executable, str(script), "2"], timeout=120, every=0.05)
    del ballast
    assert measured.exit_code == 0
    assert 150 * MiB <= measured.largest < 300 * MiB and 300 * MiB <= measured.tree_peak < 600 * MiB


def test_a_child_past_its_time_is_stopped_with_its_descendants(tmp_path: Path) -> None:
    script = tmp_path / "hold.py"
    script.write_text(HOLD)
    measured = run_measured([sys.executable, str(script), "1", "600"], timeout=3, every=0.05)
    assert measured.timed_out
    assert measured.exit_code == -9  # SIGKILL
    grandchild = int(measured.stdout.split()[0])
    # SIGKILL takes effect when the process is next scheduled: give it (generously) the time to end.
    for _ in range(200):
        try:
            state = Path(f"/proc/{grandchild}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            state = "gone"
        if state in ("gone", "Z"):  # ended (a zombie until whoever adopted it reaps it)
            break
        time.sleep(0.05)
    else:
        os.kill(grandchild, signal.SIGKILL)  # leave nothing behind when the test fails
    assert state in ("gone", "Z")


def test_a_row_reads_the_times_to_the_bound_from_the_runs_progress() -> None:
    graph = chain(3)
    answer = {"status": "feasible", "overhead_pct": 10.3, "baseline_duration": 100.0,
              "lower_bound_any_order": 110.0, "stats": {"bound_any_order": {"from_cache": True}},
              "progress": [{"time_s": 0.0, "duration": None, "peak": None, "overhead_pct": None,
                            "source": "any-order bound", "bound": None},
                           {"time_s": 0.3, "duration": 113.0, "peak": 5, "overhead_pct": 13.0, "source": "dtr"},
                           {"time_s": 1.5, "duration": 110.8, "peak": 5, "overhead_pct": 10.8, "source": "knapsack"},
                           {"time_s": 4.0, "duration": 110.3, "peak": 5, "overhead_pct": 10.3, "source": "moccasin"}]}
    measured = Measured(0, 12.34, json.dumps(answer), "", 3 * 2**30, 2**30, False)
    assert row(Instance("Llama-32", lambda: graph, 600.0), graph, "auto", 600.0, 110.0, measured) == [
        "Llama-32", f"{graph.n:,}", "auto", "600", "0.3", "1.5", "4.0", "-", "+10.300%", "+10.000%", "0.300",
        "12.3", "3.00", "1.00", ""]


def test_a_child_that_printed_no_answer_is_a_row_that_says_why() -> None:
    graph = chain(3)
    measured = Measured(2, 0.5, "", "Traceback\nerror: the graph file is not JSON\n", 0, 0, False)
    out = row(Instance("GPT-12", lambda: graph, 120.0), graph, "auto", 120.0, None, measured)
    assert out[4:11] == ["-", "-", "-", "-", "-", "-", "-"]
    assert out[-1] == "exit 2: error: the graph file is not JSON"


@pytest.mark.parametrize(("name", "value", "message"), [
    ("BENCH_SCALE_LIMIT", "ten", "error: BENCH_SCALE_LIMIT='ten' is not a positive number of seconds; give one "
                                 "such as BENCH_SCALE_LIMIT=60"),
    ("BENCH_SCALE_BOUND", "-5", "error: BENCH_SCALE_BOUND='-5' is not a positive number of seconds; give one "
                                "such as BENCH_SCALE_BOUND=60"),
    ("BENCH_SCALE_ONLY", "GPT-7", "error: BENCH_SCALE_ONLY='GPT-7' names none of the instances (GPT-12, GPT-24, "
                                  "GPT-48, GPT-96, transformer-10k, Llama-8, Llama-16, Llama-32); give part of one "
                                  "of their labels"),
])
def test_a_bad_setting_is_one_sentence_and_exit_2(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture,
                                                  name: str, value: str, message: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as stop:
        bench_scale.main()
    assert stop.value.code == 2
    assert " ".join(capsys.readouterr().out.split()) == message
