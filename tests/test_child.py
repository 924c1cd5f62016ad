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
    assert (done.status, done.value) == ("done", 720)
    stopped = run_in_child(time.sleep, (600,), stop=Deadline(0.5).expired)
    assert stopped.status == "stopped" and stopped.value is None
    failed = run_in_child(math.factorial, (-1,), stop=Deadline(60).expired)
    assert failed.status == "error" and failed.message.startswith("ValueError")


def test_streamed_messages_reach_the_parent_in_order():
    got: list[int] = []
    outcome = run_in_child(count_to, (5,), stop=Deadline(60).expired, stream_to="send", on_message=got.append)
    assert (outcome.status, outcome.value) == ("done", 5)
    assert got == [0, 1, 2, 3, 4]
