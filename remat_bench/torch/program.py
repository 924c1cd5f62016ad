"""A traced training step (`remat_bench.torch.trace`) lowered to remat-bench nodes: the `Program`.

Lowering (docs/design.md section 2: a node is an operator and the one value it
produces):

- an FX node whose tensor outputs all share storage with an existing value
  (a view, ``detach``, ``getitem`` of a tuple, ``_unsafe_view``) is an
  *alias*: it is folded into the node that owns that storage (its *base*), so
  no storage is counted twice. Storage identity is read from the fake tensors
  themselves, not from operator schemas, so ``_unsafe_view`` and friends are
  caught too;
- an FX node that allocates storage is an *op* node; its memory is the bytes
  of the storages it creates (for an operator with several outputs, such as
  ``native_batch_norm`` or ``convolution_backward``, their sum: the outputs
  are produced and held together);
- placeholders (parameters, buffers, the input batch and its labels) are not
  nodes: they are the graph's fixed memory;
- an operator that writes into a buffer (``copy_`` of the updated step
  counter) is an *update* node of zero memory and an output of the graph;
- a parameter gradient stays in the op node that computes it when that node
  computes nothing else (``mm``, ``sum``): the node becomes an output of the
  graph, as PyTorch's AccumulateGrad steals the tensor into ``.grad``. A
  gradient that is one output of a multi-output node (``convolution_backward``)
  gets a *gradient* node that copies it out, so that the rest of the tuple can
  be freed; the copy is counted.

Nodes nothing needs (dead code) are dropped. Random operators (dropout's
``bernoulli``) are numbered in graph order, the order eager autograd runs
them; `remat_bench.torch.executor.Executor` runs random operator k with the
generators seeded from the spec's seed, the training step and k, so that a
recomputation draws the first computation's values, and
`remat_bench.torch.executor.reference_step` runs eager autograd under
`remat_bench.torch.randomness.seeded_random_ops`, which draws the same.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch import fx
from torch.multiprocessing.reductions import StorageWeakRef

from remat_bench.torch.randomness import is_random_call
from remat_bench.torch.spec import ModelSpec
from remat_bench.torch.trace import trace_step
from remat_bench.torch.zoo import ModelSpecError

OP, GRADIENT, UPDATE = "op", "gradient", "update"


FxNode = fx.Node  # ProgramNode's field ``fx`` shadows the module inside its class body


@dataclass
class ProgramNode:
    """One remat-bench node of the traced step.

    ``fx``: the FX node it runs (for a gradient node, the FX value it copies).
    ``aliases``: the alias FX nodes (views, getitems) it must evaluate from
    its inputs' values, in graph order. ``inputs``: indices of the program
    nodes whose values it reads. ``random``: for a random operator, its
    number k among the step's random operators (`remat_bench.torch.randomness`).
    """

    id: str
    role: str
    fx: FxNode | None
    inputs: tuple[int, ...]
    memory: int
    aliases: tuple[FxNode, ...]
    forward: bool = True
    grad_of: int | None = None
    parameter: str | None = None
    random: int | None = None

    def runs(self) -> FxNode:
        """The FX node an op or update node runs (only a gradient node may have none).

        Returns
        -------
        fx.Node
        """
        assert self.fx is not None, f"node '{self.id}' ({self.role}) has no FX node"
        return self.fx

    def module(self) -> tuple[str, str] | None:
        """(qualified path, class name) of the innermost module whose forward ran this node's operator,
        from the module stack make_fx records; None for a gradient copy and for the operators of the
        backward pass (autograd runs them outside any module's forward: make_fx records no stack).

        Paths are relative to the training step (``model.blocks.3.attn.qkv``); the loss, computed by
        the step itself, has the path ``""``.

        Returns
        -------
        tuple of (str, str) or None
        """
        if self.role == GRADIENT or self.fx is None:
            return None
        stack = self.fx.meta.get("nn_module_stack")
        if not stack:
            return None
        path, cls = list(stack.values())[-1]
        name = cls.__name__ if isinstance(cls, type) else str(cls).rpartition(".")[2]
        return str(path), name


@dataclass
class Program:
    """The traced step lowered to remat-bench nodes (see the module docstring)."""

    spec: ModelSpec
    gm: fx.GraphModule
    nodes: list[ProgramNode]
    placeholders: dict[str, tuple[str, str]]  # FX name -> ("parameter"|"buffer"|"input", name)
    loss: int
    loss_read: tuple[fx.Node, tuple[fx.Node, ...]]  # the loss's FX value and the aliases leading to it
    gradients: dict[str, int]  # parameter -> index of the node holding its gradient at the end
    gradient_reads: dict[str, tuple[fx.Node | None, tuple[fx.Node, ...]]]
    base: dict[fx.Node, int | None]  # FX node -> program node owning its storage (None: fixed)
    fixed_bytes: dict[str, int]

    @property
    def fixed_memory(self) -> int:
        return sum(self.fixed_bytes.values())

    def outputs(self) -> list[int]:
        """The loss, the nodes holding gradients, and the buffer updates, in node order.

        Returns
        -------
        list of int
            Node indices, each once.
        """
        outs = {self.loss, *self.gradients.values()}
        outs.update(i for i, node in enumerate(self.nodes) if node.role == UPDATE)
        return sorted(outs)


def _tensors(value: Any) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]


def storage_bytes(t: torch.Tensor) -> int:
    """Bytes of the storage a tensor lives in (all of it, not only the tensor's view of it).

    Parameters
    ----------
    t : torch.Tensor
        Any tensor, fake or real.

    Returns
    -------
    int
    """
    return int(t.untyped_storage().nbytes())


def distinct_storage_bytes(values: Iterable[Any]) -> int:
    """Bytes of the distinct storages of the tensors among ``values``: a storage several share counts once.

    Parameters
    ----------
    values : iterable
        Tensors, or structures of tensors (an FX node's ``val``); anything else counts nothing.

    Returns
    -------
    int
    """
    storages = {StorageWeakRef(t.untyped_storage()): storage_bytes(t) for value in values for t in _tensors(value)}
    return sum(storages.values())


def _fx_inputs(node: fx.Node) -> list[fx.Node]:
    """The FX nodes a node reads, in argument order."""
    found: list[fx.Node] = []
    fx.node.map_arg((node.args, node.kwargs), found.append)
    return found


def _written_args(node: fx.Node) -> list[fx.Node]:
    """The FX nodes an operator writes into (arguments its schema marks ``Tensor(a!)``)."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return []
    written: list[fx.Node] = []
    for k, arg in enumerate(schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        value = node.args[k] if k < len(node.args) else node.kwargs.get(arg.name)
        fx.node.map_arg(value, written.append)
    return written


def _check_id_range(spec: ModelSpec, graph: fx.Graph, inputs: fx.Node) -> None:
    """Refuse token ids beyond the rows of an embedding that reads them.

    Fake tensors do not check indices, so a ``--vocab`` wider than the
    model's embedding would trace, and fail only when real operators run
    (profiling, measuring workspaces, replay).
    """
    ids = {inputs}
    for n in graph.nodes:  # views of the ids (flatten, reshape) are the same ids
        if n.op == "call_function" and n.args and n.args[0] in ids and _same_storage(n, n.args[0]):
            ids.add(n)
    for n in graph.nodes:
        if n.target is torch.ops.aten.embedding.default and len(n.args) > 1 and n.args[1] in ids:
            rows = int(n.args[0].meta["val"].shape[0])
            if spec.input_range is not None and spec.input_range > rows:
                raise ModelSpecError(
                    f"model '{spec.model}': its input ids lie in [0, {spec.input_range}) (--vocab), but the "
                    f"embedding that reads them ('{n.name}') has {rows} rows; give --vocab {rows} or less"
                )


def _same_storage(a: fx.Node, b: Any) -> bool:
    if not isinstance(b, fx.Node):
        return False
    x, y = a.meta.get("val"), b.meta.get("val")
    return (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)
            and StorageWeakRef(x.untyped_storage()) == StorageWeakRef(y.untyped_storage()))


def _is_random(node: fx.Node) -> bool:
    """A seeded random operator (`remat_bench.torch.randomness.is_random_call`); attention with
    ``dropout_p == 0`` is deterministic."""
    return is_random_call(node.target, node.args, node.kwargs)


def build_program(spec: ModelSpec) -> Program:
    """Trace the training step of ``spec`` and lower it to remat-bench nodes.

    Parameters
    ----------
    spec : ModelSpec
        The model, its batch and its task (`model_spec`).

    Returns
    -------
    Program

    Raises
    ------
    ModelSpecError
        A model that cannot be built or traced, or whose step remat-bench cannot model (a random operator,
        a write into an intermediate value, a loss that depends on no computation).
    """
    gm, param_names, buffer_names = trace_step(spec)
    graph = gm.graph
    storages = Storages()
    placeholders = _placeholders(spec, graph, param_names, buffer_names, storages)
    output_node = next(n for n in graph.nodes if n.op == "output")
    flat_out = pytree.tree_leaves(output_node.args[0])
    loss_fx, grad_values = flat_out[0], flat_out[1:]
    if len(grad_values) != len(param_names):
        raise RuntimeError(f"traced {len(grad_values)} gradients for {len(param_names)} parameters")
    values = sort_fx_nodes(spec, gm, storages)
    needed = _needed(loss_fx, grad_values, values.updates)
    loss_base = values.base[loss_fx]
    if loss_base is None:
        raise ModelSpecError(f"model '{spec.model}': the loss does not depend on any computation")
    steal, tail = _gradient_homes(param_names, grad_values, values)
    builder = _ProgramBuilder(values, tail)
    builder.add_all(graph, needed)
    nodes, index = builder.nodes, builder.index
    loss, loss_pos = index[loss_base], values.order[loss_base]
    _mark_forward(nodes, values.order, loss_pos)
    _link_gradients(graph, nodes, index, values, loss, loss_pos)

    gradients = {name: index[b] for name, b in steal.items()}
    gradients.update({node.parameter: i for i, node in enumerate(nodes)
                      if node.role == GRADIENT and node.parameter is not None})
    base = {n: (index[b] if b is not None else None) for n, b in values.base.items() if b is None or b in index}
    return Program(
        spec=spec, gm=gm, nodes=nodes, placeholders=placeholders, loss=loss,
        loss_read=(loss_fx, values.alias_closure([loss_fx])),
        gradients=gradients,
        gradient_reads={name: (g, values.alias_closure([g])) if isinstance(g, fx.Node) else (None, ())
                        for name, g in zip(param_names, grad_values)},
        base=base, fixed_bytes=storages.fixed_bytes,
    )




class Storages:
    """Which FX node allocated each storage (None: a placeholder or constant, i.e. fixed memory),
    and the fixed memory by account (parameters, buffers, inputs, constants), in bytes."""

    def __init__(self) -> None:
        self.owner: dict[StorageWeakRef, fx.Node | None] = {}
        self.fixed_bytes = {"parameters": 0, "buffers": 0, "inputs": 0, "constants": 0}

    def claim(self, value: Any, by: fx.Node | None, account: str | None = None) -> int:
        """Give ``by`` the storages of ``value`` nobody owns yet; returns their bytes (added to ``account``).

        Parameters
        ----------
        value : Any
            A tensor or a structure of tensors (an FX node's ``val``).
        by : fx.Node or None
            The new owner (None: fixed memory).
        account : str or None
            The fixed-memory account the bytes are added to (``parameters``, ``buffers``, ``inputs``,
            ``constants``); None for none.

        Returns
        -------
        int
            Bytes of the storages newly owned.
        """
        fresh = 0
        for t in _tensors(value):
            ref = StorageWeakRef(t.untyped_storage())
            if ref not in self.owner:
                self.owner[ref] = by
                fresh += storage_bytes(t)
        if account is not None:
            self.fixed_bytes[account] += fresh
        return fresh

    def owners(self, value: Any) -> set[fx.Node | None]:
        """The owners of the storages of ``value`` that are owned already.

        Parameters
        ----------
        value : Any
            A tensor or a structure of tensors.

        Returns
        -------
        set of (fx.Node or None)
            None among them for fixed memory; empty when every storage is new.
        """
        owner = self.owner
        return {owner[r] for r in (StorageWeakRef(t.untyped_storage()) for t in _tensors(value)) if r in owner}


def _placeholders(spec: ModelSpec, graph: fx.Graph, param_names: list[str], buffer_names: list[str],
                  storages: Storages) -> dict[str, tuple[str, str]]:
    """FX name -> role of the placeholders: parameters, buffers, inputs, labels (the flattened
    arguments of train_step); their storages are claimed as fixed memory."""
    placeholder_nodes = [n for n in graph.nodes if n.op == "placeholder"]
    roles = ([("parameter", k) for k in param_names] + [("buffer", k) for k in buffer_names]
             + [("input", "inputs"), ("input", "labels")])
    if len(roles) != len(placeholder_nodes):
        raise RuntimeError(f"traced {len(placeholder_nodes)} placeholders for {len(roles)} arguments")
    placeholders = {n.name: role for n, role in zip(placeholder_nodes, roles)}
    if spec.input_range is not None:
        _check_id_range(spec, graph, placeholder_nodes[-2])
    for n, (kind, _) in zip(placeholder_nodes, roles):
        storages.claim(n.meta["val"], None, "inputs" if kind == "input" else f"{kind}s")
    return placeholders


@dataclass
class FxValues:
    """The traced graph's FX nodes sorted by what they do with storage (see `sort_fx_nodes`)."""

    order: dict[fx.Node, int]  # position in the graph
    allocates: dict[fx.Node, int] = field(default_factory=dict)  # op node -> bytes of the storages it creates
    updates: list[fx.Node] = field(default_factory=list)  # nodes that only write into a buffer
    base: dict[fx.Node, fx.Node | None] = field(default_factory=dict)  # -> allocating node owning its storage
    random: dict[fx.Node, int] = field(default_factory=dict)  # random operator -> its number k in the step

    def alias_closure(self, reads: list[fx.Node]) -> tuple[fx.Node, ...]:
        """The alias FX nodes to evaluate to get ``reads`` from base values, in graph order.

        Parameters
        ----------
        reads : list of fx.Node
            The values a node reads.

        Returns
        -------
        tuple of fx.Node
            The aliases among them and those they are derived from, through any chain of aliases.
        """
        found: set[fx.Node] = set()
        todo = [a for a in reads if a.op == "call_function" and a not in self.allocates]
        while todo:
            a = todo.pop()
            if a in found:
                continue
            found.add(a)
            todo.extend(b for b in _fx_inputs(a) if b.op == "call_function" and b not in self.allocates)
        return tuple(sorted(found, key=self.order.__getitem__))


def sort_fx_nodes(spec: ModelSpec, gm: fx.GraphModule, storages: Storages) -> FxValues:
    """Sort FX nodes: allocating (op), writing into a buffer only (update), or aliasing (folded into
    the value whose storage it shares); numbers the random operators in graph order (``random``),
    refuses writes into intermediate values.

    Parameters
    ----------
    spec : ModelSpec
        The model, named in errors.
    gm : fx.GraphModule
        The traced step.
    storages : Storages
        The placeholders' storages already claimed; each new storage is claimed by the node that
        allocates it.

    Returns
    -------
    FxValues

    Raises
    ------
    ModelSpecError
        A write into an intermediate value, a node aliasing several values, or a random operator
        that allocates nothing of its own (it could not be seeded where it runs).
    """
    graph = gm.graph
    values = FxValues(order={n: i for i, n in enumerate(graph.nodes)})
    allocates, base_fx = values.allocates, values.base
    for n in graph.nodes:
        if n.op == "get_attr":
            storages.claim(getattr(gm, n.target), None, "constants")
            base_fx[n] = None
            continue
        if n.op == "placeholder":
            base_fx[n] = None
            continue
        if n.op != "call_function":
            continue
        if _is_random(n):  # numbered in the order eager autograd runs them (remat_bench.torch.randomness)
            values.random[n] = len(values.random)
        for a in _written_args(n):
            if storages.owners(a.meta.get("val")) - {None}:
                raise ModelSpecError(
                    f"model '{spec.model}': node '{n.name}' ({n.target}) writes into the intermediate "
                    f"value '{a.name}', which remat-bench cannot model (the traced graph should be functional)"
                )
        val = n.meta.get("val")
        aliased = storages.owners(val)
        fresh = storages.claim(val, n)
        if storages.owners(val) - aliased - {None} == {n}:
            allocates[n] = fresh
            base_fx[n] = n
        elif _written_args(n):
            values.updates.append(n)  # copy_ of an updated buffer: its output is the buffer itself
            base_fx[n] = None
        elif not _tensors(val) and n.target is not operator.getitem:
            allocates[n] = 0  # an operator without tensor outputs still has to run
            base_fx[n] = n
        elif len(aliased) > 1:
            raise ModelSpecError(f"model '{spec.model}': node '{n.name}' aliases several values at once")
        else:  # a view, detach, getitem, _unsafe_view ...: folded into the value it aliases
            base_fx[n] = next(iter(aliased)) if aliased else None
        if n in values.random and n not in allocates:
            raise ModelSpecError(f"model '{spec.model}': the random operator {n.target} (node '{n.name}') "
                                 "writes into a value it does not allocate, which remat-bench cannot replay")
    return values


def _needed(loss_fx: fx.Node, grad_values: list[Any], updates: list[fx.Node]) -> set[fx.Node]:
    """What the outputs need: walk back from the loss, the gradients and the buffer updates."""
    needed: set[fx.Node] = set()
    stack = [loss_fx, *[g for g in grad_values if isinstance(g, fx.Node)], *updates]
    while stack:
        n = stack.pop()
        if n in needed:
            continue
        needed.add(n)
        stack.extend(a for a in _fx_inputs(n) if a not in needed)
    return needed


# What goes right after an allocating FX node (None: first of all): (GRADIENT, parameter, its FX value)
# or (UPDATE, FX name, the FX node).
_Tail = dict[fx.Node | None, list[tuple[str, str, fx.Node | None]]]


def _gradient_homes(param_names: list[str], grad_values: list[Any], values: FxValues
                    ) -> tuple[dict[str, fx.Node], _Tail]:
    """(parameter -> the op node holding its gradient, the gradient and update nodes to add after each
    node).

    A gradient held alone by its node stays there (AccumulateGrad steals it); one that is part of a
    tuple is copied out by a gradient node, so that the rest of the tuple can be freed.
    """
    steal: dict[str, fx.Node] = {}
    tail: _Tail = {}
    for name, g in zip(param_names, grad_values):
        b = values.base.get(g) if isinstance(g, fx.Node) else None
        alone = b is not None and b in values.allocates and len(_tensors(b.meta["val"])) == 1
        if alone and b is not None and b not in steal.values():
            steal[name] = b
        else:
            tail.setdefault(b, []).append((GRADIENT, name, g if isinstance(g, fx.Node) else None))
    for u in values.updates:
        bases = [b for a in _fx_inputs(u) if (b := values.base.get(a)) is not None]
        last = max(bases, key=values.order.__getitem__) if bases else None
        tail.setdefault(last, []).append((UPDATE, u.name, u))
    return steal, tail


class _ProgramBuilder:
    """Program nodes: allocating FX nodes in graph order; gradient copies and updates right after
    their last input (they have no consumers, so any later position is valid too)."""

    def __init__(self, values: FxValues, tail: _Tail) -> None:
        self.values = values
        self.tail = tail
        self.nodes: list[ProgramNode] = []
        self.index: dict[fx.Node, int] = {}  # allocating FX node -> its program node

    def add_all(self, graph: fx.Graph, needed: set[fx.Node]) -> None:
        self.add_tail(None)
        for n in graph.nodes:
            if n in self.values.allocates and n in needed:
                self.add(n.name, OP, n, _fx_inputs(n), self.values.allocates[n])
                self.add_tail(n)
        if self.tail:
            left = sum(len(v) for v in self.tail.values())
            raise RuntimeError(f"could not place {left} gradient or update nodes")

    def add(self, node_id: str, role: str, n: fx.Node | None, reads: list[fx.Node], memory: int,
            parameter: str | None = None) -> None:
        values = self.values
        aliases = values.alias_closure(reads)
        # Inputs: the owners of what it reads, and every allocating node an alias is derived from.
        touched = [*reads, *(b for a in aliases for b in _fx_inputs(a))]
        inputs: list[int] = []
        for a in touched:
            for b in (values.base.get(a), a if a in values.allocates else None):
                if b is not None and self.index[b] not in inputs:
                    inputs.append(self.index[b])
        if role == OP and n is not None:
            self.index[n] = len(self.nodes)
        random = values.random.get(n) if role == OP and n is not None else None
        self.nodes.append(ProgramNode(id=node_id, role=role, fx=n, inputs=tuple(inputs), memory=memory,
                                      aliases=aliases, parameter=parameter, random=random))

    def add_tail(self, b: fx.Node | None) -> None:
        """The gradient and update nodes whose last input is ``b``."""
        for role, name, n in self.tail.pop(b, []):
            if role == GRADIENT:
                reads = [n] if n is not None else []
                self.add(f"grad:{name}", GRADIENT, n, reads, _nbytes_dense(n.meta["val"]) if n is not None else 0,
                         parameter=name)
            else:
                assert n is not None  # an update is an FX node
                self.add(name, UPDATE, n, _fx_inputs(n), 0)


def _mark_forward(nodes: list[ProgramNode], order: dict[fx.Node, int], loss_pos: int) -> None:
    """Kinds: the forward pass is what runs before the loss; the loss and everything after it
    are backward (docs/design.md section 2). An update is forward when all it reads is."""
    for node in nodes:
        if node.role == OP:
            node.forward = order[node.runs()] < loss_pos
        elif node.role == GRADIENT:
            node.forward = False
        else:
            node.forward = all(nodes[j].forward for j in node.inputs)


def _link_gradients(graph: fx.Graph, nodes: list[ProgramNode], index: dict[fx.Node, int], values: FxValues,
                    loss: int, loss_pos: int) -> None:
    """grad_of: the forward node whose autograd function a backward operator belongs to (same seq_nr;
    the first forward FX node with a sequence number is the operator that created the function)."""
    first_with_seq: dict[int, fx.Node] = {}
    for n in graph.nodes:
        if n.op == "call_function" and values.order[n] < loss_pos and "seq_nr" in n.meta:
            first_with_seq.setdefault(n.meta["seq_nr"], n)
    for i, node in enumerate(nodes):
        if node.forward or node.role != OP or i == loss or "seq_nr" not in node.runs().meta:
            continue
        f = first_with_seq.get(node.runs().meta["seq_nr"])
        b = values.base.get(f) if f is not None else None
        if b is not None and b in index and nodes[index[b]].forward:
            node.grad_of = index[b]


def _nbytes_dense(val: Any) -> int:
    """Bytes of a fresh copy of ``val`` (what ``torch.clone`` allocates)."""
    if not isinstance(val, torch.Tensor):
        return 0
    return int(val.numel() * val.element_size())
