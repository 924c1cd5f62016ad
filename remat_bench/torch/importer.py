"""Import a PyTorch model's training step as a remat-bench graph (docs/design.md sections 2 and 9).

``import_model("resnet18", batch=32)`` traces one training step of a zoo model
(or of ``package.module:factory``, the user's own) with fake tensors, lowers it
to remat-bench nodes (`remat_bench.torch.program`: views folded into their
base, dead code dropped) and writes what the simulator needs:

- ``memory``: bytes of the storage each node allocates (for a multi-output
  operator, all of its outputs); views and aliases count nothing;
- ``fixed_memory``: bytes of the parameters, the buffers (batchnorm running
  statistics) and the batch (inputs and labels), resident throughout.
  Parameter *gradients* are nodes, not fixed memory: they appear during the
  backward pass (PyTorch's ``zero_grad(set_to_none=True)`` default) and are
  outputs of the graph, so they must be resident at the end;
- ``duration`` (``durations="flops"``, units ``flops``): FLOPs from
  ``torch.utils.flop_counter``'s formulas for the operators that have one
  (matrix products, convolutions, attention and their backward), and for
  every other operator one per element touched (the larger of the elements
  read and written): elementwise and normalisation kernels are memory-bound,
  so their cost follows their size, and a recomputation is never free;
- ``duration`` (``durations="profile"``, units ``ns``): each node's operator
  run on real tensors, the least of ``repeats`` runs after a warm-up; the
  profile also measures each operator's ``workspace``, the scratch memory it
  allocates beyond its output (oneDNN convolutions and batchnorm backward on
  CPU allocate an output-sized buffer);
- ``kind``: ``forward`` before the loss, ``backward`` from the loss on;
  ``grad_of``: for a backward operator, the forward node whose autograd
  function produced it (matched through autograd sequence numbers);
- ``workspace``: 0 with ``durations="flops"``: fake tensors cannot tell
  what scratch memory a kernel allocates inside itself, so a replay's
  measured peak can exceed the simulated one by that much. With
  ``workspace="measure"`` (implied by ``durations="profile"``) every operator
  runs once on real tensors and its scratch is measured (`measure_workspace`);
  the scratch depends on the processor (oneDNN picks its convolution kernels
  by instruction set), so it is measured on the machine that will run the
  schedule, and the graph's metadata says where (docs/pytorch.md).

The graph's metadata keeps the model spec (model, batch, shapes, seed, task,
input dtype and id range, constructor arguments) and the torch version; each
node's metadata names its FX node (and, for gradient nodes, the parameter).
`program_for_graph` re-traces the spec and checks that it gives the same
nodes, which is how the replay re-creates the operators of a graph file.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np
import torch
import torch.utils._pytree as pytree
from torch import fx
from torch.utils.flop_counter import flop_registry, sdpa_backward_flop_count, sdpa_flop_count

from remat_bench.core.errors import GraphError, RematBenchError
from remat_bench.core.graph import Graph, Node
from remat_bench.torch.measure import measure_peak, measured_where
from remat_bench.torch.program import (
    GRADIENT,
    OP,
    ExecutionError,
    Executor,
    ModelSpec,
    Program,
    ProgramNode,
    State,
    build_program,
    model_spec,
)
from remat_bench.torch.zoo import ModelSpecError

DURATIONS = ("flops", "profile")
WORKSPACES = ("none", "measure")
METADATA_KEY = "torch"


def import_model(
    model: str,
    batch: int | None = None,
    input_shape: Sequence[int] | None = None,
    durations: str = "flops",
    seed: int = 0,
    repeats: int = 3,
    device: str | None = None,
    name: str | None = None,
    workspace: str | None = None,
    *,
    task: str | None = None,
    input_dtype: str | None = None,
    input_range: int | None = None,
    model_kwargs: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> Graph:
    """The training graph of ``model`` (a zoo name or ``package.module:factory``) at ``batch``.

    ``input_shape`` is per sample (the zoo gives a default). ``task``
    (``classify``, ``segment``, ``language``, ``regress``; default: the zoo
    entry's, else chosen from the output) fixes the loss and the labels;
    ``input_dtype`` the batch's dtype (default int64 for ``language``, else
    float32); ``input_range`` the number of token ids of integer inputs
    (default for ``language``: the vocabulary of the logits). ``model_kwargs``
    and ``kwargs`` go to the model's constructor (``model_kwargs`` for names
    this function takes itself, such as ``batch``). ``durations="profile"``
    runs every operator on real tensors (on ``device``, default cpu), so the
    batch must fit in memory; so does ``workspace="measure"`` (the default
    with profiled durations; with FLOPs the default is ``"none"``, every
    workspace 0).

    Parameters
    ----------
    model : str
        A zoo name or ``package.module:factory``.
    batch : int or None
        Samples per batch (None: 8).
    input_shape : Sequence of int or None
        One sample's shape (None: the zoo entry's; a model outside the zoo needs it).
    durations : str
        ``flops`` (computed from the trace) or ``profile`` (measured on real tensors, ns).
    seed : int
        Seeds the parameters (``seed``) and the batch (``seed + 1``).
    repeats : int
        Timed passes of a profile, after its warm-up; a node's duration is the least.
    device : str or None
        Where operators run to be profiled or measured (None: cpu).
    name : str or None
        The graph's name (None: ``torch-<model>-b<batch>``).
    workspace : str or None
        ``none`` or ``measure`` (None: ``measure`` with profiled durations, else ``none``).
    task : str or None
        ``classify``, ``segment``, ``language``, ``regress`` or ``auto`` (None: the zoo entry's, else auto).
    input_dtype : str or None
        One of `remat_bench.torch.program.INPUT_DTYPES` (None: int64 for ``language``, else float32).
    input_range : int or None
        Integer inputs lie in ``[0, input_range)``.
    model_kwargs : Mapping or None
        Constructor arguments, for names this function takes itself.
    **kwargs : Any
        More constructor arguments.

    Returns
    -------
    Graph
        Memory in bytes, durations in ``flops`` or ``ns``; its metadata keeps the spec (module docstring).

    Raises
    ------
    GraphError
        An unknown ``durations`` or ``workspace``.
    ModelSpecError
        A model, factory, shape, task or argument that cannot be used, a model that cannot be traced,
        or one that traces but fails on real tensors.
    """
    if durations not in DURATIONS:
        raise GraphError(f"durations must be one of {', '.join(DURATIONS)}, not {durations!r}")
    workspace = workspace or ("measure" if durations == "profile" else "none")
    if workspace not in WORKSPACES:
        raise GraphError(f"workspace must be one of {', '.join(WORKSPACES)}, not {workspace!r}")
    constructor = dict(model_kwargs or {})
    twice = sorted(set(constructor) & set(kwargs))
    if twice:
        raise ModelSpecError(f"the model's argument {twice[0]!r} is given twice (in model_kwargs and as a keyword)")
    constructor.update(kwargs)
    spec = model_spec(model, batch=batch, input_shape=tuple(input_shape) if input_shape else None,
                      seed=seed, task=task, input_dtype=input_dtype, input_range=input_range,
                      kwargs=constructor)
    program = build_program(spec)
    dev = torch.device(device or "cpu")
    scratch: list[int] | None = None
    try:
        if durations == "flops":
            costs = [node_flops(node) for node in program.nodes]
            if workspace == "measure":
                scratch = measure_workspace(program, dev)
        else:
            costs, measured = profile_costs(program, dev, repeats)
            scratch = measured if workspace == "measure" else None
    except ExecutionError as exc:  # traced with fake tensors, an operator can still fail on real ones
        raise ModelSpecError(f"model '{spec.model}' traces, but running it on real tensors fails: {exc}") from None
    graph = program_graph(program, costs, "flops" if durations == "flops" else "ns", scratch, name=name)
    if scratch is not None:
        graph.metadata[METADATA_KEY]["workspace"] = measured_where(dev)
    return graph


def import_model_reporting(options: dict[str, Any], search: Sequence[str] = ()) -> tuple[str, Any]:
    """`import_model(**options)` for a child process: ``("graph", graph dict)`` or ``("refused", sentence)``.

    The model's factory is the user's code: whatever it raises, ``SystemExit`` and other
    ``BaseException``s included, becomes one sentence for the parent, which also enforces the time
    limit (`remat_bench.app.sweep.config.trace_model`). ``search`` folders go first on the import path
    (a sweep config's folder, where its factories live).

    Parameters
    ----------
    options : dict
        The keywords of `import_model`.
    search : Sequence of str
        Folders put first on ``sys.path``.

    Returns
    -------
    tuple of (str, Any)
        ``("graph", dict)``: the graph as `Graph.to_dict` gives it; or ``("refused", str)``: why not.
    """
    import sys

    for folder in reversed(search):
        if folder not in sys.path:
            sys.path.insert(0, folder)
    model = options.get("model", "?")
    try:
        return "graph", import_model(**options).to_dict()
    except RematBenchError as exc:
        return "refused", str(exc)
    except BaseException as exc:  # the user's code may raise anything, SystemExit included
        text = str(exc).strip()
        first = text.splitlines()[0][:300] if text else ""
        return "refused", (f"model '{model}' stopped with {type(exc).__name__}"
                           f"{f': {first}' if first else ''} while it was built or traced")


def default_name(spec: ModelSpec) -> str:
    """The name of an imported graph not given one: ``torch-<model>-b<batch>``.

    Parameters
    ----------
    spec : ModelSpec
        The model spec; dots and colons of a factory path become dashes.

    Returns
    -------
    str
    """
    label = spec.model.replace(":", "-").replace(".", "-")
    return f"torch-{label}-b{spec.batch}"


def program_graph(program: Program, durations: Sequence[int], duration_unit: str,
                  workspace: Sequence[int] | None = None, name: str | None = None) -> Graph:
    """The remat-bench graph of a program, with the given node durations (and workspaces, else 0).

    Parameters
    ----------
    program : Program
        The lowered training step.
    durations : Sequence of int
        One per node, in ``duration_unit``.
    duration_unit : str
        ``flops`` or ``ns``.
    workspace : Sequence of int or None
        Each node's scratch bytes (None: 0 for all).
    name : str or None
        The graph's name (None: `default_name`).

    Returns
    -------
    Graph
    """
    nodes = program.nodes
    # A node that computes a parameter's gradient and nothing else holds it to the end.
    holds = {i: p for p, i in program.gradients.items() if nodes[i].role != GRADIENT}
    out = []
    for i, node in enumerate(nodes):
        meta: dict[str, Any] = {"fx": node.fx.name if node.fx is not None else None}
        if node.parameter is not None:
            meta["parameter"] = node.parameter
        if i in holds:
            meta["gradient_of_parameter"] = holds[i]
        module = node.module()
        if module is None and node.forward and node.inputs:
            # A buffer update (functionalization emits it after the whole step, outside every module):
            # the module of the value it writes, so that every forward node has one.
            module = nodes[node.inputs[-1]].module()
        if module is not None:
            meta["module"], meta["module_type"] = module
        out.append(Node(
            id=node.id,
            inputs=tuple(nodes[j].id for j in node.inputs),
            memory=int(node.memory),
            duration=int(durations[i]),
            workspace=int(workspace[i]) if workspace is not None else 0,
            op=_op_name(node),
            kind="forward" if node.forward else "backward",
            grad_of=nodes[node.grad_of].id if node.grad_of is not None else None,
            metadata=meta,
        ))
    spec = program.spec
    metadata = {
        METADATA_KEY: {
            "spec": spec.as_dict(),
            "torch_version": torch.__version__,
            "durations": duration_unit,
            "loss": nodes[program.loss].id,
            "fixed_memory": dict(program.fixed_bytes),
            "gradients": {p: nodes[i].id for p, i in program.gradients.items()},
        },
        "importer": "remat_bench.torch: make_fx(functionalize(grad_and_value(step))), fake tensors",
    }
    return Graph(out, name=name or default_name(spec), outputs=[nodes[i].id for i in program.outputs()],
                 fixed_memory=program.fixed_memory,
                 units={"memory": "bytes", "duration": duration_unit}, metadata=metadata,
                 source=name or default_name(spec))


def _op_name(node: ProgramNode) -> str:
    if node.role == GRADIENT:
        return "aten.clone (gradient copy)"
    return str(node.runs().target)


# ---------------------------------------------------------------------- durations


def _numel(value: Any) -> int:
    return sum(t.numel() for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor))


def _shapes(args: Any, *positions: int) -> list[Any]:
    return [tuple(args[k].shape) for k in positions]


# torch's flop registry counts the fused attention kernels of CUDA (flash, efficient, cuDNN) but not
# the CPU one the zoo's transformers run on; counted here by the same formulas (torch.utils.flop_counter:
# 4 b h s_q s_k d forward, twice that backward), instead of the elements-touched fallback, which made
# an attention layer cost as much as an elementwise add (3.2 M instead of 6.4 G on the zoo GPT-12).
_CPU_ATTENTION: dict[Any, Any] = {
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu:
        lambda args: int(sdpa_flop_count(*_shapes(args, 0, 1, 2))),
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward:
        lambda args: int(sdpa_backward_flop_count(*_shapes(args, 0, 1, 2, 3))),
}


def node_flops(node: ProgramNode) -> int:
    """FLOPs of the node's operator where torch has a formula, else the elements it touches.

    Parameters
    ----------
    node : ProgramNode
        A node of a traced program.

    Returns
    -------
    int
        At least 1 for a node that runs something; 0 for one without an FX node.
    """
    n = node.fx
    if n is None:
        return 0
    if node.role == GRADIENT:
        return max(1, _numel(n.meta.get("val")))
    val = n.meta.get("val")
    args, kwargs = fx.node.map_arg((n.args, n.kwargs), lambda a: a.meta.get("val"))
    packet = getattr(n.target, "overloadpacket", None)
    if node.role == OP and packet in _CPU_ATTENTION:
        flops = _CPU_ATTENTION[packet](args)
        if flops > 0:
            return flops
    if packet in flop_registry and node.role == OP:
        flops = int(flop_registry[packet](*args, **kwargs, out_val=val))
        if flops > 0:
            return flops
    largest_read = max((t.numel() for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)),
                       default=0)
    return max(1, largest_read, _numel(val))


def _in_file_order(program: Program, state: State) -> Iterator[tuple[int, Executor]]:
    """Yield each node index of a pass in file order; inputs are freed after their last reader."""
    n = len(program.nodes)
    last_use = list(range(n))
    for v, node in enumerate(program.nodes):
        for u in node.inputs:
            last_use[u] = max(last_use[u], v)
    frees: dict[int, list[int]] = {}
    for v in sorted(set(range(n)) - set(program.outputs())):
        frees.setdefault(last_use[v], []).append(v)
    ex = Executor(program, state)
    for v in range(n):
        yield v, ex  # the caller computes v
        for u in frees.get(v, ()):
            ex.free(u)


def measure_workspace(program: Program, device: torch.device) -> list[int]:
    """The scratch memory (bytes) each node's operator allocates beyond its output, on ``device``.

    One pass in file order; each operator runs alone under the peak
    measurement of `remat_bench.torch.measure.measure_peak` (the profiler's
    memory events on CPU, the allocator's peak statistics on CUDA), and its
    workspace is that peak less the node's memory. What a kernel allocates
    inside itself depends on the machine: oneDNN picks its convolution
    algorithm by the processor's instruction set and the thread count (on an
    AVX2-only x86 processor a weight gradient of a 3x3 convolution may run as
    an im2col GEMM with a scratch buffer four times the weights; with AVX-512
    it runs a direct kernel with almost none), so a workspace is measured
    where the schedule will run, with the same number of threads.

    Parameters
    ----------
    program : Program
        The lowered training step; its operators run on real tensors.
    device : torch.device
        Where they run.

    Returns
    -------
    list of int
        Bytes, one per node, never negative.

    Raises
    ------
    ExecutionError
        An operator that fails on real tensors.
    """
    state = State.create(program.spec, device)
    workspace = [0] * len(program.nodes)
    for v, ex in _in_file_order(program, state):
        peak = measure_peak(device, partial(ex.compute, v))
        workspace[v] = max(0, peak - program.nodes[v].memory)
    return workspace


def profile_costs(program: Program, device: torch.device, repeats: int = 3) -> tuple[list[int], list[int]]:
    """Measured cost of every node, running the nodes in file order on real tensors.

    Returns (nanoseconds, workspace bytes). A warm-up pass comes first; the
    time of a node is the least of ``repeats`` passes; its workspace is
    measured in one more pass (`measure_workspace`).

    Parameters
    ----------
    program : Program
        The lowered training step; its operators run on real tensors.
    device : torch.device
        Where they run.
    repeats : int
        Timed passes after the warm-up.

    Returns
    -------
    tuple of (list of int, list of int)
        Each node's duration in ns (at least 1) and its workspace in bytes.

    Raises
    ------
    ExecutionError
        An operator that fails on real tensors.
    """
    state = State.create(program.spec, device)
    best = np.full(len(program.nodes), np.iinfo(np.int64).max, dtype=np.int64)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    for rep in range(repeats + 1):
        for v, ex in _in_file_order(program, state):
            sync()
            start = time.perf_counter_ns()
            ex.compute(v)
            sync()
            if rep:  # pass 0 warms up caches and kernels
                best[v] = min(best[v], time.perf_counter_ns() - start)
    return [max(1, int(t)) for t in best], measure_workspace(program, device)


# ---------------------------------------------------------------------- re-creating a graph's program


def spec_of(graph: Graph) -> ModelSpec | None:
    """The model spec an imported graph keeps in its metadata, or None for other graphs.

    Parameters
    ----------
    graph : Graph
        Any graph.

    Returns
    -------
    ModelSpec or None

    Raises
    ------
    GraphError
        A spec in the metadata that cannot be read.
    """
    meta = graph.metadata.get(METADATA_KEY)
    if not isinstance(meta, dict) or "spec" not in meta:
        return None
    try:
        return ModelSpec.from_dict(meta["spec"])
    except (KeyError, TypeError, ValueError) as exc:
        raise GraphError(f"{graph.source}: the torch model spec in its metadata is unreadable ({exc})") from None


def program_for_graph(graph: Graph) -> Program:
    """Re-trace the model of an imported graph; refuse if it no longer gives the same nodes.

    Parameters
    ----------
    graph : Graph
        A graph `import_model` wrote.

    Returns
    -------
    Program
        Its nodes in the graph's order, with the same ids, inputs and memory.

    Raises
    ------
    GraphError
        A graph not imported from PyTorch, or one whose model now traces to other nodes or fixed memory.
    ModelSpecError
        A model that can no longer be built or traced.
    """
    spec = spec_of(graph)
    if spec is None:
        raise GraphError(f"{graph.source}: was not imported from PyTorch (no 'torch' model spec in its metadata)")
    program = build_program(spec)
    traced = [(nd.id, tuple(program.nodes[j].id for j in nd.inputs), int(nd.memory)) for nd in program.nodes]
    stored = [(nd.id, tuple(nd.inputs), nd.memory) for nd in graph.nodes]
    version = graph.metadata[METADATA_KEY].get("torch_version", "?")
    if traced != stored or program.fixed_memory != graph.fixed_memory:
        where = next((f"node {k} ('{b[0]}')" for k, (a, b) in enumerate(zip(traced, stored)) if a != b),
                     f"the node count ({len(traced)} traced, {len(stored)} in the file)"
                     if len(traced) != len(stored) else "fixed memory")
        raise GraphError(
            f"{graph.source}: re-tracing model '{spec.model}' with torch {torch.__version__} does not give "
            f"the graph in the file (imported with torch {version}; first difference at {where}); "
            "import the model again with this torch"
        )
    return program
