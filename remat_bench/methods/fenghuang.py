"""Feng and Huang 2021, "Optimal Gradient Checkpoint Search for Arbitrary Computation Graphs" (CVPR 2021).

Formulation. G = (V, E) is the forward graph with one source s and one sink t,
l(v) the memory of vertex v. A set of gradient checkpoints V^R (s, t in V^R)
cuts G into *independent segments* (IS, Definition 1): a segment s_ij is a
subgraph with source i and target j whose interior vertices have no edge to
or from a vertex outside it; its cost l(s_ij) is the memory of its interior.
The training memory of V^R is (Eq. 2)

    sum_{v in V^R} l(v)  +  max over the segments s_ij of V^R of l(s_ij).

For a fixed max term C the problem becomes min sum l(V^R) s.t. every segment
costs at most C. On a linear graph that is a shortest path in the
*accessibility graph* (an edge j -> k wherever l(v_j, v_k) <= C; Algorithm 1).
On an arbitrary graph the segments form the *division tree* (Theorem 1): the
root is the whole graph; a *linear* segment divides at its linear splitting
vertices (Definition 2, Algorithm 2), a *branch* segment into its branches
between the same two vertices (Definition 4, Algorithm 3), a *complicate*
segment into its maximal proper independent segments (Definition 6,
Algorithm 4). Algorithm 5 walks the tree for one C: a segment costing at most
C stays whole; a broken branch or complicate segment checkpoints the end
vertices of all its members and recurses into the members above C; a broken
linear segment runs the LCG solver on the runs of members between those above
C, and recurses into those. Algorithm 6 tries every segment cost as C and keeps
the least Eq. 2 value.

Mapping onto remat-bench. The paper's vertices are tensors and its edges
operators; a remat-bench node is an operator *and* its output, so a vertex here
is a forward node (its output value, l(v) = its ``memory``) and an edge u -> v
says that node v reads u. Only forward nodes and the edges between them are
used. The paper's source s is the network's input tensor, which remat-bench
graphs do not hold as a node (a node without inputs reads it implicitly): s is
a virtual vertex with no memory, before every source node, so the first
layer's output may be recomputed like any other (``virtual_source=false``
adds it only where there are several source nodes, and a single source node
is then s, always a checkpoint). The target t is the single sink node, which
the lowering keeps resident for the loss anyway; where there are several, a
virtual sink with no memory follows them. The solution is handed to the shared
lowering (`remat_bench.toolkit.lowering`) as a `Plan`: the real checkpoints are kept,
each final segment's interior is one recomputation segment, and each
checkpoint is a segment of its own.

What this implementation adds or leaves out:

- Reachability is one boolean transitive-closure matrix; which vertex pairs
  bound an independent segment comes from three matrix products
  (`pair_table`), not from per-pair searches, and Definition 6's maximal
  segments from one more product over the segment's vertices.
- Algorithm 4 keeps, for each pair (k, t), the largest independent segment
  from k to t: the connected parts of the vertices between k and t that have
  no edge leaving them (as the authors' code does). Read literally, it keeps
  a pair only when *all* the vertices between k and t are independent; the
  maximal such pairs can then overlap (two pairs along a chain whose ends
  also feed a side branch), and the division is no longer a partition. With
  the largest segments, the tests find the division tree complete: on small
  random graphs the search reaches the Eq. 2 optimum over every checkpoint
  set whose segments are independent, found by brute force.
- Algorithm 5 runs iteratively (no Python recursion), and the LCG solver is a
  sliding-window-minimum shortest path, linear in the segment's division.
- Max terms are tried from the largest down. A solution found for C whose
  largest segment costs M < C is also the answer for every term in [M, C]
  (the broken segments and the feasible paths are the same), so the search
  jumps to the next term below M; the Eq. 2 value uses the solution's own
  largest segment, which never exceeds C.
- Budgets, which the paper does not have: every distinct per-C solution is
  lowered and simulated; with a budget the one with the least simulated
  duration whose simulated peak fits is returned, with ``--budget min`` the
  one with the lowest simulated peak. ``select=model`` returns the Eq. 2
  optimum instead, as the paper does. The Eq. 2 value ("model memory", in the
  graph's memory units, without ``fixed_memory``) is reported in the stats
  beside the simulated peak; it leaves out the gradients and the workspace
  that the simulator counts, and the lowering's order of recomputation.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from itertools import pairwise
from typing import Any

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from remat_bench.core.budget import memory_text
from remat_bench.core.graph import Graph, Number
from remat_bench.core.outcome import cut_short
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
    search_ended,
)
from remat_bench.toolkit.lowering import (
    Plan,
    lower_plan,
)

VIRTUAL = -1  # graph index of a virtual source or sink

# ---------------------------------------------------------------------- the forward graph


@dataclass(frozen=True)
class ForwardDag:
    """The forward graph on local vertices 0..m-1, numbered in a topological order.

    ``node[v]`` is the graph index of vertex v (`VIRTUAL` for an added source or
    sink); ``succ_ptr``/``succ_idx`` hold the successors in CSR form;
    ``adjacency[u, v]`` and ``reach[u, v]`` (u reaches v, u itself included)
    are boolean matrices. The source is vertex 0 and the sink vertex m - 1.
    """

    node: np.ndarray
    memory: np.ndarray
    succ_ptr: np.ndarray
    succ_idx: np.ndarray
    adjacency: np.ndarray
    reach: np.ndarray

    @property
    def m(self) -> int:
        return len(self.node)

    @property
    def source(self) -> int:
        return 0

    @property
    def sink(self) -> int:
        return self.m - 1

    @property
    def num_edges(self) -> int:
        return len(self.succ_idx)


def forward_dag(graph: Graph, virtual_source: bool = True) -> ForwardDag:
    """The forward nodes of ``graph`` with one source and one sink.

    The source is a virtual vertex with no memory, standing for the network
    input that remat-bench's source nodes read implicitly; with
    ``virtual_source=False`` it is added only where there are several source
    nodes. A virtual sink is added where there are several sink nodes.

    Parameters
    ----------
    graph : Graph
    virtual_source : bool
        Whether a virtual source is added even before a single source node.

    Returns
    -------
    ForwardDag
    """
    forward = np.asarray(graph.forward_indices, dtype=np.int64)
    local = np.full(graph.n, -1, dtype=np.int64)
    edges: list[tuple[int, int]] = []
    for v in forward.tolist():
        edges.extend((u, v) for u in graph.inputs[v] if graph.is_forward[u])
    has_pred = np.zeros(graph.n, dtype=bool)
    has_succ = np.zeros(graph.n, dtype=bool)
    if edges:
        src, dst = np.asarray(edges, dtype=np.int64).T
        has_pred[dst] = True
        has_succ[src] = True
    sources = forward[~has_pred[forward]]
    sinks = forward[~has_succ[forward]]
    virtual_source = virtual_source or len(sources) > 1
    # A single forward node is both source and sink; a virtual vertex keeps s != t.
    virtual_sink = len(sinks) > 1 or (len(forward) == 1 and not virtual_source)
    offset = int(virtual_source)
    local[forward] = np.arange(len(forward)) + offset
    m = len(forward) + offset + int(virtual_sink)
    node = np.full(m, VIRTUAL, dtype=np.int64)
    node[offset:offset + len(forward)] = forward
    memory = np.zeros(m, dtype=graph.memory.dtype)
    memory[offset:offset + len(forward)] = graph.memory[forward]

    local_edges = [(int(local[u]), int(local[v])) for u, v in edges]
    if virtual_source:
        local_edges.extend((0, int(local[s])) for s in sources.tolist())
    if virtual_sink:
        local_edges.extend((int(local[s]), m - 1) for s in sinks.tolist())
    adjacency = np.zeros((m, m), dtype=bool)
    if local_edges:
        e = np.asarray(local_edges, dtype=np.int64)
        adjacency[e[:, 0], e[:, 1]] = True
    succ_ptr = np.zeros(m + 1, dtype=np.int64)
    succ_ptr[1:] = np.cumsum(adjacency.sum(axis=1))
    succ_idx = np.nonzero(adjacency)[1].astype(np.int64)  # row-major: grouped by source vertex

    # Transitive closure, one row per vertex in reverse topological order.
    reach = np.zeros((m, m), dtype=bool)
    for v in range(m - 1, -1, -1):
        succ = succ_idx[succ_ptr[v]:succ_ptr[v + 1]]
        if len(succ):
            np.logical_or.reduce(reach[succ], axis=0, out=reach[v])
        reach[v, v] = True
    return ForwardDag(node, memory, succ_ptr, succ_idx, adjacency, reach)


@dataclass(frozen=True)
class PairTable:
    """For every vertex pair (i, j), i reaching j, how the vertices between them connect outside.

    The segment of (i, j) is every vertex between them, V_ij = {v : i ->* v ->*
    j}. An interior vertex v (v != i, j) is *clean* for (i, j) when all its
    edges stay inside V_ij: every predecessor of v is reached from i
    (``entry_ok[v, i]``) and every successor of v reaches j (``exit_ok[v, j]``).
    ``between[i, j]`` counts the interior vertices, ``clean[i, j]`` the clean
    ones; (i, j) is an independent segment (Definition 1) when they are equal
    (``is_pair``).
    """

    between: np.ndarray
    clean: np.ndarray
    entry_ok: np.ndarray
    exit_ok: np.ndarray
    is_pair: np.ndarray


class PairTableTimedOut(Exception):
    """The deadline passed while `pair_table` multiplied its matrices."""


class DivisionTreeTimedOut(Exception):
    """The deadline passed while `build_division_tree` divided a complicate segment."""


# Pairs of a complicate segment whose clean parts are spread between two looks at the deadline: an unrolled
# recurrent network's single segment has hundreds of thousands of them.
PAIRS_BETWEEN_LOOKS = 512


# Rows of a product computed between two looks at the deadline: an m x m product of float32 takes
# seconds past a few thousand vertices and numpy cannot be interrupted inside one.
PRODUCT_ROWS = 256


def _product(x: np.ndarray, y: np.ndarray, deadline: Deadline | None) -> np.ndarray:
    """x @ y, a block of rows at a time, raising `PairTableTimedOut` once ``deadline`` has passed."""
    if deadline is None:
        return x @ y
    out = np.empty((x.shape[0], y.shape[1]), dtype=np.result_type(x, y))
    for lo in range(0, x.shape[0], PRODUCT_ROWS):
        if deadline.expired():
            raise PairTableTimedOut
        out[lo:lo + PRODUCT_ROWS] = x[lo:lo + PRODUCT_ROWS] @ y
    return out


def pair_table(dag: ForwardDag, deadline: Deadline | None = None) -> PairTable:
    """The `PairTable` of ``dag`` from the reachability matrix R, by matrix products.

    With S = R minus its diagonal, exit_ok = (A R == out-degree) and entry_ok
    = (A^T R^T == in-degree), the counts are

        between[i, j] = sum_v S[i, v] S[v, j]
        clean[i, j]   = sum_v S[i, v] entry_ok[v, i] S[v, j] exit_ok[v, j].

    Parameters
    ----------
    dag : ForwardDag
    deadline : Deadline or None
        Looked at between blocks of rows of each product; None: no limit.

    Returns
    -------
    PairTable

    Raises
    ------
    PairTableTimedOut
        ``deadline`` passed before the products were done.
    """
    reach = dag.reach
    strict = reach & ~np.eye(dag.m, dtype=bool)
    a = dag.adjacency.astype(np.float32)
    r = reach.astype(np.float32)
    s = strict.astype(np.float32)
    # Counts never exceed m, so float32 products are exact (m < 2**24).
    exit_ok = _product(a, r, deadline) == dag.adjacency.sum(axis=1)[:, None]
    entry_ok = _product(a.T, r.T, deadline) == dag.adjacency.sum(axis=0)[:, None]
    between = _product(s, s, deadline).astype(np.int32)
    clean = _product(s * entry_ok.T, s * exit_ok, deadline).astype(np.int32)
    return PairTable(between, clean, entry_ok, exit_ok, strict & (between == clean))


# ---------------------------------------------------------------------- the division tree


class SegmentKind(StrEnum):
    """The types of independent segment (section 5.2); a leaf has no interior (one edge)."""

    LEAF = "leaf"
    LINEAR = "linear"
    BRANCH = "branch"
    COMPLICATE = "complicate"


@dataclass
class Segment:
    """A node of the division tree: an independent segment from ``source`` to ``target``.

    ``interior``: its interior vertices (sorted, local); ``direct``: whether
    the edge source -> target belongs to it; ``children``: indices of its
    division's members in the tree; for a linear segment, ``division`` holds
    its source, its splitting vertices and its target in order, and
    ``division_pos`` their positions in ``vertices``.
    """

    source: int
    target: int
    interior: np.ndarray
    cost: Number
    direct: bool
    kind: SegmentKind = SegmentKind.LEAF
    children: list[int] = field(default_factory=list)
    division: np.ndarray | None = None
    division_pos: np.ndarray | None = None

    @property
    def vertices(self) -> np.ndarray:
        return np.concatenate(([self.source], self.interior, [self.target])).astype(np.int64)


@dataclass
class DivisionTree:
    """The division tree of a forward graph (Theorem 1); ``segments[0]`` is the root."""

    dag: ForwardDag
    segments: list[Segment]

    @property
    def root(self) -> Segment:
        return self.segments[0]

    def counts(self) -> dict[str, int]:
        """How many segments of each kind the tree holds (for stats).

        Returns
        -------
        dict
            `SegmentKind` value (``leaf``, ``linear``, ``branch``, ``complicate``) to count, every kind present.
        """
        out = {kind.value: 0 for kind in SegmentKind}
        for seg in self.segments:
            out[seg.kind.value] += 1
        return out

    def depth(self) -> int:
        """The tree's depth (for stats).

        Returns
        -------
        int
            Edges on the longest path from the root to a segment; 0 for a root alone.
        """
        depth = [0] * len(self.segments)
        for sid, seg in enumerate(self.segments):  # children always come after their parent
            for c in seg.children:
                depth[c] = depth[sid] + 1
        return max(depth)


def build_division_tree(dag: ForwardDag, table: PairTable | None = None,
                        deadline: Deadline | None = None) -> DivisionTree:
    """Divide the whole graph down to single edges (Algorithms 2-4), breadth first, no recursion.

    Parameters
    ----------
    dag : ForwardDag
    table : PairTable or None
        ``dag``'s `pair_table`, when the caller has it; None: computed here.
    deadline : Deadline or None
        Looked at while a complicate segment is divided; None: no limit.

    Returns
    -------
    DivisionTree
        Every segment after its parent; the leaves are single edges.

    Raises
    ------
    DivisionTreeTimedOut
        ``deadline`` passed before the tree was built.
    """
    table = pair_table(dag) if table is None else table
    memory = dag.memory
    m = dag.m

    def make(source: int, target: int, interior: np.ndarray, direct: bool) -> Segment:
        return Segment(source, target, interior, memory[interior].sum().item() if len(interior) else 0, direct)

    root_interior = np.arange(1, m - 1, dtype=np.int64)
    segments = [make(dag.source, dag.sink, root_interior, bool(dag.adjacency[dag.source, dag.sink]))]
    position = np.full(m, -1, dtype=np.int64)
    queue = deque([0])
    while queue:
        sid = queue.popleft()
        seg = segments[sid]
        if len(seg.interior) == 0:
            continue  # a leaf: the edge source -> target alone
        vs = seg.vertices
        position[vs] = np.arange(len(vs))
        src, dst = _edges_within(dag, vs, position, seg.direct)
        members: list[Segment]
        if seg.direct:
            # Algorithm 3: the edge source -> target is a branch of its own.
            seg.kind = SegmentKind.BRANCH
            members = [make(seg.source, seg.target, np.empty(0, dtype=np.int64), True)]
            members += [make(seg.source, seg.target, part, False) for part in _components(vs, src, dst)]
        else:
            splits = _splitting_positions(len(vs), src, dst)
            if len(splits):
                # Algorithm 2: the runs between consecutive splitting vertices.
                seg.kind = SegmentKind.LINEAR
                cut = np.concatenate(([0], splits, [len(vs) - 1]))
                seg.division, seg.division_pos = vs[cut], cut
                members = [make(int(vs[a]), int(vs[b]), vs[a + 1:b], bool(dag.adjacency[vs[a], vs[b]]))
                           for a, b in zip(cut[:-1].tolist(), cut[1:].tolist())]
            else:
                parts = _components(vs, src, dst)
                if len(parts) > 1:  # Algorithm 3: one branch per connected part of the interior
                    seg.kind = SegmentKind.BRANCH
                    members = [make(seg.source, seg.target, part, False) for part in parts]
                else:  # Algorithm 4
                    seg.kind = SegmentKind.COMPLICATE
                    members = [make(k, t, interior, bool(dag.adjacency[k, t]))
                               for k, t, interior in _complicate_division(dag, table, vs, src, dst, deadline)]
        position[vs] = -1
        for member in members:
            seg.children.append(len(segments))
            queue.append(len(segments))
            segments.append(member)
    return DivisionTree(dag, segments)


def _edges_within(dag: ForwardDag, vs: np.ndarray, position: np.ndarray,
                  direct: bool) -> tuple[np.ndarray, np.ndarray]:
    """The segment's edges as positions in ``vs`` (the edge source -> target only if it belongs)."""
    starts = dag.succ_ptr[vs]
    counts = dag.succ_ptr[vs + 1] - starts
    total = int(counts.sum())
    offsets = np.repeat(starts - (np.cumsum(counts) - counts), counts) + np.arange(total)
    src = np.repeat(np.arange(len(vs)), counts)
    dst = position[dag.succ_idx[offsets]]
    keep = dst >= 0
    if not direct:
        keep &= ~((src == 0) & (dst == len(vs) - 1))
    return src[keep], dst[keep]


def _splitting_positions(size: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Positions p (0 < p < size - 1) of the linear splitting vertices (Definition 2).

    In a topological order of a single-source, single-target segment, vertex p
    lies on every source-target path exactly when no edge jumps over it.
    """
    far = np.full(size, -1, dtype=np.int64)
    np.maximum.at(far, src, dst)
    reach_before = np.maximum.accumulate(far)[:-1]  # furthest position an edge from before p reaches
    p = np.arange(1, size - 1)
    return p[reach_before[:-1] <= p]


def _components(vs: np.ndarray, src: np.ndarray, dst: np.ndarray) -> list[np.ndarray]:
    """The interior's connected parts (ignoring direction), each sorted."""
    k = len(vs) - 2
    inner = (src > 0) & (src <= k) & (dst > 0) & (dst <= k)
    adj = coo_matrix((np.ones(int(inner.sum()), dtype=np.int8), (src[inner] - 1, dst[inner] - 1)), shape=(k, k))
    count, labels = connected_components(adj, directed=False)
    if count == 1:
        return [vs[1:-1]]
    order = np.argsort(labels, kind="stable")
    bounds = np.searchsorted(labels[order], np.arange(1, count))
    return [vs[1:-1][part] for part in np.split(order, bounds)]


def _complicate_division(dag: ForwardDag, table: PairTable, vs: np.ndarray, src: np.ndarray,
                         dst: np.ndarray, deadline: Deadline | None = None) -> list[tuple[int, int, np.ndarray]]:
    """Definition 6: the independent segments inside a complicate segment that no other proper
    one contains, as (source, target, interior) with local vertices.

    For a pair (k, t) the largest independent segment from k to t keeps, of the
    vertices between them, the connected parts (ignoring direction) with no
    edge leaving V_kt: all of them when (k, t) passes the pair test, none when
    no vertex between them is clean, else those left after spreading
    "unclean" from the unclean vertices to their neighbours. (Algorithm 4 as
    printed keeps a pair only when the whole of V_kt is independent; with that
    reading the maximal pairs can overlap, e.g. two pairs along a chain whose
    ends also feed a side branch, and the division is no longer a partition.)

    The segment of (k, t) lies inside the segment of (a, b) exactly when k and
    t are among the vertices of (a, b) (its interior then lies in one of their
    clean parts), so with M the segments-by-vertices incidence matrix, the
    number of segments containing (k, t), itself included, is (M^T M)[k, t].
    """
    n = len(vs)
    sub = np.ix_(vs, vs)
    strict = dag.reach[sub] & ~np.eye(n, dtype=bool)
    strict[0, n - 1] = False  # the segment itself is not one of its members
    between, clean = table.between[sub], table.clean[sub]
    adjacency = dag.adjacency[sub]
    ks, ts = np.nonzero(strict)
    full = clean[ks, ts] == between[ks, ts]
    some = ~full & (clean[ks, ts] > 0)
    incidence = strict[ks] & strict[:, ts].T  # row p: the vertices strictly between ks[p] and ts[p]
    incidence[~full] = False
    if some.any():
        neighbours = [0] * n
        for a, b in zip(src.tolist(), dst.tolist()):
            neighbours[a] |= 1 << b
            neighbours[b] |= 1 << a
        for looked, p in enumerate(np.nonzero(some)[0].tolist()):
            if deadline is not None and looked % PAIRS_BETWEEN_LOOKS == 0 and deadline.expired():
                raise DivisionTreeTimedOut
            k, t = ks[p], ts[p]
            inside = strict[k] & strict[:, t]
            is_clean = inside & table.entry_ok[vs, vs[k]] & table.exit_ok[vs, vs[t]]
            incidence[p] = _bits_to_mask(_clean_part(_mask_to_bits(inside), _mask_to_bits(is_clean),
                                                     neighbours), n)
    keep = incidence.any(axis=1) | adjacency[ks, ts]
    ks, ts, incidence = ks[keep], ts[keep], incidence[keep]
    members = incidence.copy()
    members[np.arange(len(ks)), ks] = True
    members[np.arange(len(ks)), ts] = True
    weights = members.astype(np.float32)
    containing = weights.T @ weights
    maximal = containing[ks, ts] == 1
    return [(int(vs[k]), int(vs[t]), vs[row])
            for k, t, row in zip(ks[maximal].tolist(), ts[maximal].tolist(), incidence[maximal])]


def _mask_to_bits(mask: np.ndarray) -> int:
    return int.from_bytes(np.packbits(mask, bitorder="little").tobytes(), "little")


def _bits_to_mask(bits: int, n: int) -> np.ndarray:
    raw = np.frombuffer(bits.to_bytes((n + 7) // 8, "little"), dtype=np.uint8)
    return np.unpackbits(raw, bitorder="little")[:n].astype(bool)


def _clean_part(inside: int, clean: int, neighbours: list[int]) -> int:
    """The vertices of ``inside`` (a bitset) not connected, within it, to one outside ``clean``."""
    removed = frontier = inside & ~clean
    while frontier:
        reached = 0
        while frontier:
            low = frontier & -frontier
            reached |= neighbours[low.bit_length() - 1]
            frontier ^= low
        frontier = reached & inside & ~removed
        removed |= frontier
        if removed == inside:
            return 0
    return inside & ~removed


def canonical_tree(tree: DivisionTree, names: list[str]) -> tuple:
    """The tree as nested frozensets of vertex names, independent of numbering and member order.

    Each segment is (kind, source, target, interior names, members); built
    from the leaves up (children come after their parent), without recursion.

    Parameters
    ----------
    tree : DivisionTree
    names : list of str
        A name for each local vertex of ``tree.dag``.

    Returns
    -------
    tuple
        The root's form: two numberings of one graph give equal forms.
    """
    forms: list[Any] = [None] * len(tree.segments)
    for sid in range(len(tree.segments) - 1, -1, -1):
        seg = tree.segments[sid]
        forms[sid] = (seg.kind.value, names[seg.source], names[seg.target],
                      frozenset(names[v] for v in seg.interior.tolist()),
                      frozenset(forms[c] for c in seg.children))
    return forms[0]


# ---------------------------------------------------------------------- Algorithm 1: LCG solver


def lcg_path(vertex_cost: list[Number], edge_cost: list[Number], max_term: Number,
             start: int = 0, end: int | None = None) -> tuple[list[int], Number]:
    """Least-memory checkpoints of a linear graph with every segment at most ``max_term``.

    Vertices ``start..end`` (default: all) with costs ``vertex_cost``; edge q
    joins vertices q and q + 1 and costs ``edge_cost[q]`` (the memory of what
    it folds). A segment (a, b) costs sum_{a<=q<b} edge_cost[q] + sum_{a<q<b}
    vertex_cost[q]. Shortest path in the accessibility graph (Algorithm 1,
    steps 3-4): since a segment's cost grows with its length, the vertices a
    that may precede b form a window [lo(b), b - 1] that only moves right, so
    a monotone deque gives each step's minimum. Every edge must cost at most
    ``max_term``.

    Parameters
    ----------
    vertex_cost : list of Number
        Each vertex's memory.
    edge_cost : list of Number
        Each edge's memory (``len(vertex_cost) - 1`` of them, or at least up to ``end``).
    max_term : Number
        The most a segment may cost.
    start : int
        The first vertex of the path.
    end : int or None
        The last vertex of the path; None: the last vertex.

    Returns
    -------
    tuple of (list of int, Number)
        The chosen vertices (start and end included), and the largest chosen segment's cost.
    """
    end = len(vertex_cost) - 1 if end is None else end
    if start == end:
        return [start], 0
    # cost(a, b) = before[b] - after[a], with before[b] = sum_{q<b} (edge + vertex) and
    # after[a] = before[a] + vertex_cost[a].
    before: list[Number] = [0] * (end - start + 1)
    for q in range(start, end):
        before[q - start + 1] = before[q - start] + edge_cost[q] + vertex_cost[q]
    after = [before[q - start] + vertex_cost[q] for q in range(start, end + 1)]
    n = end - start
    dist: list[Number] = [0] * (n + 1)
    prev = [-1] * (n + 1)
    dist[0] = vertex_cost[start]
    window = deque([0])
    lo = 0
    for b in range(1, n + 1):
        while lo < b - 1 and before[b] - after[lo] > max_term:
            lo += 1
        while window[0] < lo:
            window.popleft()
        a = window[0]
        dist[b] = dist[a] + vertex_cost[start + b]
        prev[b] = a
        while window and dist[window[-1]] >= dist[b]:
            window.pop()
        window.append(b)
    path = [n]
    while path[-1] != 0:
        path.append(prev[path[-1]])
    path.reverse()
    largest = max(before[b] - after[a] for a, b in pairwise(path))
    return [start + p for p in path], largest


def lcg_optimum(vertex_cost: list[Number], edge_cost: list[Number]) -> tuple[list[int], Number]:
    """Algorithm 1: the checkpoints minimising sum of their costs + largest segment on a linear graph.

    Parameters
    ----------
    vertex_cost : list of Number
        Each vertex's memory.
    edge_cost : list of Number
        Each edge's memory: edge q joins vertices q and q + 1.

    Returns
    -------
    tuple of (list of int, Number)
        The chosen vertices (the first and last included), and the Eq. 1 value.
    """
    n = len(vertex_cost) - 1
    before = np.concatenate(([0], np.cumsum(np.asarray(edge_cost[:n]) + np.asarray(vertex_cost[:n]))))
    after = before + np.asarray(vertex_cost)
    terms = before[None, :] - after[:, None]
    candidates = np.unique(terms[np.triu_indices(n + 1, 1)]) if n else np.zeros(1)
    best: tuple[Number, list[int]] | None = None
    for c in candidates.tolist():
        if max(edge_cost, default=0) > c:
            continue
        path, largest = lcg_path(vertex_cost, edge_cost, c)
        value = sum(vertex_cost[p] for p in path) + largest
        if best is None or value < best[0]:
            best = (value, path)
    assert best is not None
    return best[1], best[0]


# ---------------------------------------------------------------------- Algorithms 5-6: ACG solver


@dataclass(frozen=True)
class Solution:
    """The checkpoints Algorithm 5 finds for one max term, and the segments they leave.

    ``checkpoints`` and ``segments`` (the interiors of the final segments,
    non-empty ones only) are local vertices; ``checkpoint_memory`` and
    ``max_segment`` are the two terms of Eq. 2.
    """

    max_term: Number
    checkpoints: frozenset[int]
    segments: tuple[np.ndarray, ...]
    checkpoint_memory: Number
    max_segment: Number

    @property
    def model_memory(self) -> Number:
        """Eq. 2: checkpoint memory plus the largest segment."""
        return self.checkpoint_memory + self.max_segment


class ACGSolver:
    """Algorithm 5 for any max term over a division tree, with the tree's per-segment tables."""

    def __init__(self, tree: DivisionTree) -> None:
        self.tree = tree
        segs = tree.segments
        memory = tree.dag.memory
        self.cost = [seg.cost for seg in segs]
        # Branch/complicate: the member end vertices, and the non-leaf members by decreasing cost.
        self.ends: list[list[int]] = [[] for _ in segs]
        self.by_cost: list[list[int]] = [[] for _ in segs]
        # Linear: LCG tables over the division (vertex costs, member costs).
        self.vertex_cost: list[list[Number]] = [[] for _ in segs]
        self.member_cost: list[list[Number]] = [[] for _ in segs]
        self.vertices: list[np.ndarray | None] = [None] * len(segs)
        for sid, seg in enumerate(segs):
            if seg.kind in (SegmentKind.BRANCH, SegmentKind.COMPLICATE):
                ends = {segs[c].source for c in seg.children} | {segs[c].target for c in seg.children}
                self.ends[sid] = sorted(ends)
                inner = [c for c in seg.children if segs[c].kind is not SegmentKind.LEAF]
                self.by_cost[sid] = sorted(inner, key=lambda c: -self.cost[c])
            elif seg.kind is SegmentKind.LINEAR:
                assert seg.division is not None
                self.vertex_cost[sid] = memory[seg.division].tolist()
                self.member_cost[sid] = [self.cost[c] for c in seg.children]
                self.vertices[sid] = seg.vertices
        self.terms = self._max_terms()

    def _max_terms(self) -> np.ndarray:
        """Every segment cost a solution's largest segment can have, ascending (Algorithm 6, step 1).

        The tree's segments, and every run of consecutive members of a linear
        segment (the segments of the accessibility graph).
        """
        values = [np.asarray([*self.cost, 0])]
        for sid, seg in enumerate(self.tree.segments):
            if seg.kind is SegmentKind.LINEAR:
                vc = np.asarray(self.vertex_cost[sid])
                mc = np.asarray(self.member_cost[sid])
                before = np.concatenate(([0], np.cumsum(mc + vc[:-1])))
                after = before + vc
                n = len(vc)
                values.append((before[None, :] - after[:, None])[np.triu_indices(n, 1)])
        terms = np.unique(np.concatenate(values))
        return terms[terms <= self.cost[0]]

    def solve(self, max_term: Number) -> Solution:
        """Algorithm 5 from the root for one max term C, with an explicit stack.

        Parameters
        ----------
        max_term : Number
            C, the most a final segment may cost, in memory units.

        Returns
        -------
        Solution
        """
        segs = self.tree.segments
        dag = self.tree.dag
        checkpoints = {dag.source, dag.sink}
        finals: list[np.ndarray] = []
        largest: Number = 0
        stack: list[int] = []
        if self.cost[0] > max_term:
            stack.append(0)
        else:
            finals.append(segs[0].interior)
            largest = self.cost[0]
        while stack:
            sid = stack.pop()
            seg = segs[sid]
            if seg.kind is SegmentKind.LINEAR:
                division, pos, vs = seg.division, seg.division_pos, self.vertices[sid]
                assert division is not None and pos is not None and vs is not None  # set for linear segments
                vc, mc = self.vertex_cost[sid], self.member_cost[sid]
                start = 0
                for k in range(len(mc) + 1):
                    if k < len(mc) and mc[k] <= max_term:
                        continue
                    # A run of members within C ends here: LCG on it, then recurse into member k.
                    path, run_largest = lcg_path(vc, mc, max_term, start, k)
                    largest = max(largest, run_largest)
                    checkpoints.update(division[path].tolist())
                    finals.extend(vs[pos[a] + 1:pos[b]] for a, b in pairwise(path) if pos[b] > pos[a] + 1)
                    if k < len(mc):
                        stack.append(seg.children[k])
                        start = k + 1
            else:
                checkpoints.update(self.ends[sid])
                for c in self.by_cost[sid]:
                    if self.cost[c] > max_term:
                        stack.append(c)
                    else:
                        largest = max(largest, self.cost[c])
                        finals.append(segs[c].interior)
        memory = dag.memory
        kept = frozenset(checkpoints)
        return Solution(max_term, kept, tuple(f for f in finals if len(f)),
                        memory[sorted(kept)].sum().item(), largest)

    def search(self, deadline: Deadline | None = None) -> Iterator[Solution]:
        """Algorithm 6: a solution for every max term, from the largest down.

        A solution for C whose largest segment is M answers every term in
        [M, C] as well, so the next term tried is the largest one below M.
        Stops early if ``deadline`` expires (after at least one solution).

        Parameters
        ----------
        deadline : Deadline or None
            When to stop; None: never, every term is tried.

        Yields
        ------
        Solution
            One per max term tried, the largest term first.
        """
        terms = self.terms
        i = len(terms) - 1
        while i >= 0:
            solution = self.solve(terms[i].item())
            yield solution
            if deadline is not None and deadline.expired():
                return
            # min(): a float sum rounded above terms[i] must not stall the search.
            i = min(i, int(np.searchsorted(terms, solution.max_segment, side="left"))) - 1


def plan_of(graph: Graph, dag: ForwardDag, solution: Solution) -> Plan:
    """The solution as a plan for the shared lowering: kept checkpoints, one segment per final
    segment's interior, and every other forward node (the checkpoints) a segment of its own.

    Parameters
    ----------
    graph : Graph
    dag : ForwardDag
        ``graph``'s forward graph, whose local vertices ``solution`` names.
    solution : Solution

    Returns
    -------
    Plan
        In ``graph``'s node indices; virtual vertices are left out.
    """
    node = dag.node
    kept = frozenset(int(node[v]) for v in solution.checkpoints if node[v] != VIRTUAL)
    covered = np.zeros(graph.n, dtype=bool)
    segments: list[tuple[int, ...]] = []
    for interior in solution.segments:
        real = node[interior]
        real = real[(real != VIRTUAL) & ~covered[np.maximum(real, 0)]]
        if len(real):
            covered[real] = True
            segments.append(tuple(real.tolist()))
    segments.extend((v,) for v in graph.forward_indices if not covered[v])
    return Plan(kept, tuple(segments))


# ---------------------------------------------------------------------- the method


@dataclass
class _Scored:
    solution: Solution
    plan: Plan
    schedule: Schedule
    simulation: Simulation


class FengHuang(Method):
    name = "fenghuang"
    search_space = "forward checkpoint plans of the division tree, lowered by the shared lowering"
    description = "Feng and Huang 2021: optimal checkpoints of the forward graph by its division tree"
    needs_backward = True
    # After the members that answer in a second: its division tree is built before the first answer, in one
    # step that its time limit cannot interrupt (seconds on graphs of a few thousand nodes).
    member = Membership(Role.FAST, rank=8)
    params = (
        Param("select", str, "simulated",
              "simulated: the per-max-term solution that best fits the budget when simulated; "
              "model: the optimum of the paper's memory model (Eq. 2)",
              choices=("simulated", "model")),
        Param("virtual_source", bool, True,
              "true: a memory-free source stands for the network input; false: a single source node "
              "is the paper's source vertex, always a checkpoint"),
    )

    def solve(self, graph: Graph, budget: Number | None, time_limit: float | None,
              **params: Any) -> MethodResult:
        start = time.perf_counter()
        deadline = Deadline(time_limit)
        phases: dict[str, float] = {}

        t = time.perf_counter()
        dag = forward_dag(graph, params["virtual_source"])
        try:
            table = pair_table(dag, deadline)
        except PairTableTimedOut:
            return MethodResult(
                SolutionStatus.NO_SOLUTION, solve_time_s=time.perf_counter() - start, termination=cut_short(),
                stats={"vertices": dag.m}, message=(
                    f"the time limit ran out while pairing the forward graph's {dag.m:,} vertices (products of "
                    f"{dag.m:,} x {dag.m:,} matrices), before any checkpoint set; give it more time"))
        phases["pair_table_s"] = time.perf_counter() - t
        t = time.perf_counter()
        try:
            tree = build_division_tree(dag, table, deadline)
        except DivisionTreeTimedOut:
            return MethodResult(
                SolutionStatus.NO_SOLUTION, solve_time_s=time.perf_counter() - start, termination=cut_short(),
                stats={"vertices": dag.m}, message=(
                    f"the time limit ran out while dividing the forward graph's {dag.m:,} vertices into "
                    "independent segments, before any checkpoint set; give it more time"))
        solver = ACGSolver(tree)
        phases["division_tree_s"] = time.perf_counter() - t
        t = time.perf_counter()
        solutions: dict[frozenset[int], Solution] = {}
        solved = 0
        for solution in solver.search(deadline):
            solved += 1
            known = solutions.get(solution.checkpoints)
            if known is None or solution.model_memory < known.model_memory:
                solutions[solution.checkpoints] = solution
        phases["search_s"] = time.perf_counter() - t
        paper_best = min(solutions.values(), key=lambda s: (s.model_memory, -s.max_term))

        t = time.perf_counter()
        candidates = [paper_best] if params["select"] == "model" else \
            sorted(solutions.values(), key=lambda s: s.model_memory)
        scored: list[_Scored] = []
        for solution in candidates:
            if scored and deadline.expired():
                break
            plan = plan_of(graph, dag, solution)
            schedule = lower_plan(graph, plan)
            scored.append(_Scored(solution, plan, schedule, simulate(graph, schedule)))
        phases["simulate_s"] = time.perf_counter() - t

        def rank(s: _Scored) -> tuple:
            sim = s.simulation
            if budget is None:
                return (sim.peak, sim.duration, s.solution.model_memory)
            fits = sim.peak <= budget
            return (not fits, sim.duration if fits else sim.peak, sim.peak, s.solution.model_memory)

        best = min(scored, key=rank)
        sim = best.simulation
        paper_sim = next((s.simulation for s in scored if s.solution is paper_best), None)
        counts = tree.counts()
        stats: dict[str, Any] = {
            "vertices": dag.m,
            "edges": dag.num_edges,
            "virtual_source": bool(dag.node[0] == VIRTUAL),
            "virtual_sink": bool(dag.node[-1] == VIRTUAL),
            "independent_pairs": int(table.is_pair.sum()),
            "tree_segments": len(tree.segments),
            "tree_depth": tree.depth(),
            **{f"tree_{kind}": n for kind, n in counts.items()},
            "max_terms": len(solver.terms),
            "max_terms_solved": solved,
            "solutions": len(solutions),
            "plans_simulated": len(scored),
            "max_term": best.solution.max_term,
            "largest_segment": best.solution.max_segment,
            "checkpoints": len(best.plan.kept),
            "segments": len(best.solution.segments),
            "model_memory": best.solution.model_memory,
            "model_optimum": paper_best.model_memory,
            "model_optimum_largest_segment": paper_best.max_segment,
            "model_optimum_peak": None if paper_sim is None else paper_sim.peak,
            **phases,
        }
        elapsed = time.perf_counter() - start
        if budget is not None and sim.peak > budget:
            return MethodResult(
                SolutionStatus.NO_SOLUTION, best.schedule, objective=sim.duration, solve_time_s=elapsed, stats=stats,
                termination=search_ended(deadline),
                message=(f"fenghuang's lowest simulated peak over {len(scored)} checkpoint sets is "
                         f"{memory_text(sim.peak, graph)}, above the budget {memory_text(budget, graph)}"),
            )
        return MethodResult(SolutionStatus.FEASIBLE, best.schedule, objective=sim.duration, solve_time_s=elapsed,
                            stats=stats, termination=search_ended(deadline))
