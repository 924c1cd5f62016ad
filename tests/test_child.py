"""`run_in_child`: uninterruptible calls in a spawned process, stopped when told."""

from __future__ import annotations

import math
import time

from remat_bench.methods.base import Deadline
from remat_bench.toolkit.child import run_in_child


def count_to(n: int, send=None) -> int:
    """Module level, so that the spawned child can import it."""
    for i in range(n):
        send(i)
    return n


def test_answers_errors_and_stops():
    done = run_in_child(math.factorial, (6,), stop=Deadline(60).expired)
    assert (done.returned, done.value) == (True, 720)
    stopped = run_in_child(time.sleep, (600,), stop=Deadline(0.5).expired)
    assert not stopped.returned and stopped.value is None
    failed = run_in_child(math.factorial, (-1,), stop=Deadline(60).expired)
    assert not failed.returned and failed.message.startswith("ValueError")


def test_streamed_messages_reach_the_parent_in_order():
    got: list[int] = []
    outcome = run_in_child(count_to, (5,), stop=Deadline(60).expired, stream_to="send", on_message=got.append)
    assert (outcome.returned, outcome.value) == (True, 5)
    assert got == [0, 1, 2, 3, 4]


def test_each_end_is_a_termination():
    import os

    from remat_bench.core.control import request_interrupt, reset_interrupt
    from remat_bench.core.outcome import Termination

    done = run_in_child(math.factorial, (6,), stop=Deadline(60).expired)
    assert (done.termination, done.returned, done.value) == (Termination.CONVERGED, True, 720)
    stopped = run_in_child(time.sleep, (600,), stop=Deadline(0.5).expired)
    assert (stopped.termination, stopped.returned) == (Termination.TIME_LIMIT, False)
    failed = run_in_child(math.factorial, (-1,), stop=Deadline(60).expired)
    assert (failed.termination, failed.died) == (Termination.ERROR, False)
    died = run_in_child(os._exit, (3,), stop=Deadline(60).expired)  # no answer, no exception: it died
    assert (died.termination, died.died) == (Termination.ERROR, True)
    assert died.message == "the child process ended without an answer"
    request_interrupt()  # Ctrl-C: the stop predicate stops the child, and says why
    try:
        interrupted = run_in_child(time.sleep, (600,), stop=Deadline(60).expired)
    finally:
        reset_interrupt()
    assert interrupted.termination is Termination.INTERRUPTED and not interrupted.returned


def test_a_bad_parameter_is_refused_before_a_child_process_starts(monkeypatch):
    import pytest

    from remat_bench.app import evaluate as evaluate_module
    from remat_bench.core.budget import parse_budget
    from remat_bench.core.errors import MethodError
    from remat_bench.generators.chain import chain
    from remat_bench.methods import get_method
    from remat_bench.toolkit import child

    def no_child(*args, **kwargs):
        raise AssertionError("a child process was started")

    monkeypatch.setattr(child, "run_in_child", no_child)
    g = chain(8)
    with pytest.raises(MethodError, match="has no parameter 'nope'"):
        evaluate_module.evaluate_in_child(g, get_method("greedy"), parse_budget("0.8", g), 5, {"nope": 1})
