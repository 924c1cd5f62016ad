"""The scaling chart: solve time against graph size, log-log (ticks as plain numbers), with each time
limit dashed and runs killed at the limit marked with a cross; lines join graphs of one family only
(`graph_family`)."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from remat_bench.app.charts.common import (
    NOTE_COLOUR,
    ChartError,
    identical_groups,
    interleaved,
    label_order,
    labelled,
    legend_handles,
    method_style,
    plain_log_axis,
    spread_points,
)


def graph_family(name: str) -> str:
    """What a graph's name says of its kind, its numbers left out: ``chain-16`` and ``chain-64`` are ``chain-#``.

    Parameters
    ----------
    name : str
        A graph's name.

    Returns
    -------
    str
        ``name`` with every number (``16``, ``0.5``) replaced by ``#``.
    """
    return re.sub(r"\d+(?:\.\d+)?", "#", name)


def scaling_figure(frame: pd.DataFrame, title: str | None = None) -> Figure:
    """Solve time (s) against nodes, log-log; time limits dashed, runs killed at the limit crossed.

    A line joins a method's medians over the graphs of one family (`graph_family`: names alike but for
    their numbers), never across families, whose times need not follow one trend. Coinciding points
    and identical series are drawn as in `tradeoff_figure`.

    Parameters
    ----------
    frame : pandas.DataFrame
        A results table (`remat_bench.app.sweep.results.load_table`).
    title : str or None
        The figure's title; None for the chart's own.

    Returns
    -------
    Figure

    Raises
    ------
    ChartError
        No run applied (every run ``unsupported``).
    """
    frame = labelled(frame)
    frame = frame[frame["status"] != "unsupported"]
    if frame.empty or frame["nodes"].nunique() < 1:
        raise ChartError("no applicable runs to draw solve times for")
    frame = frame.assign(family=frame["graph"].astype(str).map(graph_family))
    fig = Figure(figsize=(7.5, 5.2), layout="constrained")
    ax = fig.subplots()
    order = label_order(frame)
    medians: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = {}  # (label, family): one line
    killed: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    ended: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    style: dict[str, dict[str, str]] = {}
    linestyle: dict[str, str] = {}
    for label in order:
        runs = frame[frame["label"] == label]
        style[label], linestyle[label] = method_style(runs["method"].iloc[0]), runs["linestyle"].iloc[0]
        ok = runs[runs["ok"] & runs["solve_time_s"].notna()]
        for family, theirs in ok.groupby("family", sort=False):
            median = theirs.groupby("nodes")["solve_time_s"].median().sort_index()
            medians[(label, str(family))] = (median.index.to_numpy(dtype=float),
                                             np.maximum(median.to_numpy(dtype=float), 1e-4))
        timeouts = runs.loc[runs["status"] == "timeout", ["nodes", "time_limit"]].astype(float).drop_duplicates()
        if not timeouts.empty:
            killed[label] = (timeouts["nodes"].to_numpy(), timeouts["time_limit"].to_numpy())
        other = runs[~runs["ok"] & (runs["status"] != "timeout") & runs["solve_time_s"].notna()]
        other = other[["nodes", "solve_time_s"]].astype(float).drop_duplicates()
        if not other.empty:
            ended[label] = (other["nodes"].to_numpy(), np.maximum(other["solve_time_s"].to_numpy(), 1e-4))
    groups = identical_groups(medians)
    for group in groups:
        if len(medians[group[0]][0]) > 1:  # one graph of a family: its point, no line
            interleaved(ax.plot, medians[group[0]], [style[label]["color"] for label, _ in group],
                         linestyle=linestyle[group[0][0]])
    spread = spread_points(ax, fig, medians, {
        key: {"color": style[key[0]]["color"], "marker": style[key[0]]["marker"], "s": 25, "zorder": 3}
        for key in medians}, log=True)
    spread |= spread_points(ax, fig, killed, {
        label: {"color": s["color"], "marker": "x", "s": 60, "zorder": 4} for label, s in style.items()}, log=True)
    spread |= spread_points(ax, fig, ended, {
        label: {"facecolors": "none", "edgecolors": s["color"], "marker": s["marker"], "s": 30, "zorder": 3}
        for label, s in style.items()}, log=True)
    for limit in sorted(frame["time_limit"].dropna().unique()):
        ax.axhline(float(limit), color=NOTE_COLOUR, linestyle="--", linewidth=1)
        ax.annotate(f"time limit {float(limit):g} s", (0.01, float(limit)), xycoords=("axes fraction", "data"),
                    textcoords="offset points", xytext=(0, 3), fontsize=8, color=NOTE_COLOUR)
    ax.set_xscale("log")
    ax.set_yscale("log")
    plain_log_axis(ax.xaxis)
    plain_log_axis(ax.yaxis)
    ax.set_xlabel("graph size (nodes)")
    ax.set_ylabel("solve time (s)")
    ax.grid(True, which="both", alpha=0.25)
    handles = [
        *legend_handles(frame, order),
        Line2D([], [], color=NOTE_COLOUR, marker="x", linestyle="", label="killed at the time limit"),
        Line2D([], [], color=NOTE_COLOUR, marker="o", markerfacecolor="none", linestyle="",
               label="ended without a schedule")]
    families = list(dict.fromkeys(frame["family"]))
    notes = [*dict.fromkeys(f"{' = '.join(label for label, _ in group)}: identical"
                            for group in groups if len(group) > 1),
             *(["points that would cover one\nanother are set side by side"] if spread else []),
             *(["a line joins the graphs of one family\n(names alike but for their numbers)"]
               if len(families) > 1 else [])]
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False,
              title="\n".join("\u2022 " + note.replace("\n", "\n   ") for note in notes) or None, title_fontsize=8,
              alignment="left")
    ax.set_title(title or "Solve time against graph size (median of successful runs)")
    return fig
