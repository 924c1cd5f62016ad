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

import numpy as np
import pandas as pd

from remat_bench.app.sweep.results import shifted_geometric_mean

Point = tuple[float, float]  # (seconds since the run started, simulated duration of the schedule then held)


def time_to_target(points: Sequence[Point], target: float) -> float:
    """The first time a schedule of duration at most ``target`` is held; ``inf`` when never."""
    for t, duration in points:
        if duration <= target:
            return float(t)
    return math.inf


def primal_gap(duration: float | None, best: float) -> float:
    """Berthold's primal gap of a schedule against the best known: 1 without a schedule, 0 at the best."""
    if duration is None:
        return 1.0
    if duration == best == 0:
        return 0.0
    return abs(duration - best) / max(abs(duration), abs(best))


def primal_integral(points: Sequence[Point], best: float, limit: float) -> float:
    """The integral of the primal gap over [0, ``limit``] seconds (a step function: each schedule's gap
    holds until the next); ``limit`` when no schedule was ever found."""
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
    count for none."""
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
    (``inf``) charged the time limit, divided by the best method's: the best is 1."""
    out = {}
    for method in times.columns:
        cap = limit[method] if isinstance(limit, Mapping) else limit
        column = times[method].to_numpy(dtype=float)
        out[method] = shifted_geometric_mean(np.where(np.isfinite(column), column, cap), shift)
    means = pd.Series(out)
    best = means.min()
    return means / best if best > 0 else means
