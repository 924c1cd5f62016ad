"""The model spec: everything needed to rebuild a model, its batch and its loss (what an imported graph's
metadata keeps), resolved from one fake forward pass (`model_spec`); the training step (`build_step`) and
the batch (`make_batch`) it rebuilds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from remat_bench.torch import ecosystem
from remat_bench.torch.build import SharedFakeMode, build_model, fake_failures_unlogged, first_line, model_factory
from remat_bench.torch.zoo import TASKS, ZOO, ModelSpecError, TrainingStep, ecosystem_name


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


def integer_dtype(dtype: str) -> bool:
    """Whether a dtype name (``int64``, ``float32`` ...) is an integer one: inputs of it are ids in a range.

    Parameters
    ----------
    dtype : str
        One of `INPUT_DTYPES`.

    Returns
    -------
    bool
    """
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
    batch = 8 if batch is None else batch
    input_shape, task, input_dtype = _resolved_inputs(model, entry, batch, input_shape, task, input_dtype,
                                                      input_range)
    out = _fake_output(model, kwargs, batch, input_shape, input_dtype)
    if task == "auto":
        task = "classify" if out.dim() == 2 else "regress"
    if (task == "classify" and out.dim() != 2) or (task == "segment" and out.dim() < 3) or \
            (task == "language" and out.dim() != 3):
        raise ModelSpecError(f"task '{task}' needs an output of shape {TASK_OUTPUTS[task]}, but model "
                             f"'{model}' returns one of shape {tuple(out.shape)}")
    label_shape, label_range = _labels(task, out)
    if integer_dtype(input_dtype) and input_range is None:
        if task != "language":
            raise ModelSpecError(f"model '{model}' takes integer inputs ({input_dtype}): give the range of "
                                 "their values with --vocab N (e.g. the size of its embedding)")
        input_range = int(out.shape[2])  # a language model reads ids of the vocabulary it predicts
    return ModelSpec(model=model, batch=batch, input_shape=tuple(int(d) for d in input_shape), task=task,
                     kwargs=kwargs, input_dtype=input_dtype, input_range=input_range,
                     label_shape=tuple(int(d) for d in label_shape),
                     label_range=None if label_range is None else int(label_range), seed=seed)


def _resolved_inputs(model: str, entry: Any, batch: int, input_shape: tuple[int, ...] | None, task: str | None,
                     input_dtype: str | None, input_range: int | None) -> tuple[tuple[int, ...], str, str]:
    """The input shape, task and dtype `model_spec` was given or the zoo entry (``entry``, or None) gives;
    each refused in one sentence when it cannot be used, with the batch and the range of ids."""
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
    if input_range is not None and not integer_dtype(input_dtype):
        raise ModelSpecError(f"a range of input ids (--vocab {input_range}) needs integer inputs "
                             f"(--input-dtype int64), not {input_dtype}")
    if input_range is not None and input_range < 1:
        raise ModelSpecError(f"the range of input ids (--vocab) must be at least 1, not {input_range}")
    return tuple(input_shape), task, input_dtype


def _fake_output(model: str, kwargs: dict[str, Any], batch: int, input_shape: tuple[int, ...],
                 input_dtype: str) -> torch.Tensor:
    """The model's output on a batch of zeros, with fake tensors; one sentence when the model fails on it or
    does not return one floating-point tensor."""
    mode = SharedFakeMode()
    module = build_model(model, kwargs, input_shape, input_dtype, mode)
    with mode, fake_failures_unlogged():
        inputs = torch.zeros((batch, *input_shape), dtype=getattr(torch, input_dtype))
        try:
            out = module(inputs)
        except Exception as exc:  # the user's model rejects the shape: say so in one sentence
            hint = ""
            if not integer_dtype(input_dtype) and "indices" in str(exc):
                hint = ("; a model that takes token ids needs --input-dtype int64 (--task language "
                        "implies it)")
            raise ModelSpecError(
                f"model '{model}' fails on an input of shape {tuple(inputs.shape)} ({input_dtype}): "
                f"{type(exc).__name__}: {first_line(exc)}{hint}"
            ) from None
    if not isinstance(out, torch.Tensor) or not out.is_floating_point():
        raise ModelSpecError(f"model '{model}' must return one floating-point tensor (logits or predictions)")
    return out


def _labels(task: str, out: torch.Tensor) -> tuple[tuple[int, ...], int | None]:
    """The labels' shape and range of values (None: float labels, ``regress``) for the model's output."""
    if task == "classify":
        return (out.shape[0],), out.shape[1]
    if task == "segment":
        return (out.shape[0], *out.shape[2:]), out.shape[1]
    if task == "language":
        return tuple(out.shape[:2]), out.shape[2]
    return tuple(out.shape), None


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
    if integer_dtype(spec.input_dtype):
        inputs = torch.randint(0, spec.input_range or 2, shape, generator=gen, dtype=dtype)
    else:
        inputs = torch.randn(shape, generator=gen, dtype=dtype)
    if spec.label_range is None:
        labels = torch.randn(spec.label_shape, generator=gen)
    else:
        labels = torch.randint(0, spec.label_range, spec.label_shape, generator=gen)
    return inputs.to(device), labels.to(device)


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
