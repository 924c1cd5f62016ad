"""Runs by name, as `solve` and sweeps ask for them: one method, or several side by side.

The work of a run (applicability, the any-order bound, the method, clean-up, simulation,
judging) is `remat_bench.app.evaluate`; this module resolves a name (`remat_bench.app.catalog`:
a registered method or the portfolio) and a budget, gives the run its bound cache (the user's,
on the folder the environment names: `bound_cache_folder`), and, for several methods, computes
the bound once and evaluates each in a child process.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from remat_bench.app.catalog import get_method
from remat_bench.app.evaluate import RunResult, bound_effort, evaluate, evaluate_in_child, parse_method_params
from remat_bench.core.budget import Budget, parse_budget
from remat_bench.core.errors import MethodError
from remat_bench.core.files import cache_dir
from remat_bench.core.graph import Graph
from remat_bench.core.machine import usable_cores
from remat_bench.core.progress import Relabelled, Watcher
from remat_bench.methods import Method
from remat_bench.methods.base import SolveContext
from remat_bench.toolkit.bound import BoundSource
from remat_bench.toolkit.bound_cache import BoundCache

# The environment variable naming the bound cache's folder (``off`` for none).
BOUND_CACHE_SETTING = "REMAT_BENCH_BOUND_CACHE"


def bound_cache_folder() -> str | None:
    """The folder of the user's bound cache: $REMAT_BENCH_BOUND_CACHE, else ``<user cache>/bounds``.

    The environment is read here, where a command starts a run, and not by the cache
    (`remat_bench.toolkit.bound_cache`) or the evaluation path, which take what they are given:
    a sweep's worker, auto's members and candidate schedules then share the cache they are handed.

    Returns
    -------
    str or None
        None when the setting is empty, ``off``, ``0`` or ``no`` (bounds kept in memory only).
    """
    setting = os.environ.get(BOUND_CACHE_SETTING)
    if setting is not None:
        return None if setting.strip().lower() in ("", "off", "0", "no") else setting
    return str(cache_dir() / "bounds")


def user_bound_cache() -> BoundCache:
    """The user's bound cache, on `bound_cache_folder` (a new object on each call; the folder is shared).

    Returns
    -------
    BoundCache
        In memory only when the setting turns the folder off.
    """
    return BoundCache(bound_cache_folder())


def resolve_method(name: str, params: dict[str, Any]) -> tuple[type[Method], dict[str, Any]]:
    """The method class and its full parameter set; raises MethodError for anything unknown, mistyped or
    missing here (exit status 2 before any work).

    Parameters
    ----------
    name : str
        A registered method's name, or ``auto``.
    params : dict
        The method's parameters as given (text or values).

    Returns
    -------
    tuple of (type[Method], dict)
        The method class, and every declared parameter typed (with ``impl`` when given).

    Raises
    ------
    MethodError
        An unknown name, an undeclared or mistyped parameter, or a method whose requirements are
        not installed here.
    """
    cls = get_method(name)
    parsed = parse_method_params(cls, params)
    ok, why = cls.available()
    if not ok:
        raise MethodError(why)
    return cls, parsed


def run(graph: Graph, method: str, budget: str | float | Budget, time_limit: float | None = None,
        params: dict[str, Any] | None = None, bound: bool = True, bounds: BoundSource | None = None,
        peak_only: bool = False, gap: float | None = None, watch: Watcher | None = None) -> RunResult:
    """``method`` (a name) on ``graph`` at ``budget`` (text, a number, or parsed), judged by `evaluate`.

    Parameters
    ----------
    graph : Graph
        The graph to solve.
    method : str
        A registered method's name, or ``auto``.
    budget : str or float or Budget
        As ``solve --budget`` takes it (``0.8``, ``12GiB``, ``min``), or parsed.
    time_limit : float or None
        Seconds for the run, the any-order bound included.
    params : dict or None
        The method's parameters as given.
    bound, peak_only, gap
        As `evaluate` takes them.
    bounds : BoundSource or None
        The bound cache to share (default: the user's on-disk cache).
    watch : Watcher or None
        Sees the run's progress points as they come (under the method's name).

    Returns
    -------
    RunResult
        Every outcome, a failing method included.

    Raises
    ------
    MethodError, BudgetError
        Bad requests (exit status 2 on the command line).
    """
    cls, _ = resolve_method(method, params or {})
    if not isinstance(budget, Budget):
        budget = parse_budget(str(budget), graph)
    context = SolveContext(bounds=bounds if bounds is not None else user_bound_cache(),
                           watch=None if watch is None else Relabelled(watch, method))
    return evaluate(graph, cls, budget, time_limit, params, bound=bound, context=context, peak_only=peak_only,
                    gap=gap)


def jobs_at_once(jobs: int, runs: int) -> tuple[int, str | None]:
    """How many of ``runs`` side-by-side runs go at once: ``jobs``, at most one per core this process may use
    (`remat_bench.core.machine.usable_cores`) and one per run.

    More child processes than cores finish no sooner: they share the cores, and each run's time
    limit and solve time (which the comparison shows) stretch with the sharing; ``-j 100000``
    started one child per method at once.

    Parameters
    ----------
    jobs : int
        The runs at once asked for (``solve -j``).
    runs : int
        How many runs there are (the methods).

    Returns
    -------
    tuple of (int, str or None)
        The runs at once, and one sentence when ``jobs`` was cut to the cores (None otherwise).
    """
    cores = usable_cores()
    at_once = max(1, min(jobs, runs, cores))
    if jobs <= cores or runs <= 1:
        return at_once, None
    return at_once, (f"--jobs {jobs} is more than the {cores} core{'s' if cores != 1 else ''} here; "
                     f"running {at_once} at a time")


def run_many(graph: Graph, methods: list[str], budget: Budget, time_limit: float | None,
             params: dict[str, dict[str, Any]], *, bound: bool = True, jobs: int = 1,
             bounds: BoundSource | None = None, gap: float | None = None,
             watch: Watcher | None = None) -> list[RunResult]:
    """Each of ``methods`` on ``graph`` at ``budget`` (parsed), results in ``methods``' order: one
    after another here, or with ``jobs`` above 1, ``jobs`` at a time in child processes
    (`evaluate_in_child`).

    Side by side, the any-order bound is computed once, here, before the methods start (each run
    then reads it from the cache, and its bound time is this one's); each run's share of the limit
    is what is left after it, as when a run computes the bound itself. Ctrl-C stops every child.

    ``gap`` (points of overhead) stops each run once it is that close to a valid bound (`evaluate`);
    ``watch`` sees each run's progress points as they come, under the run's method name.

    Parameters
    ----------
    graph : Graph
    methods : list of str
        Registered method names, or ``auto``.
    budget : Budget
        Parsed (`remat_bench.core.budget.parse_budget`).
    time_limit : float or None
        Seconds for each run, the any-order bound included; None for no limit.
    params : dict
        Each method's parameters as given, by method name (a method not named gets its defaults).
    bound : bool
        As `evaluate` takes it.
    jobs : int
        How many runs at a time, at most one per core (`jobs_at_once`); 1 runs them one after another
        in this process.
    bounds : BoundSource or None
        The bound cache to share (default: the user's on-disk cache).
    gap : float or None
        In points of overhead; None or 0: each run stops only where its answer is proven.
    watch : Watcher or None
        Sees every run's progress points.

    Returns
    -------
    list of RunResult
        One per method, in ``methods``' order.

    Raises
    ------
    MethodError
        An unknown method name, or a parameter a method refuses.
    """
    bounds = bounds if bounds is not None else user_bound_cache()
    classes = {m: get_method(m) for m in methods}
    jobs, _ = jobs_at_once(jobs, len(methods))  # the caller says so when it cut a request (`solve`)

    def context(method: str) -> SolveContext:
        return SolveContext(bounds=bounds, watch=None if watch is None else Relabelled(watch, method))

    if jobs <= 1 or len(methods) <= 1:
        return [evaluate(graph, classes[m], budget, time_limit, params.get(m, {}), bound=bound, context=context(m),
                         gap=gap) for m in methods]
    bound_time = 0.0
    if bound:
        start = time.perf_counter()
        bounds.get(graph, budget.amount, bound_effort(time_limit))
        bound_time = time.perf_counter() - start
        if time_limit is not None:
            time_limit = max(time_limit - bound_time, 0.1 * time_limit)

    def one(method: str) -> RunResult:
        result = evaluate_in_child(graph, classes[method], budget, time_limit, params.get(method, {}), bound=bound,
                                   context=context(method), gap=gap)
        result.bound_time_s = bound_time if bound else 0.0
        return result

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(one, methods))
