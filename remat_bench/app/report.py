"""A Markdown report of a results folder: summary per method, best method per budget, charts, per-graph tables.

The report is plain Markdown (GitHub-flavoured tables) with the charts as
images beside it, linked relatively, so the report folder can be moved or
committed as it is. Aggregates follow qpbenchmark (`remat_bench.app.sweep.results`):
success rate, and shifted geometric means of overhead (shift 1 point, over
successful runs) and solve time (shift 1 s, over applicable runs, with a run
that gave no answer, neither a schedule within budget nor a proof that none
fits, counted at its time limit).

Bounds are shown generically: where runs carry ``lower_bound_any_order`` (a
bound valid for every schedule), the per-graph table shows it as the overhead
it implies; a method that only computes bounds or reorders (``bound``,
``reorder``) is a method like any other here.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
from pathlib import Path

import pandas as pd

from remat_bench.app.sweep.profiles import load_progress
from remat_bench.app.sweep.results import (
    OVERHEAD_SHIFT_PCT,
    TIME_SHIFT_S,
    MethodSummary,
    labels,
    load_table,
    schedules_at,
    skipped_note,
    succeeded,
    summarize,
)
from remat_bench.core.errors import GraphError, RematBenchError, ScheduleError
from remat_bench.core.files import atomic_write_text
from remat_bench.core.outcome import Status
from remat_bench.core.provenance import CostSource, cost_source, mixed_sources

MAX_GRAPH_CHARTS = 12


def _cell(value: object, fmt: str = "{}") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return "-"
    try:
        if pd.isna(value):
            return "-"
    except (TypeError, ValueError):
        pass
    return fmt.format(value)


def _table(columns: list[str], rows: list[list[str]]) -> str:
    def clean(text: str) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    lines += ["| " + " | ".join(clean(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _link(target: Path, report: Path) -> str:
    return Path(os.path.relpath(target, report.parent)).as_posix()


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
                     _cell(s.overhead_sgm, "{:.2f}"), _cell(s.solve_time_sgm, "{:.2f}")])
    return _table(["method", "runs", "success rate", "timeouts", "failures", "overhead % (sgm)",
                   "solve time s (sgm)"], rows) + (
        f"\n\nSuccess means a schedule within budget (status optimal or feasible); runs answered "
        f"`unsupported` (the method does not apply to the graph) are left out. sgm is the shifted geometric "
        f"mean exp(mean(log(x + s))) - s: of overhead over the method's successful runs with s = "
        f"{OVERHEAD_SHIFT_PCT:g} percentage point, and of solve time over its applicable runs with s = "
        f"{TIME_SHIFT_S:g} s, a run without an answer (neither a schedule within budget nor a proof that none "
        "fits, `infeasible`) counted at its time limit. Failures are "
        "errors, out-of-memory, over-budget schedules and timeouts."
    )


# Methods that run other methods (a portfolio): ranked apart from the methods they run.
PORTFOLIOS = ("auto",)


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
    ok_all = frame[frame["ok"] & frame["overhead_pct"].notna()]
    portfolio = ok_all[ok_all["method"].isin(PORTFOLIOS)]
    ok = ok_all[~ok_all["method"].isin(PORTFOLIOS)]
    budgets = _budget_order(frame)
    rows: list[list[str]] = []
    wins: dict[str, dict[str, int]] = {b: {} for b in budgets}
    for graph in dict.fromkeys(frame["graph"]):
        row = [graph]
        for budget in budgets:
            runs = ok[(ok["graph"] == graph) & (ok["budget_text"] == budget)]
            if frame[(frame["graph"] == graph) & (frame["budget_text"] == budget)].empty:
                row.append("")
                continue
            beside = _beside(portfolio[(portfolio["graph"] == graph) & (portfolio["budget_text"] == budget)],
                             None if runs.empty else runs["overhead_pct"].min())
            if runs.empty:
                row.append("none found" + beside)
                continue
            best = runs["overhead_pct"].min()
            tied = list(dict.fromkeys(runs.loc[runs["overhead_pct"] <= best + 1e-9, "label"]))
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
            " A portfolio (auto) is not ranked with the methods it runs: its overhead follows the best "
            "method's, with its distance from it in points (= when within 0.01 point).")
    return _table(["graph", *[f"budget {b}" for b in budgets]], rows) + (
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
    budgets = _budget_order(frame)
    rows = []
    for graph in dict.fromkeys(frame["graph"]):
        for budget in budgets:
            runs = frame[(frame["graph"] == graph) & (frame["budget_text"] == budget)]
            if runs.empty:
                continue
            bound = _best_bound_pct(runs)
            ok = runs[runs["ok"] & runs["overhead_pct"].notna()]
            if ok.empty:
                best, who = None, "none found"
            else:
                best = float(ok["overhead_pct"].min())
                who = ", ".join(dict.fromkeys(ok.loc[ok["overhead_pct"] <= best + 1e-9, "label"]))
            gap = None if best is None or bound is None else best - bound
            proven = "yes" if gap is not None and gap <= 1e-9 else ""
            rows.append([graph, budget, _cell(best, "{:+.3f}%"), _cell(bound, "{:+.3f}%"),
                         _cell(gap, "{:.3f}"), proven, who])
    return _table(["graph", "budget", "best schedule", "best bound", "gap (points)", "proven optimal",
                   "found by"], rows) + (
        "\n\nThe best schedule is the least overhead any run found within the budget; the best bound is "
        "the highest any-order lower bound a run computed (valid for every schedule, in any order and with "
        "any recomputation). Where the gap is zero the schedule is optimal among all schedules.")


# The planners practitioners run today (issue "The planners users actually run"): PyTorch's memory
# budget (run for real, and its knapsack idea on any training graph), DTR's online eviction, and
# the rule policies of training frameworks. The report sets them beside the best schedule and bound.
PRODUCTION = ("torch-budget", "knapsack", "dtr", "policy")


def production_section(frame: pd.DataFrame) -> str | None:
    """Per graph and budget, each production planner's overhead and peak beside the best schedule any other
    method found and the best any-order bound; where a planner's schedule exceeds its budget, by how much.

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
    mine = frame[frame["method"].isin(PRODUCTION)]
    if mine.empty:
        return None
    left_out = mine[mine["status"].isin([Status.UNSUPPORTED.value, Status.INFEASIBLE.value])]
    mine = mine[~mine.index.isin(left_out.index)]
    others = frame[frame["ok"] & frame["overhead_pct"].notna()]
    rows = []
    for graph in dict.fromkeys(mine["graph"]):
        for budget in _budget_order(frame):
            runs = mine[(mine["graph"] == graph) & (mine["budget_text"] == budget)]
            if runs.empty:
                continue
            every = frame[(frame["graph"] == graph) & (frame["budget_text"] == budget)]
            bound = _best_bound_pct(every)
            best_runs = others[(others["graph"] == graph) & (others["budget_text"] == budget)]
            best = None if best_runs.empty else float(best_runs["overhead_pct"].min())
            who = "" if best is None else ", ".join(
                dict.fromkeys(best_runs.loc[best_runs["overhead_pct"] <= best + 1e-9, "label"]))
            for _, run in runs.iterrows():
                rows.append([graph, budget, run["label"], str(run["status"]), *_planner_cells(run, best),
                             "" if best is None else f"{best:+.3f}% ({who})", _cell(bound, "{:+.3f}%")])
    skipped = ""
    if not left_out.empty:
        skipped = (f" Left out: {len(left_out)} runs answered `unsupported` (the planner does not apply to the "
                   "graph: torch-budget and policy need a PyTorch import) or `infeasible` (the budget is below "
                   "what any schedule needs).")
    return _table(["graph", "budget", "planner", "status", "overhead", "peak against the budget",
                   "points above the best", "best schedule (by)", "best bound"], rows) + (
        "\n\nEach planner's schedule as the shared simulator scores it. A planner that cannot fit the budget "
        "still shows its schedule's overhead and how far its simulated peak exceeds the budget (a rule policy "
        "does not look at the budget; PyTorch's knob is searched for the fastest plan that fits). The best "
        "schedule is the least overhead any run found within the budget (auto, a planner, or any other "
        "method); the best bound holds for every schedule." + skipped)


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
    for graph in dict.fromkeys(replayed["graph"]):
        for budget in _budget_order(frame):
            at = replayed[(replayed["graph"] == graph) & (replayed["budget_text"] == budget)]
            if at.empty:
                continue
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
    table = _table(["graph", "budget", "method", "simulated peak", "measured peak", "peak error %",
                    "modelled overhead %", "measured overhead % (min to max)", "overhead error (points)"], rows)
    agreement = _table(["graph", "budget", "methods", "Kendall tau"], ranks)
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
        return [_cell(run["peak"], "{:,.0f}"), f"replay failed: {run['replay_message']}", "", "", "", ""]
    measured = run["measured_overhead_pct"]
    spread = ("" if pd.isna(measured) else
              f"{measured:+.2f} ({run['measured_overhead_min_pct']:+.2f} to {run['measured_overhead_max_pct']:+.2f})")
    error = None if pd.isna(measured) else measured - run["modelled_overhead_pct"]
    within = run["measured_within_budget"]
    over = " **above the budget**" if not pd.isna(within) and not within else ""
    # Peaks in bytes (only PyTorch graphs are replayed).
    return [_cell(run["peak"], "{:,.0f}"), _cell(run["measured_peak"], "{:,.0f}") + over,
            _cell(run["peak_error_pct"], "{:+.3f}"), _cell(run["modelled_overhead_pct"], "{:+.2f}"),
            spread or "not measured", _cell(error, "{:+.2f}")]


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


# Methods whose schedules keep the input order's first computations (input-order stages).
STAGED_METHODS = ("checkmate", "checkmate-lp", "greedy")


def _staged(frame: pd.DataFrame) -> pd.Series:
    """Rows whose schedule space keeps the input order (stage-based formulations and greedy)."""
    staged = frame["method"].isin(STAGED_METHODS)
    moccasin = frame["method"] == "moccasin"
    free = frame["params"].astype(str).str.contains('"order": ?"free"', regex=True)
    return staged | (moccasin & ~free)


def finding_section(frame: pd.DataFrame) -> str | None:
    """Input order against any order: is rematerialization needed, and how far is each from the bound?

    Shown when the results hold runs that may leave the input order (``reorder``,
    ``moccasin`` with ``order=free``) or any-order bounds.

    Parameters
    ----------
    frame : pandas.DataFrame
        A results table with a ``label`` and an ``ok`` column (`labels`, `succeeded`).

    Returns
    -------
    str or None
        Markdown; None when no run may leave the input order and none has an any-order bound.
    """
    any_order = (frame["method"] == "reorder") | (
        (frame["method"] == "moccasin") & ~_staged(frame))
    if not any_order.any() and frame["lower_bound_any_order"].isna().all():
        return None
    ok = frame[frame["ok"] & frame["overhead_pct"].notna()]
    rows = []
    no_remat, proven, total, remat_needed = 0, 0, 0, 0
    for graph in dict.fromkeys(frame["graph"]):
        for budget in _budget_order(frame):
            at = frame[(frame["graph"] == graph) & (frame["budget_text"] == budget)]
            if at.empty:
                continue
            total += 1
            good = ok[(ok["graph"] == graph) & (ok["budget_text"] == budget)]
            staged = good[_staged(good)]
            best_staged = staged["overhead_pct"].min() if len(staged) else None
            best_any = good["overhead_pct"].min() if len(good) else None
            bound = at["lower_bound_any_order"].dropna()
            base = at["baseline_duration"].dropna()
            bound_pct = (100 * (float(bound.max()) / float(base.iloc[0]) - 1)
                         if len(bound) and len(base) and float(base.iloc[0]) else None)
            reorder = good[good["method"] == "reorder"]
            # reorder is infeasible only when proven (the any-order bound's prefix cuts, or CP-SAT).
            needed = bool((at["method"].eq("reorder") & at["status"].eq(Status.INFEASIBLE.value)).any())
            if len(reorder):
                no_remat += 1
                verdict = "no rematerialization needed: an order fits at 0%"
            elif best_any is not None and bound_pct is not None and best_any <= bound_pct + 1e-9:
                verdict = "proven optimal (best = bound)"
            elif at["lower_bound_any_order"].isna().all() and at["status"].eq(Status.INFEASIBLE.value).any():
                verdict = "no schedule fits (below the memory floor)"
            elif best_any is None:
                verdict = "open: no schedule found"
            else:
                verdict = f"open: gap {best_any - (bound_pct or 0):.3f} points"
            if best_any is not None and bound_pct is not None and best_any <= bound_pct + 1e-9:
                proven += 1
            if needed and best_any is not None:
                remat_needed += 1
                verdict = "rematerialization needed (no order fits, proven); " + verdict
            rows.append([graph, budget, _cell(best_staged, "{:+.3f}"), _cell(best_any, "{:+.3f}"),
                         _cell(bound_pct, "{:+.3f}"), verdict])
    lead = (f"On {no_remat} of {total} graph-budget pairs another topological order fits the budget with "
            f"no recomputation at all (overhead 0%); on {remat_needed} it is proven that none does, so "
            f"rematerialization is needed; {proven} of {total} are proven optimal, their best "
            "schedule equal to the lower bound valid for every order (`remat-bench bound`). Input-order "
            "methods (checkmate, checkmate-lp, greedy, moccasin with its stages) cannot leave the file's "
            "order, so their overhead includes the cost of that order.")
    table = _table(["graph", "budget", "best input-order overhead %", "best overhead % (any method)",
                    "any-order bound %", "finding"], rows)
    return lead + "\n\n" + table


def _budget_order(frame: pd.DataFrame) -> list[str]:
    first = frame.drop_duplicates("budget_text")
    key = first["budget_fraction"].astype(float).fillna(-1.0)
    return list(first.assign(key=key).sort_values("key", ascending=False, kind="stable")["budget_text"])


def _spaces(frame: pd.DataFrame) -> str:
    """Each method's search space, from the rows that recorded one (older results have none)."""
    if "space" not in frame:
        return " see `remat-bench methods NAME`."
    spaces = {str(label): str(space) for label, space in zip(frame["label"], frame["space"])
              if isinstance(space, str) and space}
    if not spaces:
        return " see `remat-bench methods NAME`."
    return "".join(f"\n- {label}: {space}" for label, space in spaces.items())


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
    budgets = _budget_order(frame)
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
                    if _cell(best["peak"]) != "-" and best["baseline_peak"] else None)
            row = [str(label), str(budget), status,
                   _cell(best["overhead_pct"] if best["ok"] else None, "{:+.2f}"),
                   _cell(peak, "{:.1f}"),
                   _cell(runs["solve_time_s"].astype(float).median(), "{:.2f}"),
                   _cell(best["gap_pct"] if best["ok"] else None, "{:.2f}")]
            if has_bound:
                bound = runs["lower_bound_any_order"].dropna()
                implied = (100 * (float(bound.max()) / float(best["baseline_duration"]) - 1)
                           if len(bound) and best["baseline_duration"] else None)
                row.append(_cell(implied, "{:+.2f}"))
            rows.append(row)
    note = ("Where a method ran with several seeds or repeats, the row shows its best schedule and the median "
            "solve time. gap % is measured against the best bound known for every order. \"(proven)\": the "
            "schedule meets that bound, so no schedule is faster; \"(in its space)\": the method's own proof of "
            "optimal or infeasible, which holds only in the schedules it searches:" + _spaces(frame))
    return _table(columns, rows) + "\n\n" + note


def write_report(results: str | Path, path: str | Path, title: str | None = None,
                 table: pd.DataFrame | None = None) -> Path:
    """Write the Markdown report of the results folder ``results`` to ``path``, charts beside it.

    ``table`` is the folder's table when the caller has read it already (`load_table`).

    Parameters
    ----------
    results : str or Path
        The results folder.
    path : str or Path
        The report, a ``.md`` file; its charts go in ``<stem>-figures`` beside it.
    title : str or None
        The report's heading; None for the sweep's name (its config's ``name``, else the folder's).
    table : pandas.DataFrame or None
        The folder's table; None reads it.

    Returns
    -------
    Path
        ``path``.

    Raises
    ------
    RematBenchError
        ``path`` does not end in ``.md``, or the folder holds no results (or none that can be read).
    OutputError
        The report or a chart cannot be written.
    """
    from remat_bench import __version__
    from remat_bench.app.charts.common import ChartError, save
    from remat_bench.app.charts.kinds import KINDS

    results, path = Path(results), Path(path)
    if path.suffix.lower() != ".md":
        raise RematBenchError(f"{path}: the report is Markdown; give a file name ending in .md")
    table = load_table(results) if table is None else table
    if table.empty:
        skipped = skipped_note(table)
        raise RematBenchError(f"{results}: the results hold no runs yet" + (f" that can be read: {skipped}"
                                                                             if skipped else ""))
    frame = table.assign(label=labels(table), ok=succeeded(table))
    figures = path.parent / f"{path.stem}-figures"
    name = title or _sweep_name(results)

    parts = [f"# {name}", ""]
    hosts = ", ".join(sorted(set(table["host"].dropna())))
    versions = _versions(table)
    parts.append(
        f"{len(table)} runs of {table['method'].nunique()} methods on {table['graph'].nunique()} graphs, "
        f"{int(frame['ok'].sum())} of them with a schedule within budget; time limit "
        f"{', '.join(f'{t:g} s' for t in sorted(table['time_limit'].dropna().unique()))} per run. "
        f"Results from `{results}`, on {hosts or 'an unknown host'}; {versions}. Report written "
        f"{_dt.datetime.now().strftime('%Y-%m-%d %H:%M')} by remat-bench {__version__}."
        + (f" Note: {skipped}." if (skipped := skipped_note(table)) else ""))
    costs = cost_sources(results, table)
    if (mixed := mixed_sources(costs)) is not None:
        parts.append(f"\nNote: {mixed}.")
    parts += ["", "## Summary per method", "", summary_section(summarize(table)), ""]
    parts += ["## Best method at each budget", "", best_section(frame), ""]
    gaps = gap_section(frame)
    if gaps is not None:
        parts += ["## Best schedule, best bound and the gap", "", gaps, ""]
    production = production_section(frame)
    if production is not None:
        parts += ["## What you use today against the optimum", "", production, ""]
    prediction = prediction_section(frame)
    if prediction is not None:
        parts += ["## Prediction against measurement", "", prediction, ""]
    finding = finding_section(frame)
    if finding is not None:
        parts += ["## Input order or any order: is rematerialization needed?", "", finding, ""]
    progress = load_progress(results)
    if progress is not None and not progress.empty:
        parts += ["## How fast each method gets there", "", speed_section(frame, progress), ""]

    chart_lines = []
    with_progress = progress is not None and not progress.empty
    for kind, wanted in (("tradeoff", frame["budget_fraction"].nunique() >= 2),
                         ("scaling", frame["nodes"].nunique() >= 2),
                         ("progress", with_progress),
                         ("profile", with_progress)):
        if not wanted:
            continue
        try:
            written = save(KINDS[kind].draw(table, progress, within_pct=SPEED_TARGET_PCT), figures / f"{kind}.png")
        except ChartError as exc:
            chart_lines.append(f"No {kind} chart: {exc}.")
            continue
        chart_lines.append(f"![{kind}]({_link(written, path)})")
    if chart_lines:
        parts += ["## Charts", ""]
        for line in chart_lines:
            parts += [line, ""]

    for i, graph in enumerate(dict.fromkeys(frame["graph"])):
        mine = frame[frame["graph"] == graph]
        first = mine.iloc[0]
        parts += [f"## {graph}", "",
                  f"{first['nodes']} nodes, {first['edges']} edges; "
                  f"baseline peak {_cell(first['baseline_peak'], '{:,}')}, "
                  f"baseline duration {_cell(first['baseline_duration'], '{:,}')}; sha256 "
                  f"`{str(first['graph_sha256'])[:12]}`.", ""]
        if costs.get(graph) is not None:
            parts += [f"Costs: {costs[graph].describe()}.", ""]  # type: ignore[union-attr]
        if i < MAX_GRAPH_CHARTS:
            parts += _graph_charts(results, table, graph, figures, path, i)
        parts += [graph_table(mine), ""]
    atomic_write_text(path, "\n".join(parts).rstrip() + "\n")
    return path


SPEED_TARGET_PCT = 1.0  # "within 1% of the best schedule any run found on the instance"
SPEED_SHIFT_S = 10.0  # qpbenchmark's shift for times


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
        rows = [[method, str(int(row["runs"])), _cell(100 * row["success_rate"], "{:.0f}%"),
                 _cell(row["time_to_target_sgm"], "{:.2f}"), _cell(row["primal_integral"], "{:.3f}"),
                 _cell(row["first_schedule_s"], "{:.2f}")] for method, row in summary.iterrows()]
        return _table(["method", "runs", "success", "time to target (sgm, best = 1)", "primal integral",
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


def _graph_charts(results: Path, table: pd.DataFrame, graph: str, figures: Path, report: Path,
                  i: int) -> list[str]:
    """The memory timeline of every method at the budget most methods met, and the best one's intervals."""
    from remat_bench.app.charts.common import save
    from remat_bench.app.charts.intervals import intervals_at_budget
    from remat_bench.app.charts.timeline import timeline_at_budget
    from remat_bench.core.files import safe_name  # long names shortened with a digest

    try:
        chosen = schedules_at(results, table[table["graph"] == graph], graph=graph)
    except (GraphError, ScheduleError):
        raise  # a file the results name cannot be read: the report says which, and stops
    except RematBenchError:
        return ["No schedule within budget was found on this graph, so there is no timeline.", ""]
    stem = f"{i:02d}-{safe_name(''.join(c if c.isalnum() or c in '-_' else '_' for c in graph))}"
    lines = []
    timeline = save(timeline_at_budget(chosen, graph)[0], figures / f"{stem}-timeline.png")
    lines += [f"Memory at every step at budget {chosen.budget_text}, one line per method:", "",
              f"![timeline of {graph}]({_link(timeline, report)})", ""]
    intervals, [best_label] = intervals_at_budget(chosen, graph)
    drawn = save(intervals, figures / f"{stem}-intervals.png")
    lines += [f"When each value is held in the shortest of these schedules ({best_label}):", "",
              f"![intervals of {graph}]({_link(drawn, report)})", ""]
    return lines


def cost_sources(results: str | Path, table: pd.DataFrame) -> dict[str, CostSource | None]:
    """How each graph of a results table got its costs (`remat_bench.core.provenance`), read from its file.

    Parameters
    ----------
    results : str or Path
        The results folder (graph paths in the table are relative to it).
    table : pandas.DataFrame
        Its results table (`load_table`).

    Returns
    -------
    dict
        Graph name -> its cost source; None for a graph whose file cannot be read any more.
    """
    from remat_bench.core.files import check_regular
    from remat_bench.core.graph_io import load_graph

    sources: dict[str, CostSource | None] = {}
    for graph, where in table.groupby("graph", sort=False)["graph_path"].first().items():
        path = Path(str(where))
        path = path if path.is_absolute() else Path(results) / path
        try:
            check_regular(path)  # a row's path is data: a device or a pipe there is not read
            sources[str(graph)] = cost_source(load_graph(path))
        except (RematBenchError, OSError):
            sources[str(graph)] = None
    return sources


def _sweep_name(results: Path) -> str:
    import yaml

    from remat_bench.app.sweep.document import MAX_CONFIG_BYTES
    from remat_bench.core.files import read_regular

    config = results / "config.yaml"
    try:
        data = yaml.safe_load(read_regular(config, limit=MAX_CONFIG_BYTES).decode("utf-8"))
        if isinstance(data, dict) and isinstance(data.get("name"), str) and data["name"]:
            return f"Sweep report: {data['name']}"
    except (RematBenchError, UnicodeDecodeError, yaml.YAMLError):
        pass  # the title is then the folder's name
    return f"Sweep report: {results.name}"


def _versions(table: pd.DataFrame) -> str:
    parts = []
    for column, name in (("python_version", "Python"), ("ortools_version", "OR-Tools"),
                         ("highspy_version", "highspy"), ("pulp_version", "PuLP")):
        values = sorted(set(table[column].dropna()))
        if values:
            parts.append(f"{name} {', '.join(values)}")
    return ", ".join(parts) or "versions unknown"
