"""Offload and reload with real tensors: the copies of a schedule that moves values (docs/design.md section 3,
"Offload"), as `remat_bench.torch.executor.Executor` runs them for `replay` and `train`.

``offload v`` copies v's storages into host memory and ``reload v``
allocates new device storages at its step and copies them back; a reader of
a reloaded value waits for its copy. Two engines copy, as the model has
them: one stream per direction (`CudaCopies`: a device-to-host and a
host-to-device stream beside the compute stream, pinned host buffers, CUDA
events); on the CPU (`HostCopies`) each copy is done at once into a separate
CPU tensor that stands for host memory.

When device memory is let go. The model holds an offloaded value's device
memory until its copy ends, and a value freed while its copy in is still
arriving until that copy ends (`_simulate_moves`). A replay lets it go at
the step the model says the copy has ended by: the first later step whose
modelled time (a computation's start; for any other step, the end of the
computation before it) is at or past the copy's modelled end (`MovePlan`).
On CUDA the compute stream first waits for the copy's event, so that no
later kernel can reuse the memory while the copy still reads or writes it
(the caching allocator hands a freed block to the next allocation of the
stream it was allocated on: the compute stream's, for every value here).
The memory the allocator counts at every step is therefore the model's,
whatever the copies take on the device; a copy slower than modelled makes
the compute stream wait, which the measured time shows. On the CPU the
measured device peak equals the simulated one to the byte, as for schedules
without copies.

Host memory. Each offload copies into a host buffer of its own, allocated
before the run (pinned on CUDA: allocating pinned memory waits for the
device) and kept for later runs of the same plan, so that the CPU
allocator's running total, which the CPU's measured peak is read off, moves
with the device's values only. The host bytes a run holds are counted
(`Mover.host_peak`) with each host copy held from its offload's step until
the first step issued at or past the end of the last reload that reads it.
The model holds it from its copy's start, at or after that step, to that
end: the count is at least the simulator's host peak, and equal to it unless
a copy out waits for its engine or its value past its step.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.utils._pytree as pytree

from remat_bench.core.graph import Graph
from remat_bench.core.schedule import COMPUTE, FREE, OFFLOAD, RELOAD, Schedule, ScheduleBuilder
from remat_bench.core.simulate import Simulation


@dataclass(frozen=True)
class MovePlan:
    """What a run of a schedule that moves values does beside its steps, from the simulator's timeline.

    ``device_release[s]``: the steps (offloads, and frees of values still arriving) whose device memory is let
    go just before step s (``s == len(schedule)``: at the end). ``host_release[s]``: the offload steps whose
    host copies are let go just before step s. ``host_copy[r]``: for a reload step r, the offload step whose
    host copy it reads. ``host_bytes[s]``: for an offload step s, the bytes of its value (the graph's memory,
    rounded up). ``held``: the free steps that hold their value's memory until its copy in ends.
    """

    steps: int
    device_release: dict[int, list[int]]
    host_release: dict[int, list[int]]
    host_copy: dict[int, int]
    host_bytes: dict[int, int]
    held: frozenset[int]


def move_plan(graph: Graph, schedule: Schedule, simulation: Simulation) -> MovePlan:
    """When a run of ``schedule`` lets go of the device memory and the host copies its copies hold (module
    docstring, "When device memory is let go").

    Parameters
    ----------
    graph : Graph
        The graph; its memory gives each host copy's size.
    schedule : Schedule
        A schedule with offload or reload steps.
    simulation : Simulation
        The simulator's valid account of it, with each step's start and end.

    Returns
    -------
    MovePlan

    Raises
    ------
    ValueError
        A simulation that is not valid, or that has no step times (a schedule that moves nothing).
    """
    if not simulation.valid or simulation.step_start is None or simulation.step_end is None:
        raise ValueError("a plan of copies needs the simulator's valid account of a schedule that moves values")
    kinds, nodes = schedule.kinds.tolist(), schedule.nodes.tolist()
    starts, ends = simulation.step_start.tolist(), simulation.step_end.tolist()
    S = len(kinds)
    # The time each step is issued at, as the simulator reads memory then: a computation's start, any other
    # step the end of the computation before it.
    now = [0.0] * S
    clock = 0.0
    for s, kind in enumerate(kinds):
        if kind == COMPUTE:
            now[s] = starts[s]
            clock = ends[s]
        else:
            now[s] = clock
    ready: dict[int, float] = {}  # when each value's device copy can be read (a reload's end)
    latest: dict[int, int] = {}  # node -> its latest offload step
    device_holds: list[tuple[int, float, int]] = []  # (from step, until time, step)
    host_end: dict[int, tuple[int, float]] = {}  # offload step -> (its last reader's step, the copy's last end)
    host_copy: dict[int, int] = {}
    held: set[int] = set()
    for s, (kind, v) in enumerate(zip(kinds, nodes)):
        if kind == COMPUTE:
            ready[v] = ends[s]
        elif kind == FREE:
            if ready.get(v, 0.0) > now[s]:
                device_holds.append((s, ready[v], s))
                held.add(s)
        elif kind == OFFLOAD:
            device_holds.append((s, ends[s], s))
            latest[v] = s
            host_end[s] = (s, ends[s])
        elif kind == RELOAD:
            source = latest[v]
            host_copy[s] = source
            host_end[source] = (s, max(host_end[source][1], ends[s]))
            ready[v] = ends[s]
    device_release: dict[int, list[int]] = {}
    for after, until, s in device_holds:
        device_release.setdefault(_first_at(now, after, until), []).append(s)
    host_release: dict[int, list[int]] = {}
    for s, (after, until) in host_end.items():
        host_release.setdefault(_first_at(now, after, until), []).append(s)
    host_bytes = {s: math.ceil(graph.memory[nodes[s]]) for s in host_end}
    return MovePlan(S, device_release, host_release, host_copy, host_bytes, frozenset(held))


def _first_at(now: Sequence[float], after: int, until: float) -> int:
    """The first step past ``after`` issued at or past ``until`` (``len(now)``: none, the end); ``now`` never
    decreases (a computation starts at or after the end of the one before it)."""
    return max(after + 1, bisect.bisect_left(now, until))


def save_on_cpu_plan(graph: Graph, schedule: Schedule) -> Schedule:
    """``schedule`` with every forward value the backward reads sent to the host between the passes: offloaded
    after its last forward read, reloaded just before its first backward read (what PyTorch's
    ``torch.autograd.graph.save_on_cpu`` does with every saved tensor).

    Parameters
    ----------
    graph : Graph
        A training graph (forward and backward nodes).
    schedule : Schedule
        A schedule that moves nothing and computes each node once (the baseline, say).

    Returns
    -------
    Schedule
        The same steps with the copies added; a value whose first backward read follows its last forward read
        at once is left on the device.

    Raises
    ------
    ValueError
        A schedule that moves values already, or computes a node more than once.
    """
    if schedule.moves:
        raise ValueError("the schedule moves values already; give one without offload or reload steps")
    computed = schedule.nodes[schedule.kinds == COMPUTE]
    if len(np.unique(computed)) != len(computed):
        raise ValueError("the schedule recomputes values; give one that computes each node once")
    kinds, nodes, impls = schedule.kinds.tolist(), schedule.nodes.tolist(), schedule.impls.tolist()
    last_forward: dict[int, int] = {}
    first_backward: dict[int, int] = {}
    for s, (kind, v, k) in enumerate(zip(kinds, nodes, impls)):
        if kind != COMPUTE:
            continue
        if graph.is_forward[v]:
            last_forward[v] = s
        op = int(graph.op_start[v]) + k
        for u in graph.op_inputs[op]:
            if not graph.is_forward[u]:
                continue
            if graph.is_forward[v]:
                last_forward[u] = s
            else:
                first_backward.setdefault(u, s)
    out_after: dict[int, list[int]] = {}
    back_before: dict[int, list[int]] = {}
    for u, read in first_backward.items():
        if read > last_forward[u] + 1:
            out_after.setdefault(last_forward[u], []).append(u)
            back_before.setdefault(read, []).append(u)
    b = ScheduleBuilder()
    for s, (kind, v, k) in enumerate(zip(kinds, nodes, impls)):
        for u in back_before.get(s, []):
            b.reload(u)
        if kind == COMPUTE:
            b.compute(v, k)
        else:
            b.free(v)
        for u in out_after.get(s, []):
            b.offload(u)
    return b.build(method=schedule.method, params=dict(schedule.params), budget=schedule.budget,
                   solver={"copies": "forward values the backward reads sent to the host between the passes"})


# ---------------------------------------------------------------------- the copy engines


class Copies:
    """The copy engines a `Mover` copies with, and the compute stream's waits: what CUDA and the CPU differ in.

    An event is whatever the engines give back for a copy or a mark (None where nothing needs waiting for).
    """

    def __init__(self) -> None:
        self._buffers: dict[int, torch.Tensor] = {}

    def host_buffer(self, key: int, nbytes: int) -> torch.Tensor:
        """A host buffer of at least ``nbytes`` bytes for the copy ``key``, kept for the next run's same copy.

        Parameters
        ----------
        key : int
            The offload step.
        nbytes : int
            Bytes.

        Returns
        -------
        torch.Tensor
            uint8, one dimension.
        """
        buffer = self._buffers.get(key)
        if buffer is None or buffer.numel() < nbytes:
            buffer = self._buffers[key] = self._allocate_host(nbytes)
        return buffer

    def _allocate_host(self, nbytes: int) -> torch.Tensor:
        return torch.empty(nbytes, dtype=torch.uint8)

    def mark(self) -> Any:
        """An event at this point of the compute stream: a copy that waits for it starts after the work issued
        so far (the value's producer, or the last use of a block a reload's buffer reuses).

        Returns
        -------
        Any
            The event.
        """
        return None

    def copy_out(self, sources: Sequence[torch.Tensor], targets: Sequence[torch.Tensor], after: Iterable[Any]) -> Any:
        """Copy device bytes to host buffers on the device-to-host engine, after the events ``after``.

        Parameters
        ----------
        sources, targets : sequence of torch.Tensor
            uint8 tensors of equal sizes, pairwise.
        after : iterable
            Events the copy waits for (None among them: nothing to wait for).

        Returns
        -------
        Any
            The event of the copy's end.
        """
        for target, source in zip(targets, sources):
            target.copy_(source)
        return None

    def copy_in(self, sources: Sequence[torch.Tensor], targets: Sequence[torch.Tensor], after: Iterable[Any]) -> Any:
        """Copy host buffers to device bytes on the host-to-device engine, after the events ``after``.

        Parameters
        ----------
        sources, targets : sequence of torch.Tensor
            uint8 tensors of equal sizes, pairwise.
        after : iterable
            Events the copy waits for (None among them: nothing to wait for).

        Returns
        -------
        Any
            The event of the copy's end.
        """
        for target, source in zip(targets, sources):
            target.copy_(source)
        return None

    def wait(self, event: Any) -> None:
        """Have the compute stream wait for ``event`` (None: nothing to wait for).

        Parameters
        ----------
        event : Any
            A copy's event.
        """


class HostCopies(Copies):
    """The CPU's copies: each done at once, into a CPU tensor standing for host memory; nothing to wait for."""


class CudaCopies(Copies):
    """CUDA's copies: one stream per direction beside the compute stream (the device's two copy engines, as
    the model has them), pinned host buffers, and events between the streams.

    Parameters
    ----------
    device : torch.device
        A CUDA device; its current stream is the compute stream.
    pin_memory : bool
        Pin the host buffers (non-blocking copies need pinned memory to run asynchronously).
    """

    def __init__(self, device: torch.device, pin_memory: bool = True) -> None:
        super().__init__()
        self.pin_memory = pin_memory
        self.compute = torch.cuda.current_stream(device)
        self.to_host = torch.cuda.Stream(device)
        self.to_device = torch.cuda.Stream(device)

    def _allocate_host(self, nbytes: int) -> torch.Tensor:
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=self.pin_memory)

    def mark(self) -> Any:
        event = torch.cuda.Event()
        event.record(self.compute)
        return event

    def _copy(self, stream: Any, sources: Sequence[torch.Tensor], targets: Sequence[torch.Tensor],
              after: Iterable[Any]) -> Any:
        for event in after:
            if event is not None:
                stream.wait_event(event)
        with torch.cuda.stream(stream):
            for target, source in zip(targets, sources):
                target.copy_(source, non_blocking=True)
        done = torch.cuda.Event()
        done.record(stream)
        return done

    def copy_out(self, sources: Sequence[torch.Tensor], targets: Sequence[torch.Tensor], after: Iterable[Any]) -> Any:
        return self._copy(self.to_host, sources, targets, after)

    def copy_in(self, sources: Sequence[torch.Tensor], targets: Sequence[torch.Tensor], after: Iterable[Any]) -> Any:
        return self._copy(self.to_device, sources, targets, after)

    def wait(self, event: Any) -> None:
        if event is not None:
            self.compute.wait_event(event)


def copies_for(device: torch.device) -> Copies:
    """The copy engines of ``device``: `CudaCopies` on CUDA, `HostCopies` on the CPU.

    Parameters
    ----------
    device : torch.device

    Returns
    -------
    Copies
    """
    return CudaCopies(device) if device.type == "cuda" else HostCopies()


# ---------------------------------------------------------------------- one run


@dataclass
class _HostCopy:
    """One offload's host copy: where each storage went, and how the value is rebuilt from them."""

    slices: list[torch.Tensor]  # per storage, its bytes in the host buffer
    leaves: list[Any]  # per leaf: (storage index, dtype, offset, size, stride), or the leaf itself (kept as is)
    tree: Any
    event: Any  # the copy out's end
    nbytes: int


class Mover:
    """The copies of one run of a schedule that moves values, over the run's resident values.

    The executor calls `before` ahead of every step, `wait_for` ahead of a computation with the nodes it
    reads, and `offload`, `reload` and `free` for those steps, each with the dict of resident values it
    keeps; `finish` at the end. ``host_peak`` is the most host bytes held at once (module docstring).

    Parameters
    ----------
    plan : MovePlan
        The schedule's plan of copies (`move_plan`).
    copies : Copies
        The device's copy engines (`copies_for`), kept across runs with their host buffers.
    device : torch.device
        Where the values live.
    fixed : iterable of torch.Tensor
        The run's fixed tensors (parameters, buffers, the batch): a value's leaf in one of their storages is
        left where it is, not copied.
    """

    def __init__(self, plan: MovePlan, copies: Copies, device: torch.device,
                 fixed: Iterable[torch.Tensor] = ()) -> None:
        self.plan = plan
        self.copies = copies
        self.device = device
        self.host_peak = 0
        self._fixed = {t.untyped_storage().data_ptr() for t in fixed}
        self._held: dict[int, tuple[Any, Any]] = {}  # step -> (value, event) whose memory is still held
        self._arriving: dict[int, Any] = {}  # node -> its reload's event, not yet waited for
        self._host: dict[int, _HostCopy] = {}  # offload step -> its host copy
        self._host_bytes = 0
        for s, nbytes in plan.host_bytes.items():  # before the run: no host allocation inside it
            copies.host_buffer(s, nbytes)

    def before(self, s: int) -> None:
        """Let go of what the plan releases before step ``s`` (``s`` past the last step: the end).

        Parameters
        ----------
        s : int
            The step about to run.
        """
        for k in self.plan.device_release.get(s, ()):
            value, event = self._held.pop(k)
            self.copies.wait(event)  # no later kernel may reuse the memory before the copy is done with it
            del value
        for k in self.plan.host_release.get(s, ()):
            self._host_bytes -= self._host.pop(k).nbytes

    def wait_for(self, inputs: Iterable[int]) -> None:
        """Have the compute stream wait for the copies in of the values a computation reads.

        Parameters
        ----------
        inputs : iterable of int
            The node indices it reads.
        """
        for u in inputs:
            event = self._arriving.pop(u, None)
            if event is not None:
                self.copies.wait(event)

    def offload(self, s: int, v: int, values: dict[int, Any]) -> None:
        """Step ``s``, ``offload v``: copy v's storages to host memory; v is no longer resident, its device
        memory held until the plan lets it go.

        Parameters
        ----------
        s : int
            The step.
        v : int
            The node.
        values : dict
            The resident values; v's is taken out.
        """
        value = values.pop(v)
        leaves, tree = pytree.tree_flatten(value)
        storages: dict[int, int] = {}  # data pointer -> index among the copied storages
        sources: list[torch.Tensor] = []
        layout: list[Any] = []
        for leaf in leaves:
            if not isinstance(leaf, torch.Tensor) or leaf.untyped_storage().data_ptr() in self._fixed:
                layout.append(leaf)
                continue
            storage = leaf.untyped_storage()
            index = storages.get(storage.data_ptr())
            if index is None:
                index = storages[storage.data_ptr()] = len(sources)
                sources.append(torch.empty(0, dtype=torch.uint8, device=leaf.device).set_(storage))
            layout.append((index, leaf.dtype, leaf.storage_offset(), tuple(leaf.shape), leaf.stride()))
        total = sum(t.numel() for t in sources)
        buffer = self.copies.host_buffer(s, total)
        slices, offset = [], 0
        for t in sources:
            slices.append(buffer[offset:offset + t.numel()])
            offset += t.numel()
        after = [self.copies.mark(), self._arriving.pop(v, None)]
        event = self.copies.copy_out(sources, slices, after)
        del sources
        self._host[s] = _HostCopy(slices, layout, tree, event, self.plan.host_bytes.get(s, total))
        self._held[s] = (value, event)
        self._host_bytes += self._host[s].nbytes
        self.host_peak = max(self.host_peak, self._host_bytes)

    def reload(self, s: int, v: int, values: dict[int, Any]) -> None:
        """Step ``s``, ``reload v``: allocate v's storages on the device and copy its host copy back; readers
        wait for the copy (`wait_for`).

        Parameters
        ----------
        s : int
            The step.
        v : int
            The node.
        values : dict
            The resident values; v's is put in.
        """
        copy = self._host[self.plan.host_copy[s]]
        targets = [torch.empty(t.numel(), dtype=torch.uint8, device=self.device) for t in copy.slices]
        self._arriving[v] = self.copies.copy_in(copy.slices, targets, [self.copies.mark(), copy.event])
        leaves = []
        for leaf in copy.leaves:
            if isinstance(leaf, tuple):
                index, dtype, offset, shape, stride = leaf
                leaf = torch.empty(0, dtype=dtype, device=self.device).set_(
                    targets[index].untyped_storage(), offset, shape, stride)
            leaves.append(leaf)
        values[v] = pytree.tree_unflatten(leaves, copy.tree)

    def free(self, s: int, v: int, values: dict[int, Any]) -> None:
        """Step ``s``, ``free v``: drop v's value; held until its copy in ends when the plan says it is still
        arriving.

        Parameters
        ----------
        s : int
            The step.
        v : int
            The node.
        values : dict
            The resident values; v's is taken out.
        """
        value = values.pop(v)
        event = self._arriving.pop(v, None)
        if s in self.plan.held:
            self._held[s] = (value, event)
        else:
            self.copies.wait(event)  # the copy in may still be writing into the memory let go
        del value

    def finish(self) -> None:
        """At the end of the run: let go of what is still held and wait for the copies still arriving."""
        self.before(self.plan.steps)
        for k in list(self._held):
            value, event = self._held.pop(k)
            self.copies.wait(event)
            del value
        for event in self._arriving.values():
            self.copies.wait(event)
        self._arriving.clear()
        self._host.clear()
        self._host_bytes = 0
