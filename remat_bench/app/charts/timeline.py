"""The timeline chart: memory at every step of one or more schedules of one graph, with the budget
(black, dashed: no method's colour) and the baseline peak.

Schedules of different budgets each get their own budget line, and schedules of very different lengths
are drawn against their progress. A schedule that moves values to the host and back (docs/design.md
section 3, "Offload") also gets a panel of its streams over time: the compute stream's computations and
each copy engine's copies, as the simulator times them (`Simulation.step_start`, ``step_end``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.legend_handler import HandlerTuple
from matplotlib.lines import Line2D
from matplotlib.transforms import offset_copy

from remat_bench.app.charts.common import (
    LINESTYLES,
    NEUTRAL,
    NOTE_COLOUR,
    PALETTE,
    ChartError,
    identical_groups,
    interleaved,
    method_style,
)
from remat_bench.core.baseline import baseline
from remat_bench.core.graph import Graph, Number
from remat_bench.core.schedule import COMPUTE, OFFLOAD, RELOAD, Schedule
from remat_bench.core.simulate import Simulation, simulate

if TYPE_CHECKING:
    from remat_bench.app.sweep.results import ScheduleSet

# Distinct lines are drawn this far apart vertically (one line width, so equal stretches lie side by side).
LINE_GAP_PT = 1.2
# Timelines whose lengths differ more than this factor are drawn against each schedule's progress (% of its
# steps): on a shared step axis the short one would be squeezed into a sliver.
STEPS_RATIO = 2.0
# The rows of a streams panel, top to bottom: the step kind each shows, its name, and the copy engines' colours
# (the compute stream takes its schedule's).
STREAMS = ((COMPUTE, "compute"), (OFFLOAD, "device to host"), (RELOAD, "host to device"))
COPY_COLOURS = {OFFLOAD: "#17becf", RELOAD: "#bcbd22"}
# Schedules up to this many steps draw a thin white edge between steps that follow one another at once.
SEPARATED_STEPS = 300


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
    Above the memory, each schedule that moves values to the host and back
    gets a panel of its streams over time (`STREAMS`): its computations on
    the compute stream and its copies on each copy engine, where the
    simulator places them; a gap on the compute stream is a wait for a copy.

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
    moving = [i for i, (_, _, sim) in enumerate(sims) if sim.step_start is not None and sim.step_end is not None]
    fig = Figure(figsize=(9, 4.6 + 1.5 * len(moving)), layout="constrained")
    colour = _timeline_colours([schedule.method or label for label, schedule, _ in sims], colour_each)
    if moving:
        panels = fig.subplots(len(moving) + 1, 1, height_ratios=[1.0] * len(moving) + [3.0])
        for i, panel in zip(moving, panels):
            _streams(panel, graph, *sims[i], colour[i])
        ax = panels[-1]
    else:
        ax = fig.subplots()
    series, linestyle = _series(sims, scale, progress, colour_each)
    groups = identical_groups(series)
    handles: list[Any] = []
    names: list[str] = []
    for slot, group in enumerate(groups):
        # First group on top; the middle of the stack stays on the true value.
        shift = ((len(groups) - 1) / 2 - slot) * LINE_GAP_PT
        lines = interleaved(ax.step, series[group[0]], [colour[i] for i in group], where="post",
                            linewidth=1.2, linestyle=linestyle[group[0]],
                            transform=offset_copy(ax.transData, fig=fig, x=0, y=shift, units="points"))
        # Lines under an offset transform do not take part in autoscaling: give the axes their true data.
        ax.update_datalim(np.column_stack(series[group[0]]))
        sim = sims[group[0]][2]
        same = " = ".join(sims[i][0] for i in group) + (" (identical)" if len(group) > 1 else "")
        handles.append(tuple(lines) if len(lines) > 1 else lines[0])
        names.append(f"{same}: peak {_amount(sim.peak / scale)}, {sim.num_steps} steps")
    for line, name in _reference_lines(ax, budget, own, base.peak, scale, colour, [label for label, _, _ in sims]):
        handles.append(line)
        names.append(name)
    for line, name in zip(handles, names):
        for part in line if isinstance(line, tuple) else (line,):
            part.set_label(name)
    ax.autoscale_view()
    ax.set_xlabel("progress through each schedule (% of its steps)" if progress else "step")
    ax.set_ylabel(f"memory ({unit})" if unit else "memory")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.set_title(title or f"{graph.name}: memory at every step")
    _legend(fig, ax, handles, names, len(groups), unit)
    return fig


def timeline_at_budget(chosen: ScheduleSet, name: str) -> tuple[Figure, list[str]]:
    """`timeline_figure` of the schedules a results folder holds for one graph at one budget.

    Parameters
    ----------
    chosen : ScheduleSet
        The schedules (`remat_bench.app.sweep.results.schedules_at`).
    name : str
        The graph's name, as the title says it.

    Returns
    -------
    tuple of Figure and list of str
        The figure, and the labels of the schedules it shows (every one).

    Raises
    ------
    ChartError
        As `timeline_figure` says.
    """
    fig = timeline_figure(chosen.graph, chosen.schedules, budget=chosen.budget,
                          title=f"{name} at budget {chosen.budget_text}: memory at every step")
    return fig, [label for label, _ in chosen.schedules]


def timeline_of_files(graph: Graph, files: Sequence[tuple[Path, Schedule]]) -> Figure:
    """`timeline_figure` of schedule files: each named by its file, in a colour of its own, with its own budget.

    Parameters
    ----------
    graph : Graph
    files : Sequence[tuple[Path, Schedule]]
        Each file with the schedule of ``graph`` read from it.

    Returns
    -------
    Figure

    Raises
    ------
    ChartError
        As `timeline_figure` says.
    """
    # Named by file, a colour and a budget line each: two files are often one method at two budgets.
    named = [(f"{path.name} ({s.method})" if s.method else path.name, s) for path, s in files]
    return timeline_figure(graph, named, budgets=[s.budget for _, s in files], colour_each=True)


def _streams(ax: Axes, graph: Graph, label: str, schedule: Schedule, sim: Simulation, colour: str) -> None:
    """One schedule's compute stream and copy engines over time (`STREAMS`), as the simulator times its steps."""
    assert sim.step_start is not None and sim.step_end is not None  # a schedule that moves values has them
    start, took = sim.step_start, sim.step_end - sim.step_start
    counts = {COMPUTE: sim.computes, OFFLOAD: sim.offloads, RELOAD: sim.reloads}
    edge = 0.5 if sim.num_steps <= SEPARATED_STEPS else 0.0  # steps back to back stay apart, while they show
    for row, (kind, _) in enumerate(STREAMS):
        pick = schedule.kinds == kind
        ax.broken_barh(list(zip(start[pick].tolist(), took[pick].tolist())), (row - 0.38, 0.76),
                       facecolors=COPY_COLOURS.get(kind, colour), edgecolor="white", linewidth=edge)
    ax.set_yticks(range(len(STREAMS)), [f"{name} ({counts[kind]:,})" for kind, name in STREAMS], fontsize=8)
    ax.set_ylim(len(STREAMS) - 0.5, -0.5)
    ax.set_xlim(0, max(float(sim.duration), 1e-12))
    unit = graph.units.get("duration", "")
    ax.set_xlabel(f"time ({unit})" if unit else "time", fontsize=8)
    ax.tick_params(axis="x", labelsize=8)
    ax.grid(True, axis="x", alpha=0.3)
    scale, memory_unit = _memory_scale(graph, sim.host_peak)
    host = _amount(sim.host_peak / scale) + (f" {memory_unit}" if memory_unit else "")
    ax.set_title(f"{label}: compute stream and copy engines (waits for copies {_amount(float(sim.wait))}"
                 f"{' ' + unit if unit else ''}, host peak {host})", fontsize=9)


def _reference_lines(ax: Axes, budget: Number | None, own: Sequence[Number | None], baseline_peak: Number,
                     scale: float, colour: dict[int, str], labels: Sequence[str]) -> list[tuple[Line2D, str]]:
    """Draw the one budget (the neutral line), each schedule's own budget (in its colour) and the baseline
    peak; each line with its legend entry."""
    lines = []
    if budget is not None:
        lines.append((ax.axhline(budget / scale, color=NEUTRAL, linestyle="--", linewidth=1.4),
                      f"budget {_amount(budget / scale)}"))
    for amount in dict.fromkeys(b for b in own if b is not None):  # each schedule's own budget, in its colour
        whose = [i for i, b in enumerate(own) if b == amount]
        lines.append((ax.axhline(amount / scale, color=colour[whose[0]], linestyle="--", linewidth=1.2),
                      f"budget {_amount(amount / scale)} of {', '.join(labels[i] for i in whose)}"))
    lines.append((ax.axhline(baseline_peak / scale, color=NOTE_COLOUR, linestyle=":", linewidth=1.2),
                  f"baseline peak {_amount(baseline_peak / scale)}"))
    return lines


def _legend(fig: Figure, ax: Axes, handles: list[Any], names: list[str], groups: int, unit: str) -> None:
    """The legend beside the axes; with several line groups, its title says how far lines were nudged apart."""
    # ndivide=1: the copies of an identical series overlap in their legend entry, alternating as in the chart.
    legend = ax.legend(handles, names, handler_map={tuple: HandlerTuple(ndivide=1, pad=0)}, fontsize=8,
                       loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, title_fontsize=7,
                       alignment="left", title=_nudge_note(1.0, unit) if groups > 1 else None)
    if groups > 1:
        # The nudge in memory units: known once the layout has placed the axes (the note's size barely moves it).
        fig.draw_without_rendering()
        low, high = ax.get_ylim()
        per_point = (high - low) / (ax.get_window_extent().height * 72 / fig.dpi)
        legend.set_title(_nudge_note((groups - 1) / 2 * LINE_GAP_PT * per_point, unit))


def _series(sims: Sequence[tuple[str, Schedule, Simulation]], scale: float, progress: bool,
            colour_each: bool) -> tuple[dict[int, tuple[np.ndarray, np.ndarray]], dict[int, str]]:
    """Each schedule's (step, memory / ``scale``) line and its line style, keyed by position: two schedules
    may carry one label (two files of one method). With ``progress``, steps are % of the schedule's own."""
    series: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    linestyle: dict[int, str] = {}
    seen: dict[str, int] = {}
    for i, (label, schedule, sim) in enumerate(sims):
        method = schedule.method or label
        variant = seen[method] = seen.get(method, -1) + 1  # variants of one method: same colour, new line style
        linestyle[i] = "-" if colour_each else LINESTYLES[variant % len(LINESTYLES)]
        steps = np.arange(sim.num_steps + 1, dtype=float)
        if progress:
            steps *= 100 / max(sim.num_steps, 1)
        series[i] = (steps, np.append(sim.step_memory, sim.step_memory[-1] if sim.num_steps else 0) / scale)
    return series, linestyle


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
