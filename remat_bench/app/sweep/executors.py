"""Running runs: `supervise` launches and watches one worker process; two executors call it.

`supervise` is the whole of a run as the sweep sees it, and the same function
for both executors: it starts ``python -m remat_bench.app.sweep.worker`` in a new
process group, hands it the run spec, waits at most the time limit plus the
grace, kills the group past that, and turns whatever happened into a row:

- the worker's own outcome line, when it finished;
- ``timeout`` when it had to be killed;
- ``error`` naming the signal (a solver's segfault) or the exit status, with
  the last line the run printed, when it crashed; ``oom`` when what it printed
  shows that an allocation failed under the memory cap.

Executors only decide where `supervise` runs. Local: a thread pool, whose
threads do nothing but wait on their worker processes, so the runs use every
core. Distributed: ``dask.distributed.Client(address).get_executor()``, or a
LocalCluster without an address; `supervise` then runs in a Dask worker, which
starts the run's process on its own machine. Both are `concurrent.futures`
executors, so the runner has one code path.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from remat_bench.app.sweep.results import make_row
from remat_bench.app.sweep.worker import OOM_SIGNS, SWEEP_FAULT
from remat_bench.core.errors import ConfigError
from remat_bench.core.files import safe_name
from remat_bench.core.machine import usable_cores
from remat_bench.core.outcome import Status, Termination

# Statuses of a failed run, whose output is kept in logs/.
LOGGED = (Status.ERROR, Status.OOM, Status.TIMEOUT)

# Worker processes of this process that are still running, so that Ctrl-C can end them: they run in
# their own process groups, out of reach of the terminal's SIGINT.
_live: dict[int, subprocess.Popen] = {}
_lock = threading.Lock()
_stopping = threading.Event()


# The Dask client behind each Dask executor, so that the runner can ask how many workers are left.
_clients: weakref.WeakKeyDictionary[Executor, Any] = weakref.WeakKeyDictionary()


class RunInterrupted(Exception):
    """The sweep was interrupted while this run was going on: nothing to record."""


def schedule_path(output: Path, spec: dict[str, Any]) -> Path:
    """Where a run's cleaned schedule goes: ``<output>/schedules/<graph>/<run id>.json``.

    The graph's name comes from its file: made one safe file name (a graph named ``..`` must not put
    its schedules beside the results folder).

    Parameters
    ----------
    output : Path
        The results folder.
    spec : dict
        The run spec (its ``graph`` and ``run_id``).

    Returns
    -------
    Path
    """
    return output / "schedules" / safe_name(spec["graph"]) / f"{safe_name(spec['run_id'], 'run')}.json"


def supervise(spec: dict[str, Any], output: str) -> dict[str, Any]:
    """Run one spec in its own worker process under the hard limits; return its full results row.

    Parameters
    ----------
    spec : dict
        A run spec (`remat_bench.app.sweep.runs.RunSpec.to_json`), with its ``time_limit`` and ``grace`` in s.
    output : str
        The results folder (schedules and logs go there).

    Returns
    -------
    dict
        The row (`remat_bench.app.sweep.results.make_row`), with ``progress`` and `SWEEP_FAULT` when
        the run has them.

    Raises
    ------
    RunInterrupted
        The sweep is stopping (`stop_all`): the run was not started, or was killed by it.
    """
    out_dir = Path(output)
    payload = dict(spec, schedule_path=str(schedule_path(out_dir, spec)))
    limit = float(spec["time_limit"]) + float(spec["grace"])
    with tempfile.TemporaryDirectory(prefix="remat-bench-run-") as tmp:
        out_file, err_file = Path(tmp, "out"), Path(tmp, "err")
        with out_file.open("wb") as out, err_file.open("wb") as err, _lock:
            if _stopping.is_set():
                raise RunInterrupted(spec["run_id"])
            start = time.perf_counter()
            # Unbuffered Python output (the worker's and its Python subprocesses'): what a run printed
            # before a kill is in its log, not lost in a buffer.
            proc = subprocess.Popen([sys.executable, "-m", "remat_bench.app.sweep.worker"], stdin=subprocess.PIPE,
                                    stdout=out, stderr=err, start_new_session=True,
                                    env=dict(os.environ, PYTHONUNBUFFERED="1"))
            _live[proc.pid] = proc
        assert proc.stdin is not None  # opened with stdin=PIPE
        try:
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.write(json.dumps(payload).encode() + b"\n")
                proc.stdin.flush()
            # stdin stays open while the run lasts: the worker ends itself when it closes (we died).
            status, usage, timed_out = _wait(proc.pid, limit)
            proc.returncode = os.waitstatus_to_exitcode(status)
        finally:
            with _lock:
                _live.pop(proc.pid, None)
            with contextlib.suppress(OSError):
                proc.stdin.close()
        wall = time.perf_counter() - start
        if _stopping.is_set() and not timed_out and proc.returncode < 0:
            raise RunInterrupted(spec["run_id"])
        text = out_file.read_text(encoding="utf-8", errors="replace").strip()
        log = _tail(err_file)
        outcome = _outcome(spec, proc.returncode, timed_out, wall, text, log)
        # A run that was killed, or ended without its result, keeps its log even when empty: the
        # message points to it, and the docs promise it (docs/sweeps.md, crashes).
        ended_badly = timed_out or proc.returncode != 0 or not text
        if outcome["status"] in LOGGED and (log.strip() or ended_badly):
            _keep_log(err_file, out_dir, spec["run_id"], bool(log.strip()), outcome)
    outcome["wall_time_s"] = wall
    # The kernel's count covers a run killed before it could report its own.
    kernel_rss = usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)
    outcome["peak_rss"] = max(outcome.get("peak_rss") or 0, kernel_rss)
    row = make_row(payload, outcome, out_dir)
    if outcome.get(SWEEP_FAULT):
        row[SWEEP_FAULT] = True  # not a column: the journal row carries it (see worker.SWEEP_FAULT)
    if outcome.get("progress"):
        # The run's improving schedules over time: journalled with its row, tabled apart
        # (`remat_bench.app.sweep.profiles.build_progress`, progress.parquet).
        row["progress"] = outcome["progress"]
    return row


def _keep_log(err_file: Path, out_dir: Path, run_id: str, printed: bool, outcome: dict[str, Any]) -> None:
    """Copy a failed run's whole output to ``<output>/logs/<run id>.log``, and say so in its message.

    A killed run gets one even when it printed nothing (an empty file), so that its message can point
    to it. A log that cannot be written does not lose the run: the row says why, and counts as the
    sweep's fault.
    """
    kept = out_dir / "logs" / f"{run_id}.log"
    try:
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(err_file, kept)
    except OSError as exc:
        outcome["message"] += f" (its output could not be kept in logs/{kept.name}: {type(exc).__name__}: {exc})"
        outcome[SWEEP_FAULT] = True
        return
    outcome["message"] += f" (its output: logs/{kept.name})" if printed else f" (it printed nothing: logs/{kept.name})"


def _tail(path: Path, size: int = 1 << 16) -> str:
    """The end of a run's output (a solver's log can be long; the end says how it ended)."""
    with path.open("rb") as fh:
        fh.seek(max(0, path.stat().st_size - size))
        return fh.read().decode("utf-8", errors="replace")


def _outcome(spec: dict[str, Any], code: int, timed_out: bool, wall: float, text: str, log: str) -> dict[str, Any]:
    last = _last_line(log)
    if timed_out:
        return {"status": Status.TIMEOUT, "termination": Termination.TIME_LIMIT, "message": (
            f"killed after {wall:.1f} s: the run overstayed its time limit of {spec['time_limit']:g} s "
            f"(and {spec['grace']:g} s of grace)")}
    if code == 0 and text:
        try:
            return json.loads(text.splitlines()[-1])
        except ValueError:
            return {"status": Status.ERROR, "termination": Termination.ERROR,
                    "message": f"the run printed an unreadable result: {text[-200:]!r}"}
    oom = bool(spec.get("memory_limit")) and bool(OOM_SIGNS.search(log))
    if code < 0:
        sig = signal.Signals(-code)
        what = f"the run crashed: killed by signal {sig.name} ({signal.strsignal(sig) or sig.name})"
        if sig == signal.SIGKILL:
            what += ", sent from outside the sweep (the kernel's out-of-memory killer, or a user)"
    else:
        what = f"the run exited with status {code} without a result"
    if oom:
        what = f"the run ran out of memory under the cap of {spec['memory_limit']} bytes; {what}"
    return {"status": Status.OOM if oom else Status.ERROR,
            "termination": Termination.RESOURCE_LIMIT if oom else Termination.ERROR,
            "message": what + (f"; it last printed: {last}" if last else "")}


def _last_line(log: str) -> str:
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def _wait(pid: int, timeout: float) -> tuple[int, Any, bool]:
    """Wait for ``pid`` at most ``timeout`` seconds, killing its process group past that.

    Returns the wait status, the child's resource usage and whether it was
    killed for overstaying. On Linux a pidfd makes the wait a single blocking
    poll; elsewhere it polls with a short sleep.
    """
    deadline = time.monotonic() + timeout
    timed_out = False
    pidfd = None
    with contextlib.suppress(AttributeError, OSError):
        pidfd = os.pidfd_open(pid)
    if pidfd is not None:
        try:
            poller = select.poll()
            poller.register(pidfd, select.POLLIN)
            timed_out = not poller.poll(max(0.0, timeout) * 1000)
        finally:
            os.close(pidfd)
    else:
        while True:
            done, status, usage = os.wait4(pid, os.WNOHANG)
            if done:
                return status, usage, False
            if time.monotonic() >= deadline:
                timed_out = True
                break
            time.sleep(min(0.05, deadline - time.monotonic()))
    if timed_out:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    _, status, usage = os.wait4(pid, 0)
    return status, usage, timed_out


def stop_all() -> None:
    """Kill every running worker process of this process and start no new one (Ctrl-C)."""
    with _lock:
        _stopping.set()
        for pid in list(_live):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


def runs_at_once(requested: int | None, asked_by: str = "workers:") -> tuple[int, str | None]:
    """How many runs go at once on this machine: ``requested``, at most one per core this process may use.

    More runs than cores do not finish sooner: they share the cores, and every run's solve time (which the
    results compare) and its time limit stretch with the sharing; a config's ``workers: 100000`` started
    every pending run at once.

    Parameters
    ----------
    requested : int or None
        The runs at once asked for; None for one per core.
    asked_by : str
        How the request is named in the warning (``workers:`` for the config's key, ``--workers``).

    Returns
    -------
    tuple of (int, str or None)
        The runs at once, and one sentence saying so when ``requested`` was cut to the cores (None otherwise).
    """
    cores = usable_cores()
    if requested is None or requested <= cores:
        return requested or cores, None
    return cores, (f"{asked_by} {requested} is more than the {cores} core{'s' if cores != 1 else ''} here; "
                   f"running {cores} at a time")


@contextlib.contextmanager
def open_executor(kind: str = "local", workers: int | None = None,
                  address: str | None = None) -> Iterator[Executor]:
    """A `concurrent.futures` executor that runs `supervise` calls: ``local`` threads or ``dask``.

    Parameters
    ----------
    kind : str
        ``local`` or ``dask``.
    workers : int or None
        Runs at a time (local threads, or the processes of a Dask LocalCluster), at most one per core
        (`runs_at_once`); None for one per core.
    address : str or None
        A Dask scheduler to connect to (``dask`` only); None starts a LocalCluster.

    Yields
    ------
    Executor
        Shut down when the block ends.

    Raises
    ------
    ConfigError
        An unknown kind, an address with ``local``, dask.distributed missing, or a scheduler that
        cannot be reached.
    """
    _stopping.clear()
    workers, _ = runs_at_once(workers)  # the runner has said so when it cut a request
    if kind == "local":
        if address:
            raise ConfigError("--address names a Dask scheduler; use it with --executor dask")
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="remat-bench-run")
        try:
            yield pool
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        return
    if kind != "dask":
        raise ConfigError(f"executor '{kind}' is not known; use local or dask")
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise ConfigError("the dask executor needs dask.distributed: install it with "
                          "`pip install remat-bench[dask]`") from None
    with contextlib.ExitStack() as stack:
        if address:
            try:
                client = stack.enter_context(Client(address, timeout=30))
            except (OSError, TimeoutError) as exc:
                raise ConfigError(f"cannot reach the Dask scheduler at {address} ({exc}); start one with "
                                  "`dask scheduler` and check the address") from None
        else:
            # One thread per worker process: each thread supervises one run at a time.
            cluster = stack.enter_context(LocalCluster(n_workers=workers, threads_per_worker=1,
                                                       processes=True, dashboard_address=None))
            client = stack.enter_context(Client(cluster))
        executor = client.get_executor(pure=False, retries=0)
        _clients[executor] = client
        try:
            yield executor
        finally:
            executor.shutdown(wait=False)


def live_workers(pool: Executor) -> int | None:
    """How many workers can take runs now; None for the local pool, whose threads cannot go away.

    A Dask scheduler whose workers all died keeps the runs queued forever, without a word: the runner
    asks this while runs are pending, to say so and stop.

    Parameters
    ----------
    pool : Executor
        An executor `open_executor` gave.

    Returns
    -------
    int or None
        The Dask workers the scheduler knows (0 when it cannot be asked); None for the local pool.
    """
    client = _clients.get(pool)
    if client is None:
        return None
    try:
        return len(client.sync(client.scheduler.ncores, callback_timeout=10))
    except Exception:  # any failure to ask (comm closed, timeout, client closing): no worker reachable
        return 0
