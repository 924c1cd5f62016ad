"""Building a model by name, with real tensors or with the fake tensors of a mode.

A name resolves to what builds it (`model_factory`): a zoo entry or a user's
``package.module:factory`` (`remat_bench.torch.zoo.load_factory`), or an
ecosystem model (`remat_bench.torch.ecosystem.factory`). `build_model` calls it
and materializes lazy modules (``nn.LazyLinear`` ...), whose uninitialized
parameters cannot be fake tensors: such a model is built with real tensors and
copied into the mode. `SharedFakeMode` is the mode models are built and traced
in.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import warnings
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeCopyMode, FakeTensorMode, unset_fake_temporarily
from torch.nn.modules.lazy import LazyModuleMixin

from remat_bench.torch import ecosystem, logger_quiet
from remat_bench.torch.zoo import ModelSpecError, ecosystem_name, load_factory


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


def fake_failures_unlogged() -> contextlib.AbstractContextManager[None]:
    """Keep FakeTensorMode from logging an operator that fails on fake tensors, traceback and all.

    It logs every failing meta kernel at ERROR (18 lines for a wrong
    ``--input-shape``) and then raises, and the caller says the error in one
    sentence. A user who asks torch for its logs (TORCH_LOGS ...) still gets it.

    Returns
    -------
    contextmanager
        Around the fake-tensor work.
    """
    return logger_quiet("torch._subclasses.fake_tensor", logging.CRITICAL)


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
            f"an input of shape {tuple(sample.shape)} ({input_dtype}): {type(exc).__name__}: {first_line(exc)}"
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


def _built(model: str, kwargs: dict[str, Any]) -> nn.Module:
    """What ``model``'s factory (`model_factory`) builds from ``kwargs``; its own errors become one sentence.

    Raises
    ------
    ModelSpecError
        A factory that may not be called, one that raises (the cause chained), or one that returns something
        else than an ``nn.Module``.
    """
    factory = model_factory(model)
    try:
        module = factory(**kwargs)
    except TypeError as exc:
        raise ModelSpecError(f"model '{model}' cannot be built with {kwargs}: {exc}") from exc
    except Exception as exc:  # chained: `build_model` tells a lazy module's failure under fake tensors by it
        raise ModelSpecError(f"model '{model}' cannot be built with {kwargs}: {type(exc).__name__}: "
                             f"{first_line(exc)}") from exc
    if not isinstance(module, nn.Module):
        raise ModelSpecError(f"model '{model}': the factory returned {type(module).__name__}, not an nn.Module")
    return module


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
        module = _built(model, kwargs)
        _materialize_lazy(module, model, input_shape, input_dtype)
        return module
    try:
        with fake_mode, _building_fake():
            return _built(model, kwargs)
    except ModelSpecError as exc:
        if not _from_lazy_module(exc.__cause__):
            raise
    # A lazy module's uninitialized parameter cannot be a fake tensor: build the model with real
    # tensors (its parameters and one sample's activations), materialize it, copy it into the mode.
    with unset_fake_temporarily():
        module = _built(model, kwargs)
        _materialize_lazy(module, model, input_shape, input_dtype)
    with FakeCopyMode(fake_mode):
        return copy.deepcopy(module)


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message, for an error said in one sentence.

    Parameters
    ----------
    exc : BaseException
        The exception.

    Returns
    -------
    str
        Empty for an exception without a message.
    """
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""
