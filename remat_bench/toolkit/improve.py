"""Local improvement of a schedule by undoing recomputations that the budget does not need.

Used to polish heuristic schedules before they seed an exact solver (the warm
start of `checkmate`, the phase-1 hint of `moccasin`), and by `auto` on its
answer (`drop_with_reorder`, its last step); a method's own result is never
passed through it, so that each method is scored on what it found.

A recomputation of v can be dropped when keeping the previous copy of v
resident until the recomputation's uses still fits the budget. The search
tries the recomputations in decreasing order of duration and keeps every
drop the simulator accepts, until a full pass changes nothing.
"""

from __future__ import annotations

import numpy as np

from remat_bench.core.cleanup import place_frees
from remat_bench.core.control import Deadline
from remat_bench.core.graph import Graph, Node, Number
from remat_bench.core.simulate import simulate
from remat_bench.toolkit.orders import local_search, sequence_memory


def drop_recomputations(graph: Graph, nodes: np.ndarray, budget: Number,
                        deadline: Deadline | None = None) -> np.ndarray:
    """A compute order without the recomputations the budget does not need (frees at last use).

    Parameters
    ----------
    graph : Graph
    nodes : np.ndarray
        A compute sequence: node indices in order, each with its first implementation.
    budget : Number
        In the graph's memory units.
    deadline : Deadline or None
        Stops the search early (the drops so far kept); None: no limit.

    Returns
    -------
    np.ndarray
        int64, ``nodes`` with some recomputations left out; ``nodes`` when it peaks above ``budget``.
    """
    nodes = np.asarray(nodes, dtype=np.int64)
    if _simulated(graph, nodes, drop_unused=False)[1] > budget:
        return nodes
    changed = True
    while changed:
        changed = False
        seen = np.zeros(graph.n, dtype=bool)
        repeat = np.zeros(len(nodes), dtype=bool)
        for p, v in enumerate(nodes.tolist()):
            repeat[p] = seen[v]
            seen[v] = True
        positions = np.flatnonzero(repeat)
        order = positions[np.argsort(-graph.duration[nodes[positions]], kind="stable")]
        dropped = np.zeros(len(nodes), dtype=bool)
        for p in order.tolist():
            if deadline is not None and deadline.expired():
                return nodes[~dropped]
            dropped[p] = True
            # Valid whatever is dropped (a recomputation's readers read the copy before it): only the peak counts.
            if sequence_memory(graph, nodes[~dropped])[0].max() <= budget:
                changed = True
            else:
                dropped[p] = False
        nodes = nodes[~dropped]
    return nodes


def _stages(graph: Graph, nodes: list[int]) -> list[int] | None:
    """Stage of each computation (stage t ends with the first computation of node t); None if unstaged."""
    seen = 0
    first = [False] * graph.n
    out = []
    for v in nodes:
        if not first[v]:
            if v != seen:
                return None
            first[v] = True
            seen += 1
            out.append(v)
        else:
            out.append(seen)
    return out


def staged_repair(graph: Graph, nodes: np.ndarray) -> np.ndarray | None:
    """A compute order moved into the input-order stage space of Checkmate and staged Moccasin, or None.

    Those models compute, in stage t, a set of nodes below t and then node t for the first time,
    each stage's computations in index order. An order whose first computations follow the input
    order is moved there by sorting each stage's computations by index (inputs come before their
    consumers in index order, so the order stays valid) and computing a node at most once per
    stage. An order whose first computations do not follow the input order has no staged
    counterpart: None. The peak can change (values are held over other steps); callers simulate.

    Parameters
    ----------
    graph : Graph
    nodes : np.ndarray
        A compute sequence: node indices in order.

    Returns
    -------
    np.ndarray or None
        int64, the staged sequence; None when the first computations do not follow the input order.
    """
    seq = [int(v) for v in nodes]
    stages = _stages(graph, seq)
    if stages is None:
        return None
    keys = sorted(set(zip(stages, seq)))  # (stage, node): sorted, each once
    return np.fromiter((v for _, v in keys), dtype=np.int64, count=len(keys))


def shave_peaks(graph: Graph, nodes: np.ndarray, budget: Number, deadline: Deadline | None = None,
                max_trials: int | None = None, max_copies: int | None = None) -> np.ndarray:
    """Lower a staged compute order's peak toward ``budget`` by splitting retention intervals.

    At the first step where memory peaks, a value x that is resident but not read
    there is dropped after its last use before the peak and recomputed in the
    stage of its next reader, at its own position (so the order stays in the
    input-order stage space). The simulator (frees at last use) scores each
    candidate, largest memory per unit of duration first; the first that lowers
    the peak, or the number of steps at the peak, is kept. Stops when the
    budget is met, nothing helps, or the deadline passes. Returns the best
    order found (the input if it was not staged). ``max_copies`` caps how many
    times a value may be computed (a model's intervals per node).

    Trying every candidate (``max_trials`` None) matters: with only the best-scored
    few it stalled above the budget on the published random layered graphs at 0.8,
    with all of them it reached the budget (docs/benchmarks.md, "Figures that used
    to live in the code").

    Parameters
    ----------
    graph : Graph
    nodes : np.ndarray
        A staged compute sequence (first computations in the input order), node indices.
    budget : Number
        In the graph's memory units.
    deadline : Deadline or None
        Stops the search; None: no limit.
    max_trials : int or None
        Candidates tried at each peak; None: all of them.
    max_copies : int or None
        The most computations of one value; None: no cap.

    Returns
    -------
    np.ndarray
        int64; it may still peak above ``budget``.
    """
    seq = [int(v) for v in nodes]
    if _stages(graph, seq) is None:
        return np.asarray(nodes, dtype=np.int64)
    mem = graph.memory
    dur = graph.duration.astype(np.float64)
    consumers = graph.consumers
    inputs = graph.inputs

    def score(order: list[int]) -> tuple[Number, int, np.ndarray, np.ndarray]:
        memory, free_at = sequence_memory(graph, order)  # the simulator's step memory, without the schedule
        peak = memory.max().item()  # the Python number the simulator reports
        return peak, int(np.count_nonzero(memory == peak)), memory, free_at

    peak, count, memory, free_at = score(seq)
    while peak > budget and not (deadline is not None and deadline.expired()):
        position = int(np.argmax(memory == peak))  # the first computation at the peak
        resident = np.zeros(graph.n, dtype=bool)
        alive = np.flatnonzero(free_at[:position] >= position)  # copies computed before it, not yet freed
        resident[np.asarray(seq, dtype=np.int64)[alive]] = True
        busy = set(inputs[seq[position]]) | {seq[position]}
        candidates = [x for x in np.flatnonzero(resident).tolist() if x not in busy and mem[x] > 0]
        candidates.sort(key=lambda x: -float(mem[x]) / (dur[x] + 1e-9 * (1 + dur.max())))
        stages = _stages(graph, seq)
        assert stages is not None  # a recomputation inserted into a stage keeps the input-order stages
        improved = False
        if max_copies is not None:
            copies = np.bincount(np.asarray(seq), minlength=graph.n)
            candidates = [x for x in candidates if copies[x] < max_copies]
        for x in candidates[:max_trials] if max_trials else candidates:
            # The next reader of x after the peak, and the stage it belongs to.
            q = next((j for j in range(position + 1, len(seq)) if seq[j] in consumers[x]
                      or seq[j] == x), None)
            if q is None or seq[q] == x:
                continue
            s = stages[q]
            # x joins stage s's recomputations at its own (index-ordered) place, before q.
            j = q
            while j > 0 and stages[j - 1] == s and seq[j - 1] > x:
                j -= 1
            if j > 0 and stages[j - 1] == s and seq[j - 1] == x:
                continue
            trial = [*seq[:j], x, *seq[j:]]
            t_peak, t_count, t_mem, t_free = score(trial)
            if (t_peak, t_count) < (peak, count):
                seq, peak, count, memory, free_at = trial, t_peak, t_count, t_mem, t_free
                improved = True
                break
        if not improved:
            break
    return np.asarray(seq, dtype=np.int64)


def shaved_order(graph: Graph, budget: Number, deadline: Deadline | None = None, *, max_copies: int | None = None,
                 cap_s: float = 60.0) -> np.ndarray:
    """The input order with its peaks shaved to ``budget``, then the recomputations it does not need undone.

    Shaving adds a recomputation wherever memory peaks, one at a time, and the
    early ones can become unnecessary once later ones are in: undoing them let MONeT
    match checkmate+fastest-fit on the generated ResNet-50 (docs/benchmarks.md, "MONeT").
    Shaving runs for at most ``cap_s`` seconds and half of what ``deadline`` leaves (it ends
    as soon as the budget is reached, and only then is its schedule of use); the undoing for at
    most ``cap_s`` and a quarter of what is left after it.

    Parameters
    ----------
    graph : Graph
    budget : Number
        In the graph's memory units.
    deadline : Deadline or None
        The caller's; None: each part gets ``cap_s``.
    max_copies : int or None
        The most computations of one value (`shave_peaks`); None: no cap.
    cap_s : float
        The most seconds each part takes (s).

    Returns
    -------
    np.ndarray
        int64, a compute sequence; it may still peak above ``budget``.
    """
    remaining = None if deadline is None else deadline.remaining()
    shaved = shave_peaks(graph, np.arange(graph.n, dtype=np.int64), budget,
                         Deadline(cap_s if remaining is None else min(cap_s, remaining / 2)), max_copies=max_copies)
    left = None if deadline is None else deadline.remaining()
    return drop_recomputations(graph, shaved, budget, Deadline(cap_s if left is None else min(cap_s, left / 4)))


def computations_graph(graph: Graph, nodes: list[int]) -> Graph:
    """The graph of a compute sequence's computations: node p is the computation at position p,
    reading, for each input, the latest computation of it before p; the outputs are their
    last computations. Any order of this graph, mapped back (`nodes[p]` for each p), is a valid
    compute sequence with the same computations, so that a search over orders
    (`remat_bench.toolkit.orders.local_search`) reorders a schedule with recomputations.

    Parameters
    ----------
    graph : Graph
    nodes : list of int
        A compute sequence in which every input is computed before its reader.

    Returns
    -------
    Graph
        Node ``c<p>`` for position p, with its node's memory, duration and workspace and no implementations.
    """
    latest: dict[int, int] = {}
    copies = []
    for p, v in enumerate(nodes):
        node = graph.nodes[v]
        copies.append(Node(f"c{p}", tuple(f"c{latest[u]}" for u in graph.inputs[v]), node.memory, node.duration,
                           node.workspace))
        latest[v] = p
    return Graph(copies, name=graph.name, outputs=[f"c{latest[o]}" for o in graph.output_indices],
                 fixed_memory=graph.fixed_memory, units=graph.units, source=graph.source)


def _simulated(graph: Graph, nodes: list[int] | np.ndarray, drop_unused: bool = True) -> tuple[bool, Number, Number]:
    """(valid, peak, duration) of a compute sequence with frees at last use (and unused computations
    dropped, unless ``drop_unused`` is False)."""
    arr = np.asarray(nodes, dtype=np.int64)
    sim = simulate(graph, place_frees(graph, arr, np.zeros(len(arr), dtype=np.int64), drop_unused=drop_unused))
    return sim.valid, sim.peak, sim.duration


def drop_with_reorder(graph: Graph, nodes: np.ndarray, budget: Number, deadline: Deadline, *,
                      attempt_s: float = 3.0, seed: int = 0, stats: dict | None = None) -> np.ndarray:
    """A faster compute sequence within ``budget``: recomputations undone, the rest reordered to fit.

    `drop_recomputations` undoes a recomputation only where holding the earlier copy
    longer fits as the schedule stands. Here each recomputation (the most expensive
    first) is undone, its readers served by the earlier copy, and the computations
    reordered to bring the peak back under the budget: the order local search
    (`remat_bench.toolkit.orders.local_search`, at most ``attempt_s`` seconds an attempt)
    over the graph of the computations (`computations_graph`), which keeps every
    reader after the copy it reads. The simulator judges each result. After a success
    the search starts again from the most expensive recomputation (the new order may
    make room for one that failed); when every one left has failed since the last
    success, they are tried again with another seed and twice the time, until ``deadline``.

    It takes Moccasin's schedules on the published random layered graphs well below where
    CP-SAT stopped (docs/benchmarks.md, "auto on the published graphs"), and reaches the
    brute-force optimum from every shaved start on the random 8-node graphs of
    tests/test_improve.py.

    Parameters
    ----------
    graph : Graph
    nodes : np.ndarray
        A compute sequence, node indices each with its first implementation, within ``budget``.
    budget : Number
        In the graph's memory units.
    deadline : Deadline
        Ends the search.
    attempt_s : float
        The first attempts' local search time (s), doubled each time every recomputation has failed.
    seed : int
        The first local search seed.
    stats : dict or None
        When given and the search ran, receives ``attempts`` and ``undone`` (recomputations tried, undone).

    Returns
    -------
    np.ndarray
        int64, a sequence within ``budget`` and faster than ``nodes``, or ``nodes`` when none was found (or
        ``nodes`` is invalid or above the budget).
    """
    seq = [int(v) for v in nodes]
    valid, peak, duration = _simulated(graph, seq)
    tried = undone = 0
    if not valid or peak > budget:
        return np.asarray(seq, dtype=np.int64)
    failed: set[tuple[int, int]] = set()  # (node, recomputation) undone in vain since the last success
    while not deadline.expired():
        attempt = next(((v, k, p) for v, k, p in _recomputations(graph, seq) if (v, k) not in failed), None)
        if attempt is None:
            if not failed or deadline.remaining() is None:
                break  # none of positive duration left, or no deadline to stop the retries
            # Every one failed: the local search is randomised, so try them again, each for longer.
            failed.clear()
            seed += 1
            attempt_s *= 2
            continue
        v, k, p = attempt
        tried += 1
        left = deadline.remaining()
        trial = seq[:p] + seq[p + 1:]
        copies = computations_graph(graph, trial)
        order = local_search(copies, list(range(copies.n)), budget,
                             attempt_s if left is None else min(attempt_s, left), seed)
        candidate = [trial[i] for i in order]
        ok, new_peak, new_duration = _simulated(graph, candidate)
        if ok and new_peak <= budget and new_duration < duration:
            # Success: the order changed, so what failed before may fit now.
            seq, duration = candidate, new_duration
            undone += 1
            failed.clear()
            continue
        failed.add((v, k))
    if stats is not None:
        stats.update({"attempts": tried, "undone": undone})
    return np.asarray(seq, dtype=np.int64)


def _recomputations(graph: Graph, seq: list[int]) -> list[tuple[int, int, int]]:
    """(node, k, position) of each recomputation of positive duration (the k-th, k >= 1), the most
    expensive first."""
    count: dict[int, int] = {}
    out = []
    for p, v in enumerate(seq):
        k = count.get(v, 0)
        count[v] = k + 1
        if k and graph.duration[v] > 0:
            out.append((v, k, p))
    out.sort(key=lambda t: (-float(graph.duration[t[0]]), t[2]))
    return out

