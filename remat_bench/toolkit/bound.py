"""A lower bound on schedule duration valid for every order and every rematerialization.

Derivation. Fix a budget B and any valid schedule. Every node is computed at
least once, which costs sum_v duration(v). Take a node c and the step of its
first computation:

- its inputs are resident, and so are c itself and its workspace;
- let x be an ancestor of c (not an input) that some descendant d of c reads,
  or that is an output. x was first computed before c (c depends on it), and d
  is computed after c's first computation (d depends on c), with x resident
  then (or, for an output, at the end). So at c's first computation x is
  either resident, or it was freed and is computed again later, which costs
  at least duration(x) more.

Let y_x = 1 when x is computed again after having been dropped. Every valid
schedule gives a y that satisfies, for every node c, the memory cut

    fixed + mem(c) + ws(c) + mem(inputs(c)) + sum_{x in A(c)} mem(x) (1 - y_x) <= B,

and its duration is at least sum_v duration(v) + sum_x duration(x) y_x, each
x charged once however many cuts it helps. Minimising that over y subject
to the cuts (a small 0/1 program, solved by HiGHS) is therefore a lower bound
on the duration of every schedule within B. When even y = 1 everywhere
breaks a cut, no schedule fits: that is the memory floor.

With operator implementations, the cut of c uses its cheapest implementation
(least input memory plus workspace), a reader d counts only if every
implementation of d reads x, and duration(x) is x's fastest implementation,
so the bound stays valid.

Prefix cuts. The cuts above look at one node at a time, so they cannot see
that no order at all fits: on random_layered_n500 at 0.8 every single cut
fits, yet no order does. Order the nodes by their first computation. When
the k-th node c is first computed, the nodes first computed so far form a
downset D (every input of a member is a member) of size k, and

- c, its workspace and its inputs are resident;
- every x in D that a node outside D reads (that node is still to be
  computed for the first time), or that is an output, is resident or
  computed again later: y_x = 1, as above.

So for every k there is a downset D of size k and a node c in D whose inputs
lie in D minus c, with that memory within B. Every order gives such a D for
every k at once; requiring it for a few chosen k (each with its own 0/1
variables for D and c, sharing y) relaxes that, so the bound stays valid.
Which k? Any order's memory after its k-th step bounds the least memory over
all downsets of size k from above, so the k where good orders peak are tried
first, each as a small 0/1 program of its own with y = 0 (a "probe"); the
values of k whose probe exceeds B join the program above (the one where a
good order holds most alone first, then up to `MAX_PREFIX_CUTS` of them
together, in the time left: each answer is a bound). A probe that
exceeds B alone proves that no order fits without recomputation: the
rematerialization is needed (`reorder` reports that as infeasible).

Recomputation cuts. The node cut charges a dropped x its own duration, as if
x could be computed again from nothing. It cannot: when x is computed again
after c's first computation, its inputs are resident then, so each input u
was resident at c or is itself computed again after c (and so on up). For a
cut node c, let q_v = 1 when v (an ancestor of c, not c's input) is read
after c's first computation, and r_v = 1 when v is resident then. Every
valid schedule satisfies

    q_x = 1                  for x in A(c)               (read by a descendant, or an output)
    r_v >= q_v - y_v         (read later and never computed again: still resident)
    q_u >= q_x - r_x         for every input u of x      (x computed again later reads u then)
    fixed + mem(c) + ws(c) + mem(inputs(c)) + sum_v mem(v) r_v <= B.

These rows, for the cuts that bind most (`MAX_RECOMPUTE_CUTS`), each with its
own r and q and sharing y, join the program. On a transformer they see what
the node cut misses: dropping the residual stream's sums is cheap only if the
projections they are summed from stay resident (docs/benchmarks.md, "Real
models at tight budgets": the gap they closed).

Values computed late. A(c) holds only c's ancestors: a value v that is not one, nor c's descendant,
but that a descendant of c reads (the set N(c)) may be computed after c for the first time, so the node
cut leaves it out. It cannot be left out for nothing: at c's first computation v is resident, or it is
computed after c (first or again), and that computation reads v's inputs after c. So the recomputation
cut of c also takes N(c) and what it reads, up to c's ancestors, as columns: q_v = 1 on N(c), the rows
that carry a read to the inputs as above, and no y charged (the computation after c may be v's first).
On an unrolled GRU, autograd saves a copy of a third of each step's gate pre-activations for the
backward; the copy is an ancestor of no forward value, so the node cut let the whole pre-activation
go, and said that 0.7 of the peak needs no recomputation in any order (docs/benchmarks.md, "auto on
families it was never tuned on"). Such cuts can bind where no node cut does, so the nodes of most
node-cut need are ranked again by the memory their recomputation cut holds without recomputation (a
minimum cut).

The prefix cuts get the same recomputation term. At the k-th first
computation (downset D, node c), let q_v = 1 when v in D is read after this
step (by any computation, first or again, or as an output at the end) and
r_v = 1 when v is resident during it. Every valid schedule satisfies

    q_x = 1                  for x in D read by a node outside D, or an output
    r_v >= q_v - y_v         for v in D
    q_u >= q_x - r_x         for every input u of x in D
    fixed + ws(c) + sum_{v in D} mem(v) r_v <= B,  r = 1 on c and its inputs.

The first row: a node outside D is first computed after c and reads x then.
The second: v read later but not resident was computed before (it is in D)
and is computed again after c, so y_v = 1 (c itself is resident). The third:
x read later but not resident is computed again after c (as just said), and
that computation reads each input u (an input of every implementation of x),
so u is read after c too; u is in D, D being a downset. Values outside D are
not computed yet: neither resident nor read (q = r = 0). With y = 0 these rows
are the probes' (r >= q, nothing propagates), and they imply the rows above
(r_x >= 1 - y_x for x read from outside D), so the bound only rises. Given
0/1 values of D, c and y, the least memory over r and q is a minimum cut
(every row has one +1 and one -1 once r_x = q_x - t_x: a network matrix), so
r and q are continuous columns. A downset of size k holds no node with k or
more ancestors and every node with n - k or more descendants (along the edges
every implementation has): those columns are fixed before the solver starts.

Large graphs. Above `ALL_CUTS_NODES` nodes the binding node cuts are too many
for one program in the bound's time (thousands, with millions of nonzeros), so
the program starts with the few whose own LP bound is highest and grows: each
round solves it, checks its answer against every node cut, and adds those it
breaks most, until none is broken (the whole program's optimum: proven) or the
time runs out (cutting planes, as Dantzig, Fulkerson and Johnson 1954 grew the
TSP's subtour rows). The recomputation cuts join it from the start while their
nonzeros stay within `MAX_RECOMPUTE_NONZEROS`. A program over some of the cuts
is a relaxation of the whole, so every round's optimum or dual bound is a
bound, and so is each node cut's LP bound alone (a fractional knapsack, solved
in closed form): whenever it stops, the answer is the best of these. The cut
sets are kept as a packed bit matrix and summed a block of rows at a time
(numpy), and every pass checks the deadline.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from remat_bench.core.control import Deadline
from remat_bench.core.graph import Graph, Number
from remat_bench.core.outcome import SolutionStatus, Termination, cut_short

# Up to this many nodes every binding node cut joins one 0/1 program. Above it they are too many for
# HiGHS in the bound's time (4,198 cuts and 15 million nonzeros on a 10,000-node transformer at 0.5: no
# answer in 30 s; docs/benchmarks.md, "The any-order bound at 10,000 nodes"), and the program grows a
# few cuts at a time instead (`_cut_plane_bound`). From `MAX_PREFIX_NODES` up the whole program has no
# prefix cuts either, and the cutting planes prove its optimum sooner than HiGHS solves it whole (a
# 4,807-node transformer, a 3,187-node GPT: docs/benchmarks.md, "The any-order bound at 10,000 nodes").
ALL_CUTS_NODES = 2000
# The cut sets are n x n bitsets: ancestors, readers below, A(c) and A(c) packed for numpy, n^2/8 bytes
# each at most (450 MB together at 30,000 nodes). Above this the trivial bound is used.
MAX_NODES = 30_000
# The bitset passes of a large graph check the bound's deadline every this many nodes.
CHECK_EVERY = 256
# Matrix cells (cuts x nodes) unpacked at a time from the packed cut sets: 8 MB per float64 array.
CHUNK_CELLS = 1 << 20
# The cutting-plane program starts with the node cuts whose own LP bound is highest, and each round adds
# the ones its answer breaks most.
FIRST_CUTS = 20
ADDED_CUTS = 20
# On a large graph, the recomputation cuts join its program while their nonzeros stay within this: the
# eight of a 10,000-node GPT take 140,000; those of a random layered graph of 10,000 nodes and 195,559
# edges 2.7 million, and its program then had no answer in 60 s where without them it reached +7.98%
# (docs/benchmarks.md, "The any-order bound at 10,000 nodes").
MAX_RECOMPUTE_NONZEROS = 500_000
# Seconds a HiGHS run in a child process may take beyond its own time limit (the child's start and the
# grace before it is killed, `remat_bench.toolkit.milp`), kept back from the bound's time; a program is
# not started with less than `MIN_PROGRAM_S` of its own.
CHILD_OVERHEAD_S = 1.5
MIN_PROGRAM_S = 0.5
# The fractional knapsack bounds are running sums of up to n positive floats, off by at most n * 2^-53 of
# their value (3.3e-12 at `MAX_NODES`): lowered by this fraction, round-off cannot raise one above the true
# value.
ROUND_OFF = 1e-11
# Prefix probes: each is a 0/1 program over 2n variables, so only on graphs up to this size.
MAX_PREFIX_NODES = 2000
# At most this many prefix cuts join the bound's 0/1 program (each adds 3n columns).
MAX_PREFIX_CUTS = 4
# HiGHS 1.14's presolve returned a wrong "optimal" on a 7-node prefix probe (5 where 3 is feasible;
# scipy's HiGHS and HiGHS without presolve both give 3; ERGO-Code/HiGHS#3073 and #3094 report the
# same kind of bug), so the bound's programs run without it, slower but right: a wrong bound
# would mark schedules optimal.
EXACT = {"presolve": "off"}
# Recomputation cuts (module docstring) join the program for at most this many cut nodes, the ones
# whose node cut binds most; each adds two columns per ancestor of its node.
MAX_RECOMPUTE_CUTS = 8
# The nodes whose recomputation cuts are ranked again with N(c) (`_recompute_cuts_of`), those of most node-cut
# need first: on the unrolled GRU the cuts that bind most with N(c) are all among the first 64.
RANK_CANDIDATES = 64
# Probes tried at most, and their share of the bound's time limit.
MAX_PROBES = 12
PROBE_SHARE = 0.6


@dataclass(frozen=True)
class Bound:
    """A lower bound on duration for every schedule at one budget, and why its search stopped.

    ``termination``: ``proven`` when its 0/1 program was solved (``value`` None: no schedule fits),
    ``converged`` for the trivial bound (the durations' sum: no program to solve), ``time_limit`` or
    ``interrupted`` when the program was stopped early (its solver's dual bound is the value), or
    the solver's ``error``. `status` says the same in the words `remat-bench bound` shows.
    """

    value: Number | None  # None when infeasible
    termination: Termination
    recomputed: tuple[str, ...] = ()  # the values the bound says must be computed again
    solve_time_s: float = 0.0
    cuts: int = 0
    prefix_sizes: tuple[int, ...] = ()  # the k of the prefix cuts in the program
    recompute_cuts: int = 0  # the recomputation cuts in the program
    # Proven: every order computing each node once peaks at least this high (None: not shown).
    order_peak_at_least: Number | None = None
    no_order_fits: bool = False  # proven: every schedule within the budget recomputes something

    def as_dict(self) -> dict[str, Any]:
        """The bound as JSON-ready fields (what the cache writes and `remat-bench bound --json` shows).

        Returns
        -------
        dict
            Every field, the termination by its value, tuples as lists, and `status`.
        """
        return {"value": self.value, "status": self.status, "recomputed": list(self.recomputed),
                "solve_time_s": self.solve_time_s, "cuts": self.cuts, "prefix_sizes": list(self.prefix_sizes),
                "recompute_cuts": self.recompute_cuts,
                "order_peak_at_least": self.order_peak_at_least,
                "no_order_fits": self.no_order_fits, "termination": self.termination.value}

    @property
    def status(self) -> str:
        """In a word: "optimal" (the 0/1 program was solved), "infeasible" (it proved that no schedule
        fits), "trivial" (the durations' sum), or "limit" (stopped early: the solver's dual bound)."""
        if self.termination is Termination.PROVEN:
            return "infeasible" if self.value is None else "optimal"
        return "trivial" if self.termination is Termination.CONVERGED else "limit"

    @property
    def settled(self) -> bool:
        """Whether no further effort changes it (a proof, or the trivial bound): reused whatever effort
        a request asks for."""
        return self.termination in (Termination.PROVEN, Termination.CONVERGED)


class BoundSource(Protocol):
    """Where a run's any-order bounds come from: what a method (`SolveContext.bounds`) and the
    evaluation path may ask. `remat_bench.toolkit.bound_cache.BoundCache` keeps them in memory and on
    disk; a method never needs to know which.
    """

    def peek(self, graph: Graph, budget: Number | None) -> Bound | None:
        """The bound already known for ``graph`` at ``budget`` (None: none is; never computes one).

        Parameters
        ----------
        graph : Graph
        budget : Number or None
            In the graph's memory units; None for ``min``.

        Returns
        -------
        Bound or None
        """

    def get(self, graph: Graph, budget: Number | None, effort: float = 30.0) -> tuple[Bound, bool]:
        """The bound, computed with ``effort`` seconds unless one good for that is known, and whether it
        was known.

        Parameters
        ----------
        graph : Graph
        budget : Number or None
            In the graph's memory units; None for ``min`` (the trivial bound).
        effort : float
            Seconds the bound may take when it is computed (`any_order_bound`'s time limit).

        Returns
        -------
        bound : Bound
        known : bool
            Whether it was known rather than computed now.
        """

    def recompute(self, graph: Graph, budget: Number | None, effort: float) -> Bound:
        """The bound computed afresh, the one known forgotten (a schedule contradicted it).

        Parameters
        ----------
        graph : Graph
        budget : Number or None
            In the graph's memory units; None for ``min``.
        effort : float
            Seconds the bound may take (`any_order_bound`'s time limit).

        Returns
        -------
        Bound
        """

    def share(self, graph: Graph, same: Graph, budget: Number | None) -> None:
        """Let ``same`` (``graph`` with its nodes in another order) use ``graph``'s bound at ``budget``.

        Parameters
        ----------
        graph : Graph
        same : Graph
            ``graph`` with its nodes listed in another order (`Graph.in_order`).
        budget : Number or None
            In the graph's memory units; None for ``min``.
        """

    def for_graph(self, graph: Graph) -> BoundSource:
        """A source for a child process that solves ``graph``: its bounds of ``graph`` and no others.

        Parameters
        ----------
        graph : Graph

        Returns
        -------
        BoundSource
        """


def _bits_to_array(bits: int, n: int) -> np.ndarray:
    raw = bits.to_bytes((n + 7) // 8, "little")
    return np.unpackbits(np.frombuffer(raw, dtype=np.uint8), bitorder="little")[:n].astype(bool)


def memory_cuts(graph: Graph) -> tuple[np.ndarray, list[np.ndarray]]:
    """Per node c: the fixed part of its cut (fixed + c + ws + inputs) and the set A(c).

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    base : np.ndarray
        float64, one per node: the fixed part in memory units, with c's cheapest implementation.
    sets : list of np.ndarray
        One per node: the indices of A(c), ascending.
    """
    base, sets, _ = _memory_cuts_deferred(graph)
    return base, sets


def _memory_cuts_deferred(graph: Graph) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray]]:
    """`memory_cuts` and, per node c, the set N(c) of the recomputation cuts (module docstring): the values
    read after c's first computation that are neither c's ancestors nor its descendants."""
    found = _cut_bits(graph, None)
    assert found is not None  # no deadline: never out of time
    base, bits, deferred = found
    n = graph.n

    def indices(bitset: int) -> np.ndarray:
        return np.flatnonzero(_bits_to_array(bitset, n)) if bitset else np.zeros(0, dtype=np.int64)

    return base, [indices(a) for a in bits], [indices(d) for d in deferred]


def _cut_bits(graph: Graph, deadline: Deadline | None) -> tuple[np.ndarray, list[int], list[int]] | None:
    """`memory_cuts` with each A(c) as a Python-int bitset (bit x set for x in A(c)), and each N(c)
    (`_memory_cuts_deferred`) the same way; None when ``deadline`` expired first."""
    n = graph.n
    mem = graph.memory
    # Inputs every implementation of d reads (a reader counts only then), as bitsets.
    common_inputs = [0] * n
    src, dst = common_edges(graph)
    for u, d in zip(src.tolist(), dst.tolist(), strict=True):
        common_inputs[d] |= 1 << u
    # Ancestors (forward) and "read by a descendant" (backward), as Python-int bitsets:
    # one pass each in topological order, O(n * edges / 64) word operations.
    ancestors = [0] * n
    for v in range(n):
        if deadline is not None and v % CHECK_EVERY == 0 and deadline.expired():
            return None
        acc = 0
        for u in graph.inputs[v]:
            acc |= ancestors[u] | (1 << u)
        for op in graph.ops_of(v):
            for u in graph.op_inputs[op]:
                acc |= ancestors[u] | (1 << u)
        ancestors[v] = acc
    consumers_all: list[set[int]] = [set() for _ in range(n)]
    for op in range(graph.n_ops):
        d = int(graph.op_node[op])
        for u in graph.op_inputs[op]:
            consumers_all[u].add(d)
    read_below = [0] * n  # values read by some strict descendant
    below = [0] * n  # the strict descendants
    for v in range(n - 1, -1, -1):
        if deadline is not None and v % CHECK_EVERY == 0 and deadline.expired():
            return None
        acc = 0
        down = 0
        for d in consumers_all[v]:
            acc |= common_inputs[d] | read_below[d]
            down |= below[d] | (1 << d)
        read_below[v] = acc
        below[v] = down
    outputs = 0
    for o in graph.output_indices:
        outputs |= 1 << o
    base = np.empty(n, dtype=np.float64)
    bits: list[int] = []
    deferred: list[int] = []
    for c in range(n):
        if deadline is not None and c % CHECK_EVERY == 0 and deadline.expired():
            return None
        # The cheapest implementation of c (least input memory plus workspace) in the fixed part, and
        # every implementation's inputs left out of A(c): c may run with another implementation, and
        # a value the cut counts must then not be among that one's inputs as well (counted twice).
        best_need, any_inputs = None, 0
        for op in graph.ops_of(c):
            for u in graph.op_inputs[op]:
                any_inputs |= 1 << u
            need = float(sum(mem[u] for u in graph.op_inputs[op])) + float(graph.op_workspace[op])
            if best_need is None or need < best_need:
                best_need = need
        base[c] = float(graph.fixed_memory) + float(mem[c]) + (best_need or 0.0)
        later = (read_below[c] | outputs) & ~any_inputs & ~(1 << c) & ~below[c]
        bits.append(ancestors[c] & later)
        deferred.append(later & ~ancestors[c])
    return base, bits, deferred


def common_edges(graph: Graph) -> tuple[np.ndarray, np.ndarray]:
    """(u, d) for each input u that every implementation of d reads, once each.

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    src : np.ndarray
        int64: the inputs u.
    dst : np.ndarray
        int64: their readers d, ascending (each d's inputs ascending).
    """
    src, dst = [], []
    for d in range(graph.n):
        common: set[int] | None = None
        for op in graph.ops_of(d):
            ins = set(graph.op_inputs[op])
            common = ins if common is None else common & ins
        for u in sorted(common or ()):
            src.append(u)
            dst.append(d)
    return np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)


@dataclass
class _Rows:
    """Sparse rows collected block by block: lower <= sum(vals * x[cols]) <= upper."""

    rows: list[np.ndarray]
    cols: list[np.ndarray]
    vals: list[np.ndarray]
    lower: list[float]
    upper: list[float]

    @classmethod
    def empty(cls) -> _Rows:
        return cls([], [], [], [], [])

    def add(self, cols: list[np.ndarray], vals: list[float], lower: float) -> None:
        """len(cols[0]) rows ``sum_j vals[j] * x[cols[j][i]] >= lower`` at once."""
        count = len(cols[0])
        if count == 0:
            return
        base = len(self.lower)
        for c, v in zip(cols, vals, strict=True):
            self.rows.append(base + np.arange(count))
            self.cols.append(np.asarray(c, dtype=np.int64))
            self.vals.append(np.full(count, v, dtype=np.float64))
        self.lower.extend([lower] * count)
        self.upper.extend([np.inf] * count)

    def copy(self) -> _Rows:
        return _Rows(list(self.rows), list(self.cols), list(self.vals), list(self.lower), list(self.upper))

    def add_row(self, cols: np.ndarray, vals: np.ndarray, lower: float, upper: float = np.inf) -> None:
        """One row over any number of columns."""
        self.rows.append(np.full(len(cols), len(self.lower)))
        self.cols.append(np.asarray(cols, dtype=np.int64))
        self.vals.append(np.asarray(vals, dtype=np.float64))
        self.lower.append(lower)
        self.upper.append(upper)

    def matrix(self, num_cols: int) -> Any:
        import scipy.sparse as sp

        if not self.rows:
            return sp.csr_matrix((0, num_cols))
        return sp.csr_matrix((np.concatenate(self.vals), (np.concatenate(self.rows), np.concatenate(self.cols))),
                             shape=(len(self.lower), num_cols))


class _PrefixCut:
    """The prefix cut at size k (module docstring) as rows over columns d, e, z (and q) from ``col0``.

    d: the downset before the k-th first computation (k - 1 nodes); e: after it,
    so e - d is the node c computed; z_v >= 1 when v is resident then: c itself,
    an input of c, or a member of e read by a node outside e (or an output) that
    is not computed again (y_v = 0). Memory: mem . z + workspace . (e - d).

    With ``recompute`` (the recomputation term, module docstring) a fourth block q
    says which members of e are read after the step, and a member read later but
    not resident makes its inputs read later too: z is the r of the docstring.
    """

    def __init__(self, graph: Graph, edges: tuple[np.ndarray, np.ndarray], recompute: bool = False):
        self.n = graph.n
        self.src, self.dst = edges
        self.mem = graph.memory.astype(np.float64)
        self.ws = np.minimum.reduceat(graph.op_workspace, graph.op_start[:-1]).astype(np.float64)
        self.outputs = np.asarray(graph.output_indices, dtype=np.int64)
        self.fixed = float(graph.fixed_memory)
        self.integral = (graph.memory.dtype.kind in "iu" and graph.op_workspace.dtype.kind in "iu"
                         and isinstance(graph.fixed_memory, int))
        self.recompute = recompute
        # Ancestors and descendants along the edges every implementation has (those of the downset rows):
        # a downset of size k holds no node with k or more ancestors, and every node with n - k or more
        # descendants.
        src_list, dst_list = self.src.tolist(), self.dst.tolist()
        inputs: list[list[int]] = [[] for _ in range(self.n)]
        readers: list[list[int]] = [[] for _ in range(self.n)]
        for u, v in zip(src_list, dst_list, strict=True):
            inputs[v].append(u)
            readers[u].append(v)
        self.ancestors = _closure_sizes(inputs, range(self.n))
        self.descendants = _closure_sizes(readers, range(self.n - 1, -1, -1))

    @property
    def width(self) -> int:
        """The columns of one block: d, e, z, and q with the recomputation term."""
        return (4 if self.recompute else 3) * self.n

    def add(self, rows: _Rows, k: int, col0: int, y0: int | None) -> np.ndarray:
        """Add the rows of size k; return the memory coefficients over this block's `width` columns."""
        n, src, dst = self.n, self.src, self.dst
        d, e, z = col0, col0 + n, col0 + 2 * n
        every = np.arange(n)
        rows.add([d + src, d + dst], [1.0, -1.0], 0.0)  # d is a downset
        rows.add([e + src, e + dst], [1.0, -1.0], 0.0)  # so is e
        rows.add([e + every, d + every], [1.0, -1.0], 0.0)  # d within e
        both = np.r_[np.ones(n), -np.ones(n)]
        rows.add_row(np.r_[e + every, d + every], both, 1.0, 1.0)  # one node computed: c
        rows.add_row(d + every, np.ones(n), float(k - 1), float(k - 1))
        out = self.outputs
        if self.recompute:
            assert y0 is not None, "the recomputation term needs the program's y"
            q = col0 + 3 * n
            rows.add([q + src, e + src, e + dst], [1.0, -1.0, 1.0], 0.0)  # read later: from outside e
            rows.add([q + out, e + out], [1.0, -1.0], 0.0)  # or an output
            rows.add([z + every, q + every, y0 + every], [1.0, -1.0, 1.0], 0.0)  # resident unless computed again
            rows.add([q + src, q + dst, z + dst], [1.0, -1.0, 1.0], 0.0)  # computed again: its inputs read later
        else:
            # Held unless computed again (y_v = 1, when the program has y at ``y0``).
            def unless_recomputed(v: np.ndarray) -> tuple[list[np.ndarray], list[float]]:
                return ([y0 + v], [1.0]) if y0 is not None else ([], [])

            again, one = unless_recomputed(src)
            rows.add([z + src, e + src, e + dst, *again], [1.0, -1.0, 1.0, *one], 0.0)  # read from outside e
            again, one = unless_recomputed(out)
            rows.add([z + out, e + out, *again], [1.0, -1.0, *one], 0.0)  # an output
        rows.add([z + src, e + dst, d + dst], [1.0, -1.0, 1.0], 0.0)  # an input of c
        rows.add([z + every, e + every, d + every], [1.0, -1.0, 1.0], 0.0)  # c itself
        coef = np.zeros(self.width)
        coef[2 * n:3 * n] = self.mem
        coef[n:2 * n] = self.ws
        coef[:n] = -self.ws
        return coef

    def bounds(self, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Lower, upper and integrality of the columns of the block of size k: d and e binary, fixed where
        the size decides them (`__init__`); z and q continuous (at their least values they are 0 or 1
        once d, e and y are: module docstring)."""
        n = self.n
        integer = np.zeros(self.width, dtype=bool)
        integer[:2 * n] = True
        lo, hi = np.zeros(self.width), np.ones(self.width)
        for col0, size in ((0, k - 1), (n, k)):
            hi[col0:col0 + n][self.ancestors >= size] = 0.0
            lo[col0:col0 + n][self.descendants >= n - size] = 1.0
        # A node outside every downset of size k is not computed yet: neither resident nor read after.
        hi[2 * n:][np.tile(self.ancestors >= k, self.width // n - 2)] = 0.0
        return lo, hi, integer


def _closure_sizes(parents: list[list[int]], order: range) -> np.ndarray:
    """Per node, how many nodes it reaches through ``parents`` (its ancestors when ``parents`` are the
    inputs and ``order`` topological; its descendants with readers and the reverse order)."""
    reach = [0] * len(parents)
    for v in order:
        acc = 0
        for u in parents[v]:
            acc |= reach[u] | (1 << u)
        reach[v] = acc
    return np.asarray([r.bit_count() for r in reach], dtype=np.int64)


class _RecomputeCut:
    """The recomputation cut of node c (module docstring) as rows over columns r, q of c's ancestors and
    of the values that may be computed after c for the first time.

    ``values``: the ancestors of c that are not inputs of any of its implementations (the cheapest
    implementation's are in the cut's fixed part), then the values of N(c) (``deferred``) and those
    they read, up to c's ancestors (``ancestor`` is False on these); r and q take one column each per
    value, from ``col0``.
    """

    def __init__(self, graph: Graph, c: int, base: float, needed: np.ndarray,
                 edges: tuple[np.ndarray, np.ndarray], excluded: np.ndarray,
                 deferred: np.ndarray | None = None, inputs_of: list[list[int]] | None = None):
        self.c, self.base = c, base
        n = graph.n
        seen = np.zeros(n, dtype=bool)
        stack = [c]
        while stack:  # every ancestor of c
            v = stack.pop()
            for u in graph.inputs[v]:
                if not seen[u]:
                    seen[u] = True
                    stack.append(u)
            for op in graph.ops_of(v):
                for u in graph.op_inputs[op]:
                    if not seen[u]:
                        seen[u] = True
                        stack.append(u)
        seen[excluded] = False
        seen[c] = False
        src, dst = edges
        # N(c) and what it reads, up to c's ancestors (and c's inputs: resident at c): a value of N(c) not
        # resident at c is computed after it, first or again, and reads its inputs then.
        later = np.zeros(n, dtype=bool)
        if deferred is not None and len(deferred):
            assert inputs_of is not None, "N(c)'s closure needs each node's inputs along the common edges"
            stop = seen.copy()
            stop[excluded] = True
            stop[c] = True
            stack = [int(v) for v in deferred if not stop[v]]
            later[stack] = True
            while stack:
                v = stack.pop()
                for u in inputs_of[v]:
                    if not stop[u] and not later[u]:
                        later[u] = True
                        stack.append(u)
        self.values = np.r_[np.flatnonzero(seen), np.flatnonzero(later)].astype(np.int64)
        self.ancestor = np.r_[np.ones(int(seen.sum()), dtype=bool), np.zeros(int(later.sum()), dtype=bool)]
        columns = seen | later
        self.index = np.full(n, -1, dtype=np.int64)
        self.index[self.values] = np.arange(len(self.values))
        self.needed = np.zeros(len(self.values), dtype=bool)
        wanted = needed if deferred is None else np.r_[needed, deferred].astype(np.int64)
        self.needed[self.index[wanted[columns[wanted]]]] = True
        keep = columns[src] & columns[dst]  # an input outside (c's own input) is resident at c already
        self.src, self.dst = self.index[src[keep]], self.index[dst[keep]]
        self.mem = graph.memory[self.values].astype(np.float64)

    @property
    def width(self) -> int:
        return 2 * len(self.values)

    @property
    def nonzeros(self) -> int:
        """The nonzeros `add` puts in the program."""
        needed = int((self.needed & self.ancestor).sum())
        rest = int((~self.needed & self.ancestor).sum())
        read_later = int(self.needed[self.dst].sum())
        return (2 * needed + 3 * rest + 2 * read_later + 3 * (len(self.dst) - read_later)
                + int(np.count_nonzero(self.mem > 0)))

    def add(self, rows: _Rows, col0: int, budget: float) -> None:
        """The rows over r (``col0``...) and q (``col0 + m``...), with y at column v for node v."""
        m = len(self.values)
        r, q = col0, col0 + m
        a = self.values
        # Only an ancestor of c was computed before c: one not resident was computed again (y). A value of
        # N(c) may be computed after c for the first time, at no cost: q and r alone say what it reads.
        need = np.flatnonzero(self.needed & self.ancestor)
        rest = np.flatnonzero(~self.needed & self.ancestor)
        rows.add([r + need, a[need]], [1.0, 1.0], 1.0)  # read later: resident unless computed again
        rows.add([r + rest, q + rest, a[rest]], [1.0, -1.0, 1.0], 0.0)
        needed_x = self.needed[self.dst]
        u, x = self.src[needed_x], self.dst[needed_x]
        rows.add([q + u, r + x], [1.0, 1.0], 1.0)  # x read later and not resident: its inputs later too
        u, x = self.src[~needed_x], self.dst[~needed_x]
        rows.add([q + u, q + x, r + x], [1.0, -1.0, 1.0], 0.0)
        nz = np.flatnonzero(self.mem > 0)
        rows.add_row(r + nz, self.mem[nz], -np.inf, budget - self.base)

    def held(self) -> float:
        """The least memory its rows let be resident at c when nothing is computed again (y = 0), the cut's
        fixed part included: a minimum cut, found as a maximum flow. A value read later is cut (resident) or,
        outside c's ancestors, passes the demand on to its inputs; memory is rounded up to units that keep
        the capacities within 32 bits, so this is for ranking the cuts, not a bound."""
        from scipy.sparse import csr_matrix
        from scipy.sparse.csgraph import maximum_flow

        m = len(self.values)
        if not self.needed.any():
            return self.base
        unit = max(1.0, float(self.mem.sum()) / 2 ** 28)
        cap = np.ceil(self.mem / unit).astype(np.int64)
        big = np.int64(2 ** 31 - 1)
        source, sink = 2 * m, 2 * m + 1
        every = np.arange(m)
        later = ~self.ancestor[self.dst]  # a value outside c's ancestors computed after c reads its inputs
        tails = np.r_[2 * every, 2 * every[self.ancestor] + 1, np.full(int(self.needed.sum()), source),
                      2 * self.dst[later] + 1]
        heads = np.r_[2 * every + 1, np.full(int(self.ancestor.sum()), sink), 2 * np.flatnonzero(self.needed),
                      2 * self.src[later]]
        caps = np.r_[cap, np.full(len(tails) - m, big)]
        graph = csr_matrix((caps.astype(np.int32), (tails, heads)), shape=(2 * m + 2, 2 * m + 2))
        graph.sum_duplicates()
        flow = maximum_flow(graph, source, sink).flow_value
        return self.base + float(flow) * unit

    def bounds(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """r binary; q continuous (at its least value it is 0 or 1 once r and y are)."""
        m = len(self.values)
        integer = np.zeros(2 * m, dtype=bool)
        integer[:m] = True
        return np.zeros(2 * m), np.ones(2 * m), integer


def recompute_cuts(graph: Graph, budget: Number, base: np.ndarray, sets: list[np.ndarray],
                   count: int = MAX_RECOMPUTE_CUTS, deferred: list[np.ndarray] | None = None,
                   deadline: Deadline | None = None) -> list[_RecomputeCut]:
    """The recomputation cuts of the ``count`` nodes whose cuts need the most memory dropped, counting the
    values of N(c) as resident.

    Parameters
    ----------
    graph : Graph
    budget : Number
        In the graph's memory units.
    base : np.ndarray
        The fixed parts of the node cuts (`memory_cuts`).
    sets : list of np.ndarray
        The sets A(c) of the node cuts (`memory_cuts`).
    count : int
        The most cuts returned.
    deferred : list of np.ndarray, optional
        The sets N(c) (`_memory_cuts_deferred`); none when omitted.
    deadline : Deadline, optional
        When ranking the cuts again with N(c) stops (`_recompute_cuts_of`).

    Returns
    -------
    list of _RecomputeCut
        Most memory to drop first; only nodes whose cut does not fit ``budget`` with A(c) and N(c) resident.
    """
    mem = graph.memory.astype(np.float64)
    need = np.array([float(mem[xs].sum()) - (float(budget) - base[c]) for c, xs in enumerate(sets)])
    most = None if deferred is None else need + np.array([float(mem[xs].sum()) for xs in deferred])
    return _recompute_cuts_of(graph, base, need, sets.__getitem__, count, budget=float(budget),
                              deferred_of=None if deferred is None else deferred.__getitem__, deadline=deadline,
                              most=most)


def _recompute_cuts_of(graph: Graph, base: np.ndarray, need: np.ndarray, set_of: Callable[[int], np.ndarray],
                       count: int, max_nonzeros: int | None = None, budget: float | None = None,
                       deferred_of: Callable[[int], np.ndarray] | None = None,
                       deadline: Deadline | None = None, most: np.ndarray | None = None) -> list[_RecomputeCut]:
    """`recompute_cuts` from each node cut's ``need`` (sum of mem over A(c), less what the budget leaves
    it), ``set_of(c)`` giving A(c); a cut that would take the cuts' nonzeros above ``max_nonzeros`` is
    left out.

    With ``deferred_of`` (N(c)) and ``budget``, the `RANK_CANDIDATES` nodes of most ``need`` are ranked
    again by the memory their recomputation cuts hold with nothing computed again (`_RecomputeCut.held`),
    and those that hold more than ``budget`` are taken, most first: the values of N(c) can make a cut bind
    where the node cut (A(c) alone) does not, as on an unrolled recurrent network (docs/benchmarks.md).
    Ranking stops at ``deadline``; ``most`` (``need`` plus the memory of N(c)) leaves out the nodes whose
    cut cannot bind even with all of N(c) resident, so that at a budget where nothing binds none is built."""
    if count <= 0:
        return []
    edges = common_edges(graph)
    inputs_of: list[list[int]] = [[] for _ in range(graph.n)]  # along the common edges, built once for every cut
    for u, d in zip(*(e.tolist() for e in edges), strict=True):
        inputs_of[d].append(u)

    def cut_of(c: int) -> _RecomputeCut:
        # As in `memory_cuts`: the fixed part holds the cheapest implementation's inputs, and no input
        # of any implementation of c is counted again among the ancestors.
        inputs = np.unique(np.asarray([u for op in graph.ops_of(c) for u in graph.op_inputs[op]], dtype=np.int64))
        return _RecomputeCut(graph, c, float(base[c]), set_of(c), edges, inputs,
                             None if deferred_of is None else deferred_of(c), inputs_of)

    order = np.argsort(-need, kind="stable")
    if deferred_of is None or budget is None:
        chosen = [cut_of(int(c)) for c in order[:count] if need[c] > 0]
    else:
        if most is not None:
            order = order[most[order] > 0]
        ranked = []
        for c in order[:RANK_CANDIDATES].tolist():
            if deadline is not None and deadline.expired():
                break
            cut = cut_of(c)
            if (held := cut.held()) > budget:
                ranked.append((-held, c, cut))
        chosen = [cut for *_, cut in sorted(ranked, key=lambda t: (t[0], t[1]))[:count]]
    out: list[_RecomputeCut] = []
    nonzeros = 0
    for cut in chosen:
        if max_nonzeros is not None and nonzeros + cut.nonzeros > max_nonzeros:
            continue
        nonzeros += cut.nonzeros
        out.append(cut)
    return out


@dataclass(frozen=True)
class PrefixProbe:
    """The least memory, over every order, at the k-th first computation (with no recomputation)."""

    k: int
    at_least: float  # proven (the solver's bound when it stopped early; just above the cap when capped)
    best: float  # the least memory the solver found (equal to at_least when solved)


def order_profile_upper(graph: Graph, budget: Number | None = None, seconds: float = 0.0,
                        tries: int = 3, seed: int = 0) -> np.ndarray:
    """Memory at each step of good orders, pointwise least (an upper bound on every probe).

    A few list-scheduled orders, and when ``seconds`` > 0 the local search of
    `remat_bench.methods.reorder` from the best of them: a good order peaks
    where the probes are highest, which is where they are worth trying.

    Parameters
    ----------
    graph : Graph
    budget : Number or None
        Where the local search stops (an order that fits); None: it lowers the peak as far as it can.
    seconds : float
        The local search's time (s); 0 for list scheduling alone.
    tries : int
        Randomised list-scheduled orders tried besides the deterministic one.
    seed : int
        Seeds the randomised orders and the local search.

    Returns
    -------
    np.ndarray
        One value per step k: the least, over those orders, of the memory at their k-th step (memory units,
        the fixed memory included).
    """
    from remat_bench.toolkit.orders import OrderProfile, list_schedule, local_search

    profile = OrderProfile(graph)
    rng = np.random.default_rng(seed)
    orders = [list_schedule(graph)] + [list_schedule(graph, rng) for _ in range(tries)]
    profiles = [profile(np.asarray(o, dtype=np.int64))[0] for o in orders]
    if seconds > 0:
        start = orders[int(np.argmin([p.max() for p in profiles]))]
        searched = local_search(graph, start, budget, seconds, seed)
        profiles.append(profile(np.asarray(searched, dtype=np.int64))[0])
    return np.min(profiles, axis=0)


def prefix_probes(graph: Graph, budget: Number, seconds: float, upper: np.ndarray | None = None,
                  max_probes: int = MAX_PROBES, enough: int | None = None) -> list[PrefixProbe]:
    """Probe the sizes k where good orders hold the most memory, while one could exceed ``budget``.

    ``upper[k - 1]`` (a good order's memory at its k-th step) bounds the probe
    at k from above, and good orders peak where the probes are highest (the
    orders of the list scheduler alone do not: on random_layered_n500 they led
    the probes astray, the local search's did not). Sizes are tried from the
    highest upper bound down, at least n/50 apart, until no size left can
    exceed the budget, ``max_probes`` were tried, ``enough`` exceeded it, or
    ``seconds`` ran out. Each
    probe is capped at the budget (`_probe`) and gets a share of what is left,
    a third at most; one stopped early keeps the solver's bound.

    Parameters
    ----------
    graph : Graph
    budget : Number
        In the graph's memory units.
    seconds : float
        The time for every probe together (s).
    upper : np.ndarray or None
        `order_profile_upper`'s answer; None computes it with list scheduling alone.
    max_probes : int
        The most probes tried.
    enough : int or None
        Stop once this many probes exceed ``budget`` (None: go on).

    Returns
    -------
    list of PrefixProbe
        By k; empty for a graph above `MAX_PREFIX_NODES` nodes or without time.
    """
    n = graph.n
    if n < 1 or n > MAX_PREFIX_NODES or seconds <= 0:
        return []
    end = time.perf_counter() + seconds
    if upper is None:
        upper = order_profile_upper(graph)
    block = _PrefixCut(graph, common_edges(graph))
    spacing = max(1, n // 50)
    probes: list[PrefixProbe] = []
    tried: list[int] = []
    for k in (np.argsort(-upper, kind="stable") + 1).tolist():
        left = end - time.perf_counter()
        if len(tried) >= max_probes or left <= 0.05 or upper[k - 1] <= budget:
            break
        if any(abs(k - t) < spacing for t in tried):
            continue
        tried.append(k)
        result = _probe(block, k, left / max(1, min(3, max_probes - len(tried) + 1)), budget)
        if result is not None:
            probes.append(result)
            if enough is not None and sum(p.best > budget for p in probes) >= enough:
                break
    return sorted(probes, key=lambda p: p.k)


def prefix_cut_bound(graph: Graph, budget: Number, sizes: list[int], seconds: float = 60.0,
                     recompute: bool = True) -> tuple[float | None, Termination]:
    """The least recomputation the prefix cuts of ``sizes`` alone require (no node or recomputation cuts).

    Parameters
    ----------
    graph : Graph
    budget : Number
        In the graph's memory units.
    sizes : list of int
        The steps k of the prefix cuts, each from 1 to the number of nodes.
    seconds : float
        The 0/1 program's time limit (s).
    recompute : bool
        Whether the prefix cuts carry the recomputation term (module docstring).

    Returns
    -------
    extra : float or None
        Duration every schedule within ``budget`` takes beyond the durations' sum (the fastest
        implementations'); None when no schedule meets the cuts.
    termination : Termination
        ``proven`` when the program was solved; otherwise ``extra`` is the solver's dual bound.
    """
    fastest = np.minimum.reduceat(graph.op_duration, graph.op_start[:-1]).astype(np.float64)
    extra, termination, _ = _solve_program(graph, _Rows.empty(), fastest, budget, list(sizes), seconds, [], recompute)
    return extra, termination


def probe_prefix(graph: Graph, k: int, seconds: float = 60.0) -> PrefixProbe | None:
    """The least memory, over every order computing each node once, at its k-th step (None: no answer in time).

    Parameters
    ----------
    graph : Graph
    k : int
        A step, from 1 to the number of nodes.
    seconds : float
        The 0/1 program's time limit (s).

    Returns
    -------
    PrefixProbe or None
    """
    return _probe(_PrefixCut(graph, common_edges(graph)), k, seconds)


def _probe(block: _PrefixCut, k: int, seconds: float, cap: Number | None = None) -> PrefixProbe | None:
    """The probe at size k; with ``cap``, only whether it exceeds ``cap`` (much faster when it does).

    With a cap the memory row ``<= cap`` is added: infeasible proves the probe
    exceeds the cap (the solver stops as soon as its bound passes it, instead
    of closing the gap to the exact value), and any solution shows it does not.
    """
    from remat_bench.toolkit.milp import SparseModel, solve_milp

    lo, hi, integer = block.bounds(k)
    rows = _Rows.empty()
    coef = block.add(rows, k, 0, None)
    if cap is not None:
        nz = np.flatnonzero(coef)
        rows.add_row(nz, coef[nz], -np.inf, float(cap) - block.fixed)
    model = SparseModel(cost=coef, lower=lo, upper=hi, integer=integer, A=rows.matrix(block.width),
                        row_lower=np.asarray(rows.lower), row_upper=np.asarray(rows.upper))
    sol = solve_milp(model, time_limit=max(0.05, seconds), mip_gap=0.0, options=EXACT)
    if sol.solution_status is SolutionStatus.INFEASIBLE and cap is not None:
        above = math.floor(cap) + 1 if block.integral else float(np.nextafter(float(cap), np.inf))
        return PrefixProbe(k, above, above)
    if sol.objective is None and sol.dual_bound is None:
        return None  # no answer in time (a DAG always has a downset of each size)
    optimal = sol.solution_status is SolutionStatus.OPTIMAL and sol.objective is not None
    proven = sol.objective if optimal and sol.objective is not None else max(0.0, sol.dual_bound or 0.0)
    at_least = block.fixed + proven
    best = block.fixed + sol.objective if sol.objective is not None else at_least
    if block.integral:  # whole units: the solver's round-off is not a bound
        at_least, best = math.ceil(at_least - 1e-6), round(best)
    return PrefixProbe(k, at_least, best)


def any_order_bound(graph: Graph, budget: Number | None, time_limit: float = 30.0,
                    max_recompute_cuts: int = MAX_RECOMPUTE_CUTS, prefix_recompute: bool = True) -> Bound:
    """The cut bound at ``budget`` (None: the lowest peak, where only the trivial bound holds);
    ``max_recompute_cuts`` = 0 leaves the recomputation cuts out, ``prefix_recompute`` = False the
    recomputation term of the prefix cuts (the tests compare them).

    Parameters
    ----------
    graph : Graph
    budget : Number or None
        In the graph's memory units; None for ``min``.
    time_limit : float
        Seconds for the whole bound: the probes and the 0/1 programs.
    max_recompute_cuts : int
        The most recomputation cuts in the program.
    prefix_recompute : bool
        Whether the prefix cuts carry the recomputation term (module docstring).

    Returns
    -------
    Bound
        Its value in the graph's duration units, None when no schedule fits ``budget``; the trivial bound
        at ``min`` and on graphs above `MAX_NODES` nodes.
    """
    trivial = graph.min_total_duration
    if budget is None:
        return Bound(trivial, Termination.CONVERGED)
    if graph.memory.dtype.kind == "f" or isinstance(graph.fixed_memory, float):
        # Fractional sizes: the cuts add them in another order than the simulator does, and a tie may round
        # either way (1.969 + 3 against 1e11 + 4.969 - 1e11). At a budget larger by round-off a tie fits;
        # a bound at a larger budget still holds at this one.
        budget = float(budget) + ROUND_OFF * max(abs(float(budget)), 1.0)
    if graph.n > MAX_NODES:
        return Bound(trivial, Termination.CONVERGED)
    if graph.n > ALL_CUTS_NODES:
        return _cut_plane_bound(graph, budget, time_limit, max_recompute_cuts)
    start = time.perf_counter()
    base, sets, deferred = _memory_cuts_deferred(graph)
    fastest = np.minimum.reduceat(graph.op_duration, graph.op_start[:-1]).astype(np.float64)
    mem = graph.memory.astype(np.float64)
    if np.any(base > budget):
        return Bound(None, Termination.PROVEN, solve_time_s=time.perf_counter() - start)
    rows = _node_cut_rows(budget, base, sets, fastest, mem)
    cuts = len(rows.lower)
    # The node and recomputation cuts first (small, and fast: the recomputation cuts make the program
    # solve sooner than the node cuts alone), then the prefix cuts if a probe says they bind (the
    # program with them is much slower; docs/benchmarks.md, "Figures that used to live in the code").
    # No deadline on ranking the cuts with N(c) (at most `RANK_CANDIDATES` cuts and maximum flows here): the cuts
    # chosen, and so the bound, do not depend on the machine's speed.
    recompute = recompute_cuts(graph, budget, base, sets, max_recompute_cuts, deferred)
    first = (_solve_program(graph, rows.copy(), fastest, budget, [], time_limit / 3, recompute)
             if cuts or recompute else (0.0, Termination.PROVEN, ()))
    probes, upper = _probes_where_prefixes_may_bind(graph, budget, first[0] is not None,
                                                    time_limit - (time.perf_counter() - start))
    # Most memory first; a capped probe says only that it exceeds the budget (`_probe`), so among those
    # the step where a good order holds most (where the probes are highest) comes first.
    over = sorted((p for p in probes if p.best > budget), key=lambda p: (-p.best, -upper[p.k - 1]))
    chosen = [p.k for p in over[:MAX_PREFIX_CUTS]]
    peak_at_least = max((p.at_least for p in probes), default=None)
    no_order = peak_at_least is not None and peak_at_least > budget
    answer, used, stopped = _with_prefix_cuts(graph, rows, fastest, budget, chosen, first, recompute,
                                              prefix_recompute, start + time_limit)
    extra, termination, recomputed = answer
    if stopped is not None and termination is Termination.PROVEN and extra is not None:
        termination = stopped
    elapsed = time.perf_counter() - start
    info: dict[str, Any] = {"solve_time_s": elapsed, "cuts": cuts, "order_peak_at_least": peak_at_least,
            "prefix_sizes": used, "recompute_cuts": len(recompute)}
    return _bound_of(trivial, extra, termination, recomputed, info, no_order)


def _node_cut_rows(budget: Number, base: np.ndarray, sets: list[np.ndarray], fastest: np.ndarray,
                   mem: np.ndarray) -> _Rows:
    """The node cuts that bind at ``budget``, none implied by another (`_undominated`)."""
    # Cut of c: sum_{x in A(c)} mem_x y_x >= sum_{x in A(c)} mem_x - (B - base_c). Only cuts that
    # bind, and only x with positive memory and duration, matter (y_x = 1 is free when duration is 0).
    rows = _Rows.empty()
    free_x = fastest <= 0
    binding: list[tuple[float, np.ndarray]] = []
    for c, xs in enumerate(sets):
        if not len(xs):
            continue
        need = float(mem[xs].sum()) - (budget - base[c])
        if need <= 0:
            continue
        zero_cost = xs[free_x[xs]]
        need -= float(mem[zero_cost].sum())
        xs = xs[~free_x[xs] & (mem[xs] > 0)]
        if need <= 0:
            continue
        binding.append((need, xs))
    for need, xs in _undominated(binding):
        rows.add_row(xs, mem[xs], need)
    return rows


def _probes_where_prefixes_may_bind(graph: Graph, budget: Number, feasible: bool, left: float
                                    ) -> tuple[list[PrefixProbe], np.ndarray]:
    """The prefix probes, where good orders peak above ``budget``, and the memory they hold at each step.

    None is probed (and the memory is zeros) on a graph above `MAX_PREFIX_NODES` nodes, when no schedule
    meets the node cuts (not ``feasible``) or with at most 0.1 s ``left``.
    """
    if graph.n > MAX_PREFIX_NODES or not feasible or left <= 0.1:
        return [], np.zeros(graph.n)
    # A fifth of the probes' time goes to finding a good order: where it peaks, the probes are high.
    probe_start = time.perf_counter()
    upper = order_profile_upper(graph, budget, PROBE_SHARE * left / 5)
    if upper.max() <= budget:
        return [], upper
    return prefix_probes(graph, budget, PROBE_SHARE * left - (time.perf_counter() - probe_start), upper,
                         enough=MAX_PREFIX_CUTS), upper


_Answer = tuple[float | None, Termination, tuple[str, ...]]  # as `_solve_program` answers


def _with_prefix_cuts(graph: Graph, rows: _Rows, fastest: np.ndarray, budget: Number, chosen: list[int],
                      first: _Answer, recompute: list[_RecomputeCut], prefix_recompute: bool, ends: float
                      ) -> tuple[_Answer, tuple[int, ...], Termination | None]:
    """The program again with the prefix cuts of ``chosen``, until ``ends`` (`time.perf_counter`).

    Returns the best answer (``first`` when none is higher), the prefix sizes it used, and why a program
    stopped short of proving its answer (None when none did).
    """
    answer = first
    used: tuple[int, ...] = ()
    # The prefix cut at the best step alone first, then all chosen together with the time left: one cut
    # solves much sooner than several (docs/benchmarks.md, "Order-free scheduling and the any-order bound").
    stopped: Termination | None = None
    plans = [chosen[:1], chosen] if len(chosen) > 1 else [chosen] if chosen else []
    for i, sizes in enumerate(plans):
        left = ends - time.perf_counter()
        if i > 0 and left < MIN_PROGRAM_S:
            stopped = cut_short()  # no time for all of them: more effort may raise the bound
            break
        got = _solve_program(graph, rows.copy(), fastest, budget, sizes, max(0.05, left), recompute,
                             prefix_recompute)
        if got[0] is None or (answer[0] is not None and got[0] > answer[0]):
            answer, used = got, tuple(sizes)
        if got[0] is None:
            break  # no schedule meets the cuts: settled
        if got[1] is not Termination.PROVEN:
            stopped = got[1]
            break
    return answer, used, stopped


def _bound_of(trivial: Number, extra: float | None, termination: Termination, recomputed: tuple[str, ...],
              info: dict[str, Any], no_order: bool = False) -> Bound:
    """The bound ``trivial + extra`` (rounded up on a graph of whole durations); None when ``extra`` is:
    no schedule meets the cuts."""
    if extra is None:
        return Bound(None, Termination.PROVEN, no_order_fits=True, **info)
    value = trivial + (int(np.ceil(extra - 1e-6)) if isinstance(trivial, int) else extra)
    return Bound(value, termination, recomputed, no_order_fits=no_order or extra > 0, **info)


def _cut_plane_bound(graph: Graph, budget: Number, time_limit: float, max_recompute_cuts: int) -> Bound:
    """`any_order_bound` on a graph above `ALL_CUTS_NODES` nodes: its 0/1 program (node and recomputation
    cuts; no prefix cuts, as on every graph above `MAX_PREFIX_NODES`) with its node cuts added a few at a
    time, within ``time_limit`` (module docstring, "Large graphs").

    Every value it may answer is a bound: the LP bound of one node cut (`_knapsack_bounds`), or the
    optimum or dual bound of a program over some of the node cuts, a relaxation of the whole.
    """
    start = time.perf_counter()
    deadline = Deadline(time_limit)
    trivial = graph.min_total_duration
    n = graph.n
    solved = (0, 0)  # the node and recomputation cuts of the last program run

    def answer(extra: float | None, termination: Termination, recomputed: tuple[str, ...] = ()) -> Bound:
        info: dict[str, Any] = {"solve_time_s": time.perf_counter() - start, "cuts": solved[0],
                                "recompute_cuts": solved[1]}
        return _bound_of(trivial, extra, termination, recomputed, info)

    found = _cut_bits(graph, deadline)
    if found is None:
        return answer(0.0, cut_short())
    base, bits, deferred_bits = found
    if np.any(base > budget):
        return Bound(None, Termination.PROVEN, solve_time_s=time.perf_counter() - start)
    packed = _packed(bits, n, deadline)
    del bits
    deferred = None if packed is None else _packed(deferred_bits, n, deadline)
    del deferred_bits
    if packed is None or deferred is None:
        return answer(0.0, cut_short())
    fastest = np.minimum.reduceat(graph.op_duration, graph.op_start[:-1]).astype(np.float64)
    mem = graph.memory.astype(np.float64)
    # As in `any_order_bound`: only x with positive memory and duration matter (y_x = 1 is free when
    # its duration is 0), so the others weigh nothing in the node cuts.
    costly = (fastest > 0) & (mem > 0)
    weight = np.where(costly, mem, 0.0)
    sums = _row_products(packed, np.arange(n), np.stack([mem, weight], axis=1), deadline)
    if sums is None:
        return answer(0.0, cut_short())
    room = float(budget) - base
    need = sums[:, 1] - room  # the node cut of c: sum_{x in A(c)} weight_x y_x >= need_c
    binding = np.flatnonzero(need > 0)
    binding = binding[np.argsort(-need[binding], kind="stable")]  # the likeliest to bind most first
    lp = _knapsack_bounds(packed, binding, need, weight, fastest, deadline)
    reached = np.flatnonzero(~np.isnan(lp))
    extra = max(0.0, float(lp[reached].max(initial=0.0)) * (1 - ROUND_OFF))
    if len(reached) < len(binding):
        return answer(extra, cut_short())
    later = _row_products(deferred, np.arange(n), mem[:, None], deadline)
    if later is None:
        return answer(extra, cut_short())
    # Ranked with N(c) (`_recompute_cuts_of`): a cut no node cut binds may still need recomputation.
    recompute = _recompute_cuts_of(graph, base, sums[:, 0] - room,
                                   lambda c: np.flatnonzero(_unpacked(packed, np.asarray([c]), n)[0]),
                                   max_recompute_cuts, MAX_RECOMPUTE_NONZEROS, float(budget),
                                   lambda c: np.flatnonzero(_unpacked(deferred, np.asarray([c]), n)[0]), deadline,
                                   sums[:, 0] + later[:, 0] - room)
    if not len(binding) and not recompute:
        return answer(0.0, Termination.PROVEN)
    cuts = binding[np.argsort(-lp, kind="stable")[:FIRST_CUTS]]
    integral = graph.memory.dtype.kind in "iu"
    while True:
        seconds = (deadline.remaining() or 0.0) - CHILD_OVERHEAD_S
        if seconds < MIN_PROGRAM_S:
            return answer(extra, cut_short())
        rows = _Rows.empty()
        for c, xs in zip(cuts.tolist(), _unpacked(packed, cuts, n).astype(bool), strict=True):
            cols = np.flatnonzero(xs & costly)
            rows.add_row(cols, mem[cols], float(need[c]))
        got, why, recomputed = _solve_program(graph, rows, fastest, budget, [], seconds, recompute)
        solved = (len(cuts), len(recompute))
        if got is None:  # a relaxation that nothing meets: nor does the whole
            return answer(None, Termination.PROVEN)
        extra = max(extra, got)
        if why is not Termination.PROVEN:
            return answer(extra, why)
        y = np.zeros(n, dtype=bool)
        y[[graph.index[i] for i in recomputed]] = True
        covered = _row_products(packed, binding, (weight * y)[:, None], deadline)
        if covered is None:
            return answer(extra, cut_short())
        # Sums of whole numbers are exact in float64; others get a relative tolerance.
        short = need[binding] - covered[:, 0]
        broken = np.flatnonzero(short > (0.0 if integral else 1e-9 * need[binding]))
        broken = broken[~np.isin(binding[broken], cuts)]  # one in the program is met, to HiGHS's tolerance
        if not len(broken):  # its answer meets every node cut: the whole program's optimum
            return answer(got, Termination.PROVEN, recomputed)
        cuts = np.concatenate([cuts, binding[broken[np.argsort(-short[broken], kind="stable")[:ADDED_CUTS]]]])


def _packed(bits: list[int], n: int, deadline: Deadline) -> np.ndarray | None:
    """The bitsets as an n x ceil(n / 8) uint8 matrix, bit x of row c at `np.unpackbits`'s little order
    (None when ``deadline`` expired first)."""
    width = (n + 7) // 8
    out = np.zeros((len(bits), width), dtype=np.uint8)
    for c, a in enumerate(bits):
        if c % CHECK_EVERY == 0 and deadline.expired():
            return None
        if a:
            out[c] = np.frombuffer(a.to_bytes(width, "little"), dtype=np.uint8)
    return out


def _unpacked(packed: np.ndarray, rows: np.ndarray, n: int) -> np.ndarray:
    """Rows of `_packed` as 0/1 uint8, n columns."""
    return np.unpackbits(packed[rows], axis=1, count=n, bitorder="little")


def _row_products(packed: np.ndarray, rows: np.ndarray, vectors: np.ndarray, deadline: Deadline,
                  ) -> np.ndarray | None:
    """(rows of `_packed`) @ ``vectors`` (n x k), a chunk at a time (None when ``deadline`` expired first)."""
    n = vectors.shape[0]
    out = np.empty((len(rows), vectors.shape[1]))
    step = max(1, CHUNK_CELLS // n)
    for i in range(0, len(rows), step):
        if deadline.expired():
            return None
        out[i:i + step] = _unpacked(packed, rows[i:i + step], n) @ vectors
    return out


def _knapsack_bounds(packed: np.ndarray, rows: np.ndarray, need: np.ndarray, weight: np.ndarray,
                     duration: np.ndarray, deadline: Deadline) -> np.ndarray:
    """Per node cut c in ``rows``, the least of sum_x duration_x y_x subject to its cut alone,
    sum_{x in A(c)} weight_x y_x >= need_c with 0 <= y <= 1: a bound on the whole program's optimum.

    That is the fractional covering knapsack, solved by taking the x in order of least duration per unit
    of weight, the last one in part (Dantzig 1957, "Discrete-variable extremum problems"). NaN for the
    cuts not reached before ``deadline``.
    """
    n = weight.size
    useful = weight > 0
    order = np.argsort(np.where(useful, duration / np.where(useful, weight, 1.0), np.inf), kind="stable")
    w, d = weight[order], np.where(useful, duration, 0.0)[order]
    out = np.full(len(rows), np.nan)
    step = max(1, CHUNK_CELLS // n)
    for s in range(0, len(rows), step):
        if deadline.expired():
            break
        r = rows[s:s + step]
        bits = _unpacked(packed, r, n)[:, order]
        taken_w = np.zeros((len(r), n + 1))  # weight and duration of the first j in order, at column j
        taken_d = np.zeros((len(r), n + 1))
        np.cumsum(bits * w, axis=1, out=taken_w[:, 1:])
        np.cumsum(bits * d, axis=1, out=taken_d[:, 1:])
        whole = (taken_w[:, 1:] < need[r, None]).sum(axis=1)  # x before this position are taken whole
        k = np.arange(len(r))
        last = np.minimum(whole, n - 1)  # the x taken in part (a member of A(c) when whole < n)
        part = np.clip((need[r] - taken_w[k, whole]) / np.where(w[last] > 0, w[last], 1.0), 0.0, 1.0)
        out[s:s + step] = taken_d[k, whole] + np.where(whole < n, d[last] * part, 0.0)
    return out


def _undominated(cuts: list[tuple[float, np.ndarray]]) -> list[tuple[float, np.ndarray]]:
    """The cuts no other cut implies. A cut ``sum_{x in X} mem_x y_x >= need`` follows from another
    over a subset of X that needs as much or more; leaving it out makes the program smaller
    (docs/benchmarks.md, "Figures that used to live in the code")."""
    kept: list[tuple[float, np.ndarray, int]] = []
    for need, xs in sorted(cuts, key=lambda cut: -cut[0]):
        bits = 0
        for x in xs.tolist():
            bits |= 1 << x
        if any(other & ~bits == 0 for _, _, other in kept):  # a kept cut, needing as much, over a subset
            continue
        kept.append((need, xs, bits))
    return [(need, xs) for need, xs, _ in kept]


def _solve_program(graph: Graph, rows: _Rows, fastest: np.ndarray, budget: Number, sizes: list[int],
                   seconds: float, recompute: list[_RecomputeCut] | None = None, prefix_recompute: bool = True,
                   ) -> tuple[float | None, Termination, tuple[str, ...]]:
    """Least recomputation (duration) meeting the cuts in ``rows``, the prefix cuts of ``sizes`` (with
    their recomputation term when ``prefix_recompute``) and the recomputation cuts ``recompute``.

    (extra duration or None when infeasible, why the program stopped (proven when solved), the values
    recomputed when solved).
    """
    from remat_bench.toolkit.milp import SparseModel, solve_milp

    n = graph.n
    num_cols = n
    cost, lo, hi, integer = [fastest], [np.zeros(n)], [np.ones(n)], [np.ones(n, dtype=bool)]
    if sizes:
        block = _PrefixCut(graph, common_edges(graph), prefix_recompute)
        for k in sizes:
            b_lo, b_hi, b_int = block.bounds(k)
            coef = block.add(rows, k, num_cols, 0)
            nz = np.flatnonzero(coef)
            rows.add_row(num_cols + nz, coef[nz], -np.inf, float(budget) - block.fixed)
            cost.append(np.zeros(block.width))
            lo.append(b_lo)
            hi.append(b_hi)
            integer.append(b_int)
            num_cols += block.width
    for cut in recompute or []:
        cut.add(rows, num_cols, float(budget))
        c_lo, c_hi, c_int = cut.bounds()
        cost.append(np.zeros(cut.width))
        lo.append(c_lo)
        hi.append(c_hi)
        integer.append(c_int)
        num_cols += cut.width
    model = SparseModel(
        cost=np.concatenate(cost), lower=np.concatenate(lo), upper=np.concatenate(hi),
        integer=np.concatenate(integer), A=rows.matrix(num_cols), row_lower=np.asarray(rows.lower),
        row_upper=np.asarray(rows.upper),
    )
    sol = solve_milp(model, time_limit=max(0.05, seconds), mip_gap=0.0, options=EXACT)
    if sol.solution_status is SolutionStatus.INFEASIBLE:
        return None, Termination.PROVEN, ()
    if sol.solution_status is SolutionStatus.OPTIMAL and sol.x is not None:
        y = np.round(sol.x[:n]) > 0.5
        return float(fastest[y].sum()), Termination.PROVEN, tuple(graph.ids[i] for i in np.flatnonzero(y))
    # Stopped early: the solver's dual bound is still a valid bound (and not settled: more time may raise it).
    stopped = sol.termination if sol.termination not in (Termination.PROVEN, Termination.CONVERGED) \
        else Termination.UNKNOWN
    return max(0.0, sol.dual_bound or 0.0), stopped, ()
