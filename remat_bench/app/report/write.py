"""The report written: its heading, the sections in their order, the charts beside it, one part per graph."""

from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path

import pandas as pd

from remat_bench.app.report.attribution import attribution_section
from remat_bench.app.report.prediction import prediction_section
from remat_bench.app.report.sections import (
    SPEED_TARGET_PCT,
    best_section,
    finding_section,
    gap_section,
    graph_table,
    production_section,
    speed_section,
    summary_section,
)
from remat_bench.app.report.tables import cell
from remat_bench.app.sweep.profiles import load_progress
from remat_bench.app.sweep.results import labels, load_table, schedules_at, skipped_note, succeeded, summarize
from remat_bench.core.errors import GraphError, RematBenchError, ScheduleError
from remat_bench.core.files import atomic_write_text
from remat_bench.core.provenance import CostSource, cost_source, mixed_sources

MAX_GRAPH_CHARTS = 12


def write_report(results: str | Path, path: str | Path, title: str | None = None,
                 table: pd.DataFrame | None = None) -> Path:
    """Write the Markdown report of the results folder ``results`` to ``path``, charts beside it.

    ``table`` is the folder's table when the caller has read it already (`load_table`).

    Parameters
    ----------
    results : str or Path
        The results folder.
    path : str or Path
        The report, a ``.md`` file; its charts go in ``<stem>-figures`` beside it.
    title : str or None
        The report's heading; None for the sweep's name (its config's ``name``, else the folder's).
    table : pandas.DataFrame or None
        The folder's table; None reads it.

    Returns
    -------
    Path
        ``path``.

    Raises
    ------
    RematBenchError
        ``path`` does not end in ``.md``, or the folder holds no results (or none that can be read).
    OutputError
        The report or a chart cannot be written.
    """
    results, path = Path(results), Path(path)
    if path.suffix.lower() != ".md":
        raise RematBenchError(f"{path}: the report is Markdown; give a file name ending in .md")
    table = load_table(results) if table is None else table
    if table.empty:
        skipped = skipped_note(table)
        raise RematBenchError(f"{results}: the results hold no runs yet" + (f" that can be read: {skipped}"
                                                                             if skipped else ""))
    frame = table.assign(label=labels(table), ok=succeeded(table))
    figures = path.parent / f"{path.stem}-figures"
    costs = cost_sources(results, table)
    parts = _heading(results, table, frame, title or _sweep_name(results), costs)
    parts += ["", "## Summary per method", "", summary_section(summarize(table)), ""]
    parts += ["## Best method at each budget", "", best_section(frame), ""]
    for heading, section in (("Best schedule, best bound and the gap", gap_section),
                             ("What you use today against the optimum", production_section),
                             ("Prediction against measurement", prediction_section),
                             ("Where the time goes", attribution_section),
                             ("Input order or any order: is rematerialization needed?", finding_section)):
        text = section(frame)
        if text is not None:
            parts += [f"## {heading}", "", text, ""]
    progress = load_progress(results)
    if progress is not None and progress.empty:
        progress = None
    if progress is not None:
        parts += ["## How fast each method gets there", "", speed_section(frame, progress), ""]
    parts += _charts(table, frame, progress, figures, path)
    for i, graph in enumerate(dict.fromkeys(frame["graph"])):
        parts += _graph_section(results, table, frame[frame["graph"] == graph], costs.get(graph), figures, path, i)
    atomic_write_text(path, "\n".join(parts).rstrip() + "\n")
    return path


def _heading(results: Path, table: pd.DataFrame, frame: pd.DataFrame, name: str,
             costs: dict[str, CostSource | None]) -> list[str]:
    """The report's title and what it covers: runs, methods, graphs, time limits, hosts and versions."""
    from remat_bench import __version__

    parts = [f"# {name}", ""]
    hosts = ", ".join(sorted(set(table["host"].dropna())))
    versions = _versions(table)
    parts.append(
        f"{len(table)} runs of {table['method'].nunique()} methods on {table['graph'].nunique()} graphs, "
        f"{int(frame['ok'].sum())} of them with a schedule within budget; time limit "
        f"{', '.join(f'{t:g} s' for t in sorted(table['time_limit'].dropna().unique()))} per run. "
        f"Results from `{results}`, on {hosts or 'an unknown host'}; {versions}. Report written "
        f"{_dt.datetime.now().strftime('%Y-%m-%d %H:%M')} by remat-bench {__version__}."
        + (f" Note: {skipped}." if (skipped := skipped_note(table)) else ""))
    if (mixed := mixed_sources(costs)) is not None:
        parts.append(f"\nNote: {mixed}.")
    return parts


def _charts(table: pd.DataFrame, frame: pd.DataFrame, progress: pd.DataFrame | None, figures: Path,
            report: Path) -> list[str]:
    """The charts of every graph together (`remat_bench.app.charts.kinds`) that the results can show: tradeoff
    with two budgets, scaling with two graph sizes, progress and profile with a progress table, prediction
    with a replay that measured something."""
    from remat_bench.app.charts.common import ChartError, save
    from remat_bench.app.charts.kinds import KINDS

    replays = frame["replay_status"] if "replay_status" in frame else pd.Series(dtype="string")
    lines = []
    for kind, wanted in (("tradeoff", frame["budget_fraction"].nunique() >= 2),
                         ("scaling", frame["nodes"].nunique() >= 2),
                         ("progress", progress is not None),
                         ("profile", progress is not None),
                         ("prediction", bool(replays.eq("measured").fillna(False).any()))):
        if not wanted:
            continue
        try:
            written = save(KINDS[kind].draw(table, progress, within_pct=SPEED_TARGET_PCT), figures / f"{kind}.png")
        except ChartError as exc:
            lines += [f"No {kind} chart: {exc}.", ""]
            continue
        lines += [f"![{kind}]({_link(written, report)})", ""]
    return ["## Charts", "", *lines] if lines else []


def _graph_section(results: Path, table: pd.DataFrame, mine: pd.DataFrame, costs: CostSource | None,
                   figures: Path, report: Path, i: int) -> list[str]:
    """The section of the ``i``-th graph: what it is, its charts (the first `MAX_GRAPH_CHARTS` graphs), its table."""
    first = mine.iloc[0]
    graph = first["graph"]
    parts = [f"## {graph}", "",
             f"{first['nodes']} nodes, {first['edges']} edges; "
             f"baseline peak {cell(first['baseline_peak'], '{:,}')}, "
             f"baseline duration {cell(first['baseline_duration'], '{:,}')}; sha256 "
             f"`{str(first['graph_sha256'])[:12]}`.", ""]
    if costs is not None:
        parts += [f"Costs: {costs.describe()}.", ""]
    if i < MAX_GRAPH_CHARTS:
        parts += _graph_charts(results, table, graph, figures, report, i)
    return [*parts, graph_table(mine), ""]


def _graph_charts(results: Path, table: pd.DataFrame, graph: str, figures: Path, report: Path,
                  i: int) -> list[str]:
    """The memory timeline of every method at the budget most methods met, and the best one's intervals."""
    from remat_bench.app.charts.common import save
    from remat_bench.app.charts.intervals import intervals_at_budget
    from remat_bench.app.charts.timeline import timeline_at_budget
    from remat_bench.core.files import safe_name  # long names shortened with a digest

    try:
        chosen = schedules_at(results, table[table["graph"] == graph], graph=graph)
    except (GraphError, ScheduleError):
        raise  # a file the results name cannot be read: the report says which, and stops
    except RematBenchError:
        return ["No schedule within budget was found on this graph, so there is no timeline.", ""]
    stem = f"{i:02d}-{safe_name(''.join(c if c.isalnum() or c in '-_' else '_' for c in graph))}"
    lines = []
    timeline = save(timeline_at_budget(chosen, graph)[0], figures / f"{stem}-timeline.png")
    lines += [f"Memory at every step at budget {chosen.budget_text}, one line per method:", "",
              f"![timeline of {graph}]({_link(timeline, report)})", ""]
    intervals, [best_label] = intervals_at_budget(chosen, graph)
    drawn = save(intervals, figures / f"{stem}-intervals.png")
    lines += [f"When each value is held in the shortest of these schedules ({best_label}):", "",
              f"![intervals of {graph}]({_link(drawn, report)})", ""]
    return lines


def cost_sources(results: str | Path, table: pd.DataFrame) -> dict[str, CostSource | None]:
    """How each graph of a results table got its costs (`remat_bench.core.provenance`), read from its file.

    Parameters
    ----------
    results : str or Path
        The results folder (graph paths in the table are relative to it).
    table : pandas.DataFrame
        Its results table (`load_table`).

    Returns
    -------
    dict
        Graph name -> its cost source; None for a graph whose file cannot be read any more.
    """
    from remat_bench.core.files import check_regular
    from remat_bench.core.graph_io import load_graph

    sources: dict[str, CostSource | None] = {}
    for graph, where in table.groupby("graph", sort=False)["graph_path"].first().items():
        path = Path(str(where))
        path = path if path.is_absolute() else Path(results) / path
        try:
            check_regular(path)  # a row's path is data: a device or a pipe there is not read
            sources[str(graph)] = cost_source(load_graph(path))
        except (RematBenchError, OSError):
            sources[str(graph)] = None
    return sources


def _link(target: Path, report: Path) -> str:
    return Path(os.path.relpath(target, report.parent)).as_posix()


def _sweep_name(results: Path) -> str:
    import yaml

    from remat_bench.app.sweep.document import MAX_CONFIG_BYTES
    from remat_bench.core.files import read_regular

    config = results / "config.yaml"
    try:
        data = yaml.safe_load(read_regular(config, limit=MAX_CONFIG_BYTES).decode("utf-8"))
        if isinstance(data, dict) and isinstance(data.get("name"), str) and data["name"]:
            return f"Sweep report: {data['name']}"
    except (RematBenchError, UnicodeDecodeError, yaml.YAMLError):
        pass  # the title is then the folder's name
    return f"Sweep report: {results.name}"


def _versions(table: pd.DataFrame) -> str:
    parts = []
    for column, name in (("python_version", "Python"), ("ortools_version", "OR-Tools"),
                         ("highspy_version", "highspy"), ("pulp_version", "PuLP")):
        values = sorted(set(table[column].dropna()))
        if values:
            parts.append(f"{name} {', '.join(values)}")
    return ", ".join(parts) or "versions unknown"
