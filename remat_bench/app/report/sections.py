"""The report's sections of a whole results table (summary, best method, gap, production planners, input
order, speed) and each graph's table.

What a section says of a method it reads from the method's declarations (`Method.production`,
`Method.input_order`), not from lists of names; a method of old results that is no longer registered
declares nothing.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from remat_bench.app.catalog import PORTFOLIOS, get_method
from remat_bench.app.report.tables import (
    budget_order,
    cell,
    each_instance,
    least_overhead,
    markdown_table,
    rows_at,
)
from remat_bench.app.sweep.results import OVERHEAD_SHIFT_PCT, TIME_SHIFT_S, MethodSummary
from remat_bench.core.errors import MethodError
from remat_bench.core.outcome import Status
from remat_bench.methods import Method
from remat_bench.methods.reorder import Reorder

SPEED_TARGET_PCT = 1.0  # "within 1% of the best schedule any run found on the instance"
SPEED_SHIFT_S = 10.0  # qpbenchmark's shift for times


def summary_section(summaries: list[MethodSummary]) -> str:
    """Per method: runs, success rate, timeouts, failures, and the shifted geometric means of overhead and
    solve time, with a note on what they mean.

    Parameters
    ----------
    summaries : list of MethodSummary
        As `summarize` gives them.

    Returns
    -------
    str
        Markdown.
    """
    rows = []
    for s in summaries:
        rate = "n/a" if not s.applicable else f"{100 * s.success_rate:.0f}% ({s.successes}/{s.applicable})"
        rows.append([s.label, str(s.runs), rate, str(s.timeouts), str(s.failures),
                     cell(s.overhead_sgm, "{:.2f}"), cell(s.solve_time_sgm, "{:.2f}")])
    return markdown_table(["method", "runs", "success rate", "timeouts", "failures", "overhead % (sgm)",
                   "solve time s (sgm)"], rows) + (
        f"\n\nSuccess means a schedule within budget (status optimal or feasible); runs answered "
        f"`unsupported` (the method does not apply to the graph) are left out. sgm is the shifted geometric "
        f"mean exp(mean(log(x + s))) - s: of overhead over the method's successful runs with s = "
        f"{OVERHEAD_SHIFT_PCT:g} percentage point, and of solve time over its applicable runs with s = "
        f"{TIME_SHIFT_S:g} s, a run without an answer (neither a schedule within budget nor a proof that none "
        "fits, `infeasible`) counted at its time limit. Failures are "
        "errors, out-of-memory, over-budget schedules and timeouts."
    )


def best_section(frame: pd.DataFrame) -> str:
    """Per graph and budget, the method(s) with the least overhead (ties: all of them), and a tally;
    a portfolio (``auto``) is set beside the best method rather than ranked with the methods it runs.

    Parameters
    ----------
    frame : pandas.DataFrame
        A results table with a ``label`` and an ``ok`` column (`labels`, `succeeded`).

    Returns
    -------
    str
        Markdown.
    """
    # Methods that run other methods (a portfolio) are ranked apart from the methods they run.
    ok_all = frame[frame["ok"] & frame["overhead_pct"].notna()]
    portfolio = ok_all[ok_all["method"].isin(list(PORTFOLIOS))]
    ok = ok_all[~ok_all["method"].isin(list(PORTFOLIOS))]
    budgets = budget_order(frame)
    rows: list[list[str]] = []
    wins: dict[str, dict[str, int]] = {b: {} for b in budgets}
    for graph in dict.fromkeys(frame["graph"]):
        row = [graph]
        for budget in budgets:
            if rows_at(frame, graph, budget).empty:
                row.append("")
                continue
            best, tied = least_overhead(rows_at(ok, graph, budget))
            beside = _beside(rows_at(portfolio, graph, budget), best)
            if best is None:
                row.append("none found" + beside)
                continue
            for label in tied:
                wins[budget][label] = wins[budget].get(label, 0) + 1
            row.append(f"{', '.join(tied)} ({best:+.2f}%)" + beside)
        rows.append(row)
    tally = ["**most often best**"]
    for budget in budgets:
        if not wins[budget]:
            tally.append("-")
            continue
        top = max(wins[budget].values())
        tally.append(", ".join(f"{k} ({v})" for k, v in wins[budget].items() if v == top))
    rows.append(tally)
    note = ("" if portfolio.empty else
            f" A portfolio ({', '.join(PORTFOLIOS)}) is not ranked with the methods it runs: its overhead follows "
            "the best method's, with its distance from it in points (= when within 0.01 point).")
    return markdown_table(["graph", *[f"budget {b}" for b in budgets]], rows) + (
        "\n\nThe least overhead found at each budget (ties list every method that reached it); the last "
        "row counts on how many graphs each method was best." + note)


def _best_bound_pct(runs: pd.DataFrame) -> float | None:
    """The highest any-order bound the runs of one graph and budget computed, as the overhead it implies."""
    if "lower_bound_any_order" not in runs:
        return None
    base = float(runs["baseline_duration"].iloc[0])
    bounds = runs["lower_bound_any_order"].dropna()
    return None if bounds.empty or not base else 100 * (float(bounds.max()) / base - 1)


def gap_section(frame: pd.DataFrame) -> str | None:
    """Per graph and budget: the best schedule, the best any-order bound, the gap between them, and who won.

    The bound holds for every schedule (any order, any recomputation); the best of the bounds the
    runs computed is taken (each run's depends on the time it had). None without any bound.

    Parameters
    ----------
    frame : pandas.DataFrame
        A results table with a ``label`` and an ``ok`` column (`labels`, `succeeded`).

    Returns
    -------
    str or None
        Markdown; None when no run has an any-order bound.
    """
    if "lower_bound_any_order" not in frame or frame["lower_bound_any_order"].isna().all():
        return None
    rows = []
    for graph, budget, runs in each_instance(frame):
        bound = _best_bound_pct(runs)
        best, tied = least_overhead(runs[runs["ok"] & runs["overhead_pct"].notna()])
        gap = None if best is None or bound is None else best - bound
        proven = "yes" if gap is not None and gap <= 1e-9 else ""
        rows.append([graph, budget, cell(best, "{:+.3f}%"), cell(bound, "{:+.3f}%"),
                     cell(gap, "{:.3f}"), proven, ", ".join(tied) if tied else "none found"])
    return markdown_table(["graph", "budget", "best schedule", "best bound", "gap (points)", "proven optimal",
                   "found by"], rows) + (
        "\n\nThe best schedule is the least overhead any run found within the budget; the best bound is "
        "the highest any-order lower bound a run computed (valid for every schedule, in any order and with "
        "any recomputation). Where the gap is zero the schedule is optimal among all schedules.")


def production_section(frame: pd.DataFrame) -> str | None:
    """Per graph and budget, each production planner's overhead and peak beside the best schedule any other
    method found and the best any-order bound; where a planner's schedule exceeds its budget, by how much.

    The production planners are those practitioners run today (`Method.production`): PyTorch's memory
    budget (run for real, and its knapsack idea on any training graph), DTR's online eviction, and the
    rule policies of training frameworks.

    None when no production planner ran.

    Parameters
    ----------
    frame : pandas.DataFrame
        A results table with a ``label`` and an ``ok`` column (`labels`, `succeeded`).

    Returns
    -------
    str or None
        Markdown; None when no production planner ran.
    """
    mine = frame[_production(frame)]
    if mine.empty:
        return None
    left_out = mine[mine["status"].isin([Status.UNSUPPORTED.value, Status.INFEASIBLE.value])]
    mine = mine[~mine.index.isin(left_out.index)]
    others = frame[frame["ok"] & frame["overhead_pct"].notna()]
    rows = []
    for graph, budget, runs in each_instance(frame, mine):
        bound = _best_bound_pct(rows_at(frame, graph, budget))
        best, tied = least_overhead(rows_at(others, graph, budget))
        for _, run in runs.iterrows():
            rows.append([graph, budget, run["label"], str(run["status"]), *_planner_cells(run, best),
                         "" if best is None else f"{best:+.3f}% ({', '.join(tied)})", cell(bound, "{:+.3f}%")])
    skipped = ""
    if not left_out.empty:
        skipped = (f" Left out: {len(left_out)} runs answered `unsupported` (the planner does not apply to the "
                   "graph: torch-budget and policy need a PyTorch import) or `infeasible` (the budget is below "
                   "what any schedule needs).")
    return markdown_table(["graph", "budget", "planner", "status", "overhead", "peak against the budget",
                   "points above the best", "best schedule (by)", "best bound"], rows) + (
        "\n\nEach planner's schedule as the shared simulator scores it. A planner that cannot fit the budget "
        "still shows its schedule's overhead and how far its simulated peak exceeds the budget (a rule policy "
        "does not look at the budget; PyTorch's knob is searched for the fastest plan that fits). The best "
        f"schedule is the least overhead any run found within the budget ({', '.join(PORTFOLIOS)}, a planner, "
        "or any other method); the best bound holds for every schedule." + skipped)


def _planner_cells(run: pd.Series, best: float | None) -> list[str]:
    """A production planner's overhead, its peak against the budget, and its distance from the best."""
    overhead = run["overhead_pct"]
    if pd.isna(overhead):
        return ["", "", ""]
    peak, budget = run.get("peak"), run.get("budget")
    if pd.isna(peak) or pd.isna(budget) or not budget:
        against = ""
    elif peak <= budget:
        against = f"fits ({100 * peak / budget:.1f}% of it)"
    else:
        over = 100 * (peak / budget - 1)
        against = f"**over by {over:.1f}%**" if over >= 0.05 else f"**over by {over:.3f}%**"
    distance = "" if best is None or not run["ok"] else f"{overhead - best:+.3f}"
    return [f"{overhead:+.3f}%", against, distance]


def _beside(runs: pd.DataFrame, best: float | None) -> str:
    """A portfolio's overhead beside the best method's: '; auto +1.23% (=)' or '(+0.05)'."""
    parts = []
    for label, overhead in zip(runs["label"], runs["overhead_pct"]):
        distance = "" if best is None else " (=)" if overhead <= best + 0.01 else f" ({overhead - best:+.2f})"
        parts.append(f"{label} {overhead:+.2f}%{distance}")
    return "".join(f"; {p}" for p in parts)


def finding_section(frame: pd.DataFrame) -> str | None:
    """Input order against any order: is rematerialization needed, and how far is each from the bound?

    Shown when the results hold runs that may leave the input order (`Method.input_order` ``"free"``:
    ``reorder``, ``moccasin`` with ``order=free``) or any-order bounds.

    Parameters
    ----------
    frame : pandas.DataFrame
        A results table with a ``label`` and an ``ok`` column (`labels`, `succeeded`).

    Returns
    -------
    str or None
        Markdown; None when no run may leave the input order and none has an any-order bound.
    """
    frame = frame.assign(input_order=_input_order(frame))
    if not (frame["input_order"] == "free").any() and frame["lower_bound_any_order"].isna().all():
        return None
    ok = frame[frame["ok"] & frame["overhead_pct"].notna()]
    rows = []
    no_remat, proven, total, remat_needed = 0, 0, 0, 0
    for graph, budget, at in each_instance(frame):
        total += 1
        good = rows_at(ok, graph, budget)
        staged = good[good["input_order"] == "kept"]  # input-order stages: the file's order, kept
        best_staged = staged["overhead_pct"].min() if len(staged) else None
        best_any = good["overhead_pct"].min() if len(good) else None
        bound = at["lower_bound_any_order"].dropna()
        base = at["baseline_duration"].dropna()
        bound_pct = (100 * (float(bound.max()) / float(base.iloc[0]) - 1)
                     if len(bound) and len(base) and float(base.iloc[0]) else None)
        # reorder never recomputes: a schedule of it is an order that fits, and it is infeasible only when it
        # is proven (the any-order bound's prefix cuts, or CP-SAT) that no order does.
        fits = bool((good["method"] == Reorder.name).any())
        needed = bool((at["method"].eq(Reorder.name) & at["status"].eq(Status.INFEASIBLE.value)).any())
        optimal = best_any is not None and bound_pct is not None and best_any <= bound_pct + 1e-9
        if fits:
            no_remat += 1
            verdict = "no rematerialization needed: an order fits at 0%"
        elif optimal:
            verdict = "proven optimal (best = bound)"
        elif at["lower_bound_any_order"].isna().all() and at["status"].eq(Status.INFEASIBLE.value).any():
            verdict = "no schedule fits (below the memory floor)"
        elif best_any is None:
            verdict = "open: no schedule found"
        else:
            verdict = f"open: gap {best_any - (bound_pct or 0):.3f} points"
        proven += int(optimal)
        if needed and best_any is not None:
            remat_needed += 1
            verdict = "rematerialization needed (no order fits, proven); " + verdict
        rows.append([graph, budget, cell(best_staged, "{:+.3f}"), cell(best_any, "{:+.3f}"),
                     cell(bound_pct, "{:+.3f}"), verdict])
    lead = (f"On {no_remat} of {total} graph-budget pairs another topological order fits the budget with "
            f"no recomputation at all (overhead 0%); on {remat_needed} it is proven that none does, so "
            f"rematerialization is needed; {proven} of {total} are proven optimal, their best "
            "schedule equal to the lower bound valid for every order (`remat-bench bound`). Input-order "
            "methods (checkmate, checkmate-lp, greedy, moccasin with its stages) cannot leave the file's "
            "order, so their overhead includes the cost of that order.")
    table = markdown_table(["graph", "budget", "best input-order overhead %", "best overhead % (any method)",
                    "any-order bound %", "finding"], rows)
    return lead + "\n\n" + table


def speed_section(frame: pd.DataFrame, progress: pd.DataFrame) -> str:
    """How fast each method gets there (`remat_bench.app.sweep.profiles.speed_summary`): per method and
    per graph size class, success rate, time to target, primal integral and time to a first schedule.

    Parameters
    ----------
    frame : pandas.DataFrame
        A results table with a ``label`` and an ``ok`` column (`labels`, `succeeded`).
    progress : pandas.DataFrame
        The folder's progress table (`remat_bench.app.sweep.profiles.load_progress`).

    Returns
    -------
    str
        Markdown.
    """
    from remat_bench.app.sweep.profiles import SIZE_CLASSES, size_class, speed_summary

    def table(runs: pd.DataFrame) -> str:
        summary = speed_summary(runs, progress, SPEED_TARGET_PCT, SPEED_SHIFT_S)
        rows = [[method, str(int(row["runs"])), cell(100 * row["success_rate"], "{:.0f}%"),
                 cell(row["time_to_target_sgm"], "{:.2f}"), cell(row["primal_integral"], "{:.3f}"),
                 cell(row["first_schedule_s"], "{:.2f}")] for method, row in summary.iterrows()]
        return markdown_table(["method", "runs", "success", "time to target (sgm, best = 1)", "primal integral",
                       "first schedule (s, median)"], rows)

    parts = [f"Time to target: the time a run first holds a schedule within {SPEED_TARGET_PCT:g}% of the best "
             "schedule any run found on the instance (graph and budget), from its progress (every improving "
             "schedule, scored by the simulator); its shifted geometric mean over the instances (shift "
             f"{SPEED_SHIFT_S:g} s, a run that never gets there charged its time limit), divided by the best "
             "method's, so that the best is 1. Primal integral: the integral over the time limit of the primal "
             "gap (1 without a schedule, then (duration - best) / duration; Berthold 2013), as a share of the "
             "limit: 0 is the best schedule at once, 1 nothing all along. Success: a schedule the simulator "
             "confirms within the budget.", "", table(frame)]
    classes = frame["nodes"].astype(float).map(size_class)
    if classes.nunique() > 1:
        for _, _, name in SIZE_CLASSES:
            if (classes == name).any():
                parts += ["", f"Graphs of {name}:", "", table(frame[classes == name])]
    return "\n".join(parts)


def graph_table(frame: pd.DataFrame) -> str:
    """One row per method and budget: status, overhead, peak, solve time, gap (and bounds where known).

    Parameters
    ----------
    frame : pandas.DataFrame
        The rows of one graph, with a ``label`` and an ``ok`` column (`labels`, `succeeded`).

    Returns
    -------
    str
        Markdown.
    """
    has_bound = frame["lower_bound_any_order"].notna().any()
    columns = ["method", "budget", "status", "overhead %", "peak (% of baseline)", "solve time s", "gap %"]
    if has_bound:
        columns.append("any-order bound (overhead %)")
    rows = []
    budgets = budget_order(frame)
    for budget in budgets:
        at = frame[frame["budget_text"] == budget]
        for label in dict.fromkeys(at["label"]):
            runs = at[at["label"] == label]
            best = runs.sort_values(["ok", "duration"], ascending=[False, True], kind="stable").iloc[0]
            if len(runs) == 1:
                proven = not pd.isna(best["proven_optimal"]) and bool(best["proven_optimal"])
                where = best.get("status_holds_for")
                in_space = isinstance(where, str) and where == "the method's space"
                status = str(best["status"]) + (" (proven)" if proven else " (in its space)" if in_space else "")
            else:
                status = f"{int(runs['ok'].sum())}/{len(runs)} ok ({', '.join(sorted(set(runs['status'])))})"
            peak = (100 * best["peak"] / best["baseline_peak"]
                    if cell(best["peak"]) != "-" and best["baseline_peak"] else None)
            row = [str(label), str(budget), status,
                   cell(best["overhead_pct"] if best["ok"] else None, "{:+.2f}"),
                   cell(peak, "{:.1f}"),
                   cell(runs["solve_time_s"].astype(float).median(), "{:.2f}"),
                   cell(best["gap_pct"] if best["ok"] else None, "{:.2f}")]
            if has_bound:
                bound = runs["lower_bound_any_order"].dropna()
                implied = (100 * (float(bound.max()) / float(best["baseline_duration"]) - 1)
                           if len(bound) and best["baseline_duration"] else None)
                row.append(cell(implied, "{:+.2f}"))
            rows.append(row)
    note = ("Where a method ran with several seeds or repeats, the row shows its best schedule and the median "
            "solve time. gap % is measured against the best bound known for every order. \"(proven)\": the "
            "schedule meets that bound, so no schedule is faster; \"(in its space)\": the method's own proof of "
            "optimal or infeasible, which holds only in the schedules it searches:" + _spaces(frame))
    return markdown_table(columns, rows) + "\n\n" + note


def _spaces(frame: pd.DataFrame) -> str:
    """Each method's search space, from the rows that recorded one (older results have none)."""
    if "space" not in frame:
        return " see `remat-bench methods NAME`."
    spaces = {str(label): str(space) for label, space in zip(frame["label"], frame["space"])
              if isinstance(space, str) and space}
    if not spaces:
        return " see `remat-bench methods NAME`."
    return "".join(f"\n- {label}: {space}" for label, space in spaces.items())


def _method_class(name: str) -> type[Method] | None:
    """The method registered as ``name``; None for a name of old results no longer registered (a plugin
    since removed), which then declares nothing."""
    try:
        return get_method(name)
    except MethodError:
        return None


def _production(frame: pd.DataFrame) -> pd.Series:
    """The rows of planners a training framework ships (`Method.production`)."""
    declared = {}
    for name in dict.fromkeys(frame["method"]):
        cls = _method_class(name)
        declared[name] = cls is not None and cls.production
    return frame["method"].map(declared).astype(bool)


def _input_order(frame: pd.DataFrame) -> pd.Series:
    """How each row's schedules stand to the input order, as its method declares for its parameters
    (`Method.input_order`): ``"kept"``, ``"free"`` or None."""
    texts = frame["params"].map(lambda text: text if isinstance(text, str) else "")
    declared: dict[tuple[str, str], str | None] = {}
    for name, text in dict.fromkeys(zip(frame["method"], texts)):
        cls = _method_class(name)
        declared[(name, text)] = None if cls is None else cls.input_order(_params(text))
    return pd.Series([declared[key] for key in zip(frame["method"], texts)], index=frame.index, dtype=object)


def _params(text: str) -> dict[str, Any]:
    """A row's parameters from their JSON text; none when it holds no object."""
    try:
        params = json.loads(text)
    except ValueError:
        return {}
    return params if isinstance(params, dict) else {}
