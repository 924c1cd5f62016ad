"""Candidate schedules: how one method uses others' answers (warm starts, hints, fallbacks).

An exact method's bottleneck is often its first incumbent: a schedule from a fast
heuristic, accepted by its model, starts it (Checkmate's MILP found none in 300 s
on random_layered_n100 at 0.8 without one; docs/benchmarks.md). A method asks for
candidates here, by name, with the share of its time each may take; it never
imports another method. Names:

- ``baseline``: every node once in file order (`remat_bench.core.simulate`);
- ``shaved``: the input order with its memory peaks shaved to the budget
  (`remat_bench.toolkit.improve.shaved_order`; params ``max_copies``, ``cap_s``);
- any registered method (``greedy``, ``chen``, ``kusumoto``, ``checkmate-lp``...),
  run through the registry with the given parameters.

Each source gets ``share`` of the time left when it starts (at least ``floor``
seconds). A schedule is kept when it is valid, within the budget, and accepted
by the caller's ``accept`` (a check of the caller's own space: MONeT's shape,
Checkmate's stages). What each source gave, and whether it was used, is recorded
in the caller's stats under ``candidates``, so a run's record says where its
warm start came from.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from remat_bench.core.control import Deadline
from remat_bench.core.graph import Graph, Number
from remat_bench.core.schedule import Schedule
from remat_bench.core.simulate import baseline_schedule, place_frees, simulate


@dataclass(frozen=True)
class Source:
    """One named source of candidates, with its parameters and its share of the time left."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)
    share: float = 1.0
    floor: float = 0.0  # seconds it gets however little time is left (the answer of last resort)


@dataclass
class Candidate:
    source: str
    schedule: Schedule
    peak: Number
    duration: Number


def candidate_schedules(graph: Graph, budget: Number | None, deadline: Deadline, sources: Sequence[Source], *,
                        accept: Callable[[Schedule], bool] | None = None,
                        stats: dict[str, Any] | None = None, over_budget: bool = False) -> list[Candidate]:
    """The schedules ``sources`` give within ``budget``, fastest first (least peak first for ``min``).

    ``over_budget`` keeps valid schedules above the budget too (hints for a search that
    minimises max(peak, budget) first, as Moccasin's phase 1 does).
    """
    found: list[Candidate] = []
    record = stats.setdefault("candidates", []) if stats is not None else []
    for source in sources:
        remaining = deadline.remaining()
        limit = None if remaining is None else max(source.share * remaining, source.floor)
        if limit is not None and limit <= 0.01:
            record.append({"source": source.name, "skipped": "no time left"})
            continue
        start = time.perf_counter()
        entry: dict[str, Any] = {"source": source.name}
        try:
            schedule = _run(graph, budget, source, limit)
        except Exception as exc:  # a failing source only costs a candidate, and says so
            schedule = None
            entry["error"] = f"{type(exc).__name__}: {exc}"
        entry["seconds"] = round(time.perf_counter() - start, 3)
        if schedule is not None:
            sim = simulate(graph, schedule)
            entry["within_budget"] = bool(sim.valid and (budget is None or sim.peak <= budget))
            usable = entry["within_budget"] or (over_budget and sim.valid)
            entry["accepted"] = usable and (accept is None or bool(accept(schedule)))
            if entry["accepted"]:
                found.append(Candidate(source.name, schedule, sim.peak, sim.duration))
        else:
            entry.setdefault("found", False)
        record.append(entry)
    key = (lambda c: (c.duration, c.peak)) if budget is not None else (lambda c: (c.peak, c.duration))
    return sorted(found, key=key)


def mark_used(stats: dict[str, Any], source: str | None) -> None:
    """Record which candidate the caller started from (None: none of them)."""
    stats["warm_start"] = source


def _run(graph: Graph, budget: Number | None, source: Source, limit: float | None) -> Schedule | None:
    if source.name == "baseline":
        return baseline_schedule(graph)
    if source.name == "shaved":
        if budget is None:
            return None
        from remat_bench.toolkit.improve import shaved_order

        shaved = shaved_order(graph, budget, Deadline(limit), **source.params)
        return place_frees(graph, shaved, np.zeros(len(shaved), dtype=np.int64), drop_unused=False)
    from remat_bench.methods import get_method

    method = get_method(source.name)()
    if method.skip(graph, budget) is not None:
        return None
    answer = method.solve(graph, budget, limit, **method.parse_params(source.params))
    return answer.schedule if answer.status.found_schedule else None
