"""Rotor's machinery, shared by `rotor` and `rotor-offload`: the stage decomposition of a training graph's
forward pass, each stage's sizes from the simulator's model, the dynamic program over the chain of stages, the
schedule read back from its choices, and the search around the budget.

`remat_bench.methods.rotor` states the formulation (Beaumont et al. 2019) and what this implementation adds;
`remat_bench.methods.rotor_offload` extends the DP with offloading.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from remat_bench.core.budget import memory_text
from remat_bench.core.cleanup import place_frees
from remat_bench.core.graph import Graph, Number
from remat_bench.core.schedule import Schedule
from remat_bench.core.simulate import Simulation, simulate
from remat_bench.methods.base import (
    Deadline,
    Method,
    MethodResult,
    Param,
    SolutionStatus,
    Termination,
    search_ended,
)
from remat_bench.toolkit.lowering import LoweringError, check_forward_then_backward

# Quantiles of the crossing bytes whose threshold admits the cuts (1.0: every position), tried in turn.
QUANTILES = (1.0, 0.25, 0.05)
# A decomposition of more stages is also tried thinned to this many: its DP takes a fraction of the time
# (the stages' square), so that a short limit ends with a schedule (docs/benchmarks.md, "rotor with
# Rockmate's options": the unrolled GRU at 0.4 inside auto's 10 s).
COARSE_STAGES = 40
# A span longer than this share of the forward pass is a long skip, pinned in the decompositions that pin.
LONG_SPAN = 0.25
# Schedules simulated per decomposition while tightening (over the budget) or loosening (within it).
TIGHTEN_STEPS = 4
LOOSEN_PROBES = 8


class _OutOfTime(Exception):
    """The deadline passed inside the DP."""


# ---------------------------------------------------------------------- stages


@dataclass(frozen=True)
class Stages:
    """A stage decomposition of a training graph: what rotor's DP and the schedule read of it.

    ``forward[j]`` and ``backward[j]`` are stage j's nodes in file order (pinned forward nodes
    included); ``inputs[j]`` is a_j, the unpinned values of stage j-1 that stage j's forward or backward
    reads; ``saved[j]`` the unpinned values of stage j its backward reads; ``release[v]`` the stage after
    whose backward a pinned value v may go (-1: never, an output); ``stage_of`` every node's stage.
    """

    cuts: tuple[int, ...]  # forward positions after which a stage ends
    forward: tuple[tuple[int, ...], ...]
    backward: tuple[tuple[int, ...], ...]
    inputs: tuple[frozenset[int], ...]
    saved: tuple[frozenset[int], ...]
    pinned: frozenset[int]
    release: dict[int, int]
    stage_of: np.ndarray = field(repr=False)

    @property
    def count(self) -> int:
        """The number of stages K."""
        return len(self.forward)


@functools.lru_cache(maxsize=8)
def _reads(graph: Graph) -> tuple[tuple[int, ...], ...]:
    """What each node reads when computed with its first implementation, the one rotor's schedules use."""
    return tuple(graph.op_inputs[int(graph.op_start[v])] for v in range(graph.n))


@functools.lru_cache(maxsize=8)
def _readers(graph: Graph) -> tuple[tuple[int, ...], ...]:
    """Who reads each node (with its first implementation), in node order."""
    found: list[list[int]] = [[] for _ in range(graph.n)]
    for v, ins in enumerate(_reads(graph)):
        for u in ins:
            found[u].append(v)
    return tuple(map(tuple, found))


def _spans(graph: Graph, position: np.ndarray, pinned: np.ndarray) -> np.ndarray:
    """For each forward position, the furthest forward position its value must reach unchanged: its last
    forward reader, and the latest forward co-input of every backward node reading it (pinned values: none)."""
    reads = _reads(graph)
    read_by = _readers(graph)
    forward = graph.forward_indices
    hi = np.arange(len(forward), dtype=np.int64)
    is_forward = graph.is_forward
    for p, v in enumerate(forward):
        if pinned[v]:
            continue
        for w in read_by[v]:
            if is_forward[w] and position[w] > hi[p]:
                hi[p] = position[w]
    for b in graph.backward_indices:
        ps = [int(position[u]) for u in reads[b] if is_forward[u] and not pinned[u]]
        if len(ps) > 1:
            top = max(ps)
            for q in ps:
                if top > hi[q]:
                    hi[q] = top
    return hi


def _crossing(graph: Graph, hi: np.ndarray, pinned: np.ndarray) -> np.ndarray:
    """Bytes crossing a cut after each forward position: the values at or before it whose span passes it."""
    forward = graph.forward_indices
    n = len(forward)
    mem = np.where(pinned[forward], 0, graph.memory[forward]).astype(np.float64)
    diff = np.zeros(n + 1)
    np.add.at(diff, np.arange(n), mem)
    np.add.at(diff, hi, -mem)
    return np.cumsum(diff)[:n]


def choose_cuts(hi: np.ndarray, weight: np.ndarray, allowed: np.ndarray) -> list[int]:
    """The most cuts among the ``allowed`` positions such that no span crosses two; the lightest among those.

    A cut after position c is crossed by the spans that start at or before c and end after it; the next cut
    c' must then come at or after the furthest of their ends, ``reach(c)`` (the running maximum of the
    spans' ends), so that each span crosses at most one cut. ``reach`` is nondecreasing, so the cuts that
    may precede c' form a prefix of the allowed ones, and a linear DP finds the best chain.

    Parameters
    ----------
    hi : np.ndarray
        Each forward position's span end (`_spans`).
    weight : np.ndarray
        The bytes crossing a cut after each position (`_crossing`).
    allowed : np.ndarray
        Which positions may take a cut (booleans); the last position never does.

    Returns
    -------
    list of int
        The cut positions, increasing.
    """
    n = len(hi)
    reach = np.maximum.accumulate(hi)
    positions = [int(p) for p in np.flatnonzero(allowed[: n - 1])]
    if not positions:
        return []
    # score[i] = (cuts, -bytes) of the best chain ending with positions[i].
    score: list[tuple[int, float]] = []
    back: list[int] = []
    best_prefix: tuple[int, float] = (0, 0.0)
    best_prefix_at = -1
    j = 0
    for i, c in enumerate(positions):
        while j < i and max(positions[j] + 1, int(reach[positions[j]])) <= c:
            if score[j] > best_prefix:
                best_prefix, best_prefix_at = score[j], j
            j += 1
        score.append((best_prefix[0] + 1, best_prefix[1] - float(weight[c])))
        back.append(best_prefix_at)
    i = max(range(len(positions)), key=lambda k: score[k])
    cuts = []
    while i >= 0:
        cuts.append(positions[i])
        i = back[i]
    return cuts[::-1]


def thin_cuts(cuts: list[int], durations: np.ndarray, stages: int) -> list[int]:
    """At most ``stages - 1`` of ``cuts``, spread evenly over the forward duration.

    Parameters
    ----------
    cuts : list of int
        Cut positions, increasing.
    durations : np.ndarray
        Each forward position's duration.
    stages : int
        The most stages wanted.

    Returns
    -------
    list of int
        A subset of ``cuts``, increasing: for each of ``stages - 1`` even shares of the total duration, the
        cut whose running duration is nearest.
    """
    if len(cuts) < stages:
        return cuts
    running = np.cumsum(durations, dtype=np.float64)
    at = running[cuts]
    total = float(running[-1]) or 1.0
    chosen = {int(np.argmin(np.abs(at - total * k / stages))) for k in range(1, stages)}
    return [cuts[i] for i in sorted(chosen)]


def build_stages(graph: Graph, cuts: Sequence[int], pinned_first: Iterable[int] = ()) -> Stages:
    """The stages cut after the forward positions ``cuts``, with their backward nodes and pinned values.

    Backward nodes go to the latest stage among their unpinned forward inputs, or to the earliest among
    their backward inputs when that is earlier; backward nodes that read neither go to the latest stage
    among their readers (the last stage when none). A forward value read by a stage other than its own and
    the next is pinned, which may move backward nodes; this repeats until no value is.

    Parameters
    ----------
    graph : Graph
        A training graph whose forward nodes read forward values only.
    cuts : sequence of int
        Forward positions after which a stage ends, increasing.
    pinned_first : iterable of int
        Forward nodes pinned from the start (long skips); forward outputs always are.

    Returns
    -------
    Stages
    """
    read_by = _readers(graph)
    forward = graph.forward_indices
    n_fwd = len(forward)
    ends = [*cuts, n_fwd - 1]
    K = len(ends)
    stage_of = np.full(graph.n, -1, dtype=np.int64)
    start = 0
    for j, end in enumerate(ends):
        stage_of[forward[start:end + 1]] = j
        start = end + 1
    pinned = np.zeros(graph.n, dtype=bool)
    pinned[list(pinned_first)] = True
    pinned[[v for v in graph.output_indices if graph.is_forward[v]]] = True
    while True:
        stage = _backward_stages(graph, stage_of, pinned, K)
        far = [v for v in forward if not pinned[v] and any(
            not (stage[v] <= stage[w] <= stage[v] + 1) for w in read_by[v])]
        if not far:
            break
        pinned[far] = True
    return _stage_sets(graph, stage, pinned, tuple(cuts), K)


def _backward_stages(graph: Graph, forward_stage: np.ndarray, pinned: np.ndarray, K: int) -> np.ndarray:
    """Every node's stage: forward nodes' as cut, backward nodes' by their inputs (see `build_stages`)."""
    reads = _reads(graph)
    read_by = _readers(graph)
    stage = forward_stage.copy()
    is_forward = graph.is_forward
    loose = []
    for b in graph.backward_indices:
        latest, earliest = -1, K
        for u in reads[b]:
            if is_forward[u]:
                if not pinned[u]:
                    latest = max(latest, int(stage[u]))
            elif stage[u] >= 0:
                earliest = min(earliest, int(stage[u]))
        if latest < 0 and earliest == K:
            loose.append(b)  # reads only pinned values or nothing: it goes where its readers are
        else:
            stage[b] = min(latest if latest >= 0 else K, earliest)
    for b in reversed(loose):  # readers come later in file order: theirs are set
        readers = [int(stage[c]) for c in read_by[b]]
        stage[b] = max(readers) if readers else K - 1
    return stage


def _stage_sets(graph: Graph, stage: np.ndarray, pinned: np.ndarray, cuts: tuple[int, ...], K: int) -> Stages:
    """The stages' node lists, inputs a_j, saved values and pinned releases, from every node's stage."""
    read_by = _readers(graph)
    forward_of: list[list[int]] = [[] for _ in range(K)]
    backward_of: list[list[int]] = [[] for _ in range(K)]
    for v in range(graph.n):
        (forward_of if graph.is_forward[v] else backward_of)[int(stage[v])].append(v)
    inputs: list[set[int]] = [set() for _ in range(K)]
    saved: list[set[int]] = [set() for _ in range(K)]
    release: dict[int, int] = {}
    outputs = set(graph.output_indices)
    for v in graph.forward_indices:
        s = int(stage[v])
        readers = [int(stage[w]) for w in read_by[v]]
        if pinned[v]:
            release[v] = -1 if v in outputs else min(readers, default=s)
            continue
        for w, r in zip(read_by[v], readers):
            if r == s + 1:
                inputs[r].add(v)
            elif not graph.is_forward[w]:
                saved[s].add(v)
    return Stages(cuts, tuple(map(tuple, forward_of)), tuple(map(tuple, backward_of)),
                  tuple(map(frozenset, inputs)), tuple(map(frozenset, saved)),
                  frozenset(np.flatnonzero(pinned).tolist()), release, stage)


def decompositions(graph: Graph, max_stages: int) -> list[Stages]:
    """The stage decompositions rotor tries on ``graph``, the finest first, without repeats.

    For each quantile in `QUANTILES`, the positions whose crossing bytes are at most that quantile take
    cuts (`choose_cuts`); on a graph with spans longer than `LONG_SPAN` of the forward pass, the same again
    with those values pinned. More than ``max_stages`` stages are thinned (`thin_cuts`); more than
    `COARSE_STAGES` are also tried thinned to that many.

    Parameters
    ----------
    graph : Graph
        A training graph whose forward nodes read forward values only.
    max_stages : int
        The most stages a decomposition keeps.

    Returns
    -------
    list of Stages
        At least one; a graph whose spans allow no cut gives a single stage.
    """
    return list(_decompositions(graph, max_stages)) if graph.forward_indices else []


@functools.lru_cache(maxsize=8)
def _decompositions(graph: Graph, max_stages: int) -> tuple[Stages, ...]:
    forward = graph.forward_indices
    position = np.full(graph.n, -1, dtype=np.int64)
    position[forward] = np.arange(len(forward))
    durations = graph.duration[forward]
    pin_modes: list[np.ndarray] = [np.zeros(graph.n, dtype=bool)]
    hi = _spans(graph, position, pin_modes[0])
    long = np.flatnonzero(hi - np.arange(len(forward)) > LONG_SPAN * len(forward))
    if len(long):
        pins = np.zeros(graph.n, dtype=bool)
        pins[[forward[p] for p in long]] = True
        pin_modes.append(pins)
    found: dict[tuple[tuple[int, ...], tuple[int, ...]], Stages] = {}
    for pins in pin_modes:
        hi = _spans(graph, position, pins)
        weight = _crossing(graph, hi, pins)
        inner = weight[:-1] if len(weight) > 1 else weight
        for q in QUANTILES:
            allowed = weight <= np.quantile(inner, q)
            cuts = thin_cuts(choose_cuts(hi, weight, allowed), durations, max_stages)
            first = tuple(np.flatnonzero(pins).tolist())
            for chosen in (cuts, thin_cuts(cuts, durations, COARSE_STAGES)):
                key = (tuple(chosen), first)
                if key not in found:
                    found[key] = build_stages(graph, chosen, first)
    return tuple(found.values())


# ---------------------------------------------------------------------- the stages' sizes


@dataclass
class StageModel:
    """What rotor's DP reads of each stage, in the graph's units (durations and bytes).

    Arrays indexed [j] (stage) or [f][j], f = 1 for a stage's first forward (the first pass, which also
    computes its pinned values), 0 for a recomputation. ``a[j]``: bytes of a_j; ``extra[j]``: bytes stage j
    keeps for its backward beyond a_{j+1}; ``pin[t]``: pinned bytes alive in a subproblem ending at t;
    ``grads[t]``: backward values alive when B_t starts; ``tail[t]``: bytes of a_{t+1} that B_t reads
    (held through a subproblem ending at t when it keeps them). Peaks (``keep``, ``drop``: a sweep's
    stage keeping or dropping its input; ``all``: keeping its activations and a_{j+1}; ``leaf``: keeping
    its activations only; ``tail``: the same with the tail resident; ``back``: B_j) include a_j; the
    forward ones leave out the pinned and gradient bytes, which the DP adds. ``nodes`` holds the
    computations of each mode (``sweep`` for keep and drop), in file order. ``options[j]``: F_all's other
    choices for stage j (`KeepOption`), each keeping fewer of its activations; empty for rotor's own.
    """

    K: int
    a: np.ndarray
    extra: np.ndarray
    pin: np.ndarray
    grads: np.ndarray
    tail: np.ndarray
    back: np.ndarray
    u_back: np.ndarray
    peak: dict[str, np.ndarray]  # mode -> [f][j]
    cost: dict[str, np.ndarray]  # mode -> [f][j]
    nodes: dict[str, list[list[tuple[int, ...]]]]  # mode -> [f][j]
    backward: tuple[tuple[int, ...], ...]
    options: tuple[tuple[KeepOption, ...], ...]


@dataclass(frozen=True)
class KeepOption:
    """F_all for one stage j keeping all its saved values but ``dropped``, which run again just before B_j.

    A dropped value that a_{j+1} does not need is not computed in the forward at all (it may be read only
    by the backward: autograd's copies of a gate); one that it needs is freed after its last forward reader.
    ``extra``: bytes kept beyond a_{j+1}; ``cost`` and ``peak`` [f]: the forward's duration and peak (as
    mode ``all``'s, a_j included); ``nodes`` [f] its computations; ``again``: the computations before B_j,
    from a_j and the values kept; ``u_back`` and ``back``: those with B_j, their duration and peak.
    """

    dropped: frozenset[int]
    extra: float
    cost: tuple[float, float]
    peak: tuple[float, float]
    nodes: tuple[tuple[int, ...], tuple[int, ...]]
    again: tuple[int, ...]
    u_back: float
    back: float


def _closure(graph: Graph, stages: Stages, j: int, targets: Iterable[int], first: bool,
             resident: frozenset[int] = frozenset()) -> tuple[int, ...]:
    """Stage j's forward nodes computed to make ``targets``: their ancestors within the stage, stopping at
    ``resident`` values and at pinned ones, except in the first pass, which computes pinned values."""
    reads = _reads(graph)
    pinned, stage = stages.pinned | resident if not first else resident, stages.stage_of
    seen: set[int] = set()
    stack = [v for v in targets if stage[v] == j and v not in pinned]
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        stack.extend(u for u in reads[v]
                     if graph.is_forward[u] and stage[u] == j and u not in seen and u not in pinned)
    return tuple(sorted(seen))


def segment_peak(graph: Graph, nodes: Sequence[int], initial: Iterable[int], freeable: Iterable[int],
                 keep: Iterable[int], ignore: frozenset[int]) -> float:
    """Peak memory of computing ``nodes`` in order from ``initial``, every value freed after its last reader.

    Parameters
    ----------
    graph : Graph
    nodes : sequence of int
        The computations, in order.
    initial : iterable of int
        Values resident at the start.
    freeable : iterable of int
        Those of ``initial`` freed after their last reader here (at once when none reads them); the rest stay.
    keep : iterable of int
        Values computed here that stay resident at the end.
    ignore : frozenset of int
        Values whose bytes are counted elsewhere (pinned): their workspace counts, their memory does not.

    Returns
    -------
    float
        The largest step memory (resident bytes, plus the computed value and its workspace), without the
        fixed memory; 0 when ``nodes`` is empty (no compute step, nothing to check).
    """
    reads = _reads(graph)
    if not nodes:
        return 0.0
    mem, ws = graph.memory, graph.workspace
    last: dict[int, int] = {}
    for i, v in enumerate(nodes):
        for u in reads[v]:
            last[u] = i
    keep_set, free_set = set(keep), set(freeable)
    resident = sum(float(mem[u]) for u in initial if u not in ignore)
    resident -= sum(float(mem[u]) for u in free_set if u not in last and u not in ignore)
    mine: set[int] = set()
    peak = 0.0
    for i, v in enumerate(nodes):
        own = 0.0 if v in ignore else float(mem[v])
        peak = max(peak, resident + own + float(ws[v]))
        resident += own
        mine.add(v)
        for u in reads[v]:
            if last[u] == i and u not in ignore and (u in free_set or (u in mine and u not in keep_set)):
                resident -= float(mem[u])
        if v not in last and v not in keep_set:
            resident -= own
    return peak


def stage_model(graph: Graph, stages: Stages, max_options: int = 0) -> StageModel:
    """Each stage's sizes and durations for the DP (`StageModel`), from the simulator's memory model.

    Parameters
    ----------
    graph : Graph
    stages : Stages
    max_options : int
        The most `KeepOption` choices per stage beside rotor's own (`keep_options`); 0: none.

    Returns
    -------
    StageModel
    """
    read_by = _readers(graph)
    K = stages.count
    mem, dur = graph.memory, graph.duration
    pinned = stages.pinned
    ins = [*stages.inputs, frozenset()]  # a_K: nothing
    outputs = set(graph.output_indices)

    def size(values: Iterable[int]) -> float:
        return float(sum(float(mem[v]) for v in values))

    a = np.array([size(ins[j]) for j in range(K)])
    extra = np.array([size(stages.saved[j] - ins[j + 1]) for j in range(K)])
    pin = np.zeros(K)
    for v, r in stages.release.items():
        pin[max(r, 0):] += float(mem[v])
    # Backward values alive once B_j has run, D(j): computed at stage >= j, read before stage j or an output.
    stage = stages.stage_of
    alive: list[set[int]] = [set() for _ in range(K + 1)]
    for v in graph.backward_indices:
        lowest = -1 if v in outputs else min((int(stage[c]) for c in read_by[v]), default=int(stage[v]))
        for j in range(lowest + 1, int(stage[v]) + 1):
            alive[j].add(v)
    grads = np.array([size(alive[t + 1]) for t in range(K)])

    first_extra = [
        [v for v in stages.forward[j] if v in pinned or (not read_by[v] and v not in outputs)]
        for j in range(K)
    ]
    tails = [stages.saved[j] & ins[j + 1] for j in range(K)]
    targets = {
        "sweep": lambda j: ins[j + 1],
        "all": lambda j: ins[j + 1] | stages.saved[j],
        "leaf": lambda j: stages.saved[j],
        "tail": lambda j: stages.saved[j] - tails[j],
    }
    peak: dict[str, np.ndarray] = {mode: np.zeros((2, K)) for mode in ("keep", "drop", "all", "leaf", "tail")}
    cost: dict[str, np.ndarray] = {mode: np.zeros((2, K)) for mode in targets}
    nodes: dict[str, list[list[tuple[int, ...]]]] = {mode: [[], []] for mode in targets}
    for f in (0, 1):
        for j in range(K):
            for mode, target in targets.items():
                wanted = set(target(j)) | (set(first_extra[j]) if f else set())
                resident = tails[j] if mode == "tail" else frozenset()
                computed = _closure(graph, stages, j, wanted, bool(f), resident)
                nodes[mode][f].append(computed)
                cost[mode][f, j] = float(sum(float(dur[v]) for v in computed))
                if mode == "sweep":
                    peak["keep"][f, j] = segment_peak(graph, computed, ins[j], (), target(j), pinned)
                    peak["drop"][f, j] = segment_peak(graph, computed, ins[j], ins[j], target(j), pinned)
                elif mode == "tail":  # the tail is resident from the start and stays for B_j
                    peak[mode][f, j] = segment_peak(graph, computed, ins[j] | resident, (), stages.saved[j], pinned)
                else:
                    peak[mode][f, j] = segment_peak(graph, computed, ins[j], (), target(j), pinned)
    back = np.zeros(K)
    u_back = np.zeros(K)
    for j in range(K):
        held = alive[j + 1]
        gone = [v for v in held if v not in alive[j]]
        back[j] = segment_peak(graph, stages.backward[j], [*ins[j], *stages.saved[j], *held],
                               [*stages.saved[j], *gone], alive[j], pinned)
        u_back[j] = float(sum(float(dur[v]) for v in stages.backward[j]))
    tail = np.array([size(tails[j]) for j in range(K)])
    options = tuple(
        keep_options(graph, stages, j, first_extra[j], alive[j + 1], alive[j], max_options) if max_options else ()
        for j in range(K))
    return StageModel(K, a, extra, pin, grads, tail, back, u_back, peak, cost, nodes, stages.backward, options)


# A prefix of the ranked values ends a tier of options when the next one costs this much more per byte.
TIER_STEP = 1.5


def keep_options(graph: Graph, stages: Stages, j: int, first_extra: Sequence[int], held: Iterable[int],
                 after: Iterable[int], most: int) -> tuple[KeepOption, ...]:
    """At most ``most`` ways for stage j's F_all to keep fewer of its activations, the cheaper per byte first.

    Rockmate (Zhao et al. 2023) gives each block of a chain several such options, solved apart by
    Checkmate; here they come from a ranking, which needs no solver: each value of abar_j (saved for B_j,
    not part of a_{j+1}, not pinned) is scored alone by what dropping it costs (the forward no longer
    computing it where a_{j+1} does not need it, B_j computing it again from a_j and the values kept) per
    byte; the prefixes of that ranking are scored together, those no cheaper than a shorter one are left
    out, and a prefix is an option where the next value costs `TIER_STEP` times more per byte (the end of
    a tier: the copies a recurrent cell's autograd saves, then the gates that need a matrix product again).
    The least and most dropped are kept when there are more tiers than ``most``.

    Parameters
    ----------
    graph : Graph
    stages : Stages
    j : int
        The stage.
    first_extra : sequence of int
        What the first pass computes beside the targets (pinned values, values nothing reads).
    held : iterable of int
        Backward values alive when B_j starts.
    after : iterable of int
        Backward values alive once B_j has run.
    most : int

    Returns
    -------
    tuple of KeepOption
        In increasing memory saved.
    """
    mem, dur = graph.memory, graph.duration
    ins_j = stages.inputs[j]
    ins_next = stages.inputs[j + 1] if j + 1 < stages.count else frozenset()
    saved = stages.saved[j]
    candidates = sorted(v for v in saved - ins_next if v not in stages.pinned and mem[v] > 0)
    if not candidates:
        return ()

    def duration(nodes: Iterable[int]) -> float:
        return float(sum(float(dur[v]) for v in nodes))

    @functools.cache  # each set is closed once: the ranking, the prefixes and the options ask again
    def forward(dropped: frozenset[int], first: bool) -> tuple[int, ...]:
        wanted = set(ins_next | (saved - dropped)) | (set(first_extra) if first else set())
        return _closure(graph, stages, j, wanted, first)

    @functools.cache
    def again(dropped: frozenset[int]) -> tuple[int, ...]:
        return _closure(graph, stages, j, dropped, False, saved - dropped)

    def extra_cost(dropped: frozenset[int]) -> float:
        return duration(forward(dropped, False)) + duration(again(dropped)) - whole

    whole = duration(forward(frozenset(), False))
    ranked = sorted(candidates, key=lambda v: (extra_cost(frozenset((v,))) / float(mem[v]), -float(mem[v]), v))
    prefixes: list[tuple[float, float, frozenset[int]]] = []  # (bytes saved, extra cost, dropped)
    for i in range(1, len(ranked) + 1):
        dropped = frozenset(ranked[:i])
        saving, cost = float(sum(float(mem[v]) for v in dropped)), extra_cost(dropped)
        while prefixes and prefixes[-1][1] >= cost:
            prefixes.pop()  # a shorter prefix no cheaper than this one
        prefixes.append((saving, cost, dropped))
    rate = [(c - (prefixes[i - 1][1] if i else 0.0)) / max(m - (prefixes[i - 1][0] if i else 0.0), 1e-12)
            for i, (m, c, _) in enumerate(prefixes)]
    ends = [i for i in range(len(prefixes))
            if i == len(prefixes) - 1 or rate[i + 1] > TIER_STEP * max(rate[i], 1e-12)]
    if len(ends) > most:
        ends = sorted({ends[round(k * (len(ends) - 1) / max(most - 1, 1))] for k in range(most)})
    held, after = list(held), list(after)
    alive_after = set(after)
    gone = [v for v in held if v not in alive_after]
    found = []
    for i in ends:
        dropped = prefixes[i][2]
        kept = saved - dropped
        nodes = (forward(dropped, False), forward(dropped, True))
        redo = again(dropped)
        peaks = tuple(segment_peak(graph, computed, ins_j, (), ins_next | kept, stages.pinned) for computed in nodes)
        back = segment_peak(graph, [*redo, *stages.backward[j]], [*ins_j, *kept, *held], [*saved, *gone], after,
                            stages.pinned)
        found.append(KeepOption(dropped, float(sum(float(mem[v]) for v in kept - ins_next)),
                                (duration(nodes[0]), duration(nodes[1])), (peaks[0], peaks[1]), nodes, redo,
                                duration(redo) + duration(stages.backward[j]), back))
    return tuple(found)


# ---------------------------------------------------------------------- the DP


def _slots(x: np.ndarray, slot: float) -> np.ndarray:
    """Sizes in whole slots, rounded up (a hair of float error aside: the simulator checks the result)."""
    return np.ceil(np.asarray(x, dtype=np.float64) / slot - 1e-7).astype(np.int64)


@dataclass(frozen=True)
class KeepChoice:
    """One of F_all's choices for a stage, in the DP's terms: rotor's own (keep every activation) or a
    `KeepOption`. Sizes in slots (``back`` with the pinned bytes alive), ``peak`` and ``cost`` per pass [f];
    ``cost`` is the forward's and the backward's together."""

    extra: int
    peak: tuple[int, int]
    cost: tuple[float, float]
    back: int


def keep_choices(model: StageModel, slot: float, s: int) -> list[KeepChoice]:
    """F_all's choices for stage s: rotor's own first (choice 0), then the stage's options (choice o = 1, 2, ...).

    Parameters
    ----------
    model : StageModel
    slot : float
        Bytes per slot.
    s : int
        The stage.

    Returns
    -------
    list of KeepChoice
    """
    def slots(x: float) -> int:
        return int(_slots(np.array([x]), slot)[0])

    pin = slots(model.pin[s])
    own = KeepChoice(slots(model.extra[s]), (slots(model.peak["all"][0, s]), slots(model.peak["all"][1, s])),
                     (model.cost["all"][0, s] + model.u_back[s], model.cost["all"][1, s] + model.u_back[s]),
                     pin + slots(model.back[s]))
    return [own, *(KeepChoice(slots(o.extra), (slots(o.peak[0]), slots(o.peak[1])),
                              (o.cost[0] + o.u_back, o.cost[1] + o.u_back), pin + slots(o.back))
                   for o in model.options[s])]


class Chooser:
    """The least duration at each memory over the choices offered, and the code of the first that reaches it."""

    def __init__(self, width: int) -> None:
        self.best = np.full(width, np.inf)
        self.code = np.full(width, -1, dtype=np.int64)

    def take(self, low: int, value: np.ndarray, code: int) -> None:
        """One choice's durations at memories ``low..``, taken where strictly better.

        Parameters
        ----------
        low : int
            The least memory (slots) at which the choice fits.
        value : np.ndarray
            Its duration at each memory from ``low`` up.
        code : int
            Its code in the table's choices.
        """
        better = value < self.best[low:]
        self.best[low:] = np.where(better, value, self.best[low:])
        self.code[low:] = np.where(better, code, self.code[low:])

    def take_best(self, values: np.ndarray, codes: np.ndarray) -> None:
        """The best of several choices (the first on ties), taken where strictly better.

        Parameters
        ----------
        values : np.ndarray
            [choice, memory]: each choice's duration at every memory (inf where it does not fit).
        codes : np.ndarray
            [choice, memory]: their codes.
        """
        pick = np.argmin(values, axis=0)
        at = np.arange(values.shape[1])
        value = values[pick, at]
        better = value < self.best
        self.best = np.where(better, value, self.best)
        self.code = np.where(better, codes[pick, at], self.code)


def kept_extra(model: StageModel, table: Table, s: int, o: int) -> int:
    """The slots stage s keeps beyond a_{s+1} under F_all's choice o (0: rotor's own), as the table counted them.

    Parameters
    ----------
    model : StageModel
    table : Table
    s : int
        The stage.
    o : int
        The choice (`keep_choices`).

    Returns
    -------
    int
    """
    return int(table.extra[s]) if o == 0 else int(_slots(np.array([model.options[s][o - 1].extra]), table.slot)[0])


@dataclass
class Table:
    """The DP's table over (s, t, m) for one stage model and slot size, and its choices."""

    cost: np.ndarray  # [s, t, m]: least duration, inf where nothing fits
    choice: np.ndarray  # [s, t, m]: -1 - o F_all with option o (0: rotor's; the leaf when s == t), s' > s: F_ck
    slot: float
    a: np.ndarray  # a_j in slots
    extra: np.ndarray  # extra_j in slots


def rotor_table(model: StageModel, slot: float, top: int, deadline: Deadline | None = None) -> Table:
    """Rotor's dynamic program over every subchain s..t, both tails, and every memory 0..``top`` slots.

    ``C(s, t, m)`` (module docstring) with the memory checks of the stage model: inside a subproblem
    ending at t, every forward step adds the pinned and gradient bytes alive there (``pin[t]``,
    ``grads[t]``) to its peak, every backward B_j the pinned bytes alive (``pin[j]``); the first pass
    (t = K - 1) uses the first forward of each stage. After F_ck has solved s'..t, the values of a_{s'}
    that B_{s'-1} reads are still resident: the subproblem s..s'-1 may keep them (tail 1: held
    through its forward steps, not recomputed by its last stage) or let them go (tail 0); the DP
    takes the better. Each (s, t, tail) is one vector operation over m and s'.

    Parameters
    ----------
    model : StageModel
    slot : float
        Bytes per slot.
    top : int
        The largest memory, in slots, the table covers.
    deadline : Deadline or None
        Polled once per t.

    Returns
    -------
    Table

    Raises
    ------
    _OutOfTime
        The deadline passed.
    """
    K = model.K
    a, extra = _slots(model.a, slot), _slots(model.extra, slot)
    outer = _slots(model.pin + model.grads, slot)  # alive during the forward steps of a subproblem ending at t
    tail = _slots(model.tail, slot)
    back = _slots(model.pin, slot) + _slots(model.back, slot)
    peak = {mode: _slots(p, slot) for mode, p in model.peak.items()}
    keep, drop = peak["keep"], peak["drop"]
    cost = model.cost
    keeps = [keep_choices(model, slot, s) for s in range(K)]
    width = top + 1
    m = np.arange(width)
    C = np.full((2, K, K, width), np.inf)
    choice = np.full((2, K, K, width), -1, dtype=np.int16 if 2 * K < 2**15 else np.int32)
    for t in range(K):
        if deadline is not None and deadline.expired():
            raise _OutOfTime
        f = int(t == K - 1)
        for x, mode in ((0, "leaf"), (1, "tail")):
            need = max(outer[t] + peak[mode][f, t], back[t])
            if need <= top:
                C[x, t, t, need:] = cost[mode][f, t] + model.u_back[t]
        for s in range(t - 1, -1, -1):
            n = t - s
            # What follows a sweep s..s'-1 and s'..t: s..s'-1 again, keeping the tail or not.
            behind = np.minimum(C[0, s, s:t], C[1, s, s:t])
            kept = C[1, s, s:t] < C[0, s, s:t]
            sweep = np.cumsum(cost["sweep"][f, s:t])[:, None]
            for x in (0, 1):
                held = outer[t] + x * tail[t]
                choose = Chooser(width)
                # F_all: stage s keeping its activations (or those of one of its options), then s+1..t, then
                # B_s (after computing again what the option dropped). Code -1 - o for option o.
                for o, keep_s in enumerate(keeps[s]):
                    shift = int(a[s]) + keep_s.extra
                    low = max(int(max(held + keep_s.peak[f], keep_s.back)), shift)
                    if low <= top:
                        choose.take(low, C[x, s + 1, t, low - shift:width - shift] + keep_s.cost[f], -1 - o)
                # F_ck: stages s..s'-1 keeping a_{s'}, then s'..t with it held, then s..s'-1 from a_s. The
                # sweep's first stage keeps its input a_s; the next ones drop theirs as they go.
                ahead = np.full((n, width), np.inf)
                shift = int(a[s])
                if shift <= top:
                    ahead[:, shift:] = C[x, s + 1:t + 1, t, :width - shift]
                total = ahead + behind + sweep
                need_ck = np.full(n, held + keep[f, s])
                if n > 1:
                    need_ck[1:] = np.maximum(need_ck[1:], held + a[s] + np.maximum.accumulate(drop[f, s + 1:t]))
                total[m[None, :] < need_ck[:, None]] = np.inf
                choose.take_best(total, s + 1 + np.arange(n)[:, None] + K * kept)
                C[x, s, t] = choose.best
                choice[x, s, t] = choose.code
    return Table(C, choice, slot, a, extra)


def emit(model: StageModel, table: Table, memory: int) -> list[int]:
    """The computations of the DP's schedule at ``memory`` slots, in order (frees are placed afterwards).

    Parameters
    ----------
    model : StageModel
    table : Table
    memory : int
        The top-level memory in slots; ``table.cost[0, 0, K-1, memory]`` must be finite.

    Returns
    -------
    list of int
        Node indices.
    """
    K = model.K
    out: list[int] = []
    # Items: (tail, s, t, m) a subproblem; (-1, j, o, 0) the backward of stage j after F_all's choice o.
    stack: list[tuple[int, int, int, int]] = [(0, 0, K - 1, memory)]
    while stack:
        x, s, t, mem = stack.pop()
        if x < 0:
            if t:
                out.extend(model.options[s][t - 1].again)
            out.extend(model.backward[s])
            continue
        f = int(t == K - 1)
        if s == t:
            out.extend(model.nodes["tail" if x else "leaf"][f][t])
            out.extend(model.backward[t])
            continue
        c = int(table.choice[x, s, t, mem])
        if c < 0:
            o = -1 - c
            out.extend(model.options[s][o - 1].nodes[f] if o else model.nodes["all"][f][s])
            stack.append((-1, s, o, 0))
            stack.append((x, s + 1, t, mem - int(table.a[s]) - kept_extra(model, table, s, o)))
        else:
            y, c = divmod(c, K)
            for j in range(s, c):
                out.extend(model.nodes["sweep"][f][j])
            stack.append((y, s, c - 1, mem))
            stack.append((x, c, t, mem - int(table.a[s])))
    return out


# ---------------------------------------------------------------------- the search


@dataclass
class Found:
    """One schedule of the DP, simulated."""

    schedule: Schedule
    simulation: Simulation
    model_duration: float  # the DP's own duration for it
    memory: float  # the DP's top-level memory, in bytes above the fixed memory
    stages: Stages


def lower(graph: Graph, model: StageModel, table: Table, memory: int) -> tuple[Schedule, Simulation]:
    """The DP's schedule at ``memory`` slots, its frees placed by `place_frees`, and its simulation.

    Parameters
    ----------
    graph : Graph
    model : StageModel
    table : Table
    memory : int
        Slots; the table's duration there must be finite.

    Returns
    -------
    tuple of (Schedule, Simulation)
    """
    order = np.asarray(emit(model, table, memory), dtype=np.int64)
    schedule = place_frees(graph, order, np.zeros(len(order), dtype=np.int64))
    return schedule, simulate(graph, schedule)


def _slot_size(graph: Graph, capacity: float, slots: int) -> float:
    """Bytes per slot: one unit where every size is whole and the capacity has at most ``slots`` units
    (the DP is then exact on the graph itself), else the capacity over ``slots``."""
    whole = graph.memory.dtype.kind == "i" and graph.workspace.dtype.kind == "i"
    return 1.0 if (whole and capacity <= slots) or capacity <= 0 else capacity / slots


class _Search:
    """Rotor over the decompositions of one graph, at one budget, within one deadline.

    `model`, `build` and `lower` are what a variant of the DP (rotor-offload) replaces.
    """

    def __init__(self, graph: Graph, budget: Number | None, slots: int, deadline: Deadline,
                 report: Callable[[Schedule], Any], options: int = 0) -> None:
        self.graph, self.budget, self.slots, self.deadline, self.report = graph, budget, slots, deadline, report
        self.options = options
        self.best: Found | None = None
        self.least_peak: Number | None = None  # over every schedule simulated, for the message
        self.simulated = 0
        self.tables = 0
        self.dp_s = 0.0

    def better(self, found: Found) -> bool:
        sim, best = found.simulation, self.best
        if self.budget is None:
            return best is None or (sim.peak, sim.duration) < (best.simulation.peak, best.simulation.duration)
        if sim.peak > self.budget:
            return False
        return best is None or (sim.duration, sim.peak) < (best.simulation.duration, best.simulation.peak)

    def table(self, model: StageModel, slot: float, top: int) -> Table:
        started = time.perf_counter()
        try:
            return self.build(model, slot, top)
        finally:
            self.tables += 1
            self.dp_s += time.perf_counter() - started

    def model(self, stages: Stages) -> StageModel:
        return stage_model(self.graph, stages, self.options)

    def build(self, model: StageModel, slot: float, top: int) -> Table:
        return rotor_table(model, slot, top, self.deadline)

    def lower(self, model: StageModel, table: Table, memory: int) -> tuple[Schedule, Simulation]:
        return lower(self.graph, model, table, memory)

    def attempt(self, stages: Stages, model: StageModel, table: Table, memory: int) -> Found:
        schedule, simulation = self.lower(model, table, memory)
        self.simulated += 1
        peak = simulation.peak
        self.least_peak = peak if self.least_peak is None else min(self.least_peak, peak)
        found = Found(schedule, simulation, float(table.cost[0, 0, model.K - 1, memory]), memory * table.slot, stages)
        if self.better(found):
            self.best = found
            self.report(schedule)
        return found

    def run(self, stages: Stages) -> None:
        """Solve one decomposition: at the budget, tightened or loosened (`Rotor`), or at its least memory."""
        model = self.model(stages)
        if self.budget is None:
            self.run_min(stages, model)
        else:
            self.run_budget(stages, model, self.budget)

    def run_budget(self, stages: Stages, model: StageModel, budget: Number) -> None:
        capacity = float(budget) - float(self.graph.fixed_memory)
        if capacity < 0:
            return
        slot = _slot_size(self.graph, capacity, self.slots)
        M = math.floor(capacity / slot + 1e-9)
        top = M + max(1, M // 8)  # headroom above the budget: the stage model is conservative
        table = self.table(model, slot, top)
        f = table.cost[0, 0, model.K - 1]
        # Tighten: at the budget, then lower by the excess measured, while over it.
        memory = M
        for _ in range(TIGHTEN_STEPS):
            if memory < 0 or not np.isfinite(f[memory]):
                break
            found = self.attempt(stages, model, table, memory)
            if found.simulation.peak <= budget or self.deadline.expired():
                break
            memory -= max(1, math.ceil((found.simulation.peak - budget) / slot))
        # Loosen: the memories above the budget where the DP's duration drops, while they still fit.
        finite = np.isfinite(f)
        drops = [m for m in range(M + 1, top + 1) if finite[m] and (not finite[m - 1] or f[m] < f[m - 1])]
        misses = 0
        for m in drops[:LOOSEN_PROBES]:
            if misses >= 2 or self.deadline.expired():
                break
            found = self.attempt(stages, model, table, m)
            misses = 0 if found.simulation.peak <= budget else misses + 1

    def run_min(self, stages: Stages, model: StageModel) -> None:
        # Every check of the model adds up distinct values and one workspace: a table up to every byte plus
        # the largest workspace (and a slot per term for the rounding) finds the least memory, and a second
        # one, with slots that fine over it, refines it.
        capacity = float(np.sum(self.graph.memory, dtype=np.float64)) + float(np.max(self.graph.workspace))
        for _ in range(2):
            slot = _slot_size(self.graph, capacity, self.slots)
            top = math.ceil(capacity / slot) + 4 * model.K + 4
            table = self.table(model, slot, top)
            finite = np.flatnonzero(np.isfinite(table.cost[0, 0, model.K - 1]))
            if not len(finite):
                return
            least = int(finite[0])
            if slot == 1.0 or least == 0:
                break
            capacity = (least + 1) * slot
        self.attempt(stages, model, table, least)


def _backward_read(graph: Graph, name: str) -> str | None:
    """Why method ``name`` (rotor or a variant) cannot run the forward pass first: a forward node whose first
    implementation reads a backward value (the node's own inputs are checked by `Method.skip`); None when none
    does."""
    reads = _reads(graph)
    for v in graph.forward_indices:
        for u in reads[v]:
            if not graph.is_forward[u]:
                return (f"method '{name}' runs the forward pass first, and the first implementation of forward node "
                        f"'{graph.ids[v]}' reads backward node '{graph.ids[u]}'")
    return None


def _no_chain(graph: Graph, name: str) -> str:
    """The sentence for a graph method ``name`` (rotor or a variant) finds no chain of stages in."""
    return (f"method '{name}' plans a chain of stages, and the forward pass of graph '{graph.name}' has no cut "
            "that every value crosses at most once: it has fewer than 2 stages")


class ChainDP(Method):
    """What rotor and its variants share as methods: applicability, parameters, the search and the answer.

    A variant sets ``name``, ``description`` and ``search_space`` and may bring its own `_Search` (`_search`).
    """

    needs_backward = True
    supports_min = True
    params = (
        Param("slots", int, 500, "memory slots the DP splits the budget into (sizes rounded up to whole slots)",
              minimum=10, maximum=100_000),
        Param("max_stages", int, 100, "most stages of a decomposition (more are thinned, evenly by duration)",
              minimum=2, maximum=1_000),
        Param("options", int, 4, "most ways per stage to keep only some of its activations when it keeps them "
              "(Rockmate's options; 0: rotor's all or nothing)", minimum=0, maximum=16),
    )

    @classmethod
    def skip(cls, graph: Graph, budget: Number | None) -> str | None:
        reason = super().skip(graph, budget)
        if reason is not None:
            return reason
        reason = _backward_read(graph, cls.name)
        if reason is not None:
            return reason
        chains = [d for d in decompositions(graph, DEFAULT_STAGES) if d.count >= 2]
        if not chains:
            return _no_chain(graph, cls.name)
        if budget is not None:
            pinned = min(sum(float(graph.memory[v]) for v in d.pinned) for d in chains)
            if pinned and graph.fixed_memory + pinned > budget:
                return (f"method '{cls.name}' keeps the values it pins (read beyond the next stage, or outputs) "
                        f"resident, and those of graph '{graph.name}' ({memory_text(pinned, graph)}) with its fixed "
                        f"memory exceed the budget {memory_text(budget, graph)}")
        return None

    def solve(self, graph: Graph, budget: Number | None, time_limit: float | None,
              **params: Any) -> MethodResult:
        started = time.perf_counter()
        deadline = Deadline(time_limit)
        try:
            check_forward_then_backward(graph)
        except LoweringError as exc:
            return MethodResult(SolutionStatus.NO_SOLUTION, message=str(exc), termination=Termination.NOT_APPLICABLE)
        chains = [d for d in decompositions(graph, params["max_stages"]) if d.count >= 2]
        why = _backward_read(graph, self.name) or (None if chains else _no_chain(graph, self.name))
        if why is not None:
            return MethodResult(SolutionStatus.NO_SOLUTION, message=why, termination=Termination.NOT_APPLICABLE)
        search = self._search(graph, budget, params, deadline)
        tried = 0
        # The fewest stages first: the DP's time grows with the square of the stages, and on a short limit (a
        # share of auto's) one schedule from a coarser chain is worth more than a finer chain's table cut off
        # before it ends (the unrolled GRU: 37 stages, then 68). With time, every chain is solved all the same.
        for stages in sorted(chains, key=lambda d: d.count):
            if tried and deadline.expired():
                break
            try:
                search.run(stages)
            except _OutOfTime:
                break
            tried += 1
        return self._answer(graph, budget, search, chains, tried, started, search_ended(deadline))

    def _search(self, graph: Graph, budget: Number | None, params: dict[str, Any], deadline: Deadline) -> _Search:
        """The search over the decompositions (a variant of the DP brings its own `_Search`)."""
        return _Search(graph, budget, params["slots"], deadline, self.context.report, params["options"])

    @classmethod
    def _answer(cls, graph: Graph, budget: Number | None, search: _Search, chains: list[Stages], tried: int,
                started: float, termination: Termination) -> MethodResult:
        stats: dict[str, Any] = {
            "decompositions": len(chains),
            "decompositions_solved": tried,
            "dp_tables": search.tables,
            "dp_s": round(search.dp_s, 4),
            "schedules_simulated": search.simulated,
        }
        elapsed = time.perf_counter() - started
        best = search.best
        if best is None:
            if search.simulated == 0:
                within = "at any memory" if budget is None else f"within the budget {memory_text(budget, graph)}"
                why = ("the time limit ran out before the DP finished" if termination is not Termination.CONVERGED
                       else f"the DP finds no schedule {within} on any of {len(chains)} stage decompositions")
            else:
                why = (f"{cls.name}'s lowest simulated peak over {search.simulated} schedules is "
                       f"{memory_text(search.least_peak or 0, graph)}, above the budget "
                       f"{memory_text(budget or 0, graph)}")
            return MethodResult(SolutionStatus.NO_SOLUTION, solve_time_s=elapsed, stats=stats, message=why,
                                termination=termination)
        stages = best.stages
        stats.update({
            "stages": stages.count,
            "pinned": len(stages.pinned),
            "pinned_bytes": float(sum(float(graph.memory[v]) for v in stages.pinned)),
            "dp_memory": round(best.memory + float(graph.fixed_memory), 3),
            "model_duration": best.model_duration,
            "simulated_peak": best.simulation.peak,
        })
        return MethodResult(SolutionStatus.FEASIBLE, best.schedule, objective=best.simulation.duration,
                            solve_time_s=elapsed, stats=stats, termination=termination)


DEFAULT_STAGES = next(p.default for p in ChainDP.params if p.name == "max_stages")
