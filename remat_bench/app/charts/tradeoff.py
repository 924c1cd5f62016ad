"""The tradeoff chart: overhead against budget, one panel per graph.

Points are runs; the step line is the running minimum over budgets (a schedule that fits a budget fits
every larger one), so it shows the best overhead each method reached at or below each budget. Budgets
where a method found nothing are left empty, a budget where no method found anything says so, and so
does a panel where nothing was found, with how runs ended. A few values far above the rest end above the
axis, marked at its top edge with their value (`outlier_cap`), so that they do not flatten the others onto
zero. Where methods agree, points at one place are spread sideways in page units and identical series
share one line in alternating colours, named under the panel's title ("greedy = checkmate").
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.legend_handler import HandlerTuple
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from remat_bench.app.charts.common import (
    BOUND_EDGE,
    NOTE_COLOUR,
    TITLE_CHARS,
    ChartError,
    any_order_overheads,
    identical_groups,
    in_method_order,
    interleaved,
    label_order,
    labelled,
    legend_handles,
    method_style,
    spread_points,
)

# A panel's y axis stops above its ordinary values when a few are far off (greedy at +422% beside
# methods within 10%): at most this share of the points, each more than FAR times the largest value kept
# (and than FLOOR_PCT), are marked at the top edge with their value written.
OUTLIER_SHARE = 0.25
FAR = 3.0
FLOOR_PCT = 5.0
BOUND_BAND = "#b0b0b0"


def tradeoff_figure(frame: pd.DataFrame, title: str | None = None) -> Figure:
    """Overhead (%) against budget (fraction of the baseline peak), one panel per graph.

    Where methods meet, nothing is hidden: points at the same place are spread
    sideways by a few points (the data do not move: the spread is in page units),
    series that are identical throughout share one line in alternating colours
    and are named under the panel's title ("greedy = checkmate"), and a panel
    where no run found a schedule says so and how each method's runs ended.

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
        No run found a schedule at a fractional budget.
    """
    frame = labelled(frame)
    usable = frame[frame["ok"] & frame["budget_fraction"].notna() & frame["overhead_pct"].notna()]
    if usable.empty:
        raise ChartError("no run found a schedule at a fractional budget, so there is no tradeoff to draw")
    graphs = list(dict.fromkeys(frame.sort_values(["nodes", "graph"])["graph"]))
    cols = min(3, len(graphs))
    rows = math.ceil(len(graphs) / cols)
    fig = Figure(figsize=(5.2 * cols, 3.8 * rows + 0.8), layout="constrained")
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False)).ravel()
    order = label_order(frame)
    spread = identical = banded = clipped = False
    for ax, graph in zip(axes, graphs):
        mine = usable[usable["graph"] == graph]
        fractions = frame.loc[frame["graph"] == graph, "budget_fraction"].dropna()
        best = {}
        for label in order:
            runs = mine[mine["label"] == label]
            if not runs.empty:
                b = runs.groupby("budget_fraction")["overhead_pct"].min().sort_index()
                best[label] = (b.index.to_numpy(dtype=float), b.to_numpy(dtype=float))
        style = {label: method_style(mine.loc[mine["label"] == label, "method"].iloc[0]) for label in best}
        linestyle = {label: mine.loc[mine["label"] == label, "linestyle"].iloc[0] for label in best}
        top = outlier_cap(np.concatenate([y for _, y in best.values()]) if best else np.array([]))
        spread |= spread_points(ax, fig, best, {
            label: {"color": s["color"], "marker": s["marker"], "s": 22, "zorder": 3} for label, s in style.items()},
            top=top)
        groups = identical_groups(best)
        for group in groups:
            x, y = best[group[0]]
            running = np.minimum.accumulate(y)
            # Carry the last value to the largest budget of the panel: it still fits there.
            if len(fractions) and fractions.max() > x[-1]:
                x, running = np.append(x, fractions.max()), np.append(running, running[-1])
            interleaved(ax.step, (x, running), [style[label]["color"] for label in group], where="post",
                         linewidth=1.4, alpha=0.85, linestyle=linestyle[group[0]])
        banded |= _bound_band(ax, frame[frame["graph"] == graph])
        # Named under the panel's title, where the note cannot cover data.
        same = "; ".join(" = ".join(group) for group in groups if len(group) > 1)
        identical |= bool(same)
        if mine.empty:
            # A blank panel reads as a drawing fault: say that the runs ended without a schedule, and how.
            theirs = frame[frame["graph"] == graph]
            what = ("no schedule at a fractional budget" if theirs["ok"].any() else "no schedule within budget")
            ax.text(0.5, 0.5, f"{what}\n{_status_note(theirs)}", transform=ax.transAxes, ha="center",
                    va="center", fontsize=9, color=NOTE_COLOUR)
            ax.set_yticks([])  # no overhead was measured: an overhead scale would be made up
        else:
            _nothing_found_at(ax, sorted(set(fractions.astype(float)) - set(mine["budget_fraction"].astype(float))))
        if top is not None:
            clipped |= _clip_outliers(ax, best, style, top)
        nodes = frame.loc[frame["graph"] == graph, "nodes"].iloc[0]
        ax.set_title(panel_title(f"{graph} ({nodes} nodes)", f"{same}: identical" if same else None), fontsize=10)
        ax.set_xlabel("budget (fraction of the baseline peak)")
        ax.set_ylabel("overhead (% of baseline duration)")
        if len(fractions):
            pad = max(0.01, 0.03 * (fractions.max() - fractions.min()))
            ax.set_xlim(fractions.min() - pad, fractions.max() + pad)
        ax.grid(True, alpha=0.3)
    for ax in axes[len(graphs):]:
        ax.set_visible(False)
    notes = [*(["points at one budget that would cover one another are set side by side"] if spread else []),
             *(["identical series share one line in alternating colours"] if identical else []),
             *(["\u25b2: a value far above the others, marked at the top edge with its number"] if clipped else [])]
    handles: list[Any] = legend_handles(frame, [lab for lab in order if lab in set(usable["label"])])
    names = [h.get_label() for h in handles]
    if banded:
        handles.append((Patch(facecolor=BOUND_BAND, alpha=0.35, linewidth=0),
                        Line2D([], [], color=BOUND_EDGE, linestyle=":", linewidth=0.9)))
        names.append("any-order lower bound (dotted): no schedule can be in the grey band below it")
    fig.legend(handles, names, handler_map={tuple: HandlerTuple(ndivide=1, pad=0)}, loc="outside lower center",
               ncols=min(6, len(names)), fontsize=9, frameon=False, title="; ".join(notes) or None,
               title_fontsize=8)
    fig.suptitle(title or "Overhead against budget (line: best at or below each budget)")
    return fig


def _status_note(runs: pd.DataFrame) -> str:
    """Per method, how its runs ended: ``chen: 3 no_solution, 1 timeout``."""
    lines = []
    for method in in_method_order(dict.fromkeys(runs["method"])):
        counts = runs.loc[runs["method"] == method, "status"].fillna("unknown").value_counts(sort=True)
        lines.append(f"{method}: " + ", ".join(f"{n} {status}" for status, n in counts.items()))
    return "\n".join(lines)


def _bound_band(ax: Axes, runs: pd.DataFrame) -> bool:
    """Shade, under the schedules, the overheads no schedule can have: below the best any-order bound
    the runs computed at each budget. False when no run has one."""
    overhead = any_order_overheads(runs)
    fractions = runs.loc[overhead.index, "budget_fraction"]
    overhead = overhead[fractions.notna()]
    if overhead.empty:
        return False
    best = overhead.groupby(fractions[fractions.notna()].astype(float)).max().sort_index()
    x, y = best.index.to_numpy(dtype=float), best.to_numpy(dtype=float)
    # A bound at budget b holds for every budget up to b: it steps down to the right, "pre".
    ax.fill_between(x, np.minimum(0.0, y.min()), y, step="pre" if len(x) > 1 else None, color=BOUND_BAND,
                    alpha=0.35, linewidth=0, zorder=1)
    ax.step(x, y, where="pre", color=BOUND_EDGE, linewidth=0.9, linestyle=":", zorder=2)
    return True


def panel_title(name: str, note: str | None = None) -> str:
    """A panel's title: its name, then ``note`` wrapped to `TITLE_CHARS` so that it stays over its own panel.

    Parameters
    ----------
    name : str
        The panel's name, on the first line.
    note : str or None
        Said under it; None or empty for none.

    Returns
    -------
    str
    """
    if not note:
        return name
    return name + "\n" + textwrap.fill(note, TITLE_CHARS, break_on_hyphens=False)


def outlier_cap(values: np.ndarray) -> float | None:
    """The top of a y axis that leaves out a few values far above the others, or None to show them all.

    Sorted, the values are cut at the largest jump (ratio to the value below it, at least `FLOOR_PCT`) among
    the top `OUTLIER_SHARE` of them, if it exceeds `FAR`; the axis then ends a margin above the largest value
    kept, so those keep the height of the panel.

    Parameters
    ----------
    values : numpy.ndarray
        The panel's values (overheads, %); values that are not finite are left out.

    Returns
    -------
    float or None
        The top of the axis; None with fewer than three values, or no jump that large.
    """
    v = np.sort(np.asarray(values, dtype=float)[np.isfinite(values)])
    if len(v) < 3:
        return None
    cut, ratio = None, FAR
    for i in range(max(1, len(v) - max(1, int(len(v) * OUTLIER_SHARE))), len(v)):
        jump = v[i] / max(v[i - 1], FLOOR_PCT)
        if jump > ratio:
            cut, ratio = i, jump
    if cut is None:
        return None
    kept = float(v[cut - 1])
    return kept + max(0.3 * (kept - min(float(v[0]), 0.0)), 1.0)


def _clip_outliers(ax: Axes, best: dict[str, tuple[np.ndarray, np.ndarray]], style: dict[str, dict[str, str]],
                   top: float) -> bool:
    """End the y axis at ``top``; mark each point above it at the top edge, in its method's colour, with its value."""
    low = min(0.0, float(ax.dataLim.y0))  # the autoscaled bottom left room for the outliers' height
    ax.set_ylim(low - 0.05 * (top - low), top)
    stacked: dict[float, int] = {}
    marked = False
    for label, (x, y) in best.items():
        for xi, yi in zip(x, y):
            if yi <= top:
                continue
            below = stacked[float(xi)] = stacked.get(float(xi), -1) + 1  # several at one budget: one under another
            colour = style[label]["color"]
            ax.scatter([xi], [top], marker="^", s=40, color=colour, clip_on=False, zorder=5)
            ax.annotate(f"{yi:+.0f}%", (xi, top), textcoords="offset points", xytext=(6, -9 - 9 * below),
                        ha="left", va="center", fontsize=8, color=colour, annotation_clip=False)
            marked = True
    return marked


def _nothing_found_at(ax: Axes, fractions: Sequence[float]) -> None:
    """Say so at each budget of a panel where no method found a schedule (an empty column reads as missing data)."""
    for fraction in fractions:
        ax.annotate("no schedule found", (fraction, 0), xycoords=("data", "axes fraction"), textcoords="offset points",
                    xytext=(3, 6), rotation=90, ha="left", va="bottom", fontsize=8, color=NOTE_COLOUR,
                    bbox={"facecolor": "white", "alpha": 0.8, "linewidth": 0, "pad": 1})
