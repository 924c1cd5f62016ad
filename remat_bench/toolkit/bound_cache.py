"""Any-order bounds remembered per graph and budget, in memory and, given a folder, on disk.

The bound itself (`remat_bench.toolkit.bound`) is mathematics and knows nothing of
caching; this module keeps what it computed, so that a sweep's runs (each in its own
process), `remat-bench bound` and the methods of one run compute each bound once.
Which folder to use is the caller's choice (the application reads it from the
environment: `remat_bench.app.pipeline.bound_cache_folder`); here a folder is a plain
argument, and ``None`` keeps the bounds in memory only.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
from pathlib import Path

from remat_bench.core.errors import OutputError
from remat_bench.core.files import atomic_write_text
from remat_bench.core.graph import Graph, Number
from remat_bench.core.outcome import Termination
from remat_bench.toolkit import bound as bound_module
from remat_bench.toolkit.bound import Bound

# Bounds kept in memory at most; past it the memory starts again empty (the disk still answers).
MAX_IN_MEMORY = 256


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


class BoundCache:
    """Any-order bounds remembered per (graph hash, budget), in memory and optionally on disk.

    A bound computed with a time limit of ``effort`` seconds answers a request for
    ``effort`` or less, or any request when it is settled (`Bound.settled`: its 0/1
    program was solved, or it is trivial or infeasible); a request for more effort than
    a bound stopped early was given computes it again. On disk each entry is one small
    JSON file named by the graph hash and budget and tagged with `code_digest`. It
    implements `remat_bench.toolkit.bound.BoundSource`, the interface methods see.

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
        """The cached bound of ``graph`` at ``budget``, whatever effort it was computed with.

        Parameters
        ----------
        graph : Graph
        budget : number or None
            In the graph's memory units; None for ``min``.

        Returns
        -------
        Bound or None
            None when no bound is cached; a bound is never computed here.
        """
        hit = self._memory.get((graph.sha256, budget)) or self._read(graph.sha256, budget)
        return hit[0] if hit else None

    def get(self, graph: Graph, budget: Number | None, effort: float = 30.0) -> tuple[Bound, bool]:
        """The bound of ``graph`` at ``budget``, from the cache when it holds one good for ``effort``.

        Parameters
        ----------
        graph : Graph
        budget : number or None
            In the graph's memory units; None for ``min`` (the trivial bound).
        effort : float
            Seconds the bound may take when it is computed (`any_order_bound`'s time limit).

        Returns
        -------
        bound : Bound
        from_cache : bool
            Whether it came from the cache (memory or disk) rather than being computed now.
        """
        key = (graph.sha256, budget)
        hit = self._memory.get(key) or self._read(graph.sha256, budget)
        if hit and (hit[0].settled or hit[1] >= effort):
            self._memory[key] = hit
            return hit[0], True
        bound = bound_module.any_order_bound(graph, budget, effort)
        self.put(graph.sha256, budget, bound, effort)
        return bound, False

    def put(self, sha256: str, budget: Number | None, bound: Bound, effort: float) -> None:
        """Remember ``bound``, computed with ``effort`` seconds, for the graph of hash ``sha256``.

        An entry that cannot be written to disk is kept in memory only: a cache that fails
        costs time, never a run.

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
        if path is not None:
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

    def _read(self, sha256: str, budget: Number | None) -> tuple[Bound, float] | None:
        path = self._path(sha256, budget)
        if path is None or not path.is_file():
            return None
        try:
            entry = json.loads(path.read_text())
            if entry.get("code") != code_digest() or entry.get("graph") != sha256:
                return None
            data = entry["bound"]
            bound = Bound(value=data["value"], termination=Termination(data["termination"]),
                          recomputed=tuple(data["recomputed"]),
                          solve_time_s=float(data["solve_time_s"]), cuts=int(data["cuts"]),
                          prefix_sizes=tuple(data["prefix_sizes"]), order_peak_at_least=data["order_peak_at_least"],
                          no_order_fits=bool(data["no_order_fits"]),
                          recompute_cuts=int(data["recompute_cuts"]))
            return bound, float(entry["effort"])
        except (OSError, ValueError, KeyError, TypeError):
            return None  # an unreadable entry is recomputed (and overwritten)
