"""Forward graph -> training graph, in the shape of Checkmate's Keras extraction.

Checkmate (Jain et al., "Checkmate: Breaking the Memory Wall with Optimal Tensor
Rematerialization", MLSys 2020) models training at layer granularity: the
forward layers in a topological order, one ``Loss`` node fed by the network's
output, then one ``<layer>_backward`` node per forward layer in reverse order.
Its exported graphs (the published ``paper:checkmate_*_train``, `remat_bench.app.datasets`) follow
one rule for the inputs of a gradient node, which this module reproduces:

    grad(X) reads  X,
                   every forward consumer C of X,
                   grad(C) for every such C (the loss instead, when X feeds it).

Inputs are listed in graph order (X, its consumers, the loss, then the consumer
gradients latest-computed first), which is the order of the published files.
A gradient node produces a value the size of X (the gradient with respect to
X's output) and by default costs twice X's forward duration (one product for
the input gradient, one for the weight gradient). The loss reads every forward
sink; the gradient nodes of forward sources have no consumer and are the
graph's outputs by default.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from remat_bench.core.errors import GraphError
from remat_bench.core.graph import Graph, Implementation, Node, Number

LOSS_ID = "loss"
GRAD_SUFFIX = "_grad"


@dataclass(frozen=True)
class ForwardOp:
    """One forward operator and the value it produces (memory and duration in the graph's units).

    ``grad_duration`` overrides the default cost of its gradient node
    (``backward_factor`` times ``duration``). When ``implementations`` are
    given, the first one sets the node's own duration and workspace, as the
    graph format requires.
    """

    id: str
    op: str
    inputs: Sequence[str]
    memory: Number
    duration: Number
    workspace: Number = 0
    implementations: Sequence[Implementation] = ()
    grad_duration: Number | None = None
    metadata: dict[str, Any] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        # Frozen, so normalise through object.__setattr__: callers may pass lists.
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "implementations", tuple(self.implementations))


def _integral(value: Number) -> Number:
    """Keep sizes integers where they are whole, so the graph's arrays stay int64."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def training_graph(
    forward: Sequence[ForwardOp],
    *,
    name: str,
    loss_memory: Number = 1,
    loss_duration: Number = 1,
    backward_factor: float = 2.0,
    fixed_memory: Number = 0,
    units: dict[str, str] | None = None,
    metadata: dict[str, Any] | None = None,
) -> Graph:
    """Build the Checkmate-shaped training graph of ``forward`` (see the module docstring).

    ``forward`` must be in a topological order. The result lists the forward
    nodes (kind ``forward``) in that order, then ``loss`` (kind ``backward``,
    op ``loss``), then ``<id>_grad`` for every forward node in reverse order
    (kind ``backward``, ``grad_of`` the forward id, op ``<op>_backward``,
    memory and workspace those of the forward node). ``loss_memory`` and ``loss_duration``
    are in the graph's units; architecture generators pass one float32 per
    sample (``4 * batch`` bytes), as in Checkmate's graphs. Raises
    `GraphError` if the forward ops do not form a valid graph.

    Parameters
    ----------
    forward : Sequence of ForwardOp
        The forward operators, in a topological order.
    name : str
        The graph's name, which errors also use.
    loss_memory : Number
        The loss node's memory.
    loss_duration : Number
        The loss node's duration.
    backward_factor : float
        A gradient node's duration over its forward node's (over its first implementation's), for an
        operator without ``grad_duration``.
    fixed_memory : Number
        Memory resident throughout (the parameters).
    units : dict or None
        The graph's units; None for bytes and flops.
    metadata : dict or None
        The graph's metadata.

    Returns
    -------
    Graph

    Raises
    ------
    GraphError
        No forward operator, an operator id the training graph takes for its own nodes (``loss``,
        ``<id>_grad``), or operators that do not form a valid graph.
    """
    forward = list(forward)
    _check_ids(forward, name)
    consumers = _forward_consumers(forward)
    sinks = [op.id for op in forward if not consumers[op.id]]
    nodes = [_forward_node(op) for op in forward]
    nodes.append(
        Node(
            id=LOSS_ID,
            inputs=tuple(sinks),
            memory=_integral(loss_memory),
            duration=_integral(loss_duration),
            op="loss",
            kind="backward",
        )
    )
    nodes += _gradient_nodes(forward, consumers, set(sinks), backward_factor)
    return Graph(
        nodes,
        name=name,
        outputs=None,
        fixed_memory=_integral(fixed_memory),
        units=units or {"memory": "bytes", "duration": "flops"},
        metadata=metadata,
        source=name or "generated graph",
    )


def _check_ids(forward: list[ForwardOp], name: str) -> None:
    """At least one forward operator, and none whose id the training graph takes for its own nodes."""
    if not forward:
        raise GraphError(f"{name}: a training graph needs at least one forward operator")
    reserved = {LOSS_ID} | {op.id + GRAD_SUFFIX for op in forward}
    for op in forward:
        if op.id in reserved:
            raise GraphError(
                f"{name}: forward operator id '{op.id}' collides with a node the training graph adds; "
                f"rename it (ids '{LOSS_ID}' and '<id>{GRAD_SUFFIX}' are taken)"
            )


def _forward_consumers(forward: list[ForwardOp]) -> dict[str, list[str]]:
    """The forward operators reading each forward value (each once, in graph order)."""
    consumers: dict[str, list[str]] = {op.id: [] for op in forward}
    for op in forward:
        for u in dict.fromkeys(op.inputs):
            if u not in consumers:
                # Let Graph name the problem (unknown id or bad order) in its own words.
                continue
            consumers[u].append(op.id)
    return consumers


def _forward_node(op: ForwardOp) -> Node:
    """The node of a forward operator; its own duration and workspace are its first implementation's."""
    duration, workspace = op.duration, op.workspace
    if op.implementations:
        duration, workspace = op.implementations[0].duration, op.implementations[0].workspace
    return Node(
        id=op.id,
        inputs=tuple(op.inputs),
        memory=_integral(op.memory),
        duration=_integral(duration),
        workspace=_integral(workspace),
        op=op.op,
        kind="forward",
        implementations=tuple(op.implementations),
        metadata=op.metadata,
    )


def _gradient_nodes(forward: list[ForwardOp], consumers: dict[str, list[str]], sinks: set[str],
                    backward_factor: float) -> list[Node]:
    """``<id>_grad`` for every forward operator, in reverse order, reading what the module docstring's
    rule says, in graph order."""
    ids = [op.id for op in forward]
    n = len(forward)
    position = {i: k for k, i in enumerate(ids)}
    position[LOSS_ID] = n
    for k, i in enumerate(reversed(ids)):
        position[i + GRAD_SUFFIX] = n + 1 + k
    nodes = []
    for op in reversed(forward):
        cons = consumers[op.id]
        reads = [op.id, *cons, *(c + GRAD_SUFFIX for c in cons)]
        if op.id in sinks:
            reads.append(LOSS_ID)
        reads.sort(key=position.__getitem__)
        grad_duration = op.grad_duration
        if grad_duration is None:
            base = op.implementations[0].duration if op.implementations else op.duration
            grad_duration = backward_factor * base
        nodes.append(
            Node(
                id=op.id + GRAD_SUFFIX,
                inputs=tuple(reads),
                memory=_integral(op.memory),
                duration=_integral(grad_duration),
                workspace=_integral(op.workspace),
                op=f"{op.op}_backward" if op.op else "backward",
                kind="backward",
                grad_of=op.id,
            )
        )
    return nodes
