"""Exact brute forces for tiny graphs, to test formulations against.

`staged_optimum`: the schedule space of Checkmate and Moccasin with
input-order stages. Stage t ends with the first computation of node t; before
it, nodes i < t may be recomputed, each at most once and in increasing order;
nothing is computed after the last node's first computation. Values may be
freed at any time. A shortest-path search (Dijkstra, cost = duration) over
states (stage, index of the last node computed in the stage, resident set).
"""

from __future__ import annotations

import heapq

from remat_bench.core.graph import Graph


def _masks(graph: Graph) -> tuple[list[int], list[int], list[int], list[int], int]:
    n = graph.n
    mem = [int(x) for x in graph.memory]
    size = [0] * (1 << n)
    for mask in range(1, 1 << n):
        low = mask & -mask
        size[mask] = size[mask ^ low] + mem[low.bit_length() - 1]
    need = [sum(1 << u for u in graph.inputs[v]) for v in range(n)]
    out = sum(1 << o for o in graph.output_indices)
    return mem, size, need, [int(x) for x in graph.workspace], out


def staged_optimum(graph: Graph, budget: int) -> int | None:
    """Least duration over staged schedules within ``budget``, or None if there is none."""
    n = graph.n
    assert n <= 12, "the brute force is for tiny graphs"
    mem, size, need, ws, outputs = _masks(graph)
    dur = [int(x) for x in graph.duration]
    fixed = int(graph.fixed_memory)
    start = (0, -1, 0)
    best = {start: 0}
    heap = [(0, start)]
    while heap:
        cost, state = heapq.heappop(heap)
        if best.get(state, 1 << 62) < cost:
            continue
        t, j, resident = state
        if t == n:
            if resident & outputs == outputs:
                return cost
            continue
        moves = []
        # Free any resident value.
        rest = resident
        while rest:
            low = rest & -rest
            rest ^= low
            moves.append((0, (t, j, resident ^ low)))
        # Recompute i (j < i < t), or compute the stage's own node t.
        for i in range(j + 1, t + 1):
            bit = 1 << i
            if resident & bit or need[i] & ~resident:
                continue
            if fixed + size[resident] + mem[i] + ws[i] > budget:
                continue
            nxt = (t + 1, -1, resident | bit) if i == t else (t, i, resident | bit)
            moves.append((dur[i], nxt))
        for step, nxt in moves:
            c = cost + step
            if c < best.get(nxt, 1 << 62):
                best[nxt] = c
                heapq.heappush(heap, (c, nxt))
    return None


def any_order_optimum(graph: Graph, budget: int) -> int | None:
    """Least duration over every schedule (any order, any recomputation) within ``budget``.

    Dijkstra over (resident set, set of nodes computed at least once); cost = duration.
    """
    n = graph.n
    assert n <= 8, "the brute force is for tiny graphs"
    mem, size, need, ws, outputs = _masks(graph)
    dur = [int(x) for x in graph.duration]
    fixed = int(graph.fixed_memory)
    full = (1 << n) - 1
    start = (0, 0)
    best = {start: 0}
    heap = [(0, start)]
    while heap:
        cost, state = heapq.heappop(heap)
        if best.get(state, 1 << 62) < cost:
            continue
        resident, done = state
        if done == full and resident & outputs == outputs:
            return cost
        moves = []
        rest = resident
        while rest:
            low = rest & -rest
            rest ^= low
            moves.append((0, (resident ^ low, done)))
        for i in range(n):
            bit = 1 << i
            if resident & bit or need[i] & ~resident:
                continue
            if fixed + size[resident] + mem[i] + ws[i] > budget:
                continue
            moves.append((dur[i], (resident | bit, done | bit)))
        for step, nxt in moves:
            c = cost + step
            if c < best.get(nxt, 1 << 62):
                best[nxt] = c
                heapq.heappush(heap, (c, nxt))
    return None


def topological_orders(graph: Graph):
    """Every topological order of a tiny graph."""
    n = graph.n
    indegree = [len(graph.inputs[v]) for v in range(n)]
    order: list[int] = []

    def extend():
        if len(order) == n:
            yield list(order)
            return
        for v in range(n):
            if indegree[v] == 0 and v not in order:
                order.append(v)
                for w in graph.consumers[v]:
                    indegree[w] -= 1
                yield from extend()
                for w in graph.consumers[v]:
                    indegree[w] += 1
                order.pop()

    yield from extend()


def best_order_peak(graph: Graph) -> int:
    """Lowest peak over all topological orders, each value freed after its last use."""
    import numpy as np

    from remat_bench.core.cleanup import place_frees
    from remat_bench.core.simulate import simulate

    best = None
    for order in topological_orders(graph):
        nodes = np.asarray(order, dtype=np.int64)
        peak = simulate(graph, place_frees(graph, nodes, np.zeros(len(nodes), dtype=np.int64))).peak
        best = peak if best is None else min(best, peak)
    return best


def staged_optimum_with_implementations(graph: Graph, budget: int, monet_shape: bool = False) -> int | None:
    """`staged_optimum` where every computation also picks one of the node's implementations.

    Each implementation brings its own inputs, duration and workspace. With
    ``monet_shape`` the schedules are MONeT's (Shah et al. 2021): the forward
    nodes are computed once each, in order, with no recomputation during the
    forward pass; before each backward node only forward nodes are recomputed.
    ``graph`` lists its forward nodes first, as training graphs do.
    """
    n = graph.n
    assert n <= 12, "the brute force is for tiny graphs"
    mem, size, _, _, outputs = _masks(graph)
    fixed = int(graph.fixed_memory)
    forward = [bool(f) for f in graph.is_forward]
    options = [
        [(sum(1 << u for u in graph.op_inputs[op]), int(graph.op_duration[op]), int(graph.op_workspace[op]))
         for op in graph.ops_of(v)]
        for v in range(n)
    ]
    start = (0, -1, 0)
    best = {start: 0}
    heap = [(0, start)]
    while heap:
        cost, state = heapq.heappop(heap)
        if best.get(state, 1 << 62) < cost:
            continue
        t, j, resident = state
        if t == n:
            if resident & outputs == outputs:
                return cost
            continue
        moves = []
        rest = resident
        while rest:
            low = rest & -rest
            rest ^= low
            moves.append((0, (t, j, resident ^ low)))
        first = t if (monet_shape and forward[t]) else j + 1
        for i in range(first, t + 1):
            if monet_shape and i < t and not forward[i]:
                continue
            bit = 1 << i
            if resident & bit:
                continue
            nxt = (t + 1, -1, resident | bit) if i == t else (t, i, resident | bit)
            for need, dur, ws in options[i]:
                if need & ~resident or fixed + size[resident] + mem[i] + ws > budget:
                    continue
                moves.append((dur, nxt))
        for step, nxt in moves:
            c = cost + step
            if c < best.get(nxt, 1 << 62):
                best[nxt] = c
                heapq.heappush(heap, (c, nxt))
    return None
