"""The profile chart: how fast each method gets within a target of the best schedule of each instance
(the Dolan-Moré performance profile, and the share of instances reached by each time)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from remat_bench.app.charts.common import ChartError, label_order, labelled, method_style, plain_log_axis


def profile_figure(results: pd.DataFrame, points: pd.DataFrame, within_pct: float = 1.0,
                   title: str | None = None) -> Figure:
    """How fast each method gets within ``within_pct`` percent of the best schedule any run found on an
    instance (a graph at a budget). Left, the Dolan-Moré performance profile: the share of instances
    a method reaches that within tau times the fastest method's time. Right, the share of instances
    it has reached it by each time (`remat_bench.app.sweep.profiles`).

    Parameters
    ----------
    results : pandas.DataFrame
        A results table (`remat_bench.app.sweep.results.load_table`).
    points : pandas.DataFrame
        A progress table (`remat_bench.app.sweep.profiles.PROGRESS_COLUMNS`).
    within_pct : float
        The target: within this many percent of the instance's best duration.
    title : str or None
        The figure's title; None for the chart's own.

    Returns
    -------
    Figure

    Raises
    ------
    ChartError
        No run reached the target.
    """
    from remat_bench.app.sweep.profiles import performance_profile, times_to_target

    frame = labelled(results)
    times = times_to_target(frame, points, within_pct, frame["label"])
    if times.empty or not np.isfinite(times.to_numpy(dtype=float)).any():
        raise ChartError(f"no run reached within {within_pct:g}% of the best schedule, so there is no profile")
    finite = times.to_numpy(dtype=float)
    finite = finite[np.isfinite(finite)]
    ratios_top = float(np.nanmax(finite / max(finite.min(), 1e-3))) if len(finite) else 10.0
    taus = np.geomspace(1.0, max(2.0, ratios_top * 1.2), 200)
    prof = performance_profile(times, taus)
    fig = Figure(figsize=(11, 4.4), layout="constrained")
    left, right = fig.subplots(1, 2)
    moments = np.geomspace(max(1e-3, finite.min() / 2), finite.max() * 1.5, 200)
    for label in label_order(frame.drop_duplicates("label")):
        if label not in times.columns:
            continue
        row = frame[frame["label"] == label].iloc[0]
        style = method_style(row["method"])
        left.step(taus, prof[label].to_numpy(), where="post", color=style["color"], linestyle=row["linestyle"],
                  label=label)
        reached = [(times[label].to_numpy(dtype=float) <= t).mean() for t in moments]
        right.step(moments, reached, where="post", color=style["color"], linestyle=row["linestyle"])
    for ax, xlabel in ((left, "tau: times the fastest method's time (log)"), (right, "solve time (s, log)")):
        ax.set_xscale("log")
        plain_log_axis(ax.xaxis)
        ax.set_xlabel(xlabel)
        ax.set_ylim(-0.02, 1.02)
        ax.grid(True, alpha=0.3)
    left.set_ylabel(f"share of instances within {within_pct:g}% of the best")
    right.set_ylabel("share of instances")
    left.set_title("performance profile (Dolan and Moré)", fontsize=10)
    right.set_title(f"instances within {within_pct:g}% of the best by each time", fontsize=10)
    fig.legend(loc="outside lower center", ncols=min(6, len(times.columns)), fontsize=9, frameon=False)
    fig.suptitle(title or f"How fast each method gets within {within_pct:g}% of the best schedule "
                 f"({len(times)} instances)")
    return fig
