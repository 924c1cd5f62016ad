"""The report's "Prediction against measurement" (a sweep with ``replay:``), from hand-made results rows."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from scipy.stats import kendalltau

from remat_bench.app.report.prediction import (
    ALL_OVERLAP,
    intervals_overlap,
    overhead_text,
    prediction_section,
    rank_agreement,
    separated_rank_agreement,
)


def row(graph: str, budget: str, method: str, modelled: float | None, measured: float | None, *,
        peak: int = 1000, measured_peak: int | None = 1000, status: str = "feasible", within: bool | None = True,
        replay: str | None = "measured", message: str | None = None,
        interval: tuple[float, float] | None = None) -> dict:
    """A results row; with ``interval``, one of a replay that measured a 95% interval (the newer columns)."""
    out = {"graph": graph, "budget_text": budget, "budget_fraction": float(budget), "method": method,
           "label": method, "params": "{}", "status": status, "ok": status in ("optimal", "feasible"),
           "duration": 100.0, "peak": peak, "overhead_pct": modelled, "replay_status": replay,
           "replay_message": message, "measured_peak": measured_peak,
           "peak_error_pct": None if measured_peak is None else 100 * (measured_peak / peak - 1),
           "measured_within_budget": within, "modelled_overhead_pct": modelled, "measured_overhead_pct": measured,
           "measured_overhead_min_pct": None if measured is None else measured - 1,
           "measured_overhead_max_pct": None if measured is None else measured + 2}
    if interval is not None:
        out.update(measured_overhead_low_pct=interval[0], measured_overhead_high_pct=interval[1],
                   timing_clock="thread CPU time", replay_pairs=20, replay_repeats=20)
    return out


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
    # |overhead error|s 0.5, 1.5, 0.5, 0.25, 0, 2: median 0.5; 90th percentile 1.5 + 0.5 (2 - 1.5) (numpy's
    # linear interpolation at 0.9 * 5 = 4.5 of the sorted six).
    assert text.splitlines()[0] == (
        "Over 6 replayed schedules: median |peak error| 1.250%, max 10.000%; 1 the simulator placed within their "
        "budget measured above it (greedy on g at 0.5); |overhead error| median 0.50, 90th percentile 1.75, max "
        "2.00 points (chen on h at 0.5); no replay has a 95% interval of its overhead; 1 replays failed.")
    runs = {(r[1], r[2]): r for r in cells(text, "g") if len(r) == 9}
    assert runs[("0.5", "checkmate")] == ["g", "0.5", "checkmate", "1,000", "1,000", "+0.000", "+1.00",
                                          "+1.50 (+0.50 to +3.50)", "+0.50"]
    assert runs[("0.5", "greedy")][4:6] == ["1,025 **above the budget**", "+2.500"]
    assert runs[("0.5", "chen")][-1] == "-0.50"
    failed = next(r for r in cells(text, "h") if len(r) == 9 and r[2] == "moccasin")
    assert failed[3:5] == ["2,000", "replay failed: the replay ran out of memory"]
    assert not cells(text, "k")  # a graph without replays is not in the section
    # Results from before intervals (no such columns): every pair ranked on the medians, as said.
    ranks = {(r[0], r[1]): r[2:] for r in cells(text, "g") + cells(text, "h") if len(r) == 5}
    assert ranks == {("g", "0.5"): ["3", "3 of 3, without intervals", "+0.33"],
                     ("g", "0.8"): ["1", "-", "n/a (fewer than 2 methods measured)"],
                     ("h", "0.5"): ["2", "1 of 1, without intervals", "n/a (the modelled overheads all tie)"]}
    assert "Ranks taken without intervals at 2 graph and budget pairs:" in text
    assert "| measured overhead % (min to max) |" in text and "95%" not in text.split("\n\n")[1]
    # greedy and chen replayed one schedule of h (same peak and modelled overhead), but without intervals
    # there is nothing to compare.
    assert "One schedule replayed for several methods" not in text
    assert prediction_section(frame.assign(replay_status=None)) is None


def test_a_measured_overhead_reads_with_its_interval():
    assert overhead_text(21.3, (19.8, 22.9)) == "+21.3 [+19.8, +22.9]"
    assert overhead_text(-2.04, (-3.26, -0.71)) == "-2.0 [-3.3, -0.7]"
    assert overhead_text(4.0, None) == "+4.0"
    frame = pd.DataFrame([row("g", "0.5", "chen", 20.0, 21.3, interval=(19.8, 22.9)),
                          row("g", "0.5", "greedy", 2.0, 2.5)])  # too few pairs for an interval: its range
    text = prediction_section(frame)
    assert text is not None
    runs = {r[2]: r for r in cells(text, "g") if len(r) == 9}
    assert runs["chen"][7:] == ["+21.3 [+19.8, +22.9]", "+1.30"]
    assert runs["greedy"][7] == "+2.50 (+1.50 to +4.50)"
    assert "| measured overhead % [95% interval], else (min to max) |" in text
    # The interval of chen holds its modelled +20.0; greedy has none.
    assert "; the 95% interval of 1 of 1 runs holds the modelled overhead (1 without an interval)." in text
    assert "Times read off: thread CPU time. Timed pairs per run: 20." in text


def test_intervals_overlap_when_they_share_a_point():
    assert intervals_overlap((1.0, 2.0), (2.0, 3.0))  # touching: not separated
    assert intervals_overlap((1.0, 4.0), (2.0, 3.0))
    assert not intervals_overlap((1.0, 2.0), (2.5, 3.0))
    assert not intervals_overlap((2.5, 3.0), (1.0, 2.0))


def test_tau_over_the_pairs_the_intervals_separate():
    # a, b, c modelled 1, 2, 3. (a, b) overlap ([0.5, 1.5] and [1, 4]) and (b, c) overlap ([1, 4] and [2, 3]);
    # only (a, c) is separated, a below c as modelled: 1 concordant of 1 pair, tau = 1.
    assert separated_rank_agreement([1.0, 2.0, 3.0], [(0.5, 1.5), (1.0, 4.0), (2.0, 3.0)]) == (1.0, 1)
    # a's interval above both others, b below c: (a, b) and (a, c) discordant, (b, c) concordant: (1 - 2) / 3.
    tau, pairs = separated_rank_agreement([1.0, 2.0, 3.0], [(5.0, 6.0), (0.0, 1.0), (2.0, 3.0)])
    assert pairs == 3 and tau == pytest.approx(-1 / 3, abs=1e-15)
    # a and b tie on the model: (a, b) tied, (a, c) and (b, c) concordant: 2 / sqrt(3 * 2), tau-b as scipy's
    # when every pair is separated.
    tau, pairs = separated_rank_agreement([1.0, 1.0, 3.0], [(0.0, 1.0), (2.0, 3.0), (4.0, 5.0)])
    assert pairs == 3 and tau == pytest.approx(2 / math.sqrt(6), abs=1e-15)
    assert tau == pytest.approx(kendalltau([1.0, 1.0, 3.0], [0.5, 2.5, 4.5]).statistic, abs=1e-12)
    assert separated_rank_agreement([1.0, 2.0, 3.0], [(0.0, 2.0), (1.0, 3.0), (1.5, 2.5)]) == (None, 0)
    assert separated_rank_agreement([2.0, 2.0], [(0.0, 1.0), (2.0, 3.0)]) == (None, 1)  # tied on the model


def test_the_section_ranks_over_separated_pairs_and_says_when_every_pair_overlaps():
    frame = pd.DataFrame([
        # The instance of the hand count above: tau +1 over 1 of 3 pairs (on the medians alone: +1/3).
        row("g", "0.5", "checkmate", 1.0, 1.0, interval=(0.5, 1.5)),
        row("g", "0.5", "greedy", 2.0, 3.5, interval=(1.0, 4.0)),
        row("g", "0.5", "chen", 3.0, 2.5, interval=(2.0, 3.0)),
        # Every pair overlaps: no rank.
        row("g", "0.8", "checkmate", 0.5, 1.0, interval=(0.0, 2.0)),
        row("g", "0.8", "greedy", 1.0, 1.5, interval=(1.0, 3.0)),
        row("g", "0.8", "chen", 1.4, 2.0, interval=(1.5, 2.5)),
        # One replay without an interval: every pair, on the medians.
        row("h", "0.5", "greedy", 1.0, 1.2, interval=(1.0, 1.4)),
        row("h", "0.5", "chen", 2.0, 3.0),
    ])
    text = prediction_section(frame)
    assert text is not None
    ranks = {(r[0], r[1]): r[2:] for r in cells(text, "g") + cells(text, "h") if len(r) == 5}
    assert ranks == {("g", "0.5"): ["3", "1 of 3", "+1.00"],
                     ("g", "0.8"): ["3", "0 of 3", ALL_OVERLAP],
                     ("h", "0.5"): ["2", "1 of 1, without intervals", "+1.00"]}
    assert "intervals overlap: the measurement cannot rank these methods" in text
    assert "Ranks taken without intervals at 1 graph and budget pair:" in text
    # Intervals holding the modelled overhead (ends included): at g 0.5 all three (1 in [0.5, 1.5], 2 in [1, 4],
    # 3 in [2, 3]); at g 0.8 checkmate's and greedy's, not chen's (1.4 below [1.5, 2.5]); greedy's of h.
    assert "; the 95% interval of 6 of 7 runs holds the modelled overhead (1 without an interval)" in text


def test_one_schedule_replayed_for_two_methods_is_checked_for_overlapping_intervals():
    frame = pd.DataFrame([
        row("g", "0.5", "checkmate", 2.0, 2.4, interval=(1.9, 2.9)),
        row("g", "0.5", "moccasin", 2.0, 2.1, interval=(1.5, 2.6)),  # the same schedule: overlapping
        row("g", "0.5", "chen", 3.0, 3.2, interval=(2.0, 4.0)),  # another schedule (modelled 3.0)
        row("h", "0.5", "checkmate", 1.0, 1.1, peak=500, interval=(0.9, 1.3)),
        row("h", "0.5", "moccasin", 1.0, 2.0, peak=500, interval=(1.6, 2.4)),  # the same, apart
        row("h", "0.5", "greedy", 1.0, 1.0, peak=600, interval=(0.8, 1.2)),  # another peak: another schedule
    ])
    text = prediction_section(frame)
    assert text is not None
    check = text.split("One schedule replayed for several methods", 1)[1].split("\n\n")[1].splitlines()
    assert check == [
        "- checkmate and moccasin on g at 0.5 (simulated peak 1,000, modelled +2.00): checkmate +2.4 [+1.9, +2.9], "
        "moccasin +2.1 [+1.5, +2.6]; the intervals overlap, as replays of one schedule should",
        "- checkmate and moccasin on h at 0.5 (simulated peak 500, modelled +1.00): checkmate +1.1 [+0.9, +1.3], "
        "moccasin +2.0 [+1.6, +2.4]; the intervals of checkmate and moccasin do not overlap: the measurement "
        "differs between replays of one schedule by more than its intervals allow"]


def test_the_report_embeds_the_prediction_chart_of_replayed_runs(tmp_path):
    from remat_bench.app.report.write import _charts
    from remat_bench.app.sweep.results import build_table

    rows = [row("g", "0.5", "checkmate", 2.0, 2.4, interval=(1.9, 2.9)), row("g", "0.5", "chen", 3.0, 3.2)]
    table = build_table([{**r, "graph_sha256": "g", "repeat": 0, "time_limit": 10.0, "nodes": 30} for r in rows])
    frame = table.assign(label=table["method"], ok=True)
    figures, report = tmp_path / "report-figures", tmp_path / "report.md"
    assert _charts(table, frame, None, figures, report) == ["## Charts", "",
                                                            "![prediction](report-figures/prediction.png)", ""]
    assert (figures / "prediction.png").stat().st_size > 0
    # Without a replay that measured something, no prediction chart (and, with one budget, no chart at all).
    assert _charts(table.assign(replay_status=None), frame.assign(replay_status=None), None, figures, report) == []
