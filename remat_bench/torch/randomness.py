"""Random operators (dropout) that draw the same values in a traced step, its replay and eager autograd.

A rematerialization schedule may compute a random operator twice; both
computations must draw the same mask, and so must the plain autograd step the
replay is checked against. Here every random operator of a training step gets
its own key, so what it draws depends on nothing but the step's seed:

- the random operators of one step are numbered ``k = 0, 1, ...`` in the
  order they run, which is the order of the traced graph (make_fx records the
  operators in the order eager autograd runs them, forward then backward);
- operator ``k`` of step ``step`` of a model seeded with ``seed`` runs with the
  random generators of its device (and of the CPU) seeded with
  ``random_key(seed, step, k)``, inside `torch.random.fork_rng`, so the
  global random state is the same after it as before;
- `remat_bench.torch.executor.Executor` runs a random node that way on each
  computation, first or recomputed; `seeded_random_ops` runs an eager step
  that way: a dispatch mode that numbers the random operators as they run.
  A training loop passes each step's number to both.

Eager autograd and the traced graph must also run the same operator on the
same layout. The trace is functional: an in-place draw such as dropout's
``empty_like(x).bernoulli_(q)`` is traced as ``bernoulli.p`` (into a
contiguous tensor), while eager ``bernoulli_`` fills a transposed ``x`` in
memory order: another mask. `seeded_random_ops` therefore runs an in-place
random operator as functionalization does: its functional variant into a
fresh tensor, then a copy into the argument. And the graph is traced with the
CPU's choice of kernels: there ``dropout`` is ``bernoulli``, ``div`` and
``mul``, where CUDA runs a fused ``native_dropout`` with a random stream of its
own; on CUDA the mode runs ``native_dropout`` as the CPU composite and
attention as the math kernel (the CPU's choice when ``dropout_p > 0``). The
CUDA path is written, not tested: no GPU ran it.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten

# What a graph's metadata says of its random operators (``metadata.torch.random``).
SEEDING = ("operator k of a step runs with the generators of its device and the CPU seeded with "
           "random_key(seed, step, k), under fork_rng: every computation draws the same values "
           "(remat_bench.torch.randomness)")


def random_key(seed: int, step: int, k: int) -> int:
    """The seed of random operator ``k`` of training step ``step`` of a model seeded with ``seed``.

    A hash, so that neighbouring seeds, steps and operators get unrelated
    random streams (``seed + k`` would give operator 1 of seed 0 the stream of
    operator 0 of seed 1).

    Parameters
    ----------
    seed : int
        The model's seed (`remat_bench.torch.spec.ModelSpec.seed`).
    step : int
        The training step (0 for the one step an imported graph models).
    k : int
        The operator's position among the step's random operators, in the order they run.

    Returns
    -------
    int
        In ``[0, 2**63)``, a seed any torch generator takes.
    """
    digest = hashlib.blake2b(f"remat-bench {seed} {step} {k}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def is_random_call(op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether calling ``op`` on these arguments draws random numbers.

    An operator tagged ``nondeterministic_seeded`` does, except attention whose ``dropout_p`` is 0.

    Parameters
    ----------
    op : Any
        An aten operator overload (anything else is not random).
    args : tuple
        Its positional arguments, in the order of its schema.
    kwargs : dict
        Its keyword arguments.

    Returns
    -------
    bool
    """
    if torch.Tag.nondeterministic_seeded not in getattr(op, "tags", ()):
        return False
    for k, arg in enumerate(op._schema.arguments):
        if arg.name == "dropout_p":
            value = args[k] if k < len(args) else kwargs.get("dropout_p", arg.default_value)
            return bool(value != 0.0)
    return True


def cuda_indices(device: torch.device) -> list[int]:
    """The CUDA devices whose generator a random operator on ``device`` draws from: none on the CPU.

    Parameters
    ----------
    device : torch.device
        Where the operator runs.

    Returns
    -------
    list of int
        ``[index]`` for a CUDA device (the current one when it has no index), else empty.
    """
    if device.type != "cuda":
        return []
    return [device.index if device.index is not None else torch.cuda.current_device()]


@contextlib.contextmanager
def seeded_generators(device: torch.device, key: int) -> Iterator[None]:
    """Seed the CPU generator and ``device``'s with ``key`` for the block; their states come back after it.

    Parameters
    ----------
    device : torch.device
        Where the random operator runs.
    key : int
        The seed (`random_key`).

    Yields
    ------
    None
    """
    cuda = cuda_indices(device)
    with torch.random.fork_rng(devices=cuda):
        torch.default_generator.manual_seed(key)
        for index in cuda:
            torch.cuda.default_generators[index].manual_seed(key)
        yield


def _device_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.device:
    """The device of an operator's first tensor argument, else of its ``device`` keyword, else the CPU."""
    for leaf in pytree.tree_leaves((args, kwargs)):
        if isinstance(leaf, torch.Tensor):
            return leaf.device
    device = kwargs.get("device")
    return torch.device(device) if device is not None else torch.device("cpu")


def _mutates(op: Any) -> bool:
    return any(arg.alias_info is not None and arg.alias_info.is_write for arg in op._schema.arguments)


def _functional_variant(op: Any) -> Any:
    """The functional overload that functionalization traces an in-place operator writing into its
    first argument as (``bernoulli_.float`` -> ``bernoulli.p``): same name without the underscore,
    same arguments; None when there is none."""
    schema = op._schema
    arguments = schema.arguments
    if not arguments or arguments[0].alias_info is None or not arguments[0].alias_info.is_write:
        return None
    packet = getattr(aten, schema.name.partition("::")[2].rstrip("_"), None)
    want = [(a.name, str(a.type)) for a in arguments]
    for name in packet.overloads() if packet is not None else ():
        candidate = getattr(packet, name)
        if not _mutates(candidate) and [(a.name, str(a.type)) for a in candidate._schema.arguments] == want:
            return candidate
    return None


def fused_dropout_device(device: torch.device) -> bool:
    """Whether eager ``dropout`` on ``device`` runs the fused ``native_dropout`` (CUDA) where the CPU,
    which the graph is traced with, runs ``bernoulli``, ``div`` and ``mul``.

    Parameters
    ----------
    device : torch.device
        Where the step runs.

    Returns
    -------
    bool
    """
    return device.type != "cpu"


def dropout_as_traced(x: torch.Tensor, p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``native_dropout(x, p, train=True)`` computed as the CPU trace computes dropout: the same mask
    and output for the same generator state.

    Parameters
    ----------
    x : torch.Tensor
        The input.
    p : float
        The probability of zeroing an element.

    Returns
    -------
    tuple of (torch.Tensor, torch.Tensor)
        The output and the boolean mask of kept elements (what ``native_dropout`` returns; its
        backward multiplies by the mask and ``1 / (1 - p)``).
    """
    noise = aten.bernoulli.p(torch.empty_like(x), 1 - p)
    output = x * noise.div(1 - p)
    return output, noise.bool()


class _SeededRandomOps(TorchDispatchMode):
    """Numbers the random operators as they run and runs operator k under `random_key`'s seed."""

    def __init__(self, seed: int, step: int) -> None:
        super().__init__()
        self.seed, self.step, self.count = seed, step, 0

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if not is_random_call(func, args, kwargs):
            return func(*args, **kwargs)
        k, self.count = self.count, self.count + 1
        device = _device_of(args, kwargs)
        with seeded_generators(device, random_key(self.seed, self.step, k)):
            if func is aten.native_dropout.default and fused_dropout_device(device) and args[2]:
                return dropout_as_traced(args[0], args[1])
            functional = _functional_variant(func)
            if functional is None:
                return func(*args, **kwargs)
            # As the functional trace runs it: drawn into a fresh tensor, then copied into the argument.
            return args[0].copy_(functional(*args, **kwargs))


class _SeededCompiledOps(_SeededRandomOps):
    """`_SeededRandomOps` for a ``torch.compile``d step: off while dynamo and inductor compile, on while
    the compiled code runs, where inductor's ``fallback_random`` kernels call ATen's random operators."""

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        return True


@contextlib.contextmanager
def seeded_random_ops(seed: int, step: int = 0, device: torch.device | str = "cpu",
                      compiled: bool = False) -> Iterator[None]:
    """Run an eager training step with the random values its traced graph draws (module docstring).

    Every random operator run in the block (forward and backward) is numbered
    from 0 and seeded with ``random_key(seed, step, k)``; in-place ones run as
    their functional trace does. On a device other than the CPU, attention
    runs its math kernel and ``native_dropout`` the CPU's composite, as the
    graph was traced. The global random state is the same after the block as
    before it.

    Parameters
    ----------
    seed : int
        The model's seed.
    step : int
        The training step: each step of a training loop draws new masks.
    device : torch.device or str
        Where the step runs.
    compiled : bool
        The block calls a ``torch.compile``d step (`remat_bench.torch.compiled`, "Randomness"): the
        mode stays out of the compilation, which an active mode would otherwise turn back to eager
        PyTorch, and numbers the random operators the compiled code runs.

    Yields
    ------
    None
    """
    with contextlib.ExitStack() as stack:
        if fused_dropout_device(torch.device(device)):
            from torch.nn.attention import SDPBackend, sdpa_kernel

            stack.enter_context(sdpa_kernel([SDPBackend.MATH]))
        stack.enter_context((_SeededCompiledOps if compiled else _SeededRandomOps)(seed, step))
        yield
