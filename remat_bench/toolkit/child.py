"""Library calls that cannot be interrupted, run in a spawned child process killed when told to stop.

HiGHS checks its time limit only between phases, and networkx's tree
decompositions never: on large models and graphs both run far past a time
limit. `run_in_child` runs such a call in a ``spawn`` child (a fresh
interpreter: no threads inherited from OR-Tools or HiGHS), polls a stop
predicate every 0.1 s, and kills the child when it says stop. The call may
stream messages back (HiGHS's improving solutions), which the parent keeps.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from remat_bench.core.outcome import Termination, cut_short


def can_spawn() -> bool:
    """Whether a spawned child can start: it re-runs the parent's main script, which must exist.

    Under ``python -`` (a script on stdin) the main module's file is '<stdin>'
    and every spawned child dies at start; such runs call in process.

    Returns
    -------
    bool
        False when the main module's file does not exist; True otherwise (no main file included).
    """
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    return path is None or os.path.exists(path)


@dataclass
class ChildOutcome:
    """How a child call ended, as a `Termination`: ``converged`` (the call returned: ``value`` holds
    its answer), ``error`` (it raised: ``message`` names the exception; or, ``died``, the child ended
    without an answer), ``time_limit`` or ``interrupted`` (the stop predicate stopped it: Ctrl-C
    makes it ``interrupted``), or ``not_applicable`` (no child could start: the caller may run the
    call in process)."""

    termination: Termination
    value: Any = None
    message: str = ""
    died: bool = False  # no answer came: the child crashed or was killed (a stopped child is not "died")

    @property
    def returned(self) -> bool:
        """Whether the call returned, ``value`` being its answer."""
        return self.termination is Termination.CONVERGED


def _die_with_parent() -> None:
    """Have the kernel kill this process when its parent dies (Linux), so that a child killed by
    `run_in_child` takes its own children (a HiGHS solve `auto`'s member started) with it."""
    if not sys.platform.startswith("linux"):
        return
    import contextlib
    import ctypes
    import signal

    # Without it, a stopped child's children end at their own time limits.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG


def _child_main(conn: Any) -> None:
    """Child process: receive (fn, args, name of the streaming keyword), call, send the answer back.

    When the parent has gone (it stopped this call), the child exits at once and silently.
    """
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides what Ctrl-C means
    _die_with_parent()

    def send(message: tuple[str, Any]) -> None:
        try:
            conn.send(message)
        except (BrokenPipeError, ConnectionResetError, EOFError):
            os._exit(0)  # nobody is listening: the parent stopped this call

    try:
        fn, args, stream_to = conn.recv()
        kwargs = {stream_to: lambda message: send(("message", message))} if stream_to else {}
        send(("done", fn(*args, **kwargs)))
    except BaseException as exc:  # reported to the parent
        send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def run_in_child(fn: Callable[..., Any], args: tuple[Any, ...], stop: Callable[[], bool],
                 stream_to: str | None = None,
                 on_message: Callable[[Any], None] | None = None, daemon: bool = True) -> ChildOutcome:
    """``fn(*args)`` in a spawned process, killed once ``stop()`` is true (a time limit, or Ctrl-C:
    the outcome's termination says which).

    ``fn`` must be importable by name (a module-level function). With
    ``stream_to``, ``fn`` gets a keyword argument of that name: a function
    sending one message to the parent, where ``on_message`` receives it.
    ``daemon=False`` lets the call start children of its own (a method that runs
    HiGHS in a child, run by ``auto`` in a child); it is killed here all the same.

    Parameters
    ----------
    fn : callable
        A module-level function (pickled by name).
    args : tuple
        Its positional arguments (pickled).
    stop : callable
        Asked every 0.1 s and after each message; the child is killed once it answers True.
    stream_to : str or None
        The keyword by which ``fn`` gets its send function; None: ``fn`` sends nothing.
    on_message : callable or None
        Called in this process with each message the child sends.
    daemon : bool
        Start the child as a daemon process (which may not start children of its own).

    Returns
    -------
    ChildOutcome
        ``value`` is ``fn``'s answer when it returned; the child is gone when this returns.
    """
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    receive, child_end = ctx.Pipe(duplex=True)
    # The call goes through the pipe once the child runs, not with the process object: CPython
    # writes that one before closing its copy of the child's end, so a child that dies at start
    # (its main script missing) would block the parent's write forever.
    proc = ctx.Process(target=_child_main, args=(child_end,), daemon=daemon)
    proc.start()
    child_end.close()
    try:
        try:
            receive.send((fn, args, stream_to))
        except (BrokenPipeError, ConnectionResetError, EOFError):
            return ChildOutcome(Termination.NOT_APPLICABLE, message="the child process could not start")
        while True:
            if receive.poll(0.1):
                try:
                    kind, payload = receive.recv()
                except EOFError:
                    return ChildOutcome(Termination.ERROR, message="the child process ended without an answer",
                                        died=True)
                if kind == "done":
                    return ChildOutcome(Termination.CONVERGED, value=payload)
                if kind == "error":
                    return ChildOutcome(Termination.ERROR, message=payload)
                if on_message is not None:
                    on_message(payload)
            elif not proc.is_alive():
                return ChildOutcome(Termination.ERROR, message="the child process ended without an answer",
                                    died=True)
            if stop():  # checked after every message too: a fast stream must not keep the child alive
                return ChildOutcome(cut_short())
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join()
