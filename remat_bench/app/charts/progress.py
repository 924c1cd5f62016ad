"""The progress chart: overhead of the best schedule held against solve time, a panel per graph and
budget (the Moccasin paper's Figure 5), from a sweep's progress table."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from remat_bench.app.charts.common import (
    BOUND_EDGE,
    NOTE_COLOUR,
    TITLE_CHARS,
    ChartError,
    any_order_overheads,
    label_order,
    labelled,
    legend_handles,
    method_style,
    plain_log_axis,
)


def progress_figure(results: pd.DataFrame, points: pd.DataFrame, title: str | None = None) -> Figure:
    """Overhead of the best schedule held against solve time, one panel per graph (rows) and budget
    (columns), one line per method: the Moccasin paper's Figure 5 ("solve progress plots").

    ``points`` is a progress table (`remat_bench.app.sweep.profiles.PROGRESS_COLUMNS`): every
    improving schedule of a run, scored by the simulator, with its time since the run started (the
    any-order bound's time included, and Moccasin's phase 1: the paper shifted its curves by that
    time, here it is in them). Each line ends at its run's end; the any-order bound of the instance
    is dashed, grey; a method's own bound over time (CP-SAT's, HiGHS's: in its space, on its model's
    objective before the clean-up) is dotted, in its colour.

    Parameters
    ----------
    results : pandas.DataFrame
        A results table (`remat_bench.app.sweep.results.load_table`).
    points : pandas.DataFrame
        A progress table (`remat_bench.app.sweep.profiles.PROGRESS_COLUMNS`).
    title : str or None
        The figure's title; None for the chart's own.

    Returns
    -------
    Figure

    Raises
    ------
    ChartError
        No run of ``results`` has points in ``points``.
    """
    frame = labelled(results)
    runs = frame[frame["run_id"].isin(set(points["run_id"]))]
    if runs.empty:
        raise ChartError("no run recorded its progress, so there is no progress to draw")
    graphs = list(dict.fromkeys(runs.sort_values(["nodes", "graph"])["graph"]))
    budgets = sorted(set(runs["budget_text"]), key=lambda b: -float(b) if _is_number(b) else 0.0)
    fig = Figure(figsize=(3.6 * len(budgets), 2.9 * len(graphs) + 0.9), layout="constrained")
    axes = fig.subplots(len(graphs), len(budgets), squeeze=False)
    order = label_order(runs)
    by_run = {run: g.sort_values("time_s") for run, g in points.groupby("run_id", sort=False)}
    drawn = _Drawn()
    for r, graph in enumerate(graphs):
        for c, budget in enumerate(budgets):
            ax = axes[r][c]
            mine = runs[(runs["graph"] == graph) & (runs["budget_text"] == budget)]
            _panel(ax, mine, order, by_run, drawn)
            nodes = mine["nodes"].iloc[0] if not mine.empty else ""
            ax.set_title(textwrap.fill(f"{graph} ({nodes} nodes) at {budget}", TITLE_CHARS - 12,
                                       break_on_hyphens=False), fontsize=8)
            if r == len(graphs) - 1:
                ax.set_xlabel("solve time (s, log)")
            if c == 0:
                ax.set_ylabel("overhead (%)")
    handles: list[Any] = legend_handles(runs, [lab for lab in order if lab in drawn.shown])
    names = [h.get_label() for h in handles]
    if drawn.bound:
        handles.append(Line2D([], [], color=BOUND_EDGE, linestyle="--", linewidth=0.9))
        names.append("any-order lower bound: no schedule is faster")
    if drawn.own:
        handles.append(Line2D([], [], color=BOUND_EDGE, linestyle=":", linewidth=0.9))
        names.append("a method's own bound (its space, its model's objective)")
    if drawn.cut:
        handles.append(Line2D([], [], color="none"))
        names.append("first schedules far above the final ones run off the top")
    fig.legend(handles, names, loc="outside lower center", ncols=min(6, len(names)), fontsize=9, frameon=False)
    fig.suptitle(title or "Overhead of the best schedule held, against solve time")
    return fig


@dataclass
class _Drawn:
    """What the panels drew, for the legend to name."""

    shown: set[str] = field(default_factory=set)  # labels with a line
    bound: bool = False  # an any-order bound
    own: bool = False  # a method's own bound
    cut: bool = False  # an axis that ends below first schedules


def _panel(ax: Axes, mine: pd.DataFrame, order: list[str], by_run: dict[str, pd.DataFrame], drawn: _Drawn) -> None:
    """One graph at one budget: each run of ``mine`` (in label ``order``) with its points in ``by_run``."""
    bound = _bound_overhead(mine)
    finals: list[float] = []
    for label in order:
        for _, run in mine[mine["label"] == label].iterrows():
            every = by_run.get(run["run_id"])
            final = None if every is None else _run_line(ax, run, every, bound, drawn)
            if final is not None:
                finals.append(final)
                drawn.shown.add(label)
    if bound is not None:
        ax.axhline(bound, color=BOUND_EDGE, linestyle="--", linewidth=0.9)
        drawn.bound = True
    if finals:
        # Early schedules far above where the runs end (a heuristic's +400%) would flatten the
        # curves that matter: the axis ends a margin above the worst final answer.
        low = min(min(finals), 0.0 if bound is None else bound)
        top = max(finals) + max(1.0 * (max(finals) - low), 0.5)
        if any(bool((pts["overhead_pct"] > top).any()) for pts in (by_run.get(i) for i in mine["run_id"])
               if pts is not None):
            ax.set_ylim(low - 0.05 * (top - low), top)
            drawn.cut = True
    if mine.empty or not any(run_id in by_run for run_id in mine["run_id"]):
        ax.text(0.5, 0.5, "no schedule recorded", transform=ax.transAxes, ha="center", va="center",
                fontsize=9, color=NOTE_COLOUR)
    ax.set_xscale("log")
    plain_log_axis(ax.xaxis)
    ax.grid(True, alpha=0.3)


def _run_line(ax: Axes, run: pd.Series, every: pd.DataFrame, bound: float | None, drawn: _Drawn) -> float | None:
    """Draw one run's best overhead held over time, to the run's end, and its own bound where it recorded one;
    its last overhead, or None when it held no schedule."""
    pts = every.dropna(subset=["duration"])
    if pts.empty:
        return None
    x = pts["time_s"].to_numpy(dtype=float)
    y = pts["overhead_pct"].to_numpy(dtype=float)
    ran = float(run["solve_time_s"] or 0) + float(run.get("bound_time_s") or 0)
    end = max(ran, x[-1])
    style = method_style(run["method"])
    own = every.dropna(subset=["bound"]) if "bound" in every else every.iloc[:0]
    base = float(run["baseline_duration"] or 0)
    if not own.empty and base > 0:
        bx = own["time_s"].to_numpy(dtype=float)
        # No bound is below the any-order bound (nor below no recomputation at all).
        by = np.maximum(100 * (own["bound"].to_numpy(dtype=float) / base - 1), 0.0 if bound is None else bound)
        ax.step(np.append(bx, end), np.append(by, by[-1]), where="post", color=style["color"],
                linestyle=":", linewidth=0.9, alpha=0.7)
        drawn.own = True
    ax.step(np.append(x, end), np.append(y, y[-1]), where="post", color=style["color"],
            linestyle=run["linestyle"], linewidth=1.3)
    ax.plot(x, y, linestyle="none", marker=style["marker"], markersize=3, color=style["color"])
    return float(y[-1])


def _bound_overhead(runs: pd.DataFrame) -> float | None:
    """The best any-order bound the runs of one instance computed, as an overhead (%), or None."""
    overheads = any_order_overheads(runs)
    return None if overheads.empty else float(overheads.max())


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
