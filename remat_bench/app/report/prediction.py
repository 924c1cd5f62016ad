"""What the simulator predicts against what a replay measures (a sweep with ``replay:``): peaks, overheads
and how alike both rank the methods."""

from __future__ import annotations

import math

import pandas as pd

from remat_bench.app.report.tables import cell, each_instance, markdown_table


def rank_agreement(modelled: list[float], measured: list[float]) -> float | None:
    """Kendall's tau between the methods' modelled and measured overheads: do both rank them alike?

    tau-b (`scipy.stats.kendalltau`): (concordant - discordant pairs) over the pairs, corrected for ties;
    1 when the measurement ranks the methods as the simulator does, -1 when it reverses the order.

    Parameters
    ----------
    modelled : list of float
        Each method's modelled overhead, in percent.
    measured : list of float
        The same methods' measured overheads, in the same order.

    Returns
    -------
    float or None
        None with fewer than 2 methods, or when either side ties them all (tau is undefined).
    """
    from scipy.stats import kendalltau

    if len(modelled) < 2 or len(set(modelled)) < 2 or len(set(measured)) < 2:
        return None
    tau = float(kendalltau(modelled, measured).statistic)
    return None if math.isnan(tau) else tau


def prediction_section(frame: pd.DataFrame) -> str | None:
    """What the simulator predicts against what a replay measures (a sweep with ``replay:``): per graph,
    budget and method, the simulated and measured peaks and the modelled and measured overheads; per graph
    and budget, how alike the two overheads rank the methods (`rank_agreement`); a summary line.

    Parameters
    ----------
    frame : pandas.DataFrame
        A results table with a ``label`` and an ``ok`` column (`labels`, `succeeded`).

    Returns
    -------
    str or None
        Markdown; None when no run was replayed.
    """
    if "replay_status" not in frame or frame["replay_status"].isna().all():
        return None
    replayed = frame[frame["replay_status"].notna()]
    rows: list[list[str]] = []
    ranks: list[list[str]] = []
    picked = []
    for graph, budget, at in each_instance(frame, replayed):
        modelled, measured = [], []
        for label in dict.fromkeys(at["label"]):
            runs = at[at["label"] == label].assign(done=at["replay_status"] == "measured")
            run = runs.sort_values(["done", "duration"], ascending=[False, True], kind="stable").iloc[0]
            picked.append(run)
            rows.append([graph, budget, str(label), *_prediction_cells(run)])
            if run["replay_status"] == "measured" and not pd.isna(run["measured_overhead_pct"]):
                modelled.append(float(run["modelled_overhead_pct"]))
                measured.append(float(run["measured_overhead_pct"]))
        tau = rank_agreement(modelled, measured)
        why = ("fewer than 2 methods measured" if len(modelled) < 2 else
               "the modelled overheads all tie" if len(set(modelled)) < 2 else "the measured overheads all tie")
        ranks.append([graph, budget, str(len(modelled)), f"n/a ({why})" if tau is None else f"{tau:+.2f}"])
    table = markdown_table(["graph", "budget", "method", "simulated peak", "measured peak", "peak error %",
                    "modelled overhead %", "measured overhead % (min to max)", "overhead error (points)"], rows)
    agreement = markdown_table(["graph", "budget", "methods", "Kendall tau"], ranks)
    return (_prediction_summary(pd.DataFrame(picked)) + "\n\n" + table + "\n\n" + agreement + (
        "\n\nEach schedule replayed with the model's real operators (`remat-bench replay`; one run per method, "
        "its fastest): the measured peak against the simulated one (peak error, percent of the simulated peak), "
        "and the overhead measured against the baseline run in turns with it in the same process: the median "
        "of the paired overheads, with their range, min to max, over the pairs. The overhead error is measured "
        "less modelled, in points. Kendall tau compares how the modelled and the measured overheads rank the "
        "methods at one graph and budget: 1 the same order, -1 the reverse; n/a for fewer than 2 methods or "
        "when either ranking ties them all."))


def _prediction_cells(run: pd.Series) -> list[str]:
    """A replayed run's peaks, overheads and errors; a failed replay's message."""
    if run["replay_status"] != "measured":
        return [cell(run["peak"], "{:,.0f}"), f"replay failed: {run['replay_message']}", "", "", "", ""]
    measured = run["measured_overhead_pct"]
    spread = ("" if pd.isna(measured) else
              f"{measured:+.2f} ({run['measured_overhead_min_pct']:+.2f} to {run['measured_overhead_max_pct']:+.2f})")
    error = None if pd.isna(measured) else measured - run["modelled_overhead_pct"]
    within = run["measured_within_budget"]
    over = " **above the budget**" if not pd.isna(within) and not within else ""
    # Peaks in bytes (only PyTorch graphs are replayed).
    return [cell(run["peak"], "{:,.0f}"), cell(run["measured_peak"], "{:,.0f}") + over,
            cell(run["peak_error_pct"], "{:+.3f}"), cell(run["modelled_overhead_pct"], "{:+.2f}"),
            spread or "not measured", cell(error, "{:+.2f}")]


def _prediction_summary(runs: pd.DataFrame) -> str:
    """Median and max |peak error|, and the runs the simulator placed within budget that measured above it."""
    measured = runs[runs["replay_status"] == "measured"]
    failed = len(runs) - len(measured)
    if measured.empty:
        return f"No replay measured anything: {failed} failed (see the table)."
    errors = measured["peak_error_pct"].astype(float).abs()
    above = measured["measured_within_budget"].map(lambda within: not pd.isna(within) and not within)
    surprise = measured[measured["ok"].astype(bool) & above.astype(bool)]
    text = (f"Over {len(measured)} replayed schedules: median |peak error| {errors.median():.3f}%, max "
            f"{errors.max():.3f}%; {len(surprise)} the simulator placed within their budget measured above it")
    if len(surprise):
        text += " (" + ", ".join(f"{r.label} on {r.graph} at {r.budget_text}" for r in surprise.itertuples()) + ")"
    overhead = (measured["measured_overhead_pct"] - measured["modelled_overhead_pct"]).astype(float).dropna().abs()
    if len(overhead):
        text += f"; median |overhead error| {overhead.median():.2f} points"
    return text + (f"; {failed} replays failed." if failed else ".")
