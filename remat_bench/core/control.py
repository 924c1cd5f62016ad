"""Run control: deadlines that methods poll, and the Ctrl-C request that ends them.

A method polls a `Deadline`; the command line's first Ctrl-C calls
`request_interrupt`, which ends every deadline at once so that the method
returns its best schedule so far; `run_interruptibly` lets a native solver call
be stopped the same way.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

_INTERRUPTED = threading.Event()


def interrupted() -> bool:
    """Whether the user pressed Ctrl-C during this solve: methods then return their best so far.

    Returns
    -------
    bool
    """
    return _INTERRUPTED.is_set()


def reset_interrupt() -> None:
    """Forget an earlier Ctrl-C, before a command starts a solve."""
    _INTERRUPTED.clear()


def request_interrupt() -> None:
    """Ask the running method to stop and return its best so far (the CLI's first Ctrl-C)."""
    _INTERRUPTED.set()


class Deadline:
    """A wall-clock deadline that methods poll (``None`` means no limit); Ctrl-C ends it at once."""

    def __init__(self, seconds: float | None) -> None:
        self.start = time.monotonic()
        self.seconds = seconds
        # Set once `expired` has said so: whoever polled stopped or skipped work then, so a search
        # polling this deadline was cut short (`remat_bench.core.outcome.search_ended`).
        self.ran_out = False

    def elapsed(self) -> float:
        """Seconds since the deadline was made.

        Returns
        -------
        float
        """
        return time.monotonic() - self.start

    def remaining(self) -> float | None:
        """Seconds left before the deadline.

        Returns
        -------
        float or None
            Never negative; 0.0 once Ctrl-C was pressed; None when there is no limit.
        """
        if _INTERRUPTED.is_set():
            return 0.0
        if self.seconds is None:
            return None
        return max(0.0, self.seconds - self.elapsed())

    def expired(self) -> bool:
        """Whether the time is up or Ctrl-C was pressed; a True answer is remembered in ``ran_out``.

        Returns
        -------
        bool
        """
        passed = _INTERRUPTED.is_set() or (self.seconds is not None and self.elapsed() >= self.seconds)
        self.ran_out = self.ran_out or passed
        return passed


def grace_s(time_limit: float | None) -> float:
    """Seconds a run may overstay its time limit before it is stopped: a process's start (imports), and
    the clean-up and simulation after the method. The one rule for every child process a run is put in
    (`remat_bench.app.evaluate.evaluate_in_child`) and for sweep runs (a config's default ``grace``).

    Parameters
    ----------
    time_limit : float or None
        The run's time limit (s); None for no limit.

    Returns
    -------
    float
        Seconds (s): 5 plus a twentieth of the time limit.
    """
    return 5.0 + 0.05 * (time_limit or 0.0)


T = TypeVar("T")


def run_interruptibly(fn: Callable[[], T], stop: Callable[[], None]) -> T:
    """Run a native solver call so that Ctrl-C stops the search instead of the program.

    The call runs in a worker thread while the main thread waits (Python handles
    signals only there); on Ctrl-C the main thread asks the solver to stop
    (``stop``), marks the solve interrupted, and keeps waiting for the solver to
    return its best solution so far; a second Ctrl-C aborts. Off the main thread, the call runs as is.

    Parameters
    ----------
    fn : Callable[[], T]
        The solver call.
    stop : Callable[[], None]
        Asks the solver to end its search and return; called at most once, from the main thread, once an
        interrupt is requested (Ctrl-C while waiting, or `request_interrupt`).

    Returns
    -------
    T
        What ``fn`` returned.

    Raises
    ------
    KeyboardInterrupt
        A second Ctrl-C, after ``stop`` was called. Whatever ``fn`` raises is raised again here.
    """
    if threading.current_thread() is not threading.main_thread():
        return fn()
    box: dict[str, Any] = {}
    # Waited on through an Event, not Thread.join: in CPython 3.11 a KeyboardInterrupt that lands in
    # join() marks the thread stopped while it still runs (bpo-45274's handling), so the wait would
    # end before the solver returned and its answer would be lost.
    done = threading.Event()

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed back to the caller below
            box["error"] = exc
        finally:
            done.set()

    worker = threading.Thread(target=target, name="remat-bench-solver", daemon=True)
    worker.start()
    stopped = False
    while not done.is_set():
        try:
            done.wait(0.1)
        except KeyboardInterrupt:
            if stopped:  # a second Ctrl-C after the stop was asked for: abort
                raise
            _INTERRUPTED.set()
        if _INTERRUPTED.is_set() and not stopped:
            stopped = True
            stop()
    if "error" in box:
        raise box["error"]
    return box["value"]
