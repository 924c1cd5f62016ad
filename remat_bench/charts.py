"""Charts of sweep results and schedules: tradeoff, scaling, timeline, intervals.

Every chart is a plain function that takes a results table or simulated
schedules and writes one image, PNG or SVG (or PDF) by the file's suffix. The
figures are built with `matplotlib.figure.Figure` directly, never through
pyplot's global state, so they render headless (Agg) and from threads.

Each method keeps one colour and one marker in every chart: the methods of
docs/design.md's table take fixed places, and any other registered method (a
plugin) follows in `remat_bench.methods.method_names` order. Variants of one
method (a parameter grid) share its colour and differ by line style.

- `tradeoff`: overhead against budget, one panel per graph. Points are runs;
  the step line is the running minimum over budgets (a schedule that fits a
  budget fits every larger one), so it shows the best overhead each method
  reached at or below each budget. Budgets where a method found nothing are
  left empty.
- `scaling`: solve time against graph size, log-log, with each time limit
  dashed and runs killed at the limit marked with a cross.
- `timeline`: memory at every step of one or more schedules of one graph,
  with the budget and the baseline peak.
- `intervals`: when each value is resident over one schedule, one row per
  node, as in Figure 3 of the Moccasin paper (Bartan et al., ICML 2023):
  first computations in the method's colour, recomputations in red.
"""

from __future__ import annotations

import hashlib
import io
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from remat_bench.errors import RematBenchError
from remat_bench.graph import Graph, Number
from remat_bench.io import atomic_write_bytes
from remat_bench.schedule import COMPUTE, Schedule
from remat_bench.simulate import baseline, simulate

KINDS = ("tradeoff", "scaling", "timeline", "intervals")
FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}
# docs/design.md section 6, in its order: these places never move, so colours stay comparable across versions.
DESIGN_METHODS = ("none", "reorder", "chen", "greedy", "checkmate", "checkmate-lp", "moccasin", "kusumoto",
                  "twremat", "fenghuang", "monet", "bound")
PALETTE = ("#7f7f7f", "#8c564b", "#1f77b4", "#ff7f0e", "#2ca02c", "#98df8a", "#d62728", "#9467bd",
           "#e377c2", "#17becf", "#bcbd22", "#000000", "#aec7e8", "#ffbb78", "#c5b0d5", "#f7b6d2",
           "#c49c94", "#dbdb8d", "#9edae5", "#393b79")
MARKERS = ("o", "s", "^", "v", "D", "P", "X", "*", "h", "<", ">", "p")
LINESTYLES = ("-", "--", ":", "-.")
# Intervals show one schedule, so they use two fixed colours rather than the method's.
FIRST_COLOUR = "#3b75af"
RECOMPUTE_COLOUR = "#e8702a"


class ChartError(RematBenchError):
    """Nothing to draw, or an output the chart cannot be written to."""


def method_style(method: str) -> dict[str, str]:
    """The colour and marker of ``method``, the same in every chart."""
    from remat_bench.methods import method_names

    order = list(DESIGN_METHODS) + [m for m in method_names() if m not in DESIGN_METHODS]
    if method in order:
        slot = order.index(method)
    else:  # a method no longer registered (old results): a stable place after the known ones
        slot = len(order) + int(hashlib.sha1(method.encode()).hexdigest(), 16) % len(PALETTE)
    return {"color": PALETTE[slot % len(PALETTE)], "marker": MARKERS[slot % len(MARKERS)]}


def save(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` atomically in the format its suffix names."""
    path = Path(path)
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ChartError(f"{path}: charts are written as {', '.join(FORMATS)}; choose one of those suffixes")
    buffer = io.BytesIO()
    fig.savefig(buffer, format=fmt, dpi=150, bbox_inches="tight")
    atomic_write_bytes(path, buffer.getvalue())
    return path


def _labelled(frame: pd.DataFrame) -> pd.DataFrame:
    from remat_bench.sweep.results import labels, succeeded

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


# ---------------------------------------------------------------------- tradeoff


def tradeoff(frame: pd.DataFrame, path: str | Path, title: str | None = None) -> Path:
    """Overhead (%) against budget (fraction of the baseline peak), one panel per graph."""
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
    for ax, graph in zip(axes, graphs):
        mine = usable[usable["graph"] == graph]
        fractions = frame.loc[frame["graph"] == graph, "budget_fraction"].dropna()
        for label in order:
            runs = mine[mine["label"] == label]
            if runs.empty:
                continue
            style = method_style(runs["method"].iloc[0])
            best = runs.groupby("budget_fraction")["overhead_pct"].min().sort_index()
            x = best.index.to_numpy(dtype=float)
            y = best.to_numpy(dtype=float)
            ax.scatter(x, y, color=style["color"], marker=style["marker"], s=22, zorder=3)
            running = np.minimum.accumulate(y)
            # Carry the last value to the largest budget of the panel: it still fits there.
            if len(fractions) and fractions.max() > x[-1]:
                x, running = np.append(x, fractions.max()), np.append(running, running[-1])
            ax.step(x, running, where="post", color=style["color"], linestyle=runs["linestyle"].iloc[0],
                    linewidth=1.4, alpha=0.85)
        nodes = frame.loc[frame["graph"] == graph, "nodes"].iloc[0]
        ax.set_title(f"{graph} ({nodes} nodes)", fontsize=10)
        ax.set_xlabel("budget (fraction of the baseline peak)")
        ax.set_ylabel("overhead (% of baseline duration)")
        if len(fractions):
            pad = max(0.01, 0.03 * (fractions.max() - fractions.min()))
            ax.set_xlim(fractions.min() - pad, fractions.max() + pad)
        ax.grid(True, alpha=0.3)
    for ax in axes[len(graphs):]:
        ax.set_visible(False)
    fig.legend(handles=_legend_handles(frame, [lab for lab in order if lab in set(usable["label"])]),
               loc="outside lower center", ncols=min(6, len(order)), fontsize=9, frameon=False)
    fig.suptitle(title or "Overhead against budget (line: best at or below each budget)")
    return save(fig, path)


# ---------------------------------------------------------------------- scaling


def scaling(frame: pd.DataFrame, path: str | Path, title: str | None = None) -> Path:
    """Solve time (s) against nodes, log-log; time limits dashed, runs killed at the limit crossed."""
    frame = _labelled(frame)
    frame = frame[frame["status"] != "unsupported"]
    if frame.empty or frame["nodes"].nunique() < 1:
        raise ChartError("no applicable runs to draw solve times for")
    fig = Figure(figsize=(7.5, 5.2), layout="constrained")
    ax = fig.subplots()
    order = _label_order(frame)
    for label in order:
        runs = frame[frame["label"] == label]
        style = method_style(runs["method"].iloc[0])
        ok = runs[runs["ok"] & runs["solve_time_s"].notna()]
        if not ok.empty:
            median = ok.groupby("nodes")["solve_time_s"].median().sort_index()
            ax.plot(median.index.to_numpy(dtype=float), np.maximum(median.to_numpy(dtype=float), 1e-4),
                    color=style["color"], marker=style["marker"], linestyle=runs["linestyle"].iloc[0],
                    markersize=5)
        killed = runs[runs["status"] == "timeout"]
        if not killed.empty:
            ax.scatter(killed["nodes"].astype(float), killed["time_limit"].astype(float), marker="x", s=60,
                       color=style["color"], zorder=4)
        other = runs[~runs["ok"] & (runs["status"] != "timeout") & runs["solve_time_s"].notna()]
        if not other.empty:
            ax.scatter(other["nodes"].astype(float), np.maximum(other["solve_time_s"].astype(float), 1e-4),
                       marker=style["marker"], facecolors="none", edgecolors=style["color"], s=30, zorder=3)
    for limit in sorted(frame["time_limit"].dropna().unique()):
        ax.axhline(float(limit), color="#555555", linestyle="--", linewidth=1)
        ax.annotate(f"time limit {float(limit):g} s", (0.01, float(limit)), xycoords=("axes fraction", "data"),
                    textcoords="offset points", xytext=(0, 3), fontsize=8, color="#555555")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("graph size (nodes)")
    ax.set_ylabel("solve time (s)")
    ax.grid(True, which="both", alpha=0.25)
    handles = [
        *_legend_handles(frame, order),
        Line2D([], [], color="#555555", marker="x", linestyle="", label="killed at the time limit"),
        Line2D([], [], color="#555555", marker="o", markerfacecolor="none", linestyle="",
               label="ended without a schedule")]
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.set_title(title or "Solve time against graph size (median of successful runs)")
    return save(fig, path)


# ---------------------------------------------------------------------- timeline


def _memory_scale(graph: Graph, peak: Number) -> tuple[float, str]:
    unit = graph.units.get("memory", "")
    if unit != "bytes":
        return 1.0, f"memory ({unit})" if unit else "memory"
    for factor, name in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if peak >= 2 * factor:
            return float(factor), f"memory ({name})"
    return 1.0, "memory (bytes)"


def _amount(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def timeline(graph: Graph, schedules: Sequence[tuple[str, Schedule]], path: str | Path,
             budget: Number | None = None, title: str | None = None) -> Path:
    """Memory at every step of each schedule (label, schedule), overlaid, with the budget line."""
    if not schedules:
        raise ChartError(f"no schedule of graph '{graph.name}' to draw")
    base = baseline(graph)
    sims = []
    for label, schedule in schedules:
        sim = simulate(graph, schedule)
        if not sim.valid:
            raise ChartError(f"the schedule '{label}' is not valid on graph '{graph.name}': {sim.violation}")
        sims.append((label, schedule, sim))
    top = max([base.peak, *(s.peak for _, _, s in sims), *([budget] if budget is not None else [])])
    scale, ylabel = _memory_scale(graph, top)
    fig = Figure(figsize=(9, 4.6), layout="constrained")
    ax = fig.subplots()
    seen: dict[str, int] = {}
    for label, schedule, sim in sims:
        method = schedule.method or label
        style = method_style(method)
        variant = seen[method] = seen.get(method, -1) + 1  # variants of one method: same colour, new line style
        steps = np.arange(sim.num_steps + 1)
        memory = np.append(sim.step_memory, sim.step_memory[-1] if sim.num_steps else 0) / scale
        ax.step(steps, memory, where="post", color=style["color"], linewidth=1.2,
                linestyle=LINESTYLES[variant % len(LINESTYLES)],
                label=f"{label}: peak {_amount(sim.peak / scale)}, {sim.num_steps} steps")
    if budget is not None:
        ax.axhline(budget / scale, color="#d62728", linestyle="--", linewidth=1.2,
                   label=f"budget {_amount(budget / scale)}")
    ax.axhline(base.peak / scale, color="#555555", linestyle=":", linewidth=1.2,
               label=f"baseline peak {_amount(base.peak / scale)}")
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.set_title(title or f"{graph.name}: memory at every step")
    return save(fig, path)


# ---------------------------------------------------------------------- intervals


def retention_intervals(graph: Graph, schedule: Schedule) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every stay of a value in memory: ``(node, start step, end step, is recomputation)`` arrays.

    A stay starts at a compute step and ends at the node's next event (its
    free) or at the end of the schedule; in a valid schedule a node's events
    alternate compute, free, compute, ... so sorting the steps by node pairs
    them up without a walk over the schedule.
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
    """One row per node, one bar per stay in memory over the steps of ``schedule``."""
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
    ax.add_collection(LineCollection(segments, colors=list(colours), linewidths=width))
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
    return save(fig, path)
