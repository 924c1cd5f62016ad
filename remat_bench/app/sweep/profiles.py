"""How fast each method gets there: the measures solver benchmarks compare solvers by.

A run's progress is its improving schedules over time, each scored by the shared
simulator: ``(time_s, duration)`` points with durations that never rise. From them:

- **time to target** (`time_to_target`): when a run first holds a schedule within a
  target (e.g. within 1% of the best duration any run found on the instance);
- **performance profile** (Dolan and Moré 2002, `performance_profile`): per method, the
  share of instances it reaches the target within tau times the fastest method's time
  (a run that never reaches it counts as infinitely slow);
- **shifted geometric mean** of times (`scaled_shifted_geometric_means`, as qpbenchmark
  reports it): failures charged the time limit, shift 10 s by default, scaled so that the
  best method is 1;
- **primal integral** (Berthold 2013, `primal_integral`): the integral over the time
  limit of the primal gap, 1 until the first schedule, then
  ``(duration - best) / duration`` (0 when both are 0).

References
----------
E. D. Dolan and J. J. Moré, "Benchmarking optimization software with performance
profiles", Mathematical Programming 91 (2002). T. Berthold, "Measuring the impact of
primal heuristics", Operations Research Letters 41 (2013).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from remat_bench.app.sweep.results import labels, read_parquet, shifted_geometric_mean, write_parquet

Point = tuple[float, float]  # (seconds since the run started, simulated duration of the schedule then held)


def time_to_target(points: Sequence[Point], target: float) -> float:
    """The first time a schedule of duration at most ``target`` is held; ``inf`` when never.

    Parameters
    ----------
    points : Sequence[Point]
        A run's ``(time_s, duration)`` points, in time order.
    target : float
        A duration.

    Returns
    -------
    float
        Seconds since the run started.
    """
    for t, duration in points:
        if duration <= target:
            return float(t)
    return math.inf


def primal_gap(duration: float | None, best: float) -> float:
    """Berthold's primal gap of a schedule against the best known: 1 without a schedule, 0 at the best.

    Parameters
    ----------
    duration : float or None
        The schedule's duration; None without a schedule.
    best : float
        The best duration known on the instance.

    Returns
    -------
    float
        ``|duration - best| / max(|duration|, |best|)``, between 0 and 1.
    """
    if duration is None:
        return 1.0
    if duration == best == 0:
        return 0.0
    return abs(duration - best) / max(abs(duration), abs(best))


def primal_integral(points: Sequence[Point], best: float, limit: float) -> float:
    """The integral of the primal gap over [0, ``limit``] seconds (a step function: each schedule's gap
    holds until the next); ``limit`` when no schedule was ever found.

    Parameters
    ----------
    points : Sequence[Point]
        A run's ``(time_s, duration)`` points, in time order (times are clipped to [0, ``limit``]).
    best : float
        The best duration known on the instance.
    limit : float
        The time limit, in s.

    Returns
    -------
    float
        In s; divided by ``limit``, a share between 0 and 1.
    """
    total, held, since = 0.0, None, 0.0
    for t, duration in points:
        t = min(max(float(t), 0.0), limit)
        total += primal_gap(held, best) * (t - since)
        held, since = duration, t
    return total + primal_gap(held, best) * (limit - since)


def performance_profile(times: pd.DataFrame, taus: Iterable[float]) -> pd.DataFrame:
    """Dolan-Moré profiles: ``times`` has one row per instance and one column per method (``inf`` where
    the method failed); the result one row per tau and one column per method: the share of instances
    on which the method's time is at most tau times the fastest method's. Instances no method solved
    count for none.

    Parameters
    ----------
    times : pandas.DataFrame
        Seconds, one row per instance, one column per method (`times_to_target`).
    taus : Iterable[float]
        The ratios to the fastest time at which the shares are taken.

    Returns
    -------
    pandas.DataFrame
        Shares between 0 and 1, indexed by ``tau``, with the columns of ``times``.
    """
    values = times.to_numpy(dtype=float)
    fastest = np.min(values, axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        # A zero time beside a zero fastest time is ratio 1; any time beside a zero fastest is infinitely slower.
        ratios = np.where(values == fastest, 1.0, values / fastest)
    ratios[~np.isfinite(fastest).repeat(values.shape[1], axis=1)] = math.inf
    taus = list(taus)
    shares = [(ratios <= tau).mean(axis=0) for tau in taus]
    return pd.DataFrame(shares, index=pd.Index(taus, name="tau"), columns=times.columns)


def scaled_shifted_geometric_means(times: pd.DataFrame, limit: float | Mapping[str, float],
                                   shift: float = 10.0) -> pd.Series:
    """Per method (column), the shifted geometric mean of its times over the instances (rows), a failure
    (``inf``) charged the time limit, divided by the best method's: the best is 1.

    Parameters
    ----------
    times : pandas.DataFrame
        Seconds, one row per instance, one column per method (`times_to_target`).
    limit : float or Mapping[str, float]
        The time limit in s a failure is charged: one for all, or per method.
    shift : float
        The shift, in s.

    Returns
    -------
    pandas.Series
        Per method; unscaled when the best mean is not above 0.
    """
    out = {}
    for method in times.columns:
        cap = limit[method] if isinstance(limit, Mapping) else limit
        column = times[method].to_numpy(dtype=float)
        out[method] = shifted_geometric_mean(np.where(np.isfinite(column), column, cap), shift)
    means = pd.Series(out)
    best = means.min()
    return means / best if best > 0 else means


# ---------------------------------------------------------------------- over a sweep's runs

# The columns a progress table has (one row per improving schedule of a run; `remat_bench.app.sweep`
# writes it as progress.parquet beside results.parquet): which run, when, and what the schedule was.
PROGRESS_COLUMNS = ("run_id", "time_s", "duration", "peak", "overhead_pct", "source", "bound")
# Graph sizes the report groups instances by (nodes), as the paper's figures do: small, medium, large.
SIZE_CLASSES = ((0, 300, "under 300 nodes"), (300, 1000, "300 to 999 nodes"), (1000, math.inf, "1,000 nodes and more"))


def instances(results: pd.DataFrame) -> pd.DataFrame:
    """One row per instance (graph and budget) of a results table: its best simulated duration over every
    run that found a schedule within the budget (NaN when none did), nodes, and baseline duration.

    Parameters
    ----------
    results : pandas.DataFrame
        A results table (`remat_bench.app.sweep.results.load_table`).

    Returns
    -------
    pandas.DataFrame
        Indexed by ``graph`` and ``budget_text``; columns ``nodes``, ``baseline_duration`` and ``best``.
    """
    found = results[results["status"].isin(("optimal", "feasible"))]
    best = found.groupby(["graph", "budget_text"], sort=False)["duration"].min().rename("best")
    keys = results.groupby(["graph", "budget_text"], sort=False).agg(nodes=("nodes", "first"),
                                                                   baseline_duration=("baseline_duration", "first"))
    return keys.join(best)


def schedule_points(progress: pd.DataFrame) -> pd.DataFrame:
    """The points of a progress table that hold a schedule (not those that only record a bound).

    Parameters
    ----------
    progress : pandas.DataFrame
        A progress table (`PROGRESS_COLUMNS`).

    Returns
    -------
    pandas.DataFrame
    """
    return progress[progress["duration"].notna()]


def times_to_target(results: pd.DataFrame, progress: pd.DataFrame, within_pct: float,
                    label: pd.Series | None = None) -> pd.DataFrame:
    """Seconds each method (a column, by ``label``: default the method) took to hold a schedule within
    ``within_pct`` percent of the instance's best duration (a row per instance); ``inf`` for a run that
    never did. With several runs of one method on an instance (seeds, repeats), their median.

    Parameters
    ----------
    results : pandas.DataFrame
        A results table (`remat_bench.app.sweep.results.load_table`).
    progress : pandas.DataFrame
        A progress table (`PROGRESS_COLUMNS`).
    within_pct : float
        The target: within this many percent of the instance's best duration.
    label : pandas.Series or None
        A column name per row of ``results``; None for `remat_bench.app.sweep.results.labels`.

    Returns
    -------
    pandas.DataFrame
        Seconds, indexed by ``graph`` and ``budget_text``, one column per label; ``inf`` where a
        method has no run on an instance. A run without progress points counts at its solve time.
    """
    names = label if label is not None else labels(results)
    best = instances(results)["best"]
    progress = schedule_points(progress)
    points = {run: list(zip(g["time_s"].astype(float), g["duration"].astype(float), strict=True))
              for run, g in progress.sort_values("time_s").groupby("run_id", sort=False)}
    rows: dict[tuple[str, str], dict[str, list[float]]] = {}
    for index, run in results.iterrows():
        key = (run["graph"], run["budget_text"])
        target = best.get(key)
        seconds = math.inf
        if target is not None and not pd.isna(target) and run["status"] in ("optimal", "feasible"):
            seconds = time_to_target(points.get(run["run_id"], []) or
                                     [(float(run["solve_time_s"]), float(run["duration"]))],
                                     float(target) * (1 + within_pct / 100))
        rows.setdefault(key, {}).setdefault(names[index], []).append(seconds)
    table = pd.DataFrame({key: {m: float(np.median(v)) for m, v in per.items()} for key, per in rows.items()}).T
    table.index.names = ["graph", "budget_text"]
    return table.fillna(math.inf)


def speed_summary(results: pd.DataFrame, progress: pd.DataFrame, within_pct: float = 1.0,
                  shift_s: float = 10.0) -> pd.DataFrame:
    """Per method: success rate (a schedule the simulator confirms within the budget, over the runs that
    applied), the shifted geometric mean of the time to within ``within_pct`` percent of the instance's
    best (failures charged the run's time limit; the best method is 1), the mean primal integral over
    the time limit as a share of it (0: the best schedule at once; 1: nothing all along), and the median
    time to a first schedule.

    Parameters
    ----------
    results : pandas.DataFrame
        A results table (`remat_bench.app.sweep.results.load_table`).
    progress : pandas.DataFrame
        A progress table (`PROGRESS_COLUMNS`).
    within_pct : float
        The target: within this many percent of the instance's best duration.
    shift_s : float
        The shift of the geometric mean, in s.

    Returns
    -------
    pandas.DataFrame
        Indexed by ``method`` (its label); columns ``runs``, ``success_rate``, ``time_to_target_sgm``,
        ``primal_integral`` and ``first_schedule_s`` (NaN where there is nothing to take it over).
    """

    names = labels(results)
    applicable = results[~results["status"].isin(("unsupported",))]
    best = instances(results)["best"]
    ttt = times_to_target(results, progress, within_pct, names)
    limits = {m: float(results.loc[names == m, "time_limit"].max()) for m in ttt.columns}
    sgm = scaled_shifted_geometric_means(ttt, limits, shift_s)
    by_run = {run: g.sort_values("time_s") for run, g in schedule_points(progress).groupby("run_id", sort=False)}
    rows = []
    for method in ttt.columns:
        mine = applicable[names.loc[applicable.index] == method]
        integrals, firsts = [], []
        for _, run in mine.iterrows():
            limit = float(run["time_limit"])
            target = best.get((run["graph"], run["budget_text"]))
            if target is None or pd.isna(target) or not limit:
                continue
            points = by_run.get(run["run_id"])
            pts = [] if points is None else list(zip(points["time_s"].astype(float), points["duration"].astype(float),
                                                     strict=True))
            if not pts and run["status"] in ("optimal", "feasible"):
                pts = [(float(run["solve_time_s"]), float(run["duration"]))]
            integrals.append(primal_integral(pts, float(target), limit) / limit)
            if pts:
                firsts.append(pts[0][0])
        found = mine["status"].isin(("optimal", "feasible"))
        rows.append({"method": method, "runs": len(mine),
                     "success_rate": float(found.mean()) if len(mine) else math.nan,
                     "time_to_target_sgm": float(sgm[method]),
                     "primal_integral": float(np.mean(integrals)) if integrals else math.nan,
                     "first_schedule_s": float(np.median(firsts)) if firsts else math.nan})
    return pd.DataFrame(rows).set_index("method")


def size_class(nodes: float) -> str:
    """The `SIZE_CLASSES` name a graph of ``nodes`` nodes falls in.

    Parameters
    ----------
    nodes : float
        The graph's number of nodes.

    Returns
    -------
    str
        Such as ``under 300 nodes``.
    """
    return next(name for low, high, name in SIZE_CLASSES if low <= nodes < high)


PROGRESS_TABLE = "progress.parquet"


def build_progress(rows: Iterable[Mapping]) -> pd.DataFrame:
    """The progress table of a sweep's result rows: one row per point, keyed by ``run_id``.

    A run's points travel in its result row (``progress``, as ``solve --json`` prints them), so
    they are journalled with it, atomically, and resume as it does; a run recorded twice keeps its
    latest row's points (`remat_bench.app.sweep.results.build_table` keeps that row too).

    Parameters
    ----------
    rows : iterable of dict
        Result rows (the journal's), each with ``run_id`` and, when the run recorded any, ``progress``.

    Returns
    -------
    pandas.DataFrame
        Columns `PROGRESS_COLUMNS`; empty when no run recorded progress.
    """
    latest: dict[str, list] = {}
    for row in rows:
        run = row.get("run_id")
        if isinstance(run, str):
            points = row.get("progress")
            latest.pop(run, None)
            latest[run] = points if isinstance(points, list) else []
    records = [{"run_id": run, **{c: point.get(c) for c in PROGRESS_COLUMNS[1:]}}
               for run, points in latest.items() for point in points
               if isinstance(point, Mapping) and point.get("time_s") is not None]
    return _typed_progress(pd.DataFrame(records, columns=list(PROGRESS_COLUMNS)))


def _typed_progress(frame: pd.DataFrame) -> pd.DataFrame:
    """The progress table's column types, whatever its source held (a value that is no number is missing)."""
    frame = frame.copy()
    for column in ("time_s", "duration", "peak", "overhead_pct", "bound"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype("Float64")
    for column in ("run_id", "source"):
        frame[column] = frame[column].astype("string")
    return frame


def write_progress(frame: pd.DataFrame, output: Path) -> Path:
    """Write ``progress.parquet`` atomically beside the results table.

    Parameters
    ----------
    frame : pandas.DataFrame
        A progress table (`build_progress`).
    output : Path
        The results folder.

    Returns
    -------
    Path
        The file written.
    """
    write_parquet(frame, output / PROGRESS_TABLE)
    return output / PROGRESS_TABLE


def load_progress(folder: str | Path) -> pd.DataFrame | None:
    """A results folder's progress table: rebuilt from its journal when there is one (it is never behind),
    else the Parquet; None when no run of the sweep recorded progress.

    Parameters
    ----------
    folder : str or Path
        The results folder.

    Returns
    -------
    pandas.DataFrame or None
        Columns `PROGRESS_COLUMNS`.

    Raises
    ------
    RematBenchError
        The file read is not a regular file, or (the Parquet) not a Parquet table with `PROGRESS_COLUMNS`.
    """
    from remat_bench.app.sweep.journal import JOURNAL, Journal

    folder = Path(folder)
    if (folder / JOURNAL).exists():
        frame = build_progress(Journal(folder / JOURNAL).rows())
    elif (folder / PROGRESS_TABLE).exists():
        frame = _typed_progress(read_parquet(
            folder / PROGRESS_TABLE, PROGRESS_COLUMNS,
            f"it is rebuilt from {JOURNAL}, which is not in the folder: restore that, remove this file to go "
            "without the runs' progress, or run the sweep again")[list(PROGRESS_COLUMNS)])
    else:
        return None
    return None if frame.empty else frame
