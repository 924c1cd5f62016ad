"""The intervals chart: when each value is resident over one schedule, one row per node, as in Figure 3
of the Moccasin paper (Bartan et al., ICML 2023): first computations in blue, recomputations in orange."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from remat_bench.app.charts.common import ChartError
from remat_bench.core.graph import Graph
from remat_bench.core.schedule import COMPUTE, Schedule
from remat_bench.core.simulate import simulate

if TYPE_CHECKING:
    from remat_bench.app.sweep.results import ScheduleSet

# One schedule is shown, so two fixed colours rather than the method's.
FIRST_COLOUR = "#3b75af"
RECOMPUTE_COLOUR = "#e8702a"


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


def intervals_at_budget(chosen: ScheduleSet, name: str) -> tuple[Figure, list[str]]:
    """`intervals_figure` of the fastest schedule a results folder holds for one graph at one budget.

    Parameters
    ----------
    chosen : ScheduleSet
        The schedules (`remat_bench.app.sweep.results.schedules_at`).
    name : str
        The graph's name, as the title says it.

    Returns
    -------
    tuple of Figure and list of str
        The figure, and the label of the schedule it shows.

    Raises
    ------
    ChartError
        As `intervals_figure` says.
    """
    label, best = chosen.schedules[int(chosen.rows["duration"].astype(float).to_numpy().argmin())]
    fig = intervals_figure(chosen.graph, best,
                           title=f"{name}, {label} at budget {chosen.budget_text}: when each value is held")
    return fig, [label]


def intervals_of_files(graph: Graph, files: Sequence[tuple[Path, Schedule]]) -> Figure:
    """`intervals_figure` of the one schedule file given.

    Parameters
    ----------
    graph : Graph
    files : Sequence[tuple[Path, Schedule]]
        One file with the schedule of ``graph`` read from it (an intervals chart shows one schedule).

    Returns
    -------
    Figure

    Raises
    ------
    ChartError
        As `intervals_figure` says.
    """
    [(_, schedule)] = files
    return intervals_figure(graph, schedule)
