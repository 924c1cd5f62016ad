"""Where the time goes: the report's section on replays that timed every step in place (``replay: {steps: N}``).

Each such replay keeps, in its ``attribution`` column, the error of the
modelled overhead split into what the recomputations account for and the
rest, each run's time outside its steps, and the operator kinds and nodes
whose recomputations the model prices worst (`remat_bench.torch.attribution`).
The section lists the runs with the largest errors, the operator kinds that
account for most of the error over all of them, and what the steps leave
unexplained.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import pandas as pd

from remat_bench.app.report.tables import markdown_table

# Runs and operator kinds the section lists at most.
TOP = 10


def _attributions(frame: pd.DataFrame) -> list[tuple[pd.Series, dict[str, Any]]]:
    """The runs with an attribution, and it parsed; a cell that is not one is left out."""
    if "attribution" not in frame:
        return []
    found = []
    for _, row in frame[frame["attribution"].notna()].iterrows():
        try:
            data = json.loads(str(row["attribution"]))
        except ValueError:
            continue
        if isinstance(data, dict) and "overhead_error_pts" in data:
            found.append((row, data))
    return found


def attribution_section(frame: pd.DataFrame) -> str | None:
    """The runs whose modelled overhead is furthest off and why, and the operator kinds behind most error.

    Parameters
    ----------
    frame : pandas.DataFrame
        A results table with a ``label`` column (`remat_bench.app.report.tables`).

    Returns
    -------
    str or None
        Markdown; None when no replay timed its steps.
    """
    found = _attributions(frame)
    if not found:
        return None
    found.sort(key=lambda item: -abs(item[1]["overhead_error_pts"]))
    rows = []
    for row, a in found[:TOP]:
        s, b = a["schedule"], a["baseline"]
        worst = ", ".join(f"{op['op']} {op['error_ns'] / 1e6:+.2f} ms" for op in a["ops"][:2]) or "none"
        budget = row["budget_text"] if "budget_text" in row and isinstance(row["budget_text"], str) else row["budget"]
        rows.append([str(row["graph"]), str(budget), str(row.get("label", row["method"])),
                     f"{a['modelled_overhead_pct']:+.2f}", f"{a['measured_overhead_pct']:+.2f}",
                     f"{a['overhead_error_pts']:+.2f}", f"{a['recomputations_error_pts']:+.2f}",
                     f"{a['rest_error_pts']:+.2f}", _share(s), _share(b), worst])
    table = markdown_table(["graph", "budget", "method", "modelled %", "measured in place %", "error (points)",
                            "of it: recomputations", "the rest", "schedule outside steps", "baseline outside steps",
                            "operator kinds priced worst"], rows)
    kinds: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for _, a in found:
        for op in a["ops"]:
            kinds[op["op"]][0] += op["recomputations"]
            kinds[op["op"]][1] += op["measured_ns"]
            kinds[op["op"]][2] += op["modelled_ns"]
    ordered = sorted(kinds.items(), key=lambda kv: -abs(kv[1][1] - kv[1][2]))[:TOP]
    op_rows = [[op, f"{int(n):,}", f"{measured / 1e6:.2f}", f"{modelled / 1e6:.2f}",
                f"{(measured - modelled) / 1e6:+.2f}",
                f"{100 * (measured / modelled - 1):+.1f}" if modelled else "-"]
               for op, (n, measured, modelled) in ordered]
    ops = markdown_table(["operator", "recomputations", "measured (ms)", "modelled (ms)", "error (ms)", "error %"],
                         op_rows)
    intro = (f"{len(found)} replays timed every step in place, the schedule's and the baseline's, beside each "
             "node's modelled duration (`replay --steps`). The error of the modelled overhead (measured in place "
             "less modelled, in points) splits into what the recomputations account for (their measured less "
             "modelled time over the baseline's modelled duration) and the rest (first computations, and each "
             "run's time outside its steps: the executor's loop and frees, shown as a share of the run). "
             f"The {min(TOP, len(found))} furthest off:")
    return "\n\n".join([intro, table, "Recomputed operator kinds, summed over these replays, by |error| (each "
                        "replay keeps its worst kinds):", ops])


def _share(run: dict[str, Any]) -> str:
    """The time a run spends outside its timed steps, as a share of the run."""
    return f"{100 * run['outside_ns'] / run['run_ns']:.1f}%" if run.get("run_ns") else "-"
