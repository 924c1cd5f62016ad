"""Any-order bounds remembered per graph and budget, in memory and, given a folder, on disk.

The bound itself (`remat_bench.toolkit.bound`) is mathematics and knows nothing of
caching; this module keeps what it computed, so that a sweep's runs (each in its own
process), `remat-bench bound` and the methods of one run compute each bound once.
Which folder to use is the caller's choice (the application reads it from the
environment: `remat_bench.app.pipeline.bound_cache_folder`); here a folder is a plain
argument, and ``None`` keeps the bounds in memory only.

Anyone can edit the folder, so an entry read back is a claim, checked before it is
believed (`checked_bound`): every field of the type `any_order_bound` gives it, the
value between the trivial bound and what the bound can add to it (and below the
baseline's duration where the baseline fits), and "no schedule fits" only where the
budget is below a peak no schedule goes under. An entry that fails is computed again
(and overwritten). What can only be checked against a schedule is checked by the
evaluation path (`remat_bench.app.evaluate`).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import os
import stat
import sys
from pathlib import Path
from typing import Any, TypeGuard

import numpy as np

from remat_bench.core.baseline import baseline
from remat_bench.core.budget import peak_lower_bound
from remat_bench.core.errors import OutputError
from remat_bench.core.files import atomic_write_text
from remat_bench.core.graph import Graph, Number
from remat_bench.core.outcome import Termination
from remat_bench.toolkit import bound as bound_module
from remat_bench.toolkit.bound import Bound, BoundSource

# Bounds kept in memory at most; past it the memory starts again empty (the disk still answers).
MAX_IN_MEMORY = 256
# The largest entry file read: an entry names at most every node once among the values it recomputes
# (`bound.MAX_NODES` of them); a larger file was not written here.
MAX_ENTRY_BYTES = 16 * 2**20
# Float bounds are sums of durations and a solver's dual bound: compared to the limits they must lie
# within, they get this relative slack (round-off, solver tolerances); integer bounds none.
SLACK = 1e-6


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """A digest of the bound's source (`remat_bench.toolkit.bound`), the tag of every entry on disk.

    Returns
    -------
    str
        16 hex digits. An entry tagged with another digest was computed by other code and is
        never read back, so a corrected bound replaces every cached one.
    """
    return hashlib.sha256(Path(bound_module.__file__).read_bytes()).hexdigest()[:16]


class BoundCache(BoundSource):
    """Any-order bounds remembered per (graph hash, budget), in memory and optionally on disk.

    A bound computed with a time limit of ``effort`` seconds answers a request for
    ``effort`` or less, or any request when it is settled (`Bound.settled`: its 0/1
    program was solved, or it is trivial or infeasible); a request for more effort than
    a bound stopped early was given computes it again. On disk each entry is one small
    JSON file named by the graph hash and budget and tagged with `code_digest`. It
    implements `remat_bench.toolkit.bound.BoundSource`, the interface methods see: ``peek``
    and ``get`` are as documented there, a bound being known when it is in memory or on disk.

    Parameters
    ----------
    folder : str or None
        Where entries are written and read; None keeps them in memory only. The folder
        is made when the first entry is written.
    """

    def __init__(self, folder: str | None = None) -> None:
        self.folder = folder
        self._memory: dict[tuple[str, Number | None], tuple[Bound, float]] = {}

    def _path(self, sha256: str, budget: Number | None) -> Path | None:
        return Path(self.folder) / f"{sha256[:32]}-{budget}.json" if self.folder else None

    def peek(self, graph: Graph, budget: Number | None) -> Bound | None:
        hit = self._memory.get((graph.sha256, budget)) or self._read(graph, budget)
        return hit[0] if hit else None

    def get(self, graph: Graph, budget: Number | None, effort: float = 30.0) -> tuple[Bound, bool]:
        key = (graph.sha256, budget)
        hit = self._memory.get(key) or self._read(graph, budget)
        if hit and (hit[0].settled or hit[1] >= effort):
            self._memory[key] = hit
            return hit[0], True
        bound = bound_module.any_order_bound(graph, budget, effort)
        self.put(graph.sha256, budget, bound, effort)
        return bound, False

    def put(self, sha256: str, budget: Number | None, bound: Bound, effort: float) -> None:
        """Remember ``bound``, computed with ``effort`` seconds, for the graph of hash ``sha256``.

        An entry that cannot be written to disk is kept in memory only: a cache that fails
        costs time, never a run. Nor is an entry written through a symbolic link (it could
        point anywhere).

        Parameters
        ----------
        sha256 : str
            The graph's hash (`Graph.sha256`).
        budget : number or None
            In the graph's memory units; None for ``min``.
        bound : Bound
        effort : float
            The seconds it was computed with.
        """
        if len(self._memory) > MAX_IN_MEMORY:
            self._memory.clear()
        self._memory[(sha256, budget)] = (bound, effort)
        path = self._path(sha256, budget)
        if path is not None and not os.path.islink(path):
            entry = {"bound": bound.as_dict(), "effort": effort, "code": code_digest(), "graph": sha256,
                     "budget": budget}
            with contextlib.suppress(OutputError):
                atomic_write_text(path, json.dumps(entry))

    def recompute(self, graph: Graph, budget: Number | None, effort: float) -> Bound:
        """The bound of ``graph`` at ``budget`` computed afresh, the cached one forgotten in memory and on
        disk (a schedule contradicted it: an edited or stale entry).

        Parameters
        ----------
        graph : Graph
        budget : number or None
            In the graph's memory units; None for ``min``.
        effort : float
            Seconds the bound may take (`any_order_bound`'s time limit).

        Returns
        -------
        Bound
            The fresh bound, which the cache now holds.
        """
        self._memory.pop((graph.sha256, budget), None)
        path = self._path(graph.sha256, budget)
        if path is not None:
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)
        return self.get(graph, budget, effort)[0]

    def for_graph(self, graph: Graph) -> BoundCache:
        """A cache on the same folder holding this one's in-memory bounds of ``graph`` only: small enough to
        hand to a child process that solves ``graph`` (the rest of the memory stays here).

        Parameters
        ----------
        graph : Graph

        Returns
        -------
        BoundCache
        """
        out = BoundCache(self.folder)
        out._memory = {key: hit for key, hit in self._memory.items() if key[0] == graph.sha256}
        return out

    def share(self, graph: Graph, same: Graph, budget: Number | None) -> None:
        """Let ``same`` (``graph`` with its nodes in another order) use ``graph``'s cached bound at ``budget``,
        in memory: the bound does not depend on the order the nodes are listed in.

        Parameters
        ----------
        graph : Graph
        same : Graph
            ``graph`` with its nodes listed in another order (`Graph.in_order`).
        budget : number or None
            In the graph's memory units; None for ``min``.
        """
        hit = self._memory.get((graph.sha256, budget))
        if hit:
            self._memory[(same.sha256, budget)] = hit

    def _read(self, graph: Graph, budget: Number | None) -> tuple[Bound, float] | None:
        """The entry on disk, when it is this code's, of this graph and budget, and `checked_bound` believes
        it; None otherwise (it is then computed again, and overwritten)."""
        path = self._path(graph.sha256, budget)
        if path is None:
            return None
        try:
            info = os.stat(path)  # a pipe or device is never opened; a link is followed to its file
            if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_ENTRY_BYTES:
                return None
            entry = json.loads(path.read_bytes()[:MAX_ENTRY_BYTES].decode("utf-8"))
        except (OSError, ValueError, RecursionError):
            return None
        if not isinstance(entry, dict) or entry.get("code") != code_digest() or entry.get("graph") != graph.sha256:
            return None
        effort = entry.get("effort")
        if entry.get("budget") != budget or not _number(effort) or effort < 0:
            return None
        bound = checked_bound(entry.get("bound"), graph, budget)
        return None if bound is None else (bound, float(effort))


def _number(value: Any) -> TypeGuard[int | float]:
    """Whether ``value`` is an int or float a float holds (not a bool, a string, a list, NaN or infinite)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return abs(value) <= sys.float_info.max if isinstance(value, int) else math.isfinite(value)


def _count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def checked_bound(data: Any, graph: Graph, budget: Number | None) -> Bound | None:
    """A cached bound's fields (`Bound.as_dict`) as a `Bound`, or None when they are not what
    `remat_bench.toolkit.bound.any_order_bound` could give for ``graph`` at ``budget``.

    Each field has its type and range: ``recomputed`` names nodes of the graph, ``prefix_sizes`` are
    prefix lengths, counts and times are finite and not negative. Every bound is the trivial bound T
    (every node once at its fastest) plus the durations of some values computed again, each once, so
    T <= value <= 2 T, and the value is T plus the durations of ``recomputed`` when it names them; the
    trivial bound (``converged``) is T itself, given only at ``min`` and above `bound.MAX_NODES`.
    Where the baseline schedule fits the budget, no bound is above its duration. "No schedule fits"
    (value None) is believed only where it can be checked: the budget is below
    `remat_bench.core.budget.peak_lower_bound`. A number that cannot be checked without a schedule (a
    value above the optimum but within these limits) is the evaluation path's to check.

    Parameters
    ----------
    data : Any
        The ``bound`` field of an entry, as read from JSON.
    graph : Graph
    budget : Number or None
        In the graph's memory units; None for ``min``.

    Returns
    -------
    Bound or None
    """
    if not isinstance(data, dict) or data.get("termination") not in tuple(Termination):
        return None
    termination = Termination(data["termination"])
    value, recomputed, sizes = data.get("value"), data.get("recomputed"), data.get("prefix_sizes")
    peak_at_least, no_order = data.get("order_peak_at_least"), data.get("no_order_fits")
    if not (isinstance(recomputed, list) and all(isinstance(v, str) and v in graph.index for v in recomputed)
            and len(set(recomputed)) == len(recomputed)
            and isinstance(sizes, list) and all(_count(k) and 1 <= k <= graph.n for k in sizes)
            and _number(data.get("solve_time_s")) and data["solve_time_s"] >= 0
            and _count(data.get("cuts")) and _count(data.get("recompute_cuts"))
            and (peak_at_least is None or (_number(peak_at_least) and peak_at_least >= 0))
            and isinstance(no_order, bool)):
        return None
    if value is None:
        # No schedule fits: believed only where no schedule can (the budget below a proven peak bound).
        if termination is not Termination.PROVEN or budget is None or not budget < peak_lower_bound(graph).amount:
            return None
    elif not _value_in_range(value, termination, recomputed, graph, budget):
        return None
    return Bound(value=value, termination=termination, recomputed=tuple(recomputed),
                 solve_time_s=float(data["solve_time_s"]), cuts=data["cuts"], prefix_sizes=tuple(sizes),
                 order_peak_at_least=peak_at_least, no_order_fits=no_order, recompute_cuts=data["recompute_cuts"])


def _value_in_range(value: Any, termination: Termination, recomputed: list[str], graph: Graph,
                    budget: Number | None) -> bool:
    """Whether a cached bound's ``value`` is one `any_order_bound` could give (`checked_bound`)."""
    trivial = graph.min_total_duration
    if not _number(value) or (isinstance(trivial, int) and not isinstance(value, int)):
        return False  # the bound of a graph of integer durations is an integer
    slack = 0.0 if isinstance(value, int) and isinstance(trivial, int) else SLACK * max(1.0, abs(float(trivial)))
    if termination is Termination.CONVERGED or budget is None:
        # The trivial bound: `any_order_bound` answers it at ``min`` and above its size limit only (a
        # settled bound is never computed again: a trivial one where a better exists would stay).
        return (termination is Termination.CONVERGED and abs(value - trivial) <= slack
                and (budget is None or graph.n > bound_module.MAX_NODES))
    if not trivial - slack <= value <= 2 * trivial + slack:
        return False
    if recomputed:
        fastest = np.minimum.reduceat(graph.op_duration, graph.op_start[:-1])
        if abs(value - (trivial + fastest[[graph.index[v] for v in recomputed]].sum().item())) > slack:
            return False
    ran = baseline(graph)
    return not (ran.peak <= budget and value > ran.duration + slack)
