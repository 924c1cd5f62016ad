"""Kusumoto et al. 2019, "A Graph Theoretic Framework of Recomputation Algorithms for
Memory-Efficient Backpropagation" (NeurIPS 2019, arXiv:1905.11722).

The forward graph G = (V, E) (the nodes of kind ``forward``, with their edges)
is cut by a chain of *lower sets* {} = L0 < L1 < ... < Lk = V (a lower set has
no edge coming in from outside it) into blocks Vi = Li \\ L(i-1). With the
boundary B(L) = {v in L : v has a consumer outside L}, the *canonical
strategy* keeps B(Li) \\ L(i-1) of each block through the forward pass, drops
the rest, and in the backward pass (i = k..1) recomputes Vi \\ B(Li) from what
was kept before running the block's gradients. The paper scores a chain by

    overhead  (eq. 1)  T(L1..Lk) = sum_i T(Vi \\ B(Li))
    memory    (eq. 2)  M(L1..Lk) = max_i [ sum_{j<i} M(B(Lj) \\ L(j-1)) + 2 M(Vi)
                                           + M(succ(Li) \\ Li) + M(pred(succ(Li)) \\ Li) ]

(succ/pred of a set: the consumers/inputs of its members; the two last terms
are summed as written, so a node in both is counted twice). The DP walks
states (L, t, m) (lower set reached, overhead so far, kept memory so far),
keeping for each L the Pareto front of (t, m): L -> L' (L < L') adds
T(V' \\ B(L')) to t and M(B(L') \\ L) to m and is allowed when
m + 2 M(V') + M(succ(L') \\ L') + M(pred(succ(L')) \\ L') <= budget.

- ``variant=exact`` (section 4.2): every lower set, enumerated by a depth-first
  search with an explicit stack that adds a node once all its inputs are in
  (each set is generated once: from the set without its last node in file
  order). ``max_lower_sets`` caps the enumeration; past it the method says so
  and suggests ``variant=approx``.
- ``variant=approx`` (section 4.3): the family {}, V, and L_v = {v and its
  ancestors} for every v. On graphs so large that its tables would not fit
  (tens of thousands of forward nodes), `THINNED_SETS` of them, evenly spaced
  by size, are kept (`thin_family`); the run's message says so.
- ``strategy=tc`` (time-centric): the least overhead within the budget;
  ``strategy=mc`` (memory-centric, section 4.4): the largest overhead within
  the budget, which splits the graph coarsely and lets liveness lower the real
  peak.

Mapping to remat-bench: M(v) is the node's ``memory`` and T(v) its ``duration``;
the gradient of v (a ``<v>_grad`` node of a Checkmate-shaped training graph)
has the size of v, as 2 M(Vi) assumes. The DP budget is the run's budget less
``fixed_memory`` (the paper leaves parameters out). The chain becomes a
`remat_bench.toolkit.lowering.Plan`: kept = the union of B(Li) \\ L(i-1), segments =
the blocks Vi, lowered to a full training schedule by the shared lowering,
which recomputes only the values the remaining gradients read (the paper's
"liveness analysis") and frees everything after its last use.

What this implementation adds: the paper's memory model is not the
simulator's (workspace, the loss, the lowering's backward order and liveness
all differ), so every lowered schedule is simulated. With a budget, when the
simulated peak is over it, the DP's internal budget is bisected between the
lowest budget at which the DP has any solution and the first one until the
simulated schedule fits (or none does); the statistics say how far the two
models differed (``model_peak`` against ``simulated_peak``). With
``--budget min``, the internal budget is the lowest one at which the DP has a
solution (found exactly by a DP that minimises the eq. 2 peak, where the
paper bisected over feasibility), and the strategy picks a chain there.
The DP itself is exact but pruned (`best_chain`): without pruning it keeps
millions of (t, m) states on DenseNet-121, whose sizes are byte counts. Left out: the paper's
Chainer execution and its durations (T = 10 for convolutions, 1 otherwise); here T is the graph's
duration.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import numpy as np

from remat_bench.core.budget import memory_text
from remat_bench.core.graph import Graph, Number
from remat_bench.core.schedule import Schedule
from remat_bench.core.simulate import Simulation, simulate
from remat_bench.methods.base import (
    Deadline,
    Membership,
    Method,
    MethodResult,
    Param,
    Role,
    SolutionStatus,
    Termination,
    cut_short,
    search_ended,
)
from remat_bench.toolkit.lowering import (
    LoweringError,
    Plan,
    lower_plan,
)

# Bisection of the internal budget stops when the bracket is this fraction of the budget (or one unit).
BISECTION_TOLERANCE = 1e-3
# Steps that lower the internal budget by the measured excess before the bisection proper.
GUESSES = 3
# States per lower set past which `best_chain` stops a plain DP run and prunes by a bound instead.
STATES_PER_SET = 8
# Rows of the lower-set matrix handled at once when the per-set quantities are computed, and at
# most this many set-node cells per block (the time limit is checked between blocks).
ROW_BLOCK = 2048
BLOCK_CELLS = 1 << 24
# The family is held as dense (lower sets x forward nodes) boolean tables, four of them: vectorised
# per-set terms are what make the DP fast, at the price of memory quadratic in the graph for the
# approximate family. Past this many cells (about 1 GiB of tables) the exact family is declined with
# a message, and the approximate one is thinned (`thin_family`): a 50,000-node forward chain would
# need 10 GiB.
MAX_TABLE_CELLS = 250_000_000
# A thinned approximate family keeps at most this many sets: the DP's work grows with the square of
# the family (every pair of nested sets is a step), and a thousand blocks is already finer than the
# square-root segmentation that a memory budget calls for on a chain.
THINNED_SETS = 1024


class DPTimeout(Exception):
    """The time limit ran out inside the dynamic program."""


class _StateLimit(Exception):
    """A DP run kept more states than it was allowed (`best_chain` then prunes by a bound)."""


# ---------------------------------------------------------------------- the forward graph


@dataclass(frozen=True)
class ForwardGraph:
    """The forward graph of a training graph, on positions 0..n-1 (file order of the forward nodes).

    ``nodes[p]`` is the graph index of position p; ``src``/``dst`` list its
    edges; ``preds[p]`` is the bitset (a Python int) of p's inputs.
    """

    nodes: np.ndarray
    memory: np.ndarray
    duration: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    preds: list[int]
    succs: list[list[int]]

    @property
    def n(self) -> int:
        return len(self.nodes)

    @property
    def everything(self) -> int:
        return (1 << self.n) - 1


def forward_graph(graph: Graph) -> ForwardGraph:
    """The nodes of kind ``forward`` and the edges between them.

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    ForwardGraph
        On positions in file order of the forward nodes.
    """
    nodes = np.asarray(graph.forward_indices, dtype=np.int64)
    position = np.full(graph.n, -1, dtype=np.int64)
    position[nodes] = np.arange(len(nodes))
    preds = [0] * len(nodes)
    succs: list[list[int]] = [[] for _ in nodes]
    src: list[int] = []
    dst: list[int] = []
    for p, v in enumerate(nodes.tolist()):
        for u in graph.inputs[v]:
            q = int(position[u])
            if q >= 0:
                preds[p] |= 1 << q
                succs[q].append(p)
                src.append(q)
                dst.append(p)
    return ForwardGraph(nodes, graph.memory[nodes], graph.duration[nodes],
                        np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64), preds, succs)


# ---------------------------------------------------------------------- families of lower sets


def enumerate_lower_sets(fg: ForwardGraph, limit: int | None = None) -> list[int] | None:
    """Every lower set of ``fg`` as a bitset, or None when there are more than ``limit``.

    Depth-first search with an explicit stack. A set is extended only by nodes
    after its last node (in file order, which is topological) whose inputs are
    all in it, so each lower set is generated exactly once: from itself minus
    its last node, which is again a lower set. ``available`` (nodes outside the
    set whose inputs are all in it) is updated incrementally from the added
    node's consumers.

    Parameters
    ----------
    fg : ForwardGraph
    limit : int or None
        The most lower sets wanted; None: no limit.

    Returns
    -------
    list of int or None
        The lower sets as bitsets over positions ({} and V among them), in the order found; None past ``limit``.
    """
    available = 0
    for p in range(fg.n):
        if fg.preds[p] == 0:
            available |= 1 << p
    found: list[int] = []
    stack: list[tuple[int, int, int]] = [(0, -1, available)]
    while stack:
        members, last, available = stack.pop()
        found.append(members)
        if limit is not None and len(found) > limit:
            return None
        candidates = (available >> (last + 1)) << (last + 1)
        while candidates:
            bit = candidates & -candidates
            candidates ^= bit
            p = bit.bit_length() - 1
            grown = members | bit
            grown_available = available ^ bit
            for w in fg.succs[p]:
                if fg.preds[w] & ~grown == 0:
                    grown_available |= 1 << w
            stack.append((grown, p, grown_available))
    return found


def ancestor_sets(fg: ForwardGraph) -> list[int]:
    """The approximate family of section 4.3: {}, V, and L_v = {v} + ancestors(v) for every v.

    Parameters
    ----------
    fg : ForwardGraph

    Returns
    -------
    list of int
        The sets as bitsets over positions, without repeats: {} first, then L_v in position order, V last.
    """
    closure = [0] * fg.n
    for p in range(fg.n):  # file order is topological: inputs are closed before their consumers
        c = 1 << p
        rest = fg.preds[p]
        while rest:
            bit = rest & -rest
            rest ^= bit
            c |= closure[bit.bit_length() - 1]
        closure[p] = c
    return list(dict.fromkeys([0, *closure, fg.everything]))


def thin_family(sets: list[int], keep: int) -> list[int]:
    """At most ``keep`` of ``sets`` (``keep`` >= 2), evenly spaced by size: {} and V always among them.

    A sub-family of lower sets is still a family the DP can walk (any chain
    of it is a chain of the whole), so the method stays correct and only its
    choice of blocks gets coarser.

    Parameters
    ----------
    sets : list of int
        Lower sets as bitsets, {} and V among them.
    keep : int
        The most sets to keep.

    Returns
    -------
    list of int
        The kept sets, without repeats, sorted by size (then by value).
    """
    ordered = sorted(set(sets), key=lambda s: (s.bit_count(), s))
    if len(ordered) <= keep:
        return ordered
    picks = np.unique(np.linspace(0, len(ordered) - 1, keep).round().astype(np.int64))
    return [ordered[i] for i in picks.tolist()]


@dataclass
class LowerSetFamily:
    """A family of lower sets (rows, sorted by size, {} first and V last) and eq. 1-2's per-set terms."""

    sets: list[int]  # bitsets
    node_memory: np.ndarray  # M(v) per forward position
    node_duration: np.ndarray  # T(v) per forward position
    member: np.ndarray  # bool (sets x nodes)
    packed: np.ndarray  # uint64 (sets x words), for subset tests
    mem: np.ndarray  # M(L)
    dur: np.ndarray  # T(L)
    boundary: list[np.ndarray]  # positions of B(L)
    mem_boundary: np.ndarray  # M(B(L))
    dur_interior: np.ndarray  # T(L \ B(L))
    outside: np.ndarray  # M(succ(L) \ L) + M(pred(succ(L)) \ L)

    @property
    def count(self) -> int:
        return len(self.sets)


def lower_set_family(fg: ForwardGraph, sets: list[int], deadline: Deadline | None = None) -> LowerSetFamily:
    """Sort ``sets`` by size and compute B(L), M(L), T(L) and the succ/pred terms of eq. 2.

    Raises `DPTimeout` when ``deadline`` passes (checked between blocks of
    rows of at most `BLOCK_CELLS` cells).

    Parameters
    ----------
    fg : ForwardGraph
    sets : list of int
        Lower sets of ``fg`` as bitsets, {} and V among them (repeats are dropped).
    deadline : Deadline or None
        When to give up; None: never.

    Returns
    -------
    LowerSetFamily

    Raises
    ------
    DPTimeout
        ``deadline`` passed.
    ValueError
        ``sets`` lacks {} or V.
    """
    n = fg.n
    ordered = sorted(set(sets), key=lambda s: (s.bit_count(), s))
    if ordered[0] != 0 or ordered[-1] != fg.everything:
        raise ValueError("a family of lower sets must contain {} and V")
    words = max(1, (n + 63) // 64)
    raw = b"".join(s.to_bytes(8 * words, "little") for s in ordered)
    packed = np.frombuffer(raw, dtype="<u8").reshape(len(ordered), words)
    block = max(1, min(ROW_BLOCK, BLOCK_CELLS // max(n, 1)))  # rows handled at once
    member = np.unpackbits(np.frombuffer(raw, dtype=np.uint8).reshape(len(ordered), 8 * words),
                           axis=1, bitorder="little")[:, :n].astype(bool)

    boundary_mask = np.zeros_like(member)
    after = np.zeros_like(member)  # succ(L) \ L
    before = np.zeros_like(member)  # pred(succ(L)) \ L
    if len(fg.src):
        by_src = np.argsort(fg.src, kind="stable")
        by_dst = np.argsort(fg.dst, kind="stable")
        src_s, dst_s = fg.src[by_src], fg.dst[by_dst]
        src_heads = np.flatnonzero(np.r_[True, src_s[1:] != src_s[:-1]])
        dst_heads = np.flatnonzero(np.r_[True, dst_s[1:] != dst_s[:-1]])
        for lo in range(0, len(ordered), block):
            if deadline is not None and deadline.expired():
                raise DPTimeout
            rows = slice(lo, lo + block)
            inside = member[rows]
            # Edges leaving the set: their tails are the boundary, their heads succ(L) \ L.
            leaving = inside[:, fg.src] & ~inside[:, fg.dst]
            boundary_mask[rows, src_s[src_heads]] = np.logical_or.reduceat(leaving[:, by_src], src_heads, axis=1)
            after[rows, dst_s[dst_heads]] = np.logical_or.reduceat(leaving[:, by_dst], dst_heads, axis=1)
            # Edges into succ(L) \ L from outside L: their tails are pred(succ(L)) \ L.
            feeding = after[rows][:, fg.dst] & ~inside[:, fg.src]
            before[rows, src_s[src_heads]] = np.logical_or.reduceat(feeding[:, by_src], src_heads, axis=1)

    def total(mask: np.ndarray, values: np.ndarray) -> np.ndarray:
        # By row blocks: the whole mask cast to the values' dtype would be eight times its size.
        return np.concatenate([mask[lo:lo + block].astype(values.dtype) @ values
                               for lo in range(0, len(mask), block)])

    return LowerSetFamily(
        sets=ordered,
        node_memory=fg.memory,
        node_duration=fg.duration,
        member=member,
        packed=packed,
        mem=total(member, fg.memory),
        dur=total(member, fg.duration),
        boundary=[np.flatnonzero(row) for row in boundary_mask],
        mem_boundary=total(boundary_mask, fg.memory),
        dur_interior=total(member & ~boundary_mask, fg.duration),
        outside=total(after, fg.memory) + total(before, fg.memory),
    )


# ---------------------------------------------------------------------- the dynamic program


@dataclass(frozen=True)
class Strategy:
    """A chain of lower sets (indices into the family, {} first, V last) scored by eq. 1 and eq. 2."""

    chain: tuple[int, ...]
    overhead: Number  # eq. 1
    peak: Number  # eq. 2, without fixed memory


@dataclass
class DPStats:
    """Work done by the dynamic programs of one run."""

    runs: int = 0
    states: int = 0  # Pareto-front entries kept, summed over runs
    transitions: int = 0  # states carried over a step L -> L' (within budget and bound), summed over runs
    time_s: float = 0.0


def step_terms(fam: LowerSetFamily, target: int,
               sources: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The terms of a step L -> L' for every L in ``sources`` (all subsets of L' = ``target``).

    Returns T(V' \\ B(L')) (added to the overhead, eq. 1), M(B(L') \\ L) (added
    to the kept memory) and 2 M(V') + M(succ(L') \\ L') + M(pred(succ(L')) \\ L')
    (eq. 2's memory besides the kept values). V' = L' \\ L, so each is a
    per-set total minus the part inside L; only L cap B(L') needs the members.

    Parameters
    ----------
    fam : LowerSetFamily
    target : int
        L', a family index.
    sources : np.ndarray
        Family indices of subsets of L'.

    Returns
    -------
    tuple of (np.ndarray, np.ndarray, np.ndarray)
        The three terms above, one entry per source.
    """
    cut = fam.boundary[target]
    shared = fam.member[np.ix_(sources, cut)]  # L cap B(L'), usually a column or two
    kept_in_source = shared.astype(fam.node_memory.dtype) @ fam.node_memory[cut]
    interior_of_source = fam.dur[sources] - shared.astype(fam.node_duration.dtype) @ fam.node_duration[cut]
    added_time = fam.dur_interior[target] - interior_of_source
    added_kept = fam.mem_boundary[target] - kept_in_source
    working = 2 * (fam.mem[target] - fam.mem[sources]) + fam.outside[target]
    return added_time, added_kept, working


class _Buffer:
    """Growable flat arrays of DP states: key (overhead, -overhead or peak), kept memory, predecessor, owner."""

    def __init__(self, dtype: np.dtype, capacity: int = 1024) -> None:
        self.size = 0
        self.key = np.empty(capacity, dtype=dtype)
        self.kept = np.empty(capacity, dtype=dtype)
        self.prev = np.empty(capacity, dtype=np.int64)
        self.owner = np.empty(capacity, dtype=np.int64)

    def append(self, key: np.ndarray, kept: np.ndarray, prev: np.ndarray, owner: int) -> int:
        start, end = self.size, self.size + len(key)
        if end > len(self.key):
            capacity = max(end, 2 * len(self.key))
            for name in ("key", "kept", "prev", "owner"):
                grown = np.empty(capacity, dtype=getattr(self, name).dtype)
                grown[:start] = getattr(self, name)[:start]
                setattr(self, name, grown)
        self.key[start:end] = key
        self.kept[start:end] = kept
        self.prev[start:end] = prev
        self.owner[start:end] = owner
        self.size = end
        return start


def subsets_among(fam: LowerSetFamily, target: int, candidates: np.ndarray) -> np.ndarray:
    """The members of ``candidates`` (family indices) that are subsets of ``target``.

    Parameters
    ----------
    fam : LowerSetFamily
    target : int
        A family index.
    candidates : np.ndarray
        Family indices.

    Returns
    -------
    np.ndarray
        Those of ``candidates`` inside ``target`` (``target`` itself included when among them), in their order.
    """
    return candidates[~np.any(fam.packed[candidates] & ~fam.packed[target], axis=1)]


def backward_bounds(fam: LowerSetFamily, budget: Number | None,
                    objective: str) -> tuple[np.ndarray, np.ndarray]:
    """Two bounds from V backwards, over the steps that fit with nothing kept (floats, for pruning).

    ``to_go[L]``: the least the objective key (overhead for ``tc``, minus the
    overhead for ``mc``) can still grow from L to V, memory aside: a lower
    bound. ``room[L]``: the most kept memory with which V can still be reached
    within ``budget``; -inf when it cannot be at all. Targets are visited
    from V down, so both values of L' are final when L' passes them on to its
    subsets.

    Parameters
    ----------
    fam : LowerSetFamily
    budget : Number or None
        The most eq. 2 memory (without fixed memory); None: no limit.
    objective : str
        ``tc`` or ``mc`` (what ``to_go`` bounds).

    Returns
    -------
    tuple of (np.ndarray, np.ndarray)
        ``to_go`` and ``room``, one float per family index.
    """
    count = fam.count
    to_go = np.full(count, np.inf)
    room = np.full(count, -np.inf)
    to_go[-1], room[-1] = 0.0, np.inf
    everything = np.arange(count)
    limit = np.inf if budget is None else float(budget)
    for target in range(count - 1, 0, -1):
        if room[target] < 0:
            continue
        sources = subsets_among(fam, target, everything[:target])
        added_time, added_kept, working = step_terms(fam, target, sources)
        slack = np.minimum(limit - working, room[target] - added_kept)
        usable = slack >= 0
        sources, slack = sources[usable], slack[usable]
        step = added_time[usable] if objective == "tc" else -added_time[usable]
        room[sources] = np.maximum(room[sources], slack)
        to_go[sources] = np.minimum(to_go[sources], to_go[target] + step)
    return to_go, room


def pareto_front(kept: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Indices of the Pareto front of (kept, key), both minimised, by increasing kept (decreasing key).

    Of equal points the first is kept. The candidates arrive as one run sorted
    by kept per source front, which a stable sort (timsort) merges quickly: a
    stable argsort by kept, then the least key of each group of equal kept,
    is faster than a lexsort on both (docs/benchmarks.md, "Figures that used to
    live in the code").

    Parameters
    ----------
    kept : np.ndarray
        Each candidate's kept memory.
    key : np.ndarray
        Each candidate's key (overhead, its negative, or peak).

    Returns
    -------
    np.ndarray
        Indices into ``kept`` and ``key`` of the front's points.
    """
    order = np.argsort(kept, kind="stable")
    kept_sorted, key_sorted = kept[order], key[order]
    starts = np.flatnonzero(np.r_[True, kept_sorted[1:] != kept_sorted[:-1]])
    group_best = np.minimum.reduceat(key_sorted, starts)
    # The best key among strictly smaller kept: a group is on the front if it beats it.
    earlier = np.empty_like(group_best)
    earlier[0] = np.inf if key.dtype.kind == "f" else np.iinfo(key.dtype).max
    earlier[1:] = np.minimum.accumulate(group_best)[:-1]
    sizes = np.diff(np.r_[starts, len(order)])
    group = np.repeat(np.arange(len(starts)), sizes)
    hits = np.flatnonzero((key_sorted == group_best[group]) & (group_best < earlier)[group])
    first = np.r_[True, group[hits[1:]] != group[hits[:-1]]]
    return order[hits[first]]


def leading(values: np.ndarray, starts: np.ndarray, lengths: np.ndarray, limits: np.ndarray,
            above: bool) -> np.ndarray:
    """For segments ``values[start:start + length]``, each sorted, how many leading values are
    at most their limit (``above=False``, ascending segments) or above it (``above=True``,
    descending segments): one vectorised binary search over all segments.

    Parameters
    ----------
    values : np.ndarray
        The segments, one after another.
    starts : np.ndarray
        Each segment's first index in ``values``.
    lengths : np.ndarray
        Each segment's length.
    limits : np.ndarray
        Each segment's limit.
    above : bool
        False: count the values at most the limit; True: those above it.

    Returns
    -------
    np.ndarray
        The count for each segment.
    """
    low = np.zeros_like(lengths)
    high = lengths.copy()
    last = max(len(values) - 1, 0)
    while True:
        active = low < high
        if not active.any():
            return low
        middle = (low + high) // 2
        probe = values[np.minimum(starts + middle, last)]
        ok = active & ((probe > limits) if above else (probe <= limits))
        low = np.where(ok, middle + 1, low)
        high = np.where(active & ~ok, middle, high)


def solve_dp(fam: LowerSetFamily, budget: Number | None, objective: str,
             deadline: Deadline | None = None, stats: DPStats | None = None, *,
             room: np.ndarray | None = None, to_go: np.ndarray | None = None,
             bound: float | None = None, state_limit: int | None = None) -> Strategy | None:
    """The DP of section 4.2 (Algorithm 1) over ``fam``; None when no chain fits ``budget``.

    ``objective``: ``tc`` least overhead (eq. 1), ``mc`` largest overhead, or
    ``peak`` least eq. 2 memory (then ``budget`` may be None). For each lower
    set the Pareto front of (key so far, kept memory m) is kept, the key being
    the overhead, its negative or the peak. Sets are visited by size, so every
    subset of L' is final before L' pulls from it; the work for L' is
    vectorised over all its subsets and their fronts.

    Optional pruning, none of which loses the optimum: ``room`` (drop a state
    whose kept memory leaves no way to V), ``to_go`` with ``bound`` (drop a
    state whose key plus the least still to come exceeds ``bound``; the result
    is then the optimum if its key is within ``bound``, and None otherwise).
    Past ``state_limit`` states the run stops by raising `_StateLimit`.

    Parameters
    ----------
    fam : LowerSetFamily
    budget : Number or None
        The most eq. 2 memory (without fixed memory) a chain may reach; None: no limit (``peak`` only).
    objective : str
        ``tc``, ``mc`` or ``peak``.
    deadline : Deadline or None
        When to give up; None: never.
    stats : DPStats or None
        Where the run's work is added (aborted runs included); None: not counted.
    room : np.ndarray or None
        `backward_bounds`'s ``room``; None: no pruning by it.
    to_go : np.ndarray or None
        `backward_bounds`'s ``to_go``, used with ``bound``.
    bound : float or None
        The largest key a chain may end with; None: no bound.
    state_limit : int or None
        The most states the table may hold; None: no limit.

    Returns
    -------
    Strategy or None

    Raises
    ------
    DPTimeout
        ``deadline`` passed.
    _StateLimit
        More than ``state_limit`` states.
    ValueError
        ``objective`` is not one of the three.
    """
    if objective not in ("tc", "mc", "peak"):
        raise ValueError(f"unknown DP objective {objective!r}")
    started = time.perf_counter()
    table = _ParetoTable(fam, budget, objective, room, to_go, bound)
    try:
        for target in range(1, fam.count):
            if deadline is not None and deadline.expired():
                raise DPTimeout
            if room is not None and room[target] < 0:
                continue
            table.extend(target)
            if state_limit is not None and table.states.size > state_limit:
                raise _StateLimit
    finally:  # aborted runs count too
        if stats is not None:
            stats.runs += 1
            stats.states += table.states.size
            stats.transitions += table.transitions
            stats.time_s += time.perf_counter() - started
    chain = table.best_chain()
    if chain is None:
        return None
    overhead, peak = evaluate_chain(fam, chain)
    return Strategy(tuple(chain), overhead, peak)


class _ParetoTable:
    """Algorithm 1's table: for each lower set reached, the Pareto front of its states (key, kept
    memory), each state with its predecessor, in one `_Buffer`. Starts with the state of {}:
    nothing spent, nothing kept."""

    def __init__(self, fam: LowerSetFamily, budget: Number | None, objective: str, room: np.ndarray | None,
                 to_go: np.ndarray | None, bound: float | None) -> None:
        self.fam, self.budget, self.objective = fam, budget, objective
        self.room, self.to_go, self.bound = room, to_go, bound
        dtype = np.result_type(fam.mem.dtype, fam.dur.dtype)
        # Bounds are floats: compare with a little slack so that rounding never prunes the optimum.
        self.slack = 0.0 if dtype.kind in "iu" else 1e-9
        self.states = _Buffer(dtype)
        self.front_start = np.zeros(fam.count, dtype=np.int64)
        self.front_len = np.zeros(fam.count, dtype=np.int64)
        self.reached = np.zeros(fam.count, dtype=np.int64)  # the sets with a state, in order: reached[:n_reached]
        self.states.append(np.zeros(1, dtype), np.zeros(1, dtype), np.full(1, -1), 0)
        self.front_len[0] = 1
        self.n_reached = int(room is None or room[0] >= 0)
        self.transitions = 0

    def loosen(self, limit: float) -> float:
        slack = self.slack
        return limit + slack * (1 + abs(limit)) if slack and math.isfinite(limit) else limit

    def extend(self, target: int) -> None:
        """The recurrence for L' = ``target``: every usable state of every subset L reached steps to L'
        (adding eq. 1's overhead and the kept memory of the step), and L' keeps their Pareto front."""
        fam, states = self.fam, self.states
        sources = subsets_among(fam, target, self.reached[:self.n_reached])
        if not len(sources):
            return
        added_time, added_kept, working = step_terms(fam, target, sources)
        step = added_time if self.objective == "tc" else -added_time  # mc: minimise minus the overhead
        starts = self.front_start[sources]
        begin, end = self.usable(target, starts, self.front_len[sources], step, added_kept, working)
        usable = end > begin
        if not usable.any():
            return
        if not usable.all():
            starts, begin, end, step, added_kept, working = (
                starts[usable], begin[usable], end[usable], step[usable], added_kept[usable], working[usable])
        # The usable states of every source, flattened: `which` is the source of each.
        lengths = end - begin
        which = np.repeat(np.arange(len(lengths)), lengths)
        index = np.repeat(starts + begin - (np.cumsum(lengths) - lengths), lengths) + np.arange(len(which))
        self.transitions += len(index)
        kept = states.kept[index]
        key = states.key[index]
        if self.objective == "peak":
            key = np.maximum(key, kept + working[which])  # eq. 2's bracket for block V'
        else:
            key = key + step[which]
        kept = kept + added_kept[which]
        chosen = pareto_front(kept, key)
        self.front_start[target] = states.append(key[chosen], kept[chosen], index[chosen], target)
        self.front_len[target] = len(chosen)
        self.reached[self.n_reached] = target
        self.n_reached += 1

    def usable(self, target: int, starts: np.ndarray, end: np.ndarray, step: np.ndarray, added_kept: np.ndarray,
               working: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The range [begin, end) of each source's front that may step to L'. Each front runs by
        increasing kept memory and decreasing key, so the range is a prefix by memory (eq. 2 within
        the budget, V still reachable) and a suffix by key (within the bound)."""
        budget, room = self.budget, self.room
        kept_limit = np.full(len(starts), np.inf)
        if budget is not None:
            kept_limit = np.minimum(kept_limit, budget - working)
        if room is not None:
            kept_limit = np.minimum(kept_limit, self.loosen(float(room[target])) - added_kept)
        if budget is not None or room is not None:
            end = leading(self.states.kept, starts, end, kept_limit, above=False)
        begin = np.zeros_like(end)
        if self.bound is not None and self.to_go is not None and self.objective != "peak":
            key_limit = self.loosen(self.bound) - self.to_go[target] - step
            begin = leading(self.states.key, starts, end, key_limit, above=True)
        return begin, end

    def best_chain(self) -> list[int] | None:
        """Reconstruction: the best state of V followed back to {}, as family indices; None if V was
        not reached."""
        last = self.fam.count - 1
        if not self.n_reached or self.reached[self.n_reached - 1] != last:
            return None
        start = self.front_start[last]
        best = int(start + np.argmin(self.states.key[start:start + self.front_len[last]]))
        chain = []
        while best >= 0:
            chain.append(int(self.states.owner[best]))
            best = int(self.states.prev[best])
        chain.reverse()
        return chain


def least_peak(fam: LowerSetFamily, budget: Number | None = None, deadline: Deadline | None = None,
               stats: DPStats | None = None) -> Strategy | None:
    """The chain of least eq. 2 peak (None if even that is over ``budget``).

    The DP minimising the peak is run as if the budget were a bound that
    starts just above a lower bound and doubles its distance from it: below
    the bound, states are cut by the budget test, and a run that finds a chain
    has found the least peak. The lower bound: the block holding v needs at
    least 2 M(v) plus the succ/pred terms of some lower set containing v.
    The one-step chain {} -> V (peak 2 M(V)) caps the search.

    Parameters
    ----------
    fam : LowerSetFamily
    budget : Number or None
        The most eq. 2 memory (without fixed memory); None: no limit.
    deadline : Deadline or None
        When to give up; None: never.
    stats : DPStats or None
        Where the runs' work is added; None: not counted.

    Returns
    -------
    Strategy or None

    Raises
    ------
    DPTimeout
        ``deadline`` passed.
    """
    present = np.where(fam.member, fam.outside[:, None], np.inf).min(axis=0)
    lower = float(np.max(2 * fam.node_memory + present)) if fam.member.shape[1] else 0.0
    ceiling = float(2 * fam.mem[-1])
    if budget is not None:
        if budget < lower:
            return None
        ceiling = min(ceiling, float(budget))
    gap = lower / 8 if lower > 0 else ceiling / 1024
    while lower + gap < ceiling:
        found = solve_dp(fam, lower + gap, "peak", deadline, stats)
        if found is not None:
            return found
        gap *= 2
    return solve_dp(fam, ceiling, "peak", deadline, stats)


def best_chain(fam: LowerSetFamily, budget: Number | None, objective: str,
               deadline: Deadline | None = None, stats: DPStats | None = None) -> Strategy | None:
    """The optimal chain of ``fam`` for ``objective`` within ``budget`` (eq. 2), or None if none fits.

    The plain DP (`solve_dp`) can keep thousands of (overhead, memory) states
    per lower set when sizes are real byte counts (DenseNet-121: docs/benchmarks.md,
    "Figures that used to live in the code"). Pruning keeps it exact and fast: `backward_bounds` drops
    states that cannot reach V and gives a lower bound on the key (overhead
    for ``tc``, its negative for ``mc``). A plain run is tried first and
    stopped if it keeps more than a few states per lower set; then the DP is
    run with a bound that starts just above the lower bound and doubles its
    distance from it until a chain survives. A run that finds one is exact:
    every state of every chain whose key is within the bound is kept, the
    optimum among them.

    Parameters
    ----------
    fam : LowerSetFamily
    budget : Number or None
        The most eq. 2 memory (without fixed memory); None: no limit.
    objective : str
        ``tc`` (least overhead), ``mc`` (largest overhead) or ``peak`` (least eq. 2 peak: `least_peak`).
    deadline : Deadline or None
        When to give up; None: never.
    stats : DPStats or None
        Where the runs' work is added; None: not counted.

    Returns
    -------
    Strategy or None

    Raises
    ------
    DPTimeout
        ``deadline`` passed.
    """
    if objective == "peak":
        return least_peak(fam, budget, deadline, stats)
    started = time.perf_counter()
    to_go, room = backward_bounds(fam, budget, objective)
    if stats is not None:
        stats.time_s += time.perf_counter() - started
    if room[0] < 0:
        return None
    # Tight budgets leave few states: then one plain run is cheapest. Past a few states per
    # lower set, prune by a bound instead.
    try:
        return solve_dp(fam, budget, objective, deadline, stats, room=room, state_limit=STATES_PER_SET * fam.count)
    except _StateLimit:
        pass
    # No chain's overhead exceeds T(V): every node is recomputed at most once.
    ceiling = float(fam.dur[-1]) if objective == "tc" else 0.0
    lowest = float(to_go[0])
    gap = float(fam.dur[-1]) / 1024
    while gap > 0 and lowest + gap < ceiling:
        found = solve_dp(fam, budget, objective, deadline, stats, room=room, to_go=to_go, bound=lowest + gap)
        if found is not None:
            return found
        gap *= 2
    return solve_dp(fam, budget, objective, deadline, stats, room=room)


def evaluate_chain(fam: LowerSetFamily, chain: list[int] | tuple[int, ...]) -> tuple[Number, Number]:
    """Eq. 1 overhead and eq. 2 peak (without fixed memory) of a chain of family indices from {} to V.

    Parameters
    ----------
    fam : LowerSetFamily
    chain : list of int or tuple of int
        Family indices, each set a subset of the next.

    Returns
    -------
    tuple of (Number, Number)
        The overhead (duration units) and the peak (memory units).
    """
    overhead: Number = 0
    peak: Number = 0
    kept: Number = 0
    for before, after in pairwise(chain):
        added_time, added_kept, working = step_terms(fam, after, np.array([before]))
        peak = max(peak, _item(kept + working[0]))
        kept = _item(kept + added_kept[0])
        overhead = _item(overhead + added_time[0])
    return overhead, peak


def _item(x: Any) -> Number:
    return x.item() if isinstance(x, np.generic) else x


def chain_plan(fg: ForwardGraph, fam: LowerSetFamily, chain: tuple[int, ...]) -> Plan:
    """The canonical strategy of ``chain`` as a lowering plan: keep B(Li) \\ L(i-1), segments Vi.

    Parameters
    ----------
    fg : ForwardGraph
    fam : LowerSetFamily
        The family ``chain`` indexes.
    chain : tuple of int
        Family indices from {} to V.

    Returns
    -------
    Plan
        In the graph's node indices.
    """
    kept: list[int] = []
    segments: list[tuple[int, ...]] = []
    for before, after in pairwise(chain):
        block = fam.member[after] & ~fam.member[before]
        segments.append(tuple(fg.nodes[block].tolist()))
        cut = fam.boundary[after]
        kept.extend(fg.nodes[cut[block[cut]]].tolist())
    return Plan(frozenset(kept), tuple(segments))


# ---------------------------------------------------------------------- the method


@dataclass
class _Attempt:
    """One internal budget: the DP's chain, its lowered schedule and what the simulator measured."""

    internal_budget: Number
    strategy: Strategy
    schedule: Schedule
    simulation: Simulation


@dataclass
class _Search:
    """Runs the DP at internal budgets, lowering and simulating each distinct chain once."""

    graph: Graph
    fg: ForwardGraph
    fam: LowerSetFamily
    strategy: str
    deadline: Deadline
    dp: DPStats = field(default_factory=DPStats)
    steps: int = 0  # bisection steps
    first: _Attempt | None = None  # the attempt at the run's own budget
    lowered: dict[tuple[int, ...], tuple[Schedule, Simulation]] = field(default_factory=dict)

    def attempt(self, internal_budget: Number) -> _Attempt | None:
        found = best_chain(self.fam, internal_budget, self.strategy, self.deadline, self.dp)
        if found is None:
            return None
        if found.chain not in self.lowered:
            schedule = lower_plan(self.graph, chain_plan(self.fg, self.fam, found.chain))
            self.lowered[found.chain] = (schedule, simulate(self.graph, schedule))
        schedule, simulation = self.lowered[found.chain]
        return _Attempt(internal_budget, found, schedule, simulation)

    def least_budget(self) -> Number:
        """The least eq. 2 peak over the family: below it the DP has no chain."""
        found = best_chain(self.fam, None, "peak", self.deadline, self.dp)
        assert found is not None  # {} -> V is always a chain
        peak = found.peak
        if isinstance(peak, float) or (hasattr(peak, "dtype") and peak.dtype.kind == "f"):
            # Fractional sizes: the DP adds the same terms in another order when it checks a
            # transition, so its own least peak can fail it by an ulp. The internal budget only
            # steers the DP (the simulator judges the schedule), so a hair above is harmless.
            peak = float(peak) + abs(float(peak)) * 1e-9 + 1e-12
        return peak


class Kusumoto(Method):
    name = "kusumoto"
    search_space = "forward checkpoint plans of lower sets, lowered by the shared lowering"
    description = "Kusumoto et al. 2019: DP over lower sets of the forward graph, exact or approximate, tc or mc"
    needs_backward = True
    member = Membership(Role.FAST, rank=7)
    params = (
        Param("variant", str, "exact",
              "exact: every lower set (section 4.2); approx: {}, V and the ancestor sets (section 4.3)",
              choices=("exact", "approx")),
        Param("strategy", str, "tc",
              "tc: least overhead within the budget; mc: largest overhead (coarse blocks, lower real peak)",
              choices=("tc", "mc")),
        Param("max_lower_sets", int, 10000,
              "the exact variant gives up past this many lower sets (use variant=approx then)", minimum=1,
              maximum=10_000_000),
    )

    def solve(self, graph: Graph, budget: Number | None, time_limit: float | None,
              **params: Any) -> MethodResult:
        started = time.perf_counter()
        deadline = Deadline(time_limit)
        fg = forward_graph(graph)
        variant = params["variant"]
        family = self._lower_sets(graph, fg, variant, params["max_lower_sets"], started)
        if isinstance(family, MethodResult):
            return family
        sets, available = family
        enumerated = time.perf_counter()
        try:
            if deadline.expired():
                raise DPTimeout
            fam = lower_set_family(fg, sets, deadline)
        except DPTimeout:
            return MethodResult(
                SolutionStatus.NO_SOLUTION, solve_time_s=time.perf_counter() - started, termination=cut_short(),
                stats={"variant": variant, "lower_sets": len(sets), "forward_nodes": fg.n},
                message=(f"the time limit ({time_limit:.3g} s) ran out while tabulating {len(sets):,} lower sets "
                         f"over {fg.n:,} forward nodes"))
        search = _Search(graph, fg, fam, params["strategy"], deadline)
        stats: dict[str, Any] = {
            "variant": variant,
            "strategy": params["strategy"],
            "forward_nodes": fg.n,
            "lower_sets": fam.count,
            **({"lower_sets_before_thinning": available} if available > fam.count else {}),
            "enumeration_s": round(enumerated - started, 4),
            "family_s": round(time.perf_counter() - enumerated, 4),
        }
        try:
            best, note = self._search(search, budget, graph.fixed_memory)
        except DPTimeout:
            best, note = None, f"the time limit ({time_limit:.3g} s) ran out inside the DP over {fam.count} lower sets"
        except LoweringError as exc:
            return MethodResult(SolutionStatus.NO_SOLUTION, message=str(exc), termination=Termination.NOT_APPLICABLE)
        return self._answer(search, best, note, stats, available, started, search_ended(deadline))

    @staticmethod
    def _lower_sets(graph: Graph, fg: ForwardGraph, variant: str, cap: int,
                    started: float) -> tuple[list[int], int] | MethodResult:
        """The family the DP walks, every lower set (section 4.2) or the ancestor sets (section 4.3),
        thinned when its tables would not fit, with the count before thinning; or the ``no_solution``
        answer when there are too many lower sets to enumerate or to tabulate."""
        if variant == "exact":
            sets = enumerate_lower_sets(fg, cap)
            if sets is None:
                return MethodResult(
                    SolutionStatus.NO_SOLUTION, solve_time_s=time.perf_counter() - started,
                    termination=Termination.RESOURCE_LIMIT,  # a refusal for the family's size
                    stats={"variant": variant, "lower_sets": f">{cap}", "forward_nodes": fg.n},
                    message=(f"the forward graph of '{graph.name}' has more than {cap} lower sets "
                             f"(max_lower_sets); use variant=approx, or raise max_lower_sets"))
        else:
            sets = ancestor_sets(fg)
        available = len(sets)
        if variant == "approx" and available * fg.n > MAX_TABLE_CELLS:
            sets = thin_family(sets, max(2, min(THINNED_SETS, MAX_TABLE_CELLS // fg.n)))
        if len(sets) * fg.n > MAX_TABLE_CELLS:
            need = 4 * len(sets) * fg.n
            size = f"{need / 2**30:.1f} GiB" if need >= 2**30 else f"{need / 2**20:.2f} MiB"
            return MethodResult(
                SolutionStatus.NO_SOLUTION, solve_time_s=time.perf_counter() - started,
                termination=Termination.RESOURCE_LIMIT,  # a refusal for the tables' size
                stats={"variant": variant, "lower_sets": len(sets), "forward_nodes": fg.n},
                message=(f"the {len(sets):,} lower sets over {fg.n:,} forward nodes of '{graph.name}' would need "
                         f"{size} of tables, more than this implementation holds "
                         f"({MAX_TABLE_CELLS:,} set-node cells); the family grows with the square of the "
                         "forward graph" + ("; use variant=approx, which thins its family to fit"
                                            if variant == "exact" else "")))
        return sets, available

    @staticmethod
    def _answer(search: _Search, best: _Attempt | None, note: str, stats: dict[str, Any], available: int,
                started: float, termination: Termination) -> MethodResult:
        """The run's result: the chosen attempt's schedule, with the DP's work and how far the paper's
        memory model (eq. 2) was from the simulator."""
        fam, fixed = search.fam, search.graph.fixed_memory
        stats.update({
            "dp_runs": search.dp.runs,
            "dp_states": search.dp.states,
            "dp_transitions": search.dp.transitions,
            "dp_s": round(search.dp.time_s, 4),
            "plans_simulated": len(search.lowered),
            "bisection_steps": search.steps,
        })
        if search.first is not None and search.first is not best:
            stats["first_model_peak"] = _item(search.first.strategy.peak + fixed)
            stats["first_simulated_peak"] = search.first.simulation.peak
        elapsed = time.perf_counter() - started
        if available > fam.count:
            thinned = (f"the {available:,} ancestor sets were thinned to {fam.count:,}, evenly spaced by size "
                       f"(tables of every set would exceed {MAX_TABLE_CELLS:,} set-node cells)")
            note = f"{thinned}; {note}" if note else thinned
        if best is None:
            return MethodResult(SolutionStatus.NO_SOLUTION, solve_time_s=elapsed, stats=stats, message=note,
                                termination=termination)
        sim = best.simulation
        model_peak = _item(best.strategy.peak + fixed)
        stats.update({
            "blocks": len(best.strategy.chain) - 1,
            "kept": len(chain_plan(search.fg, fam, best.strategy.chain).kept),
            "dp_overhead": best.strategy.overhead,  # eq. 1, in duration units
            "internal_budget": _item(best.internal_budget + fixed),
            "model_peak": model_peak,  # eq. 2 plus the fixed memory
            "simulated_peak": sim.peak,
            "model_error_pct": round(100.0 * (sim.peak - model_peak) / model_peak, 3) if model_peak else None,
        })
        return MethodResult(SolutionStatus.FEASIBLE, best.schedule, objective=sim.duration, solve_time_s=elapsed,
                            termination=termination,
                            stats=stats, message=note)

    @staticmethod
    def _search(search: _Search, budget: Number | None, fixed: Number) -> tuple[_Attempt | None, str]:
        """Pick the internal budget: the DP's least one for ``min``; else bisect until the simulator agrees."""
        floor = search.least_budget()
        if budget is None:
            found = search.attempt(floor)
            assert found is not None  # at its least budget the DP has a chain
            return found, ""
        start = budget - fixed
        first = search.attempt(start) if start >= floor else None
        search.first = first
        if first is not None and first.simulation.peak <= budget:
            return first, ""

        # Bisection over the internal budget: `low` fits once simulated, `high` does not. The bracket
        # is first narrowed by lowering the internal budget by the excess just measured, a few
        # times, which usually lands on one that fits.
        low: _Attempt | None = None
        high = start
        current = first
        for _ in range(GUESSES if first is not None else 0):
            assert current is not None
            guess = current.internal_budget - (current.simulation.peak - budget)
            if guess <= floor:
                break
            found = search.attempt(guess)
            search.steps += 1
            assert found is not None  # guess > floor
            if found.simulation.peak <= budget:
                low = found
                break
            high, current = guess, found
        if low is None:
            low = search.attempt(floor)
            assert low is not None
            if low.simulation.peak > budget:
                return None, (
                    f"no canonical strategy fits: at the least budget with which the DP finds a chain "
                    f"({_item(floor + fixed)} by the paper's model) the simulated peak is "
                    f"{memory_text(low.simulation.peak, search.graph)}, above the budget "
                    f"{memory_text(budget, search.graph)}")
        if first is None:
            return low, (
                f"the paper's memory model puts every chain above the budget (least {_item(floor + fixed)}), "
                f"but the leanest one peaks at {low.simulation.peak} once simulated")
        best = low
        tolerance = max(BISECTION_TOLERANCE * budget, 1 if isinstance(budget, int) else 0)
        bottom = low.internal_budget
        while high - bottom > tolerance and not search.deadline.expired():
            middle = (bottom + high) // 2 if isinstance(bottom + high, int) else (bottom + high) / 2
            try:
                found = search.attempt(middle)
            except DPTimeout:  # out of time: the best schedule that fits so far
                break
            search.steps += 1
            assert found is not None  # middle > floor
            if found.simulation.peak <= budget:
                bottom = middle
                # tc: the shortest schedule that fits; mc: the one at the largest internal budget.
                if search.strategy == "mc" or found.simulation.duration < best.simulation.duration:
                    best = found
            else:
                high = middle
        return best, (
            f"at the DP budget {_item(budget)} the simulated peak was {first.simulation.peak} where the "
            f"paper's model said {_item(first.strategy.peak + fixed)}; {search.steps} bisection steps "
            f"tightened the DP budget to {_item(best.internal_budget + fixed)}")
