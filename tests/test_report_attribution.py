"""The report's "Where the time goes" section (remat_bench.app.report.attribution), from hand-made rows."""

from __future__ import annotations

import json

import pandas as pd

from remat_bench.app.report.attribution import attribution_section


def _attribution(error: float, recompute: float, ops: list[tuple[str, int, float, float]]) -> str:
    return json.dumps({
        "passes": 1, "modelled_overhead_pct": 10.0, "measured_overhead_pct": 10.0 + error,
        "overhead_error_pts": error, "recomputations_error_pts": recompute, "rest_error_pts": error - recompute,
        "schedule": {"modelled_ns": 1.1e9, "run_ns": 1.2e9, "steps_ns": 1.14e9, "outside_ns": 0.06e9},
        "baseline": {"modelled_ns": 1.0e9, "run_ns": 1.0e9, "steps_ns": 0.98e9, "outside_ns": 0.02e9},
        "recomputations": {"count": 3, "measured_ns": 0.0, "modelled_ns": 0.0},
        "ops": [{"op": op, "recomputations": n, "measured_ns": m, "modelled_ns": mo, "error_ns": m - mo}
                for op, n, m, mo in ops],
        "nodes": []})


def test_the_runs_furthest_off_come_first_with_their_split_and_the_operator_kinds_summed():
    frame = pd.DataFrame({
        "graph": ["g", "g", "g"], "budget": [50, 50, 70], "budget_text": ["0.5", "0.5", "0.7"],
        "method": ["a", "b", "a"],
        "label": ["a", "b", "a"],
        "attribution": [_attribution(-2.0, -1.5, [("aten.add.Tensor", 4, 1e6, 3e6)]),
                        _attribution(+6.0, +5.0, [("aten.mm.default", 2, 9e6, 4e6), ("aten.add.Tensor", 1, 2e6, 1e6)]),
                        None]})
    text = attribution_section(frame)
    assert text is not None and text.startswith("2 replays timed every step in place")
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("| g |"))
    # b's error (+6) is larger than a's (-2): b first; its outside-steps shares 5.0% (0.06 of 1.2) and 2.0%.
    assert lines[first].split(" | ")[1:9] == ["0.5", "b", "+10.00", "+16.00", "+6.00", "+5.00", "+1.00", "5.0%"]
    assert "aten.mm.default +5.00 ms, aten.add.Tensor +1.00 ms" in lines[first]
    # Summed: mm +5 ms (9 against 4, +125.0%); add 3 against 4 ms, -1 ms (5 recomputations): mm first.
    mm = next(line for line in lines if line.startswith("| aten.mm.default"))
    add = next(line for line in lines if line.startswith("| aten.add.Tensor"))
    assert mm == "| aten.mm.default | 2 | 9.00 | 4.00 | +5.00 | +125.0 |"
    assert add == "| aten.add.Tensor | 5 | 3.00 | 4.00 | -1.00 | -25.0 |"
    assert lines.index(mm) < lines.index(add)


def test_no_section_without_attributions_and_unreadable_cells_are_left_out():
    assert attribution_section(pd.DataFrame({"graph": ["g"], "budget": ["0.5"], "method": ["a"]})) is None
    frame = pd.DataFrame({"graph": ["g"], "budget": ["0.5"], "method": ["a"], "attribution": ["{not json"]})
    assert attribution_section(frame) is None
