"""Training with a schedule's plan under ``torch.compile``: its saved set and recomputations as recompute
decisions on the joint graph, so that inductor fuses and runs it.

The mechanism. ``torch.compile`` (inductor) traces the training step into one joint forward-backward
aten graph (AOTAutograd, with inductor's decompositions), runs its joint-graph passes, and splits it
into a forward and a backward graph with the min-cut partitioner
(``torch._functorch.partitioners.min_cut_rematerialization_partition``, torch 2.14). The partitioner
honours the tags selective activation checkpointing puts on joint-graph nodes,
``node.meta["recompute"]`` (``torch.utils.checkpoint.CheckpointPolicy``): a ``MUST_RECOMPUTE`` node is
joined to the sink of its min cut by an infinite edge, so the backward graph recomputes it; a
``MUST_SAVE`` node is banned from recomputation (joined to the source), so the forward graph saves it
whenever the backward, or a recomputation, reads it. `compile_training_step` sets inductor's
``custom_partitioner_fn`` (``torch._inductor.config``) to a partitioner that tags the joint graph from
the plan, calls the min-cut partitioner, and reads back what it did: the forward graph's outputs after
the real ones are the values it saves, the forward operators in the backward graph those it recomputes
(`PartitionCheck`). Tagging there rather than in ``joint_custom_pre_pass`` (which exists too) tags the
graph the partitioner is given, after inductor's joint-graph pattern passes, which may replace nodes.
No ``ac_graph_id`` is set: ``cleanup_recompute_tags`` only rewrites tags between checkpointed regions
that carry one. The partitioner has no cache key (``uuid`` None), so inductor's caches are bypassed and
the partition runs at every compilation, where the check is read.

The mapping. The joint graph is decomposed (``native_layer_norm`` into ``var_mean``, ``rsqrt``, ...),
the imported graph is not. Every operator call of the forward pass carries its autograd sequence
number (``seq_nr``) and the operator before decomposition (``original_aten``) onto each node it
decomposes into: consecutive forward nodes with the same pair are one call, the one remat-bench node
of that operator. Calls are aligned as `remat_bench.torch.partition` aligns them: the k-th call of an
operator in execution order is the k-th node of that operator in the imported graph (forward nodes and
the loss), with the same output shape. Calls that only alias (views) have no node and are not tagged.

The tags. Every node of a call the plan recomputes is ``MUST_RECOMPUTE``. For any other node, the
nodes of its call whose value leaves the call (read by another call, forward or backward: the values
the undecomposed operator returns), with the tuples they are taken from and those tuples' items, are
``MUST_SAVE``; its inner nodes are ``MUST_RECOMPUTE``, so the backward rebuilds what it reads of them
from the saved outputs and inputs, as the backward of the undecomposed operator does (a layer norm's
normalised input, from its input, mean and inverse deviation), rather than save a value the imported
graph has no node for. The loss's call is ``MUST_SAVE`` throughout (PyTorch's forward graph ends with
the loss; remat-bench's backward begins with it). Backward operators that read forward values only
(``exp`` of log-softmax's output) are ``MUST_RECOMPUTE``: they run in the backward, as in the imported
graph, instead of in the forward with their result saved. A partition the tags leave no cut for (not
seen on the zoo's models) is made without them, and the check says so.

The plan. `compiled_plan` reads a schedule as a saved set: the forward values alive when its backward
begins (its first backward node) that a later step reads. The plan as it will run, ``as_compiled``, is
that set lowered by the shared lowering (`remat_bench.toolkit.lowering`, as ``torch-budget`` lowers
PyTorch's own partitions): the forward pass once in file order, the saved values kept, every other
value the backward reads recomputed once, with what it needs, just before its first backward use and
held until its last (``reordering_to_mimic_autograd_engine`` places recomputations so). What a
partition cannot express is said in one sentence each (`CompiledPlan.differences`): recomputations
inside the forward, several recomputations of one value, a value kept into the backward and recomputed
later, steps in another order. Values the loss reads stay resident, as the lowering keeps them, and
random operators are never recomputed: their draws are saved.

Memory. Inductor's generated code frees a buffer after its last use, except that by default
(``allow_buffer_reuse``) a freed buffer goes to a pool and stays allocated until a later buffer of
the same size and device takes it over, however far away that is. Across a backward pass this holds
dead buffers through other layers' peaks (docs/benchmarks.md, "Training with the plan").
`compile_training_step` turns the reuse off, so a buffer is released at its last use (the allocator,
CPU's or CUDA's caching one, recycles the memory) and memory follows the plan as the simulator
accounts for it; inductor's in-place reuse of a kernel's input for its output (``inplace_buffers``)
stays on, and so does its reordering for peak memory. PyTorch's own configurations
(`compile_with_memory_budget`) keep inductor's defaults, as users run them.

Randomness. By default a compiled graph's dropout draws from inductor's generator (its own kernels,
philox-based on CUDA), not from eager PyTorch's, so its masks differ from eager autograd's and
`remat_bench.torch.replay`'s. A step compiled with a plan whose graph has random operators draws the
masks eager draws instead: dropout is traced as the importer traced it (`partition.dropout_as_imported`:
``bernoulli``, ``div``, ``mul``, so those calls align), inductor's ``fallback_random`` leaves each draw
to ATen's kernel, and the step runs under `remat_bench.torch.randomness.seeded_random_ops` in its
compiled form (off while dynamo and inductor compile, on while the compiled code runs), which seeds
random operator k of step s as eager training and the replay seed it. The draws are made once, in the
forward (the plan saves them), in the trace's order. PyTorch's own configurations keep inductor's
generator, as users run them: their losses with dropout agree with eager's only in distribution.

Numerics. Without a random difference a compiled step computes eager's values up to floating-point
reassociation: inductor fuses pointwise operators and reductions into C++ (or Triton) loops that sum
in another order. `FUSION_RTOL` and `FUSION_ATOL` are the tolerance compiled values are held to. A
ReLU amplifies reassociation: an input within rounding of zero passes its gradient in one run and not
in the other, so compiled and eager training of a ReLU network can part by more than the tolerance
from the second step on, as PyTorch's own ``torch.compile`` parts from eager (docs/benchmarks.md,
"Training with the plan", has the figures and the element that flips on a ResNet).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import operator
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from unittest import mock

import numpy as np
import torch
from torch import fx, nn
from torch._functorch import config as functorch_config
from torch._functorch import partitioners
from torch._inductor.custom_graph_pass import CustomPartitionerFn
from torch.utils.checkpoint import CheckpointPolicy

from remat_bench.core.errors import GraphError, RematBenchError, ScheduleError
from remat_bench.core.graph import Graph, Number
from remat_bench.core.schedule import COMPUTE, FREE, Schedule
from remat_bench.core.simulate import Simulation, simulate
from remat_bench.toolkit.lowering import Plan, lower_plan
from remat_bench.torch import logger_quiet
from remat_bench.torch.build import first_line
from remat_bench.torch.importer import METADATA_KEY, program_for_graph, random_nodes, spec_of
from remat_bench.torch.partition import (
    SAME_OPERATOR,
    dropout_as_imported,
    first_shape,
    ordinal,
    output_leaves,
    same_call,
)
from remat_bench.torch.program import OP, Storages, distinct_storage_bytes, sort_fx_nodes
from remat_bench.torch.randomness import seeded_random_ops
from remat_bench.torch.spec import ModelSpec

# Inductor's fusions sum in another order than eager's kernels (module docstring, "Numerics"): compiled
# values are compared with eager ones to this tolerance (torch.allclose's), eager-exact ones to replay's.
FUSION_RTOL = 1e-4
FUSION_ATOL = 1e-5

# ---------------------------------------------------------------------- the plan


@dataclass
class CompiledPlan:
    """A schedule's plan as recompute decisions for ``torch.compile`` (module docstring, "The plan").

    ``saved``: forward nodes whose values the forward keeps for the backward (the loss aside);
    ``recomputed``: forward nodes the backward recomputes, once each. ``exact``: the schedule is the plan
    as compiled, step for step (``differences`` is empty); else each difference is one sentence.
    ``as_compiled``: the plan as it will run, a schedule over the same graph for the simulator;
    ``as_compiled_peak``: its simulated peak.
    """

    graph: Graph
    saved: frozenset[int]
    recomputed: frozenset[int]
    exact: bool
    differences: list[str]
    as_compiled: Schedule
    as_compiled_peak: Number

    def recompute(self, v: int) -> bool:
        """Whether node ``v`` is recomputed by the backward (``MUST_RECOMPUTE``), else computed once.

        Parameters
        ----------
        v : int
            A node index.

        Returns
        -------
        bool
        """
        return v in self.recomputed


@dataclass
class _Phases:
    """How a schedule runs each node: computations before and from its first backward node, and which
    forward values alive then a later step reads (the schedule's saved set)."""

    start: int  # step of the first backward computation
    before: np.ndarray  # computations per node before it
    after: np.ndarray  # computations per node from it on
    saved: frozenset[int]


def _loss(graph: Graph) -> int:
    """The loss node of an imported graph (its metadata names it)."""
    return graph.index[graph.metadata[METADATA_KEY]["loss"]]


def _phases(graph: Graph, schedule: Schedule) -> _Phases:
    kinds, nodes = schedule.kinds.tolist(), schedule.nodes.tolist()
    loss = _loss(graph)
    is_forward = graph.is_forward
    start = next((s for s, (k, v) in enumerate(zip(kinds, nodes)) if k == COMPUTE and not is_forward[v]), None)
    if start is None:
        raise ScheduleError(f"graph '{graph.name}': the schedule computes no backward node, so it has no "
                            "saved set for a training step")
    before = np.zeros(graph.n, dtype=np.int64)
    after = np.zeros(graph.n, dtype=np.int64)
    live: set[int] = set()
    for k, v in zip(kinds[:start], nodes[:start]):
        if k == COMPUTE:
            before[v] += 1
            live.add(v)
        elif k == FREE:
            live.discard(v)
    pending = {v for v in live if is_forward[v]}  # forward instances still alive since the backward began
    saved: set[int] = set()
    for s in range(start, len(kinds)):
        k, v = kinds[s], nodes[s]
        if k == COMPUTE:
            after[v] += 1
            if v != loss:  # the loss runs at the end of PyTorch's forward graph: what it reads is no saved value
                saved.update(u for u in graph.inputs[v] if u in pending)
            pending.discard(v)
        elif k == FREE:
            pending.discard(v)
    return _Phases(start, before, after, frozenset(saved))


def compiled_plan(graph: Graph, schedule: Schedule, simulation: Simulation | None = None) -> CompiledPlan:
    """The plan of ``schedule`` as ``torch.compile`` can run it: its saved set, its recomputations, and
    what differs from the schedule (module docstring, "The plan").

    The saved set is the forward values alive when the schedule's backward begins that a later step
    reads, random operators' values among those it recomputes added; ``as_compiled`` lowers it with
    the shared lowering (held recomputations), scored by the simulator (``as_compiled_peak``).

    Parameters
    ----------
    graph : Graph
        A graph imported from PyTorch (`remat_bench.torch.importer.import_model`).
    schedule : Schedule
        A valid schedule over ``graph``.
    simulation : Simulation or None
        The simulator's account of ``schedule`` when the caller has it (None: simulated here).

    Returns
    -------
    CompiledPlan

    Raises
    ------
    GraphError
        A graph not imported from PyTorch.
    ScheduleError
        A schedule the simulator refuses, one that moves values to the host, or one without a backward node.
    """
    if spec_of(graph) is None:
        raise GraphError(f"graph '{graph.name}' was not imported from PyTorch (no 'torch' model spec in its "
                         "metadata): torch.compile runs the model it came from")
    sim = simulation if simulation is not None else simulate(graph, schedule)
    if not sim.valid:
        raise ScheduleError(f"graph '{graph.name}': the schedule is not valid ({sim.violation}), so it has no plan")
    if schedule.moves:
        raise ScheduleError(f"graph '{graph.name}': the schedule copies values to the host and back, which "
                            "torch.compile's recompute decisions cannot say; train it in exact mode")
    phases = _phases(graph, schedule)
    random = random_nodes(graph)
    segments = tuple((v,) for v in graph.forward_indices)
    kept = set(phases.saved)
    while True:  # random operators the lowering would recompute are saved instead
        lowered = lower_plan(graph, Plan(frozenset(kept), segments), transient=False)
        counts = np.bincount(lowered.nodes[lowered.kinds == COMPUTE], minlength=graph.n)
        again = {v for v in random if counts[v] > 1} - kept
        if not again:
            break
        kept |= again
    as_compiled = Schedule(lowered.kinds, lowered.nodes, lowered.impls, method=schedule.method,
                           params=dict(schedule.params), budget=schedule.budget,
                           solver={"as_compiled": "the schedule's saved set kept, the rest recomputed once"})
    recomputed = frozenset(v for v in graph.forward_indices if counts[v] > 1)
    saved = frozenset(v for v in _phases(graph, as_compiled).saved if graph.is_forward[v]) - recomputed
    compiled_peak = simulate(graph, as_compiled).peak
    differences = _differences(graph, schedule, (sim.peak, compiled_peak), phases, as_compiled, counts, random)
    return CompiledPlan(graph, saved, recomputed, not differences, differences, as_compiled, compiled_peak)


def _differences(graph: Graph, schedule: Schedule, peaks: tuple[Number, Number], phases: _Phases,
                 as_compiled: Schedule, counts: np.ndarray, random: frozenset[int]) -> list[str]:
    """One sentence per way the schedule differs from its plan as compiled (``peaks``: the simulated peaks of
    the schedule and of the plan as compiled)."""
    ids = graph.ids
    said: set[int] = set()
    out: list[str] = []

    def say(v: int, sentence: str) -> None:
        said.add(v)
        out.append(sentence)

    sinks = {v for v in graph.forward_indices if not any(graph.is_forward[w] for w in graph.consumers[v])}
    for v in graph.forward_indices:
        before, after = int(phases.before[v]), int(phases.after[v])
        if before > 1:
            say(v, f"the schedule frees and recomputes '{ids[v]}' inside the forward ({before} computations "
                   "before the backward begins); compiled, the forward computes it once")
        if before == 0:
            say(v, f"the schedule first computes the forward node '{ids[v]}' after the backward has begun; "
                   "compiled, the forward computes it")
        if v in phases.saved and after:
            times = "" if after == 1 else f" {after} times"
            say(v, f"the schedule keeps '{ids[v]}' into the backward, then frees and recomputes it{times}; "
                   "compiled, it is saved and held until its last backward use")
        elif after > 1:
            say(v, f"'{ids[v]}' is recomputed {after} times in the backward; compiled, it is recomputed once, "
                   "before its first backward use, and held until its last")
        elif after and v in random:
            say(v, f"the schedule recomputes the random operator '{ids[v]}'; compiled, its draw is saved, "
                   "not drawn again")
        elif after and v in sinks:
            say(v, f"the schedule frees '{ids[v]}', which the loss reads, and recomputes it; compiled, it is "
                   "saved (the loss runs at the end of the forward)")
    for v in graph.backward_indices:
        if phases.before[v] + phases.after[v] > 1:
            say(v, f"the backward node '{ids[v]}' runs {int(phases.before[v] + phases.after[v])} times in the "
                   "schedule; compiled, once")
    ours = schedule.nodes[schedule.kinds == COMPUTE]
    theirs = as_compiled.nodes[as_compiled.kinds == COMPUTE]
    mine = np.bincount(ours, minlength=graph.n)
    for v in np.flatnonzero(mine != counts).tolist():
        if v not in said:
            say(v, f"'{ids[v]}' is computed {_times(int(mine[v]))} by the schedule and {_times(int(counts[v]))} "
                   "as compiled")
    if not out and not np.array_equal(ours, theirs):
        k = int(np.flatnonzero(ours != theirs)[0])
        out.append(f"the schedule runs its computations in another order: its {ordinal(k + 1)} computes "
                   f"'{ids[int(ours[k])]}' where the plan as compiled computes '{ids[int(theirs[k])]}' "
                   "(compiled, the forward runs in the trace's order, the backward in autograd's, and each "
                   "recomputation just before its first use)")
    peak, compiled_peak = peaks
    if not out and peak != compiled_peak:
        out.append(f"the schedule frees some values later than their last use (simulated peak {peak} "
                   f"against {compiled_peak}); compiled, each is freed after its last use")
    return out


def _times(k: int) -> str:
    return {1: "once", 2: "twice"}.get(k, f"{k} times")


# ---------------------------------------------------------------------- the joint graph


@dataclass(frozen=True)
class _Imported:
    """The imported graph's operators a joint graph's calls align with: (node, operator, output shape)."""

    graph: Graph
    spec: ModelSpec
    loss: int
    ops: tuple[tuple[int, str, tuple[int, ...] | None], ...]


def _imported(graph: Graph) -> _Imported:
    program = program_for_graph(graph)  # re-traced and checked against the file
    ops = tuple((i, SAME_OPERATOR.get(str(node.runs().target), str(node.runs().target)), first_shape(node.runs()))
                for i, node in enumerate(program.nodes)
                if node.role == OP and (node.forward or i == program.loss))
    return _Imported(graph, program.spec, program.loss, ops)


@dataclass
class _Alignment:
    """The joint graph's forward calls mapped to the imported graph's nodes, by FX node name."""

    node_of: dict[str, int]  # FX name of a node of an aligned call -> imported node
    calls: dict[int, list[str]]  # imported node -> FX names of its call's nodes
    base: dict[str, str | None]  # FX name -> FX name of the node owning its storage (None: fixed memory)
    unaligned: list[str]  # one sentence per call that could not be aligned


def _align(gm: fx.GraphModule, info: Any, imported: _Imported) -> _Alignment:
    """Align the joint graph's forward calls with the imported graph's nodes (module docstring)."""
    storages = Storages()
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            storages.claim(n.meta.get("val"), None)
    values = sort_fx_nodes(imported.spec, gm, storages)
    base = {n.name: (b.name if b is not None else None) for n, b in values.base.items()}
    calls: list[tuple[str, list[fx.Node]]] = []
    last: tuple[Any, str] | None = None
    for n in gm.graph.nodes:
        if n.op != "call_function" or info.is_required_bw(n) or n.meta.get("partitioner_tag") == "is_backward":
            continue
        seq, aten = n.meta.get("seq_nr"), n.meta.get("original_aten")
        if seq is None or aten is None:  # made by inductor's joint passes (constants), not by the model
            last = None
            continue
        key = (seq, str(aten))
        if key != last:
            calls.append((SAME_OPERATOR.get(str(aten), str(aten)), []))
            last = key
        calls[-1][1].append(n)
    theirs: dict[str, list[list[fx.Node]]] = {}
    for op, nodes in calls:
        if any(values.base.get(n) is n for n in nodes):  # it allocates: not a view
            theirs.setdefault(op, []).append(nodes)
    ours: dict[str, list[tuple[int, tuple[int, ...] | None]]] = {}
    for i, op, shape in imported.ops:
        ours.setdefault(op, []).append((i, shape))
    alignment = _Alignment({}, {}, base, [])
    ids = imported.graph.ids
    for op, found in theirs.items():
        mine = ours.get(op, [])
        if len(mine) != len(found):
            alignment.unaligned.append(f"the compiled forward runs {op} {len(found)} times, the imported graph "
                                       f"{len(mine)} times: those calls are left to the partitioner")
            continue
        for k, (nodes, (i, shape)) in enumerate(zip(found, mine)):
            main = next((n for n in nodes if str(n.target) == op), nodes[-1])
            if not same_call(op, first_shape(main), shape):
                alignment.unaligned.append(f"the {ordinal(k + 1)} {op} has shape {first_shape(main)} in the compiled "
                                           f"graph and {shape} in the imported graph ('{ids[i]}'): left to the "
                                           "partitioner")
                continue
            alignment.calls[i] = [n.name for n in nodes]
            alignment.node_of.update((n.name, i) for n in nodes)
    return alignment


def _tag(gm: fx.GraphModule, info: Any, alignment: _Alignment, plan: CompiledPlan, loss: int) -> set[str]:
    """Put the plan's decisions on the joint graph's nodes (module docstring, "The tags"); returns the
    names of the nodes of the calls the plan recomputes."""
    by_name = {n.name: n for n in gm.graph.nodes}
    recomputed: set[str] = set()
    for v, names in alignment.calls.items():
        members = {by_name[name] for name in names}
        if plan.recompute(v):
            results = set()
            recomputed.update(names)
        elif v == loss:
            results = members
        else:  # what leaves the call (its outputs), the nodes owning their storage, tuples with their items
            results = {n for n in members if n.op == "output" or any(u not in members for u in n.users)}
            owners = {by_name[b] for n in results if (b := alignment.base.get(n.name)) is not None}
            results |= owners & members
            tuples = {n for n in results if isinstance(n.meta.get("val"), (tuple, list))}
            tuples |= {n.args[0] for n in results if n.target is operator.getitem and n.args[0] in members}
            results |= tuples | {u for t in tuples for u in t.users if u.target is operator.getitem}
        for n in members:
            if n in results:
                n.meta["recompute"] = CheckpointPolicy.MUST_SAVE
            elif plan.recompute(v) or alignment.base.get(n.name) == n.name:  # views are left to the partitioner
                n.meta["recompute"] = CheckpointPolicy.MUST_RECOMPUTE
    for n in gm.graph.nodes:  # backward operators that read forward values only run in the backward
        if (n.op == "call_function" and n.meta.get("partitioner_tag") == "is_backward"
                and not info.is_required_bw(n) and "recompute" not in n.meta):
            n.meta["recompute"] = CheckpointPolicy.MUST_RECOMPUTE
    return recomputed


# ---------------------------------------------------------------------- the check


@dataclass
class PartitionCheck:
    """What the compiled partition saves and recomputes, read from its forward and backward graphs, mapped
    to the imported graph's nodes, set against the plan.

    ``saved``: nodes (the loss aside) some value of which the forward graph saves; ``saved_bytes``: the
    bytes of those values (distinct storages), beside ``plan_saved_bytes``, the memory of the plan's saved
    nodes; ``saved_inputs``: saved values held in parameters or the batch. ``recomputed``: nodes whose
    tagged operators the backward graph runs. ``inner_recomputed``: nodes of which the backward recomputes
    inner operators only (decomposed pieces, rebuilt from saved inputs). ``mismatches``: one sentence per
    difference from the plan, and per call that could not be aligned.
    """

    saved: frozenset[int]
    recomputed: frozenset[int]
    inner_recomputed: frozenset[int]
    saved_bytes: int
    plan_saved_bytes: int
    saved_inputs: int
    mismatches: list[str]


def _check(forward: fx.GraphModule, backward: fx.GraphModule, num_fwd_outputs: int, alignment: _Alignment,
           recomputing: set[str], plan: CompiledPlan, loss: int) -> PartitionCheck:
    ids = plan.graph.ids
    saved: set[int] = set()
    tensors: list[torch.Tensor] = []
    inputs = 0
    mismatches = list(alignment.unaligned)
    for n in output_leaves(forward)[num_fwd_outputs:]:
        if not isinstance(n, fx.Node) or not isinstance(n.meta.get("val"), torch.Tensor):
            continue  # symbolic sizes, RNG states
        owner = alignment.base.get(n.name, n.name)
        if owner is None:
            inputs += 1
            continue
        tensors.append(n.meta["val"])
        v = alignment.node_of.get(owner)
        if v is None:
            if alignment.calls:  # else the alignment's sentence says why
                mismatches.append(f"compiled, the forward saves '{n.name}', which belongs to no node of the plan")
        elif v != loss:
            saved.add(v)
    recomputed: set[int] = set()
    inner: set[int] = set()
    for n in backward.graph.nodes:
        v = alignment.node_of.get(n.name) if n.op == "call_function" else None
        if v is not None and v != loss:
            (recomputed if n.name in recomputing else inner).add(v)
    for v in sorted(saved - plan.saved):
        what = "recomputes" if plan.recompute(v) else "does not keep for the backward"
        mismatches.append(f"compiled, the forward saves '{ids[v]}', which the plan {what}")
    for v in sorted(plan.saved - saved - plan.recomputed):
        if v in alignment.calls:
            mismatches.append(f"compiled, the forward does not save '{ids[v]}', which the plan keeps for the "
                              "backward")
    for v in sorted(plan.recomputed - recomputed):
        if v in alignment.calls:
            mismatches.append(f"compiled, the backward does not recompute '{ids[v]}', which the plan recomputes")
    for v in sorted(recomputed - plan.recomputed):
        mismatches.append(f"compiled, the backward recomputes '{ids[v]}', which the plan saves")
    plan_bytes = int(sum(int(plan.graph.memory[v]) for v in plan.saved))
    return PartitionCheck(frozenset(saved), frozenset(recomputed), frozenset(inner - recomputed),
                          distinct_storage_bytes(tensors), plan_bytes, inputs, mismatches)


class CompileError(RematBenchError):
    """``torch.compile`` did not compile a training step (it ran eager PyTorch instead)."""


class PlanPartitioner(CustomPartitionerFn):
    """Inductor's partitioner with the plan's tags on the joint graph; keeps what each partition did.

    Set as ``torch._inductor.config.custom_partitioner_fn`` (`compile_training_step` does). ``checks``:
    one `PartitionCheck` per compilation, the latest last.
    """

    def __init__(self, plan: CompiledPlan) -> None:
        self.plan = plan
        self.imported = _imported(plan.graph)
        self.checks: list[PartitionCheck] = []

    def __call__(self, gm: fx.GraphModule, joint_inputs: Sequence[object],
                 **kwargs: Any) -> tuple[fx.GraphModule, fx.GraphModule]:
        """Tag ``gm`` from the plan, partition it with the min cut, and record the check.

        Parameters
        ----------
        gm : fx.GraphModule
            The joint graph, after inductor's joint-graph passes.
        joint_inputs : Sequence of object
            Its inputs (fake tensors).
        **kwargs : Any
            ``num_fwd_outputs``, ``static_lifetime_input_indices`` and ``compiler``, as inductor passes them.

        Returns
        -------
        tuple of (fx.GraphModule, fx.GraphModule)
            The forward and the backward graph.
        """
        num_fwd_outputs = int(kwargs["num_fwd_outputs"])
        static = list(kwargs.get("static_lifetime_input_indices") or [])
        info = partitioners.classify_nodes(gm, static, num_fwd_outputs)
        refused: list[str] = []
        try:
            alignment = _align(gm, info, self.imported)
        except RematBenchError as exc:  # a joint graph remat-bench cannot read: PyTorch's own partition
            alignment = _Alignment({}, {}, {}, [f"the compiled joint graph cannot be aligned ({exc}); compiled, "
                                                "PyTorch's own min cut decides what is saved"])
        recomputing = _tag(gm, info, alignment, self.plan, self.imported.loss)
        try:
            # A refused cut writes the joint graph into the working folder: here it is one sentence instead.
            with mock.patch.object(partitioners, "_get_unique_path", lambda *_: os.devnull):
                forward, backward = partitioners.min_cut_rematerialization_partition(gm, joint_inputs, **kwargs)
        except RuntimeError as exc:  # the tags leave no cut: partition as torch.compile would, and say so
            for n in gm.graph.nodes:
                n.meta.pop("recompute", None)
            recomputing = set()
            refused.append(f"the partitioner refused the plan's tags ({first_line(exc)}); "
                           "compiled, PyTorch's own min cut decides what is saved")
            forward, backward = partitioners.min_cut_rematerialization_partition(gm, joint_inputs, **kwargs)
        check = _check(forward, backward, num_fwd_outputs, alignment, recomputing, self.plan, self.imported.loss)
        check.mismatches[:0] = refused
        self.checks.append(check)
        return forward, backward

    def uuid(self) -> Any | None:
        """No cache key: inductor's caches are bypassed, so every compilation partitions (and is checked).

        Returns
        -------
        None
        """
        return None


class _Recorder(CustomPartitionerFn):
    """The min-cut partitioner as inductor calls it, recording the bytes each forward graph saves."""

    def __init__(self) -> None:
        self.saved_bytes: list[int] = []

    def __call__(self, gm: fx.GraphModule, joint_inputs: Sequence[object],
                 **kwargs: Any) -> tuple[fx.GraphModule, fx.GraphModule]:
        forward, backward = partitioners.min_cut_rematerialization_partition(gm, joint_inputs, **kwargs)
        indices = set(kwargs.get("static_lifetime_input_indices") or [])
        static = {n.name for i, n in enumerate(n for n in forward.graph.nodes if n.op == "placeholder")
                  if i in indices}
        self.saved_bytes.append(distinct_storage_bytes(
            n.meta.get("val") for n in output_leaves(forward)[int(kwargs["num_fwd_outputs"]):]
            if isinstance(n, fx.Node) and n.op != "placeholder" and n.name not in static))
        return forward, backward

    def uuid(self) -> Any | None:
        return None


# ---------------------------------------------------------------------- training steps


class CompiledStep:
    """A compiled training step: ``loss = step(inputs, labels)`` runs the forward and the backward and
    adds the parameters' gradients into their ``.grad``, as ``loss.backward()`` does.

    The step compiles at its first call (and again when ``torch.compile`` recompiles, for another
    shape). ``plan`` and ``check`` (None before the first call) belong to a step compiled with a plan;
    ``saved_bytes`` records what each compiled forward graph saves (activations, in bytes).
    """

    def __init__(self, module: nn.Module, compiled: Any, partitioner: PlanPartitioner | _Recorder,
                 plan: CompiledPlan | None = None, memory_budget: float | None = None,
                 seed: int | None = None) -> None:
        self.module = module
        self.compiled = compiled
        self.partitioner = partitioner
        self.plan = plan
        self.memory_budget = memory_budget
        self.seed = seed  # not None: random operators draw eager's seeded masks (module docstring)

    def __call__(self, inputs: torch.Tensor, labels: torch.Tensor, step: int = 0) -> torch.Tensor:
        """One training step: the loss, and the gradients added into the parameters' ``.grad``.

        Parameters
        ----------
        inputs : torch.Tensor
            The batch, on the module's device.
        labels : torch.Tensor
            Its labels.
        step : int
            The training step: with seeded randomness, its random operators draw this step's masks.

        Returns
        -------
        torch.Tensor
            The loss, detached.

        Raises
        ------
        CompileError
            ``torch.compile`` ran the step as eager PyTorch (its recompile limit reached).
        """
        with self._config(step, inputs.device):
            loss = self.compiled(inputs, labels)
            loss.backward()
        if not self._partitioned():
            raise CompileError("torch.compile ran the training step without compiling it: dynamo fell back to "
                               "eager PyTorch, most likely at its recompile limit (torch._dynamo.config."
                               "recompile_limit compiled versions of one model's forward in this process); "
                               "torch._dynamo.reset() clears them")
        return loss.detach()

    def _partitioned(self) -> bool:
        """Whether a compilation went through the step's partitioner (it records every one)."""
        if isinstance(self.partitioner, PlanPartitioner):
            return bool(self.partitioner.checks)
        return bool(self.partitioner.saved_bytes)

    @contextlib.contextmanager
    def _config(self, step: int, device: torch.device) -> Iterator[None]:
        patches: dict[str, Any] = {"enable_autograd_cache": False}
        if self.memory_budget is not None:
            patches["activation_memory_budget"] = self.memory_budget
        with contextlib.ExitStack() as stack:
            stack.enter_context(functorch_config.patch(patches))
            stack.enter_context(logger_quiet(partitioners.__name__, logging.ERROR))
            if self.seed is not None:
                stack.enter_context(dropout_as_imported())
                stack.enter_context(seeded_random_ops(self.seed, step, device, compiled=True))
            yield

    @property
    def check(self) -> PartitionCheck | None:
        """The latest compilation's `PartitionCheck` (None before the first call, or without a plan)."""
        if isinstance(self.partitioner, PlanPartitioner) and self.partitioner.checks:
            return self.partitioner.checks[-1]
        return None

    @property
    def saved_bytes(self) -> int | None:
        """Bytes of activations the latest compiled forward graph saves (None before the first call)."""
        if isinstance(self.partitioner, PlanPartitioner):
            return self.check.saved_bytes if self.check is not None else None
        return self.partitioner.saved_bytes[-1] if self.partitioner.saved_bytes else None

    @property
    def differences(self) -> list[str]:
        """The plan's differences from its schedule, then the compiled partition's from the plan."""
        found = list(self.plan.differences) if self.plan is not None else []
        return found + (list(self.check.mismatches) if self.check is not None else [])

    @property
    def exact(self) -> bool:
        """Whether what runs is the schedule: the plan exact and the partition as planned (once compiled)."""
        return self.plan is not None and self.check is not None and not self.differences


# What runs the partitioned graphs: inductor, or AOTAutograd's graphs as they are (inductor's decompositions
# and the same partition, no fusion and no C++: for checking a plan in seconds).
BACKENDS = ("inductor", "aot_eager")


def _compiled(module: nn.Module, partitioner: CustomPartitionerFn, backend: str, reuse: bool = True,
              aten_random: bool = False) -> Any:
    """``module`` under ``torch.compile`` with ``partitioner``; ``reuse=False`` turns off inductor's buffer
    reuse (module docstring, "Memory"), ``aten_random`` leaves random draws to ATen ("Randomness")."""
    if backend == "inductor":
        return torch.compile(module, backend="inductor", dynamic=False,
                             options={"custom_partitioner_fn": partitioner, "allow_buffer_reuse": reuse,
                                      "fallback_random": aten_random})
    if backend == "aot_eager":
        from torch._dynamo.backends.common import aot_autograd
        from torch._dynamo.backends.debugging import get_nop_func
        from torch._inductor.compile_fx import select_decomp_table

        compiler = aot_autograd(fw_compiler=get_nop_func(), bw_compiler=get_nop_func(),
                                decompositions=select_decomp_table,
                                partition_fn=functools.partial(partitioner, compiler="inductor"),
                                keep_inference_input_mutations=True)
        return torch.compile(module, backend=compiler, dynamic=False)
    raise ValueError(f"backend '{backend}' is not one of {', '.join(BACKENDS)}")


def compile_training_step(step_module: nn.Module, plan: CompiledPlan, backend: str = "inductor") -> CompiledStep:
    """``step_module`` under ``torch.compile`` (inductor) with ``plan``'s recompute decisions on its joint
    graph (module docstring, "The mechanism").

    Inductor compiles for the device of the module and the batch (C++ on the CPU, Triton on CUDA), with
    its buffer reuse off (module docstring, "Memory"); a graph with random operators draws eager's seeded masks
    ("Randomness").

    Parameters
    ----------
    step_module : nn.Module
        A `remat_bench.torch.zoo.TrainingStep` (``forward(inputs, labels)`` returns the loss) of the model
        the plan's graph was imported from (`remat_bench.torch.spec.build_step` of its spec), in
        training mode.
    plan : CompiledPlan
        From `compiled_plan`.
    backend : str
        ``inductor`` (fused kernels), or ``aot_eager``: the same decomposed joint graph and partition, its
        graphs run as they are (no fusion, no C++ compiler: seconds, for checking a plan).

    Returns
    -------
    CompiledStep
        ``step(inputs, labels)`` returns the loss and fills the gradients; after the first call its
        ``check`` says what the compiled forward saves and the backward recomputes, and ``differences``
        the plan's differences and the partition's.

    Raises
    ------
    GraphError
        The plan's graph no longer re-traces to the same nodes (re-import it).
    ValueError
        Another backend.
    """
    partitioner = PlanPartitioner(plan)
    seed = partitioner.imported.spec.seed if random_nodes(plan.graph) else None
    compiled = _compiled(step_module, partitioner, backend, reuse=False, aten_random=seed is not None)
    return CompiledStep(step_module, compiled, partitioner, plan=plan, seed=seed)


def compile_with_memory_budget(step_module: nn.Module, fraction: float | None = None,
                               backend: str = "inductor") -> CompiledStep:
    """``step_module`` under ``torch.compile`` with PyTorch's own memory-budget partitioner: the comparison.

    ``torch._functorch.config.activation_memory_budget = fraction`` while it compiles (0 saves the inputs
    alone, 1 what the runtime-optimal min cut saves; `remat_bench.methods.torch_budget` explains it).
    ``fraction=None`` is plain ``torch.compile``: its own min cut, the budget left at its default.

    Parameters
    ----------
    step_module : nn.Module
        A training step whose ``forward(inputs, labels)`` returns the loss.
    fraction : float or None
        The activation memory budget, 0 to 1; None for torch.compile's default.
    backend : str
        ``inductor`` or ``aot_eager`` (`compile_training_step`).

    Returns
    -------
    CompiledStep
        ``step(inputs, labels)`` returns the loss and fills the gradients; ``saved_bytes`` says what the
        compiled forward saves.

    Raises
    ------
    ValueError
        A fraction outside [0, 1], or another backend.
    """
    if fraction is not None and not 0.0 <= fraction <= 1.0:
        raise ValueError(f"activation_memory_budget is a fraction from 0 to 1, not {fraction}")
    recorder = _Recorder()
    return CompiledStep(step_module, _compiled(step_module, recorder, backend), recorder, memory_budget=fraction)
