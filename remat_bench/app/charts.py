"""Charts of sweep results and schedules: tradeoff, scaling, timeline, intervals.

Every chart is a plain function that takes a results table or simulated
schedules and returns a `matplotlib.figure.Figure` (``tradeoff_figure`` ...),
and a thin one of the chart's name writes it as PNG or SVG (or PDF) by the
file's suffix. The figures are built with `Figure` directly, never through
pyplot's global state, so they render headless (Agg) and from threads.

Where methods agree, no series hides another: identical series share one line
in alternating colours and are named ("greedy = checkmate"), points at
(nearly) one place are spread sideways in page units, and distinct timeline
lines are stacked a line width apart; each chart says which it did.

Each method keeps one colour and one marker in every chart: the methods of
docs/design.md's table take fixed places, and any other registered method (a
plugin) follows in `remat_bench.app.catalog.method_names` order. Variants of one
method (a parameter grid) share its colour and differ by line style.

- `tradeoff`: overhead against budget, one panel per graph. Points are runs;
  the step line is the running minimum over budgets (a schedule that fits a
  budget fits every larger one), so it shows the best overhead each method
  reached at or below each budget. Budgets where a method found nothing are
  left empty, a budget where no method found anything says so, and so does a
  panel where nothing was found, with how runs ended. A few values far above
  the rest end above the axis, marked at its top edge with their value
  (`outlier_cap`), so that they do not flatten the others onto zero.
- `scaling`: solve time against graph size, log-log (ticks as plain numbers),
  with each time limit dashed and runs killed at the limit marked with a cross;
  lines join graphs of one family only (`graph_family`).
- `timeline`: memory at every step of one or more schedules of one graph,
  with the budget (black, dashed: no method's colour) and the baseline peak;
  schedules of different budgets each get their own budget line, and
  schedules of very different lengths are drawn against their progress.
- `intervals`: when each value is resident over one schedule, one row per
  node, as in Figure 3 of the Moccasin paper (Bartan et al., ICML 2023):
  first computations in blue, recomputations in orange.
"""

from __future__ import annotations

import difflib
import hashlib
import io
import math
import re
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd
from matplotlib import ticker
from matplotlib.axes import Axes
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.legend_handler import HandlerTuple
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.transforms import offset_copy

from remat_bench.core.baseline import baseline
from remat_bench.core.errors import RematBenchError
from remat_bench.core.files import atomic_write_bytes
from remat_bench.core.graph import Graph, Number
from remat_bench.core.schedule import COMPUTE, Schedule
from remat_bench.core.simulate import simulate

KINDS = ("tradeoff", "scaling", "timeline", "intervals", "progress", "profile", "time-to-best")
FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}
# docs/design.md section 6, in its order: these places never move, so colours stay comparable across versions.
DESIGN_METHODS = ("none", "reorder", "chen", "greedy", "checkmate", "checkmate-lp", "moccasin", "kusumoto",
                  "twremat", "fenghuang", "monet", "bound")
PALETTE = ("#7f7f7f", "#8c564b", "#1f77b4", "#ff7f0e", "#2ca02c", "#98df8a", "#d62728", "#9467bd",
           "#e377c2", "#17becf", "#bcbd22", "#000000", "#aec7e8", "#ffbb78", "#c5b0d5", "#f7b6d2",
           "#c49c94", "#dbdb8d", "#9edae5", "#393b79")
MARKERS = ("o", "s", "^", "v", "D", "P", "X", "*", "h", "<", ">", "p")
LINESTYLES = ("-", "--", ":", "-.")
# Reserved for lines that are not a method's (the budget): only the bound, which never draws a series, shares it.
NEUTRAL = "#000000"
# Series that coincide: points at (nearly) one place are spread this far apart sideways (a marker's width),
# timeline lines that differ are drawn this far apart vertically (one line width, so equal stretches
# lie side by side), and identical series alternate colours along dashes this long (in line widths).
DODGE_PT = 4.5
NEAR = 0.02  # points closer than this fraction of the y span overlap on the page, markers being about that tall
LINE_GAP_PT = 1.2
DASH = 3.0
# A tradeoff panel's y axis stops above its ordinary values when a few are far off (greedy at +422% beside
# methods within 10%): at most this share of the points, each more than FAR times the largest value kept
# (and than FLOOR_PCT), are marked at the top edge with their value written.
OUTLIER_SHARE = 0.25
FAR = 3.0
FLOOR_PCT = 5.0
# A panel's title lines are wrapped to this many characters, so that neighbouring titles do not meet.
TITLE_CHARS = 52
# Timelines whose lengths differ more than this factor are drawn against each schedule's progress (% of its
# steps): on a shared step axis the short one would be squeezed into a sliver.
STEPS_RATIO = 2.0
BOUND_BAND = "#b0b0b0"
BOUND_EDGE = "#707070"
NOTE_COLOUR = "#555555"
# Intervals show one schedule, so they use two fixed colours rather than the method's.
FIRST_COLOUR = "#3b75af"
RECOMPUTE_COLOUR = "#e8702a"


K = TypeVar("K")


class ChartError(RematBenchError):
    """Nothing to draw, or an output the chart cannot be written to."""


def method_style(method: str) -> dict[str, str]:
    """The colour and marker of ``method``, the same in every chart.

    Parameters
    ----------
    method : str
        A method name, registered or not (a method of old results keeps a stable place too).

    Returns
    -------
    dict
        ``color`` and ``marker``, as matplotlib's keywords.
    """
    from remat_bench.app.catalog import method_names

    order = list(DESIGN_METHODS) + [m for m in method_names() if m not in DESIGN_METHODS]
    if method in order:
        slot = order.index(method)
    else:  # a method no longer registered (old results): a stable place after the known ones
        slot = len(order) + int(hashlib.sha1(method.encode()).hexdigest(), 16) % len(PALETTE)
    colour = PALETTE[slot % len(PALETTE)]
    if colour == NEUTRAL and method != "bound":  # a plugin that wrapped around: the budget line's black stays unique
        colour = PALETTE[(slot + 1) % len(PALETTE)]
    return {"color": colour, "marker": MARKERS[slot % len(MARKERS)]}


def image_format(path: str | Path) -> str:
    """The format ``path``'s suffix names, or a ChartError saying what is wrong with it as an image path.

    Parameters
    ----------
    path : str or Path
        Where a chart is to be written.

    Returns
    -------
    str
        ``png``, ``svg`` or ``pdf``.

    Raises
    ------
    ChartError
        ``path`` is a folder, or its suffix is none of `FORMATS`.
    """
    path = Path(path)
    if path.is_dir():
        raise ChartError(f"{path} is a folder; give an image file ending in {', '.join(FORMATS)}")
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ChartError(f"{path}: charts are written as {', '.join(FORMATS)}; choose one of those suffixes")
    return fmt


def save(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` atomically in the format its suffix names.

    Parameters
    ----------
    fig : Figure
    path : str or Path
        The image file; its suffix (``.png``, ``.svg``, ``.pdf``) names the format.

    Returns
    -------
    Path
        ``path``.

    Raises
    ------
    ChartError
        ``path`` is a folder or has another suffix.
    OutputError
        ``path`` cannot be written.
    """
    path = Path(path)
    fmt = image_format(path)
    buffer = io.BytesIO()
    fig.savefig(buffer, format=fmt, dpi=150, bbox_inches="tight")
    atomic_write_bytes(path, buffer.getvalue())
    return path


def _labelled(frame: pd.DataFrame) -> pd.DataFrame:
    from remat_bench.app.sweep.results import labels, succeeded

    frame = frame.assign(label=labels(frame), ok=succeeded(frame))
    # Variants of one method get line styles in the order they appear.
    variant = {}
    for _, group in frame.groupby("method", sort=False):
        for i, label in enumerate(dict.fromkeys(group["label"])):
            variant[label] = LINESTYLES[i % len(LINESTYLES)]
    return frame.assign(linestyle=frame["label"].map(variant))


def _label_order(frame: pd.DataFrame) -> list[str]:
    first = frame.drop_duplicates("label")
    rank = {m: i for i, m in enumerate(DESIGN_METHODS)}
    return sorted(first["label"], key=lambda lab: (rank.get(lab.split(" (")[0], len(rank)), lab))


def _legend_handles(frame: pd.DataFrame, labels: Sequence[str]) -> list[Line2D]:
    handles = []
    for label in labels:
        row = frame[frame["label"] == label].iloc[0]
        style = method_style(row["method"])
        handles.append(Line2D([], [], color=style["color"], marker=style["marker"], linestyle=row["linestyle"],
                              label=label))
    return handles


def _interleaved(draw: Any, args: Sequence[Any], colours: Sequence[str], **kw: Any) -> list[Line2D]:
    """``draw(*args)`` (ax.step, ax.plot) once per colour, the colours taking turns along the one path.

    Each copy is dashed with one dash on and the others' dashes off, shifted by one
    dash per copy, so identical series show every colour instead of the last one
    drawn covering the rest. One colour: a plain line.
    """
    if len(colours) == 1:
        return list(draw(*args, color=colours[0], **kw))
    k = len(colours)
    lines: list[Line2D] = []
    for i, colour in enumerate(colours):
        # Copy i is on over [i, i+1) dashes of every k: its pattern starts (k - i) dashes in.
        style = (((k - i) % k) * DASH, (DASH, (k - 1) * DASH))
        lines.extend(draw(*args, color=colour, **{**kw, "linestyle": style}))
    return lines


def _identical_groups(series: dict[K, tuple[np.ndarray, np.ndarray]]) -> list[list[K]]:
    """The keys of ``series`` grouped by equal (x, y) arrays, in the order given."""
    groups: list[list[K]] = []
    for key, (x, y) in series.items():
        for group in groups:
            gx, gy = series[group[0]]
            if np.array_equal(gx, x) and np.array_equal(gy, y):
                group.append(key)
                break
        else:
            groups.append([key])
    return groups


def _status_note(runs: pd.DataFrame) -> str:
    """Per method, how its runs ended: ``chen: 3 no_solution, 1 timeout``."""
    lines = []
    for method in sorted(dict.fromkeys(runs["method"]), key=lambda m: (_design_rank(m), m)):
        counts = runs.loc[runs["method"] == method, "status"].fillna("unknown").value_counts(sort=True)
        lines.append(f"{method}: " + ", ".join(f"{n} {status}" for status, n in counts.items()))
    return "\n".join(lines)


def _design_rank(method: str) -> int:
    return DESIGN_METHODS.index(method) if method in DESIGN_METHODS else len(DESIGN_METHODS)


# ---------------------------------------------------------------------- selection


def select_runs(frame: pd.DataFrame, folder: str | Path, graph: str | None = None,
                methods: Sequence[str] = (), need_schedule: bool = False) -> pd.DataFrame:
    """The rows of ``graph`` and ``methods`` (method names or labels), or a ChartError naming what is missing.

    An unknown name is named with its nearest match among those in the results
    (a typo is the usual cause) and the list of what is there. With
    ``need_schedule`` (timeline, intervals), also refuse a choice none of whose
    runs saved a schedule, saying how those runs ended.

    Parameters
    ----------
    frame : pandas.DataFrame
        A results table (`remat_bench.app.sweep.results.load_table`).
    folder : str or Path
        The results folder, as messages name it.
    graph : str or None
        A graph as `graph_in_results` takes it; None for every graph.
    methods : Sequence[str]
        Method names or labels (``moccasin (order=free)``); empty for every method.
    need_schedule : bool
        Refuse a choice none of whose runs saved a schedule within its budget.

    Returns
    -------
    pandas.DataFrame
        The rows chosen.

    Raises
    ------
    ChartError
        An unknown graph or method, or (with ``need_schedule``) no schedule to draw.
    """
    from remat_bench.app.sweep.results import labels, succeeded

    if graph is not None:
        graph = graph_in_results(frame, folder, graph)
    present = sorted(dict.fromkeys(frame["method"]), key=lambda m: (_design_rank(m), m))
    names = labels(frame)
    for method in methods:
        if method not in present and method not in set(names):
            known = [*present, *dict.fromkeys(n for n in names if n not in present)]
            raise ChartError(f"{folder}: no runs of method '{method}'{_did_you_mean(method, known)}; its methods "
                             f"are {', '.join(present)}")
    keep = pd.Series(True, index=frame.index)
    if graph is not None:
        keep &= frame["graph"] == graph
    if methods:
        keep &= frame["method"].isin(methods) | names.isin(methods)
    chosen = frame[keep]
    if need_schedule and methods:
        saved = succeeded(chosen) & chosen["schedule"].notna() if "schedule" in chosen else succeeded(chosen)
        if not saved.any():
            where = f" on graph '{graph}'" if graph is not None else ""
            ended = chosen["status"].fillna("unknown").value_counts()
            raise ChartError(f"{folder}: no run of {', '.join(methods)}{where} saved a schedule within its budget "
                             f"({', '.join(f'{n} {status}' for status, n in ended.items())})")
    return chosen


def graph_in_results(frame: pd.DataFrame, folder: str | Path, text: str) -> str:
    """The results' name of the graph ``text`` names, or a ChartError naming the graphs that are there.

    ``text`` is a name in the results, the file name (stem) of a graph the runs
    read, or anything else that names a graph (`remat_bench.app.graphs.find_graph`:
    a file, a shipped graph's file or declared name, ``paper:<name>``) whose hash
    is in the results.

    Parameters
    ----------
    frame : pandas.DataFrame
        A results table (`remat_bench.app.sweep.results.load_table`).
    folder : str or Path
        The results folder, as messages name it.
    text : str
        What the user gave.

    Returns
    -------
    str
        The graph's name as the ``graph`` column has it.

    Raises
    ------
    ChartError
        No graph of the results is the one ``text`` names.
    """
    graphs = list(dict.fromkeys(frame["graph"]))
    if text in graphs:
        return text
    if "graph_path" in frame:
        stems = {Path(str(p)).stem: name for p, name in zip(frame["graph_path"], frame["graph"])
                 if isinstance(p, str) and p}
        if text in stems:
            return stems[text]
    if "graph_sha256" in frame and (sha256 := _graph_hash(text)) is not None:
        named = frame.loc[frame["graph_sha256"] == sha256, "graph"]
        if len(named):
            return str(named.iloc[0])
    raise ChartError(f"{folder}: no graph named '{text}' in the results{_did_you_mean(text, graphs)}; "
                     f"they are {', '.join(graphs)}")


def _graph_hash(text: str) -> str | None:
    """The hash of the graph ``text`` names outside the results, or None when it names none."""
    from remat_bench.app.graphs import find_graph
    from remat_bench.core.files import check_regular
    from remat_bench.core.graph_io import load_graph

    try:
        path = find_graph(text)
        check_regular(path)  # --graph /dev/zero names no graph, and is not read
        return load_graph(path).sha256
    except RematBenchError:
        return None


def _did_you_mean(name: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


# ---------------------------------------------------------------------- tradeoff


def tradeoff(frame: pd.DataFrame, path: str | Path, title: str | None = None) -> Path:
    """Write `tradeoff_figure` to ``path``.

    Parameters
    ----------
    frame : pandas.DataFrame
        A results table (`remat_bench.app.sweep.results.load_table`).
    path : str or Path
        The image file; its suffix (``.png``, ``.svg``, ``.pdf``) names the format.
    title : str or None
        The figure's title; None for the chart's own.

    Returns
    -------
    Path
        ``path``.

    Raises
    ------
    ChartError
        Nothing to draw (as `tradeoff_figure` says), or ``path`` is a folder or has another suffix.
    OutputError
        ``path`` cannot be written.
    """
    return save(tradeoff_figure(frame, title), path)


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
    frame = _labelled(frame)
    usable = frame[frame["ok"] & frame["budget_fraction"].notna() & frame["overhead_pct"].notna()]
    if usable.empty:
        raise ChartError("no run found a schedule at a fractional budget, so there is no tradeoff to draw")
    graphs = list(dict.fromkeys(frame.sort_values(["nodes", "graph"])["graph"]))
    cols = min(3, len(graphs))
    rows = math.ceil(len(graphs) / cols)
    fig = Figure(figsize=(5.2 * cols, 3.8 * rows + 0.8), layout="constrained")
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False)).ravel()
    order = _label_order(frame)
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
        spread |= _spread_points(ax, fig, best, {
            label: {"color": s["color"], "marker": s["marker"], "s": 22, "zorder": 3} for label, s in style.items()},
            top=top)
        groups = _identical_groups(best)
        for group in groups:
            x, y = best[group[0]]
            running = np.minimum.accumulate(y)
            # Carry the last value to the largest budget of the panel: it still fits there.
            if len(fractions) and fractions.max() > x[-1]:
                x, running = np.append(x, fractions.max()), np.append(running, running[-1])
            _interleaved(ax.step, (x, running), [style[label]["color"] for label in group], where="post",
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
                    va="center", fontsize=9, color="#555555")
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
    handles: list[Any] = _legend_handles(frame, [lab for lab in order if lab in set(usable["label"])])
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


def _bound_band(ax: Axes, runs: pd.DataFrame) -> bool:
    """Shade, under the schedules, the overheads no schedule can have: below the best any-order bound
    the runs computed at each budget. False when no run has one."""
    if "lower_bound_any_order" not in runs:
        return False
    bounds = runs.dropna(subset=["lower_bound_any_order", "budget_fraction", "baseline_duration"])
    bounds = bounds[bounds["baseline_duration"] > 0]
    if bounds.empty:
        return False
    overhead = 100 * (bounds["lower_bound_any_order"].astype(float) / bounds["baseline_duration"].astype(float) - 1)
    best = overhead.groupby(bounds["budget_fraction"].astype(float)).max().sort_index()
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


def _spread_points(ax: Axes, fig: Figure, points: dict[K, tuple[np.ndarray, np.ndarray]],
                   scatter: dict[K, dict[str, Any]], log: bool = False, top: float | None = None) -> bool:
    """Scatter each key's points with its ``scatter`` keywords; True if any had to be spread.

    Points of one x (a budget, a graph size) whose y are within `NEAR` of the
    y span of all points in view (below ``top``; on a log scale with ``log``)
    would sit on one another on the page, so they are spread sideways,
    `DODGE_PT` apart in page units (the data stay put), in the order of ``points``.
    """
    entries = [(label, i, float(x[i]), float(y[i] if top is None else min(y[i], top)))
               for label, (x, y) in points.items() for i in range(len(x))]
    height = {(label, i): math.log10(max(yi, 1e-300)) if log else yi for label, i, _, yi in entries}
    span = (max(height.values()) - min(height.values())) if height else 0.0
    shift = {(label, i): 0.0 for label, i, _, _ in entries}
    for xi in {xi for _, _, xi, _ in entries}:
        column = sorted((height[(label, i)], n, (label, i)) for n, (label, i, x, _) in enumerate(entries) if x == xi)
        clusters: list[list[tuple[int, tuple[Any, int]]]] = []
        for k, (h, n, key) in enumerate(column):
            if k and h - column[k - 1][0] <= NEAR * span:
                clusters[-1].append((n, key))
            else:
                clusters.append([(n, key)])
        for cluster in clusters:
            # One slot per label, in the order given (not by height): a label's own points may share one.
            slots = list(dict.fromkeys(key[0] for _, key in sorted(cluster)))
            for _, key in cluster:
                shift[key] = (slots.index(key[0]) - (len(slots) - 1) / 2) * DODGE_PT
    for label, (x, y) in points.items():
        offsets = np.array([shift[(label, i)] for i in range(len(x))])
        # One scatter per shift: the shift is in points, applied after the data transform.
        for dx in np.unique(offsets):
            pick = offsets == dx
            ax.scatter(x[pick], y[pick], **scatter[label],
                       transform=offset_copy(ax.transData, fig=fig, x=float(dx), y=0, units="points"))
        # Shifted collections do not take part in autoscaling: give the axes the true data.
        ax.update_datalim(np.column_stack([x, y]))
    ax.autoscale_view()
    return any(shift.values())


# ---------------------------------------------------------------------- scaling


class PlainLogLocator(ticker.Locator):
    """Log-axis ticks at 1-2-5 (or 1..9, or 1) times powers of ten: the densest set with at most ``most`` in view.

    Matplotlib's default labels a log axis that spans less than a decade or two
    with minor ticks in scientific notation ("8x10^1 9x10^1 10^2"); these ticks
    are read as plain numbers instead (see `plain_number`).
    """

    def __init__(self, most: int = 7) -> None:
        self.most = most

    def __call__(self) -> Sequence[float]:
        assert self.axis is not None  # matplotlib sets it before asking for ticks
        vmin, vmax = self.axis.get_view_interval()
        return self.tick_values(vmin, vmax)

    def tick_values(self, vmin: float, vmax: float) -> Sequence[float]:
        """The ticks between ``vmin`` and ``vmax``.

        Parameters
        ----------
        vmin, vmax : float
            The axis' view interval, in either order.

        Returns
        -------
        Sequence[float]
            At most ``most`` ticks within the interval (a few plain linear steps where it is within
            one step of 1..9); empty when the interval has no positive, finite top.
        """
        vmin, vmax = sorted((float(vmin), float(vmax)))
        if not (vmax > 0 and math.isfinite(vmax)):
            return []
        vmin = max(vmin, vmax * 1e-12)  # a log axis has no zero
        decades = range(math.floor(math.log10(vmin)), math.ceil(math.log10(vmax)) + 1)
        ticks: list[float] = []
        for subs in ((1, 2, 3, 4, 5, 6, 7, 8, 9), (1, 2, 5), (1,)):
            ticks = [float(f"{s * 10.0 ** e:.12g}") for e in decades for s in subs]
            ticks = [t for t in ticks if vmin * (1 - 1e-9) <= t <= vmax * (1 + 1e-9)]
            if len(ticks) <= self.most:
                break
        else:  # very many decades: every second (third, ...) one
            ticks = ticks[::math.ceil(len(ticks) / self.most)]
        if len(ticks) < 2:  # within one step of 1..9 (say 81 to 89): plain linear steps
            ticks = [t for t in ticker.MaxNLocator(nbins=3).tick_values(vmin, vmax) if vmin <= t <= vmax and t > 0]
        return ticks


def plain_number(value: float, pos: int | None = None) -> str:
    """``1000``, ``50``, ``0.002``: no exponent, no trailing zeros.

    Parameters
    ----------
    value : float
        A tick's value (six significant digits are kept).
    pos : int or None
        The tick's position, as matplotlib's `FuncFormatter` passes it; not used.

    Returns
    -------
    str
    """
    return np.format_float_positional(float(f"{value:.6g}"), trim="-")


def _plain_log_axis(axis: Any) -> None:
    axis.set_major_locator(PlainLogLocator())
    axis.set_major_formatter(ticker.FuncFormatter(plain_number))
    axis.set_minor_formatter(ticker.NullFormatter())  # minor ticks stay as grid lines, unlabelled


def scaling(frame: pd.DataFrame, path: str | Path, title: str | None = None) -> Path:
    """Write `scaling_figure` to ``path``.

    Parameters
    ----------
    frame : pandas.DataFrame
        A results table (`remat_bench.app.sweep.results.load_table`).
    path : str or Path
        The image file; its suffix (``.png``, ``.svg``, ``.pdf``) names the format.
    title : str or None
        The figure's title; None for the chart's own.

    Returns
    -------
    Path
        ``path``.

    Raises
    ------
    ChartError
        Nothing to draw (as `scaling_figure` says), or ``path`` is a folder or has another suffix.
    OutputError
        ``path`` cannot be written.
    """
    return save(scaling_figure(frame, title), path)


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
    frame = _labelled(frame)
    frame = frame[frame["status"] != "unsupported"]
    if frame.empty or frame["nodes"].nunique() < 1:
        raise ChartError("no applicable runs to draw solve times for")
    frame = frame.assign(family=frame["graph"].astype(str).map(graph_family))
    fig = Figure(figsize=(7.5, 5.2), layout="constrained")
    ax = fig.subplots()
    order = _label_order(frame)
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
    groups = _identical_groups(medians)
    for group in groups:
        if len(medians[group[0]][0]) > 1:  # one graph of a family: its point, no line
            _interleaved(ax.plot, medians[group[0]], [style[label]["color"] for label, _ in group],
                         linestyle=linestyle[group[0][0]])
    spread = _spread_points(ax, fig, medians, {
        key: {"color": style[key[0]]["color"], "marker": style[key[0]]["marker"], "s": 25, "zorder": 3}
        for key in medians}, log=True)
    spread |= _spread_points(ax, fig, killed, {
        label: {"color": s["color"], "marker": "x", "s": 60, "zorder": 4} for label, s in style.items()}, log=True)
    spread |= _spread_points(ax, fig, ended, {
        label: {"facecolors": "none", "edgecolors": s["color"], "marker": s["marker"], "s": 30, "zorder": 3}
        for label, s in style.items()}, log=True)
    for limit in sorted(frame["time_limit"].dropna().unique()):
        ax.axhline(float(limit), color="#555555", linestyle="--", linewidth=1)
        ax.annotate(f"time limit {float(limit):g} s", (0.01, float(limit)), xycoords=("axes fraction", "data"),
                    textcoords="offset points", xytext=(0, 3), fontsize=8, color="#555555")
    ax.set_xscale("log")
    ax.set_yscale("log")
    _plain_log_axis(ax.xaxis)
    _plain_log_axis(ax.yaxis)
    ax.set_xlabel("graph size (nodes)")
    ax.set_ylabel("solve time (s)")
    ax.grid(True, which="both", alpha=0.25)
    handles = [
        *_legend_handles(frame, order),
        Line2D([], [], color="#555555", marker="x", linestyle="", label="killed at the time limit"),
        Line2D([], [], color="#555555", marker="o", markerfacecolor="none", linestyle="",
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


# ---------------------------------------------------------------------- timeline


def _memory_scale(graph: Graph, peak: Number) -> tuple[float, str]:
    """The factor memory amounts are divided by on the axis, and the unit they are then in ("" if none)."""
    unit = graph.units.get("memory", "")
    if unit != "bytes":
        return 1.0, unit
    for factor, name in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if peak >= 2 * factor:
            return float(factor), name
    return 1.0, "bytes"


def _amount(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def timeline(graph: Graph, schedules: Sequence[tuple[str, Schedule]], path: str | Path,
             budget: Number | None = None, title: str | None = None, *,
             budgets: Sequence[Number | None] | None = None, colour_each: bool = False) -> Path:
    """Write `timeline_figure` to ``path``.

    Parameters
    ----------
    graph : Graph
    schedules : Sequence[tuple[str, Schedule]]
        Each schedule of ``graph`` with its label.
    path : str or Path
        The image file; its suffix (``.png``, ``.svg``, ``.pdf``) names the format.
    budget, title, budgets, colour_each
        As `timeline_figure` takes them.

    Returns
    -------
    Path
        ``path``.

    Raises
    ------
    ChartError
        Nothing to draw (as `timeline_figure` says), or ``path`` is a folder or has another suffix.
    OutputError
        ``path`` cannot be written.
    """
    return save(timeline_figure(graph, schedules, budget, title, budgets=budgets, colour_each=colour_each), path)


def timeline_figure(graph: Graph, schedules: Sequence[tuple[str, Schedule]], budget: Number | None = None,
                    title: str | None = None, *, budgets: Sequence[Number | None] | None = None,
                    colour_each: bool = False) -> Figure:
    """Memory at every step of each schedule (label, schedule), overlaid, with the budget line.

    Schedules often share stretches of memory (their first steps, or all of it:
    greedy's schedule is checkmate's on a chain), and a line drawn later would
    hide the earlier one there. So schedules with the same memory at every step
    share one line in alternating colours, labelled "greedy = checkmate
    (identical)", and the distinct lines are drawn `LINE_GAP_PT` apart vertically
    (page units; the legend says how far that is in memory) so that equal
    stretches lie side by side. The budget is a black dashed line, a colour no
    method has.

    ``budgets`` gives each schedule its own budget (schedule files solved at
    different budgets): when they differ, each is a dashed line in the colour
    of its schedule, named after it. ``colour_each`` gives every schedule a
    colour of its own (files of one method) instead of its method's. Schedules
    whose lengths differ more than `STEPS_RATIO` times are drawn against their
    progress (% of their own steps), so that a short one spans the axis too.

    Parameters
    ----------
    graph : Graph
    schedules : Sequence[tuple[str, Schedule]]
        Each schedule of ``graph`` with its label (its method's name when the schedule names none).
    budget : Number or None
        One budget for every schedule, in ``graph``'s memory units; None for no budget line.
    title : str or None
        The figure's title; None for the chart's own.
    budgets : Sequence[Number or None] or None
        One budget per schedule, instead of ``budget``.
    colour_each : bool
        Give every schedule a colour of its own rather than its method's.

    Returns
    -------
    Figure

    Raises
    ------
    ChartError
        No schedule, or a schedule that is not valid on ``graph``.
    """
    if not schedules:
        raise ChartError(f"no schedule of graph '{graph.name}' to draw")
    if budgets is not None and (budget is not None or len(budgets) != len(schedules)):
        raise ValueError("give either one budget, or one budget per schedule")
    base = baseline(graph)
    sims = []
    for label, schedule in schedules:
        sim = simulate(graph, schedule)
        if not sim.valid:
            raise ChartError(f"the schedule '{label}' is not valid on graph '{graph.name}': {sim.violation}")
        sims.append((label, schedule, sim))
    own = list(budgets) if budgets is not None else [budget] * len(sims)
    if len({b for b in own if b is not None}) <= 1:  # one budget for all: the neutral line
        budget, own = next((b for b in own if b is not None), None), [None] * len(sims)
    top = max([base.peak, *(s.peak for _, _, s in sims), *(b for b in [budget, *own] if b is not None)])
    scale, unit = _memory_scale(graph, top)
    lengths = [max(sim.num_steps, 1) for _, _, sim in sims]
    progress = max(lengths) > STEPS_RATIO * min(lengths)
    fig = Figure(figsize=(9, 4.6), layout="constrained")
    ax = fig.subplots()
    # Keyed by position: two schedules may carry one label (two files of one method).
    series: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    colour = _timeline_colours([schedule.method or label for label, schedule, _ in sims], colour_each)
    linestyle: dict[int, str] = {}
    seen: dict[str, int] = {}
    for i, (label, schedule, sim) in enumerate(sims):
        method = schedule.method or label
        variant = seen[method] = seen.get(method, -1) + 1  # variants of one method: same colour, new line style
        linestyle[i] = "-" if colour_each else LINESTYLES[variant % len(LINESTYLES)]
        steps = np.arange(sim.num_steps + 1, dtype=float)
        if progress:
            steps *= 100 / lengths[i]
        series[i] = (steps, np.append(sim.step_memory, sim.step_memory[-1] if sim.num_steps else 0) / scale)
    groups = _identical_groups(series)
    handles: list[Any] = []
    names: list[str] = []
    for slot, group in enumerate(groups):
        # First group on top; the middle of the stack stays on the true value.
        shift = ((len(groups) - 1) / 2 - slot) * LINE_GAP_PT
        lines = _interleaved(ax.step, series[group[0]], [colour[i] for i in group], where="post",
                             linewidth=1.2, linestyle=linestyle[group[0]],
                             transform=offset_copy(ax.transData, fig=fig, x=0, y=shift, units="points"))
        # Lines under an offset transform do not take part in autoscaling: give the axes their true data.
        ax.update_datalim(np.column_stack(series[group[0]]))
        sim = sims[group[0]][2]
        same = " = ".join(sims[i][0] for i in group) + (" (identical)" if len(group) > 1 else "")
        handles.append(tuple(lines) if len(lines) > 1 else lines[0])
        names.append(f"{same}: peak {_amount(sim.peak / scale)}, {sim.num_steps} steps")
    if budget is not None:
        handles.append(ax.axhline(budget / scale, color=NEUTRAL, linestyle="--", linewidth=1.4))
        names.append(f"budget {_amount(budget / scale)}")
    for amount in dict.fromkeys(b for b in own if b is not None):  # each schedule's own budget, in its colour
        whose = [i for i, b in enumerate(own) if b == amount]
        handles.append(ax.axhline(amount / scale, color=colour[whose[0]], linestyle="--", linewidth=1.2))
        names.append(f"budget {_amount(amount / scale)} of {', '.join(sims[i][0] for i in whose)}")
    handles.append(ax.axhline(base.peak / scale, color=NOTE_COLOUR, linestyle=":", linewidth=1.2))
    names.append(f"baseline peak {_amount(base.peak / scale)}")
    for line, name in zip(handles, names):
        for part in line if isinstance(line, tuple) else (line,):
            part.set_label(name)
    ax.autoscale_view()
    ax.set_xlabel("progress through each schedule (% of its steps)" if progress else "step")
    ax.set_ylabel(f"memory ({unit})" if unit else "memory")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    # ndivide=1: the copies of an identical series overlap in their legend entry, alternating as in the chart.
    legend = ax.legend(handles, names, handler_map={tuple: HandlerTuple(ndivide=1, pad=0)}, fontsize=8,
                       loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, title_fontsize=7,
                       alignment="left", title=_nudge_note(1.0, unit) if len(groups) > 1 else None)
    ax.set_title(title or f"{graph.name}: memory at every step")
    if len(groups) > 1:
        # The nudge in memory units: known once the layout has placed the axes (the note's size barely moves it).
        fig.draw_without_rendering()
        low, high = ax.get_ylim()
        per_point = (high - low) / (ax.get_window_extent().height * 72 / fig.dpi)
        legend.set_title(_nudge_note((len(groups) - 1) / 2 * LINE_GAP_PT * per_point, unit))
    return fig


def _nudge_note(amount: float, unit: str) -> str:
    return ("lines that would cover one another are drawn side by side,\n"
            f"at most {amount:.2g}{' ' + unit if unit else ''} above or below their value")


def _timeline_colours(methods: Sequence[str], each: bool) -> dict[int, str]:
    """Each schedule's colour: its method's; with ``each``, a later schedule of a method already drawn gets
    a colour no method here has."""
    own = [method_style(m)["color"] for m in methods]
    if not each:
        return dict(enumerate(own))
    # Not black (the budget's) nor grey (the baseline's, and `none`'s).
    spare = [c for c in PALETTE if c not in own and c not in (NEUTRAL, PALETTE[0])]
    colour: dict[int, str] = {}
    for i, c in enumerate(own):
        colour[i] = c if c not in colour.values() else (spare.pop(0) if spare else c)
    return colour


# ---------------------------------------------------------------------- intervals


def retention_intervals(graph: Graph, schedule: Schedule) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every stay of a value in memory: ``(node, start step, end step, is recomputation)`` arrays.

    A stay starts at a compute step and ends at the node's next event (its
    free) or at the end of the schedule; in a valid schedule a node's events
    alternate compute, free, compute, ... so sorting the steps by node pairs
    them up without a walk over the schedule.

    Parameters
    ----------
    graph : Graph
    schedule : Schedule
        A valid schedule of ``graph``.

    Returns
    -------
    tuple of four numpy.ndarray
        Per stay, by node then step: the node's index, the step that computed it, the step that
        freed it (or the schedule's length), and whether the compute was a recomputation.
    """
    steps = np.arange(len(schedule))
    order = np.lexsort((steps, schedule.nodes))
    nodes, at, kinds = schedule.nodes[order], steps[order], schedule.kinds[order]
    same_next = np.append(nodes[1:] == nodes[:-1], False)
    end = np.where(same_next, np.append(at[1:], 0), len(schedule))
    first = np.append(True, nodes[1:] != nodes[:-1])
    computes = kinds == COMPUTE
    return nodes[computes], at[computes], end[computes], ~first[computes]


def intervals(graph: Graph, schedule: Schedule, path: str | Path, title: str | None = None) -> Path:
    """Write `intervals_figure` to ``path``.

    Parameters
    ----------
    graph : Graph
    schedule : Schedule
        A schedule of ``graph``.
    path : str or Path
        The image file; its suffix (``.png``, ``.svg``, ``.pdf``) names the format.
    title : str or None
        The figure's title; None for the chart's own.

    Returns
    -------
    Path
        ``path``.

    Raises
    ------
    ChartError
        Nothing to draw (as `intervals_figure` says), or ``path`` is a folder or has another suffix.
    OutputError
        ``path`` cannot be written.
    """
    return save(intervals_figure(graph, schedule, title), path)


def intervals_figure(graph: Graph, schedule: Schedule, title: str | None = None) -> Figure:
    """One row per node, one bar per stay in memory over the steps of ``schedule``.

    Parameters
    ----------
    graph : Graph
    schedule : Schedule
        A schedule of ``graph``.
    title : str or None
        The figure's title; None for the chart's own.

    Returns
    -------
    Figure

    Raises
    ------
    ChartError
        ``schedule`` is not valid on ``graph``.
    """
    sim = simulate(graph, schedule)
    if not sim.valid:
        raise ChartError(f"the schedule is not valid on graph '{graph.name}': {sim.violation}")
    nodes, start, end, again = retention_intervals(graph, schedule)
    end = np.maximum(end, start + 1)  # a value freed at once still shows as one step
    segments = np.stack([np.column_stack([start, nodes]), np.column_stack([end, nodes])], axis=1).astype(float)
    colours = np.where(again, RECOMPUTE_COLOUR, FIRST_COLOUR)
    height = min(12.0, max(3.5, graph.n * 0.03))
    fig = Figure(figsize=(9, height), layout="constrained")
    ax = fig.subplots()
    # Bars a little thinner than a row (the axes take about 80% of the figure's height, 72 points an inch).
    width = max(0.3, min(6.0, 0.6 * 0.8 * height * 72 / max(graph.n, 1)))
    ax.add_collection(LineCollection(list(segments), colors=list(colours), linewidths=width))
    ax.set_xlim(0, max(len(schedule), 1))
    ax.set_ylim(graph.n - 0.5, -0.5)  # first node at the top, as in the paper's figure
    ax.set_xlabel("step")
    ax.set_ylabel("node (input topological order)")
    ax.grid(True, axis="x", alpha=0.25)
    ax.legend(handles=[
        Line2D([], [], color=FIRST_COLOUR, linewidth=3, label="held after its first computation"),
        Line2D([], [], color=RECOMPUTE_COLOUR, linewidth=3, label="held after a recomputation"),
    ], fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    method = schedule.method or "schedule"
    ax.set_title(title or f"{graph.name}, {method}: when each value is held "
                          f"({int(again.sum())} recomputations, peak {sim.peak:,})")
    return fig


# ---------------------------------------------------------------------- progress over time

def progress(results: pd.DataFrame, points: pd.DataFrame, path: str | Path, title: str | None = None) -> Path:
    """Write `progress_figure` to ``path``.

    Parameters
    ----------
    results : pandas.DataFrame
        A results table (`remat_bench.app.sweep.results.load_table`).
    points : pandas.DataFrame
        A progress table (`remat_bench.app.sweep.profiles.PROGRESS_COLUMNS`).
    path : str or Path
        The image file; its suffix (``.png``, ``.svg``, ``.pdf``) names the format.
    title : str or None
        The figure's title; None for the chart's own.

    Returns
    -------
    Path
        ``path``.

    Raises
    ------
    ChartError
        Nothing to draw (as `progress_figure` says), or ``path`` is a folder or has another suffix.
    OutputError
        ``path`` cannot be written.
    """
    return save(progress_figure(results, points, title), path)


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
    frame = _labelled(results)
    runs = frame[frame["run_id"].isin(set(points["run_id"]))]
    if runs.empty:
        raise ChartError("no run recorded its progress, so there is no progress to draw")
    graphs = list(dict.fromkeys(runs.sort_values(["nodes", "graph"])["graph"]))
    budgets = sorted(set(runs["budget_text"]), key=lambda b: -float(b) if _is_number(b) else 0.0)
    fig = Figure(figsize=(3.6 * len(budgets), 2.9 * len(graphs) + 0.9), layout="constrained")
    axes = fig.subplots(len(graphs), len(budgets), squeeze=False)
    order = _label_order(runs)
    by_run = {run: g.sort_values("time_s") for run, g in points.groupby("run_id", sort=False)}
    shown: set[str] = set()
    bound_drawn = own_drawn = cut = False
    for r, graph in enumerate(graphs):
        for c, budget in enumerate(budgets):
            ax = axes[r][c]
            mine = runs[(runs["graph"] == graph) & (runs["budget_text"] == budget)]
            bound = _bound_overhead(mine)
            finals: list[float] = []
            for label in order:
                for _, run in mine[mine["label"] == label].iterrows():
                    every = by_run.get(run["run_id"])
                    if every is None:
                        continue
                    pts = every.dropna(subset=["duration"])
                    if pts.empty:
                        continue
                    x = pts["time_s"].to_numpy(dtype=float)
                    y = pts["overhead_pct"].to_numpy(dtype=float)
                    ran = float(run["solve_time_s"] or 0) + float(run.get("bound_time_s") or 0)
                    end = max(ran, x[-1])
                    style = method_style(run["method"])
                    finals.append(float(y[-1]))
                    own = every.dropna(subset=["bound"]) if "bound" in every else every.iloc[:0]
                    base = float(run["baseline_duration"] or 0)
                    if not own.empty and base > 0:
                        bx = own["time_s"].to_numpy(dtype=float)
                        # No bound is below the any-order bound (nor below no recomputation at all).
                        by = np.maximum(100 * (own["bound"].to_numpy(dtype=float) / base - 1),
                                        0.0 if bound is None else bound)
                        ax.step(np.append(bx, end), np.append(by, by[-1]), where="post", color=style["color"],
                                linestyle=":", linewidth=0.9, alpha=0.7)
                        own_drawn = True
                    ax.step(np.append(x, end), np.append(y, y[-1]), where="post", color=style["color"],
                            linestyle=run["linestyle"], linewidth=1.3)
                    ax.plot(x, y, linestyle="none", marker=style["marker"], markersize=3, color=style["color"])
                    shown.add(label)
            if bound is not None:
                ax.axhline(bound, color=BOUND_EDGE, linestyle="--", linewidth=0.9)
                bound_drawn = True
            if finals:
                # Early schedules far above where the runs end (a heuristic's +400%) would flatten the
                # curves that matter: the axis ends a margin above the worst final answer.
                low = min(min(finals), 0.0 if bound is None else bound)
                top = max(finals) + max(1.0 * (max(finals) - low), 0.5)
                if any(bool((pts["overhead_pct"] > top).any()) for pts in (by_run.get(i) for i in mine["run_id"])
                       if pts is not None):
                    ax.set_ylim(low - 0.05 * (top - low), top)
                    cut = True
            if mine.empty or not any(run_id in by_run for run_id in mine["run_id"]):
                ax.text(0.5, 0.5, "no schedule recorded", transform=ax.transAxes, ha="center", va="center",
                        fontsize=9, color=NOTE_COLOUR)
            ax.set_xscale("log")
            _plain_log_axis(ax.xaxis)
            nodes = mine["nodes"].iloc[0] if not mine.empty else ""
            ax.set_title(textwrap.fill(f"{graph} ({nodes} nodes) at {budget}", TITLE_CHARS - 12,
                                       break_on_hyphens=False), fontsize=8)
            if r == len(graphs) - 1:
                ax.set_xlabel("solve time (s, log)")
            if c == 0:
                ax.set_ylabel("overhead (%)")
            ax.grid(True, alpha=0.3)
    handles: list[Any] = _legend_handles(runs, [lab for lab in order if lab in shown])
    names = [h.get_label() for h in handles]
    if bound_drawn:
        handles.append(Line2D([], [], color=BOUND_EDGE, linestyle="--", linewidth=0.9))
        names.append("any-order lower bound: no schedule is faster")
    if own_drawn:
        handles.append(Line2D([], [], color=BOUND_EDGE, linestyle=":", linewidth=0.9))
        names.append("a method's own bound (its space, its model's objective)")
    if cut:
        handles.append(Line2D([], [], color="none"))
        names.append("first schedules far above the final ones run off the top")
    fig.legend(handles, names, loc="outside lower center", ncols=min(6, len(names)), fontsize=9, frameon=False)
    fig.suptitle(title or "Overhead of the best schedule held, against solve time")
    return fig


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


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _bound_overhead(runs: pd.DataFrame) -> float | None:
    """The best any-order bound the runs of one instance computed, as an overhead (%), or None."""
    if runs.empty or "lower_bound_any_order" not in runs:
        return None
    known = runs.dropna(subset=["lower_bound_any_order", "baseline_duration"])
    known = known[known["baseline_duration"] > 0]
    if known.empty:
        return None
    return float((100 * (known["lower_bound_any_order"].astype(float)
                         / known["baseline_duration"].astype(float) - 1)).max())


def profile(results: pd.DataFrame, points: pd.DataFrame, path: str | Path, within_pct: float = 1.0,
            title: str | None = None) -> Path:
    """Write `profile_figure` to ``path``.

    Parameters
    ----------
    results : pandas.DataFrame
        A results table (`remat_bench.app.sweep.results.load_table`).
    points : pandas.DataFrame
        A progress table (`remat_bench.app.sweep.profiles.PROGRESS_COLUMNS`).
    path : str or Path
        The image file; its suffix (``.png``, ``.svg``, ``.pdf``) names the format.
    within_pct : float
        The target: within this many percent of the instance's best duration.
    title : str or None
        The figure's title; None for the chart's own.

    Returns
    -------
    Path
        ``path``.

    Raises
    ------
    ChartError
        Nothing to draw (as `profile_figure` says), or ``path`` is a folder or has another suffix.
    OutputError
        ``path`` cannot be written.
    """
    return save(profile_figure(results, points, within_pct, title), path)


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

    frame = _labelled(results)
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
    for label in _label_order(frame.drop_duplicates("label")):
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
        _plain_log_axis(ax.xaxis)
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


def time_to_best(results: pd.DataFrame, points: pd.DataFrame, path: str | Path, title: str | None = None) -> Path:
    """Write `time_to_best_figure` to ``path``.

    Parameters
    ----------
    results : pandas.DataFrame
        A results table (`remat_bench.app.sweep.results.load_table`).
    points : pandas.DataFrame
        A progress table (`remat_bench.app.sweep.profiles.PROGRESS_COLUMNS`).
    path : str or Path
        The image file; its suffix (``.png``, ``.svg``, ``.pdf``) names the format.
    title : str or None
        The figure's title; None for the chart's own.

    Returns
    -------
    Path
        ``path``.

    Raises
    ------
    ChartError
        Nothing to draw (as `time_to_best_figure` says), or ``path`` is a folder or has another suffix.
    OutputError
        ``path`` cannot be written.
    """
    return save(time_to_best_figure(results, points, title), path)


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
    frame = _labelled(results)
    last = best_held_at(points)
    runs = frame[frame["ok"] & frame["run_id"].isin(last.index)].assign(
        best_at=lambda f: f["run_id"].map(last).astype(float))
    if runs.empty:
        raise ChartError("no run recorded a schedule within its budget, so there is no time to its best")
    fig = Figure(figsize=(6.4, 4.6), layout="constrained")
    ax = fig.subplots()
    for label in _label_order(runs):
        mine = runs[runs["label"] == label]
        style = method_style(mine["method"].iloc[0])
        ax.scatter(mine["nodes"].astype(float), mine["best_at"].clip(lower=1e-3), s=14, alpha=0.5,
                   color=style["color"], marker=style["marker"])
        median = mine.groupby("nodes")["best_at"].median().sort_index()
        ax.plot(median.index.astype(float), median.clip(lower=1e-3), color=style["color"],
                linestyle=mine["linestyle"].iloc[0], marker=style["marker"], label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    _plain_log_axis(ax.xaxis)
    _plain_log_axis(ax.yaxis)
    ax.set_xlabel("nodes (log)")
    ax.set_ylabel("time until the best schedule (s, log)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, frameon=False, title="points: each budget; lines: their median", title_fontsize=8)
    fig.suptitle(title or "Time until the best schedule, against graph size")
    return fig
