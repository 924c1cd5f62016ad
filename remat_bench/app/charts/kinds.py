"""The kinds of chart, one record each: its name, what it is drawn from, and the function that draws it.

`remat-bench plot` and the report read this table (as benchopt's plotting/default_plots.py declares its
plots) rather than a list of names. A kind's functions are named "module:function" and imported when
it is drawn, so that the command line starts without matplotlib and pandas.
"""

from __future__ import annotations

import pkgutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

    from remat_bench.app.sweep.results import ScheduleSet
    from remat_bench.core.graph import Graph
    from remat_bench.core.schedule import Schedule


class Source(Enum):
    """What a kind of chart is drawn from."""

    RUNS = "runs"  # the runs of a results table
    PROGRESS = "progress"  # those runs and the folder's progress table (each run's improving schedules)
    SCHEDULES = "schedules"  # schedules of one graph: of a results folder at one budget, or schedule files


@dataclass(frozen=True)
class Kind:
    """One kind of chart.

    Attributes
    ----------
    name : str
        As ``--kind`` takes it.
    source : Source
        What it is drawn from.
    figure : str
        "module:function" drawing it: ``(runs)`` for `Source.RUNS`, ``(runs, points, **options)`` for
        `Source.PROGRESS`, ``(chosen, name)`` (a `ScheduleSet`; returns the figure and the labels shown)
        for `Source.SCHEDULES`.
    files : str or None
        `Source.SCHEDULES`: "module:function" drawing it from schedule files, ``(graph, files)``.
    every_budget : bool
        It shows every budget, so a budget has nothing to pick.
    options : tuple of str
        The keywords its figure function takes beyond its source (profile's target).
    one_schedule : bool
        It shows one schedule.
    """

    name: str
    source: Source
    figure: str
    files: str | None = None
    every_budget: bool = False
    options: tuple[str, ...] = ()
    one_schedule: bool = False

    def draw(self, runs: pd.DataFrame, points: pd.DataFrame | None = None, **options: Any) -> Figure:
        """The chart of ``runs`` (and, drawn from progress, ``points``): a `Source.RUNS` or `Source.PROGRESS` kind.

        Parameters
        ----------
        runs : pandas.DataFrame
            Runs of a results table.
        points : pandas.DataFrame or None
            Their progress table, for a `Source.PROGRESS` kind.
        **options
            Options for any kind; this one takes those in `options` and leaves the others.

        Returns
        -------
        Figure

        Raises
        ------
        ChartError
            Nothing to draw.
        """
        figure = _function(self.figure)
        if self.source is Source.PROGRESS:
            return figure(runs, points, **{key: value for key, value in options.items() if key in self.options})
        return figure(runs)

    def draw_at(self, chosen: ScheduleSet, name: str) -> tuple[Figure, list[str]]:
        """The chart of a results folder's schedules of one graph at one budget: a `Source.SCHEDULES` kind.

        Parameters
        ----------
        chosen : ScheduleSet
            The schedules (`remat_bench.app.sweep.results.schedules_at`).
        name : str
            The graph's name, as the title says it.

        Returns
        -------
        tuple of Figure and list of str
            The figure, and the labels of the schedules it shows.

        Raises
        ------
        ChartError
            A schedule that is not valid on its graph.
        """
        return _function(self.figure)(chosen, name)

    def draw_files(self, graph: Graph, files: Sequence[tuple[Path, Schedule]]) -> Figure:
        """The chart of schedule files of ``graph``: a `Source.SCHEDULES` kind.

        Parameters
        ----------
        graph : Graph
        files : Sequence[tuple[Path, Schedule]]
            Each file with the schedule read from it (one when `one_schedule`).

        Returns
        -------
        Figure

        Raises
        ------
        ChartError
            A schedule that is not valid on ``graph``.
        """
        assert self.files is not None  # every kind drawn from schedules names its function for files
        return _function(self.files)(graph, files)


def _function(target: str) -> Callable[..., Any]:
    function: Callable[..., Any] = pkgutil.resolve_name(target)
    return function


# In the order `remat-bench plot --kind` lists them; the functions named as the method registry names its classes.
KINDS: dict[str, Kind] = {kind.name: kind for kind in (
    Kind("tradeoff", Source.RUNS, "remat_bench.app.charts.tradeoff:tradeoff_figure", every_budget=True),
    Kind("scaling", Source.RUNS, "remat_bench.app.charts.scaling:scaling_figure", every_budget=True),
    Kind("timeline", Source.SCHEDULES, "remat_bench.app.charts.timeline:timeline_at_budget",
         files="remat_bench.app.charts.timeline:timeline_of_files"),
    Kind("intervals", Source.SCHEDULES, "remat_bench.app.charts.intervals:intervals_at_budget",
         files="remat_bench.app.charts.intervals:intervals_of_files", one_schedule=True),
    Kind("progress", Source.PROGRESS, "remat_bench.app.charts.progress:progress_figure"),
    Kind("profile", Source.PROGRESS, "remat_bench.app.charts.profile:profile_figure", every_budget=True,
         options=("within_pct",)),
    Kind("time-to-best", Source.PROGRESS, "remat_bench.app.charts.time_to_best:time_to_best_figure", every_budget=True),
    Kind("prediction", Source.RUNS, "remat_bench.app.charts.prediction:prediction_figure", every_budget=True),
)}
