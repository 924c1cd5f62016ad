"""The results table (docs/design.md section 8): one row per run, as Parquet (and CSV), and its aggregates.

Every row has every column of `COLUMNS`, whatever the outcome. A row is the
run's spec (graph, method, parameters, budget, seed, repeat, limits) merged with
what the worker measured (status, peak, duration, overhead, bounds, times,
peak RSS, schedule path, versions, host). Rows of runs that never reported
(killed past the time limit, crashed) have the spec half and a status that
says what happened.

Aggregates follow qpbenchmark: a success rate, and the shifted geometric mean
``exp(mean(log(x + s))) - s``, which neither lets one huge value dominate (as
the arithmetic mean does) nor lets a value near zero dominate (as the plain
geometric mean does). Shifts: 1 s for times, 1 percentage point for overhead.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from remat_bench.app.sweep.keys import params_text, row_key
from remat_bench.core.files import atomic_write_bytes, atomic_write_text
from remat_bench.core.outcome import Status

# Column -> pandas dtype; "number" columns are Int64 when every value is whole (sizes, flops), else Float64.
COLUMNS: dict[str, str] = {
    "run_id": "string",
    "graph": "string",
    "graph_sha256": "string",
    "graph_path": "string",
    "link": "string",  # the graph's host link: its transfer's source (a sweep's `links:` item), else empty
    "nodes": "Int64",
    "edges": "Int64",
    "method": "string",
    "params": "string",
    "budget_text": "string",
    "budget_fraction": "Float64",
    "budget": "number",
    "status": "string",
    "message": "string",
    "peak": "number",
    "duration": "number",
    "baseline_peak": "number",
    "baseline_duration": "number",
    "overhead_pct": "Float64",
    "objective": "number",
    "lower_bound": "number",
    "lower_bound_any_order": "number",
    "lower_bound_offload": "number",  # for methods that may offload: the bound their gap is taken to
    "host_peak": "number",  # schedules that offload: host memory held at once, units moved, compute's wait
    "to_host": "number",
    "to_device": "number",
    "wait": "number",
    "gap_pct": "Float64",
    "proven_optimal": "boolean",
    "status_holds_for": "string",  # every schedule, the method's space, or empty: where the status is proven
    "space": "string",  # the schedule space the method searches
    "termination": "string",  # why the method stopped (converged, time_limit, ...), apart from its status
    "solve_time_s": "Float64",
    "bound_time_s": "Float64",
    "wall_time_s": "Float64",
    "peak_rss": "Int64",
    "schedule_steps": "Int64",
    "schedule": "string",
    "seed": "Int64",
    "repeat": "Int64",
    "time_limit": "Float64",
    "grace": "Float64",
    "memory_limit": "Int64",
    "stats": "string",
    "remat_bench_version": "string",
    "ortools_version": "string",
    "highspy_version": "string",
    "pulp_version": "string",
    "python_version": "string",
    "host": "string",
    "finished_at": "string",
    # The replay of the run's schedule with real tensors (`remat_bench.app.sweep.replays`): filled for graphs
    # imported from PyTorch by a sweep with `replay:`, empty otherwise. replay_status is `measured` or
    # `failed` (replay_message says why, in one sentence).
    "replay_status": "string",
    "replay_message": "string",
    "replay_device": "string",
    "replay_repeats": "Int64",
    "measured_peak": "Int64",
    "peak_error_pct": "Float64",  # measured peak against the simulated one
    "measured_within_budget": "boolean",
    "outputs_match": "boolean",  # loss and gradients against plain autograd
    "step_time_s": "Float64",  # medians of the timed runs
    "baseline_step_time_s": "Float64",
    "measured_overhead_pct": "Float64",  # median of the paired overheads against the baseline
    "measured_overhead_min_pct": "Float64",
    "measured_overhead_max_pct": "Float64",
    "measured_overhead_spread": "Float64",  # max - min of the paired overheads, in points
    "modelled_overhead_pct": "Float64",
    "baseline_measured_peak": "Int64",
    "measured_overhead_low_pct": "Float64",  # the 95% interval of the measured overhead (None under 6 pairs)
    "measured_overhead_high_pct": "Float64",
    "replay_pairs": "Int64",  # timed pairs (baseline, schedule) run
    "timing_clock": "string",  # what the times were read off: thread CPU time, wall clock
    "replay_threads": "Int64",  # CPU threads the operators ran on (empty on CUDA)
    "attribution": "string",  # JSON: every step timed in place beside the model (replay: steps:), else empty
}
SUCCESS = (Status.OPTIMAL.value, Status.FEASIBLE.value)
# Statuses that answer the question, schedule or not: a proof that nothing fits (`infeasible`, often
# instant, below the memory floor) is the solver done in its own time. Every other run produced nothing
# (it ran out of time, crashed, gave up, or erred) and counts at its time limit in solve-time means.
ANSWERED = (*SUCCESS, Status.INFEASIBLE.value)
# Statuses of runs that failed: counted as failures in the summaries.
FAILED = (Status.ERROR.value, Status.OOM.value, Status.OVER_BUDGET.value, Status.TIMEOUT.value)
TABLE = "results.parquet"
CSV = "results.csv"
TIME_SHIFT_S = 1.0
OVERHEAD_SHIFT_PCT = 1.0


def make_row(spec: dict[str, Any], outcome: dict[str, Any], output: Path | None = None) -> dict[str, Any]:
    """A full row from a run spec and what the run reported; the schedule path relative to ``output``.

    Parameters
    ----------
    spec : dict
        The run's spec (graph, method, parameters, budget, seed, repeat, limits).
    outcome : dict
        What the worker reported (status, peak, duration, times, ...); its ``params`` is ignored.
    output : Path or None
        The results folder: the schedule and graph paths inside it are stored relative to it; None
        leaves them as given.

    Returns
    -------
    dict
        Every column of `COLUMNS` (None where neither gave a value), ``params`` and ``stats`` as JSON text.
    """
    row = dict.fromkeys(COLUMNS)
    row.update({k: v for k, v in spec.items() if k in COLUMNS})
    row["params"] = params_text(spec.get("params"))
    row.update({k: v for k, v in outcome.items() if k in COLUMNS and k != "params"})
    if isinstance(row.get("stats"), dict):
        row["stats"] = json.dumps(row["stats"], default=str) if row["stats"] else None
    if output is not None:
        for column in ("schedule", "graph_path"):
            if (value := row.get(column)):
                row[column] = _relative(Path(value), output)
    return row


def _relative(path: Path, base: Path) -> str:
    """Paths inside the results folder are stored relative to it, so the folder can move."""
    try:
        return str(path.resolve().relative_to(base.resolve()))
    except ValueError:
        # Outside it: absolute, since a relative path would later be read against the folder.
        return str(path.resolve())


def build_table(rows: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """The table of ``rows``, one row per key (the last one wins), in a readable order.

    Parameters
    ----------
    rows : Iterable[dict]
        Result rows (`make_row`, the journal's).

    Returns
    -------
    pandas.DataFrame
        The columns of `COLUMNS` with their dtypes, sorted by graph size, graph, budget (largest
        fraction first), method, parameters, seed and repeat.
    """
    unique: dict[tuple, dict[str, Any]] = {}
    for row in rows:
        unique.pop(row_key(row), None)  # keep the latest occurrence, in its own position
        unique[row_key(row)] = {c: row.get(c) for c in COLUMNS}
    frame = pd.DataFrame(list(unique.values()), columns=list(COLUMNS))
    for column, kind in COLUMNS.items():
        frame[column] = _typed(frame[column], kind)
    if len(frame):
        frame = frame.sort_values(["nodes", "graph", "budget_fraction", "budget_text", "method", "params",
                                   "seed", "repeat"], ascending=[True, True, False, True, True, True, True, True],
                                  kind="stable", na_position="last").reset_index(drop=True)
    return frame


def _typed(column: pd.Series, kind: str) -> pd.Series:
    if kind == "number":
        values = pd.to_numeric(column, errors="coerce").astype("Float64")
        finite = values.dropna()
        whole = bool(len(finite)) and np.isfinite(finite.to_numpy(dtype=float)).all() and bool(
            (finite == finite.round()).all()) and float(finite.abs().max()) < 2**62
        return values.astype("Int64") if whole or not len(finite) else values
    if kind in ("Int64", "Float64"):
        return pd.to_numeric(column, errors="coerce").astype(kind)
    if kind == "boolean":
        return column.astype("boolean")
    return column.astype("string")


def write_table(frame: pd.DataFrame, output: Path, csv: bool = False) -> list[Path]:
    """Write ``results.parquet`` (and ``results.csv``) atomically; returns the paths written.

    Parameters
    ----------
    frame : pandas.DataFrame
        A results table (`build_table`).
    output : Path
        The results folder.
    csv : bool
        Write ``results.csv`` too.

    Returns
    -------
    list of Path
        The Parquet file, then the CSV file when written.
    """
    write_parquet(frame, output / TABLE)
    written = [output / TABLE]
    if csv:
        atomic_write_text(output / CSV, frame.to_csv(index=False))
        written.append(output / CSV)
    return written


def load_table(folder: str | Path) -> pd.DataFrame:
    """A results folder's table: rebuilt from its journal when there is one (it is never behind), else the Parquet.

    Rows that cannot be read (a line cut short by a kill, a row edited by hand without the
    columns that name its run) are left out, and counted in ``frame.attrs["skipped_rows"]``
    (`skipped_note` words it), so that one bad line does not stop a report or a chart.

    Parameters
    ----------
    folder : str or Path
        The results folder.

    Returns
    -------
    pandas.DataFrame
        As `build_table` makes it; ``attrs`` has ``skipped_rows`` and ``source`` (the file read).

    Raises
    ------
    RematBenchError
        The folder holds neither a journal nor a results table, or the one read is not a regular file, or
        (the table) not a Parquet table with the columns that name a run.
    """
    from remat_bench.app.sweep.journal import JOURNAL, Journal, named, readable
    from remat_bench.core.errors import RematBenchError

    folder = Path(folder)
    if (folder / JOURNAL).exists():
        journal = Journal(folder / JOURNAL)
        rows = list(journal.rows())
        skipped = journal.skipped_lines
    elif (folder / TABLE).exists():
        table = read_parquet(folder / TABLE, TABLE_KEY_COLUMNS,
                             f"it is the only record of the runs, as {JOURNAL} is not in the folder: restore either "
                             "file, or run the sweep again")
        rows, skipped = table.to_dict("records"), 0
    else:
        raise RematBenchError(f"{folder}: holds no results ({JOURNAL} or {TABLE}); run `remat-bench sweep` first")
    kept = [row for row in rows if readable(row) and named(row)]
    skipped += len(rows) - len(kept)
    frame = build_table(kept)
    frame.attrs["skipped_rows"] = skipped
    frame.attrs["source"] = str(folder / (JOURNAL if (folder / JOURNAL).exists() else TABLE))
    return frame


# The columns a row of a results table is told by (its run key and names): a table without them is none.
TABLE_KEY_COLUMNS = ("graph", "graph_sha256", "method", "params", "budget_text", "status", "repeat", "time_limit")


def write_parquet(frame: pd.DataFrame, path: Path) -> None:
    """Write a table of a results folder (the results table or the progress table) as Parquet, atomically.

    Parameters
    ----------
    frame : pandas.DataFrame
        The table, written without its index.
    path : Path
        The file; a reader sees the old file or the whole new one (`atomic_write_bytes`).
    """
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    atomic_write_bytes(path, buffer.getvalue())


def read_parquet(path: Path, columns: Sequence[str], remedy: str) -> pd.DataFrame:
    """A Parquet table of a results folder (the results table or the progress table), read whole.

    Parameters
    ----------
    path : Path
        The file.
    columns : Sequence[str]
        The columns it must have.
    remedy : str
        What to do when it cannot be read, ending the sentence.

    Returns
    -------
    pandas.DataFrame

    Raises
    ------
    RematBenchError
        One sentence naming ``path``: not a regular file, not a Parquet table, or without some of ``columns``.
    """
    from remat_bench.core.errors import RematBenchError
    from remat_bench.core.files import read_regular

    data = read_regular(path, RematBenchError, hint=remedy)
    try:
        frame = pd.read_parquet(io.BytesIO(data))
    except Exception:  # pyarrow raises kinds of its own (ArrowInvalid, OSError, ...) for bytes it cannot parse
        raise RematBenchError(f"{path}: is not a Parquet table that can be read (corrupt, cut short, or another "
                              f"kind of file); {remedy}") from None
    missing = [column for column in columns if column not in frame.columns]
    if missing:
        raise RematBenchError(f"{path}: lacks the column{'s' if len(missing) != 1 else ''} {', '.join(missing)} "
                              f"that remat-bench writes there; {remedy}")
    return frame


def skipped_note(frame: pd.DataFrame) -> str | None:
    """One sentence on the rows `load_table` left out, or None when it read every row.

    Parameters
    ----------
    frame : pandas.DataFrame
        A table `load_table` returned.

    Returns
    -------
    str or None
    """
    n = frame.attrs.get("skipped_rows", 0)
    if not n:
        return None
    return (f"{n} row{'s' if n != 1 else ''} of {frame.attrs.get('source', 'the results')} could not be read "
            "(cut short, or without the columns that name a run) and "
            f"{'are' if n != 1 else 'is'} left out")


# ---------------------------------------------------------------------- aggregates


def shifted_geometric_mean(values: Iterable[float], shift: float) -> float:
    """``exp(mean(log(x + shift))) - shift``; NaN for no values (or a value at or below ``-shift``).

    Parameters
    ----------
    values : Iterable[float]
        The values (times in s, overheads in %).
    shift : float
        In the values' unit.

    Returns
    -------
    float
        NaN too when a value is not finite.
    """
    x = np.asarray([float(v) for v in values], dtype=float)
    if not len(x) or np.any(x + shift <= 0) or not np.all(np.isfinite(x)):
        return math.nan
    return float(np.exp(np.mean(np.log(x + shift))) - shift)


def labels(frame: pd.DataFrame) -> pd.Series:
    """A name per row: the method, plus the parameters that vary among that method's rows (seeds aside).

    Parameters
    ----------
    frame : pandas.DataFrame
        A results table (`load_table`, `build_table`).

    Returns
    -------
    pandas.Series
        Strings such as ``moccasin (order=free)``, indexed as ``frame``.
    """
    out = frame["method"].astype(str).copy()
    for method, group in frame.groupby("method", sort=False):
        params = [json.loads(p) if isinstance(p, str) and p else {} for p in group["params"]]
        keys = sorted({k for p in params for k in p} - {"seed"})
        varying = [k for k in keys if len({json.dumps(p.get(k)) for p in params}) > 1]
        if varying:
            out.loc[group.index] = [
                f"{method} ({', '.join(f'{k}={p.get(k)}' for k in varying)})" for p in params]
    return out


def succeeded(frame: pd.DataFrame) -> pd.Series:
    """Which rows found a schedule within their budget (status ``optimal`` or ``feasible``).

    Parameters
    ----------
    frame : pandas.DataFrame
        A results table (`load_table`, `build_table`).

    Returns
    -------
    pandas.Series
        Booleans, indexed as ``frame``; False where the status is missing.
    """
    return frame["status"].isin(SUCCESS).fillna(False).astype(bool)


@dataclass(frozen=True)
class MethodSummary:
    label: str
    runs: int
    applicable: int
    successes: int
    timeouts: int
    failures: int
    success_rate: float
    overhead_sgm: float
    solve_time_sgm: float


def summarize(frame: pd.DataFrame) -> list[MethodSummary]:
    """Per method (label): success rate and shifted geometric means.

    Runs answered ``unsupported`` (the method does not apply to the graph) are
    left out of the rates and means. The overhead mean is over the method's
    successful runs; the solve-time mean over all its applicable runs, a run
    that answered (a schedule, or ``infeasible``: proven that none fits) at
    its own solve time, and every other run (timeout, crash, out of memory,
    error, gave up without a schedule) at its time limit (as qpbenchmark
    does), so that failing fast does not look fast, and proving fast does.

    Parameters
    ----------
    frame : pandas.DataFrame
        A results table (`load_table`, `build_table`).

    Returns
    -------
    list of MethodSummary
        One per label, in registry order of the methods; empty for an empty table.
    """
    if not len(frame):
        return []
    frame = frame.assign(label=labels(frame), ok=succeeded(frame))
    out = []
    for label, group in frame.groupby("label", sort=False):
        applicable = group[group["status"] != Status.UNSUPPORTED.value]
        ok = applicable[applicable["ok"]]
        answered = applicable["status"].isin(ANSWERED).fillna(False).astype(bool)
        times = np.where(answered, applicable["solve_time_s"].astype(float).fillna(0.0),
                         applicable["time_limit"].astype(float))
        out.append(MethodSummary(
            label=str(label),
            runs=len(group),
            applicable=len(applicable),
            successes=len(ok),
            timeouts=int((group["status"] == Status.TIMEOUT.value).sum()),
            failures=int(group["status"].isin(FAILED).sum()),
            success_rate=len(ok) / len(applicable) if len(applicable) else math.nan,
            overhead_sgm=shifted_geometric_mean(ok["overhead_pct"].astype(float), OVERHEAD_SHIFT_PCT),
            solve_time_sgm=shifted_geometric_mean(times, TIME_SHIFT_S),
        ))
    order = {name: i for i, name in enumerate(_method_order())}
    return sorted(out, key=lambda s: (order.get(s.label.split(" (")[0], len(order)), s.label))


def _method_order() -> list[str]:
    from remat_bench.app.catalog import method_names

    return method_names()


# ---------------------------------------------------------------------- schedules of a results folder


@dataclass
class ScheduleSet:
    """The best schedule of each method (label) for one graph at one budget, read from a results folder."""

    graph: Any
    budget_text: str
    budget: Any
    schedules: list[tuple[str, Any]]
    rows: pd.DataFrame


def schedules_at(folder: str | Path, frame: pd.DataFrame, graph: str | None = None,
                 budget: str | None = None, methods: Sequence[str] | None = None) -> ScheduleSet:
    """Load the schedules of one graph at one budget (the best run of each method, seeds and repeats aside).

    Without ``graph``, the first graph of the table; without ``budget``, the
    tightest budget at which the most methods found a schedule. ``methods``
    keeps only those methods (or labels).

    Parameters
    ----------
    folder : str or Path
        The results folder (schedule and graph paths in the table are relative to it).
    frame : pandas.DataFrame
        Its results table (`load_table`).
    graph : str or None
        A graph's name in the table.
    budget : str or None
        A budget as the ``budget_text`` column has it (``0.8``, ``min``).
    methods : Sequence[str] or None
        Method names or labels; None or empty for every method.

    Returns
    -------
    ScheduleSet
        The graph (loaded), the budget, and per label the fastest schedule, in registry order.

    Raises
    ------
    RematBenchError
        An unknown graph or budget, or no run that saved a schedule there.
    GraphError, ScheduleError
        A graph or schedule file that cannot be read: missing, not a regular file (a device or pipe a row
        names is not opened), or refused by its reader.
    """
    from remat_bench.core.errors import GraphError, RematBenchError, ScheduleError
    from remat_bench.core.files import check_regular
    from remat_bench.core.graph_io import load_graph
    from remat_bench.core.schedule import load_schedule

    folder = Path(folder)
    frame = frame.assign(label=labels(frame), ok=succeeded(frame))
    with_schedule = frame[frame["ok"] & frame["schedule"].notna()]
    if methods:
        with_schedule = with_schedule[with_schedule["method"].isin(methods) | with_schedule["label"].isin(methods)]
    names = list(dict.fromkeys(frame["graph"]))
    if graph is None:
        candidates = [g for g in names if g in set(with_schedule["graph"])]
        if not candidates:
            raise RematBenchError(f"{folder}: no run saved a schedule within its budget")
        graph = candidates[0]
    elif graph not in names:
        raise RematBenchError(f"{folder}: no graph named '{graph}' in the results; they are {', '.join(names)}")
    mine = with_schedule[with_schedule["graph"] == graph]
    budgets = list(dict.fromkeys(frame.loc[frame["graph"] == graph, "budget_text"]))
    if budget is None:
        if mine.empty:
            raise RematBenchError(f"{folder}: no run on graph '{graph}' saved a schedule within its budget")
        counts = mine.groupby("budget_text").agg(methods=("label", "nunique"), fraction=("budget_fraction", "min"))
        counts = counts.assign(fraction=counts["fraction"].fillna(math.inf))
        budget = str(counts.sort_values(["methods", "fraction"], ascending=[False, True]).index[0])
    elif budget not in budgets:
        raise RematBenchError(f"{folder}: graph '{graph}' has no runs at budget '{budget}'; its budgets are "
                              f"{', '.join(budgets)}")
    picked = mine[mine["budget_text"] == budget].sort_values(["duration", "solve_time_s"], kind="stable")
    picked = picked.drop_duplicates("label")
    if picked.empty:
        raise RematBenchError(f"{folder}: no run on graph '{graph}' found a schedule at budget '{budget}'")
    graph_path = Path(str(picked["graph_path"].iloc[0]))
    graph_path = graph_path if graph_path.is_absolute() else folder / graph_path
    # The paths are data: a hand-edited row may name a device or a pipe, which must not be read.
    check_regular(graph_path, GraphError, hint=f"it is the file of graph '{graph}' in the results of {folder}: "
                                                "restore that file, or run the sweep again")
    g = load_graph(graph_path)
    order = {m: i for i, m in enumerate(_method_order())}
    picked = picked.assign(rank=picked["method"].map(lambda m: order.get(m, len(order)))).sort_values(
        ["rank", "label"], kind="stable")
    schedules = []
    for row in picked.itertuples():
        path = folder / str(row.schedule)
        check_regular(path, ScheduleError, hint=f"it is the schedule of run {row.run_id} in the results of "
                                                f"{folder}: restore that file, or run the sweep again")
        schedules.append((str(row.label), load_schedule(path, g)))
    amount = picked["budget"].iloc[0]
    return ScheduleSet(g, budget, None if pd.isna(amount) else amount.item() if hasattr(amount, "item") else amount,
                       schedules, picked)
