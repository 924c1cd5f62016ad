"""Import a PyTorch model's training step as a remat-bench graph (docs/design.md sections 2 and 9).

``import_model("resnet18", batch=32)`` traces one training step of a zoo model
(or of ``package.module:factory``, the user's own) with fake tensors
(`remat_bench.torch.trace`), lowers it to remat-bench nodes
(`remat_bench.torch.program`: views folded into their base, dead code dropped)
and writes what the simulator needs:

- ``memory``: bytes of the storage each node allocates (for a multi-output
  operator, all of its outputs); views and aliases count nothing;
- ``fixed_memory``: bytes of the parameters, the buffers (batchnorm running
  statistics) and the batch (inputs and labels), resident throughout.
  Parameter *gradients* are nodes, not fixed memory: they appear during the
  backward pass (PyTorch's ``zero_grad(set_to_none=True)`` default) and are
  outputs of the graph, so they must be resident at the end;
- ``duration`` (``durations="calibrated"``, the default, units ``ns``): each
  node's operator timed on this machine's device, the median of ``repeats``
  runs after a warm-up, cached by operator signature so that the identical
  operators of repeated layers, and a second import, are timed once
  (`remat_bench.torch.calibrate`);
- ``duration`` (``device_profile=``, units ``ns``): each node's roofline time on
  that device, estimated from its FLOPs and the bytes it moves, nothing timed
  (`remat_bench.torch.roofline`);
- ``duration`` (``durations="flops"``, units ``flops``): FLOPs from
  ``torch.utils.flop_counter``'s formulas for the operators that have one
  (matrix products, convolutions, attention and their backward), and for
  every other operator one per element touched (the larger of the elements
  read and written): elementwise and normalisation kernels are memory-bound,
  so their cost follows their size, and a recomputation is never free;
- ``transfer`` (the host link, for offloading): with ``device_profile=``, the
  profile's data-sheet figures (`DeviceProfile.transfer`); timed on CUDA,
  pinned copies measured each way (`remat_bench.torch.measure.measure_link`);
  otherwise none (``--link`` gives one to a run);
- ``kind``: ``forward`` before the loss, ``backward`` from the loss on;
  ``grad_of``: for a backward operator, the forward node whose autograd
  function produced it (matched through autograd sequence numbers);
- ``workspace``: the scratch memory each operator allocates beyond its
  output (oneDNN convolutions and batchnorm backward on CPU allocate an
  output-sized buffer), which fake tensors cannot tell: ``workspace="auto"``
  (the default) runs every operator once on real tensors and measures it
  (`remat_bench.torch.calibrate.calibrate`; cached like durations, and known to be 0 without
  measuring for gradient copies and buffer updates); ``"none"`` leaves it 0,
  so a replay's measured peak can exceed the simulated one by that much. The
  scratch depends on the processor (oneDNN picks its convolution kernels by
  instruction set) and the thread count, so it is measured on the machine
  that will run the schedule (docs/pytorch.md).

Measuring runs the step in file order, which holds its baseline peak; when
that peak, and a quarter more, is above the device's free memory, calibrated
durations fall back to FLOPs and ``auto`` workspaces to 0 (``"measure"``
refuses), said in a `remat_bench.core.provenance.CostWarning`. Either way
``metadata["costs"]`` records how the costs were obtained: durations and
workspace modes, as asked and as done, the device, processor, threads and
torch version they were measured with, repeats, statistic, when, and why
anything was not measured (`cost_record`).

The graph's metadata keeps the model spec (model, batch, shapes, seed, task,
input dtype and id range, constructor arguments) and the torch version; each
node's metadata names its FX node (and, for gradient nodes, the parameter; for
a random operator, its number ``random``, whose seeding ``metadata.torch.random``
states: `remat_bench.torch.randomness`).
`program_for_graph` re-traces the spec and checks that it gives the same
nodes, which is how the replay re-creates the operators of a graph file.
"""

from __future__ import annotations

import datetime as _dt
import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch import fx
from torch.utils.flop_counter import flop_registry, sdpa_backward_flop_count, sdpa_flop_count

from remat_bench.core.baseline import baseline
from remat_bench.core.budget import format_amount
from remat_bench.core.device_profile import DeviceProfile
from remat_bench.core.errors import GraphError, RematBenchError
from remat_bench.core.graph import Graph, Node
from remat_bench.core.provenance import CALIBRATED, COSTS_KEY, COUNTED, MEASURED, NONE, UNMEASURED, CostWarning
from remat_bench.torch.build import first_line
from remat_bench.torch.calibrate import IN_PLACE, STATISTIC, WARMUP, Calibration, CostCache, OutOfTime, calibrate
from remat_bench.torch.executor import ExecutionError
from remat_bench.torch.measure import free_memory_bytes, measure_link, measured_where
from remat_bench.torch.program import GRADIENT, OP, Program, ProgramNode, build_program
from remat_bench.torch.randomness import SEEDING
from remat_bench.torch.roofline import profile_asked, roofline_durations, with_roofline
from remat_bench.torch.spec import ModelSpec, model_spec
from remat_bench.torch.zoo import ModelSpecError

# ``profile`` is the former name of ``calibrated``, kept for the scripts and configs that use it.
DURATIONS = ("calibrated", "flops", "profile")
WORKSPACES = ("auto", "measure", "none")
DEFAULT_REPEATS = 5
METADATA_KEY = "torch"
# Running the step to measure it holds its baseline peak, and scratch memory no one has measured yet:
# it runs here only when the free memory is at least this much more than that peak.
MEASURE_HEADROOM = 1.25


def import_model(model: str, batch: int | None = None, input_shape: Sequence[int] | None = None,
                 durations: str = CALIBRATED, seed: int = 0, repeats: int = DEFAULT_REPEATS,
                 device: str | None = None, name: str | None = None, workspace: str | None = "auto", *,
                 task: str | None = None, input_dtype: str | None = None, input_range: int | None = None,
                 model_kwargs: Mapping[str, Any] | None = None, cost_cache: CostCache | None = None,
                 measure_deadline: float | None = None, device_profile: DeviceProfile | str | None = None,
                 **kwargs: Any) -> Graph:
    """The training graph of ``model`` (a zoo name or ``package.module:factory``) at ``batch``, with costs
    measured on this machine.

    ``input_shape`` is per sample (the zoo gives a default). ``task``
    (``classify``, ``segment``, ``language``, ``regress``; default: the zoo
    entry's, else chosen from the output) fixes the loss and the labels;
    ``input_dtype`` the batch's dtype (default int64 for ``language``, else
    float32); ``input_range`` the number of token ids of integer inputs
    (default for ``language``: the vocabulary of the logits). ``model_kwargs``
    and ``kwargs`` go to the model's constructor (``model_kwargs`` for names
    this function takes itself, such as ``batch``).

    Costs (module docstring): ``durations="calibrated"`` times every operator on
    ``device`` (the median of ``repeats`` runs, ns), ``"flops"`` counts FLOPs;
    ``workspace="auto"`` measures every operator's scratch memory, ``"measure"``
    too but refuses when the step cannot run here, ``"none"`` leaves it 0.
    Measured costs come from and go to ``cost_cache``. When the step would not
    fit in the device's free memory, or is not measured by ``measure_deadline``,
    calibrated durations fall back to FLOPs and ``auto`` workspaces to 0, each
    said in a `CostWarning` and recorded in the graph's ``metadata["costs"]``.
    With ``device_profile``, durations are the roofline estimates of that
    device (ns, `remat_bench.torch.roofline`) and nothing is timed here.

    Parameters
    ----------
    model : str
        A zoo name or ``package.module:factory``.
    batch : int or None
        Samples per batch (None: 8).
    input_shape : Sequence of int or None
        One sample's shape (None: the zoo entry's; a model outside the zoo needs it).
    durations : str
        ``calibrated`` (timed on ``device``, ns), ``flops`` (counted from the trace), or ``profile`` (the former
        name of ``calibrated``).
    seed : int
        Seeds the parameters (``seed``) and the batch (``seed + 1``).
    repeats : int
        Timed runs of each operator after its warm-up; its duration is their median.
    device : str or None
        Where operators run to be timed or measured (None: cpu).
    name : str or None
        The graph's name (None: ``torch-<model>-b<batch>``).
    workspace : str or None
        ``auto``, ``measure`` or ``none`` (None: ``auto``).
    task : str or None
        ``classify``, ``segment``, ``language``, ``regress`` or ``auto`` (None: the zoo entry's, else auto).
    input_dtype : str or None
        One of `remat_bench.torch.spec.INPUT_DTYPES` (None: int64 for ``language``, else float32).
    input_range : int or None
        Integer inputs lie in ``[0, input_range)``.
    model_kwargs : Mapping or None
        Constructor arguments, for names this function takes itself.
    cost_cache : CostCache or None
        Measured operator costs by signature (None: the user's, `remat_bench.torch.calibrate.cost_cache_path`).
    measure_deadline : float or None
        Wall-clock time (``time.time()``) by which measuring stops (None: none); what was measured is cached.
    device_profile : DeviceProfile, str or None
        Estimate durations on this device instead of timing them: a profile, a shipped profile's name or a
        profile file's path (`remat_bench.core.device_profile.load_device_profile`); only with the default
        ``durations``.
    **kwargs : Any
        More constructor arguments.

    Returns
    -------
    Graph
        Memory in bytes, durations in ``ns`` or ``flops``; its metadata keeps the spec and how its costs were
        obtained (module docstring).

    Raises
    ------
    GraphError
        An unknown ``durations`` or ``workspace``, ``repeats`` below 1, a CUDA ``device`` where there is none,
        or ``durations`` other than the default beside a ``device_profile``.
    DeviceProfileError
        A ``device_profile`` that cannot be loaded.
    ModelSpecError
        A model, factory, shape, task or argument that cannot be used, a model that cannot be traced,
        one that traces but fails on real tensors, or ``workspace="measure"`` for a step that cannot run here
        (or in time).
    """
    wanted, workspace = _costs_asked(durations, workspace, repeats)
    profile = profile_asked(device_profile, durations)
    if profile is not None:
        wanted = COUNTED  # nothing timed: the profile's roofline replaces the counted durations
    spec = model_spec(model, batch=batch, input_shape=tuple(input_shape) if input_shape else None,
                      seed=seed, task=task, input_dtype=input_dtype, input_range=input_range,
                      kwargs=_constructor(model_kwargs, kwargs))
    graph, notes = _graph_with_costs(build_program(spec), device, wanted, workspace, repeats, cost_cache,
                                     measure_deadline, name, profile)
    for note in notes:
        warnings.warn(note, CostWarning, stacklevel=2)
    return graph


def _costs_asked(durations: str, workspace: str | None, repeats: int) -> tuple[str, str]:
    """The durations and workspace modes `import_model` was asked for, ``profile`` read as ``calibrated`` and
    None as ``auto``; GraphError for an unknown mode, or ``repeats`` below 1."""
    if durations not in DURATIONS:
        raise GraphError(f"durations must be one of {', '.join(DURATIONS)}, not {durations!r}")
    workspace = workspace or "auto"
    if workspace not in WORKSPACES:
        raise GraphError(f"workspace must be one of {', '.join(WORKSPACES)}, not {workspace!r}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise GraphError(f"repeats must be a whole number of at least 1, not {repeats!r}")
    return (CALIBRATED if durations == "profile" else durations), workspace


def _constructor(model_kwargs: Mapping[str, Any] | None, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The model's constructor arguments, from `import_model`'s ``model_kwargs`` and its other keywords."""
    constructor = dict(model_kwargs or {})
    twice = sorted(set(constructor) & set(kwargs))
    if twice:
        raise ModelSpecError(f"the model's argument {twice[0]!r} is given twice (in model_kwargs and as a keyword)")
    constructor.update(kwargs)
    return constructor


def _graph_with_costs(program: Program, device: str | None, durations: str, workspace: str, repeats: int,
                      cost_cache: CostCache | None, measure_deadline: float | None, name: str | None,
                      profile: DeviceProfile | None = None) -> tuple[Graph, list[str]]:
    """The program's graph with its costs measured as asked (`import_model`'s arguments), or counted where
    they could not be measured; and the sentences saying what was not."""
    spec = program.spec
    dev = torch.device(device or "cpu")
    measuring = durations == CALIBRATED or workspace != NONE
    if dev.type == "cuda" and measuring and not torch.cuda.is_available():
        raise GraphError(f"device '{device}' is not available here to measure the costs on (torch sees no CUDA "
                         "device); measure on cpu, or import with durations='flops' and workspace='none'")
    flops = [node_flops(node) for node in program.nodes]
    counted = program_graph(program, flops, "flops", name=name)
    short = _memory_short(int(baseline(counted).peak), dev) if measuring else ""
    try:
        measured = calibrate(program, dev, durations=durations == CALIBRATED, workspace=workspace != NONE,
                             repeats=repeats, cache=cost_cache if cost_cache is not None else CostCache.user(),
                             may_run=not short, deadline=measure_deadline) if measuring else None
    except ExecutionError as exc:  # traced with fake tensors, an operator can still fail on real ones
        raise ModelSpecError(f"model '{spec.model}' traces, but running it on real tensors fails: {exc}") from None
    except OutOfTime:
        measured, short = None, ("not every operator was measured in the time allowed (those measured are cached: "
                                 "importing it again goes on from there)")
    fell_back = measured is None and measuring
    if fell_back and workspace == "measure":
        raise ModelSpecError(f"model '{spec.model}' cannot run here to measure its workspaces: {short}; import it "
                             "with --workspace auto (workspaces 0, said in the graph), with more time, or on a "
                             "machine with more memory")
    timed = measured is not None and measured.durations is not None
    estimated = roofline_durations(program, profile, flops) if profile is not None else None
    graph = program_graph(program,
                          estimated if estimated is not None else
                          measured.durations if timed else flops,  # type: ignore[union-attr, arg-type]
                          "ns" if timed or estimated is not None else "flops",
                          measured.workspace if measured is not None else None, name=name)
    if measured is not None and measured.workspace is not None:
        graph.metadata[METADATA_KEY]["workspace"] = measured_where(dev)  # where replay's note looks
    notes = [_fallback_note(spec.model, short, durations == CALIBRATED, workspace != NONE)] if fell_back else []
    graph.metadata[COSTS_KEY] = cost_record(durations, workspace, measured, repeats, notes)
    if profile is not None:
        graph.metadata[COSTS_KEY] = with_roofline(graph.metadata[COSTS_KEY], profile)
        graph = graph.with_transfer(profile.transfer())  # its data sheet's host link, as its durations
    elif timed and dev.type == "cuda":
        graph = graph.with_transfer(measure_link(dev))  # the link the durations were timed beside
    return graph, notes


def _memory_short(peak: int, device: torch.device) -> str:
    """Why the step cannot run on ``device`` to be measured, in a clause; empty when it can (or when the free
    memory is not known: no refusal on a guess)."""
    free = free_memory_bytes(device)
    needed = math.ceil(MEASURE_HEADROOM * peak)
    if free is None or needed <= free:
        return ""
    return (f"running its step needs about {format_amount(needed, 'bytes')} on {device} (its baseline peak "
            f"{format_amount(peak, 'bytes')} and a quarter more for scratch memory), and "
            f"{format_amount(free, 'bytes')} is free")


def _fallback_note(model: str, why: str, durations: bool, workspace: bool) -> str:
    """The sentence of an import whose costs could not be measured here, ``why`` saying why."""
    lost = " and ".join(part for part, asked in (("durations are FLOPs", durations),
                                                 ("workspaces are 0", workspace)) if asked)
    memory = ", so a real run's peak can exceed the simulated one" if workspace else ""
    return f"the costs of model '{model}' were not measured: {why}; its {lost}{memory}"


def cost_record(durations: str, workspace: str, measured: Calibration | None, repeats: int,
                notes: Sequence[str] = ()) -> dict[str, Any]:
    """The graph's ``metadata["costs"]``: how its durations and workspaces were obtained (core.provenance).

    Parameters
    ----------
    durations : str
        ``calibrated`` or ``flops``, as asked.
    workspace : str
        ``auto``, ``measure`` or ``none``, as asked.
    measured : Calibration or None
        What was measured (None: nothing, as asked or because the step could not run here).
    repeats : int
        Timed passes of the step, every operator timed in place in each.
    notes : Sequence of str
        Sentences about costs not measured as asked.

    Returns
    -------
    dict
        ``durations``, ``duration_unit``, ``workspace``, ``requested``, ``measured_on`` (device, machine,
        processor, CPU capability, threads, GPU, torch version; None when nothing was measured), ``repeats``,
        ``warmup``, ``statistic`` and ``timed`` (calibrated only: `remat_bench.torch.calibrate.IN_PLACE`),
        ``counts`` (signatures timed and measured now, nodes answered from the cache, workspaces known to be
        0), ``when`` (UTC) and ``notes``.
    """
    timed = measured is not None and measured.durations is not None
    if measured is not None and measured.workspace is not None:
        ws = MEASURED
    else:
        ws = NONE if workspace == NONE else UNMEASURED
    record: dict[str, Any] = {
        "durations": CALIBRATED if timed else COUNTED, "duration_unit": "ns" if timed else "flops",
        "workspace": ws, "requested": {"durations": durations, "workspace": workspace},
        "measured_on": dict(measured.machine) if measured is not None else None,
    }
    if timed:
        record.update(repeats=repeats, warmup=WARMUP, statistic=STATISTIC, timed=IN_PLACE)
    if measured is not None:
        record["counts"] = {"timed": measured.timed, "measured": measured.measured,
                            "from_cache": measured.from_cache, "known_zero": measured.known_zero}
    record["when"] = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    record["notes"] = list(notes)
    return record


def import_model_reporting(options: dict[str, Any], search: Sequence[str] = ()) -> tuple[str, Any]:
    """`import_model(**options)` for a child process: ``("graph", {"graph": dict, "warnings": sentences})``
    or ``("refused", sentence)``.

    The `CostWarning`s of the import are returned, not printed: the parent says them its own way.

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
        ``("graph", dict)``: the graph as `Graph.to_dict` gives it and the import's cost warnings; or
        ``("refused", str)``: why not.
    """
    import sys

    for folder in reversed(search):
        if folder not in sys.path:
            sys.path.insert(0, folder)
    model = options.get("model", "?")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", CostWarning)
            graph = import_model(**options)
        said = [str(w.message) for w in caught if issubclass(w.category, CostWarning)]
        return "graph", {"graph": graph.to_dict(), "warnings": said}
    except RematBenchError as exc:
        return "refused", str(exc)
    except BaseException as exc:  # the user's code may raise anything, SystemExit included
        first = first_line(exc)[:300]
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
        if node.random is not None:
            meta["random"] = node.random  # k: seeded with random_key(seed, step, k) (torch.randomness)
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
    metadata: dict[str, Any] = {
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
    random = [node.id for node in nodes if node.random is not None]
    if random:
        metadata[METADATA_KEY]["random"] = {"nodes": random, "seeding": SEEDING}
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


# ---------------------------------------------------------------------- re-creating a graph's program


def random_nodes(graph: Graph) -> frozenset[int]:
    """The nodes of an imported graph that draw random numbers (dropout), as the importer marks them.

    Parameters
    ----------
    graph : Graph
        Any graph (none of another's nodes is marked).

    Returns
    -------
    frozenset of int
        Node indices.
    """
    return frozenset(v for v, node in enumerate(graph.nodes) if (node.metadata or {}).get("random") is not None)


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
