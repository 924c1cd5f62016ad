"""The knob search torch-budget and knapsack share (toolkit/lowering.search_knob): coarse to fine, so that a
search cut short still tries the low knobs a tight budget needs, and the same answer as a walk from 1 to 0
when it tries every knob."""

from __future__ import annotations

import numpy as np

from remat_bench.core.control import Deadline
from remat_bench.toolkit.lowering import coarse_to_fine, search_knob


def test_coarse_to_fine_visits_each_index_once_ends_first():
    assert coarse_to_fine(0) == []
    assert coarse_to_fine(1) == [0]
    assert coarse_to_fine(5) == [0, 4, 2, 1, 3]
    order = coarse_to_fine(21)
    assert order[:5] == [0, 20, 10, 5, 15] and sorted(order) == list(range(21))


def plans(peaks: dict[float, int]):
    """A planner whose plan at a knob has duration 100 - 50 * knob and the given peak (10 where not given)."""
    calls: list[float] = []

    def evaluate(knob: float):
        calls.append(knob)
        peak = peaks.get(round(knob, 6), 10)
        return [(100 - 50 * knob, peak, None, knob, False)]

    return evaluate, calls


def test_with_time_for_every_knob_the_answer_is_the_fastest_that_fits_ties_to_the_larger_knob():
    # Knobs 0.4 and above peak at 20, above a budget of 15: the fastest that fits is 0.35 (grid), then bisected.
    peaks = {round(k, 6): 20 for k in np.linspace(1.0, 0.0, 21) if k >= 0.4 - 1e-9}
    evaluate, calls = plans(peaks)
    best = search_knob(evaluate, 15, Deadline(None), 20, 0)
    assert best is not None and best[3] == 0.35 and best[1] == 10
    assert sorted(set(round(c, 6) for c in calls)) == sorted(round(k, 6) for k in np.linspace(1.0, 0.0, 21))


def test_cut_short_after_two_knobs_it_has_tried_both_ends():
    # Only knobs below 0.1 fit the budget (a tight one): a walk from 1 down, cut short after two knobs
    # (1.0 and 0.95), would have found nothing.
    evaluate, calls = plans({round(k, 6): 20 for k in np.linspace(1.0, 0.0, 21) if k >= 0.1 - 1e-9})
    ticks = iter([False, False, True])  # the deadline passes after the second knob

    class Soon(Deadline):
        def expired(self) -> bool:
            return next(ticks, True)

    best = search_knob(evaluate, 15, Soon(None), 20, 3)
    assert calls == [1.0, 0.0]
    assert best is not None and best[3] == 0.0 and best[1] == 10
