"""Faults of the sweep itself (docs/sweeps.md): a busy, unwritable or vanishing results folder, a
worker that fails outside its method, logs of killed runs, a Dask cluster without workers, and how
fast answers count in the aggregates. Each test here failed before the fix it covers.

Unwritable folders: the tests run as root on this machine, and root ignores permission bits (a
folder chmod'ed 0o555 is still writable by root), so `freeze` uses the immutable attribute
(``chattr +i``, which binds root too) when running as root, and chmod otherwise; it checks that the
path really refuses a write before the test relies on it, and always undoes it (or pytest could not
remove the folder). A file where a folder is expected fails for root too and needs neither.

Runs that must hang or print are runs of the test-only method ``sleepy`` (tests/test_sweep.py explains it).
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from remat_bench.app.cli import main
from remat_bench.app.sweep import load_config, run_sweep
from remat_bench.app.sweep.journal import Journal
from remat_bench.app.sweep.keys import row_key
from remat_bench.app.sweep.results import (
    build_table,
    load_table,
    shifted_geometric_mean,
    summarize,
)
from tests.helpers import SHIPPED
from tests.plugins import register
from tests.test_sweep import pid_gone, wait_for

CHAIN = SHIPPED / "chain-16-train.json"
FOREST = SHIPPED / "random-layered-60.json"
SWEEP = [sys.executable, "-m", "remat_bench.app.cli", "sweep"]


def config(tmp_path: Path, methods: str = "[greedy, chen]", budgets: str = "[0.8]", extra: str = "",
           graphs: str = "[CHAIN]", name: str = "sweep.yaml", time_limit: float = 20) -> Path:
    path = tmp_path / name
    path.write_text(f"""
output: out
time_limit: {time_limit:g}
graphs: {graphs}
methods: {methods}
budgets: {budgets}
{extra}
""".replace("CHAIN", str(CHAIN)).replace("FOREST", str(FOREST)), encoding="utf-8")
    return path


def error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("error:")]


class Freezer:
    """``freeze(path)``: make a folder or file refuse writes, for root too; ``freeze.thaw(path)`` undoes it."""

    def __init__(self) -> None:
        self.root = os.geteuid() == 0
        self.frozen: list[Path] = []

    def __call__(self, path: Path) -> None:
        if self.root:
            done = subprocess.run(["chattr", "+i", str(path)], capture_output=True) if shutil.which("chattr") else None
            if done is None or done.returncode:
                pytest.skip("running as root, which ignores permission bits, and `chattr +i` is not available "
                            "on this file system")
        else:
            path.chmod(0o555 if path.is_dir() else 0o444)
        self.frozen.append(path)
        try:  # the test is only worth something if the path really refuses a write
            if path.is_dir():
                (path / ".probe").touch()
            else:
                os.close(os.open(path, os.O_WRONLY | os.O_APPEND))
        except OSError:
            return
        pytest.fail(f"{path} is still writable after freezing it")

    def thaw(self, path: Path) -> None:
        if self.root:
            subprocess.run(["chattr", "-i", str(path)], check=True)
        else:
            path.chmod(0o755 if path.is_dir() else 0o644)


@pytest.fixture
def freeze() -> Iterator[Freezer]:
    freezer = Freezer()
    yield freezer
    for path in reversed(freezer.frozen):  # or pytest could not remove the folder
        freezer.thaw(path)


# ---------------------------------------------------------------------- 3: one sweep per results folder


def test_a_second_sweep_on_a_busy_folder_is_refused_and_a_killed_sweep_leaves_no_stale_lock(tmp_path, monkeypatch):
    register(tmp_path / "plugins", monkeypatch)
    pids = tmp_path / "pids"
    pids.mkdir()
    path = config(tmp_path, methods="[sleepy, chen]")
    first = subprocess.Popen([*SWEEP, str(path), "--workers", "1"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             env=dict(os.environ, SLEEPY_SECONDS="600", SLEEPY_PIDS=str(pids)))
    try:
        wait_for(lambda: any(pids.iterdir()), "the first sweep to start its sleepy run")
        # A second sweep, resuming or not, while the first one runs: refused, nothing run or journaled.
        for extra in (["--resume"], []):
            second = subprocess.run([*SWEEP, str(path), *extra], capture_output=True, text=True, timeout=120)
            assert second.returncode == 2, second.stderr
            assert error_lines(second.stderr) == [
                f"error: {tmp_path / 'out'} is in use by another sweep (process {first.pid} on host "
                f"{socket.gethostname()}); wait for it to end, or choose another --output"], second.stderr
            assert "Traceback" not in second.stderr
        journal = tmp_path / "out" / "journal.jsonl"
        assert not journal.exists() or journal.read_text() == ""
    finally:
        first.kill()  # SIGKILL: the sweep cannot release anything itself
        first.wait()
    (pid,) = [int(p.name) for p in pids.iterdir()]
    wait_for(lambda: pid_gone(pid), "the first sweep's orphaned run to end itself")

    # The kernel dropped the dead sweep's lock: resuming works at once and runs each run once.
    again = subprocess.run([*SWEEP, str(path), "--resume"], capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    lines = journal.read_text().splitlines()
    assert len(lines) == 2 and len({row_key(json.loads(line)) for line in lines}) == 2
    assert sorted(load_table(tmp_path / "out")["status"]) == ["feasible", "feasible"]


# ---------------------------------------------------------------------- 4: worker failures outside the method


def test_a_schedule_that_cannot_be_saved_keeps_its_measurements_names_its_cause_and_exits_1(tmp_path, freeze):
    from remat_bench.app.pipeline import run
    from remat_bench.core.graph_io import load_graph

    path = config(tmp_path, methods="[greedy]", budgets="[0.8, 0.1]")
    folder = tmp_path / "out" / "schedules" / "chain-16"
    folder.mkdir(parents=True)
    freeze(folder)
    result = CliRunner().invoke(main, ["sweep", str(path), "--workers", "2"])
    assert result.exit_code == 1, result.output
    rows = load_table(tmp_path / "out").set_index("budget_text")
    greedy = rows.loc["0.8"]
    assert greedy["status"] == "error"
    assert re.search(r"^the run's feasible schedule could not be saved: \w+Error: .*"
                     r"(Operation not permitted|Permission denied)", greedy["message"]), greedy["message"]
    assert "SIGABRT" not in greedy["message"]
    # What the method found is kept: the same peak and duration as solving it here.
    solved = run(load_graph(CHAIN), "greedy", "0.8", 20.0)
    assert (greedy["peak"], greedy["duration"]) == (solved.peak, solved.duration)
    assert greedy["overhead_pct"] == pytest.approx(solved.overhead_pct)
    assert pd_missing(greedy["schedule"])
    assert json.loads(greedy["stats"])["method_status"] == "feasible"
    # A run that merely found no schedule (below the memory floor) is no fault of the sweep.
    assert rows.loc["0.1", "status"] == "infeasible"
    assert "1 run failed for reasons of the sweep itself, e.g. the run's feasible schedule could not be saved" \
        in result.output
    log = (tmp_path / "out" / "logs" / f"{greedy['run_id']}.log").read_text()
    assert "Fatal Python error" not in log and "save_schedule" in log
    marks = {row["budget_text"]: row.get("sweep_fault") for row in Journal(tmp_path / "out" / "journal.jsonl").rows()}
    assert marks == {"0.8": True, "0.1": None}

    # --resume runs the faulted run again (and only it) once the folder can be written.
    freeze.thaw(folder)
    again = CliRunner().invoke(main, ["sweep", str(path), "--resume"])
    assert again.exit_code == 0, again.output
    assert "1 of 2 runs are in the journal already; running the other 1" in again.output
    rows = load_table(tmp_path / "out").set_index("budget_text")
    assert list(rows["status"]) == ["feasible", "infeasible"]
    assert (tmp_path / "out" / rows.loc["0.8", "schedule"]).is_file()


def pd_missing(value: object) -> bool:
    import pandas as pd

    return bool(pd.isna(value))


# ---------------------------------------------------------------------- 5: unwritable results folders


def _finished_sweep(tmp: Path) -> Path:
    assert CliRunner().invoke(main, ["sweep", str(config(tmp, methods="[chen]"))]).exit_code == 0
    return tmp / "out"


def _read_only_parent(tmp: Path, freeze: Freezer) -> Path:
    (tmp / "ro").mkdir()
    freeze(tmp / "ro")
    return tmp / "ro" / "out"


def _read_only_folder(tmp: Path, freeze: Freezer) -> Path:
    (tmp / "out").mkdir()
    freeze(tmp / "out")
    return tmp / "out"


def _read_only_old_sweep(tmp: Path, freeze: Freezer) -> Path:
    freeze(_finished_sweep(tmp))
    return tmp / "out"


def _read_only_journal(tmp: Path, freeze: Freezer) -> Path:
    freeze(_finished_sweep(tmp) / "journal.jsonl")
    return tmp / "out"


def _file_for_folder(tmp: Path, freeze: Freezer) -> Path:
    (tmp / "out").write_text("mine\n")
    return tmp / "out"


def _file_for_logs(tmp: Path, freeze: Freezer) -> Path:
    (tmp / "out").mkdir()
    (tmp / "out" / "logs").write_text("mine\n")
    return tmp / "out"


UNWRITABLE = {
    # case: (prepare -> the output folder to pass, extra arguments, what the sentence says)
    "read-only parent": (_read_only_parent, [], "{out} cannot be written ("),
    "read-only folder": (_read_only_folder, [], "{out} cannot be written ("),
    "resume on a read-only folder": (_read_only_old_sweep, ["--resume"], "{out} cannot be written ("),
    "resume with a read-only journal": (_read_only_journal, ["--resume"], "({out}/journal.jsonl: "),
    "a file where the folder goes": (_file_for_folder, [], "{out} is a file, not a folder"),
    "a file where the logs go": (_file_for_logs, [], "holds a file 'logs' where the sweep keeps its logs folder"),
}


@pytest.mark.parametrize("case", list(UNWRITABLE))
def test_an_unwritable_results_folder_is_one_sentence_and_exit_2_before_any_run(tmp_path, freeze, monkeypatch, case):
    prepare, extra, words = UNWRITABLE[case]
    out = prepare(tmp_path, freeze)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} if out.is_dir() else {}
    register(tmp_path / "plugins", monkeypatch)
    pids = tmp_path / "pids"
    pids.mkdir()
    # Every run that starts leaves its pid here (the config runs sleepy only): none may start.
    monkeypatch.setenv("SLEEPY_SECONDS", "0")
    monkeypatch.setenv("SLEEPY_PIDS", str(pids))
    again = config(tmp_path, methods="[sleepy]", budgets="[0.8, 0.7]", name="again.yaml")
    result = CliRunner().invoke(main, ["sweep", str(again), "--output", str(out), *extra])
    assert result.exit_code == 2, (result.output, result.exception)
    (line,) = error_lines(result.output)
    assert words.format(out=out) in line, line
    assert line.endswith("choose another --output") and "Traceback" not in result.output
    assert not any(pids.iterdir())
    if out.is_dir():  # nothing the user had was changed
        assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


# ---------------------------------------------------------------------- 9: logs of killed runs


def test_runs_killed_by_a_signal_or_at_their_time_limit_keep_what_they_printed_in_their_logs(tmp_path, monkeypatch):
    # Both runs print a line on stdout (as a solver logs progress), then sleep: the test kills the first
    # to start with SIGKILL (as the kernel's out-of-memory killer would), the sweep kills the other at
    # its time limit.
    register(tmp_path / "plugins", monkeypatch)
    pids = tmp_path / "pids"
    pids.mkdir()
    monkeypatch.setenv("SLEEPY_SECONDS", "600")
    monkeypatch.setenv("SLEEPY_PIDS", str(pids))
    # As on a user's machine: Python buffers what it prints into a file unless told otherwise (some
    # shells and CI runners set this, which would hide lines lost in a buffer at the kill).
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    path = config(tmp_path, methods="[sleepy]", budgets="[0.8, 0.7]", time_limit=3, extra="grace: 0.5\n")
    done: dict[str, object] = {}
    sweep = threading.Thread(target=lambda: done.setdefault("outcome", run_sweep(load_config(path), workers=2)))
    sweep.start()
    wait_for(lambda: any(pids.iterdir()), "a sleeping run")
    os.kill(int(next(pids.iterdir()).name), signal.SIGKILL)
    sweep.join(120)
    rows = done["outcome"].table.set_index("status")
    assert sorted(rows.index) == ["error", "timeout"]
    assert "killed by signal SIGKILL" in rows.loc["error", "message"]
    # Why each stopped, in the methods' vocabulary: the sweep's kill at the limit, and a crash.
    assert (rows.loc["timeout", "termination"], rows.loc["error", "termination"]) == ("time_limit", "error")
    for status in ("error", "timeout"):
        log = tmp_path / "out" / "logs" / f"{rows.loc[status, 'run_id']}.log"
        assert log.read_text().splitlines() == ["test hook: sleeping 600 s before solving"]
        assert rows.loc[status, "message"].endswith(f"(its output: logs/{log.name})")


# ---------------------------------------------------------------------- 17: a Dask cluster without workers


def test_a_dask_sweep_whose_only_worker_dies_fails_with_one_sentence(tmp_path, monkeypatch):
    pytest.importorskip("distributed")
    from distributed import LocalCluster

    from remat_bench.app.sweep import runner

    monkeypatch.setattr(runner, "NO_WORKERS_TIMEOUT_S", 2.0)
    register(tmp_path / "plugins", monkeypatch)
    pids = tmp_path / "pids"
    pids.mkdir()
    env = dict(os.environ, SLEEPY_SECONDS="600", SLEEPY_PIDS=str(pids))
    # A scheduler here, and one worker without a nanny in its own process, as on a machine of a cluster:
    # a LocalCluster's nanny would restart a killed worker, and the runs would just go on.
    with LocalCluster(n_workers=0, processes=False, protocol="tcp", host="127.0.0.1",
                      dashboard_address=None) as cluster:
        worker = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", cluster.scheduler_address,
                                   "--no-nanny", "--nthreads", "1", "--memory-limit", "0"], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: len(cluster.scheduler.workers) == 1, "the Dask worker to connect")
        ended = threading.Event()

        def kill_the_worker_then_guard() -> None:
            end = time.monotonic() + 60
            while not any(pids.iterdir()) and time.monotonic() < end and not ended.is_set():
                time.sleep(0.05)
            worker.kill()
            # Liveness guard, not a timing assertion: a sweep still waiting a minute later would wait
            # forever; Ctrl-C it (a real SIGINT, which also wakes a blocked wait) so that the test fails
            # instead of hanging.
            if not ended.wait(60):
                os.kill(os.getpid(), signal.SIGINT)

        threading.Thread(target=kill_the_worker_then_guard, daemon=True).start()
        try:
            result = CliRunner().invoke(main, ["sweep", str(config(tmp_path, methods="[sleepy, chen]")), "--address",
                                               cluster.scheduler_address])
        finally:
            ended.set()
            worker.kill()
            worker.wait()
    assert any(pids.iterdir()), "the sleepy run never started on the Dask worker"
    assert result.exit_code == 1, (result.output, result.exception)
    (line,) = error_lines(result.output)
    assert re.fullmatch(rf"error: the Dask scheduler at {cluster.scheduler_address} has had no workers for \d+ s "
                        r"while 2 runs were waiting; start workers \(`dask worker ADDRESS`\) and run again with "
                        r"--resume", line), line
    assert "has no workers; waiting up to 2 s for one (2 runs to go)" in result.output
    (pid,) = [int(p.name) for p in pids.iterdir()]
    wait_for(lambda: pid_gone(pid), "the dead worker's run to end itself")
    assert not (tmp_path / "out" / "journal.jsonl").exists()  # nothing recorded: --resume runs both


# ---------------------------------------------------------------------- 18: fast answers and memory floors


def test_infeasible_answers_count_at_their_own_solve_time_and_only_non_answers_at_the_limit():
    rows = []
    for i, (method, status, t) in enumerate([
        ("greedy", "infeasible", 0.0), ("greedy", "infeasible", 0.0), ("greedy", "feasible", 0.01),
        ("chen", "feasible", 0.5), ("chen", "timeout", None), ("chen", "no_solution", 0.1), ("chen", "error", 0.0),
    ]):
        rows.append({"graph_sha256": "g", "graph": "g", "method": method, "params": "{}", "budget_text": str(i),
                     "seed": None, "repeat": 0, "time_limit": 10.0, "status": status, "solve_time_s": t})
    by = {s.label: s for s in summarize(build_table(rows))}
    assert by["greedy"].solve_time_sgm == pytest.approx(shifted_geometric_mean([0.0, 0.0, 0.01], 1.0))
    assert by["greedy"].solve_time_sgm < 0.01  # not 10 s for two instant proofs
    # A timeout, a method that gave up and an error produced nothing: at the limit.
    assert by["chen"].solve_time_sgm == pytest.approx(shifted_geometric_mean([0.5, 10.0, 10.0, 10.0], 1.0))


def test_a_sweep_of_instant_infeasible_answers_shows_their_real_solve_time_and_exits_0(tmp_path):
    path = config(tmp_path, methods="[greedy]", budgets="[0.1, 0.2, 0.8]")
    result = CliRunner().invoke(main, ["sweep", str(path)])
    assert result.exit_code == 0, result.output
    table = load_table(tmp_path / "out")
    assert sorted(table["status"]) == ["feasible", "infeasible", "infeasible"]
    (greedy,) = summarize(table)
    assert greedy.solve_time_sgm == pytest.approx(shifted_geometric_mean(table["solve_time_s"].astype(float), 1.0))
    assert re.search(rf"│ greedy\s+│\s+3 │\s+1/3 \(33%\) │\s+0 │\s+0 │\s+[0-9.]+ │\s+{greedy.solve_time_sgm:.2f} │",
                     result.output), result.output


def test_dry_run_names_each_graph_whose_budgets_are_below_its_memory_floor(tmp_path):
    # chain-16: baseline peak 18, floor 4; 0.2 -> 3 is below it, 0.3 -> 5 is not. The random layered
    # graph's floor is 43.4% of its baseline: both budgets are below it.
    path = config(tmp_path, methods="[greedy, none]", budgets="[0.2, 0.3]", graphs="[CHAIN, FOREST]")
    result = CliRunner().invoke(main, ["sweep", str(path), "--dry-run"])
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.output.splitlines() if line.startswith("warning:")]
    assert warnings == [
        "warning: graph chain-16: budget 0.2 is below its memory floor 4 (22.2% of its baseline peak 18; no budget "
        "below 0.23 can fit); those 2 runs will answer infeasible",
        "warning: graph random-layered-n60-seed7: every budget is below its memory floor 16,110 (43.4% of its "
        "baseline peak 37,110; no budget below 0.44 can fit); all 4 runs will answer infeasible",
    ]
    assert not (tmp_path / "out").exists()
    quiet = CliRunner().invoke(main, ["sweep", str(config(tmp_path, budgets="[0.8]", name="q.yaml")), "--dry-run"])
    assert quiet.exit_code == 0 and "warning" not in quiet.output


def test_graph_paths_are_absolute_whatever_folder_the_config_is_named_from(tmp_path, monkeypatch):
    # A config named by a relative path gave graph paths relative to where the sweep started;
    # the results folder then stored them as they were, and charts read them against itself.
    from remat_bench.app.sweep.results import _relative

    (tmp_path / "cfg").mkdir()
    (tmp_path / "graphs").mkdir()
    shutil.copy(CHAIN, tmp_path / "graphs")
    (tmp_path / "cfg" / "x.yaml").write_text("graphs: [../graphs/chain-16-train.json]\nmethods: [none]\n"
                                             "budgets: [0.9]\n")
    monkeypatch.chdir(tmp_path)
    cfg = load_config("cfg/x.yaml")
    path = Path(cfg.graphs[0].path)
    assert path.is_absolute() and path == tmp_path / "graphs" / "chain-16-train.json"
    assert _relative(Path("graphs/chain-16-train.json"), tmp_path / "results") == str(path)


def test_an_address_in_the_config_implies_dask(tmp_path):
    # Before: the config loaded, then the run stopped with "--address names a Dask scheduler; use it
    # with --executor dask", after writing config.yaml and an empty table.
    path = tmp_path / "c.yaml"
    path.write_text(f"graphs: [{CHAIN}]\nmethods: [none]\nbudgets: [0.9]\naddress: tcp://127.0.0.1:1\n")
    assert load_config(path).executor == "dask"
    path.write_text(f"graphs: [{CHAIN}]\nmethods: [none]\nbudgets: [0.9]\naddress: tcp://127.0.0.1:1\n"
                    "executor: local\n")
    with pytest.raises(Exception, match="'address' names a Dask scheduler; it needs 'executor: dask'"):
        load_config(path)


# ------------------------------------------------------------ issue 30, item 13: full and read-only file systems


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """``tmpfs(size, read_only=False)``: a fresh tmpfs mounted under tmp_path, a real file system that fills
    (or refuses every write, for root too); unmounted after the test. Mounting needs root (CAP_SYS_ADMIN),
    which the tests have on this machine and in CI."""
    mounted: list[Path] = []

    def mount(size: str = "64k", read_only: bool = False) -> Path:
        where = tmp_path / f"fs{len(mounted)}"
        where.mkdir()
        options = f"size={size},mode=0755" + (",ro" if read_only else "")
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True,
                              text=True)
        if done.returncode:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounted.append(where)
        return where

    yield mount
    for where in reversed(mounted):
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(folder: Path, leave_pages: int = 0) -> None:
    """Fill the file system of ``folder``, then free ``leave_pages`` pages of it."""
    page = os.sysconf("SC_PAGE_SIZE")
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * page)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    os.ftruncate(fd, os.fstat(fd).st_size - leave_pages * page)
    os.close(fd)


def test_a_dry_run_into_a_read_only_file_system_is_refused_and_one_into_a_new_folder_makes_nothing(tmp_path, tmpfs):
    frozen = tmpfs(read_only=True)
    result = CliRunner().invoke(main, ["sweep", str(config(tmp_path)), "--dry-run", "-o", str(frozen / "out")])
    assert (result.exit_code, result.output.splitlines()) == (2, [
        f"error: the results folder {frozen / 'out'} cannot be written ({frozen}: Read-only file system); make it "
        "writable or choose another --output"])
    # Into a writable place, a dry run tries the folder above and makes nothing.
    result = CliRunner().invoke(main, ["sweep", str(config(tmp_path)), "--dry-run", "-o", str(tmp_path / "a" / "b")])
    assert result.exit_code == 0 and " ok; 2 runs " in result.output
    assert not (tmp_path / "a").exists()


def test_a_sweep_refused_on_a_full_file_system_leaves_no_folder_and_no_lock(tmp_path, tmpfs):
    disk = tmpfs()
    fill(disk)
    out = disk / "new" / "out"
    result = CliRunner().invoke(main, ["sweep", str(config(tmp_path)), "-o", str(out)])
    assert (result.exit_code, result.output.splitlines()) == (2, [
        f"error: the results folder {out} cannot be written (No space left on device); make it writable or choose "
        "another --output"])
    assert sorted(p.name for p in disk.iterdir()) == ["filler"]  # before: new/out/.sweep.lock stayed


def test_a_sweep_whose_file_system_fills_names_no_empty_table(tmp_path, tmpfs):
    disk = tmpfs()
    fill(disk, leave_pages=2)  # the lock's text and the config copy fit; the journal does not
    out = disk / "out"
    result = CliRunner().invoke(main, ["sweep", str(config(tmp_path)), "-o", str(out), "-j", "1"])
    assert result.exit_code == 1, result.output
    assert [line for line in result.output.splitlines() if line.startswith("wrote")] == []  # was: "wrote  (0 runs"
    assert error_lines(result.output) == [
        f"error: cannot record runs in {out / 'journal.jsonl'} ([Errno 28] No space left on device); the sweep "
        "stopped, the runs recorded before are kept, and --resume runs the others once it can be written"]


def test_resume_skips_journal_rows_that_cannot_be_read(tmp_path):
    """Issue 30 item 10 (its --resume side): a hand-edited row such as {"run_id": 5} gave a KeyError traceback."""
    path = config(tmp_path, methods="[none, chen]", budgets="[0.9]")
    first = CliRunner().invoke(main, ["sweep", str(path)])
    assert first.exit_code == 0, first.output
    journal = tmp_path / "out" / "journal.jsonl"
    with journal.open("a") as fh:
        fh.write('{"run_id": 5}\n[1, 2]\n{"graph_sha256": 3, "method": "none"}\n')
    again = CliRunner().invoke(main, ["sweep", str(path), "--resume"])
    assert again.exit_code == 0, again.output
    assert "Traceback" not in again.output
    assert again.output.startswith("2 of 2 runs are in the journal already; running the other 0\n")
    report = CliRunner().invoke(main, ["report", str(tmp_path / "out"), "-o", str(tmp_path / "r.md")])
    assert report.exit_code == 0, report.output
    assert "3 rows of" in report.output
