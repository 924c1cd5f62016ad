"""One sweep run in its own process: ``python -m remat_bench.app.sweep.worker``.

The supervisor (`remat_bench.app.sweep.executors.supervise`) writes one JSON run
spec as a line on stdin and keeps stdin open; this process runs
`remat_bench.app.pipeline.run` on it, saves the cleaned schedule, and prints one
JSON object (the run's outcome) on its original stdout. Running every run in
its own process is what makes the limits hard and the sweep robust:

- the memory cap is ``RLIMIT_AS`` on this process; running out of it raises
  MemoryError here (status ``oom``), or kills a solver's native code, which the
  supervisor records as a crash;
- the wall-clock limit is enforced from outside by killing this process group;
- a solver that segfaults takes down only this run;
- every run starts from a fresh interpreter, so no solver state (or leaked
  memory) carries from one run to the next.

Anything a solver prints on stdout is redirected to stderr, so the outcome
line cannot be corrupted. If the supervisor dies (even by SIGKILL), stdin
reaches end-of-file and this process kills its own process group, solver
subprocesses included, rather than run on as an orphan.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import platform
import re
import resource
import signal
import socket
import sys
import threading
import time
import traceback
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from remat_bench.core.errors import RematBenchError
from remat_bench.core.outcome import Status, Termination

# What a failed allocation looks like in a message or a log, from Python, C++ or the dynamic loader.
OOM_SIGNS = re.compile(r"MemoryError|bad_alloc|Cannot allocate memory|out of memory|failed to map segment",
                       re.IGNORECASE)
SOLVER_PACKAGES = ("ortools", "highspy", "pulp")
# Marks an outcome (and its journal row) as failed by the sweep itself, not by the method: the worker
# could not save the schedule or keep the log, or failed outside the method. `sweep` then exits 1, and
# --resume runs the run again instead of skipping it. Not a table column: the journal row carries it.
SWEEP_FAULT = "sweep_fault"


def provenance() -> dict[str, Any]:
    """Versions of the package, the solvers (read from metadata, nothing imported) and Python; the host.

    Returns
    -------
    dict
        The ``*_version`` columns of the results table (None for a solver not installed) and ``host``.
    """
    def package_version(name: str) -> str | None:
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    from remat_bench import __version__

    out: dict[str, Any] = {"remat_bench_version": __version__}
    for name in SOLVER_PACKAGES:
        out[f"{name}_version"] = package_version(name)
    out["python_version"] = platform.python_version()
    out["host"] = socket.gethostname()
    return out


def peak_rss_bytes() -> int:
    """Largest resident set of this process or any of its finished children (Linux reports KiB).

    Returns
    -------
    int
        In bytes.
    """
    scale = 1 if sys.platform == "darwin" else 1024
    return max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
               resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) * scale


def address_space_peak() -> int | None:
    """The largest address space this process has held (VmPeak, Linux), in bytes; None elsewhere.

    Returns
    -------
    int or None
        None too when ``/proc/self/status`` cannot be read.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmPeak:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def _watch_supervisor() -> None:
    """Kill this process group when stdin closes, i.e. when the supervisor is gone."""
    def watch() -> None:
        with contextlib.suppress(OSError):
            while sys.stdin.buffer.read(4096):
                pass
        # The supervisor starts each run as the leader of its own process group, solver children
        # included; run by hand (not a group leader), end only this process.
        if os.getpgrp() == os.getpid():
            os.killpg(os.getpgrp(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="supervisor-watch", daemon=True).start()


def run_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one spec in this process and return its outcome fields.

    A failing method is a status, never an exception; MemoryError propagates (the caller records
    ``oom``), and so does a failure of this worker outside the method, which `main` records.

    Parameters
    ----------
    spec : dict
        The run spec: ``method``, ``graph_path``, ``graph_sha256``, ``budget_text``, ``time_limit``,
        ``params``, and ``schedule_path`` where the cleaned schedule is to be saved (none: not saved).

    Returns
    -------
    dict
        `RunResult.to_json`'s fields but ``cleanup``, ``graph``, ``method`` and ``params``, with
        ``schedule`` (the path saved to); a status ``error`` with its message when the graph file
        changed, the run could not start, or the schedule could not be saved (then marked `SWEEP_FAULT`).

    Raises
    ------
    MemoryError
        The worker ran out of memory outside the method.
    """
    try:
        from remat_bench.app.pipeline import run
        from remat_bench.core.graph_io import load_graph
        from remat_bench.core.schedule import save_schedule

        graph = load_graph(spec["graph_path"])
        if graph.sha256 != spec["graph_sha256"]:
            return {"status": Status.ERROR, "termination": Termination.ERROR, "message": (
                f"graph file {spec['graph_path']} changed since the sweep was planned (sha256 "
                f"{graph.sha256[:12]}, expected {spec['graph_sha256'][:12]}); run the sweep again")}
        result = run(graph, spec["method"], spec["budget_text"], spec["time_limit"], spec["params"])
    except MemoryError:
        raise
    except Exception as exc:
        # e.g. a method whose solver is missing on this machine, or cannot even be loaded under the cap
        known = isinstance(exc, RematBenchError)
        return {"status": Status.ERROR, "termination": Termination.ERROR,
                "message": str(exc) if known else f"{type(exc).__name__}: {exc}",
                **({} if known else {"stats": {"traceback": traceback.format_exc(limit=8)}})}

    fields = result.to_json()
    fields.pop("cleanup", None)
    fields.pop("graph", None)
    fields.pop("method", None)
    fields.pop("params", None)
    # A MemoryError inside a method already comes back as status 'oom' from the pipeline.
    if result.schedule is not None and spec.get("schedule_path"):
        try:
            save_schedule(result.schedule, graph, spec["schedule_path"])
        except MemoryError:
            raise
        except Exception as exc:
            # The method did its part: keep what it measured (peak, duration, overhead, bounds) and say
            # why the run still failed, as the sweep's fault, so that --resume runs it again.
            answered = fields.get("status")
            fields["stats"] = {**(fields.get("stats") or {}), "method_status": answered}
            fields["status"] = Status.ERROR
            fields["schedule"] = None
            fields["message"] = f"the run's {answered} schedule could not be saved: {type(exc).__name__}: {exc}"
            fields[SWEEP_FAULT] = True
            traceback.print_exc()  # into the run's log
        else:
            fields["schedule"] = spec["schedule_path"]
    return fields


def main() -> None:
    """The worker process: read a spec on stdin, run it under its memory cap, print its outcome line, exit."""
    row_fd = os.dup(1)
    os.dup2(2, 1)  # solvers that print on stdout now print into the run's log
    # Line by line, not in blocks: a run killed by a signal (its time limit, the kernel) loses what sits
    # in a buffer, and its log must hold everything it printed (the supervisor also sets
    # PYTHONUNBUFFERED, which reaches Python subprocesses of solvers too).
    with contextlib.suppress(AttributeError, ValueError):
        sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # a TextIOWrapper here
    started = time.perf_counter()
    try:
        outcome = _run_under_limits()
    except BaseException as exc:
        # A failure of the worker itself (not of the method, which the pipeline records): record it as
        # the run's error, in one sentence naming the exception. Letting it propagate would end the
        # interpreter while the stdin-watching thread holds stdin's lock, which CPython answers with
        # SIGABRT ("_enter_buffered_busy"): the cause hidden behind a signal, and the run's result lost.
        traceback.print_exc()
        outcome = {"status": Status.ERROR, "termination": Termination.ERROR,
                   "message": f"the sweep's worker failed: {type(exc).__name__}: {exc}", SWEEP_FAULT: True}
    try:
        outcome["worker_wall_time_s"] = time.perf_counter() - started
        outcome["peak_rss"] = peak_rss_bytes()
        outcome["finished_at"] = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
        outcome.update(provenance())
        line = json.dumps(outcome, default=lambda v: v.item() if hasattr(v, "item") else str(v)) + "\n"
        with os.fdopen(row_fd, "w", encoding="utf-8") as out:
            out.write(line)
            out.flush()
    except BaseException:
        traceback.print_exc()  # the supervisor records a run without a result, with this in its log
    finally:
        # Skip interpreter shutdown: a solver's native threads can hang or crash it, and the daemon thread
        # reading stdin would make it abort; everything is written.
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os._exit(0)


def _run_under_limits() -> dict[str, Any]:
    """Read the spec, set the memory cap and run it; the run's outcome fields."""
    spec = json.loads(sys.stdin.buffer.readline())
    _watch_supervisor()

    # Address space to give back when the cap is hit, so the outcome can still be written.
    reserve: bytearray | None = bytearray(16 << 20)
    cap = spec.get("memory_limit")
    if cap:
        resource.setrlimit(resource.RLIMIT_AS, (int(cap), int(cap)))
    try:
        outcome = run_spec(spec)
    except MemoryError:
        reserve = None
        outcome = {"status": Status.OOM, "termination": Termination.RESOURCE_LIMIT,
                   "message": f"the run ran out of memory under the cap of {cap} bytes" if cap
                   else "the run ran out of memory"}
    del reserve
    # An allocation refused under the cap does not always surface as MemoryError (CPython may report a
    # SystemError, a library a failed load): a failure with the address space at the cap is one too.
    near_cap = bool(cap) and (address_space_peak() or 0) >= 0.9 * cap
    if (cap and outcome["status"] == Status.ERROR and not outcome.get(SWEEP_FAULT)
            and (near_cap or OOM_SIGNS.search(outcome.get("message", "")))):
        outcome["status"], outcome["termination"] = Status.OOM, Termination.RESOURCE_LIMIT
        outcome["message"] = f"the run ran out of memory under the cap of {cap} bytes: {outcome['message']}"
    return outcome


if __name__ == "__main__":
    main()
