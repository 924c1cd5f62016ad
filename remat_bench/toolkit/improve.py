"""Local improvement of a schedule by undoing recomputations that the budget does not need.

Used to polish heuristic schedules before they seed an exact solver (the warm
start of `checkmate`, the phase-1 hint of `moccasin`); methods' own results
are never passed through it, so that each method is scored on what it found.

A recomputation of v can be dropped when keeping the previous copy of v
resident until the recomputation's uses still fits the budget. The search
tries the recomputations in decreasing order of duration and keeps every
drop the simulator accepts, until a full pass changes nothing.
"""

from __future__ import annotations

import numpy as np

from remat_bench.core.control import Deadline
from remat_bench.core.graph import Graph, Number
from remat_bench.core.schedule import Schedule
from remat_bench.core.simulate import place_frees, simulate


def drop_recomputations(graph: Graph, nodes: np.ndarray, budget: Number,
                        deadline: Deadline | None = None) -> np.ndarray:
    """A compute order without the recomputations the budget does not need (frees at last use)."""
    nodes = np.asarray(nodes, dtype=np.int64)
    zeros = np.zeros(len(nodes), dtype=np.int64)
    if simulate(graph, place_frees(graph, nodes, zeros, drop_unused=False)).peak > budget:
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
            trial = nodes[~dropped]
            sim = simulate(graph, place_frees(graph, trial, np.zeros(len(trial), dtype=np.int64), drop_unused=False))
            if sim.valid and sim.peak <= budget:
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

    Trying every candidate (``max_trials`` None) matters: with only the twelve
    best-scored ones it stalled at 0.88-0.97 of the baseline peak on the
    published random layered graphs at 0.8; with all of them it reached the
    budget on n250, n500 and n1000 in 0.3, 1 and 21 s (3.95%, 3.2%, 3.4% overhead).
    """
    seq = [int(v) for v in nodes]
    if _stages(graph, seq) is None:
        return np.asarray(nodes, dtype=np.int64)
    mem = graph.memory
    dur = graph.duration.astype(np.float64)
    consumers = graph.consumers
    inputs = graph.inputs

    def score(order: list[int]) -> tuple[Number, int, np.ndarray, Schedule]:
        arr = np.asarray(order, dtype=np.int64)
        schedule = place_frees(graph, arr, np.zeros(len(arr), dtype=np.int64), drop_unused=False)
        sim = simulate(graph, schedule)
        at_peak = int(np.count_nonzero((schedule.kinds == 0) & (sim.step_memory == sim.peak)))
        return sim.peak, at_peak, sim.step_memory, schedule

    peak, count, step_memory, schedule = score(seq)
    while peak > budget and not (deadline is not None and deadline.expired()):
        kinds, snodes = schedule.kinds, schedule.nodes
        computes = np.flatnonzero(kinds == 0)
        p = int(computes[np.argmax(step_memory[computes] == peak)])  # first compute step at the peak
        position = int(np.count_nonzero(kinds[:p] == 0))  # its index in seq
        resident = np.zeros(graph.n, dtype=bool)
        for k, v in zip(kinds[:p].tolist(), snodes[:p].tolist()):
            resident[v] = k == 0
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
            t_peak, t_count, t_mem, t_schedule = score(trial)
            if (t_peak, t_count) < (peak, count):
                seq, peak, count, step_memory, schedule = trial, t_peak, t_count, t_mem, t_schedule
                improved = True
                break
        if not improved:
            break
    return np.asarray(seq, dtype=np.int64)


def shaved_order(graph: Graph, budget: Number, deadline: Deadline | None = None, *, max_copies: int | None = None,
                 cap_s: float = 60.0) -> np.ndarray:
    """The input order with its peaks shaved to ``budget``, then the recomputations it does not need undone.

    Shaving adds a recomputation wherever memory peaks, one at a time, and the
    early ones can become unnecessary once later ones are in: on the generated
    ResNet-50 with implementations at 0.5, undoing them took MONeT from
    -15.62% to -15.73% (`make bench BENCH=monet`, docs/benchmarks.md).
    Runs for at most ``cap_s`` seconds and a quarter of what ``deadline`` leaves.
    """
    remaining = None if deadline is None else deadline.remaining()
    cap = Deadline(cap_s if remaining is None else min(cap_s, remaining / 4))
    shaved = shave_peaks(graph, np.arange(graph.n, dtype=np.int64), budget, cap, max_copies=max_copies)
    return drop_recomputations(graph, shaved, budget, cap)
