"""Tracing one training step (forward, loss, backward) into one joint aten graph, with fake tensors.

The step is traced by ``make_fx(functionalize(step), tracing_mode="fake")``,
where ``step`` is ``torch.func.grad_and_value`` over
``torch.func.functional_call`` of the model and its loss. Every tensor is a
FakeTensor: shapes, dtypes and storages are known, no memory is allocated, so
any batch size traces. Functionalization replaces in-place operators on
intermediate values with out-of-place ones (mutations of buffers, such as
batchnorm's step counter, become ``copy_`` nodes at the end). Autograd hooks put
each backward operator's autograd sequence number in its node's metadata
(``seq_nr``), which is how a backward node finds the forward node it
differentiates. make_fx also records the stack of modules whose ``forward`` ran
each forward operator (``nn_module_stack``): the innermost one becomes the
node's ``module`` metadata. `remat_bench.torch.program` lowers the graph to
remat-bench nodes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.fx.traceback as fx_traceback
from torch import fx
from torch.func import functional_call, functionalize, grad_and_value
from torch.fx.experimental.proxy_tensor import make_fx

from remat_bench.torch.build import SharedFakeMode, fake_failures_unlogged, first_line
from remat_bench.torch.spec import ModelSpec, build_step, fake_batch
from remat_bench.torch.zoo import ModelSpecError


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

    Raises
    ------
    ModelSpecError
        A model that cannot be built or traced: its own error, or an operator tracing cannot handle, said in
        one sentence naming the model.
    """
    try:
        return _traced(spec)
    except ModelSpecError:
        raise
    except Exception as exc:  # the model's own error, or an operator tracing cannot handle
        raise ModelSpecError(
            f"the training step of model '{spec.model}' could not be traced: {type(exc).__name__}: "
            f"{first_line(exc)}"
        ) from exc


def _traced(spec: ModelSpec) -> tuple[fx.GraphModule, list[str], list[str]]:
    """`trace_step`, its failures raised as they come."""
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
    with fx_traceback.preserve_node_meta(), fake_failures_unlogged(), _no_stack_traces():
        gm = make_fx(traced, tracing_mode="fake", record_module_stack=True)(
            list(params.values()), list(buffers.values()), inputs, labels)
    return gm, names, buffer_names
