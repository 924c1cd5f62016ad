"""Markdown cells and tables, and the walk over a results table's graphs and budgets the sections share."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pandas as pd


def cell(value: object, fmt: str = "{}") -> str:
    """``value`` in a table cell: formatted by ``fmt``, or ``-`` when missing.

    Parameters
    ----------
    value : object
        A value of the results table; None, NaN and pandas' NA are missing.
    fmt : str
        A `str.format` pattern.

    Returns
    -------
    str
    """
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return "-"
    try:
        if pd.isna(value):
            return "-"
    except (TypeError, ValueError):
        pass
    return fmt.format(value)


def markdown_table(columns: list[str], rows: list[list[str]]) -> str:
    """A GitHub-flavoured Markdown table; a ``|`` or a line break in a cell is escaped or flattened.

    Parameters
    ----------
    columns : list of str
        The header.
    rows : list of list of str
        The cells, row by row.

    Returns
    -------
    str
    """
    def clean(text: str) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    lines += ["| " + " | ".join(clean(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def budget_order(frame: pd.DataFrame) -> list[str]:
    """The budgets of ``frame`` as the report lists them: fractions from the largest, then the others.

    Parameters
    ----------
    frame : pandas.DataFrame
        A results table.

    Returns
    -------
    list of str
        Budgets as the ``budget_text`` column has them.
    """
    first = frame.drop_duplicates("budget_text")
    key = first["budget_fraction"].astype(float).fillna(-1.0)
    return list(first.assign(key=key).sort_values("key", ascending=False, kind="stable")["budget_text"])


def rows_at(rows: pd.DataFrame, graph: str, budget: str) -> pd.DataFrame:
    """The rows of ``graph`` at ``budget``.

    Parameters
    ----------
    rows : pandas.DataFrame
        Rows of a results table.
    graph : str
        A graph's name.
    budget : str
        A budget as the ``budget_text`` column has it.

    Returns
    -------
    pandas.DataFrame
    """
    return rows[(rows["graph"] == graph) & (rows["budget_text"] == budget)]


def each_instance(frame: pd.DataFrame, rows: pd.DataFrame | None = None) -> Iterator[tuple[str, str, pd.DataFrame]]:
    """Each graph of ``rows`` at each budget of ``frame`` (`budget_order`), with the rows there; a pair without
    any is left out.

    Parameters
    ----------
    frame : pandas.DataFrame
        A results table: its budgets, in order.
    rows : pandas.DataFrame or None
        The rows to walk; None for ``frame``'s.

    Yields
    ------
    tuple of str, str and pandas.DataFrame
        The graph, the budget, and the rows of ``rows`` there.
    """
    rows = frame if rows is None else rows
    for graph in dict.fromkeys(rows["graph"]):
        for budget in budget_order(frame):
            at = rows_at(rows, graph, budget)
            if not at.empty:
                yield graph, budget, at


def least_overhead(runs: pd.DataFrame) -> tuple[float | None, list[str]]:
    """The least overhead of ``runs`` and the labels of the runs that reached it (within 1e-9 point).

    Parameters
    ----------
    runs : pandas.DataFrame
        Rows with an ``overhead_pct`` and a ``label`` column.

    Returns
    -------
    tuple of float or None and list of str
        None and no label without runs.
    """
    if runs.empty:
        return None, []
    best = float(runs["overhead_pct"].min())
    return best, list(dict.fromkeys(runs.loc[runs["overhead_pct"] <= best + 1e-9, "label"]))
