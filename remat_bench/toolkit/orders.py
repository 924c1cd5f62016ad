"""Topological orders without recomputation: the peak of an order, a memory-aware list scheduler,
and a local search over orders (`best_order` in `remat_bench.toolkit.order_search` puts them together).

The local search is written here because no maintained library searches
permutations under precedence; each move is scored by a vectorised
O(n + edges) profile (`OrderProfile`).
"""

from __future__ import annotations

import time

import numpy as np

from remat_bench.core.cleanup import place_frees
from remat_bench.core.graph import Graph, Number
from remat_bench.core.simulate import simulate


def edges(graph: Graph) -> tuple[np.ndarray, np.ndarray]:
    """Every edge once, as (producer, consumer) index arrays, grouped by producer in node order.

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    tuple of np.ndarray
        ``src`` and ``dst``, int64.
    """
    src = np.repeat(np.arange(graph.n, dtype=np.int64), [len(c) for c in graph.consumers])
    dst = np.fromiter((v for c in graph.consumers for v in c), dtype=np.int64, count=len(src))
    return src, dst


def order_peak(graph: Graph, order: list[int] | np.ndarray) -> Number:
    """Peak of computing ``order`` once each, every value freed after its last use.

    Parameters
    ----------
    graph : Graph
    order : list of int or np.ndarray
        A topological order of the node indices, each once; each node with its first implementation.

    Returns
    -------
    Number
        The peak, in the graph's memory units.
    """
    nodes = np.asarray(order, dtype=np.int64)
    return simulate(graph, place_frees(graph, nodes, np.zeros(len(nodes), dtype=np.int64))).peak


def sequence_memory(graph: Graph, nodes: list[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Memory at each computation of a compute sequence whose frees are placed at last use, and when each copy is freed.

    The sequence is scored as `remat_bench.core.cleanup.place_frees` (``drop_unused=False``) and the shared
    simulator would score it, without building the schedule: a copy (the computation at position p) is resident
    from p through the position of its last reader (each read is of the input's latest copy), through p alone
    when nothing reads it, and to the end when it is an output's last copy; the memory at position j is the
    fixed memory, the copies resident at j and the workspace of j's computation. Local searches that score
    thousands of sequences call it (`remat_bench.toolkit.improve.shave_peaks`): it takes a fraction of the time
    of building and simulating each schedule (equal to it step for step: tests/test_improve.py).

    Parameters
    ----------
    graph : Graph
    nodes : list of int or np.ndarray
        Node indices, each computed with its first implementation; every input of a computation computed at
        some earlier position.

    Returns
    -------
    memory : np.ndarray
        Per position, in the graph's memory units (the simulator's step memory at that compute step).
    free_at : np.ndarray
        int64, per position, the last position at which its copy is resident (len(nodes) - 1 for an output's
        last copy).
    """
    seq = np.asarray(nodes, dtype=np.int64)
    L = len(seq)
    ops = graph.op_start[seq]
    starts = graph.op_in_ptr[ops]
    counts = graph.op_in_ptr[ops + 1] - starts
    total = int(counts.sum())
    free_at = np.arange(L, dtype=np.int64)
    if total:
        reader = np.repeat(np.arange(L, dtype=np.int64), counts)
        offsets = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
        read = graph.op_in_idx[np.repeat(starts, counts) + offsets]
        by_node = np.lexsort((np.arange(L), seq))  # positions by (node, position)
        keys = seq[by_node] * (L + 1) + by_node
        copy = by_node[np.searchsorted(keys, read * (L + 1) + reader) - 1]  # the latest copy before the read
        np.maximum.at(free_at, copy, reader)
    outputs = np.asarray(graph.output_indices, dtype=np.int64)
    if len(outputs):
        last = np.full(graph.n, -1, dtype=np.int64)
        last[seq] = np.arange(L)  # the last assignment of a repeated index wins
        held = last[outputs]
        free_at[held[held >= 0]] = L - 1
    mem = graph.memory[seq]
    delta = np.zeros(L + 1, dtype=np.result_type(mem, np.int64))
    np.add.at(delta, np.arange(L), mem)
    np.add.at(delta, free_at + 1, -mem)
    memory = np.cumsum(delta)[:L] + graph.op_workspace[ops] + graph.fixed_memory
    return memory, free_at


def list_schedule(graph: Graph, rng: np.random.Generator | None = None) -> list[int]:
    """A low-peak topological order by the memory-aware list scheduler.

    Parameters
    ----------
    graph : Graph
    rng : np.random.Generator or None
        Breaks ties at random; None breaks them by node index.

    Returns
    -------
    list of int
        Every node index once.
    """
    n = graph.n
    mem = graph.memory.astype(np.float64)
    ws = graph.workspace.astype(np.float64)
    inputs, consumers = graph.inputs, graph.consumers
    is_output = graph.is_output
    missing = np.array([len(ins) for ins in inputs])
    readers_left = np.array([len(c) for c in consumers])
    ready = {v for v in range(n) if missing[v] == 0}
    resident = 0.0
    order: list[int] = []
    while ready:
        best, best_key = -1, None
        for v in ready:
            released = sum(mem[u] for u in inputs[v] if readers_left[u] == 1 and not is_output[u])
            gone = 0.0 if consumers[v] or is_output[v] else mem[v]
            key = (mem[v] - released - gone, resident + mem[v] + ws[v],
                   rng.random() if rng is not None else 0.0, v)
            if best_key is None or key < best_key:
                best, best_key = v, key
        v = best
        ready.discard(v)
        order.append(v)
        resident += mem[v]
        for u in inputs[v]:
            readers_left[u] -= 1
            if readers_left[u] == 0 and not is_output[u]:
                resident -= mem[u]
        if not consumers[v] and not is_output[v]:
            resident -= mem[v]
        for w in consumers[v]:
            missing[w] -= 1
            if missing[w] == 0:
                ready.add(w)
    return order


class OrderProfile:
    """Memory at every step of computing an order once each, vectorised for the local search."""

    def __init__(self, graph: Graph):
        self.n = graph.n
        self.mem = graph.memory.astype(np.float64)
        self.ws = graph.workspace.astype(np.float64)
        self.fixed = float(graph.fixed_memory)
        self.inputs = [np.unique(np.asarray(ins, dtype=np.int64)) for ins in graph.inputs]
        self.consumers = [np.unique(np.asarray(c, dtype=np.int64)) for c in graph.consumers]
        self.src, self.dst = edges(graph)
        self.with_consumers = np.flatnonzero([len(c) > 0 for c in self.consumers])
        self.offsets = np.searchsorted(self.src, self.with_consumers)
        self.is_output = np.asarray(graph.is_output, dtype=bool)

    def __call__(self, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(memory at each step, position of each node) of ``order``; the same model as `order_peak`."""
        n = self.n
        pos = np.empty(n, dtype=np.int64)
        pos[order] = np.arange(n)
        end = pos + 1
        if len(self.dst):
            end[self.with_consumers] = np.maximum.reduceat(pos[self.dst] + 1, self.offsets)
        end[self.is_output] = n
        held = np.bincount(pos, weights=self.mem, minlength=n + 1) - np.bincount(end, weights=self.mem,
                                                                              minlength=n + 1)
        return np.cumsum(held)[:n] + self.ws[order] + self.fixed, pos


def local_search(graph: Graph, start: list[int], budget: Number | None, seconds: float,
                 seed: int = 0) -> list[int]:
    """The lowest-peak order met by late-acceptance hill climbing from ``start`` within ``seconds``.

    Rounds alternate two targets (the budget itself; just below the best peak so
    far) and a few history lengths, each from the best order yet, so that no one
    setting's bad luck decides the answer. A round ends after ``20 * history``
    moves without a new best; the search ends when an order fits, at
    ``seconds``, or after a whole cycle of rounds without a new best.

    Parameters
    ----------
    graph : Graph
    start : list of int
        A topological order of the node indices.
    budget : Number or None
        The peak to reach, in memory units; None: as low as the search gets.
    seconds : float
        The time limit (s).
    seed : int
        Seeds the search's random moves.

    Returns
    -------
    list of int
        The lowest-peak order met (``start`` when none is lower).
    """
    n = graph.n
    if n < 3 or seconds <= 0:
        return list(start)
    profile = OrderProfile(graph)
    rng = np.random.default_rng(seed)
    best = np.asarray(start, dtype=np.int64)
    best_peak = profile(best)[0].max()
    step = float(profile.mem.mean()) or 1.0
    settings = [(False, 2000), (True, 2000), (False, 10000), (True, 500)]
    t_end = time.perf_counter() + seconds
    rounds = idle_rounds = 0
    while (time.perf_counter() < t_end and idle_rounds < len(settings)
           and (budget is None or best_peak > budget)):
        adaptive, history = settings[rounds % len(settings)]
        history = min(history, 50 * n)  # small graphs: shorter memory, and rounds end sooner when idle
        rounds += 1
        idle_rounds += 1
        last_gain = 0
        round_end = min(t_end, time.perf_counter() + max(1.0, seconds / 8))
        order = best.copy()
        prof, pos = profile(order)

        def target_of(peak: float, adaptive: bool = adaptive) -> float:
            if budget is None:
                return peak - step
            return max(float(budget), peak - 2 * step) if adaptive else float(budget)

        target = target_of(best_peak)
        cost = float(np.maximum(prof - target, 0).sum())
        recent = np.full(history, cost)
        it = 0
        while ((it & 63) or time.perf_counter() < round_end) and it - last_gain < 20 * history:
            it += 1
            if rng.random() < 0.5:  # a node near a step above the target, or any node
                over = np.flatnonzero(prof > target)
                k = int(over[rng.integers(len(over))]) if len(over) else int(rng.integers(n))
                v = order[min(n - 1, max(0, k + int(rng.integers(-3, 4))))]
            else:
                v = order[rng.integers(n)]
            p = pos[v]
            lo = pos[profile.inputs[v]].max() + 1 if len(profile.inputs[v]) else 0
            hi = pos[profile.consumers[v]].min() - 1 if len(profile.consumers[v]) else n - 1
            if hi <= lo:
                continue
            q = int(rng.integers(lo, hi + 1))
            if q == p:
                continue
            moved = np.insert(np.delete(order, p), q, v)
            new_prof, new_pos = profile(moved)
            new_cost = float(np.maximum(new_prof - target, 0).sum())
            if new_cost <= cost or new_cost <= recent[it % history]:
                order, prof, pos, cost = moved, new_prof, new_pos, new_cost
                peak = prof.max()
                if peak < best_peak:
                    best, best_peak = order.copy(), peak
                    idle_rounds, last_gain = 0, it
                    if budget is not None and best_peak <= budget:
                        break
                    if target_of(best_peak) != target:  # a new target rescales every cost
                        target = target_of(best_peak)
                        cost = float(np.maximum(prof - target, 0).sum())
                        recent[:] = cost
            recent[it % history] = cost
    return best.tolist()




def backward_need(graph: Graph) -> Number:
    """The least peak of any schedule that computes the backward nodes once each, in ``graph``'s order.

    At each backward node v, whatever is recomputed of the forward pass: the fixed memory, v's value and
    workspace, its forward inputs, and every backward value computed before v that v or a later node reads
    (or that is an output, held to the end) are resident together.

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    Number
        0 for a graph without backward nodes.
    """
    backward = np.asarray(graph.backward_indices, dtype=np.int64)
    count = len(backward)
    if not count:
        return 0
    position = np.full(graph.n, -1, dtype=np.int64)
    position[backward] = np.arange(count)
    mem = graph.memory.astype(np.float64)
    src, dst = edges(graph)
    into = position[dst] >= 0  # the edges a backward node reads along
    src, reader = src[into], position[dst[into]]
    from_backward = position[src] >= 0
    last = position.copy()  # the last backward position reading each backward value (its own when none does)
    np.maximum.at(last, src[from_backward], reader[from_backward])
    last[list(graph.output_indices)] = count
    forward_inputs = np.bincount(reader[~from_backward], weights=mem[src[~from_backward]], minlength=count)
    # A backward value is held from its computation to its last reader: at position i, those computed at or
    # before i and read at or after it.
    held = (np.bincount(position[backward], weights=mem[backward], minlength=count + 2)
            - np.bincount(last[backward] + 1, weights=mem[backward], minlength=count + 2))
    need = np.cumsum(held)[:count] + graph.workspace[backward] + forward_inputs
    return float(graph.fixed_memory) + float(need.max())


def deferred_gradients(graph: Graph) -> list[int] | None:
    """The graph's order with the backward nodes that only make a larger output from smaller inputs moved last.

    A weight's gradient (X^T dY) is often larger than the two values it reads, late in a deep network where
    the activations are small and the weights large; computed where autograd lists it, it is held through
    the rest of the backward pass, over the early layers' large activations. Computed last, its inputs
    are held instead (zero-bubble pipeline schedules defer the weight gradients the same way). Moved: each
    backward output that nothing reads and whose memory exceeds its inputs', then each backward value
    that only moved nodes read; both in their order, after the rest.

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    list of int or None
        Every node index once, in a topological order; None when no node moves.
    """
    readers = graph.consumers
    outputs = set(graph.output_indices)
    mem = graph.memory
    moved = {v for v in graph.backward_indices if v in outputs and not readers[v]
             and float(mem[v]) > sum(float(mem[u]) for u in graph.inputs[v])}
    if not moved:
        return None
    for v in reversed(graph.backward_indices):  # readers come later in file order: theirs are decided
        if v not in outputs and readers[v] and all(r in moved for r in readers[v]):
            moved.add(v)
    return [v for v in range(graph.n) if v not in moved] + sorted(moved)
