"""The runs a chart draws: a graph and methods of a results table, chosen by what a user types, with an
unknown name said back with its nearest match."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from remat_bench.app.charts.common import ChartError, in_method_order
from remat_bench.core.errors import RematBenchError


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
    present = in_method_order(dict.fromkeys(frame["method"]))
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
