"""Repeated blocks: the identical layers a deep model's forward pass is made of.

A transformer repeats one block (attention and feed-forward) tens of times; a ResNet repeats its
bottlenecks within each stage. Planners that know it solve one block and apply the answer to
every copy (torchtitan's per-layer plans; Rockmate and HiRemate decompose by blocks). Here a block
is found from the graph alone, so a generated graph or another tool's file gets it as well as an
imported model: the forward nodes in file order are given a signature each (operator, memory,
workspace, how many inputs; the duration only within `DURATION_SPREAD`, as a calibrated import
measures each node apart), the period whose repetition covers the most forward nodes
is taken, and the copies are then checked node by node: the k-th node of a copy reads the k-th
nodes of the copy before it shifted by one block, or the very same nodes (a value every block
reads, such as rotary tables). Copies are kept only while that holds, so two blocks that merely
look alike in their operators are not called the same.

`find_blocks` gives, for each forward node inside the repeated region, its block and its position
in the block; planners group the nodes of one position across blocks (`Blocks.classes`) and decide
for each group at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from remat_bench.core.graph import Graph

# The fewest copies, and the fewest forward nodes per copy, that count as repeated blocks.
MIN_COPIES = 2
MIN_PERIOD = 2
# The most two copies of one node may differ in duration: a calibrated import's timings of one operator on
# equal shapes differ by noise (docs/benchmarks.md, "auto on families it was never tuned on"), while the
# convolutions of a U-Net stage that read different channel counts (weights are no nodes: only their
# durations tell) differ twofold.
DURATION_SPREAD = 1.5


@dataclass(frozen=True)
class Blocks:
    """Repeated blocks of a graph's forward pass.

    ``period`` forward nodes per block; ``copies`` blocks; ``block`` and ``position`` give, per node of
    the graph, its block (0 the first) and its place in it, -1 for nodes outside the repeated region
    (the backward nodes among them).
    """

    period: int
    copies: int
    block: np.ndarray
    position: np.ndarray

    @property
    def covered(self) -> int:
        """Forward nodes inside the repeated region."""
        return self.period * self.copies

    def classes(self, nodes: list[int] | np.ndarray) -> list[list[int]]:
        """``nodes`` grouped by their place in the block: the nodes of one place in every block together,
        each node outside the region alone; groups in the order of their first node in ``nodes``.

        Parameters
        ----------
        nodes : list of int or np.ndarray
            Node indices.

        Returns
        -------
        list of list of int
            A partition of ``nodes``; each group keeps the order of ``nodes``.
        """
        groups: dict[tuple[str, int], list[int]] = {}
        for v in (int(v) for v in nodes):
            key = ("position", int(self.position[v])) if self.position[v] >= 0 else ("node", v)
            groups.setdefault(key, []).append(v)
        return list(groups.values())


def find_blocks(graph: Graph) -> Blocks | None:
    """The repeated blocks of ``graph``'s forward pass, or None when it has none.

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    Blocks or None
        The period whose copies cover the most forward nodes (the shortest among equals), with at
        least `MIN_COPIES` copies of at least `MIN_PERIOD` nodes that read alike (module docstring).
    """
    forward = np.asarray(graph.forward_indices, dtype=np.int64)
    count = len(forward)
    if count < MIN_COPIES * MIN_PERIOD:
        return None
    codes = _signatures(graph, forward)
    where = np.full(graph.n, -1, dtype=np.int64)  # forward position of each node
    where[forward] = np.arange(count)
    best: tuple[int, int, int] | None = None  # (nodes covered, -period, start)
    for period in range(MIN_PERIOD, count // MIN_COPIES + 1):
        run, length = _longest_run(codes[:-period] == codes[period:])
        most = (length + period) // period
        if most < MIN_COPIES or (best is not None and most * period <= best[0]):
            continue  # too few copies, or no more covered than by a shorter period
        start = _phase(graph, where, run, length + period, period)
        copies = (run + length + period - start) // period
        start, copies = _checked(graph, forward, where, start, period, copies)
        if copies < MIN_COPIES:
            continue
        key = (copies * period, -period, start)
        if best is None or key[:2] > best[:2]:
            best = key
    if best is None:
        return None
    covered, period, start = best[0], -best[1], best[2]
    copies = covered // period
    block = np.full(graph.n, -1, dtype=np.int64)
    position = np.full(graph.n, -1, dtype=np.int64)
    inside = forward[start:start + covered]
    block[inside] = np.arange(covered) // period
    position[inside] = np.arange(covered) % period
    return Blocks(period, copies, block, position)


def _signatures(graph: Graph, forward: np.ndarray) -> np.ndarray:
    """One integer per forward node: equal for nodes of the same operator, memory, workspace and number of
    inputs. Not the duration: an import calibrated on the machine times each node on its own, and the copies
    of one layer (the 32 steps of an unrolled recurrent cell) can measure apart by the timer's noise; the
    copies are checked node by node (`_checked`), durations within `DURATION_SPREAD` of each other."""
    keys = [(graph.nodes[v].op, graph.memory[v].item(), graph.workspace[v].item(), len(graph.inputs[v]))
            for v in forward.tolist()]
    index: dict[tuple[object, ...], int] = {}
    return np.asarray([index.setdefault(k, len(index)) for k in keys], dtype=np.int64)


def _longest_run(equal: np.ndarray) -> tuple[int, int]:
    """(start, length) of the longest run of True in ``equal`` (the first of the longest); (0, 0) if none."""
    if not equal.any():
        return 0, 0
    padded = np.concatenate(([False], equal, [False])).astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    starts, ends = edges[::2], edges[1::2]
    k = int(np.argmax(ends - starts))
    return int(starts[k]), int(ends[k] - starts[k])


def _phase(graph: Graph, where: np.ndarray, start: int, length: int, period: int) -> int:
    """Where the first copy begins in a periodic run of ``length`` forward nodes from ``start``: of the
    offsets that keep the most whole copies, the one whose copies read the fewest values of the copy before
    (a layer's boundary is where the fewest values cross: the residual stream of a transformer)."""
    best: tuple[int, int, int] | None = None  # (-copies, values crossing, offset)
    for offset in range(period):
        copies = (length - offset) // period
        if copies < MIN_COPIES:
            break
        first = start + offset
        crossing: set[int] = set()
        for p in range(first + period, first + 2 * period):  # the values of the first copy the second reads
            v = graph.forward_indices[p]
            crossing.update(u for u in graph.inputs[v] if first <= where[u] < first + period)
        key = (-copies, len(crossing), offset)
        if best is None or key < best:
            best = key
    return start if best is None else start + best[2]


def _checked(graph: Graph, forward: np.ndarray, where: np.ndarray, start: int, period: int,
             copies: int) -> tuple[int, int]:
    """The longest run of consecutive copies (its first copy's start, and how many) in which every node
    reads what the same node of the copy before reads, shifted by one block, or the same nodes."""
    good = [True] * copies  # good[k]: copy k reads alike copy k - 1 (copy 0: always)
    for k in range(1, copies):
        for j in range(period):
            a = int(forward[start + k * period + j])
            b = int(forward[start + (k - 1) * period + j])
            if not _reads_alike(graph, where, a, b, period, start):
                good[k] = False
                break
    best_first, best_len, first = 0, 0, 0
    for k in range(copies):
        if k > 0 and not good[k]:
            first = k
        if k - first + 1 > best_len:
            best_first, best_len = first, k - first + 1
    return start + best_first * period, best_len


def _reads_alike(graph: Graph, where: np.ndarray, a: int, b: int, period: int, start: int) -> bool:
    """Whether node ``a`` reads the inputs of node ``b`` (one block before it) shifted by one block, or the
    same ones from before the first copy (a value every copy reads), input by input, and takes about as long
    (`DURATION_SPREAD`)."""
    ins_a, ins_b = graph.inputs[a], graph.inputs[b]
    if len(ins_a) != len(ins_b):
        return False
    da, db = float(graph.duration[a]), float(graph.duration[b])
    if max(da, db) > DURATION_SPREAD * min(da, db):
        return False
    for ua, ub in zip(ins_a, ins_b):
        if ua == ub and where[ub] < start:
            continue
        if where[ub] < 0 or where[ua] != where[ub] + period:
            return False
    return True
