"""The time-to-best chart: the time until each run held its best schedule against the graph's size
(the Moccasin paper's Figure 6)."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from remat_bench.app.charts.common import ChartError, label_order, labelled, method_style, plain_log_axis


def best_held_at(points: pd.DataFrame) -> pd.Series:
    """Per run, the first time it held its best schedule (a run's last point repeats its best at its end).

    Parameters
    ----------
    points : pandas.DataFrame
        A progress table (`remat_bench.app.sweep.profiles.PROGRESS_COLUMNS`).

    Returns
    -------
    pandas.Series
        Seconds, indexed by ``run_id``.
    """
    held = points.dropna(subset=["duration"]).sort_values("time_s")
    best = held.groupby("run_id")["duration"].transform("min")
    return held[held["duration"] == best].groupby("run_id")["time_s"].first()


def time_to_best_figure(results: pd.DataFrame, points: pd.DataFrame, title: str | None = None) -> Figure:
    """The time until each run held its best schedule against the graph's number of nodes, log-log, one
    line per method through the median over the budgets (the Moccasin paper's Figure 6). A run that
    found no schedule has no point; its method's line stops there.

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
        No run with points found a schedule within its budget.
    """
    frame = labelled(results)
    last = best_held_at(points)
    runs = frame[frame["ok"] & frame["run_id"].isin(last.index)].assign(
        best_at=lambda f: f["run_id"].map(last).astype(float))
    if runs.empty:
        raise ChartError("no run recorded a schedule within its budget, so there is no time to its best")
    fig = Figure(figsize=(6.4, 4.6), layout="constrained")
    ax = fig.subplots()
    for label in label_order(runs):
        mine = runs[runs["label"] == label]
        style = method_style(mine["method"].iloc[0])
        ax.scatter(mine["nodes"].astype(float), mine["best_at"].clip(lower=1e-3), s=14, alpha=0.5,
                   color=style["color"], marker=style["marker"])
        median = mine.groupby("nodes")["best_at"].median().sort_index()
        ax.plot(median.index.astype(float), median.clip(lower=1e-3), color=style["color"],
                linestyle=mine["linestyle"].iloc[0], marker=style["marker"], label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    plain_log_axis(ax.xaxis)
    plain_log_axis(ax.yaxis)
    ax.set_xlabel("nodes (log)")
    ax.set_ylabel("time until the best schedule (s, log)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, frameon=False, title="points: each budget; lines: their median", title_fontsize=8)
    fig.suptitle(title or "Time until the best schedule, against graph size")
    return fig
