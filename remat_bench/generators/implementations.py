"""Operator implementations for generated training graphs (MONeT: Shah et al., ICLR 2021, section 4, appendix D).

MONeT chooses, jointly with the checkpointing schedule, how each operator is
implemented. This module gives the generated graphs two of its kinds of
choices (docs/design.md section 2: an implementation has a name, a duration, a
workspace and, optionally, its own inputs):

1. **Convolution algorithms** (MONeT's "conv-optimized"; it picks among 8
   forward and 6 backward cuDNN algorithms). Every convolution-like node
   (``conv2d``, ``conv_transpose2d``) and the gradient node of one gets

   - ``default``: the framework's choice; the node's own FLOPs as duration (as
     without implementations, so methods that ignore implementations see the
     graph they saw before) and a small workspace, ``DEFAULT_WORKSPACE_RATIO``
     times the node's output;
   - ``implicit-gemm``: cuDNN's IMPLICIT_GEMM, which needs no workspace and
     is ``NO_WORKSPACE_SLOWDOWN`` times slower;
   - ``fft``: the large-workspace algorithms (FFT, FFT_TILING,
     WINOGRAD_NONFUSED), ``FAST_SPEEDUP`` times faster with
     ``FAST_WORKSPACE_RATIO`` times the output as workspace; only for kernels
     of 3 and more at unit stride, where those algorithms apply (cuDNN
     supports FFT and Winograd only at unit stride; Winograd's minimal
     filtering pays off from 3x3 kernels, Lavin and Gray 2016).

2. **Output-activated gradients** (MONeT's "output-activated"; Bulò et al.
   2018, in-place activated BatchNorm). In remat-bench's training graphs
   (Checkmate's rule, `remat_bench.generators.training`) the gradient node of
   X reads X, X's forward consumers C and their gradients: it back-propagates
   through every C, whose Jacobian may need C's input (X) or C's output. A
   ReLU's gradient mask and a BatchNorm's normalised input can both be
   recovered from the output, so when every forward consumer of X is a
   ``relu`` or a ``batchnorm``, the gradient of X gets an
   ``output-activated`` implementation that does not read X. Inverting a
   BatchNorm's scale and shift costs its forward duration again (2 per
   element); a ReLU's costs nothing.

A node with both kinds gets every combination (``fft+output-activated``). The
ratios come from published cuDNN measurements:

- cumo pull request #502 (github.com/sonots/cumo/pull/502, 2026), cuDNN in
  float32 on a 3x3 convolution with N=32, C=K=64, 56x56 (the shape of
  MONeT's Figure 7 at a smaller batch; its output is 25,690,112 bytes): the
  fastest algorithm within an 8 MiB workspace ceiling takes 1.19 ms, and
  0.59 ms once 256 MiB are allowed (still 1.19 ms at 128 MiB, so that
  algorithm needs between 128 and 256 MiB). Hence ``FAST_SPEEDUP`` = 1.19 / 0.59,
  ``DEFAULT_WORKSPACE_RATIO`` = 8 MiB over the output (the ceiling the
  default fits under) and ``FAST_WORKSPACE_RATIO`` = 192 MiB (the middle of
  the 128-256 MiB bracket) over the output.
- Shah et al. 2021, appendix E: VGG-16 trained with the memory-efficient
  (no-workspace) convolution algorithms is 59% slower than with PyTorch's
  convolution selection; ``NO_WORKSPACE_SLOWDOWN`` = 1.59 charges the whole
  slowdown to the convolutions (which dominate VGG-16's time).
- LBANN pull request #437 (github.com/LBANN/lbann/pull/437): on ResNet-50's
  res2a_branch2b (3x3, 64 channels, 56x56) the Winograd algorithm beats
  implicit GEMM with only 256 KiB of workspace: a framework's default
  algorithm is faster than the no-workspace one for a small workspace.

The backward convolution algorithms (backward data and backward filter) come
in the same three families in cuDNN; the same ratios are applied to the
gradient node's duration and output size. What is left out: MONeT's in-place
operators (remat-bench's memory model has no in-place update: every node
produces a new value) and its intermediate-activated ReLU and MaxPool
gradients (they need extra nodes holding 1-bit masks).
"""

from __future__ import annotations

from remat_bench.core.errors import GraphError
from remat_bench.core.graph import Graph, Implementation, Node, Number

CONV_OPS = frozenset({"conv2d", "conv_transpose2d"})
# Operators whose gradient can be computed from their output (MONeT's output-activated ones).
OUTPUT_ACTIVATED_OPS = frozenset({"relu", "batchnorm"})
# Inverting the affine transform costs the forward op again; a ReLU's mask costs nothing more.
INVERSION_COSTS = frozenset({"batchnorm"})

MIB = 2**20
# cumo #502: float32, N=32, C=K=64, 56x56, 3x3; the output tensor in bytes.
MEASURED_OUTPUT_BYTES = 32 * 64 * 56 * 56 * 4
DEFAULT_WORKSPACE_RATIO = 8 * MIB / MEASURED_OUTPUT_BYTES  # 0.33
FAST_WORKSPACE_RATIO = 192 * MIB / MEASURED_OUTPUT_BYTES  # 7.8
FAST_SPEEDUP = 1.19 / 0.59  # 2.0
NO_WORKSPACE_SLOWDOWN = 1.59  # Shah et al. 2021, appendix E (VGG-16)

DEFAULT, NO_WORKSPACE, FAST, OUTPUT_ACTIVATED = "default", "implicit-gemm", "fft", "output-activated"


def _whole(value: float) -> int:
    return round(value)


def conv_algorithms(duration: Number, output: Number, kernel: int | None, stride: int | None
                    ) -> list[tuple[str, int, int]]:
    """(name, duration, workspace) of the convolution algorithms of a node, the default first.

    ``duration`` and ``output`` are the node's FLOPs and output bytes;
    ``kernel``/``stride`` decide whether the FFT/Winograd family applies
    (unknown ones: it does not).

    Parameters
    ----------
    duration : Number
        The node's duration (flops).
    output : Number
        The node's output (bytes).
    kernel : int or None
        The convolution's kernel size; None when unknown.
    stride : int or None
        The convolution's stride; None when unknown.

    Returns
    -------
    list of tuple of (str, int, int)
        ``default``, ``implicit-gemm``, then ``fft`` where it applies; durations and workspaces rounded to
        whole numbers.
    """
    algorithms = [
        (DEFAULT, _whole(duration), _whole(DEFAULT_WORKSPACE_RATIO * output)),
        (NO_WORKSPACE, _whole(NO_WORKSPACE_SLOWDOWN * duration), 0),
    ]
    if kernel is not None and kernel >= 3 and stride == 1:
        algorithms.append((FAST, _whole(duration / FAST_SPEEDUP), _whole(FAST_WORKSPACE_RATIO * output)))
    return algorithms


def _forward_consumers(graph: Graph, v: int) -> list[int]:
    return [c for c in graph.consumers[v] if graph.is_forward[c]]


def _conv_shape(node: Node) -> tuple[int | None, int | None]:
    meta = node.metadata or {}
    return meta.get("kernel"), meta.get("stride")


def node_implementations(graph: Graph, v: int) -> tuple[Implementation, ...]:
    """The implementations node v gets, or () when it keeps its single one.

    Parameters
    ----------
    graph : Graph
        A training graph (`remat_bench.generators.training`), without implementations.
    v : int
        A node index.

    Returns
    -------
    tuple of Implementation
        The first is ``default``: the convolution algorithms for a convolution-like node and its gradient,
        and ``output-activated`` variants of each for a gradient whose forward consumers are all ReLU or
        BatchNorm nodes.
    """
    node = graph.nodes[v]
    algorithms: list[tuple[str, int, int]] | None = None
    activated: tuple[tuple[str, ...], int] | None = None  # (inputs without X, extra duration)
    if node.kind == "forward" and node.op in CONV_OPS:
        kernel, stride = _conv_shape(node)
        algorithms = conv_algorithms(node.duration, node.memory, kernel, stride)
    elif node.kind == "backward" and node.grad_of is not None:
        x = graph.index[node.grad_of]
        forward = graph.nodes[x]
        if forward.op in CONV_OPS:
            kernel, stride = _conv_shape(forward)
            algorithms = conv_algorithms(node.duration, node.memory, kernel, stride)
        consumers = _forward_consumers(graph, x)
        if (consumers and all(graph.nodes[c].op in OUTPUT_ACTIVATED_OPS for c in consumers)
                and forward.id in node.inputs):
            extra = sum(int(graph.duration[c]) for c in consumers if graph.nodes[c].op in INVERSION_COSTS)
            activated = (tuple(u for u in node.inputs if u != forward.id), extra)
    if algorithms is None and activated is None:
        return ()
    if algorithms is None:
        algorithms = [(DEFAULT, _whole(node.duration), _whole(node.workspace))]
    impls = [Implementation(name, duration, workspace) for name, duration, workspace in algorithms]
    if activated is not None:
        inputs, extra = activated
        for name, duration, workspace in algorithms:
            label = OUTPUT_ACTIVATED if name == DEFAULT else f"{name}+{OUTPUT_ACTIVATED}"
            impls.append(Implementation(label, duration + extra, workspace, inputs=inputs))
    return tuple(impls)


def add_implementations(graph: Graph, kind: str | None = None) -> Graph:
    """``graph`` with MONeT's operator implementations on its convolution, ReLU and BatchNorm nodes.

    Nodes keep their ids, inputs and memory; a node with implementations takes
    its own duration and workspace from the first (``default``). The name gets
    ``-impl``. Raises `GraphError` when no node of the graph has a choice.

    Parameters
    ----------
    graph : Graph
        A training graph (`remat_bench.generators.training`), without implementations.
    kind : str or None
        What the error calls the graph (a generator's kind); None for its name.

    Returns
    -------
    Graph
        With the number of nodes given implementations in its metadata.

    Raises
    ------
    GraphError
        No node of ``graph`` is an operator MONeT's implementations apply to.
    """
    nodes: list[Node] = []
    changed = 0
    for v, node in enumerate(graph.nodes):
        impls = node_implementations(graph, v)
        if impls:
            changed += 1
            node = Node(id=node.id, inputs=node.inputs, memory=node.memory, duration=impls[0].duration,
                        workspace=impls[0].workspace, op=node.op, kind=node.kind, grad_of=node.grad_of,
                        implementations=impls, metadata=node.metadata)
        nodes.append(node)
    if not changed:
        label = kind or graph.name
        raise GraphError(
            f"{label}: --implementations adds nothing to this graph: it has no convolution, ReLU or "
            "BatchNorm nodes, the operators MONeT's implementations apply to"
        )
    return Graph(nodes, name=f"{graph.name}-impl", outputs=graph.outputs if graph.outputs_given else None,
                 fixed_memory=graph.fixed_memory, units=graph.units,
                 metadata={**graph.metadata, "implementations": "monet", "nodes_with_implementations": changed},
                 source=graph.source)


def first_implementations(graph: Graph) -> Graph:
    """``graph`` with every node reduced to its first implementation (what methods that ignore them use).

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    Graph
        With the same name; each node reads the inputs of its first implementation.
    """
    nodes = []
    for node in graph.nodes:
        first = node.implementations[0] if node.implementations else None
        inputs = first.inputs if first is not None and first.inputs is not None else node.inputs
        nodes.append(Node(id=node.id, inputs=inputs, memory=node.memory, duration=node.duration,
                          workspace=node.workspace, op=node.op, kind=node.kind, grad_of=node.grad_of,
                          metadata=node.metadata))
    return Graph(nodes, name=graph.name, outputs=graph.outputs if graph.outputs_given else None,
                 fixed_memory=graph.fixed_memory, units=graph.units, metadata=graph.metadata,
                 source=graph.source)
