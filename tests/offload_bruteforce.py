"""Exact brute forces over schedules that offload, for tiny graphs (3 to 5 nodes).

`offload_optimum` and `offload_least_peak` search every schedule of compute, free, offload and reload
steps up to a length: an A* search over the walk's states, by the peak so far raised to the least
memory of computing each node not computed yet (its inputs resident, itself and its workspace), or by
the duration so far raised to the compute clock plus the fastest durations of those nodes, neither of
which decreases along a schedule, and each of which is the peak (the duration) where a schedule ends. A state is what
the future depends on (docs/design.md section 3, "Offload"): the resident and computed sets, the
clocks of the compute stream and of both copy engines, each resident value's readiness, each host
copy's end, and the device memory still held by copies out and by frees of values still arriving;
times at or before the compute clock are replaced by it, since every later step happens after it.
The best schedule found is scored again by `remat_bench.core.simulate.simulate`, which must agree.

Frees are placed canonically: a value is freed only right after a step that computed it, read it or
reloaded it. Moving any free back to right after such a step keeps the schedule valid, keeps every
time, lowers or keeps every step's memory and keeps the step count, so the optimum over canonical
schedules is the optimum over all schedules of that length.

`staged_offload_optimum` searches the space of `remat_bench.methods.checkmate_offload` directly:
stage by stage, every set of computations, offloads, reloads and values kept, under the memory and
copy-window rules that module's docstring states, without its tightening rows.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass

from remat_bench.core.graph import Graph, Number
from remat_bench.core.schedule import Schedule
from remat_bench.core.simulate import simulate

COMPUTE, FREE, OFFLOAD, RELOAD = "compute", "free", "offload", "reload"


@dataclass(frozen=True)
class _State:
    resident: int
    computed: int
    clock: float
    engines: tuple[float, float]  # device-to-host, host-to-device: when their last copy ends (>= clock)
    ready: tuple[float, ...]  # per node: when its device copy is readable (>= clock; 0 when not resident)
    host: tuple[float | None, ...]  # per node: its latest copy out's end (>= clock), None without a host copy
    held: tuple[tuple[float, Number], ...]  # (end, memory) of device memory held by values no longer resident

    @property
    def duration(self) -> float:
        return max(self.clock, *self.engines)


class _Walk:
    """The simulator's rules, one step at a time, on `_State`s."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.n = graph.n
        self.mem = [graph.memory[v].item() for v in range(graph.n)]
        self.ops = [[(sum(1 << u for u in graph.op_inputs[op]), graph.op_duration[op].item(),
                      graph.op_workspace[op].item(), k) for k, op in enumerate(graph.ops_of(v))]
                    for v in range(graph.n)]
        self.reads = [sum(1 << u for op in graph.ops_of(v) for u in graph.op_inputs[op]) for v in range(graph.n)]
        link = graph.transfer
        self.c_out = None if link is None else [link.device_to_host.copy_time(m) for m in self.mem]
        self.c_in = None if link is None else [link.host_to_device.copy_time(m) for m in self.mem]
        self.outputs = sum(1 << o for o in graph.output_indices)
        self.everything = (1 << graph.n) - 1
        self.size = [sum(m for v, m in enumerate(self.mem) if mask >> v & 1) for mask in range(1 << graph.n)]
        fastest = [min(d for _, d, _, _ in ops) for ops in self.ops]
        self.left = [sum(d for v, d in enumerate(fastest) if not mask >> v & 1) for mask in range(1 << graph.n)]
        # The least memory of a step computing v: its inputs are resident, beside v and its workspace.
        need = [graph.fixed_memory + min(self.size[reads] + self.mem[v] + ws for reads, _, ws, _ in self.ops[v])
                for v in range(graph.n)]
        self.need = [max([need[v] for v in range(graph.n) if not mask >> v & 1], default=0)
                     for mask in range(1 << graph.n)]

    def start(self) -> _State:
        return _State(0, 0, 0.0, (0.0, 0.0), (0.0,) * self.n, (None,) * self.n, ())

    def held_at(self, s: _State, time: float) -> Number:
        return self.size[s.resident] + sum(m for end, m in s.held if end > time)

    def done(self, s: _State) -> bool:
        return s.computed == self.everything and s.resident & self.outputs == self.outputs

    def _normal(self, resident: int, computed: int, clock: float, engines: tuple[float, float],
                ready: list[float], host: list[float | None], held: list[tuple[float, Number]]) -> _State:
        for v in range(self.n):
            ready[v] = (ready[v] if ready[v] > clock else clock) if resident >> v & 1 else 0.0
            h = host[v]
            if h is not None and h < clock:
                host[v] = clock
        if held:
            held = sorted(item for item in held if item[0] > clock)
        e0, e1 = engines
        return _State(resident, computed, clock, (e0 if e0 > clock else clock, e1 if e1 > clock else clock),
                      tuple(ready), tuple(host), tuple(held))

    def moves(self, s: _State) -> list[tuple[tuple, _State, Number | None, int]]:
        """(step, next state, the step's memory where the peak counts it, the values it touched)."""
        out = []
        fixed = self.graph.fixed_memory
        for v in range(self.n):
            bit = 1 << v
            if s.resident & bit:
                continue
            for need, duration, workspace, k in self.ops[v]:
                if need & ~s.resident:
                    continue
                start = max([s.clock, *[s.ready[u] for u in range(self.n) if need >> u & 1]])
                memory = fixed + self.held_at(s, start) + self.mem[v] + workspace
                end = start + duration
                ready = list(s.ready)
                ready[v] = end
                nxt = self._normal(s.resident | bit, s.computed | bit, end, s.engines, ready, list(s.host),
                                   list(s.held))
                out.append(((COMPUTE, v, k), nxt, memory, need | bit))
        if self.c_out is None or self.c_in is None:
            return out
        for v in range(self.n):
            bit = 1 << v
            if s.resident & bit:
                start = max(s.clock, s.engines[0], s.ready[v])
                end = start + self.c_out[v]
                host = list(s.host)
                host[v] = end
                nxt = self._normal(s.resident & ~bit, s.computed, s.clock, (end, s.engines[1]), list(s.ready), host,
                                   [*s.held, (end, self.mem[v])])
                out.append(((OFFLOAD, v), nxt, None, 0))
            elif s.host[v] is not None:
                start = max(s.clock, s.engines[1], s.host[v])
                end = start + self.c_in[v]
                ready = list(s.ready)
                ready[v] = end
                nxt = self._normal(s.resident | bit, s.computed, s.clock, (s.engines[0], end), ready, list(s.host),
                                   list(s.held))
                out.append(((RELOAD, v), nxt, fixed + self.held_at(nxt, s.clock), bit))
        return out

    def free(self, s: _State, values: int) -> _State:
        held = list(s.held)
        for v in range(self.n):
            if values >> v & 1 and s.ready[v] > s.clock:  # still arriving: held until its copy ends
                held.append((s.ready[v], self.mem[v]))
        return self._normal(s.resident & ~values, s.computed, s.clock, s.engines, list(s.ready), list(s.host), held)


def _subsets(mask: int):
    sub = mask
    while True:
        yield sub
        if not sub:
            return
        sub = (sub - 1) & mask


class TooLarge(Exception):
    """The search expanded more states than it was allowed: its answer is unknown (not None)."""


# The most states a search expands before giving up (`TooLarge`).
MAX_STATES = 30_000


def _search(graph: Graph, max_steps: int, budget: Number | None, by_peak: bool) -> tuple[Number, Schedule] | None:
    assert graph.n <= 6, "the brute force is for tiny graphs"
    expanded = 0
    walk = _Walk(graph)
    first = walk.start()
    counter = itertools.count()
    heap: list = [(walk.need[0] if by_peak else walk.left[0], 0, next(counter), first, 0.0, None)]
    fewest: dict[_State, int] = {}
    while heap:
        cost, steps, _, state, peak, path = heapq.heappop(heap)
        if fewest.get(state, max_steps + 1) <= steps:
            continue
        fewest[state] = steps
        expanded += 1
        if expanded > MAX_STATES:
            raise TooLarge(f"more than {MAX_STATES:,} states")
        if walk.done(state) and steps:
            return cost, _schedule(path)
        if steps == max_steps:
            continue
        for step, nxt, memory, touched in walk.moves(state):
            if memory is not None and budget is not None and memory > budget:
                continue
            new_peak = peak if memory is None else max(peak, memory)
            for freed in _subsets(touched & nxt.resident):
                k = steps + 1 + bin(freed).count("1")
                if k > max_steps:
                    continue
                after = walk.free(nxt, freed) if freed else nxt
                frees = tuple((FREE, v) for v in range(graph.n) if freed >> v & 1)
                # By duration, an A* search: every node not yet computed is still to be computed after the
                # compute clock, so max(duration so far, clock + their fastest durations) never decreases
                # along a schedule and is the duration where the schedule ends.
                # By peak, likewise with the least memory of computing each node not yet computed.
                new_cost = (max(new_peak, walk.need[after.computed]) if by_peak
                            else max(after.duration, after.clock + walk.left[after.computed]))
                heapq.heappush(heap, (new_cost, k, next(counter), after, new_peak, (path, (step, *frees))))
    return None


def _schedule(path) -> Schedule:
    steps = []
    while path is not None:
        path, block = path
        steps.append(block)
    return Schedule.from_steps([(s[0], s[1], *s[2:]) for block in reversed(steps) for s in block])


def offload_optimum(graph: Graph, budget: Number, max_steps: int) -> tuple[Number, Schedule] | None:
    """The least duration over every schedule of at most ``max_steps`` steps within ``budget``, and one
    such schedule, checked by the simulator; None when none fits.

    Parameters
    ----------
    graph : Graph
        Up to 6 nodes; with a ``transfer`` to copy over (else only compute and free steps).
    budget : Number
    max_steps : int

    Returns
    -------
    tuple of (Number, Schedule) or None

    Raises
    ------
    TooLarge
        The search expanded more than `MAX_STATES` states.
    """
    found = _search(graph, max_steps, budget, by_peak=False)
    if found is None:
        return None
    duration, schedule = found
    sim = simulate(graph, schedule)
    assert sim.valid and sim.peak <= budget and sim.duration == duration, (sim.summary(), duration)
    return sim.duration, schedule


def offload_least_peak(graph: Graph, max_steps: int) -> tuple[Number, Schedule] | None:
    """The least peak over every schedule of at most ``max_steps`` steps, and one such schedule (checked
    by the simulator); None when no schedule is that short.

    Parameters
    ----------
    graph : Graph
    max_steps : int

    Returns
    -------
    tuple of (Number, Schedule) or None

    Raises
    ------
    TooLarge
        The search expanded more than `MAX_STATES` states.
    """
    found = _search(graph, max_steps, None, by_peak=True)
    if found is None:
        return None
    peak, schedule = found
    sim = simulate(graph, schedule)
    assert sim.valid and sim.peak == peak, (sim.summary(), peak)
    return sim.peak, schedule


# ---------------------------------------------------------------------- the staged space


def staged_offload_optimum(graph: Graph, budget: Number) -> Number | None:
    """The least computation time over the staged space of ``checkmate-offload``, or None if none fits.

    Stage t computes a set of nodes below t and t itself, in node order, each reading values resident
    entering the stage or computed before it in the stage; offloads any value on the device in the stage
    that it does not keep, right after its last read in the stage (after its computation, or at the
    stage's start, when the stage does not read it); reloads at its start values with a host copy made in
    an earlier stage, kept into the next; keeps any value on the device that it does not offload, and the
    ones it reloads. Memory: fixed, the values held entering the stage and those reloaded, held to the
    stage's end, plus what each computation adds, less what is freed after an earlier computation of the
    stage (a value read last there, neither kept nor offloaded), with the computation's workspace, within
    ``budget``. Windows: the reloads' copy time within the stage's computation time; the copies out issued
    at any position or later within the computation time after it. Dynamic programming over
    (stage, values held, values with a host copy).

    Parameters
    ----------
    graph : Graph
        Up to 5 nodes, with a ``transfer``.
    budget : Number

    Returns
    -------
    Number or None
    """
    n = graph.n
    assert n <= 5 and graph.transfer is not None
    mem = [graph.memory[v].item() for v in range(n)]
    dur = [graph.duration[v].item() for v in range(n)]
    ws = [graph.workspace[v].item() for v in range(n)]
    ins = [list(graph.inputs[v]) for v in range(n)]
    c_out = [graph.transfer.device_to_host.copy_time(m) for m in mem]
    c_in = [graph.transfer.host_to_device.copy_time(m) for m in mem]
    outputs = sum(1 << o for o in graph.output_indices)
    fixed = graph.fixed_memory

    def bits(mask: int) -> list[int]:
        return [v for v in range(n) if mask >> v & 1]

    states: dict[tuple[int, int], Number] = {(0, 0): 0}
    for t in range(n):
        nxt: dict[tuple[int, int], Number] = {}
        for (held, host), cost in states.items():
            for below in _subsets(((1 << t) - 1) & ~held):
                computed = below | 1 << t
                order = bits(computed)
                if any(any(not ((held | (computed & ((1 << k) - 1))) >> u & 1) for u in ins[k]) for k in order):
                    continue
                time = sum(dur[k] for k in order)
                last_read: dict[int, int] = {}
                for k in order:
                    for u in ins[k]:
                        last_read[u] = k
                device = held | computed
                for reload in _subsets(host & ~device):
                    if sum(c_in[i] for i in bits(reload)) > time:
                        continue
                    for out in _subsets(device):
                        pos = {i: last_read.get(i, i if computed >> i & 1 else -1) for i in bits(out)}
                        if not _window_ok(order, dur, [(pos[i], c_out[i]) for i in pos]):
                            continue
                        for keep in _subsets(device & ~out):
                            kept = keep | reload
                            if t == n - 1 and kept & outputs != outputs:
                                continue
                            if t == n - 1:
                                kept &= outputs
                            if not _memory_ok(order, held, reload, out, kept, last_read, mem, ws, fixed, budget):
                                continue
                            key = (kept, host | out)
                            if nxt.get(key, float("inf")) > cost + time:
                                nxt[key] = cost + time
        states = nxt
    return min(states.values()) if states else None


def _window_ok(order: list[int], dur: list[Number], copies: list[tuple[int, float]]) -> bool:
    """Copies out issued at positions (-1: the start) end within the stage, one engine in issue order."""
    for p in [-1, *order]:
        after = sum(dur[k] for k in order if k > p)
        if sum(c for q, c in copies if q >= p) > after:
            return False
    return True


def _memory_ok(order: list[int], held: int, reload: int, out: int, kept: int, last_read: dict[int, int],
               mem: list[Number], ws: list[Number], fixed: Number, budget: Number) -> bool:
    n = len(mem)
    level = fixed + sum(mem[v] for v in range(n) if (held | reload) >> v & 1)
    if level > budget:
        return False
    for k in order:
        level += mem[k]
        if level + ws[k] > budget:
            return False
        for u, last in last_read.items():
            if last == k and not (kept >> u & 1) and not (out >> u & 1):
                level -= mem[u]
    return True
