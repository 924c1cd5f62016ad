"""Kumar et al. 2019, "Efficient Rematerialization for Deep Networks" (NeurIPS 2019), TWRemat.

A divide-and-conquer schedule on a tree decomposition of the (undirected)
computation graph. With a decomposition (X, T) of width k, Lemma 1 merges
adjacent bags where one contains the other (at most n bags remain), Lemma 3
picks a centroid bag X* whose removal leaves components of at most |X|/2 bags,
and Algorithm 1 recurses on the components V_i (the nodes of a component's
bags, less X* and every separator above):

    TWRemat(V', S):                       # compute every node of S, which stays resident
        for v in X* ∩ need(V', S), in topological order:
            for each component i:  TWRemat(V_i, in(v) ∩ V_i)
            compute v;  free in(v) ∩ (V' \\ X*)
        for each component i:      TWRemat(V_i, S ∩ V_i)
        free X* \\ S

with ``need(V', S)`` the nodes of V' from which S is reachable inside V'. A
region of a single bag (of fewer than k bags for TWRemat(k), Section 4.3)
is the base case: ``need(V', S)`` in topological order, each value freed
after its last use there. Theorem 5: peak O((M_in + k M_max) log n), length
O(T_onepass k n^log(k+2)) for width k. TWRemat(1) is Algorithm 1; TWRemat(k)
for k above the bag count does not recurse at all: when every node feeds an
output it is the baseline, step for step.

Mapping to remat-bench: a node is a value, computed with its first
implementation (whose inputs define the graph's edges here); workspace and
fixed memory are the simulator's business. The top-level S is the graph's
outputs. Nodes that no output depends on must still be computed once
(docs/design.md section 3): a first pass runs TWRemat(V, those nodes' sinks) and
frees them, before the main pass leaves the outputs resident.

Frees. The schedule is written with the frees where Algorithm 1 places them,
so the simulator checks the recursion's own bookkeeping (every input it
assumes resident really is). Algorithm 1 holds separator values until its
call ends; the shared clean-up (`cleanup.place_frees`) then moves every free
to the value's last use, which on Kumar et al.'s Figure 1 lowers the peak from
4 to the paper's 3 (the schedule A, B, C, D, A, E). The pipeline scores the
cleaned schedule, so the k search judges, and the method returns, the cleaned
schedule; Algorithm 1's own peak and duration are kept in the stats.

What this adds to the paper:

- ``need(V', S)``: the separator loop takes only the separator nodes S needs.
  The paper's "for node v in X*" would also compute separator nodes S does
  not depend on, whose inputs in an enclosing separator may not be resident
  yet; with the restriction, every input outside V' is an ancestor of the
  caller's current target, hence already computed (the proof of Lemma 4).
- The decomposition's recursion (centroids, components, which region holds
  each node) is computed once and memoized, as Theorem 5's proof asks.
- Identical sub-calls (same region, same S) emit identical steps: the second
  one copies the first one's steps, so building the schedule costs time
  proportional to its length. The recursion runs on an explicit stack of
  generator frames, never on Python's call stack.
- Budgets: TWRemat minimises memory and has no budget of its own, so the
  method searches k (and, with ``heuristic=both``, the decomposition
  heuristic) and reports the k it kept. The values of k that matter are the
  cut-offs where a region turns into a base case; ``grid`` of them, spread
  geometrically, are tried first. With ``--budget min`` every grid value is
  built and the lowest peak kept (peaks do not fall monotonically with k).
  With a budget the shortest schedule that fits is wanted, and durations
  never fall as k falls (a recursion computes every node its base case
  would, and more), so it is the largest k that fits: the grid is walked
  down to the first fit, then the cut-offs between it and the grid value
  above are bisected. ``k`` fixes TWRemat(k) instead. The first build
  (the shallowest recursion, for a search: nearly the baseline, and cheap)
  always runs to the end; later ones stop at the time limit and past
  `MAX_STEPS` steps.

Decompositions: heuristics, as in the paper's experiments. Minimum degree by
default (`min_degree_decomposition`, an elimination order turned into a tree
in linear time), networkx's minimum fill-in on request (cubic, slow past a
few thousand nodes). Left out: the exact (5 tw + 4)-approximate decomposition
of Bodlaender et al., and the path-decomposition algorithm of Section 5.
"""

from __future__ import annotations

import heapq
import time
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import networkx as nx
import numpy as np
from networkx.algorithms.approximation import treewidth_min_fill_in

from remat_bench.core.budget import memory_text
from remat_bench.core.cleanup import place_frees
from remat_bench.core.graph import Graph, Number
from remat_bench.core.schedule import COMPUTE, FREE, Schedule
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
    interrupted,
    search_ended,
)
from remat_bench.toolkit.child import can_spawn, run_in_child

# A build of TWRemat(k) past this many steps is abandoned (about 1 GB once simulated and
# cleaned up): the deep recursions of wide graphs can grow as n^log(k+2) (Theorem 5).
MAX_STEPS = 20_000_000
# From this many nodes, a time-limited decomposition runs in a child process; smaller graphs
# decompose in process, sparing a process start.
CHILD_PROCESS_NODES = 20_000

# Tree decomposition heuristics: minimum degree (written here, `min_degree_decomposition`) and
# networkx's minimum fill-in.
HEURISTICS = ("min_degree", "min_fill_in")


# ---------------------------------------------------------------------- decomposition (Lemma 1)


@dataclass(frozen=True)
class TreeDecomposition:
    """A tree decomposition of a graph's undirected skeleton, after Lemma 1's merging.

    ``bags[i]`` is a set of node indices; ``edges`` are the tree's edges
    between bag positions. ``raw_bags`` is the bag count before merging.
    """

    bags: list[frozenset[int]]
    edges: list[tuple[int, int]]
    heuristic: str
    raw_bags: int

    @property
    def width(self) -> int:
        """Largest bag size minus one."""
        return max(len(b) for b in self.bags) - 1


def dependencies(graph: Graph) -> list[tuple[int, ...]]:
    """The inputs of each node's first implementation, the one TWRemat computes it with.

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    list of tuple of int
        Per node, its first implementation's input indices.
    """
    return [graph.op_inputs[start] for start in graph.op_start[:-1].tolist()]


def merge_nested_bags(bags: list[frozenset[int]], edges: list[tuple[int, int]]
                      ) -> tuple[list[frozenset[int]], list[tuple[int, int]]]:
    """Lemma 1: merge every adjacent pair of bags where one contains the other.

    One pass over the tree's edges with a union-find suffices: a pair that
    cannot be merged has a node on each side that the other can never gain.
    The merged bag is the larger of the two, so no set is ever built.

    Parameters
    ----------
    bags : list of frozenset of int
        The bags, each a set of node indices.
    edges : list of tuple of (int, int)
        The tree's edges, as bag positions.

    Returns
    -------
    tuple of (list of frozenset of int, list of tuple of (int, int))
        The contracted tree (at most n bags): bags renumbered in their old order, and its edges.
    """
    parent = list(range(len(bags)))

    def find(x: int) -> int:
        root = x
        while parent[root] != root:
            root = parent[root]
        while parent[x] != root:  # path compression
            parent[x], x = root, parent[x]
        return root

    for a, b in edges:
        ra, rb = find(a), find(b)
        if bags[ra] <= bags[rb]:
            parent[ra] = rb
        elif bags[rb] <= bags[ra]:
            parent[rb] = ra
    roots = [i for i in range(len(bags)) if find(i) == i]
    new_index = {r: j for j, r in enumerate(roots)}
    new_edges = []
    for a, b in edges:
        ra, rb = find(a), find(b)
        if ra != rb:  # contracting edges of a tree leaves a tree: no duplicates, no cycles
            new_edges.append((new_index[ra], new_index[rb]))
    return [bags[r] for r in roots], new_edges


class DecompositionStopped(Exception):
    """A decomposition was stopped (time limit, Ctrl-C), or the child process running networkx's died
    (``termination`` says which)."""

    def __init__(self, message: str, termination: Termination) -> None:
        super().__init__(message)
        self.termination = termination


def _stopped(deadline: Deadline) -> DecompositionStopped:
    return DecompositionStopped("interrupted" if interrupted() else
                                f"stopped at the time limit ({deadline.seconds:.3g} s)", cut_short())


def min_degree_decomposition(n: int, edges: list[tuple[int, int]],
                             deadline: Deadline | None = None
                             ) -> tuple[list[frozenset[int]], list[tuple[int, int]]]:
    """A tree decomposition by minimum-degree elimination: bags and tree edges (before Lemma 1).

    Eliminate a node of least degree, join its neighbours into a clique, and
    repeat; the bag of an eliminated node v is v with its neighbours at that
    moment, and its parent is the bag of the neighbour eliminated first after
    v (the standard construction from an elimination order: every neighbour
    of v is in that bag, so each node's bags stay connected). Parentless bags
    (one per connected component) are joined to the last one.

    Written here rather than calling networkx's ``treewidth_min_degree``
    because networkx builds the tree by scanning every bag made so far for
    each eliminated node: quadratic (docs/benchmarks.md, "Large graphs"). Ties
    are broken as networkx does (first queued), so the result is deterministic.
    Raises `DecompositionStopped` when ``deadline`` has passed at one of its
    checks, every 4,096 eliminations (a small graph always decomposes, so a
    search out of time still has its first schedule).

    Parameters
    ----------
    n : int
        Nodes, numbered 0..n-1.
    edges : list of tuple of (int, int)
        The skeleton's edges, in either direction (self-loops are ignored).
    deadline : Deadline or None
        When to stop; None: never.

    Returns
    -------
    tuple of (list of frozenset of int, list of tuple of (int, int))
        One bag per node, in elimination order, and the tree's edges between bag positions.

    Raises
    ------
    DecompositionStopped
        ``deadline`` passed (or Ctrl-C).
    """
    adjacency: list[set[int]] = [set() for _ in range(n)]
    for u, v in edges:
        if u != v:
            adjacency[u].add(v)
            adjacency[v].add(u)
    # Ties go to the entry queued first (nodes in index order, then the neighbours of each
    # eliminated node, re-queued with their new degrees), as networkx's heuristic breaks them:
    # its trees recursed better on ResNets than lowest-index ties did (docs/benchmarks.md,
    # "Figures that used to live in the code").
    heap = [(len(adj), v, v) for v, adj in enumerate(adjacency)]
    heapq.heapify(heap)
    queued = n
    position = [-1] * n  # elimination position
    neighbours: list[list[int]] = [[] for _ in range(n)]
    step = 0
    while heap:
        degree, _, v = heapq.heappop(heap)
        if position[v] >= 0 or degree != len(adjacency[v]):
            continue  # stale entry: v was eliminated, or its degree changed since
        if deadline is not None and step % 4096 == 4095 and deadline.expired():
            raise _stopped(deadline)
        around = adjacency[v]
        for u in around:
            adjacency[u].discard(v)
            grown = around - adjacency[u]
            grown.discard(u)
            if grown:
                adjacency[u] |= grown
            heapq.heappush(heap, (len(adjacency[u]), queued, u))
            queued += 1
        neighbours[v] = sorted(around)
        adjacency[v] = set()
        position[v] = step
        step += 1
    order = sorted(range(n), key=position.__getitem__)
    bags = [frozenset([v, *neighbours[v]]) for v in order]
    tree_edges: list[tuple[int, int]] = []
    roots: list[int] = []
    for i, v in enumerate(order):
        if neighbours[v]:
            tree_edges.append((i, min(position[u] for u in neighbours[v])))
        else:
            roots.append(i)
    last = n - 1
    tree_edges.extend((r, last) for r in roots if r != last)
    return bags, tree_edges


def _min_fill_in_decomposition(n: int, edges: list[tuple[int, int]]
                               ) -> tuple[list[frozenset[int]], list[tuple[int, int]]]:
    """networkx's minimum fill-in heuristic: bags and tree edges (before Lemma 1)."""
    skeleton = nx.Graph()
    skeleton.add_nodes_from(range(n))
    skeleton.add_edges_from(edges)
    _, tree = treewidth_min_fill_in(skeleton)
    raw_bags: list[frozenset[int]] = list(tree.nodes)
    position = {bag: i for i, bag in enumerate(raw_bags)}
    return raw_bags, [(position[a], position[b]) for a, b in tree.edges]


def tree_decomposition(graph: Graph, heuristic: str = "min_degree",
                       deadline: Deadline | None = None) -> TreeDecomposition:
    """A tree decomposition of ``graph``'s undirected skeleton (a heuristic, then Lemma 1).

    ``min_degree``: `min_degree_decomposition`, checking the deadline as it
    goes. ``min_fill_in``: networkx's heuristic, which cannot be interrupted
    and is cubic; with a time limit, graphs of `CHILD_PROCESS_NODES` nodes or
    more are decomposed in a child process stopped at the limit (raising
    `DecompositionStopped`).

    Parameters
    ----------
    graph : Graph
        Its skeleton: an edge from each first implementation's input to its node (`dependencies`).
    heuristic : str
        One of `HEURISTICS`.
    deadline : Deadline or None
        When to stop; None: never.

    Returns
    -------
    TreeDecomposition

    Raises
    ------
    DecompositionStopped
        The time limit or Ctrl-C stopped it, or the child process died.
    RuntimeError
        The child process's networkx raised.
    ValueError
        ``heuristic`` is not one of `HEURISTICS`.
    """
    if heuristic not in HEURISTICS:
        raise ValueError(f"unknown tree decomposition heuristic {heuristic!r}")
    edges = [(u, v) for v, ins in enumerate(dependencies(graph)) for u in ins]
    if heuristic == "min_degree":
        raw_bags, raw_edges = min_degree_decomposition(graph.n, edges, deadline)
    else:
        args = (graph.n, edges)
        outcome = None
        if (deadline is not None and deadline.remaining() is not None and graph.n >= CHILD_PROCESS_NODES
                and can_spawn()):
            outcome = run_in_child(_min_fill_in_decomposition, args, stop=deadline.expired)
            if outcome.died:
                raise DecompositionStopped(outcome.message, Termination.ERROR)
            if outcome.termination is Termination.ERROR:
                raise RuntimeError(outcome.message)
            if outcome.termination in (Termination.TIME_LIMIT, Termination.INTERRUPTED):
                raise _stopped(deadline)
        if outcome is not None and outcome.returned:
            raw_bags, raw_edges = outcome.value
        else:  # small graph, no limit, or no child could start
            raw_bags, raw_edges = _min_fill_in_decomposition(*args)
    bags, tree_edges = merge_nested_bags(raw_bags, raw_edges)
    return TreeDecomposition(bags, tree_edges, heuristic, len(raw_bags))


# ---------------------------------------------------------------------- balanced separators (Lemma 3)


@dataclass(frozen=True)
class SeparatorTree:
    """Algorithm 1's recursion on one decomposition, computed once (Lemma 3, memoized).

    A *region* is a subtree of bags the recursion reaches; region 0 is the
    whole tree. For region r: ``centroid[r]`` is its balanced separator bag,
    ``size[r]`` its bag count, ``children[r]`` the regions of the components
    left once the centroid is removed, ``separator[r]`` the centroid's nodes
    that no enclosing separator holds, in topological order. ``home[v]`` is
    the region whose separator holds node v; v belongs to region r (to V'
    of Algorithm 1) exactly when r is ``home[v]`` or one of its ancestors,
    and ``region_at[d][v]`` is that region at depth d (-1 below ``home[v]``).
    """

    centroid: list[int]
    parent: list[int]
    depth: list[int]
    size: list[int]
    children: list[list[int]]
    separator: list[list[int]]
    home: list[int]
    region_at: list[list[int]]

    @property
    def levels(self) -> int:
        """Number of recursion levels (at most floor(log2(bags)) + 1)."""
        return max(self.depth) + 1

    def cutoffs(self) -> list[int]:
        """Every k at which TWRemat(k) changes: region r is a base case once k > size[r].

        A single-bag region is a base case for every k, so only regions that
        split count.

        Returns
        -------
        list of int
            The cut-offs, ascending, 1 first.
        """
        return sorted({1, *(s + 1 for s, below in zip(self.size, self.children) if below)})


def separator_tree(decomposition: TreeDecomposition, n: int) -> SeparatorTree:
    """Centroid decomposition of the bag tree, and the region of every graph node.

    Iterative: each region's bags are collected by a stack walk, subtree
    sizes summed in reverse visiting order, and the centroid found by walking
    from the start bag towards any child subtree holding more than half.

    Parameters
    ----------
    decomposition : TreeDecomposition
    n : int
        Nodes of the graph decomposed.

    Returns
    -------
    SeparatorTree
    """
    B = len(decomposition.bags)
    adjacency: list[list[int]] = [[] for _ in range(B)]
    for a, b in decomposition.edges:
        adjacency[a].append(b)
        adjacency[b].append(a)
    removed = [False] * B
    up = [-1] * B  # parent bag in the current region's walk
    below = [0] * B  # bags in the subtree under each bag, in the current walk

    centroid: list[int] = []
    parent: list[int] = []
    depth: list[int] = []
    size: list[int] = []
    children: list[list[int]] = []
    separator: list[list[int]] = []
    home = [-1] * n
    pending = [(0, -1, 0)]  # (a bag of the region, parent region, depth)
    while pending:
        start, above, d = pending.pop()
        order = [start]
        up[start] = -1
        for x in order:  # grows while iterating: a breadth-first walk of the region
            for y in adjacency[x]:
                if not removed[y] and y != up[x]:
                    up[y] = x
                    order.append(y)
        for x in order:
            below[x] = 1
        for x in reversed(order[1:]):
            below[up[x]] += below[x]
        total = len(order)
        c = start
        while True:  # Jordan's theorem: stop where no subtree below holds more than half
            heavy = next((y for y in adjacency[c]
                          if not removed[y] and y != up[c] and 2 * below[y] > total), None)
            if heavy is None:
                break
            c = heavy
        r = len(centroid)
        centroid.append(c)
        parent.append(above)
        depth.append(d)
        size.append(total)
        children.append([])
        if above >= 0:
            children[above].append(r)
        # Regions are numbered parents first, so a node already placed sits in an enclosing
        # separator (its bags are connected: it cannot also sit in a sibling region alone).
        mine = sorted(v for v in decomposition.bags[c] if home[v] < 0)
        for v in mine:
            home[v] = r
        separator.append(mine)
        removed[c] = True
        for y in adjacency[c]:
            if not removed[y]:
                pending.append((y, r, d + 1))

    levels = max(depth) + 1
    table = np.full((levels, n), -1, dtype=np.int64)
    for v in range(n):
        r = home[v]
        while r >= 0:
            table[depth[r], v] = r
            r = parent[r]
    return SeparatorTree(centroid, parent, depth, size, children, separator, home,
                         [row.tolist() for row in table])


# ---------------------------------------------------------------------- Algorithm 1


def _need(inputs: list[tuple[int, ...]], row: list[int], region: int,
          targets: tuple[int, ...]) -> list[int]:
    """need(V', S): the region's nodes that reach a target inside it, in topological order."""
    seen = set(targets)
    stack = list(targets)
    while stack:
        u = stack.pop()
        for w in inputs[u]:
            if w not in seen and row[w] == region:
                seen.add(w)
                stack.append(w)
    return sorted(seen)  # node indices are a topological order


def twremat_schedule(graph: Graph, tree: SeparatorTree, k: int = 1,
                     should_stop: Callable[[], bool] | None = None,
                     max_steps: int | None = None) -> Schedule | None:
    """Algorithm 1's schedule, TWRemat(k), with its own frees (before clean-up).

    A region with fewer than ``k`` bags, or a single bag, is a base case.
    The build is abandoned, and None returned, when ``should_stop`` (polled
    now and then) answers True or the schedule passes ``max_steps`` steps.

    Parameters
    ----------
    graph : Graph
    tree : SeparatorTree
        The recursion, from ``graph``'s decomposition.
    k : int
        The cut-off; 1: Algorithm 1 in full.
    should_stop : callable or None
        Asked every 4,096 sub-calls whether to give up; None: never.
    max_steps : int or None
        The most steps the schedule may have; None: no limit.

    Returns
    -------
    Schedule or None
        Computations (each node's first implementation) and Algorithm 1's own frees; None when abandoned.
    """
    algorithm = _Algorithm1(graph, tree, k)
    limit = max_steps if max_steps is not None else float("inf")
    # Nodes no output depends on: sinks that are not outputs head them (sinks of the first
    # implementations' inputs, which may read less than the node lists). Run them first and
    # drop them, so the main pass never meets a resident value it wants to compute.
    read = np.zeros(graph.n, dtype=bool)
    for ins in algorithm.inputs:
        read[list(ins)] = True
    unread = tuple(np.flatnonzero(~read & ~graph.is_output).tolist())
    if unread:
        if not algorithm.run(unread, should_stop, limit):
            return None
        for v in unread:
            algorithm.steps.append(~v)
    if not algorithm.run(tuple(sorted(graph.output_indices)), should_stop, limit):
        return None
    encoded = np.frombuffer(algorithm.steps, dtype=np.int64)
    is_free = encoded < 0
    return Schedule(np.where(is_free, FREE, COMPUTE).astype(np.int8),
                    np.where(is_free, ~encoded, encoded), np.zeros(len(encoded), dtype=np.int64))


class _Algorithm1:
    """The steps of TWRemat(k) on one separator tree, in one flat array of 8 bytes a step: v >= 0
    computes v, ~v (negative) frees v. A call TWRemat(V', S) is a generator that emits its own
    steps and yields the sub-calls it makes, in order; `run` drives them on an explicit stack, and
    a call made again (same region, same S) copies the steps the first one emitted."""

    def __init__(self, graph: Graph, tree: SeparatorTree, k: int) -> None:
        self.inputs = dependencies(graph)
        self.tree = tree
        # A region of a single bag, or of fewer than k bags, is a base case (TWRemat(k), Section 4.3).
        self.base = [not tree.children[r] or tree.size[r] < k for r in range(len(tree.size))]
        self.steps = array("q")
        self.done: dict[tuple[int, tuple[int, ...]], tuple[int, int]] = {}  # call -> its steps' slice

    def run(self, targets: tuple[int, ...], should_stop: Callable[[], bool] | None, limit: float) -> bool:
        """TWRemat(V, targets); False when ``should_stop`` answers True or past ``limit`` steps."""
        steps, done = self.steps, self.done
        stack = [(self.call(0, targets), (0, targets), len(steps))]
        polls = 0
        while stack:
            if len(steps) > limit:
                return False
            frame, key, start = stack[-1]
            request = next(frame, None)
            if request is None:
                stack.pop()
                done[key] = (start, len(steps))
                continue
            seen = done.get(request)
            if seen is not None:
                steps.extend(steps[seen[0]:seen[1]])
                continue
            stack.append((self.call(*request), request, len(steps)))
            polls += 1
            if should_stop is not None and polls % 4096 == 0 and should_stop():
                return False
        return len(steps) <= limit

    def call(self, region: int, targets: tuple[int, ...]) -> Iterator[tuple[int, tuple[int, ...]]]:
        """One call TWRemat(V'(region), targets); yields the sub-calls it makes, in order."""
        tree = self.tree
        d = tree.depth[region]
        needed = _need(self.inputs, tree.region_at[d], region, targets)
        if self.base[region]:
            self._base_case(tree.region_at[d], region, needed, set(targets))
            return
        below = tree.region_at[d + 1]  # a node's component (child region), -1 if in a separator
        separator = [v for v in needed if tree.home[v] == region]
        yield from self._separator(separator, below)
        # Then each component computes its part of S, which stays resident; X* \ S is freed.
        parts: dict[int, list[int]] = {}
        for u in targets:
            if below[u] >= 0:
                parts.setdefault(below[u], []).append(u)
        for child, part in parts.items():
            yield child, tuple(part)  # targets are sorted, so each part is too
        keep = set(targets)
        emit = self.steps.append
        for v in separator:
            if v not in keep:
                emit(~v)

    def _separator(self, separator: list[int], below: list[int]) -> Iterator[tuple[int, tuple[int, ...]]]:
        """For each v of X* that S needs, in topological order: each component computes v's inputs
        in it, v is computed, and those inputs are freed."""
        inputs, emit = self.inputs, self.steps.append
        for v in separator:
            parts: dict[int, list[int]] = {}
            for u in inputs[v]:
                if below[u] >= 0:
                    parts.setdefault(below[u], []).append(u)
            for child, part in parts.items():
                yield child, tuple(sorted(part))
            emit(v)
            for part in parts.values():
                for u in part:
                    emit(~u)

    def _base_case(self, row: list[int], region: int, needed: list[int], keep: set[int]) -> None:
        """need(V', S) in topological order, each value freed after its last use in the region."""
        inputs, emit = self.inputs, self.steps.append
        last_use: dict[int, int] = {}
        for i, u in enumerate(needed):
            for w in inputs[u]:
                if row[w] == region:  # inputs outside the region belong to callers
                    last_use[w] = i
        frees_after: dict[int, list[int]] = {}
        for w in needed:  # in topological order, as the baseline frees
            if w in last_use and w not in keep:
                frees_after.setdefault(last_use[w], []).append(w)
        for i, u in enumerate(needed):
            emit(u)
            for w in frees_after.get(i, ()):
                emit(~w)


# ---------------------------------------------------------------------- the method


def k_grid(tree: SeparatorTree, points: int) -> list[int]:
    """Up to ``points`` values of k spread geometrically over the cut-offs where TWRemat(k) changes.

    Always includes k = 1 (Algorithm 1 in full) and k = bags + 1 (no
    recursion: the baseline order).

    Parameters
    ----------
    tree : SeparatorTree
    points : int
        The most values wanted (the two ends are always among them).

    Returns
    -------
    list of int
        The values of k, ascending; every cut-off when there are at most ``points``.
    """
    cutoffs = tree.cutoffs()
    if len(cutoffs) <= points:
        return cutoffs
    logs = np.log(np.asarray(cutoffs, dtype=float))
    chosen = {cutoffs[0], cutoffs[-1]}
    for target in np.linspace(logs[0], logs[-1], points):
        chosen.add(cutoffs[int(np.argmin(np.abs(logs - target)))])
    return sorted(chosen)


@dataclass
class _Candidate:
    heuristic: str
    k: int
    schedule: Schedule  # cleaned: frees at last use
    sim: Simulation
    algorithm1: Simulation  # the schedule with Algorithm 1's own frees


class _InvalidSchedule(Exception):
    pass


class _Search:
    """Schedules built so far and the best: at ``min`` the lowest peak, else the shortest that fits."""

    def __init__(self, graph: Graph, budget: Number | None, deadline: Deadline) -> None:
        self.graph = graph
        self.budget = budget
        self.deadline = deadline
        self.best: _Candidate | None = None
        self.tried: list[list[Any]] = []  # [heuristic, k, peak, duration] of each schedule built
        self.abandoned: list[list[Any]] = []  # [heuristic, k] stopped by the deadline or MAX_STEPS
        self.last_attempt_s = 0.0  # wall time of the last schedule built, checked and cleaned
        self.why_none = Termination.CONVERGED  # why the last `attempt` gave no schedule
        self.ended: Termination | None = None  # why the search stopped before its end (None: it did not)

    def fits(self, candidate: _Candidate) -> bool:
        return self.budget is None or candidate.sim.peak <= self.budget

    def _key(self, c: _Candidate) -> tuple:
        if self.budget is None or not self.fits(c):
            return (not self.fits(c), c.sim.peak, c.sim.duration)
        return (False, c.sim.duration, c.sim.peak)

    def attempt(self, heuristic: str, tree: SeparatorTree, k: int) -> _Candidate | None:
        """Build, check and clean TWRemat(k); None when out of time or past `MAX_STEPS`.

        The first schedule of a search is always built to the end, so there
        is an answer whatever the time limit. A later one is not started when
        less than twice the last one's time is left: it could not be built
        and then scored by the pipeline (a clean-up and simulation of the same
        length) within the limit.
        """
        first = self.best is None
        remaining = self.deadline.remaining()
        too_late = self.deadline.expired() or (remaining is not None and remaining < 2 * self.last_attempt_s)
        if not first and too_late:
            self.why_none = cut_short()  # it could not be built and scored within the limit
            return None
        started = time.perf_counter()
        raw = twremat_schedule(self.graph, tree, k, None if first else self.deadline.expired,
                               None if first else MAX_STEPS)
        if raw is None:
            self.abandoned.append([heuristic, k])
            self.why_none = cut_short() if self.deadline.ran_out else Termination.RESOURCE_LIMIT  # MAX_STEPS
            return None
        own = simulate(self.graph, raw)
        if not own.valid:  # the recursion's bookkeeping is wrong: a bug, never scored
            raise _InvalidSchedule(
                f"twremat (heuristic {heuristic}, k={k}) built an invalid schedule: {own.violation}")
        computes = raw.kinds == COMPUTE
        cleaned = place_frees(self.graph, raw.nodes[computes], raw.impls[computes])
        candidate = _Candidate(heuristic, k, cleaned, simulate(self.graph, cleaned), own)
        self.tried.append([heuristic, k, candidate.sim.peak, candidate.sim.duration])
        self.last_attempt_s = time.perf_counter() - started
        if self.best is None or self._key(candidate) < self._key(self.best):
            self.best = candidate
        return candidate

    def lowest_peak(self, heuristic: str, tree: SeparatorTree, ks: list[int]) -> None:
        """``min``: every k of the grid (peaks do not fall monotonically with k)."""
        for k in [ks[-1], *ks[:-1]]:
            if self.attempt(heuristic, tree, k) is None and self.deadline.expired():
                self.ended = cut_short()
                return

    def cheapest_fit(self, heuristic: str, tree: SeparatorTree, ks: list[int]) -> None:
        """A budget: the largest k whose schedule fits, which is the shortest schedule that fits.

        Lowering k only turns base cases into recursions, and a recursion
        computes every node its base case would, and more: durations never
        fall as k does. So walk the grid from the top to the first k that
        fits, then bisect the cut-offs between it and the grid point above.
        """
        above = fit = None
        for k in reversed(ks):
            candidate = self.attempt(heuristic, tree, k)
            if candidate is None:
                self.ended = self.why_none
                return  # out of time, or too long: deeper recursions are longer still
            if self.fits(candidate):
                fit = k
                break
            above = k
        if fit is None or above is None:
            return
        cutoffs = tree.cutoffs()
        low, high = cutoffs.index(fit), cutoffs.index(above)
        while high - low > 1:
            mid = (low + high) // 2
            candidate = self.attempt(heuristic, tree, cutoffs[mid])
            if candidate is None:
                self.ended = self.why_none
                return
            if self.fits(candidate):
                low = mid
            else:
                high = mid


class TWRemat(Method):
    name = "twremat"
    search_space = "tree-decomposition recursions TWRemat(k)"
    description = "Kumar et al. 2019: divide and conquer on a tree decomposition, TWRemat(k)"
    member = Membership(Role.FAST, rank=5)
    params = (
        Param("k", int, 0, "recursion cut-off: regions of fewer than k bags are scheduled in "
              "topological order (1: Algorithm 1 in full); 0 searches k", minimum=0,
              maximum=1_000_000),
        Param("heuristic", str, "min_degree", "tree decomposition heuristic: minimum degree, or "
              "networkx's minimum fill-in (cubic); both: try each and keep the better schedule",
              choices=(*HEURISTICS, "both")),
        Param("grid", int, 8, "how many values of k the search tries first (geometric over the "
              "cut-offs; with a budget, a bisection follows)", minimum=1, maximum=1000),
    )

    def solve(self, graph: Graph, budget: Number | None, time_limit: float | None,
              **params: Any) -> MethodResult:
        start = time.perf_counter()
        deadline = Deadline(time_limit)
        k, grid = params["k"], params["grid"]
        if k < 0 or grid < 1:
            return MethodResult(SolutionStatus.NO_SOLUTION, termination=Termination.ERROR, message=(
                f"twremat needs k >= 0 (0 searches k) and grid >= 1, got k={k}, grid={grid}"))
        names = list(HEURISTICS) if params["heuristic"] == "both" else [params["heuristic"]]
        search = _Search(graph, budget, deadline)
        shapes: dict[str, dict[str, Any]] = {}
        try:
            for name in names:
                if search.best is not None and deadline.expired():
                    break
                began = time.perf_counter()
                decomposition = tree_decomposition(graph, name, deadline)
                tree = separator_tree(decomposition, graph.n)
                shapes[name] = {
                    "width": decomposition.width,
                    "bags": len(decomposition.bags),
                    "raw_bags": decomposition.raw_bags,
                    "levels": tree.levels,
                    "decomposition_time_s": round(time.perf_counter() - began, 3),
                }
                if k >= 1:
                    search.attempt(name, tree, k)
                elif budget is None:
                    search.lowest_peak(name, tree, k_grid(tree, grid))
                else:
                    search.cheapest_fit(name, tree, k_grid(tree, grid))
        except _InvalidSchedule as exc:
            return MethodResult(SolutionStatus.NO_SOLUTION, solve_time_s=time.perf_counter() - start,
                                message=str(exc), termination=Termination.ERROR)
        except DecompositionStopped as exc:
            search.ended = exc.termination
            if search.best is None:
                return MethodResult(SolutionStatus.NO_SOLUTION, solve_time_s=time.perf_counter() - start,
                                    termination=exc.termination, message=(
                    f"the {names[0] if len(names) == 1 else 'tree'} decomposition of the {graph.n:,} nodes "
                    f"did not finish: {exc}"))

        best = search.best
        assert best is not None  # the first schedule is always built to the end
        termination = search.ended or search_ended(deadline)
        stats: dict[str, Any] = {
            "heuristic": best.heuristic,
            "k": best.k,
            **shapes[best.heuristic],
            "algorithm1_peak": best.algorithm1.peak,
            "algorithm1_duration": best.algorithm1.duration,
            "algorithm1_steps": best.algorithm1.num_steps,
            "recomputations": best.sim.recomputations,
            "schedules_tried": len(search.tried),
            "tried": search.tried,
            "abandoned": search.abandoned,
        }
        if len(shapes) > 1:
            stats["widths"] = {name: shape["width"] for name, shape in shapes.items()}
        elapsed = time.perf_counter() - start
        if not search.fits(best):
            return MethodResult(
                SolutionStatus.NO_SOLUTION, best.schedule, objective=best.sim.duration, solve_time_s=elapsed,
                stats=stats, termination=termination, message=(
                    f"twremat's lowest peak over {len(search.tried)} schedules is {memory_text(best.sim.peak, graph)} "
                    f"(k={best.k}, heuristic {best.heuristic}), above the budget {memory_text(budget or 0, graph)}"),
            )
        return MethodResult(SolutionStatus.FEASIBLE, best.schedule, objective=best.sim.duration,
                            solve_time_s=elapsed, stats=stats, termination=termination)
