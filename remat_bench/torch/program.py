"""A PyTorch training step as a program of remat-bench nodes: tracing, and running it node by node.

Tracing. The training step (forward, loss, backward) is traced into one aten
graph by ``make_fx(functionalize(step), tracing_mode="fake")``, where ``step``
is ``torch.func.grad_and_value`` over ``torch.func.functional_call`` of the
model and its loss. Every tensor is a FakeTensor: shapes, dtypes and storages
are known, no memory is allocated, so any batch size traces. Functionalization
replaces in-place operators on intermediate values with out-of-place ones
(mutations of buffers, such as batchnorm's step counter, become ``copy_``
nodes at the end). Autograd hooks put each backward operator's autograd
sequence number in its node's metadata (``seq_nr``), which is how a backward
node finds the forward node it differentiates. make_fx also records the stack of
modules whose ``forward`` ran each forward operator (``nn_module_stack``): the
innermost one becomes the node's ``module`` metadata.

Lowering to remat-bench nodes (docs/design.md section 2: a node is an operator and
the one value it produces):

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
them; the `Executor` runs random operator k with the generators seeded from
the spec's seed, the training step and k, so that a recomputation draws the
first computation's values, and `reference_step` runs eager autograd under
`remat_bench.torch.randomness.seeded_random_ops`, which draws the same.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import operator
import os
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import torch
import torch.fx.traceback as fx_traceback
import torch.utils._pytree as pytree
from torch import fx, nn
from torch._subclasses.fake_tensor import FakeCopyMode, FakeTensorMode, unset_fake_temporarily
from torch.func import functional_call, functionalize, grad_and_value
from torch.fx.experimental.proxy_tensor import make_fx
from torch.multiprocessing.reductions import StorageWeakRef
from torch.nn.modules.lazy import LazyModuleMixin

from remat_bench.core.schedule import COMPUTE
from remat_bench.torch import TORCH_LOG_SWITCHES, ecosystem
from remat_bench.torch.randomness import is_random_call, random_key, seeded_generators, seeded_random_ops
from remat_bench.torch.zoo import (
    TASKS,
    ZOO,
    ModelSpecError,
    TrainingStep,
    build_module,
    ecosystem_name,
    load_factory,
)

OP, GRADIENT, UPDATE = "op", "gradient", "update"


# ---------------------------------------------------------------------- the model spec


@dataclass(frozen=True)
class ModelSpec:
    """Everything needed to rebuild a model, its batch and its loss: what the graph's metadata keeps.

    ``input_shape`` is per sample (the batch dimension is ``batch``);
    ``label_shape`` is per batch (the batch dimension first). ``kwargs`` go to
    the model's constructor or factory. Integer inputs (token ids) lie in
    ``[0, input_range)``; integer labels in ``[0, label_range)``; float labels
    (``regress``) are normal. Parameters are initialised by the model's own
    initialisers after ``torch.manual_seed(seed)``; the batch is drawn from a
    generator seeded with ``seed + 1``.
    """

    model: str
    batch: int
    input_shape: tuple[int, ...]
    task: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    input_dtype: str = "float32"
    input_range: int | None = None
    label_shape: tuple[int, ...] = ()
    label_range: int | None = None
    seed: int = 0

    def as_dict(self) -> dict[str, Any]:
        """The spec as plain JSON values (shapes as lists): what a graph's metadata keeps.

        Returns
        -------
        dict
        """
        return {
            "model": self.model, "batch": self.batch, "input_shape": list(self.input_shape),
            "task": self.task, "kwargs": dict(self.kwargs), "input_dtype": self.input_dtype,
            "input_range": self.input_range, "label_shape": list(self.label_shape),
            "label_range": self.label_range, "seed": self.seed,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelSpec:
        """The spec `as_dict` wrote; the optional fields may be missing.

        Parameters
        ----------
        data : dict
            ``model``, ``batch``, ``input_shape`` and ``task``, and any of the other fields.

        Returns
        -------
        ModelSpec

        Raises
        ------
        KeyError, TypeError, ValueError
            A required field missing, or a field of the wrong type.
        """
        return cls(
            model=data["model"], batch=int(data["batch"]), input_shape=tuple(data["input_shape"]),
            task=data["task"], kwargs=dict(data.get("kwargs") or {}),
            input_dtype=data.get("input_dtype", "float32"), input_range=data.get("input_range"),
            label_shape=tuple(data.get("label_shape") or ()), label_range=data.get("label_range"),
            seed=int(data.get("seed", 0)),
        )


# Input dtypes a batch can be drawn in: floats are normal, integers uniform in [0, input_range).
INPUT_DTYPES = ("float32", "float64", "float16", "bfloat16", "int64", "int32")
# What each task needs of the model's output (`TrainingStep` computes the loss from it).
TASK_OUTPUTS = {"classify": "(N, C)", "segment": "(N, C, ...)", "language": "(N, T, V)"}


def _integer(dtype: str) -> bool:
    return not getattr(torch, dtype).is_floating_point


def model_spec(model: str, batch: int | None = None, input_shape: tuple[int, ...] | None = None,
               seed: int = 0, *, task: str | None = None, input_dtype: str | None = None,
               input_range: int | None = None, kwargs: dict[str, Any] | None = None) -> ModelSpec:
    """Resolve defaults (zoo input shape, task, dtype) and the label shape, from one fake forward pass.

    ``input_shape`` is per sample (without the batch dimension); a user's own
    model (``package.module:factory``) needs it. ``task`` defaults to the zoo
    entry's, else ``auto`` (classify an ``(N, C)`` output, regress any other);
    ``input_dtype`` to int64 for ``language``, else float32; ``input_range``
    (the number of token ids) to the vocabulary of a language model's logits,
    and other integer inputs need it. ``kwargs`` go to the constructor.

    Parameters
    ----------
    model : str
        A zoo name or ``package.module:factory``.
    batch : int or None
        Samples per batch (None: 8).
    input_shape : tuple of int or None
        One sample's shape (None: the zoo entry's).
    seed : int
        Kept in the spec: it seeds the parameters and the batch.
    task : str or None
        One of `remat_bench.torch.zoo.TASKS` or ``auto``.
    input_dtype : str or None
        One of `INPUT_DTYPES`.
    input_range : int or None
        Integer inputs lie in ``[0, input_range)``.
    kwargs : dict or None
        The model's constructor arguments.

    Returns
    -------
    ModelSpec
        Every default resolved, and the label shape and range the task needs.

    Raises
    ------
    ModelSpecError
        An unknown model, a bad batch, shape, task, dtype or range, a model that cannot be built or fails
        on its input, or an output the task cannot use.
    """
    kwargs = dict(kwargs or {})
    model_factory(model)  # an unknown model or factory is named before anything else
    entry = ecosystem.entry(model, kwargs) if ecosystem_name(model) else ZOO.get(model)
    if batch is None:
        batch = 8
    if batch < 1:
        raise ModelSpecError(f"the batch must be at least 1, not {batch}")
    if input_shape is None:
        if entry is None:
            raise ModelSpecError(f"model '{model}' is not in the zoo: give its per-sample input shape "
                                 "(--input-shape, e.g. 3x32x32)")
        input_shape = entry.input_shape
    if any(d < 1 for d in input_shape):
        raise ModelSpecError(f"the input shape {tuple(input_shape)} has a dimension below 1")
    if task is None:
        task = entry.task if entry is not None else "auto"
    if task not in (*TASKS, "auto"):
        raise ModelSpecError(f"the task must be one of {', '.join(TASKS)} or auto, not {task!r}")
    if input_dtype is None:
        input_dtype = "int64" if task == "language" else "float32"
    if input_dtype not in INPUT_DTYPES:
        raise ModelSpecError(f"the input dtype must be one of {', '.join(INPUT_DTYPES)}, not {input_dtype!r}")
    if input_range is not None and not _integer(input_dtype):
        raise ModelSpecError(f"a range of input ids (--vocab {input_range}) needs integer inputs "
                             f"(--input-dtype int64), not {input_dtype}")
    if input_range is not None and input_range < 1:
        raise ModelSpecError(f"the range of input ids (--vocab) must be at least 1, not {input_range}")
    mode = SharedFakeMode()
    module = build_model(model, kwargs, tuple(input_shape), input_dtype, mode)
    with mode, _fake_failures_unlogged():
        inputs = torch.zeros((batch, *input_shape), dtype=getattr(torch, input_dtype))
        try:
            out = module(inputs)
        except Exception as exc:  # the user's model rejects the shape: say so in one sentence
            hint = ""
            if not _integer(input_dtype) and "indices" in str(exc):
                hint = ("; a model that takes token ids needs --input-dtype int64 (--task language "
                        "implies it)")
            raise ModelSpecError(
                f"model '{model}' fails on an input of shape {tuple(inputs.shape)} ({input_dtype}): "
                f"{type(exc).__name__}: {_first_line(exc)}{hint}"
            ) from None
    if not isinstance(out, torch.Tensor) or not out.is_floating_point():
        raise ModelSpecError(f"model '{model}' must return one floating-point tensor (logits or predictions)")
    if task == "auto":
        task = "classify" if out.dim() == 2 else "regress"
    if (task == "classify" and out.dim() != 2) or (task == "segment" and out.dim() < 3) or \
            (task == "language" and out.dim() != 3):
        raise ModelSpecError(f"task '{task}' needs an output of shape {TASK_OUTPUTS[task]}, but model "
                             f"'{model}' returns one of shape {tuple(out.shape)}")
    label_shape: tuple[int, ...]
    if task == "classify":
        label_shape, label_range = (out.shape[0],), out.shape[1]
    elif task == "segment":
        label_shape, label_range = (out.shape[0], *out.shape[2:]), out.shape[1]
    elif task == "language":
        label_shape, label_range = tuple(out.shape[:2]), out.shape[2]
    else:
        label_shape, label_range = tuple(out.shape), None
    if _integer(input_dtype) and input_range is None:
        if task != "language":
            raise ModelSpecError(f"model '{model}' takes integer inputs ({input_dtype}): give the range of "
                                 "their values with --vocab N (e.g. the size of its embedding)")
        input_range = int(out.shape[2])  # a language model reads ids of the vocabulary it predicts
    return ModelSpec(model=model, batch=batch, input_shape=tuple(int(d) for d in input_shape), task=task,
                     kwargs=kwargs, input_dtype=input_dtype, input_range=input_range,
                     label_shape=tuple(int(d) for d in label_shape),
                     label_range=None if label_range is None else int(label_range), seed=seed)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


# ---------------------------------------------------------------------- building the model


class SharedFakeMode(FakeTensorMode):
    """A fake tensor mode that deep copies share instead of duplicating.

    ``Tensor.__deepcopy__`` deep-copies a tensor's Python attributes, and a
    FakeTensor keeps its mode in one (``fake_mode``): ``copy.deepcopy`` of a
    module built under a plain FakeTensorMode gives tensors of a *copy* of the
    mode, and the first operator that meets both fails with "Mixing fake modes
    NYI". ``nn.TransformerEncoder`` and ``nn.TransformerDecoder`` clone their
    layer that way (``_get_clones``), as do many users' builders. A mode is the
    context tensors live in, not their data, so a copy keeps the original.
    """

    def __deepcopy__(self, memo: dict[int, Any]) -> SharedFakeMode:
        return self


@contextlib.contextmanager
def logger_quiet(name: str, level: int) -> Iterator[None]:
    """Raise logger ``name`` to ``level`` for the block, unless the user asked torch for its logs
    (TORCH_LOGS ...).

    Parameters
    ----------
    name : str
        The logger's name.
    level : int
        The `logging` level it is set to; its own level comes back after the block.

    Yields
    ------
    None
    """
    if any(os.environ.get(switch) for switch in TORCH_LOG_SWITCHES):
        yield
        return
    logger = logging.getLogger(name)
    saved = logger.level
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.setLevel(saved)


def _fake_failures_unlogged() -> contextlib.AbstractContextManager[None]:
    """Keep FakeTensorMode from logging an operator that fails on fake tensors, traceback and all.

    It logs every failing meta kernel at ERROR (18 lines for a wrong
    ``--input-shape``) and then raises, and the caller says the error in one
    sentence. A user who asks torch for its logs (TORCH_LOGS ...) still gets it.
    """
    return logger_quiet("torch._subclasses.fake_tensor", logging.CRITICAL)


@contextlib.contextmanager
def _no_stack_traces() -> Iterator[None]:
    """Recording module stacks makes make_fx record each node's Python stack trace as well, which
    nothing here reads and which doubles the time to trace a ResNet-50: off while tracing."""
    import torch.fx.config as fx_config

    saved = fx_config.do_not_emit_stack_traces
    fx_config.do_not_emit_stack_traces = True
    try:
        yield
    finally:
        fx_config.do_not_emit_stack_traces = saved


@contextlib.contextmanager
def _building_fake() -> Iterator[None]:
    """While a model is built with fake tensors: no warning about fake data pointers.

    ``copy.deepcopy`` of a fake tensor reads its data pointer to choose how to
    copy it, and torch warns about that; the copy itself is right.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Accessing the data pointer of FakeTensor")
        yield


_UNINITIALIZED_NEW = (nn.parameter.UninitializedParameter.__new__.__code__,
                      nn.parameter.UninitializedBuffer.__new__.__code__)


def _from_lazy_module(exc: BaseException | None) -> bool:
    """Whether ``exc`` was raised creating a lazy module's uninitialized parameter or buffer."""
    tb: TracebackType | None = exc.__traceback__ if exc is not None else None
    while tb is not None:
        if tb.tb_frame.f_code in _UNINITIALIZED_NEW:
            return True
        tb = tb.tb_next
    return False


def _uninitialized(module: nn.Module) -> bool:
    return any(isinstance(m, LazyModuleMixin) and m.has_uninitialized_params() for m in module.modules())


def _materialize_lazy(module: nn.Module, model: str, input_shape: tuple[int, ...], input_dtype: str) -> None:
    """Give lazy modules (``nn.LazyLinear`` ...) their shapes: one forward pass on a one-sample batch.

    In eval mode and without gradients, so that it updates no batchnorm
    statistics and needs no second sample for them. The lazy modules draw
    their initial values then, after the rest of the model, from the random
    state `build_step` seeded: the same values on every build.
    """
    if not _uninitialized(module):
        return
    modes = {m: m.training for m in module.modules()}
    module.eval()
    sample = torch.zeros((1, *input_shape), dtype=getattr(torch, input_dtype))
    try:
        with torch.no_grad():
            module(sample)
    except Exception as exc:
        raise ModelSpecError(
            f"model '{model}' has lazy modules, and the forward pass that gives them their shapes fails on "
            f"an input of shape {tuple(sample.shape)} ({input_dtype}): {type(exc).__name__}: {_first_line(exc)}"
        ) from None
    finally:
        for m, training in modes.items():
            m.training = training
    if _uninitialized(module):
        raise ModelSpecError(f"model '{model}' has lazy modules that its forward pass does not reach, so they "
                             "have no shape; remove them or give them their input size")


def model_factory(model: str) -> Callable[..., nn.Module]:
    """What builds ``model``: `remat_bench.torch.ecosystem.factory` for an ecosystem name, else `load_factory`.

    Parameters
    ----------
    model : str
        A zoo name, an ecosystem name (``torchvision:NAME``, ``timm:NAME``, ``hf:FAMILY``) or
        ``package.module:factory``.

    Returns
    -------
    callable
        Called with the model's keyword arguments, it returns the ``nn.Module``.

    Raises
    ------
    ModelSpecError
        A name neither resolves, or a factory that may not be called.
    """
    return ecosystem.factory(model) if ecosystem_name(model) else load_factory(model)


def build_model(model: str, kwargs: dict[str, Any], input_shape: tuple[int, ...], input_dtype: str,
                fake_mode: FakeTensorMode | None = None) -> nn.Module:
    """The model with its lazy modules materialized; with ``fake_mode``, its tensors are fake ones of it.

    Call it outside any fake mode. ``input_shape`` (per sample) and
    ``input_dtype`` are what lazy modules are materialized with.

    Parameters
    ----------
    model : str
        A zoo name or ``package.module:factory``.
    kwargs : dict
        The model's constructor arguments.
    input_shape : tuple of int
        One sample's shape.
    input_dtype : str
        The inputs' dtype name (``float32``).
    fake_mode : FakeTensorMode or None
        The mode whose fake tensors the model holds (None: real tensors).

    Returns
    -------
    nn.Module

    Raises
    ------
    ModelSpecError
        A model that cannot be built, or whose lazy modules cannot be materialized.
    """
    if fake_mode is None:
        module = build_module(model, kwargs, model_factory(model))
        _materialize_lazy(module, model, input_shape, input_dtype)
        return module
    try:
        with fake_mode, _building_fake():
            return build_module(model, kwargs, model_factory(model))
    except ModelSpecError as exc:
        if not _from_lazy_module(exc.__cause__):
            raise
    # A lazy module's uninitialized parameter cannot be a fake tensor: build the model with real
    # tensors (its parameters and one sample's activations), materialize it, copy it into the mode.
    with unset_fake_temporarily():
        module = build_module(model, kwargs, model_factory(model))
        _materialize_lazy(module, model, input_shape, input_dtype)
    with FakeCopyMode(fake_mode):
        return copy.deepcopy(module)


def build_step(spec: ModelSpec, fake_mode: FakeTensorMode | None = None) -> TrainingStep:
    """The model with its loss, parameters initialised from ``spec.seed`` (fake ones with ``fake_mode``).

    The global random state is left as it was.

    Parameters
    ----------
    spec : ModelSpec
        The model and its task.
    fake_mode : FakeTensorMode or None
        The mode whose fake tensors the model holds (None: real tensors).

    Returns
    -------
    TrainingStep
        In training mode.

    Raises
    ------
    ModelSpecError
        A model that cannot be built.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        module = build_model(spec.model, spec.kwargs, spec.input_shape, spec.input_dtype, fake_mode)
        step = TrainingStep(module, spec.task)
    return step.train()


def make_batch(spec: ModelSpec, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """The input batch and its labels, drawn from a generator seeded with ``spec.seed + 1``.

    Parameters
    ----------
    spec : ModelSpec
        Shapes, dtype and ranges of the batch.
    device : torch.device or str
        Where the tensors go; they are drawn on the CPU, so every device gets the same values.

    Returns
    -------
    tuple of (torch.Tensor, torch.Tensor)
        The inputs (normal floats, or integers in ``[0, input_range)``) and the labels (integers in
        ``[0, label_range)``, or normal floats for ``regress``).
    """
    gen = torch.Generator().manual_seed(spec.seed + 1)
    shape = (spec.batch, *spec.input_shape)
    dtype = getattr(torch, spec.input_dtype)
    if _integer(spec.input_dtype):
        inputs = torch.randint(0, spec.input_range or 2, shape, generator=gen, dtype=dtype)
    else:
        inputs = torch.randn(shape, generator=gen, dtype=dtype)
    if spec.label_range is None:
        labels = torch.randn(spec.label_shape, generator=gen)
    else:
        labels = torch.randint(0, spec.label_range, spec.label_shape, generator=gen)
    return inputs.to(device), labels.to(device)


# ---------------------------------------------------------------------- tracing


def _install_seq_nr_hooks(loss: torch.Tensor) -> None:
    """While autograd runs each backward function, put its sequence number in the FX metadata.

    The forward node created by an autograd function gets that function's
    sequence number as ``seq_nr`` on its own; these hooks give the backward
    operators the same number (what AOTAutograd does for its joint graphs).
    """
    seen: set[Any] = set()
    stack = [loss.grad_fn] if loss.grad_fn is not None else []
    while stack:
        fn = stack.pop()
        if fn in seen:
            continue
        seen.add(fn)
        seq = fn._sequence_nr()
        fn.register_prehook(lambda grads, seq=seq: fx_traceback.set_grad_fn_seq_nr(seq))
        fn.register_hook(lambda grad_in, grad_out: fx_traceback.reset_grad_fn_seq_nr())
        stack.extend(nxt for nxt, _ in fn.next_functions if nxt is not None and nxt not in seen)


def trace_step(spec: ModelSpec) -> tuple[fx.GraphModule, list[str], list[str]]:
    """The joint forward-backward aten graph of one training step (fake tensors throughout).

    Returns the graph module and the parameter and buffer names, in the order
    of the graph's placeholders (parameters, buffers, inputs, labels). The
    graph returns ``[loss, grad_1, ..., grad_P]``.

    Parameters
    ----------
    spec : ModelSpec
        The model, its batch and its task.

    Returns
    -------
    tuple of (fx.GraphModule, list of str, list of str)
        The graph module, the parameter names and the buffer names.
    """
    mode = SharedFakeMode()
    step = build_step(spec, mode)
    with mode:
        inputs, labels = fake_batch(spec)
        params = {k: p.detach() for k, p in step.named_parameters()}
        buffers = {k: b for k, b in step.named_buffers()}
    names, buffer_names = list(params), list(buffers)

    def loss_fn(param_values: list[torch.Tensor], buffer_values: list[torch.Tensor],
                x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        state = dict(zip(names, param_values))
        state.update(zip(buffer_names, buffer_values))
        loss = functional_call(step, state, (x, y))
        _install_seq_nr_hooks(loss)
        return loss

    def train_step(param_values: list[torch.Tensor], buffer_values: list[torch.Tensor],
                   x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        grads, loss = grad_and_value(loss_fn)(param_values, buffer_values, x, y)
        return loss, grads

    traced = functionalize(train_step)
    # make_fx records each node's module stack (node.meta["nn_module_stack"]) only when the traced
    # callable names its root module as ``_orig_mod``: the convention AOTAutograd follows for its
    # functional call (torch/_functorch/_aot_autograd/graph_capture_wrappers.py). Paths are then
    # relative to the training step: ``model.blocks.3.attn.qkv``.
    traced._orig_mod = step  # type: ignore[attr-defined]
    with fx_traceback.preserve_node_meta(), _fake_failures_unlogged(), _no_stack_traces():
        gm = make_fx(traced, tracing_mode="fake", record_module_stack=True)(
            list(params.values()), list(buffers.values()), inputs, labels)
    return gm, names, buffer_names


def fake_batch(spec: ModelSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch of zeros of the spec's shapes and dtypes, for tracing: call it inside a fake tensor mode.

    Parameters
    ----------
    spec : ModelSpec
        Shapes and dtypes of the batch.

    Returns
    -------
    tuple of (torch.Tensor, torch.Tensor)
        The inputs, and the labels (int64, or float32 for ``regress``).
    """
    shape = (spec.batch, *spec.input_shape)
    inputs = torch.zeros(shape, dtype=getattr(torch, spec.input_dtype))
    labels = torch.zeros(spec.label_shape, dtype=torch.float32 if spec.label_range is None else torch.int64)
    return inputs, labels


# ---------------------------------------------------------------------- the program


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


def _nbytes(t: torch.Tensor) -> int:
    return int(t.untyped_storage().nbytes())


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
    gm, param_names, buffer_names = _trace(spec)
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


def _trace(spec: ModelSpec) -> tuple[fx.GraphModule, list[str], list[str]]:
    """`trace_step`, its failures said in one sentence naming the model."""
    try:
        return trace_step(spec)
    except ModelSpecError:
        raise
    except Exception as exc:  # the model's own error, or an operator tracing cannot handle
        raise ModelSpecError(
            f"the training step of model '{spec.model}' could not be traced: {type(exc).__name__}: "
            f"{_first_line(exc)}"
        ) from exc


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
                fresh += _nbytes(t)
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


# ---------------------------------------------------------------------- running


@dataclass
class State:
    """The real tensors of one training step: parameters, buffers, the batch; fixed for the whole run."""

    spec: ModelSpec
    device: torch.device
    parameters: dict[str, torch.Tensor]
    buffers: dict[str, torch.Tensor]
    inputs: torch.Tensor
    labels: torch.Tensor

    @classmethod
    def create(cls, spec: ModelSpec, device: torch.device) -> State:
        """Parameters as the model's initialisers set them after ``torch.manual_seed(spec.seed)``.

        Parameters
        ----------
        spec : ModelSpec
            The model and its batch.
        device : torch.device
            Where the tensors go.

        Returns
        -------
        State
        """
        step = build_step(spec)
        params = {k: p.detach().to(device).clone() for k, p in step.named_parameters()}
        buffers = {k: b.detach().to(device).clone() for k, b in step.named_buffers()}
        inputs, labels = make_batch(spec, device)
        return cls(spec, device, params, buffers, inputs, labels)

    @property
    def nbytes(self) -> int:
        """Bytes of every distinct storage the state holds: the fixed memory, measured."""
        seen: dict[StorageWeakRef, int] = {}
        for t in [*self.parameters.values(), *self.buffers.values(), self.inputs, self.labels]:
            seen[StorageWeakRef(t.untyped_storage())] = _nbytes(t)
        return sum(seen.values())


class ExecutionError(RuntimeError):
    """An operator failed when run on real tensors; the message names the node."""


class Executor:
    """Runs program nodes one at a time on real tensors: ``compute(i)`` and ``free(i)``.

    ``compute`` evaluates the node's operator on the values of its inputs
    (views and getitems are re-derived from their base values each time: they
    cost no memory) and keeps the result; ``free`` drops the reference to it,
    the last one, so the allocator gets the memory back. A gradient node copies
    its gradient out of a tuple; an update node writes into a buffer. A random
    node runs with the generators seeded by its key for training step ``step``
    (`remat_bench.torch.randomness.random_key`), so that every computation of
    it, first or recomputed, draws what eager autograd under
    `remat_bench.torch.randomness.seeded_random_ops` draws.
    """

    def __init__(self, program: Program, state: State, step: int = 0) -> None:
        self.program = program
        self.state = state
        self.step = step
        self.values: dict[int, Any] = {}
        self._placeholders: dict[str, torch.Tensor] = {}
        for name, (kind, key) in program.placeholders.items():
            if kind == "parameter":
                self._placeholders[name] = state.parameters[key]
            elif kind == "buffer":
                self._placeholders[name] = state.buffers[key]
            else:
                self._placeholders[name] = state.inputs if key == "inputs" else state.labels
        device = state.device
        # Device arguments (ones_like(..., device=cpu), arange) follow the replay's device.
        self._args = {
            n: fx.node.map_aggregate((n.args, n.kwargs), lambda a: device if isinstance(a, torch.device) else a)
            for n in program.gm.graph.nodes if n.op == "call_function"
        }
        # The storage bytes the graph counts for each output of an op node, as traced.
        self._counted = {
            i: [_nbytes(t) if isinstance(t, torch.Tensor) else None
                for t in pytree.tree_leaves(node.runs().meta.get("val"))]
            for i, node in enumerate(program.nodes) if node.role == OP
        }

    def _read(self, n: fx.Node, local: dict[fx.Node, Any]) -> Any:
        if n in local:
            return local[n]
        if n.op == "placeholder":
            return self._placeholders[n.name]
        if n.op == "get_attr":
            return getattr(self.program.gm, str(n.target)).to(self.state.device)
        base = self.program.base.get(n)
        if base is None or base not in self.values:
            name = self.program.nodes[base].id if base is not None else n.name
            raise RuntimeError(f"value '{name}' is read but not resident")
        return self.values[base]

    def _call(self, n: fx.Node, local: dict[fx.Node, Any]) -> Any:
        args, kwargs = fx.node.map_arg(self._args[n], lambda a: self._read(a, local))
        return n.target(*args, **kwargs)  # type: ignore[operator]  # call_function: a callable target

    def evaluate(self, n: fx.Node | None, aliases: tuple[fx.Node, ...]) -> Any:
        """The value of FX node ``n``, re-deriving ``aliases`` from resident values first.

        Parameters
        ----------
        n : fx.Node or None
            The value read (None: nothing to read).
        aliases : tuple of fx.Node
            The aliases it is derived through (`FxValues.alias_closure`), in graph order.

        Returns
        -------
        Any
            The tensor or tuple; None for ``n`` None.
        """
        if n is None:
            return None
        local: dict[fx.Node, Any] = {}
        for a in aliases:
            local[a] = self._call(a, local)
        return self._read(n, local)

    def compute(self, i: int) -> None:
        """Run node ``i`` on the resident values of its inputs and keep its value.

        Parameters
        ----------
        i : int
            The node's index.

        Raises
        ------
        ExecutionError
            The operator failed, or read a value that is not resident; the message names the node.
        """
        node = self.program.nodes[i]
        try:
            with torch.no_grad():
                if node.role == GRADIENT:
                    value = self.evaluate(node.fx, node.aliases)
                    self.values[i] = None if value is None else torch.clone(value)
                    return
                local: dict[fx.Node, Any] = {}
                for a in node.aliases:
                    local[a] = self._call(a, local)
                if node.random is None:
                    value = self._call(node.runs(), local)
                else:
                    key = random_key(self.program.spec.seed, self.step, node.random)
                    with seeded_generators(self.state.device, key):
                        value = self._call(node.runs(), local)
                self.values[i] = self._compact(i, value) if node.role == OP else value
        except Exception as exc:
            raise ExecutionError(f"node '{node.id}' ({node.fx.target if node.fx is not None else 'gradient'}) "
                                 f"failed on {self.state.device}: {exc}") from exc

    def _compact(self, i: int, value: Any) -> Any:
        """``value`` with every output held in no more storage than the graph counts for it.

        Some CPU kernels return a small result inside the larger buffer they
        computed it in: ``mse_loss`` returns its scalar in the storage of the
        elementwise squares, which would stay resident as long as the loss,
        while the fake tensors (and the graph) count 4 bytes. Such an output is
        copied out, and the buffer is freed at the end of the step: scratch
        memory of the operator, which `remat_bench.torch.calibrate.calibrate` measures into its
        workspace like any other.
        """
        leaves, tree = pytree.tree_flatten(value)
        counted = self._counted[i]
        oversized = [k for k, t in enumerate(leaves) if isinstance(t, torch.Tensor) and k < len(counted)
                     and (c := counted[k]) is not None and _nbytes(t) > c]
        if not oversized:
            return value
        for k in oversized:
            leaves[k] = leaves[k].clone()
        return pytree.tree_unflatten(leaves, tree)

    def free(self, i: int) -> None:
        """Drop node ``i``'s value, the last reference to it.

        Parameters
        ----------
        i : int
            The node's index; its value must be resident.
        """
        del self.values[i]

    def run(self, steps: Iterable[tuple[int, int]]) -> None:
        """Perform a schedule's steps in order: ``(COMPUTE, i)`` computes node i, any other kind frees it.

        Parameters
        ----------
        steps : iterable of (int, int)
            (kind, node index) pairs, as a `remat_bench.core.schedule.Schedule` holds them.

        Raises
        ------
        ExecutionError
            An operator that fails on the device.
        """
        for kind, i in steps:
            if kind == COMPUTE:
                self.compute(i)
            else:
                self.free(i)

    def results(self) -> tuple[torch.Tensor, dict[str, torch.Tensor | None]]:
        """The loss and every parameter's gradient, read from the resident outputs.

        Returns
        -------
        tuple of (torch.Tensor, dict)
            The loss, and parameter name -> gradient (None where the step gives none).
        """
        program = self.program
        with torch.no_grad():
            loss = self.evaluate(*program.loss_read)
            grads = {}
            for name, read in program.gradient_reads.items():
                i = program.gradients[name]
                grads[name] = self.values[i] if program.nodes[i].role == GRADIENT else self.evaluate(*read)
        return loss, grads


def reference_step(spec: ModelSpec, device: torch.device, step: int = 0
                   ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """A plain autograd training step: the loss and every parameter's gradient, for comparison.

    Random operators (dropout) draw what the program's random nodes draw in training step ``step``
    (`remat_bench.torch.randomness.seeded_random_ops`); the global random state is left as it was.

    Parameters
    ----------
    spec : ModelSpec
        The model, its parameters' seed and its batch.
    device : torch.device
        Where the step runs.
    step : int
        The training step whose random values are drawn.

    Returns
    -------
    tuple of (torch.Tensor, dict)
        The loss, and parameter name -> gradient (zeros for a parameter the loss does not use).
    """
    model = build_step(spec).to(device)
    inputs, labels = make_batch(spec, device)
    params = list(model.parameters())
    with seeded_random_ops(spec.seed, step, device):
        loss = model(inputs, labels)
        grads = torch.autograd.grad(loss, params, allow_unused=True)
    names = [k for k, _ in model.named_parameters()]
    return loss.detach(), {k: (torch.zeros_like(p) if g is None else g) for k, g, p in zip(names, grads, params)}
