"""The prediction chart: the overhead a replay measured against the overhead the simulator modelled, one
point per replayed run (a sweep with ``replay:``).

A point's vertical bar is the 95% interval of its measured overhead where the replay computed one, else
the range of its paired overheads, min to max, drawn lighter; the legend says which bars are which. The
line y = x is a perfect prediction, and the grey band around it holds the points within 1 point of it.
Points at one modelled overhead whose bars would cover one another (one schedule replayed for two
methods) are set side by side in page units; the data do not move.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.transforms import offset_copy

from remat_bench.app.charts.common import (
    DODGE_PT,
    NEAR,
    NEUTRAL,
    NOTE_COLOUR,
    ChartError,
    label_order,
    labelled,
    legend_handles,
    method_style,
)

# Within this many points of the model a prediction counts as right (the grey band).
BAND_POINTS = 1.0
RANGE_ALPHA = 0.3  # the min-to-max bars, lighter than the 95% intervals
BAND_COLOUR = "#c8c8c8"


def numbers(frame: pd.DataFrame, column: str) -> np.ndarray:
    """``frame[column]`` as floats, NaN where missing; all NaN when the table has no such column (old results).

    Parameters
    ----------
    frame : pandas.DataFrame
        Rows of a results table.
    column : str
        A column name.

    Returns
    -------
    numpy.ndarray
    """
    if column not in frame:
        return np.full(len(frame), np.nan)
    return pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=float, na_value=np.nan)


def prediction_figure(frame: pd.DataFrame, title: str | None = None) -> Figure:
    """Measured overhead (%) against modelled overhead (%), a point per replayed run, with y = x.

    Bars: the 95% interval of the measured overhead (``measured_overhead_low_pct`` to
    ``measured_overhead_high_pct``) where there is one; else the min to max of the paired overheads,
    lighter. Both axes share one range, so that y = x is the diagonal; the band of +-1 point around it is
    shaded. The title gives the median |measured - modelled| and the number of runs drawn.

    Parameters
    ----------
    frame : pandas.DataFrame
        A results table (`remat_bench.app.sweep.results.load_table`) with the replay columns.
    title : str or None
        The figure's title; None for the chart's own.

    Returns
    -------
    Figure

    Raises
    ------
    ChartError
        No run was replayed with its overhead measured.
    """
    frame = labelled(frame)
    status = (frame["replay_status"].astype("string") if "replay_status" in frame
              else pd.Series(pd.NA, index=frame.index, dtype="string"))
    replayed = frame[(status == "measured").fillna(False).to_numpy(dtype=bool)]
    modelled, measured = numbers(replayed, "modelled_overhead_pct"), numbers(replayed, "measured_overhead_pct")
    drawn = replayed[np.isfinite(modelled) & np.isfinite(measured)]
    if drawn.empty:
        raise ChartError("no run was replayed with its overhead measured, so there is no prediction to set "
                         "against a measurement; add `replay:` to the sweep's config and run it again")
    x, y = numbers(drawn, "modelled_overhead_pct"), numbers(drawn, "measured_overhead_pct")
    low, high = numbers(drawn, "measured_overhead_low_pct"), numbers(drawn, "measured_overhead_high_pct")
    least, most = numbers(drawn, "measured_overhead_min_pct"), numbers(drawn, "measured_overhead_max_pct")
    interval = np.isfinite(low) & np.isfinite(high)
    ranged = ~interval & np.isfinite(least) & np.isfinite(most)
    bottom = np.where(interval, low, np.where(ranged, least, y))
    top = np.where(interval, high, np.where(ranged, most, y))

    fig = Figure(figsize=(7.8, 6.0), layout="constrained")
    ax = fig.subplots()
    values = np.concatenate([x, y, bottom, top])
    lo, hi = float(values.min()), float(values.max())
    pad = max(0.05 * (hi - lo), BAND_POINTS)
    lo, hi = lo - pad, hi + pad
    ax.fill_between([lo, hi], [lo - BAND_POINTS, hi - BAND_POINTS], [lo + BAND_POINTS, hi + BAND_POINTS],
                    color=BAND_COLOUR, alpha=0.5, linewidth=0, zorder=0)
    ax.plot([lo, hi], [lo, hi], color=NEUTRAL, linestyle="--", linewidth=1, zorder=1)

    labels = drawn["label"].astype(str).to_numpy()
    shift = _side_by_side(x, bottom, top, list(labels), label_order(drawn), NEAR * (hi - lo))
    for label in label_order(drawn):
        mine = labels == label
        first = drawn[mine].iloc[0]
        style, linestyle = method_style(str(first["method"])), first["linestyle"]
        for bars, alpha in ((interval, 1.0), (ranged, RANGE_ALPHA), (~interval & ~ranged, 1.0)):
            for dx in np.unique(shift[mine & bars]):
                pick = mine & bars & (shift == dx)
                container = ax.errorbar(
                    x[pick], y[pick], yerr=np.vstack([y[pick] - bottom[pick], top[pick] - y[pick]]),
                    fmt=style["marker"], color=style["color"], markersize=5, capsize=3, elinewidth=1.2,
                    ecolor=style["color"], zorder=3, label=f"_{label}",
                    transform=offset_copy(ax.transData, fig=fig, x=float(dx), y=0, units="points"))
                for line in container.lines[1]:
                    line.set_alpha(alpha)
                for collection in container.lines[2]:
                    collection.set_alpha(alpha)
                    collection.set_linestyle(linestyle)
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_aspect("equal", adjustable="box")
    ax.set_xlabel("modelled overhead (% of the baseline duration, simulated)")
    ax.set_ylabel("measured overhead (% of the baseline, median of the pairs)")
    ax.grid(True, alpha=0.3)

    errors = np.abs(y - x)
    handles = [
        *legend_handles(drawn, label_order(drawn)),
        Line2D([], [], color=NEUTRAL, linestyle="--", linewidth=1, label="measured = modelled"),
        Patch(facecolor=BAND_COLOUR, alpha=0.5, label=f"within \u00b1{BAND_POINTS:g} point of the model")]
    if interval.any():
        handles.append(Line2D([], [], color=NOTE_COLOUR, marker="|", markersize=12, linestyle="",
                              label="bar: 95% interval of the measured overhead"))
    if ranged.any():
        handles.append(Line2D([], [], color=NOTE_COLOUR, marker="|", markersize=12, linestyle="",
                              alpha=RANGE_ALPHA, label="light bar: min to max of the pairs\n(no 95% interval)"))
    failed = int((status == "failed").fillna(False).sum())
    notes = _notes(drawn, len(replayed) - len(drawn), failed, bool(np.any(shift)))
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False,
              title="\n".join("\u2022 " + note.replace("\n", "\n   ") for note in notes) or None,
              title_fontsize=8, alignment="left")
    ax.set_title(title or (f"Measured against modelled overhead\nmedian |measured - modelled| "
                           f"{float(np.median(errors)):.2f} points over {len(drawn)} replayed runs"), fontsize=10)
    return fig


def _side_by_side(x: np.ndarray, bottom: np.ndarray, top: np.ndarray, labels: Sequence[str], order: list[str],
                  near: float) -> np.ndarray:
    """Each point's sideways shift in page points: points at one modelled value whose bars (within
    ``near``) meet take slots `DODGE_PT` apart, in the legend's order of their labels."""
    shift = np.zeros(len(x))
    rank = {label: i for i, label in enumerate(order)}
    for value in np.unique(x):
        at = [int(i) for i in np.flatnonzero(x == value)]
        clusters: list[list[int]] = []
        reach = -math.inf
        for i in sorted(at, key=lambda i: (bottom[i], rank[labels[i]])):
            if clusters and bottom[i] <= reach + near:
                clusters[-1].append(i)
                reach = max(reach, float(top[i]))
            else:
                clusters.append([i])
                reach = float(top[i])
        for cluster in clusters:
            cluster.sort(key=lambda i: (rank[labels[i]], i))
            for slot, i in enumerate(cluster):
                shift[i] = (slot - (len(cluster) - 1) / 2) * DODGE_PT
    return shift


def _notes(drawn: pd.DataFrame, unmeasured: int, failed: int, spread: bool) -> list[str]:
    """What the legend's title says: the clocks the times were read off, the runs not drawn, the spreading."""
    notes = []
    if "timing_clock" in drawn:
        clocks = drawn["timing_clock"].dropna().astype(str)
        if len(clocks):
            notes.append("times: " + ", ".join(f"{clock} ({n} runs)" if clocks.nunique() > 1 else clock
                                               for clock, n in clocks.value_counts(sort=False).items()))
    if unmeasured:
        notes.append(f"{unmeasured} replayed without a baseline\n(no overhead measured): not drawn")
    if failed:
        notes.append(f"{failed} replay{'s' if failed != 1 else ''} failed: not drawn")
    if spread:
        notes.append("points at one modelled overhead whose bars\nwould cover one another are set side by side")
    return notes
