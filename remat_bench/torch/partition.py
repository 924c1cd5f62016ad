"""PyTorch's own memory-budget partitioner, run on the model an imported graph came from.

``torch.compile`` splits a training step's joint forward-backward graph into a forward and
a backward graph with the min-cut partitioner
(``torch._functorch.partitioners.min_cut_rematerialization_partition``, torch 2.13). With
``torch._functorch.config.activation_memory_budget = b`` (0 to 1) it saves at most a
fraction ``b`` of the activation memory between two extremes: 0 saves the inputs alone
(everything else recomputed), 1 saves what the runtime-optimal min cut saves. In between,
a 0/1 knapsack (``activation_memory_budget_solver``) picks the operators that may not be
recomputed, weighing each by its size and by its runtime
(``activation_memory_budget_runtime_estimator``: FLOPs by default), and a last min cut
decides what is saved. The backward graph recomputes every other forward value it needs.

This module runs that partitioner for real:

1. `joint_graph` rebuilds the model and its batch from the graph's spec (as the importer
   does, with fake tensors: no memory, any size) and traces the joint graph exactly as
   AOTAutograd hands it to the partitioner: ``aot_function`` over the training step, with
   a partition function that captures the joint graph and stops there (nothing is
   compiled). Traced once per graph and process; each partition works on a copy, since
   the partitioner rewrites the graph it is given;
2. `partition` partitions at a knob value under ``torch._functorch.config.patch``, with
   the parameters and buffers as static-lifetime inputs (what ``torch.compile`` passes for
   a module's parameters and buffers: saving them is free), and reads off the values the
   forward graph saves (its outputs after the real ones) and the forward operators the
   backward graph recomputes;
3. both are mapped to the imported graph's nodes.

The mapping. Both graphs are make_fx traces of the same forward pass, but not of the same
program: AOTAutograd functionalises batch norm into ``_native_batch_norm_legit_functional``
(which also returns the new running statistics) where the importer's trace keeps
``native_batch_norm``, and it adds ``detach`` nodes, so FX names can differ. The forward
operators that allocate memory (views fold into the value whose storage they share, as the
importer folds them) are aligned by operator: the k-th of a kind in PyTorch's forward pass,
in execution order, is the k-th of that kind in the imported graph, with the same output
shape. Dropout is traced as the importer traces it (`dropout_as_imported`), and a clone that
AOTAutograd makes of an in-place operator's input (for its backward) maps to the value it copies.
A value maps to the node owning its storage; a value stored in a parameter, buffer
or the batch is fixed memory, no node. An operator that cannot be aligned fails the
partition that saves or recomputes it, in one sentence.

Granularity. A node of the imported graph holds all outputs of a multi-output operator
(``native_batch_norm``: the output, mean and inverse deviation); where PyTorch saves only
some of them, the whole node is kept (`TorchPlan.partial` counts such nodes).
"""

from __future__ import annotations

import contextlib
import copy
import logging
import warnings
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch import fx
from torch._C import DispatchKey
from torch._functorch import config as functorch_config
from torch._functorch import partitioners
from torch._functorch.aot_autograd import aot_function
from torch.func import functional_call

from remat_bench.core.errors import RematBenchError
from remat_bench.core.graph import Graph
from remat_bench.torch import logger_quiet
from remat_bench.torch.build import SharedFakeMode
from remat_bench.torch.importer import program_for_graph
from remat_bench.torch.program import OP, FxValues, Program, Storages, distinct_storage_bytes, sort_fx_nodes
from remat_bench.torch.spec import ModelSpec, build_step, fake_batch

# AOTAutograd's name for an operator the importer's trace records under another (its functional form).
SAME_OPERATOR = {"aten._native_batch_norm_legit_functional.default": "aten.native_batch_norm.default",
                 # The uninitialised buffer dropout draws its noise into: functionalization records some as
                 # ``empty.memory_format``, in either trace (both allocate the value's shape and dtype).
                 "aten.empty.memory_format": "aten.empty_like.default"}

# Joint graphs traced in this process, by graph hash; the bisection partitions one many times.
_CACHE_SIZE = 2
_JOINTS: OrderedDict[str, JointGraph] = OrderedDict()


class PartitionError(RematBenchError):
    """PyTorch's partition of a model cannot be mapped onto its imported graph."""


@dataclass
class JointGraph:
    """AOTAutograd's joint graph of an imported graph's model, and how its forward values map to nodes.

    ``owner``: FX name of a forward value -> index of the graph node owning its storage (None: fixed
    memory, a parameter, buffer or the batch). ``unaligned``: FX name -> why it has no node.
    ``forward_ops``: FX names of the forward operators that allocate (what a recomputation runs).
    """

    graph: Graph
    module: fx.GraphModule
    inputs: list[Any]
    num_fwd_outputs: int
    static_inputs: list[int]
    owner: dict[str, int | None]
    unaligned: dict[str, str]
    forward_ops: frozenset[str]
    values: dict[str, fx.Node]  # FX name -> node of the joint graph

    def bytes_of(self, names: list[str]) -> int:
        """Bytes of the distinct storages of the joint graph's values ``names``.

        Parameters
        ----------
        names : list of str
            FX names of values of the joint graph; a storage several of them share counts once.

        Returns
        -------
        int
        """
        return distinct_storage_bytes(self.values[name].meta.get("val") for name in names)

    def node_of(self, name: str, what: str) -> int | None:
        """The node holding FX value ``name`` (None: fixed memory); PartitionError when it has none.

        Parameters
        ----------
        name : str
            The FX name of a forward value of the joint graph.
        what : str
            What PyTorch does with it (``saves the value``, ``recomputes``), for the error's sentence.

        Returns
        -------
        int or None
            The index of the imported graph's node owning its storage; None for fixed memory.

        Raises
        ------
        PartitionError
            A value that cannot be aligned with a node, and why.
        """
        if name in self.owner:
            return self.owner[name]
        why = self.unaligned.get(name, "it is not a forward value of PyTorch's trace")
        raise PartitionError(f"graph '{self.graph.name}': PyTorch {what} '{name}', which cannot be aligned with a "
                             f"node of the imported graph: {why}")


@dataclass
class TorchPlan:
    """One partition: what the forward graph saves and what the backward graph recomputes (node indices).

    ``partial`` counts the saved nodes PyTorch saves only some outputs of (a multi-output operator's),
    ``partial_bytes`` what holding them whole costs beyond its choice.
    """

    fraction: float
    estimator: str
    saved: frozenset[int]
    recomputed: frozenset[int]
    saved_inputs: int  # saved values held in parameters, buffers or the batch (fixed memory)
    partial: int
    partial_bytes: int
    saved_values: tuple[fx.Node, ...]  # the forward graph's saved activations (not inputs, nor views of them)
    recomputed_ops: tuple[fx.Node, ...]  # the forward operators in the backward graph

    def estimates(self) -> tuple[int, float]:
        """PyTorch's own estimates: (bytes of the activations saved, runtime of the recomputed operators).

        Sizes by the partitioner's ``_size_of`` over the saved values that are activations (a view of a
        parameter or of the batch is fixed memory, not counted); runtimes by its ``estimate_runtime``
        (FLOPs with the ``flops`` estimator: at least 1 per operator) over the forward operators the
        backward graph recomputes: the two quantities its knapsack trades.

        Returns
        -------
        tuple of (int, float)
            Bytes saved, and the runtime in the estimator's unit (FLOPs for ``flops``).
        """
        size = sum(partitioners._size_of(n) for n in self.saved_values)
        with functorch_config.patch(activation_memory_budget_runtime_estimator=self.estimator):
            runtime = sum(float(partitioners.estimate_runtime(n)) for n in self.recomputed_ops)
        return int(size), runtime


def joint_graph(graph: Graph) -> JointGraph:
    """The joint graph of ``graph``'s model, traced once per process (the last `_CACHE_SIZE` graphs kept).

    Parameters
    ----------
    graph : Graph
        A graph imported from PyTorch.

    Returns
    -------
    JointGraph
        Shared by the calls for the same graph: partition a copy (as `partition` does), not it.

    Raises
    ------
    GraphError
        A graph not imported from PyTorch, or whose model now traces to other nodes.
    PartitionError
        AOTAutograd traced the step without handing over a joint graph.
    """
    key = graph.sha256
    joint = _JOINTS.get(key)
    if joint is None:
        program = program_for_graph(graph)  # re-traced and checked against the file
        module, inputs, num_fwd_outputs, n_static = _trace_joint(program.spec)
        module.graph.eliminate_dead_code()  # what the partitioner does first; the alignment needs it too
        module.recompile()
        joint = _aligned(graph, program, module, inputs, num_fwd_outputs, list(range(n_static)))
        _JOINTS[key] = joint
        while len(_JOINTS) > _CACHE_SIZE:
            _JOINTS.popitem(last=False)
    _JOINTS.move_to_end(key)
    return joint


class _Captured(Exception):
    """Raised by the partition function: AOTAutograd stops once it has handed over the joint graph."""

    def __init__(self, module: fx.GraphModule, inputs: list[Any], num_fwd_outputs: int) -> None:
        super().__init__("joint graph captured")
        self.module, self.inputs, self.num_fwd_outputs = module, inputs, num_fwd_outputs


def _trace_joint(spec: ModelSpec) -> tuple[fx.GraphModule, list[Any], int, int]:
    """AOTAutograd's joint graph of the training step of ``spec``, with fake tensors.

    Returns the joint module, its inputs, the number of forward outputs (the loss and the
    updated buffers) and the number of parameters and buffers (the first inputs).
    """
    mode = SharedFakeMode()
    step = build_step(spec, mode)
    with mode:
        inputs, labels = fake_batch(spec)
        params = {k: p.detach().requires_grad_(True) for k, p in step.named_parameters()}
        buffers = dict(step.named_buffers())
    names, buffer_names = list(params), list(buffers)

    def loss_fn(param_values: list[torch.Tensor], buffer_values: list[torch.Tensor],
                x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        state = dict(zip(names, param_values))
        state.update(zip(buffer_names, buffer_values))
        return functional_call(step, state, (x, y))

    def capture(joint: fx.GraphModule, joint_inputs: list[Any], *, num_fwd_outputs: int, **_: Any) -> Any:
        raise _Captured(joint, joint_inputs, num_fwd_outputs)

    compiled = aot_function(loss_fn, fw_compiler=lambda gm, _: gm, partition_fn=capture)
    try:
        with mode, dropout_as_imported():
            compiled(list(params.values()), list(buffers.values()), inputs, labels)
    except _Captured as got:
        return got.module, got.inputs, got.num_fwd_outputs, len(names) + len(buffer_names)
    raise PartitionError(f"model '{spec.model}': AOTAutograd traced the training step without partitioning it")


@contextlib.contextmanager
def dropout_as_imported() -> Iterator[None]:
    """Trace ``aten.dropout`` as the importer's trace (and eager autograd on the CPU) runs it.

    Under AOTAutograd's Python dispatcher, ``torch._decomp`` turns ``dropout`` into
    ``native_dropout`` (output and a boolean mask); the importer's trace goes through ATen's own
    composite, which on the CPU draws a Bernoulli noise, scales it and multiplies (``bernoulli``,
    ``div``, ``mul``). Without the Python kernels the joint graph takes the same path, so its
    forward operators align with the imported graph's one for one.

    Yields
    ------
    None
        While the block runs; the Python kernels are put back after it.
    """
    op = torch.ops.aten.dropout.default
    keys = (DispatchKey.Autograd, DispatchKey.CompositeImplicitAutograd)
    saved = {k: op.py_kernels.pop(k) for k in keys if k in op.py_kernels}
    op._dispatch_cache.clear()
    try:
        yield
    finally:
        op.py_kernels.update(saved)
        op._dispatch_cache.clear()


def _aligned(graph: Graph, program: Program, module: fx.GraphModule, inputs: list[Any], num_fwd_outputs: int,
             static_inputs: list[int]) -> JointGraph:
    """The joint graph with its forward values mapped to ``graph``'s nodes (module docstring, "The mapping")."""
    storages = Storages()
    for n in module.graph.nodes:
        if n.op == "placeholder":
            storages.claim(n.meta.get("val"), None)
    values: FxValues = sort_fx_nodes(program.spec, module, storages)
    info = partitioners.classify_nodes(module, static_inputs, num_fwd_outputs)
    ours: dict[str, list[int]] = {}
    for i, node in enumerate(program.nodes):
        if node.role == OP and (node.forward or i == program.loss):
            target = str(node.runs().target)
            ours.setdefault(SAME_OPERATOR.get(target, target), []).append(i)
    theirs: dict[str, list[fx.Node]] = {}
    for n in module.graph.nodes:  # execution order
        if n in values.allocates and info.is_required_fw(n):
            theirs.setdefault(SAME_OPERATOR.get(str(n.target), str(n.target)), []).append(n)
    index: dict[fx.Node, int] = {}
    unaligned: dict[str, str] = {}
    for op, nodes in theirs.items():
        mine = ours.get(op, [])
        if len(mine) != len(nodes):
            for n in nodes:
                unaligned[n.name] = (f"PyTorch's forward pass runs {op} {len(nodes)} times, the imported graph "
                                     f"{len(mine)} times")
            continue
        for k, (n, i) in enumerate(zip(nodes, mine)):
            theirs_shape, ours_shape = first_shape(n), first_shape(program.nodes[i].runs())
            if not same_call(op, theirs_shape, ours_shape):
                unaligned[n.name] = (f"the {ordinal(k + 1)} {op} has shape {theirs_shape} in PyTorch's trace and "
                                     f"{ours_shape} in the imported graph ('{graph.ids[i]}')")
            else:
                index[n] = i
    owner: dict[str, int | None] = {}
    for n, base in values.base.items():
        if base is None:
            owner[n.name] = None
        elif base in index:
            owner[n.name] = index[base]
        elif base.name in unaligned:
            unaligned.setdefault(n.name, unaligned[base.name])
    # A clone AOTAutograd adds to keep the input of an in-place operator (``hardswish_``) for the backward
    # holds the value it copies; the imported graph's backward reads that value itself.
    for n in module.graph.nodes:
        if (n.target is torch.ops.aten.clone.default and n.name not in owner and n.name not in unaligned
                and isinstance(n.args[0], fx.Node) and n.args[0].name in owner):
            owner[n.name] = owner[n.args[0].name]
    forward_ops = frozenset(n.name for nodes in theirs.values() for n in nodes)
    return JointGraph(graph, module, inputs, num_fwd_outputs, static_inputs, owner, unaligned, forward_ops,
                      {n.name: n for n in module.graph.nodes})


def same_call(op: str, theirs: tuple[int, ...] | None, ours: tuple[int, ...] | None) -> bool:
    """Whether the k-th call of ``op`` in a PyTorch trace, of output shape ``theirs``, is the k-th node of
    ``op`` in the imported graph, of output shape ``ours``: same shape, except for an uninitialised buffer
    (``empty_like``), which may be traced at its final shape or resized into it later: order decides.

    Parameters
    ----------
    op : str
        The operator, as `SAME_OPERATOR` names it.
    theirs, ours : tuple of int or None
        The two output shapes (`first_shape`).

    Returns
    -------
    bool
    """
    return theirs == ours or op == "aten.empty_like.default"


def first_shape(n: fx.Node) -> tuple[int, ...] | None:
    """The shape of the first tensor an FX node outputs (None: it outputs no tensor).

    Parameters
    ----------
    n : fx.Node
        A traced node, its value in ``meta["val"]``.

    Returns
    -------
    tuple of int or None
    """
    for t in pytree.tree_leaves(n.meta.get("val")):
        if isinstance(t, torch.Tensor):
            return tuple(int(d) for d in t.shape)
    return None


def ordinal(k: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``4th`` ... ``11th`` ... ``21st``: for the alignment's sentences.

    Parameters
    ----------
    k : int
        At least 1.

    Returns
    -------
    str
    """
    return f"{k}{'th' if 10 <= k % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(k % 10, 'th')}"


def output_leaves(module: fx.GraphModule) -> list[Any]:
    """What a graph module returns, flattened, in order (FX nodes, and None where it returns nothing).

    Parameters
    ----------
    module : fx.GraphModule
        A forward or backward graph of a partition.

    Returns
    -------
    list
    """
    output = next(n for n in reversed(module.graph.nodes) if n.op == "output")
    return list(pytree.tree_leaves(output.args[0]))


def partition(joint: JointGraph, fraction: float, solver: str = "dp", estimator: str = "flops") -> TorchPlan:
    """Partition a copy of the joint graph with ``activation_memory_budget = fraction``; map the result.

    ``solver`` and ``estimator`` set ``activation_memory_budget_solver`` and
    ``activation_memory_budget_runtime_estimator`` (torch validates them; the method lists the values
    torch 2.13 accepts: `remat_bench.methods.torch_budget`).

    Parameters
    ----------
    joint : JointGraph
        From `joint_graph`; not changed.
    fraction : float
        ``activation_memory_budget``, 0 to 1.
    solver : str
        The knapsack solver.
    estimator : str
        The runtime estimator.

    Returns
    -------
    TorchPlan
        The saved and recomputed nodes of the imported graph.

    Raises
    ------
    PartitionError
        A value PyTorch saves, or an operator it recomputes, that cannot be aligned with a node.
    """
    with warnings.catch_warnings():  # copying the fake tensors' pytree specs warns about a deprecated class
        warnings.simplefilter("ignore", FutureWarning)
        module = copy.deepcopy(joint.module)
    with functorch_config.patch(activation_memory_budget=fraction, activation_memory_budget_solver=solver,
                                activation_memory_budget_runtime_estimator=estimator), _partitioner_quiet():
        forward, backward = partitioners.min_cut_rematerialization_partition(
            module, joint.inputs, num_fwd_outputs=joint.num_fwd_outputs,
            static_lifetime_input_indices=joint.static_inputs)
    saved_values = [n for n in [a for a in output_leaves(forward) if isinstance(a, fx.Node)][joint.num_fwd_outputs:]
                    if isinstance(n.meta.get("val"), torch.Tensor)]
    saved: dict[int, list[str]] = {}
    inputs = 0
    for n in saved_values:
        v = joint.node_of(n.name, "saves the value")
        if v is None:
            inputs += 1
        else:
            saved.setdefault(v, []).append(n.name)
    recomputed_ops = tuple(n for n in backward.graph.nodes if n.op == "call_function" and n.name in joint.forward_ops)
    recomputed = frozenset(v for n in recomputed_ops if (v := joint.node_of(n.name, "recomputes")) is not None)
    short = {v: int(joint.graph.memory[v]) - joint.bytes_of(names) for v, names in saved.items()}
    short = {v: missing for v, missing in short.items() if missing > 0}
    return TorchPlan(fraction, estimator, frozenset(saved), recomputed, inputs, len(short), sum(short.values()),
                     tuple(n for n in saved_values if joint.owner[n.name] is not None), recomputed_ops)


def _partitioner_quiet() -> contextlib.AbstractContextManager[None]:
    """Keep the partitioner's warnings (an experimental solver warns on every call) unless torch's logs
    were asked for."""
    return logger_quiet(partitioners.__name__, logging.ERROR)
