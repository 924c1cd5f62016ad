"""The report's "Prediction against measurement" (a sweep with ``replay:``), from hand-made results rows."""

from __future__ import annotations

import pandas as pd
import pytest

from remat_bench.app.report.prediction import prediction_section, rank_agreement


def row(graph: str, budget: str, method: str, modelled: float | None, measured: float | None, *,
        peak: int = 1000, measured_peak: int | None = 1000, status: str = "feasible", within: bool | None = True,
        replay: str | None = "measured", message: str | None = None) -> dict:
    return {"graph": graph, "budget_text": budget, "budget_fraction": float(budget), "method": method,
            "label": method, "params": "{}", "status": status, "ok": status in ("optimal", "feasible"),
            "duration": 100.0, "peak": peak, "overhead_pct": modelled, "replay_status": replay,
            "replay_message": message, "measured_peak": measured_peak,
            "peak_error_pct": None if measured_peak is None else 100 * (measured_peak / peak - 1),
            "measured_within_budget": within, "modelled_overhead_pct": modelled, "measured_overhead_pct": measured,
            "measured_overhead_min_pct": None if measured is None else measured - 1,
            "measured_overhead_max_pct": None if measured is None else measured + 2}


def cells(text: str, first: str) -> list[list[str]]:
    """The rows of the Markdown tables in ``text`` whose first cell is ``first``."""
    out = []
    for line in text.splitlines():
        parts = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and parts[0] == first:
            out.append(parts)
    return out


def test_kendall_tau_between_modelled_and_measured_overheads():
    # Pairs (a, b) and (a, c) ranked alike, (b, c) reversed: (2 - 1) / 3.
    assert rank_agreement([1.0, 2.0, 3.0], [1.5, 3.5, 2.5]) == pytest.approx(1 / 3, abs=1e-15)
    assert rank_agreement([1.0, 2.0, 3.0], [10.0, 20.0, 30.0]) == 1.0
    assert rank_agreement([1.0, 2.0], [5.0, 4.0]) == -1.0
    assert rank_agreement([1.0], [1.0]) is None  # fewer than 2 methods
    assert rank_agreement([2.0, 2.0, 2.0], [1.0, 2.0, 3.0]) is None  # all tied
    assert rank_agreement([1.0, 2.0], [3.0, 3.0]) is None


def test_the_prediction_section_sets_measured_against_simulated_and_ranks_the_methods():
    frame = pd.DataFrame([
        row("g", "0.5", "checkmate", 1.0, 1.5),
        row("g", "0.5", "greedy", 2.0, 3.5, measured_peak=1025, within=False),  # within by the simulator, not measured
        row("g", "0.5", "chen", 3.0, 2.5, measured_peak=950),
        row("g", "0.8", "greedy", 0.5, 0.25),
        row("h", "0.5", "greedy", 2.0, 2.0, peak=2000, measured_peak=2200),
        row("h", "0.5", "chen", 2.0, 4.0, peak=2000, measured_peak=2000),
        row("h", "0.5", "moccasin", 1.0, None, peak=2000, replay="failed", measured_peak=None, within=None,
            message="the replay ran out of memory"),
        row("k", "0.5", "greedy", 1.0, None, replay=None, measured_peak=None, within=None),  # not replayed
    ])
    text = prediction_section(frame)
    assert text is not None
    assert text.splitlines()[0] == (
        "Over 6 replayed schedules: median |peak error| 1.250%, max 10.000%; 1 the simulator placed within their "
        "budget measured above it (greedy on g at 0.5); median |overhead error| 0.50 points; 1 replays failed.")
    runs = {(r[1], r[2]): r for r in cells(text, "g") if len(r) == 9}
    assert runs[("0.5", "checkmate")] == ["g", "0.5", "checkmate", "1,000", "1,000", "+0.000", "+1.00",
                                          "+1.50 (+0.50 to +3.50)", "+0.50"]
    assert runs[("0.5", "greedy")][4:6] == ["1,025 **above the budget**", "+2.500"]
    assert runs[("0.5", "chen")][-1] == "-0.50"
    failed = next(r for r in cells(text, "h") if len(r) == 9 and r[2] == "moccasin")
    assert failed[3:5] == ["2,000", "replay failed: the replay ran out of memory"]
    assert not cells(text, "k")  # a graph without replays is not in the section
    ranks = {(r[0], r[1]): r[2:] for r in cells(text, "g") + cells(text, "h") if len(r) == 4}
    assert ranks == {("g", "0.5"): ["3", "+0.33"],
                     ("g", "0.8"): ["1", "n/a (fewer than 2 methods measured)"],
                     ("h", "0.5"): ["2", "n/a (the modelled overheads all tie)"]}
    assert prediction_section(frame.assign(replay_status=None)) is None
